"""Elementwise math ops, n-ary ops, the extra reductions and computed operands (Clip bounds, Conv weights,
1-D MatMul operands) against onnxruntime, at edge values: ties for Round, negative zero, large
magnitudes, the edges of each function's domain.

Every test runs on the host; the tests marked `QEMU` also run under emulation on AArch64 Linux and a
bare-metal Cortex-M4, each as one model holding many ops (one emulator run covers them all), and the
exact fmod, which has a separate path without fused multiply-add, on a Cortex-M0+ (soft float).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.errors import UnsupportedOpError

try:
    from oracle import make_model, onnxruntime_outputs
except ImportError:  # tests/ imported as a package
    from tests.oracle import make_model, onnxruntime_outputs

QEMU = ["host", pytest.param("aarch64", marks=pytest.mark.qemu), pytest.param("cortex-m4", marks=pytest.mark.qemu)]
F32_MAX = float(np.finfo(np.float32).max)


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def spread(rng, lo: float, hi: float, n: int = 61) -> np.ndarray:
    return rng.uniform(lo, hi, n).astype(np.float32)


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str, signed_zero: bool = False):
    """Per element: |got - want| <= atol + rtol * |want|; NaN where NaN, the same infinities; with
    `signed_zero` also the sign of every zero (exact rounding functions)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    if signed_zero:
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"{what}: sign of 0")


def graph_model(nodes, inputs: dict, outputs: list[str], inits: dict | None = None, opset: int = 17,
                input_types: dict | None = None, output_shapes: dict | None = None) -> onnx.ModelProto:
    """A model whose outputs' types and shapes come from shape inference (or `output_shapes`, float32);
    inputs may be typed (int64 axes)."""
    types = input_types or {}
    graph = helper.make_graph(
        nodes, "elementwise",
        [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), list(s)) for n, s in inputs.items()],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for name, shape in (output_shapes or {}).items():
        known[name] = helper.make_tensor_type_proto(TensorProto.FLOAT, list(shape))
    for out in model.graph.output:
        out.type.CopyFrom(known[out.name])
    onnx.checker.check_model(model, full_check=True)
    return model


def run_both(model, feeds: dict, target: str) -> tuple[dict, dict]:
    """(aot's outputs on `target`, onnxruntime's)."""
    want = onnxruntime_outputs(model, feeds)
    got = aot.run(model, inputs={k: v.copy() for k, v in feeds.items()}, target=target)
    return got, want


# --------------------------------------------------------------------------- unary math functions

_RNG = np.random.default_rng(7)
_TIES = f32([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.0, 0.0, 0.49999997, -0.49999997, 8388607.5, 8388609.0])
_WIDE = np.concatenate([_TIES, f32([1e-30, -1e-30, 3e7, -3e7, 1e38, -1e38]), spread(_RNG, -100, 100)])
_UNIT = np.concatenate([f32([-1.0, 1.0, -0.0, 0.0, 0.5, -0.5, 0.99999994, -0.99999994, 1e-20]), spread(_RNG, -1, 1)])
_TRIG = np.concatenate([f32([0.0, -0.0, 1e-20, 0.7853982, -1.5707964, 3.1415927, 100.0, -1000.5, 1e4]),
                        spread(_RNG, -20, 20)])
_SMALL = np.concatenate([f32([0.0, -0.0, 1e-20, -1e-20, 1.0, -1.0, 20.0, -20.0, 30.0, -30.0]), spread(_RNG, -8, 8)])

# id: (op, attrs, input, rtol, atol, opset, exact zeros' signs)
UNARY_CASES = {
    "floor": ("Floor", {}, _WIDE, 0, 0, 17, True),
    "ceil": ("Ceil", {}, _WIDE, 0, 0, 17, True),
    "round": ("Round", {}, _WIDE, 0, 0, 17, True),
    "sign": ("Sign", {}, _WIDE, 0, 0, 17, False),
    "sqrt": ("Sqrt", {}, np.abs(_WIDE), 1e-7, 0, 17, True),
    "sin": ("Sin", {}, _TRIG, 2e-6, 2e-7, 17, False),
    "cos": ("Cos", {}, _TRIG, 2e-6, 2e-7, 17, False),
    "tan": ("Tan", {}, _SMALL, 2e-6, 1e-7, 17, False),
    "asin": ("Asin", {}, _UNIT, 1e-6, 0, 17, False),
    "acos": ("Acos", {}, _UNIT, 1e-6, 0, 17, False),
    "atan": ("Atan", {}, _WIDE, 1e-6, 0, 17, False),
    "sinh": ("Sinh", {}, np.concatenate([_SMALL, f32([88.5, -89.0, 89.5, 100.0])]), 1e-6, 0, 17, False),
    "cosh": ("Cosh", {}, np.concatenate([_SMALL, f32([88.5, -89.0, 89.5, 100.0])]), 1e-6, 0, 17, False),
    "asinh": ("Asinh", {}, _WIDE, 1e-6, 0, 17, False),
    "acosh": ("Acosh", {}, np.concatenate([f32([1.0, 1.0000001, 1.5, 1e4, 3e38]), 1 + np.abs(_WIDE[:40])]),
              1e-6, 0, 17, False),
    "atanh": ("Atanh", {}, _UNIT, 1e-6, 0, 17, False),
    "softplus": ("Softplus", {}, _WIDE, 1e-6, 1e-38, 17, False),
    "softsign": ("Softsign", {}, _WIDE, 1e-6, 0, 17, False),
    "mish": ("Mish", {}, _WIDE, 2e-6, 1e-38, 18, False),
    "swish_alpha": ("Swish", {"alpha": 0.75}, _WIDE, 2e-6, 1e-6, 24, False),     # onnxruntime's sigmoid: 1e-7 abs
    "elu": ("Elu", {}, _SMALL, 1e-6, 1e-7, 17, False),
    "elu_alpha": ("Elu", {"alpha": 0.3}, _SMALL, 1e-6, 1e-7, 17, False),
    "selu": ("Selu", {}, _SMALL, 1e-6, 1e-7, 17, False),
    "selu_attrs": ("Selu", {"alpha": 2.0, "gamma": 0.5}, _SMALL, 1e-6, 1e-7, 17, False),
    "celu": ("Celu", {}, _SMALL, 1e-6, 1e-7, 17, False),
    "celu_alpha": ("Celu", {"alpha": 2.5}, _SMALL, 1e-6, 1e-7, 17, False),
    "thresholded_relu": ("ThresholdedRelu", {}, np.concatenate([_SMALL, f32([1.0, 0.99999994])]), 0, 0, 17, False),
    "thresholded_relu_alpha": ("ThresholdedRelu", {"alpha": -0.5}, _SMALL, 0, 0, 17, False),
    "shrink": ("Shrink", {}, np.concatenate([_SMALL, f32([0.5, -0.5])]), 0, 0, 17, False),
    "shrink_attrs": ("Shrink", {"bias": 1.5, "lambd": 1.0}, np.concatenate([_SMALL, f32([1.0, -1.0])]),
                     0, 0, 17, False),
}


@pytest.mark.parametrize("case", list(UNARY_CASES), ids=list(UNARY_CASES))
def test_unary(case):
    op, attrs, x, rtol, atol, opset, signed_zero = UNARY_CASES[case]
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x.shape}, {"y": x.shape}, opset=opset)
    got, want = run_both(model, {"x": x}, "host")
    compare(got["y"], want["y"], rtol, atol, case, signed_zero)


@pytest.mark.parametrize("target", QEMU)
def test_unary_all_ops_one_model(target):
    """Every unary op on one tensor (4-D, so they run channels-last after a Conv, fused into it)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 4, 5, 7)) * 2).astype(np.float32)
    w = (rng.standard_normal((6, 4, 1, 1)) * 0.4).astype(np.float32)
    # asin, acos and atanh see tanh(c) * 0.9: well inside (-1, 1), where they are well conditioned
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Tanh", ["c"], ["th"]),
             helper.make_node("Mul", ["th", "shrink"], ["t"])]
    outputs = []
    for i, (op, attrs, _, _, _, opset, _) in enumerate(UNARY_CASES.values()):
        if opset > 17:
            continue
        nodes.append(helper.make_node(op, ["t" if op in ("Asin", "Acos", "Atanh") else "c"], [f"y{i}"], **attrs))
        outputs.append(f"y{i}")
    nodes.append(helper.make_node("Acosh", ["p"], ["acosh"]))
    nodes.insert(1, helper.make_node("Softplus", ["c"], ["s"]))
    nodes.insert(2, helper.make_node("Add", ["s", "one"], ["p"]))
    model = graph_model(nodes, {"x": x.shape}, outputs + ["acosh"], {"w": w, "one": f32(1.0), "shrink": f32(0.9)})
    got, want = run_both(model, {"x": x}, target)
    for name in outputs + ["acosh"]:
        compare(got[name], want[name], 3e-6, 3e-6, name)


# --------------------------------------------------------------------------- Pow, PRelu, Mod

_BASES = np.concatenate([f32([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 1e-20, 1e20, -3.0]), spread(_RNG, -4, 4, 30)])


@pytest.mark.parametrize("exponent", [2.0, 3.0, -1.0, 0.5, -0.5, 0.0, 1.7, -2.0, 4.0])
def test_pow_constant_exponent(exponent):
    x = _BASES.reshape(5, 8)
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": x.shape}, {"y": x.shape},
                       {"e": f32(exponent)})
    got, want = run_both(model, {"x": x}, "host")
    compare(got["y"], want["y"], 3e-6, 1e-38, f"x ** {exponent}")


@pytest.mark.parametrize("case", ["computed", "constant_array", "int64_computed", "constant_base"])
def test_pow_operands(case):
    rng = np.random.default_rng(11)
    x = np.concatenate([np.abs(spread(rng, 0, 5, 17)), f32([0.0, -2.0, -3.0])]).reshape(4, 5)
    e = f32([[2.0], [-1.0], [0.5], [3.0]])
    inputs, inits, types, feeds = {"x": x.shape}, {}, {}, {"x": x}
    if case == "computed":
        inputs["e"], feeds["e"] = e.shape, e
    elif case == "constant_array":
        inits["e"] = e
    elif case == "int64_computed":
        inputs["e"], feeds["e"], types["e"] = (5,), np.array([0, 1, 2, -1, 3], np.int64), TensorProto.INT64
    else:
        inputs, feeds, inits["x"] = {"e": e.shape}, {"e": e}, x
    model = graph_model([helper.make_node("Pow", ["x", "e"], ["y"])], inputs, ["y"], inits, input_types=types)
    got, want = run_both(model, feeds, "host")
    compare(got["y"], want["y"], 3e-6, 0, case)


@pytest.mark.parametrize("case", ["channel_const", "channel_computed", "scalar_const", "last_axis_computed", "full"])
def test_prelu(case):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    slope = {"channel_const": (3, 1, 1), "channel_computed": (3, 1, 1), "scalar_const": (1,),
             "last_axis_computed": (5,), "full": (2, 3, 4, 5)}[case]
    s = rng.uniform(-0.5, 0.5, slope).astype(np.float32)
    computed = case.endswith("computed") or case == "full"
    inputs = {"x": x.shape, **({"s": slope} if computed else {})}
    inits = {} if computed else {"s": s}
    model = make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], inputs, {"y": x.shape}, inits)
    got, want = run_both(model, {"x": x, **({"s": s} if computed else {})}, "host")
    compare(got["y"], want["y"], 1e-6, 0, case)


def _mod_operands() -> tuple[np.ndarray, np.ndarray]:
    """Dividends and divisors: small and huge quotients, signs, zeros, exact multiples, infinities."""
    rng = np.random.default_rng(13)
    x = np.concatenate([f32([5.5, -5.5, 0.0, -0.0, 6.0, -6.0, 1e30, -3e38, 7.0, 1.0, np.inf, 2.0, 1e-30, 5.0]),
                        (rng.standard_normal(34) * 10.0 ** rng.integers(-6, 30, 34)).astype(np.float32)])
    y = np.concatenate([f32([2.0, 2.0, 3.0, 3.0, -3.0, 1.5, 3.3, 7.0, np.inf, -np.inf, 4.0, 0.0, 3.0, 1e-30]),
                        (rng.standard_normal(34) * 10.0 ** rng.integers(-6, 6, 34)).astype(np.float32)])
    return x, y


@pytest.mark.parametrize("target", ["host", pytest.param("aarch64", marks=pytest.mark.qemu),
                                    pytest.param("cortex-m0plus", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("fmod", [1, 0])
def test_mod_exact(fmod, target):
    """fmod=1 is C's fmod (onnxruntime), fmod=0 Python's % (onnxruntime from opset 28, numpy's mod):
    exact, bit for bit, with and without fused multiply-add (Cortex-M0+)."""
    x, y = _mod_operands()
    model = make_model([helper.make_node("Mod", ["x", "y"], ["z"], fmod=fmod)], {"x": x.shape, "y": y.shape},
                       {"z": x.shape}, opset=17 if fmod else 28)
    got, want = run_both(model, {"x": x, "y": y}, target)
    with np.errstate(all="ignore"):
        numpy = np.fmod(x, y) if fmod else np.mod(x, y)
    np.testing.assert_array_equal(want["z"], numpy)         # the reference agrees with numpy
    np.testing.assert_array_equal(got["z"], numpy)
    numbers = ~np.isnan(numpy)
    np.testing.assert_array_equal(np.signbit(got["z"][numbers]), np.signbit(numpy[numbers]))


def test_mod_broadcast():
    rng = np.random.default_rng(14)
    x, y = (rng.standard_normal((2, 3, 4)) * 10).astype(np.float32), f32([[1.5], [-2.0], [0.25]])
    model = make_model([helper.make_node("Mod", ["x", "y"], ["z"], fmod=1)], {"x": x.shape}, {"z": x.shape},
                       {"y": y})
    got, want = run_both(model, {"x": x}, "host")
    np.testing.assert_array_equal(got["z"], want["z"])


# --------------------------------------------------------------------------- Sum, Mean, Max, Min, Clip

VARIADIC_SHAPES = {
    "one": [(2, 3, 4)],
    "two_bcast": [(2, 3, 4), (3, 1)],
    "three": [(2, 1, 4), (3, 1), (2, 3, 4)],
    "four_scalar": [(2, 3, 4), (), (4,), (1, 3, 1)],
}


@pytest.mark.parametrize("shapes", list(VARIADIC_SHAPES), ids=list(VARIADIC_SHAPES))
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op, shapes):
    rng = np.random.default_rng(15)
    names = [f"x{i}" for i in range(len(VARIADIC_SHAPES[shapes]))]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, VARIADIC_SHAPES[shapes])}
    out = np.broadcast_shapes(*VARIADIC_SHAPES[shapes])
    model = make_model([helper.make_node(op, names, ["y"])], {n: v.shape for n, v in feeds.items()}, {"y": out})
    got, want = run_both(model, feeds, "host")
    compare(got["y"], want["y"], 1e-6, 1e-7, f"{op} {shapes}")


@pytest.mark.parametrize("case", ["both", "min_only", "max_only", "min_computed_max_const", "nan"])
def test_clip_computed_bounds(case):
    x = np.concatenate([spread(_RNG, -3, 3, 20), f32([-1.0, 0.5, np.inf, -np.inf])])
    if case == "nan":
        x[0] = np.nan
    lo, hi = f32(-1.0), f32(0.5)
    inputs, feeds, inits, names = {"x": x.shape}, {"x": x}, {}, ["x", "lo", "hi"]
    if case in ("both", "min_only", "min_computed_max_const", "nan"):
        inputs["lo"], feeds["lo"] = (), lo
    if case in ("both", "max_only", "nan"):
        inputs["hi"], feeds["hi"] = (), hi
    if case == "min_computed_max_const":
        inits["hi"] = hi
    names = [n if n in inputs or n in inits or n == "x" else "" for n in names]
    model = make_model([helper.make_node("Clip", names, ["y"])], inputs, {"y": x.shape}, inits)
    got, want = run_both(model, feeds, "host")
    compare(got["y"], want["y"], 0, 0, case)


@pytest.mark.parametrize("target", QEMU)
def test_binary_ops_one_model(target):
    """Pow, PRelu, Mod, n-ary Sum/Mean/Max/Min and Clip with computed operands in one model (NHWC after a
    Conv, so computed lower-rank operands are broadcast in channels-last order)."""
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, 3, 4, 6)).astype(np.float32)
    w = (rng.standard_normal((5, 3, 1, 1)) * 0.5).astype(np.float32)
    s = rng.uniform(0.1, 0.5, (5, 1, 1)).astype(np.float32)
    e = f32([[2.0], [3.0], [0.5], [1.5]])
    lo, hi = f32(-0.25), f32(0.3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Abs", ["c"], ["a"]),
             helper.make_node("Pow", ["a", "e"], ["pow"]), helper.make_node("PRelu", ["c", "s"], ["prelu"]),
             helper.make_node("Mod", ["c", "s"], ["fmod"], fmod=1),
             helper.make_node("Sum", ["c", "a", "s"], ["sum"]), helper.make_node("Mean", ["c", "s", "e"], ["mean"]),
             helper.make_node("Max", ["c", "s", "lo"], ["max"]), helper.make_node("Min", ["c", "a", "hi"], ["min"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["clip"])]
    outputs = ["pow", "prelu", "fmod", "sum", "mean", "max", "min", "clip"]
    model = graph_model(nodes, {"x": x.shape, "s": s.shape, "e": e.shape, "lo": (), "hi": ()}, outputs, {"w": w})
    got, want = run_both(model, {"x": x, "s": s, "e": e, "lo": lo, "hi": hi}, target)
    for name in outputs:
        compare(got[name], want[name], 3e-6, 1e-7, name)


# --------------------------------------------------------------------------- reductions

REDUCE_OPS = ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "ReduceSumSquare"]
# id: (axes or None, keepdims, noop_with_empty_axes, axes computed at run time)
REDUCE_CASES = {
    "last": ([-1], 1, 0, False),
    "middle_drop": ([1], 0, 0, False),
    "two_axes_drop": ([0, 2], 0, 0, False),
    "all_default": (None, 1, 0, False),
    "all_drop": (None, 0, 0, False),
    "empty_axes_noop": ([], 1, 1, False),
    "computed_keep": ([1, 2], 1, 0, True),
    "computed_drop": ([3], 0, 0, True),
}


@pytest.mark.parametrize("case", list(REDUCE_CASES), ids=list(REDUCE_CASES))
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce(op, case):
    axes, keepdims, noop, computed = REDUCE_CASES[case]
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    if op == "ReduceProd":
        x = rng.uniform(0.5, 1.5, x.shape).astype(np.float32) * np.sign(x)
    inputs, inits, types, feeds, names = {"x": x.shape}, {}, {}, {"x": x}, ["x"]
    if axes is not None:
        names.append("axes")
        if computed:
            inputs["axes"], types["axes"], feeds["axes"] = (len(axes),), TensorProto.INT64, np.array(axes, np.int64)
        else:
            inits["axes"] = np.array(axes, np.int64)
    node = helper.make_node(op, names, ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    shape = np.sum(x, axis=tuple(axes), keepdims=bool(keepdims)).shape if computed else None
    model = graph_model([node], inputs, ["y"], inits, opset=18, input_types=types,
                        output_shapes={"y": shape} if computed else None)
    got, want = run_both(model, feeds, "host")
    compare(got["y"], want["y"], 2e-6, 1e-7, f"{op} {case}")


def test_reduce_log_sum_exp_large_values():
    """Subtracting the max keeps exp from overflowing: values near 1000, and a row of -inf."""
    x = np.concatenate([f32([[1000.0, 999.0, 998.5, -5.0]]), np.full((1, 4), -np.inf, np.float32),
                        f32([[-1000.0, -1001.0, 88.0, 89.0]])])
    model = make_model([helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1])], {"x": x.shape},
                       {"y": (3, 1)}, opset=17)
    got, want = run_both(model, {"x": x}, "host")
    compare(got["y"], want["y"], 1e-6, 0, "log_sum_exp")


@pytest.mark.parametrize("target", QEMU)
def test_reductions_one_model(target):
    rng = np.random.default_rng(18)
    x = rng.uniform(0.2, 2.0, (2, 5, 3, 6)).astype(np.float32)
    nodes, outputs = [], []
    for i, op in enumerate(REDUCE_OPS):
        nodes.append(helper.make_node(op, ["x", f"a{i}"], [f"y{i}"], keepdims=i % 2))
        outputs.append(f"y{i}")
    inits = {f"a{i}": np.array([[1], [3], [2, 3], [0, 1], [-1], [1, 2]][i], np.int64) for i in range(len(REDUCE_OPS))}
    model = graph_model(nodes, {"x": x.shape}, outputs, inits, opset=18)
    got, want = run_both(model, {"x": x}, target)
    for name in outputs:
        compare(got[name], want[name], 3e-6, 0, name)


def _reduce_fed_axes(op: str, shape: tuple[int, ...], count: int, out_shape: tuple[int, ...], keepdims: int = 0,
                     noop: int = 0) -> onnx.ModelProto:
    """`op` of x by `count` axes fed at run time, the output's shape declared."""
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    return graph_model([node], {"x": shape, "axes": (count,)}, ["y"], opset=18,
                       input_types={"axes": TensorProto.INT64}, output_shapes={"y": out_shape})


# (input shape, output shape, axes values fed): shapes that more than one set of axes gives
FED_AXES_CASES = {
    "one_of_two": ((3, 2, 2), (3, 2), [[1], [2], [-1], [-2]]),
    "two_of_four": ((2, 3, 2, 3), (2, 3), [[0, 1], [1, 2], [2, 3], [3, 2], [-4, 1], [-3, -2]]),
    # axes of size 1 named or not give the same values
    "size_one_axes": ((2, 1, 2, 1), (2,), [[1, 2, 3], [0, 1, 3], [0, 3, 1], [-1, -2, -3]]),
}


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("case", list(FED_AXES_CASES))
def test_reduce_axes_fed_at_run_time_choose_among_the_shapes(op, case):
    """Every set of axes the static shapes allow is computed; the one the fed axes name is kept."""
    shape, out_shape, fed = FED_AXES_CASES[case]
    model = _reduce_fed_axes(op, shape, len(fed[0]), out_shape)
    x = np.random.default_rng(20).standard_normal(shape).astype(np.float32)
    for axes in fed:
        got, want = run_both(model, {"x": x, "axes": np.array(axes, np.int64)}, "host")
        compare(got["y"], want["y"], 2e-6, 1e-7, f"{op} {case} axes {axes}")


@pytest.mark.parametrize("axes", [[3], [-4], [7], [-9], [2**63 - 1], [-(2**63)]])
def test_reduce_axes_fed_out_of_range_give_an_allowed_reduction(axes):
    """An axis out of range is the model's error (onnxruntime refuses it): no crash, and the output is
    the reduction over one of the axes the shapes allow."""
    x = np.random.default_rng(21).standard_normal((3, 2, 2)).astype(np.float32)
    got = aot.run(_reduce_fed_axes("ReduceSum", x.shape, 1, (3, 2)),
                  inputs={"x": x, "axes": np.array(axes, np.int64)}, target="host")["y"]
    assert any(np.allclose(got, x.sum(axis=a), rtol=1e-6, atol=1e-6) for a in (1, 2)), got


@pytest.mark.parametrize("keepdims, noop", [(1, 0), (0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("op", ["ReduceL1", "ReduceSumSquare", "ReduceSum"])
def test_reduce_axes_fed_empty(op, keepdims, noop):
    """An axes input of length 0 (fed, it holds nothing): all axes, or with noop_with_empty_axes fn of
    each element (|x| for ReduceL1), as onnxruntime and ONNX's reference compute."""
    x = np.random.default_rng(22).standard_normal((2, 3)).astype(np.float32)
    out_shape = x.shape if noop else ((1, 1) if keepdims else ())
    model = _reduce_fed_axes(op, x.shape, 0, out_shape, keepdims, noop)
    got, want = run_both(model, {"x": x, "axes": np.zeros(0, np.int64)}, "host")
    compare(got["y"], want["y"], 2e-6, 1e-7, f"{op} keepdims {keepdims} noop {noop}")


# --------------------------------------------------------------------------- Conv with computed weights

# id: (x shape, weight shape, bias: "computed" / "const" / None, attrs)
CONV_CASES = {
    "3x3_p1_c17": ((1, 3, 7, 8), (17, 3, 3, 3), "computed", {"pads": [1, 1, 1, 1]}),
    "group2_s2_asym": ((2, 4, 9, 9), (6, 2, 3, 3), "const", {"group": 2, "strides": [2, 2], "pads": [0, 1, 2, 1]}),
    "dil2_nobias": ((1, 5, 11, 12), (9, 5, 3, 3), None, {"dilations": [2, 2]}),
    "depthwise_same": ((1, 6, 7, 7), (6, 1, 3, 3), "computed", {"group": 6, "auto_pad": "SAME_UPPER"}),
    "conv1d": ((1, 5, 20), (7, 5, 3), "computed", {"strides": [2], "pads": [1, 1]}),
    "1x1_c33": ((1, 8, 5, 6), (33, 8, 1, 1), "computed", {}),
    "whole_image": ((1, 1, 5, 5), (1, 1, 5, 5), None, {}),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv_computed_weight(case):
    xs, ws, bias, attrs = CONV_CASES[case]
    rng = np.random.default_rng(19)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32), "w": rng.standard_normal(ws).astype(np.float32)}
    inits = {}
    if bias == "computed":
        feeds["b"] = rng.standard_normal(ws[0]).astype(np.float32)
    elif bias == "const":
        inits["b"] = rng.standard_normal(ws[0]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], **attrs),
             helper.make_node("Relu", ["c"], ["y"])]          # fused into the direct convolution
    model = graph_model(nodes, {k: v.shape for k, v in feeds.items()}, ["y"], inits)
    got, want = run_both(model, feeds, "host")
    compare(got["y"], want["y"], 1e-5, 1e-5, case)


@pytest.mark.parametrize("target", QEMU)
def test_conv_weight_from_conv(target):
    """The weight is itself a convolution's (channels-last) output, and the bias computed while the
    weight of a second convolution is constant: layouts and both computed forms."""
    rng = np.random.default_rng(20)
    feeds = {"x": rng.standard_normal((1, 3, 9, 10)).astype(np.float32),
             "wsrc": rng.standard_normal((4, 2, 5, 5)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32)}
    inits = {"k": (rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32),
             "w2": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["wsrc", "k"], ["w"]),                        # (4, 3, 3, 3)
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[1, 2]),
             helper.make_node("Conv", ["x", "w2", "b"], ["y2"])]
    model = graph_model(nodes, {k: v.shape for k, v in feeds.items()}, ["y", "y2"], inits)
    got, want = run_both(model, feeds, target)
    compare(got["y"], want["y"], 1e-5, 1e-5, "weight from a conv")
    compare(got["y2"], want["y2"], 1e-5, 1e-5, "computed bias")


# --------------------------------------------------------------------------- MatMul with 1-D operands

MATMUL_CASES = {
    "vec_vec": ((5,), (5,), False), "vec_mat": ((5,), (5, 7), False), "mat_vec": ((3, 5), (5,), False),
    "batch_vec": ((2, 3, 5), (5,), False), "vec_batch": ((5,), (2, 5, 7), False),
    "vec_vec_const": ((5,), (5,), True), "mat_vec_const": ((3, 5), (5,), True), "vec_mat_const": ((9,), (9, 17), True),
}


@pytest.mark.parametrize("target", QEMU)
def test_matmul_vectors_one_model(target):
    rng = np.random.default_rng(21)
    nodes, feeds, inits, outputs = [], {}, {}, []
    for i, (a, b, const) in enumerate(MATMUL_CASES.values()):
        feeds[f"a{i}"] = rng.standard_normal(a).astype(np.float32)
        (inits if const else feeds)[f"b{i}"] = rng.standard_normal(b).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [f"a{i}", f"b{i}"], [f"y{i}"]))
        outputs.append(f"y{i}")
    model = graph_model(nodes, {k: v.shape for k, v in feeds.items()}, outputs, inits)
    got, want = run_both(model, feeds, target)
    for name, case in zip(outputs, MATMUL_CASES):
        compare(got[name], want[name], 1e-5, 1e-6, case)


def test_pow_integer_base_refused():
    model = graph_model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": (3,)}, ["y"], {"e": f32(2.0)},
                        input_types={"x": TensorProto.INT32})
    with pytest.raises(UnsupportedOpError, match="Pow.*float32 base"):
        aot.run(model, inputs={"x": np.arange(3, dtype=np.int32)}, target="host")
