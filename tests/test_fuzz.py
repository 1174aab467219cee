"""Differential fuzzing in CI: random valid graphs (fuzz_graphs.py) compiled by aot and compared with
onnxruntime (fuzz_check.py), a few hundred on the host and a few dozen on AArch64 under qemu; the
generator's determinism and validity; the reducer (fuzz_reduce.py); and the bugs the fuzzer found, each
as its minimal graph. The long run is benchmarks/fuzz_compiler.py.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from fuzz_check import Outcome, check
from fuzz_graphs import generate
from fuzz_reduce import reduce, script
from onnx import TensorProto, helper, numpy_helper
from oracle import onnxruntime_outputs

import aot

SEED = 2026
HOST_GRAPHS, AARCH64_GRAPHS, CHUNK = 320, 32, 16
# Refusals that are genuine limits the README states (anything else refused is a bug of the fuzzer's or aot's).
KNOWN_REFUSALS = ("auto_pad SAME_LOWER with a kernel shorter than the stride",)
# Open bugs, each kept by an xfail test below on its minimal graph: (outcome, pattern of its message, test).
# A graph failing this way is not reported again; any other failure is.
KNOWN_BUGS = (
    ("refused", re.compile(r"cannot infer the shape .*\(GroupNormalization\)"), "test_group_normalization_opset_21"),
    ("refused", re.compile(r"cannot infer the shape .*\(GatherND\)"), "test_gather_nd_to_a_scalar"),
)


def known(outcome: Outcome) -> bool:
    if outcome.kind == "refused" and any(r in outcome.detail for r in KNOWN_REFUSALS):
        return True
    return any(outcome.kind == kind and pattern.search(outcome.detail) for kind, pattern, _ in KNOWN_BUGS)


def run_chunk(start: int, target: str) -> list[str]:
    problems = []
    for i in range(start, start + CHUNK):
        case = generate(SEED, i)
        outcome = check(case.model, case.inputs, target)
        if known(outcome):
            continue
        if outcome.kind not in ("pass", "reference-wrong"):
            problems.append(f"graph {i} of seed {SEED} ({target}): {outcome.kind}: {outcome.detail}")
    return problems


@pytest.mark.parametrize("start", range(0, HOST_GRAPHS, CHUNK))
def test_random_graphs_host(start):
    problems = run_chunk(start, "host")
    assert not problems, "\n".join(problems) + "\nreduce with benchmarks/fuzz_compiler.py --reduce-dir"


@pytest.mark.qemu
@pytest.mark.parametrize("start", range(HOST_GRAPHS, HOST_GRAPHS + AARCH64_GRAPHS, CHUNK))
def test_random_graphs_aarch64(start):
    problems = run_chunk(start, "aarch64")
    assert not problems, "\n".join(problems)


def test_generator_is_reproducible_and_valid():
    for i in range(40):
        a, b = generate(7, i), generate(7, i)
        assert a.model.SerializeToString() == b.model.SerializeToString(), f"graph {i} differs between calls"
        assert a.inputs.keys() == b.inputs.keys()
        assert all(np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
        onnx.checker.check_model(a.model, full_check=True)
    assert generate(7, 0).model.SerializeToString() != generate(8, 0).model.SerializeToString()


def test_generator_covers_the_op_families():
    ops = set()
    for i in range(400):
        ops.update(generate(11, i).ops)
    wanted = {"Conv", "MatMul", "Gemm", "Softmax", "ReduceSum", "MaxPool", "AveragePool", "Concat", "Split", "Pad",
              "Resize", "Reshape", "Transpose", "Slice", "Squeeze", "Unsqueeze", "Expand", "Flatten", "Gather",
              "Where", "Cast", "CastLike", "Constant", "QuantizeLinear", "DequantizeLinear", "LayerNormalization",
              "BatchNormalization", "Equal", "Less", "And", "Not", "TopK", "ArgMax", "Shape", "Size"}
    assert wanted <= ops, f"never generated: {sorted(wanted - ops)}"


def test_check_finds_a_wrong_output():
    """The comparison fails when the reference differs: a hand-made graph whose output aot must compute,
    compared against a deliberately different expectation."""
    from fuzz_check import compare
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]})
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    good = {"y": np.maximum(x, 0)}
    assert compare(model, {"x": x}, good, good).kind == "pass"
    assert compare(model, {"x": x}, {"y": good["y"] + 1e-2}, good).kind == "wrong"
    assert compare(model, {"x": x}, {"y": good["y"][:1]}, good).detail.startswith("shape")


def test_reducer_keeps_the_failure_and_writes_a_script():
    """A graph 'fails' when it contains a Softmax: the reducer must keep one Softmax and little else,
    and the script must rebuild the reduced model exactly."""
    case = next(c for c in (generate(3, i, max_nodes=8) for i in range(200))
                if "Softmax" in c.ops and sum(c.ops.values()) >= 6)

    def fails(model, inputs):
        return any(n.op_type == "Softmax" for n in model.graph.node)

    model, inputs = reduce(case.model, case.inputs, fails)
    assert [n.op_type for n in model.graph.node] == ["Softmax"]
    namespace: dict = {}
    exec(compile(script(model, inputs), "<reduced>", "exec"), namespace)
    assert namespace["model"]().graph.SerializeToString() == model.graph.SerializeToString()
    assert all(np.array_equal(namespace["inputs"]()[k], v) for k, v in inputs.items())
    assert check(model, inputs).kind == "pass"


def test_known_bugs_have_their_xfail_test():
    for _, _, test in KNOWN_BUGS:
        marks = [m.name for m in getattr(globals()[test], "pytestmark", [])]
        assert "xfail" in marks, f"{test} should be the xfail test of an open bug"


def test_outcome_signature_ignores_names_and_numbers():
    a = Outcome("refused", "UnsupportedOpError: node 'Pad_3' (Pad): negative pads at t12")
    b = Outcome("refused", "UnsupportedOpError: node 'Pad_7' (Pad): negative pads at t3")
    assert a.signature == b.signature
    assert a.signature != Outcome("crash", a.detail).signature


# ---------------------------------------------------------------- bugs the fuzzer found


def _model(nodes, inputs: dict, outputs: dict, inits=(), opset: int = 18, out_type=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "fuzz",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
                              [helper.make_tensor_value_info(k, out_type, s) for k, s in outputs.items()],
                              initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("second", ["Identity", "Transpose", "Reshape"])
def test_output_that_is_a_view_of_a_later_output(second):
    """Seed 0, graphs 28 and 33: outputs (b, a) with b a view of a. materialize_outputs gave b the
    storage of a and copied a out, but b kept viewing the copy: b's buffer was never written."""
    extra = {"Transpose": {"perm": [0, 2, 1, 3]}}.get(second, {})
    inputs = ["a"] + (["shape"] if second == "Reshape" else [])
    inits = [numpy_helper.from_array(np.array([1, 4, 7], np.int64), "shape")] if second == "Reshape" else []
    out_shape = [1, 4, 7] if second == "Reshape" else [1, 4, 1, 7] if second == "Identity" else [1, 1, 4, 7]
    model = _model([helper.make_node("LogSoftmax", ["x"], ["a"], axis=1),
                    helper.make_node(second, inputs, ["b"], **extra)],
                   {"x": [1, 4, 1, 7]}, {"b": out_shape, "a": [1, 4, 1, 7]}, inits)
    x = np.random.default_rng(0).standard_normal((1, 4, 1, 7)).astype(np.float32)
    assert check(model, {"x": x}).kind == "pass", check(model, {"x": x})


def test_quantized_concat_of_constants():
    """Seed 0, graph 23: Concat(DequantizeLinear(QuantizeLinear(c)), ...) -> QuantizeLinear with c a
    constant. lower_quantized made it an integer Concat (each operand rescaled into its slice), then
    fold_constants evaluated that as a plain Concat of the codes, without the rescale: codes of the
    operand's encoding came out under the output's (off by up to 49 steps)."""
    c = np.array([[-1.4485985, 0.5, 1.0], [0.25, -0.75, 1.25]], np.float32)
    consts = {"c": c, "s1": np.float32(0.024159975), "z1": np.uint8(130), "s2": np.float32(0.06184954),
              "z2": np.uint8(126), "s3": np.float32(0.15462384), "z3": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["c", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
             helper.make_node("QuantizeLinear", ["d1", "s2", "z2"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["d2"]),
             helper.make_node("Concat", ["d1", "d2"], ["cat"], axis=1),
             helper.make_node("QuantizeLinear", ["cat", "s3", "z3"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    model = _model(nodes, {}, {"y": [2, 6]}, inits, out_type=TensorProto.UINT8)
    outcome = check(model, {})
    assert outcome.kind == "pass", outcome


def test_output_that_is_also_a_folded_weight():
    """Seed 2026, graphs 244, 256 and 280: a DequantizeLinear of an int8 constant weight both feeds a
    MatMul and is a graph output. It folds to a constant; materialize_outputs moved that constant to a
    new name to copy it out, but the MatMul kept reading the old name (KeyError in the lowering)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (7, 4)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.float32(0.003937008), "ws"), numpy_helper.from_array(np.int8(0), "wz")]
    model = _model([helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
                    helper.make_node("MatMul", ["x", "w"], ["y"])],
                   {"x": [1, 4, 5, 7]}, {"w": [7, 4], "y": [1, 4, 5, 4]}, inits)
    x = rng.standard_normal((1, 4, 5, 7)).astype(np.float32)
    assert check(model, {"x": x}).kind == "pass", check(model, {"x": x})


@pytest.mark.parametrize("target", ["host", pytest.param("aarch64", marks=pytest.mark.qemu)])
def test_pow_of_a_broadcast_scalar_base(target):
    """Seed 2026, graph 300: Pow(base of shape [1], exponent [1,4,2,2]). The polynomial pow selected
    between the base's scalar and the exponent's vector lanes: kernel IR `select` splatted its two
    values but not its condition (InternalError "select on a i1x16 condition")."""
    model = _model([helper.make_node("Pow", ["b", "e"], ["y"])], {"b": [1], "e": [1, 4, 2, 2]},
                   {"y": [1, 4, 2, 2]})
    rng = np.random.default_rng(1)
    inputs = {"b": np.array([1.7], np.float32), "e": rng.uniform(-3, 3, (1, 4, 2, 2)).astype(np.float32)}
    assert check(model, inputs, target).kind == "pass", check(model, inputs, target)


def test_grouped_conv_transpose_of_a_constant():
    """Seed 2026, graph 97: ConvTranspose(group=2) whose data input is a constant (there a
    DequantizeLinear of an int8 constant). onnx.reference's ConvTranspose fails for group > 1, so
    fold_constants leaves it to aot's kernel, its data copied in at run time."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((7, 4, 1, 1)).astype(np.float32), "x"),
             numpy_helper.from_array(rng.standard_normal((4, 3, 1, 2)).astype(np.float32), "w")]
    model = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, kernel_shape=[1, 2],
                                     strides=[2, 2], pads=[0, 0, 0, 1])], {}, {"y": [7, 6, 1, 1]}, inits)
    outcome = check(model, {})
    assert outcome.kind == "pass", outcome


@pytest.mark.xfail(strict=True, reason="bug: GroupNormalization of opset 21 is refused with a ShapeError "
                   "(the frontend infers no shape for its output) when another node reads it")
def test_group_normalization_opset_21():
    """Seed 2026, graphs 20, 31 and 69 (the README lists GroupNormalization). Read there by a LogSoftmax,
    which keeps the declared output's shape: that one builds since shapes are also taken back from
    declared outputs (backward_shapes.py); a Transpose tells nothing of it."""
    inits = [numpy_helper.from_array(np.array([0.8, 1.2, 1.0], np.float32), "scale"),
             numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "bias")]
    model = _model([helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["n"], num_groups=1),
                    helper.make_node("Transpose", ["n"], ["y"], perm=[2, 0, 1])],
                   {"x": [2, 3, 5]}, {"y": [5, 2, 3]}, inits, opset=21)
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    outcome = check(model, {"x": x})
    assert outcome.kind == "pass", outcome


def _gather_nd_to_a_scalar(reader: str) -> onnx.ModelProto:
    """GatherND(data [1, 3], indices [2]) read by `reader`: Abs, or an Add broadcasting it over [3]."""
    nodes = [helper.make_node("GatherND", ["x", "i"], ["g"])]
    if reader == "Abs":
        nodes.append(helper.make_node("Abs", ["g"], ["y"]))
    else:
        nodes += [helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(np.ones(3, np.float32))),
                  helper.make_node("Add", ["g", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
                        helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [] if reader == "Abs" else [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


_GATHER_ND_INPUTS = {"x": np.array([[0.5, -1.5, 2.0]], np.float32), "i": np.array([0, -2], np.int64)}


def test_gather_nd_to_a_scalar_read_elementwise():
    """Seed 2026, graph 319: onnx's inference gives GatherND's scalar no shape; the Abs reading it carries
    its declared output's shape back (aot/frontend/backward_shapes.py)."""
    outcome = check(_gather_nd_to_a_scalar("Abs"), _GATHER_ND_INPUTS)
    assert outcome.kind == "pass", outcome


@pytest.mark.xfail(strict=True, reason="bug: GatherND whose output is a scalar (indices as long as the data's "
                   "rank) is refused with a ShapeError when a node that does not keep its shape reads it")
def test_gather_nd_to_a_scalar():
    """Seed 2026, graph 319 with the scalar broadcast by an Add instead."""
    outcome = check(_gather_nd_to_a_scalar("Add"), _GATHER_ND_INPUTS)
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("target", ["host", pytest.param("aarch64", marks=pytest.mark.qemu)])
def test_depthwise_conv_over_its_own_input(target):
    """Seed 2026, graph 323 (wrong on aarch64 only, by 0.05): the memory plan puts the depthwise
    convolution's output over the last rows of its input, which the kernel reads before it writes them
    (rows last to first); its arguments were marked noalias, and LLVM's AArch64 scheduler moved a store
    of row 0 above the loads of row 1's border pixel."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((7, 1, 3, 2)) * 0.4).astype(np.float32), "w")
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], group=7, kernel_shape=[3, 2], pads=[0, 0, 0, 1],
                                     strides=[2, 2])], {"x": [1, 7, 6, 3]}, {"y": [1, 7, 2, 2]}, [w])
    x = rng.standard_normal((1, 7, 6, 3)).astype(np.float32)
    outcome = check(model, {"x": x}, target)
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_max_pool_same_upper_kernel_below_stride(auto_pad):
    """Seed 1, graphs 393 and 978 (and seed 7, graph 1214): MaxPool(kernel [1, 3], strides [2, 1], SAME) on
    4x4. ONNX's formula gives a total pad of -1 on the rows: the window shifts by one (rows 1 and 3 for
    SAME_UPPER, as onnxruntime and ONNX's reference take them); aot once clamped it to 0 (rows 0 and 2)."""
    model = _model([helper.make_node("MaxPool", ["x"], ["y"], auto_pad=auto_pad, kernel_shape=[1, 3],
                                     strides=[2, 1])], {"x": [1, 1, 4, 4]}, {"y": [1, 1, 2, 4]})
    outcome = check(model, {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)})
    if auto_pad == "SAME_LOWER":        # onnxruntime refuses the negative pad: aot does too, saying so
        assert outcome.kind == "refused" and "SAME_LOWER with a kernel shorter than the stride" in outcome.detail
        return
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("op", ["LpPool", "AveragePool"])
def test_pool_same_kernel_below_stride_as_onnxruntime_splits_it(op, auto_pad):
    """Seed 23, graphs 1902 (LpPool, kernel [1], strides [2] on length 2) and 5704 (AveragePool, opset 21,
    kernel 1x1, strides 2x2 on 4x3): SAME's total pad is negative. onnxruntime runs these pools (not
    MaxPool) and splits it with C's division towards zero (-1: no shift; -2: SAME_UPPER shifts by one);
    aot shifted by ONNX's reference's floor division, which only MaxPool follows now."""
    attrs = {"p": 3} if op == "LpPool" else {}
    for rows, stride in ((4, 2), (3, 3), (7, 4)):
        model = _model([helper.make_node(op, ["x"], ["y"], auto_pad=auto_pad, kernel_shape=[1, 1],
                                         strides=[stride, 2], **attrs)],
                       {"x": [1, 2, rows, 3]}, {"y": [1, 2, -(-rows // stride), 2]}, opset=21)
        x = np.random.default_rng(rows).standard_normal((1, 2, rows, 3)).astype(np.float32)
        assert check(model, {"x": x}).kind == "pass", (rows, stride, check(model, {"x": x}))


def test_pool_ceil_mode_window_in_the_padding():
    """Seed 1, graphs 364 and 1876: MaxPool(kernel [2, 3], pads [1, 2, 1, 2], strides [1, 2], ceil_mode)
    on 7x6 is 8x4 by ONNX's rule (the last window would start in the end padding and is dropped; onnx's
    shape inference counts it), read by an Add with a tensor of that shape (strict inference then fails
    at the Add: the pool is corrected first)."""
    inits = [numpy_helper.from_array(np.ones((1, 1, 8, 4), np.float32), "b")]
    model = _model([helper.make_node("MaxPool", ["x"], ["p"], ceil_mode=1, kernel_shape=[2, 3], pads=[1, 2, 1, 2],
                                     strides=[1, 2]),
                    helper.make_node("Add", ["p", "b"], ["y"])], {"x": [1, 1, 7, 6]}, {"y": [1, 1, 8, 4]}, inits)
    x = np.random.default_rng(0).standard_normal((1, 1, 7, 6)).astype(np.float32)
    outcome = check(model, {"x": x})
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("op", ["GlobalMaxPool", "MaxPool"])
def test_pooling_of_a_constant(op):
    """Seed 1, graphs 219 (GlobalMaxPool of a [1, 6, 1] constant) and 820 (MaxPool, kernel 3, pads 1, 2 of
    a [1, 1, 1] constant): onnx.reference gave the first the wrong shape (its GlobalMaxPool is corrected
    in aot's evaluator since, so the constant folds) and refuses the second's pads, so aot's kernel
    computes it."""
    if op == "GlobalMaxPool":
        c, node, shape = np.arange(6, dtype=np.float32).reshape(1, 6, 1), helper.make_node(op, ["c"], ["y"]), [1, 6, 1]
    else:
        c, shape = np.array([[[0.5]]], np.float32), [1, 1, 2]
        node = helper.make_node(op, ["c"], ["y"], kernel_shape=[3], pads=[1, 2], strides=[1])
    model = _model([node], {}, {"y": shape}, [numpy_helper.from_array(c, "c")])
    outcome = check(model, {})
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_ceil_mode_dropped_window_then_mean(include_pad):
    """Seed 7, graph 138: AveragePool(kernel 2, pads 1, 1, stride 2, ceil_mode) of length 3 has 2 windows,
    the third starting in the end padding; taken (as onnx's inference counts it) it added a 0 (or, without
    counting pads, 0/0) to the GlobalAveragePool after it."""
    model = _model([helper.make_node("AveragePool", ["x"], ["p"], ceil_mode=1, count_include_pad=include_pad,
                                     kernel_shape=[2], pads=[1, 1], strides=[2]),
                    helper.make_node("GlobalAveragePool", ["p"], ["y"])], {"x": [3, 3, 3]}, {"y": [3, 3, 1]})
    x = np.random.default_rng(0).standard_normal((3, 3, 3)).astype(np.float32)
    outcome = check(model, {"x": x})
    assert outcome.kind == "pass", outcome


def test_pool_ceil_mode_window_dropped_on_one_axis_kept_on_another_is_refused():
    """Rows: the third window would start in the end padding (dropped); columns: the second starts inside
    the input (kept). No ceil_mode flag says that: a clear refusal, not a wrong count."""
    model = _model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", ceil_mode=1, kernel_shape=[2, 2],
                                     pads=[1, 0, 1, 0], strides=[2, 3])], {"x": [1, 1, 3, 4]}, {"y": [1, 1, 2, 2]})
    with pytest.raises(aot.UnsupportedOpError, match="node 'pool' \\(MaxPool\\): with ceil_mode=1 its last window "
                                                     "is dropped on one axis and kept on another"):
        aot.build(model, target="host")


def test_quantized_constant_that_is_also_an_output():
    """Seed 7, graph 512: a QuantizeLinear of a constant (folded to uint8 codes, saturated at 255) is a graph
    output and an operand of an integer Add; the constant moved aside for the output's copy lost its scale
    and zero point, and the Add read its codes as another scale's (up to 102 steps off)."""
    inits = [numpy_helper.from_array(np.array([1.2711618, -0.08442697, 1.9360644], np.float32), "c"),
             numpy_helper.from_array(np.float32(0.015252476), "cs"), numpy_helper.from_array(np.uint8(147), "cz"),
             numpy_helper.from_array(np.float32(0.012915468), "xs"), numpy_helper.from_array(np.uint8(136), "xz"),
             numpy_helper.from_array(np.float32(0.04035764), "ys"), numpy_helper.from_array(np.uint8(128), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "cs", "cz"], ["dq"]),
             helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["dx"]),
             helper.make_node("Add", ["dq", "dx"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [3]),
                               helper.make_tensor_value_info("q", TensorProto.UINT8, [3])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 8
    outcome = check(model, {"x": np.array([126, 215, 36], np.uint8)})
    assert outcome.kind == "pass", outcome


@pytest.mark.parametrize("source", ["CastLike", "Shape"])
def test_quantized_op_on_values_that_fold_from_a_computed_tensor(source):
    """Seed 23, graph 1426: QDQ ops over CastLike(constant, x), which folds though x is computed (it reads
    only x's type), as Shape reads only x's shape. lower_quantized judged them computed and made the op
    integer; fold_constants then evaluated it on the codes without the rescale between encodings (uint8
    off by 86). Both passes now ask one question: does the node fold."""
    params = {"s1": np.float32(0.05), "s2": np.float32(0.02), "s3": np.float32(0.1)}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in params.items()]
    inits += [numpy_helper.from_array(np.uint8(z), f"z{i}") for i, z in ((1, 3), (2, 0), (3, 7))]
    inits.append(numpy_helper.from_array(np.array([1.5, 0.5, 2.0, 1.0], np.float32), "c"))
    if source == "CastLike":
        inits.append(numpy_helper.from_array(np.array([2.0, 3.0, 4.0, 4.0], np.float64), "c64"))
        made = [helper.make_node("CastLike", ["c64", "x"], ["v"])]
    else:
        made = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Cast", ["sh"], ["v"], to=TensorProto.FLOAT)]
    nodes = made + [helper.make_node("QuantizeLinear", ["v", "s1", "z1"], ["q1"]),
                    helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
                    helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["q2"]),
                    helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["d2"]),
                    helper.make_node("Mul", ["d1", "d2"], ["m"]),
                    helper.make_node("QuantizeLinear", ["m", "s3", "z3"], ["q3"]),
                    helper.make_node("DequantizeLinear", ["q3", "s3", "z3"], ["d3"]),
                    helper.make_node("Add", ["x", "d3"], ["y"])]
    model = _model(nodes, {"x": [2, 3, 4, 4]}, {"y": [2, 3, 4, 4]}, inits)
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 4)).astype(np.float32)
    assert check(model, {"x": x}).kind == "pass", check(model, {"x": x})


def test_folded_l1_normalization():
    """Seed 23, graph 1666: LpNormalization(p=1) of a constant folds at compile time with ONNX's
    reference implementation, which divides by the plain sum of the row rather than the sum of its
    magnitudes (row sum 0.17, norm 4.2: values 24x too large). aot's evaluator corrects that op."""
    c = np.array([[0.28, -0.15, 0.43, 1.16], [-0.48, 0.47, -0.06, -1.02]], np.float32)
    model = _model([helper.make_node("LpNormalization", ["c"], ["y"], axis=1, p=1),
                    helper.make_node("Relu", ["x"], ["r"])],
                   {"x": [3]}, {"y": [2, 4], "r": [3]}, [numpy_helper.from_array(c, "c")])
    outcome = check(model, {"x": np.ones(3, np.float32)})
    assert outcome.kind == "pass", outcome
    got = aot.run(model, {"x": np.ones(3, np.float32)})["y"]
    np.testing.assert_allclose(got, c / np.abs(c).sum(axis=1, keepdims=True), rtol=1e-6)


def test_arbitration_of_one_output_ignores_the_rest_of_the_graph():
    """Seed 23, graph 1383: MeanVarianceNormalization over values that are equal along its axis, where
    onnxruntime gives 0/0 = NaN and ONNX's function (and aot) 0. The float64 arbitration said so, but it
    evaluated the whole graph, and onnx.reference cannot run the graph's unrelated GatherElements (indices
    smaller than the data): "wrong". Each output is now arbitrated on the nodes that compute it, and the
    outcome is reference-wrong."""
    x = np.array([[[[0.5, -1.0]], [[0.5, 2.0]]]], np.float32)          # [1, 2, 1, 2]: equal along axis 1 at w=0
    model = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[1]),
                    helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1)],
                   {"x": [1, 2, 1, 2], "d": [1, 8, 1, 2], "i": [1, 3, 1, 1]}, {"y": [1, 2, 1, 2], "g": [1, 3, 1, 1]})
    model.graph.input[2].type.tensor_type.elem_type = TensorProto.INT64
    inputs = {"x": x, "d": np.arange(16, dtype=np.float32).reshape(1, 8, 1, 2),
              "i": np.array([1, 7, 0], np.int64).reshape(1, 3, 1, 1)}
    assert np.isnan(onnxruntime_outputs(model, inputs)["y"]).any()      # the reference's 0/0
    assert check(model, inputs).kind == "reference-wrong", check(model, inputs)     # onnxruntime's, not aot's


def test_lrn_where_onnx_reference_is_the_reference():
    """Seed 23, graph 4247: onnxruntime could not load the graph (its inference counts a ceil_mode pool's
    dropped window), so ONNX's reference judged it, and its LRN normalizes channel 0 only (it loops over
    the batch axis): aot's right LRN was called wrong by 7.6e-4. aot's evaluator corrects that op. An
    even size, which onnxruntime refuses, takes the same path."""
    model = _model([helper.make_node("LRN", ["x"], ["y"], alpha=0.3, beta=0.75, bias=1.5, size=2)],
                   {"x": [1, 6, 2, 2]}, {"y": [1, 6, 2, 2]}, opset=21)
    x = np.random.default_rng(4247).standard_normal((1, 6, 2, 2)).astype(np.float32)
    assert check(model, {"x": x}).kind == "pass", check(model, {"x": x})
    squares = x.astype(np.float64) ** 2
    window = squares + np.concatenate([squares[:, 1:], np.zeros_like(squares[:, :1])], axis=1)   # c and c + 1
    np.testing.assert_allclose(aot.run(model, {"x": x})["y"], x / (1.5 + 0.15 * window) ** 0.75, rtol=1e-5)


@pytest.mark.parametrize("rank", [3, 5])
def test_global_max_pool_where_onnx_reference_judges(rank):
    """Seed 29, graph 6127: onnxruntime could not load the graph (a ceil_mode pool), ONNX's reference
    judged it, and its GlobalMaxPool reduces the right axes of a 4-D input only: a 3-D one came out
    [1, 1] for [1, 3, 1], and aot's right shape was called wrong. aot's evaluator corrects that op."""
    from aot.graph.evaluate import reference_evaluator

    shape = (2, 3, 4, 5, 2)[:rank]
    model = _model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], {"x": list(shape)},
                   {"y": [2, 3] + [1] * (rank - 2)})
    x = np.random.default_rng(6127).standard_normal(shape).astype(np.float32)
    want = x.max(axis=tuple(range(2, rank)), keepdims=True)
    np.testing.assert_array_equal(reference_evaluator(model).run(None, {"x": x})[0], want)
    np.testing.assert_array_equal(aot.run(model, {"x": x})["y"], want)


def test_l2_normalization_of_a_single_element_is_exactly_one():
    """Seed 31, graph 9099: LpNormalization over an axis of one element is x / |x| = ±1 exactly, as
    onnxruntime divides. aot multiplied by 1 / |x|, a step off at times (1 - 2^-24); a Conv, Resize and
    MatMul after it cancel to exactly 0 in onnxruntime and float64, and aot's 6.9e-8 was past any bound
    relative to 0. aot divides now."""
    model = _model([helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=2)], {"x": [1, 1, 4, 3]},
                   {"y": [1, 1, 4, 3]})
    magnitudes = 10.0 ** np.arange(-6, 6).reshape(4, 3)
    x = (np.random.default_rng(9099).standard_normal((1, 1, 4, 3)) * magnitudes).astype(np.float32)
    np.testing.assert_array_equal(aot.run(model, {"x": x})["y"], np.sign(x))


def test_arbitration_through_a_gather_elements_with_short_indices():
    """Seed 41, graph 138: MeanVarianceNormalization of GatherElements(data [1, 3, 5, 7], indices
    [1, 3, 1, 2]) picking one value thrice: onnxruntime's variance is not 0 there (-1 where the exact
    value is 0, as aot gives). The float64 arbitration could not run onnx.reference's GatherElements, which
    refuses indices shorter than the data off the axis (onnxruntime takes them); corrected in aot's
    evaluator, the arbitration says aot is right."""
    model = _model([helper.make_node("GatherElements", ["x", "i"], ["g"], axis=1),
                    helper.make_node("MeanVarianceNormalization", ["g"], ["y"], axes=[1])],
                   {"x": [1, 3, 5, 7], "i": [1, 3, 1, 2]}, {"y": [1, 3, 1, 2]})
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.INT64
    x = np.random.default_rng(138).standard_normal((1, 3, 5, 7)).astype(np.float32)
    indices = np.array([2, 0, 2, 0, 2, 0], np.int64).reshape(1, 3, 1, 2)     # column 0 reads channel 2 thrice
    outcome = check(model, {"x": x, "i": indices})
    assert outcome.kind == "reference-wrong", outcome       # onnxruntime is the one off, by the float64 value
