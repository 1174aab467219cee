"""The float64 evaluation the arbiter and the fuzzer judge aot by (aot.graph.widen): every op ONNX defines
as a function evaluates in float64, constants of its function body included, and gives what the op's
definition gives on degenerate inputs (groups of equal values, zeros, infinities), against the definition
written out in numpy in float64. Then the graph the fuzzer reduced this to: MeanVarianceNormalization over
a channel of equal values, where onnxruntime's 0/0 is NaN and aot's 0 is the definition's value."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
from aot.graph.evaluate import reference_evaluator
from aot.graph.widen import BODIES, widen_model

SHAPE = (1, 4, 2, 5)


def f32(value: float) -> float:
    """A float attribute's value as the model holds it: every ONNX float attribute is float32."""
    return float(np.float32(value))


erf = np.vectorize(math.erf)


def _model(op: str, attrs: dict, opset: int, extra: dict | None = None) -> onnx.ModelProto:
    extra = extra or {}
    inputs = ["x", *extra]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[onnx.numpy_helper.from_array(v, k) for k, v in extra.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _float64(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(reference_evaluator(widen_model(model)).run(None, {"x": x.astype(np.float64)})[0])


def _mvn(x):
    centred = x - x.mean(axis=(2, 3), keepdims=True)
    return centred / (np.sqrt((centred ** 2).mean(axis=(2, 3), keepdims=True)) + 1e-9)


def _layer_norm(x, axes, eps):
    centred = x - x.mean(axis=axes, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(axis=axes, keepdims=True) + eps)


def _softplus(x):
    return np.log(np.exp(x) + 1)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


GAMMA, BETA = np.ones(5, np.float32), np.zeros(5, np.float32)
GROUP_SCALE, GROUP_BIAS = np.ones(4, np.float32), np.zeros(4, np.float32)
SLOPE = np.full((1, 4, 1, 1), 0.25, np.float32)
# op, attributes, opset, extra inputs (initializers), the definition in float64
FUNCTION_OPS = [
    ("MeanVarianceNormalization", {}, 13, None, _mvn),
    ("MeanVarianceNormalization", {"axes": [2, 3]}, 9, None, _mvn),
    ("LayerNormalization", {"axis": -1, "epsilon": 1e-5}, 17, {"g": GAMMA, "b": BETA},
     lambda x: _layer_norm(x, (-1,), f32(1e-5))),
    ("GroupNormalization", {"num_groups": 2, "epsilon": 1e-5}, 21, {"s": GROUP_SCALE, "b": GROUP_BIAS},
     lambda x: _layer_norm(x.reshape(1, 2, 2, 2, 5), (2, 3, 4), f32(1e-5)).reshape(SHAPE)),
    ("RMSNormalization", {"axis": -1, "epsilon": 1e-5}, 23, {"g": GAMMA},
     lambda x: x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + f32(1e-5))),
    ("Gelu", {}, 20, None, lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
    ("Gelu", {"approximate": "tanh"}, 20, None,
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("HardSwish", {}, 14, None, lambda x: x * np.clip(f32(1 / 6) * x + 0.5, 0, 1)),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 6, None, lambda x: np.clip(f32(0.3) * x + f32(0.4), 0, 1)),
    ("Mish", {}, 18, None, lambda x: x * np.tanh(_softplus(x))),
    ("Celu", {"alpha": 1.5}, 12, None, lambda x: np.maximum(0, x) + np.minimum(0, 1.5 * (np.exp(x / 1.5) - 1))),
    ("Elu", {"alpha": 0.7}, 6, None, lambda x: np.where(x < 0, f32(0.7) * (np.exp(x) - 1), x)),
    ("Selu", {}, 6, None,
     lambda x: f32(1.0507009873554805) * np.where(x <= 0, f32(1.6732632423543772) * (np.exp(x) - 1), x)),
    ("LeakyRelu", {"alpha": 0.1}, 16, None, lambda x: np.where(x < 0, f32(0.1) * x, x)),
    ("PRelu", {}, 16, {"slope": SLOPE}, lambda x: np.where(x < 0, 0.25 * x, x)),
    ("Relu", {}, 14, None, lambda x: np.maximum(x, 0)),
    ("Softplus", {}, 1, None, _softplus),
    ("Softsign", {}, 1, None, lambda x: x / (1 + np.abs(x))),
    ("ThresholdedRelu", {"alpha": 0.5}, 10, None, lambda x: np.where(x > 0.5, x, 0)),
    ("Shrink", {"lambd": 0.5, "bias": 0.2}, 9, None,
     lambda x: np.where(x < -0.5, x + f32(0.2), np.where(x > 0.5, x - f32(0.2), 0))),
    ("Softmax", {"axis": -1}, 13, None, _softmax),
    ("LogSoftmax", {"axis": -1}, 13, None, lambda x: np.log(_softmax(x))),
    ("ReduceL1", {"keepdims": 1}, 18, {"axes": np.array([3], np.int64)},
     lambda x: np.abs(x).sum(axis=3, keepdims=True)),
    ("ReduceL2", {"keepdims": 1}, 18, {"axes": np.array([3], np.int64)},
     lambda x: np.sqrt((x ** 2).sum(axis=3, keepdims=True))),
    ("ReduceSumSquare", {"keepdims": 1}, 18, {"axes": np.array([3], np.int64)},
     lambda x: (x ** 2).sum(axis=3, keepdims=True)),
    ("ReduceLogSum", {"keepdims": 1}, 18, {"axes": np.array([3], np.int64)},
     lambda x: np.log(x.sum(axis=3, keepdims=True))),
    ("ReduceLogSumExp", {"keepdims": 1}, 18, {"axes": np.array([3], np.int64)},
     lambda x: np.log(np.exp(x).sum(axis=3, keepdims=True))),
]

DEGENERATE = {
    "equal values": np.full(SHAPE, -1.1558464, np.float32),
    "zeros": np.zeros(SHAPE, np.float32),
    "infinities": np.where(np.arange(np.prod(SHAPE)).reshape(SHAPE) % 3 == 0, np.inf,
                           np.where(np.arange(np.prod(SHAPE)).reshape(SHAPE) % 3 == 1, -np.inf, 0.5)
                           ).astype(np.float32),
    "some infinities": np.where(np.arange(np.prod(SHAPE)).reshape(SHAPE) == 7, np.inf,
                                np.linspace(-3, 3, np.prod(SHAPE)).reshape(SHAPE)).astype(np.float32),
}


@pytest.mark.parametrize("inputs", list(DEGENERATE))
@pytest.mark.parametrize("op, attrs, opset, extra, definition", FUNCTION_OPS,
                         ids=[f"{o[0]}-{o[2]}" + ("-tanh" if o[1].get("approximate") else "") for o in FUNCTION_OPS])
def test_function_ops_in_float64_on_degenerate_inputs(op, attrs, opset, extra, definition, inputs):
    x = DEGENERATE[inputs]
    got = _float64(_model(op, attrs, opset, extra), x)
    assert got.dtype == np.float64
    with np.errstate(all="ignore"):
        want = definition(x.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op} on {inputs}: NaN where")
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12, err_msg=f"{op} on {inputs}")


def test_a_function_body_with_float_constants_is_widened():
    """HardSwish and Mish, which onnx.reference runs through their schema's function body, are called as
    that body in float64; with aot's MeanVarianceNormalization taken out of the way, so is MVN's body,
    whose float32 epsilon stopped a float64 evaluation ('Input type mismatch: float64 != float32')."""
    for op, opset in (("HardSwish", 14), ("Mish", 18)):
        wide = widen_model(_model(op, {}, opset))
        assert [n.domain for n in wide.graph.node] == [BODIES]
        assert [f.name for f in wide.functions] == [f"{op}_{opset}"]
    from onnx.reference import ReferenceEvaluator

    from aot.graph import widen
    x = np.random.default_rng(0).standard_normal(SHAPE)
    mvn = _model("MeanVarianceNormalization", {}, 13)
    with pytest.raises(Exception, match="float64 != float32"):
        ReferenceEvaluator(mvn).run(None, {"x": x})
    corrected, widen._CORRECTED = widen._CORRECTED, set()
    try:
        wide = widen_model(mvn)
    finally:
        widen._CORRECTED = corrected
    body = wide.functions[0]
    constants = [n for n in body.node if n.op_type == "Constant"]
    assert constants and all(a.t.data_type != TensorProto.FLOAT for n in constants for a in n.attribute)
    got = ReferenceEvaluator(wide).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _mvn(x), rtol=1e-12)


def mvn_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The differential fuzzer's graph (seed 90210 on armv7-neon), reduced: its first channel ten equal
    values."""
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[2, 3])
    graph = helper.make_graph([node], "mvn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    x[0, 0] = np.float32(-1.1558464)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), {"x": x}


@pytest.mark.parametrize("target", ["host", pytest.param("armv7-neon", marks=pytest.mark.qemu)])
def test_mvn_of_equal_values_arbitrated_for_aot(target):
    """onnxruntime computes 0/0 = NaN for the equal channel; the definition adds 1e-9 and gives 0, as aot
    does. `aot run` passes, saying onnxruntime gives NaN there; the fuzzer calls it reference-wrong."""
    from fuzz_check import check
    model, inputs = mvn_model()
    result = aot.check(model, inputs=inputs, target=target)
    (c,) = result.comparisons
    assert not c.ok and c.unmatched == 10 and c.reference_nans == 10
    assert result.ok and result.arbitration is not None
    (verdict,) = result.arbitration.verdicts
    assert verdict.aot_wins and verdict.reference_nans == 10 and verdict.size == 40
    assert np.all(result.outputs["y"][0, 0] == 0)
    outcome = check(model, inputs, target)
    assert outcome.kind == "reference-wrong", outcome


def test_a_nan_reference_does_not_pass_a_wrong_output():
    """Where the reference is NaN, aot is still held to the float64 value: an output off everywhere else
    is wrong, not excused by the reference's infinite error."""
    from fuzz_check import compare
    model, inputs = mvn_model()
    reference = {"y": _mvn(inputs["x"].astype(np.float64)).astype(np.float32)}
    reference["y"][0, 0] = np.nan
    off = {"y": np.zeros(SHAPE, np.float32)}
    assert compare(model, inputs, off, reference).kind == "wrong"
    right = {"y": _mvn(inputs["x"].astype(np.float64)).astype(np.float32)}
    assert compare(model, inputs, right, reference).kind == "reference-wrong"


def test_a_layer_norm_with_its_stash_type_written_out_evaluates_in_float64():
    """The dynamo exporter writes LayerNormalization's stash_type=1 (float) explicitly. onnx.reference's
    LayerNormalization computes in its input's type and takes no other stash_type, so the widened node keeps
    it (a float64 stash_type stopped the arbitration of int8 ViTs at their first LayerNorm)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8))
    scale, bias = rng.standard_normal(8), rng.standard_normal(8)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5,
                            stash_type=TensorProto.FLOAT)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              [onnx.numpy_helper.from_array(scale.astype(np.float32), "s"),
                               onnx.numpy_helper.from_array(bias.astype(np.float32), "b")])
    wide = widen_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    from onnx.reference import ReferenceEvaluator

    got = ReferenceEvaluator(wide).run(None, {"x": x})[0]
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + np.float64(np.float32(1e-5))) * scale.astype(np.float32) \
        + bias.astype(np.float32)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12)
