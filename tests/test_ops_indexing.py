"""Integer and bool tensors at run time, and the indexing/selection ops: Cast, comparisons, logic, Where,
integer arithmetic, Gather*, Scatter*, TopK, ArgMax/ArgMin, CumSum, Hardmax, OneHot.

Every case compares with onnxruntime: integer and bool outputs exactly (same dtype, same values), float
outputs within 1e-5 relative. Most cases run on the host; the multi-op models at the end of each
section (`QEMU` targets) run on AArch64 Linux and a bare-metal Cortex-M4 too, so the qemu count stays
small while every op is covered there.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import oracle
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.errors import UnsupportedOpError

QEMU = ["host", pytest.param("aarch64", marks=pytest.mark.qemu),
        pytest.param("cortex-m4", marks=pytest.mark.qemu)]
T = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32,
     "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "bool": TensorProto.BOOL}
RNG = np.random.default_rng(7)


def typed_model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = 17) -> onnx.ModelProto:
    """A model from nodes; inputs and outputs map names to (dtype, shape), a shape of None is inferred."""
    graph = helper.make_graph(
        nodes, "indexing",
        [helper.make_tensor_value_info(n, T[d], list(s)) for n, (d, s) in inputs.items()],
        [helper.make_tensor_value_info(n, T[d], None if s is None else list(s)) for n, (d, s) in outputs.items()],
        initializer=[numpy_helper.from_array(np.asarray(a), name=n) for n, a in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="aot-tests")
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out, inf in zip(model.graph.output, inferred.graph.output):
        if not out.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(inf.type)
    onnx.checker.check_model(model, full_check=True)
    return model


def check(model: onnx.ModelProto, feeds: dict, target: str = "host", tol: float = 1e-5) -> dict:
    """aot vs onnxruntime: exact for integer and bool outputs, relative `tol` for float ones."""
    expected = oracle.onnxruntime_outputs(model, feeds)
    got = aot.run(model, inputs={k: np.array(v, copy=True) for k, v in feeds.items()}, target=target)
    for name, want in expected.items():
        out = got[name]
        assert out.dtype == want.dtype and out.shape == want.shape, \
            f"{name}: aot {out.dtype}{list(out.shape)}, onnxruntime {want.dtype}{list(want.shape)}"
        if want.dtype == np.float32:
            scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-6)
            err = float(np.max(np.abs(out.astype(np.float64) - want))) if want.size else 0.0
            assert err <= tol * scale, f"{name}: max abs error {err:.3g} (scale {scale:.3g})"
        else:
            np.testing.assert_array_equal(out, want, err_msg=name)
    return got


def node(op: str, inputs, outputs, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op}_{outputs[0]}", **attrs)


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ints(lo: int, hi: int, shape, dtype=np.int64) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)


# --------------------------------------------------------------------------- comparisons, logic, Where

COMPARISONS = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("op", COMPARISONS)
def test_compare_broadcast(op, dtype):
    """Operands (2,3,17) and (3,1): vector body and scalar tail; ties present so <= and == matter."""
    x = RNG.integers(0, 6, (2, 3, 17)).astype(dtype)
    y = RNG.integers(0, 6, (3, 1)).astype(dtype)
    if dtype in ("int8", "int32", "int64", "float32"):
        x, y = x - 3, y - 3
    if dtype == "uint8":
        x[0, 0, :3] = (200, 255, 128)      # beyond int8: compared as unsigned
    model = typed_model([node(op, ["x", "y"], ["z"])], {"x": (dtype, x.shape), "y": (dtype, y.shape)},
                        {"z": ("bool", None)})
    check(model, {"x": x, "y": y})


def test_equal_bool():
    a, b = RNG.random((4, 9)) < 0.5, RNG.random((9,)) < 0.5
    model = typed_model([node("Equal", ["a", "b"], ["z"])], {"a": ("bool", a.shape), "b": ("bool", b.shape)},
                        {"z": ("bool", None)})
    check(model, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_broadcast(op):
    a, b = RNG.random((3, 1, 19)) < 0.5, RNG.random((4, 1)) < 0.5
    model = typed_model([node(op, ["a", "b"], ["z"])], {"a": ("bool", a.shape), "b": ("bool", b.shape)},
                        {"z": ("bool", None)})
    check(model, {"a": a, "b": b})


def test_not():
    a = RNG.random((5, 7)) < 0.5
    check(typed_model([node("Not", ["a"], ["z"])], {"a": ("bool", a.shape)}, {"z": ("bool", None)}), {"a": a})


def _specials(shape) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(np.float32)
    x.flat[::5], x.flat[1::7], x.flat[2::9], x.flat[3::11] = np.nan, np.inf, -np.inf, 3e38
    return x


@pytest.mark.parametrize("op, attrs", [("IsNaN", {}), ("IsInf", {}), ("IsInf", {"detect_negative": 0}),
                                       ("IsInf", {"detect_positive": 0}),
                                       ("IsInf", {"detect_positive": 0, "detect_negative": 0})])
@pytest.mark.parametrize("target", QEMU)
def test_isnan_and_isinf(op, attrs, target):
    """NaN, both infinities and the largest finite floats among ordinary values, on vector and scalar tails."""
    x = _specials((3, 37))
    check(typed_model([node(op, ["x"], ["z"], **attrs)], {"x": ("float32", x.shape)}, {"z": ("bool", None)},
                      opset=20), {"x": x}, target)


@pytest.mark.parametrize("shape, upper, k, dtype", [((4, 5), 1, None, "float32"), ((2, 3, 6, 4), 0, -1, "float32"),
                                                  ((5, 5), 1, 2, "int64"), ((3, 7), 0, 3, "float32"),
                                                  ((4, 4), 1, 9, "float32")])
def test_trilu(shape, upper, k, dtype):
    """torch.triu/tril as exported: upper and lower, the diagonal moved either way and past the matrix."""
    x = RNG.standard_normal(shape).astype(np.float32) if dtype == "float32" else RNG.integers(-9, 9, shape)
    inputs, inits = (["x", "k"], {"k": np.array(k, np.int64)}) if k is not None else (["x"], {})
    check(typed_model([node("Trilu", inputs, ["z"], upper=upper)], {"x": (dtype, shape)}, {"z": (dtype, None)},
                      inits), {"x": x})


def test_masked_attention_as_pytorch_exports_it():
    """Scaled-dot-product attention with a padding mask as torch.onnx exports it: a fully masked row's
    Softmax is NaN, and IsNaN -> Where sets it to 0 before the product with V."""
    q, k, v = (RNG.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    mask = np.zeros((1, 1, 5, 5), np.float32)
    mask[..., 1:] = -np.inf                                # keys 1.. masked
    mask[..., 3, :] = -np.inf                              # query 3 sees nothing: its row is NaN
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Mul", ["s", "scale"], ["ss"]), node("Add", ["ss", "mask"], ["sm"]),
             node("Softmax", ["sm"], ["p"], axis=-1), node("IsNaN", ["p"], ["bad"]),
             node("Where", ["bad", "zero", "p"], ["pz"]), node("MatMul", ["pz", "v"], ["y"])]
    model = typed_model(nodes, {"q": ("float32", q.shape), "k": ("float32", k.shape), "v": ("float32", v.shape)},
                        {"y": ("float32", None)},
                        {"scale": np.array(8 ** -0.5, np.float32), "mask": mask, "zero": np.array(0.0, np.float32)})
    got = check(model, {"q": q, "k": k, "v": v})
    assert np.all(got["y"][0, :, 3] == 0) and np.all(np.isfinite(got["y"]))


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "uint8", "int8"])
def test_where_broadcast_all_three(dtype):
    """Condition (2,1,9), x (3,1), y (1,) constant: every operand broadcast along some axis."""
    cond = RNG.random((2, 1, 9)) < 0.5
    x = RNG.integers(0, 100, (3, 1)).astype(dtype)
    y = np.asarray([1], dtype=dtype)
    model = typed_model([node("Where", ["c", "x", "y"], ["z"])], {"c": ("bool", cond.shape), "x": (dtype, x.shape)},
                        {"z": (dtype, None)}, {"y": y})
    check(model, {"c": cond, "x": x})


def test_where_scalar_arms_vector_condition():
    """Both arms broadcast scalars against a vector condition (the select is splatted)."""
    cond = RNG.random((37,)) < 0.5
    model = typed_model([node("Where", ["c", "x", "y"], ["z"])], {"c": ("bool", cond.shape)}, {"z": ("float32", None)},
                        {"x": np.float32(2.5), "y": np.float32(-1.0)})
    check(model, {"c": cond})


# --------------------------------------------------------------------------- Cast

CAST_VALUES = {
    "float32": np.array([0, 1, -1, 2.7, -2.7, 0.5, -0.5, 100.9, -100.9, 127, -128, 3e4], np.float32),
    "int64": np.array([0, 1, -1, 127, -128, 255, 256, 300, -300, 70000, 2**40 + 5, -(2**33)], np.int64),
    "int32": np.array([0, 1, -1, 127, -128, 255, 256, 300, -300, 70000, 2**30, -(2**31)], np.int32),
    "int8": np.array([0, 1, -1, 127, -128, 5, -5, 64, -64, 100, -100, 3], np.int8),
    "uint8": np.array([0, 1, 2, 127, 128, 200, 255, 64, 3, 100, 17, 9], np.uint8),
    "bool": np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0], np.bool_),
}


@pytest.mark.parametrize("src", list(CAST_VALUES))
def test_cast_all_directions(src):
    """One input cast to each other type; narrowing integers wrap, float to integer truncates toward zero.
    Floats stay inside every integer type's range (and are made non-negative for uint8): beyond it C,
    and so onnxruntime, is undefined (aot saturates, tested below)."""
    x = CAST_VALUES[src]
    if src == "float32":
        x = x[:6]
    dsts = [dst for dst in T if dst != src]
    nodes, outputs = [], {}
    for dst in dsts:
        source = "x"
        if src == "float32" and dst == "uint8":
            nodes.append(node("Abs", ["x"], ["ax"]))
            source = "ax"
        nodes.append(node("Cast", [source], [f"to_{dst}"], to=T[dst]))
        outputs[f"to_{dst}"] = (dst, None)
    check(typed_model(nodes, {"x": (src, x.shape)}, outputs), {"x": x})


def test_cast_like_and_identity_cast():
    x = CAST_VALUES["int64"][:5]
    model = typed_model([node("CastLike", ["x", "like"], ["f"]), node("Cast", ["x"], ["same"], to=T["int64"])],
                        {"x": ("int64", x.shape)}, {"f": ("float32", None), "same": ("int64", None)},
                        {"like": np.zeros(1, np.float32)})
    check(model, {"x": x})


def test_cast_float_to_int_saturates():
    """Out of range (ONNX: undefined) aot saturates, and NaN gives 0: documented, never poison."""
    x = np.array([3e9, -3e9, 300.0, -300.0, np.nan, np.inf, -np.inf, 1.9], np.float32)
    outputs = {f"to_{d}": (d, None) for d in ("int32", "int8", "uint8")}
    model = typed_model([node("Cast", ["x"], [f"to_{d}"], to=T[d]) for d in ("int32", "int8", "uint8")],
                        {"x": ("float32", x.shape)}, outputs)
    got = aot.run(model, inputs={"x": x})
    np.testing.assert_array_equal(got["to_int32"], [2**31 - 1, -(2**31), 300, -300, 0, 2**31 - 1, -(2**31), 1])
    np.testing.assert_array_equal(got["to_int8"], [127, -128, 127, -128, 0, 127, -128, 1])
    np.testing.assert_array_equal(got["to_uint8"], [255, 0, 255, 0, 0, 255, 0, 1])


# --------------------------------------------------------------------------- integer arithmetic

@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_integer_binary(op, dtype):
    """Broadcast (3,17) with (17,); Div truncates toward zero for mixed signs."""
    a = ints(-50, 50, (3, 17), dtype)
    b = ints(-7, 8, (17,), dtype)
    b[b == 0] = 3
    model = typed_model([node(op, ["a", "b"], ["z"])], {"a": (dtype, a.shape), "b": (dtype, b.shape)},
                        {"z": (dtype, None)})
    check(model, {"a": a, "b": b})


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_integer_mod(dtype, fmod):
    """fmod=0: the divisor's sign; fmod=1: the dividend's; every sign combination."""
    a = np.array([[7, -7, 7, -7, 0, 13, -13, 1, 6]], dtype)
    b = np.array([3, 3, -3, -3, 5, 4, 4, -1, 6], dtype)
    model = typed_model([node("Mod", ["a", "b"], ["z"], fmod=fmod)], {"a": (dtype, a.shape), "b": (dtype, b.shape)},
                        {"z": (dtype, None)})
    check(model, {"a": a, "b": b})


@pytest.mark.parametrize("op, dtype", [("Neg", "int64"), ("Abs", "int64"), ("Neg", "int32"), ("Abs", "int32"),
                                       ("Relu", "int32")])
def test_integer_unary(op, dtype):
    a = ints(-1000, 1000, (4, 11), dtype)
    check(typed_model([node(op, ["a"], ["z"])], {"a": (dtype, a.shape)}, {"z": (dtype, None)}), {"a": a})


def test_integer_division_by_zero_does_not_trap():
    """ONNX leaves x / 0 undefined and x86 faults on it: aot gives 0 (Div) and x (Mod), MIN / -1 wraps."""
    a = np.array([7, -7, 0, -(2**31), -(2**31), 5], np.int32)
    b = np.array([0, 0, 0, -1, -1, 2], np.int32)
    model = typed_model([node("Div", ["a", "b"], ["q"]), node("Mod", ["a", "b"], ["r"], fmod=1)],
                        {"a": ("int32", a.shape), "b": ("int32", b.shape)},
                        {"q": ("int32", None), "r": ("int32", None)})
    got = aot.run(model, inputs={"a": a, "b": b})
    np.testing.assert_array_equal(got["q"], [0, 0, 0, -(2**31), -(2**31), 2])
    np.testing.assert_array_equal(got["r"], [7, -7, 0, 0, 0, 1])


@pytest.mark.parametrize("target", QEMU)
def test_integer_and_logic_model(target):
    """One model with every elementwise op of this family, on every target: comparisons, logic, Where,
    Cast in several directions, integer arithmetic (vector body and tail: 19 elements)."""
    x = randn(2, 19) * 4
    n = ints(-9, 10, (2, 19))
    d = ints(1, 6, (19,)) * np.where(RNG.random(19) < 0.5, -1, 1)
    nodes = [
        node("Cast", ["x"], ["xi"], to=T["int64"]),             # truncation toward zero
        node("Add", ["xi", "n"], ["s"]), node("Mul", ["s", "d"], ["m"]), node("Sub", ["m", "n"], ["m2"]),
        node("Div", ["m2", "d"], ["q"]), node("Mod", ["m2", "d"], ["r"]),
        node("Max", ["q", "r"], ["mx"]), node("Min", ["q", "r"], ["mn"]), node("Neg", ["mn"], ["ng"]),
        node("Abs", ["ng"], ["ab"]),
        node("Cast", ["ab"], ["ab32"], to=T["int32"]), node("Cast", ["ab32"], ["abf"], to=T["float32"]),
        node("Equal", ["q", "r"], ["eq"]), node("Less", ["x", "abf"], ["lt"]), node("Greater", ["xi", "n"], ["gt"]),
        node("LessOrEqual", ["mx", "n"], ["le"]), node("GreaterOrEqual", ["x", "abf"], ["ge"]),
        node("And", ["lt", "gt"], ["and"]), node("Or", ["le", "ge"], ["or"]), node("Xor", ["and", "or"], ["xor"]),
        node("Not", ["xor"], ["not"]), node("Where", ["not", "x", "abf"], ["w"]),
        node("Cast", ["eq"], ["eqf"], to=T["float32"]), node("Cast", ["x"], ["b"], to=T["bool"]),
    ]
    outputs = {"q": ("int64", None), "mx": ("int64", None), "ab32": ("int32", None), "xor": ("bool", None),
               "w": ("float32", None), "eqf": ("float32", None), "b": ("bool", None)}
    model = typed_model(nodes, {"x": ("float32", x.shape), "n": ("int64", n.shape), "d": ("int64", d.shape)},
                        outputs)
    check(model, {"x": x, "n": n, "d": d}, target)


# --------------------------------------------------------------------------- gathers and scatters

@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("indices_dtype", ["int64", "int32"])
def test_gather_computed_indices(axis, indices_dtype):
    """Indices given at run time, negatives included; the trailing slice (9 floats) is copied as vectors."""
    x = randn(3, 4, 9)
    n = x.shape[axis]
    i = ints(-n, n, (2, 3), indices_dtype)
    model = typed_model([node("Gather", ["x", "i"], ["y"], axis=axis)],
                        {"x": ("float32", x.shape), "i": (indices_dtype, i.shape)}, {"y": ("float32", None)})
    check(model, {"x": x, "i": i})


def test_gather_scalar_and_constant_indices_int_data():
    x = ints(-100, 100, (5, 6))
    model = typed_model([node("Gather", ["x", "k"], ["row"], axis=0), node("Gather", ["x", "c"], ["cols"], axis=1)],
                        {"x": ("int64", x.shape)}, {"row": ("int64", None), "cols": ("int64", None)},
                        {"k": np.array(-2, np.int64), "c": np.array([[5, -6], [0, 3]], np.int64)})
    check(model, {"x": x})


def test_gather_embedding_lookup():
    """Constant table, computed token ids: the classic embedding."""
    table = randn(50, 16)
    ids = ints(0, 50, (1, 7))
    model = typed_model([node("Gather", ["table", "ids"], ["emb"])], {"ids": ("int64", ids.shape)},
                        {"emb": ("float32", None)}, {"table": table})
    check(model, {"ids": ids})


def test_gather_out_of_range_indices_clamp():
    """onnxruntime rejects them; aot never reads outside the buffer: wrap once, then clamp to the ends."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([100, -100, 3, -4, -5, 2**40], np.int64)
    model = typed_model([node("Gather", ["x", "i"], ["y"]), node("GatherElements", ["x", "j"], ["e"], axis=1)],
                        {"x": ("float32", x.shape), "i": ("int64", i.shape), "j": ("int64", (4, 1))},
                        {"y": ("float32", None), "e": ("float32", None)})
    got = aot.run(model, inputs={"x": x, "i": i, "j": np.array([[7], [-7], [-1], [1]], np.int64)})
    np.testing.assert_array_equal(got["y"], x[[3, 0, 3, 0, 0, 3]])
    np.testing.assert_array_equal(got["e"][:, 0], [2, 3, 8, 10])


def test_indices_into_empty_data_read_and_write_nothing(tmp_path):
    """Every index is out of range of an empty axis and there is no end to clamp to: gathers give 0,
    scatters update nothing, and no kernel reads the empty data (embedded as a constant, `..._c<n>`)."""
    model = typed_model([node("Gather", ["x", "i"], ["g"]), node("GatherElements", ["x", "j"], ["e"]),
                         node("GatherND", ["x", "k"], ["n"]), node("ScatterElements", ["z", "m", "u"], ["s"])],
                        {"x": ("float32", (0, 3)), "i": ("int64", (2,)), "j": ("int64", (1, 3)),
                         "k": ("int64", (2, 1)), "z": ("float32", (3, 0)), "m": ("int64", (1, 2)),
                         "u": ("float32", (1, 2))},
                        {"g": ("float32", (2, 3)), "e": ("float32", (1, 3)), "n": ("float32", (2, 3)),
                         "s": ("float32", None)})
    aot.build(model, target="host", out_dir=tmp_path, name="m", emit="kir")
    assert not re.search(r"_c\d+\[", (tmp_path / "m.kir.txt").read_text())
    got = aot.run(model, inputs={"x": np.zeros((0, 3), np.float32), "i": np.array([0, 5]),
                                 "j": np.array([[1, -1, 0]]), "k": np.array([[2], [-1]]),
                                 "z": np.zeros((3, 0), np.float32), "m": np.array([[1, 2]]),
                                 "u": np.ones((1, 2), np.float32)}, target="host")
    for name, shape in (("g", (2, 3)), ("e", (1, 3)), ("n", (2, 3))):
        np.testing.assert_array_equal(got[name], np.zeros(shape, np.float32))
    assert got["s"].shape == (3, 0)


def test_constant_index_out_of_range_is_refused(tmp_path):
    model = typed_model([node("Gather", ["x", "c"], ["y"])], {"x": ("float32", (3, 2))}, {"y": ("float32", None)},
                        {"c": np.array([0, 3], np.int64)})
    with pytest.raises(UnsupportedOpError, match=r"Gather_y.*constant index 3 is out of range"):
        aot.build(model, target="host", out_dir=tmp_path)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements(axis):
    x = randn(3, 4, 5)
    shape = list(x.shape)
    shape[axis] = 2
    i = ints(-x.shape[axis], x.shape[axis], shape)
    model = typed_model([node("GatherElements", ["x", "i"], ["y"], axis=axis)],
                        {"x": ("float32", x.shape), "i": ("int64", i.shape)}, {"y": ("float32", None)})
    check(model, {"x": x, "i": i})


@pytest.mark.parametrize("case", ["elements", "slices", "batch1"])
def test_gather_nd(case):
    x = randn(4, 5, 6)
    if case == "elements":        # full index tuples: one element each
        i, batch_dims = np.stack([ints(-4, 4, (3, 2)), ints(0, 5, (3, 2)), ints(-6, 6, (3, 2))], -1), 0
    elif case == "slices":        # a prefix: rows of 6
        i, batch_dims = np.stack([ints(0, 4, (2, 3)), ints(-5, 5, (2, 3))], -1), 0
    else:
        i, batch_dims = ints(0, 5, (4, 3, 1)), 1
    model = typed_model([node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
                        {"x": ("float32", x.shape), "i": ("int64", i.shape)}, {"y": ("float32", None)})
    check(model, {"x": x, "i": i})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    """Rows of 9 (vector body and tail); duplicate indices accumulate for the reductions."""
    x = randn(5, 3, 9)
    i = np.array([[0, 1], [4, -1], [2, 0]] if reduction == "none" else [[0, 1], [4, -1], [0, 1]], np.int64)
    u = randn(3, 9)
    model = typed_model([node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
                        {"x": ("float32", x.shape), "i": ("int64", i.shape), "u": ("float32", u.shape)},
                        {"y": ("float32", None)}, opset=18)
    check(model, {"x": x, "i": i, "u": u})


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(axis, reduction):
    x = randn(4, 5, 3)
    n = x.shape[axis]
    shape = [3, 4, 2]
    i = np.moveaxis(np.argsort(RNG.random(np.moveaxis(np.empty(shape), axis, -1).shape[:-1] + (n,)), -1), -1, axis)
    i = np.take(i, range(shape[axis]), axis=axis).astype(np.int64)     # distinct along the axis
    i[i == 1] -= n                                                      # some negative
    u = randn(*i.shape)
    model = typed_model([node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction)],
                        {"x": ("float32", x.shape), "i": ("int64", i.shape), "u": ("float32", u.shape)},
                        {"y": ("float32", None)}, opset=16)
    check(model, {"x": x, "i": i, "u": u})


def test_scatter_nd_into_constant_int_data():
    data = np.zeros((6,), np.int64)
    model = typed_model([node("ScatterND", ["data", "i", "u"], ["y"], reduction="add")],
                        {"i": ("int64", (4, 1)), "u": ("int64", (4,))}, {"y": ("int64", None)}, {"data": data},
                        opset=16)
    check(model, {"i": np.array([[1], [5], [1], [-1]], np.int64), "u": np.array([3, 4, 5, 6], np.int64)})


@pytest.mark.parametrize("target", QEMU)
def test_gather_scatter_model(target):
    """Gather, GatherElements, GatherND, ScatterND and ScatterElements in one model, on every target."""
    x = randn(4, 6, 5)
    ids = np.array([3, -1, 0], np.int64)
    ge = ints(-6, 6, (4, 2, 5))
    nd = np.array([[0, 5], [-1, 2], [2, -6]], np.int64)
    nodes = [
        node("Gather", ["x", "ids"], ["g"], axis=0), node("Gather", ["x", "cids"], ["gc"], axis=2),
        node("GatherElements", ["x", "ge"], ["e"], axis=1), node("GatherND", ["x", "nd"], ["n"]),
        node("ScatterND", ["x", "nd", "n"], ["s"], reduction="add"),
        node("ScatterElements", ["x", "ge32", "e"], ["se"], axis=1),
    ]
    ge32 = np.stack([RNG.permutation(6)[:2] for _ in range(20)]).reshape(4, 5, 2).transpose(0, 2, 1).astype(np.int32)
    model = typed_model(nodes, {"x": ("float32", x.shape), "ids": ("int64", ids.shape), "ge": ("int64", ge.shape),
                                "nd": ("int64", nd.shape), "ge32": ("int32", ge32.shape)},
                        {"g": ("float32", None), "gc": ("float32", None), "e": ("float32", None),
                         "n": ("float32", None), "s": ("float32", None), "se": ("float32", None)},
                        {"cids": np.array([4, 0], np.int64)})
    check(model, {"x": x, "ids": ids, "ge": ge, "nd": nd, "ge32": ge32}, target)


# --------------------------------------------------------------------------- TopK, ArgMax, CumSum, ...

@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_topk_ties_keep_input_order(axis, largest):
    """Values rounded to a few levels: many ties, which onnxruntime orders by index."""
    x = np.round(randn(4, 7, 5))
    k = min(3, x.shape[axis])
    model = typed_model([node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
                        {"x": ("float32", x.shape)}, {"v": ("float32", None), "i": ("int64", None)},
                        {"k": np.array([k], np.int64)})
    check(model, {"x": x})


@pytest.mark.parametrize("k", [1, 9])
def test_topk_int_input_edges(k):
    """k = 1 and k = n (a full sort) of int32 values."""
    x = ints(-3, 3, (2, 9), np.int32)
    model = typed_model([node("TopK", ["x", "k"], ["v", "i"])], {"x": ("int32", x.shape)},
                        {"v": ("int32", None), "i": ("int64", None)}, {"k": np.array([k], np.int64)})
    check(model, {"x": x})


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_arg_max_min(op, axis, keepdims, last):
    x = np.round(randn(3, 4, 6))        # ties: select_last_index matters
    model = typed_model([node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
                        {"x": ("float32", x.shape)}, {"y": ("int64", None)})
    check(model, {"x": x})


def test_argmax_int_input():
    x = ints(-5, 5, (3, 10), np.int32)
    check(typed_model([node("ArgMax", ["x"], ["y"], axis=1)], {"x": ("int32", x.shape)}, {"y": ("int64", None)}),
          {"x": x})


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(axis, exclusive, reverse):
    x = randn(3, 5, 9)
    model = typed_model([node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)],
                        {"x": ("float32", x.shape)}, {"y": ("float32", None)}, {"a": np.array(axis, np.int64)})
    check(model, {"x": x})


def test_cumsum_int64():
    x = ints(-100, 100, (2, 7))
    model = typed_model([node("CumSum", ["x", "a"], ["y"], reverse=1)], {"x": ("int64", x.shape)},
                        {"y": ("int64", None)}, {"a": np.array([1], np.int32)})
    check(model, {"x": x})


@pytest.mark.parametrize("opset, axis", [(13, 0), (13, 1), (13, -1), (11, 1), (11, 0)])
def test_hardmax(opset, axis):
    """From opset 13 along one axis; before, over everything from `axis` on."""
    x = np.round(randn(3, 4, 5))
    model = typed_model([node("Hardmax", ["x"], ["y"], axis=axis)], {"x": ("float32", x.shape)},
                        {"y": ("float32", None)}, opset=opset)
    check(model, {"x": x})


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_one_hot(dtype, axis):
    """Negative indices count from the end; indices outside [-depth, depth) give a row of `off`."""
    i = np.array([[0, 4, -1, -5], [7, -6, 2, 3]]).astype(dtype)
    model = typed_model([node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)], {"i": (dtype, i.shape)},
                        {"y": ("int64", None)},
                        {"depth": np.array(5, np.int64), "values": np.array([-1, 3], np.int64)})
    check(model, {"i": i})


def test_one_hot_computed_values():
    """(off, on) given at run time (depth still fixes the shape, so it stays a constant)."""
    i = np.array([2, -1, 0, 9], np.int64)
    model = typed_model([node("OneHot", ["i", "depth", "values"], ["y"], axis=0)],
                        {"i": ("int64", i.shape), "values": ("float32", (2,))}, {"y": ("float32", None)},
                        {"depth": np.array([4], np.int64)})
    check(model, {"i": i, "values": np.array([-0.5, 7.0], np.float32)})


@pytest.mark.parametrize("target", QEMU)
def test_selection_model(target):
    """TopK, ArgMax, ArgMin, CumSum, Hardmax and OneHot in one model, on every target."""
    x = np.round(randn(2, 6, 5) * 2)
    nodes = [
        node("TopK", ["x", "k"], ["tv", "ti"], axis=1), node("ArgMax", ["x"], ["amax"], axis=2, keepdims=0),
        node("ArgMin", ["x"], ["amin"], axis=1, select_last_index=1),
        node("CumSum", ["x", "axis"], ["cs"], exclusive=1), node("Hardmax", ["x"], ["hm"], axis=1),
        node("OneHot", ["amax", "depth", "values"], ["oh"]),
    ]
    model = typed_model(nodes, {"x": ("float32", x.shape)},
                        {"tv": ("float32", None), "ti": ("int64", None), "amax": ("int64", None),
                         "amin": ("int64", None), "cs": ("float32", None), "hm": ("float32", None),
                         "oh": ("float32", None)},
                        {"k": np.array([3], np.int64), "axis": np.array(1, np.int64), "depth": np.array(5, np.int64),
                         "values": np.array([0, 1], np.float32)})
    check(model, {"x": x}, target)


# --------------------------------------------------------------------------- models

@pytest.mark.parametrize("target", QEMU)
def test_classifier_head_top_label_and_score(target):
    """Gemm -> Softmax -> ArgMax -> Gather: the label and its probability computed on the device."""
    w, bias = randn(32, 10) * 0.3, randn(10)
    nodes = [
        node("Gemm", ["x", "w", "b"], ["logits"]), node("Softmax", ["logits"], ["probs"], axis=-1),
        node("ArgMax", ["probs"], ["label"], axis=1, keepdims=0),
        node("Flatten", ["probs"], ["flat"], axis=0),
        node("Mul", ["row", "ten"], ["base"]), node("Add", ["base", "label"], ["at"]),
        node("Gather", ["flat", "at"], ["score_2d"], axis=1), node("Squeeze", ["score_2d", "zero"], ["score"]),
    ]
    x = randn(3, 32)
    model = typed_model(nodes, {"x": ("float32", x.shape)}, {"label": ("int64", None), "score": ("float32", None)},
                        {"w": w, "b": bias, "row": np.arange(3, dtype=np.int64), "ten": np.array(10, np.int64),
                         "zero": np.array([0], np.int64)})
    got = check(model, {"x": x}, target)
    np.testing.assert_array_equal(got["label"], np.argmax(x @ w + bias, axis=1))


@pytest.mark.parametrize("target", QEMU)
def test_attention_mask_softmax(target):
    """Equal(mask, 0) -> Where(-inf-ish, scores) -> Softmax: padded positions get no attention."""
    scores = randn(2, 4, 7, 7)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]], np.int64)
    nodes = [
        node("Unsqueeze", ["mask", "axes"], ["mask4"]), node("Equal", ["mask4", "zero"], ["pad"]),
        node("Where", ["pad", "neg", "scores"], ["masked"]), node("Softmax", ["masked"], ["attn"], axis=-1),
    ]
    model = typed_model(nodes, {"scores": ("float32", scores.shape), "mask": ("int64", mask.shape)},
                        {"attn": ("float32", None)},
                        {"axes": np.array([1, 2], np.int64), "zero": np.array(0, np.int64),
                         "neg": np.array(-1e9, np.float32)})
    got = check(model, {"scores": scores, "mask": mask}, target)
    assert np.all(got["attn"][1, :, :, 3:] == 0)


def test_channels_last_activations():
    """Conv output (NHWC inside) through Greater, Where, Cast and CumSum (elementwise ops follow the layout;
    the others see NCHW) and a Gather of channels."""
    w = randn(6, 3, 3, 3) * 0.3
    nodes = [
        node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Greater", ["c", "zero"], ["pos"]),
        node("Where", ["pos", "c", "small"], ["leaky"]), node("Cast", ["pos"], ["posi"], to=T["int32"]),
        node("CumSum", ["posi", "axis"], ["count"]), node("Gather", ["leaky", "chans"], ["picked"], axis=1),
    ]
    model = typed_model(nodes, {"x": ("float32", (1, 3, 5, 6))},
                        {"leaky": ("float32", None), "count": ("int32", None), "picked": ("float32", None)},
                        {"w": w, "zero": np.float32(0), "small": np.float32(-0.25), "axis": np.array(1, np.int64),
                         "chans": np.array([5, 0, -2], np.int64)})
    check(model, {"x": randn(1, 3, 5, 6)})


# --------------------------------------------------------------------------- refusals, C API, inputs

@pytest.mark.parametrize("case, message", [
    ("nonzero", "shape that depends on values computed at run time"),
    ("topk_k", "TopK.*k must be a constant"),
    ("scatter_reduction", "reduction 'foo' is not supported"),
])
def test_refusals(case, message, tmp_path):
    x = ("float32", (3, 4))
    models = {
        "nonzero": lambda: typed_model([node("NonZero", ["x"], ["y"])], {"x": x}, {"y": ("int64", None)}),
        "topk_k": lambda: typed_model([node("TopK", ["x", "k"], ["v", "i"])], {"x": x, "k": ("int64", (1,))},
                                      {"v": ("float32", (3, 2)), "i": ("int64", (3, 2))}),
        "scatter_reduction": lambda: typed_model(
            [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="s", reduction="foo")],
            {"x": x, "i": ("int64", (1, 1)), "u": ("float32", (1, 4))}, {"y": ("float32", (3, 4))}),
    }
    with pytest.raises(UnsupportedOpError, match=message):
        aot.build(models[case](), target="host", out_dir=tmp_path)


def test_c_api_types_and_alignment(tmp_path):
    """int64 and bool tensors get int64_t / uint8_t in the header, and the element-size alignment check."""
    model = typed_model([node("Cast", ["x"], ["y"], to=T["int64"]), node("Greater", ["x", "zero"], ["pos"])],
                        {"x": ("float32", (5,))}, {"y": ("int64", None), "pos": ("bool", None)},
                        {"zero": np.array(0, np.float32)})
    aot.build(model, target="host", out_dir=tmp_path, name="m")
    header, source = (tmp_path / "m.h").read_text(), (tmp_path / "m.c").read_text()
    assert "    int64_t *y;" in header and "    uint8_t *pos;" in header
    assert '#define M_OUTPUT_POS_DTYPE "bool"' in header
    assert "(uintptr_t)out->y % 8u" in source
    assert "out->pos %" not in source


def test_random_inputs_for_integer_and_bool_inputs():
    """aot run / aot.check feed small non-negative integers (valid indices for axes of 4 or more) and 0/1."""
    from aot.reference import INDEX_RANGE, random_inputs
    model = typed_model([node("Gather", ["x", "i"], ["y"]), node("Not", ["b"], ["nb"])],
                        {"x": ("float32", (4, 3)), "i": ("int64", (50,)), "b": ("bool", (50,))},
                        {"y": ("float32", None), "nb": ("bool", None)})
    feeds = random_inputs(model)
    assert feeds["i"].dtype == np.int64 and feeds["i"].min() >= 0 and feeds["i"].max() < INDEX_RANGE
    assert feeds["b"].dtype == np.bool_ and 0 < feeds["b"].sum() < 50
    assert feeds["x"].dtype == np.float32
    result = aot.check(model)
    assert result.ok, result


def test_integer_outputs_get_no_quantization_slack(tmp_path):
    """aot.check compares index outputs exactly: no one-step allowance as for quantized outputs."""
    from aot.api import quantization_steps
    model = typed_model([node("ArgMax", ["x"], ["y"], axis=1)], {"x": ("float32", (2, 5))}, {"y": ("int64", None)})
    assert quantization_steps(aot.build(model, target="host", out_dir=tmp_path).program) == {}
