"""int16 activations with int8 weights (a16w8, TFLite's 16x8 mode): float models quantized so by onnxruntime's
quantizer, compiled to integer kernels on int16 tensors, and compared with onnxruntime running the same QDQ
model (which computes each op in float between its Dequantize and Quantize nodes)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper
from quantize import quantize_model
from test_quantized import integer_ops

import aot


def a16w8(model: onnx.ModelProto, tmp_path, name: str = "a16w8") -> str:
    path = tmp_path / f"{name}.onnx"
    onnx.save(quantize_model(model, "QDQ", per_channel=True, activations="QInt16"), path)
    return str(path)


def one_op(nodes: list, inputs: dict[str, tuple], output_shape: tuple, weights: dict[str, np.ndarray]) \
        -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))],
        [numpy_helper.from_array(v, n) for n, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def rng(*seed: int) -> np.random.Generator:
    """A generator of its own for each use, so that a model's weights do not depend on the tests run before."""
    return np.random.default_rng([16, *seed])


def assert_checks(path: str, target: str = "host") -> None:
    """Every output computed in integers and within one step of onnxruntime, or, where a difference of
    one step inside the model grows over the layers after it, aot right at the first node that differs
    (evaluated in float64: aot.arbitrate)."""
    result = aot.check(path, target=target)
    assert all(c.step > 0 for c in result.comparisons), result.comparisons
    assert result.ok, (result.comparisons, result.arbitration)


def int16_ops(path: str) -> set[str]:
    """The ops of the compiled program that read an int16 tensor."""
    program = aot.build(path, out_dir=None).program
    return {call.node.op for call in program.calls
            if any(name and program.graph.values[name].dtype == "int16" for name in call.node.inputs)}


def after_matrix(node, shape: tuple, output_shape: tuple, more: list = ()) -> onnx.ModelProto:
    """x -> a 1x1 convolution (or a MatMul, for 2-D x) -> `node` reading "t" [-> `more`]: onnxruntime's
    quantizer leaves ops such as Clip and AveragePool in float unless something quantized feeds them."""
    channels = shape[1] if len(shape) == 4 else shape[-1]
    front = (helper.make_node("Conv", ["x", "wf"], ["t"]) if len(shape) == 4
             else helper.make_node("MatMul", ["x", "wf"], ["t"]))
    wf = _w(channels, channels, 1, 1) if len(shape) == 4 else _w(channels, channels)
    extra = {name: value for name, value in CONSTANTS.items() if any(name in n.input for n in [node, *more])}
    if more:
        node.output[0] = "p"
        more[-1].output[0] = "y"
    return one_op([front, node, *more], {"x": shape}, output_shape, {"wf": wf, **extra})


def _w(*shape, scale=0.3):
    return (rng(*shape).standard_normal(shape) * scale).astype(np.float32)


def after_pool(node) -> onnx.ModelProto:
    """x -> a 1x1 convolution -> MaxPool -> `node` reading "p": an activation that does not follow a
    convolution runs as a kernel of its own."""
    return after_matrix(helper.make_node("MaxPool", ["t"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                        (1, 8, 6, 6), (1, 8, 3, 3), [node])


CONSTANTS = {"lo": np.float32(-0.5), "hi": np.float32(1.0)}

# op under test -> (model, the aot op that must run on integers)
MODELS = {
    "conv": (lambda: one_op([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])],
                            {"x": (1, 8, 9, 10)}, (1, 16, 5, 10), {"w": _w(16, 8, 3, 3), "b": _w(16)}), "Conv"),
    "depthwise": (lambda: one_op([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], group=8)],
                                 {"x": (1, 8, 7, 7)}, (1, 8, 8, 6), {"w": _w(8, 1, 3, 3), "b": _w(8)}), "Conv"),
    "gemm": (lambda: one_op([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                            {"x": (1, 40)}, (1, 12), {"w": _w(12, 40), "b": _w(12)}), "Gemm"),
    "matmul": (lambda: one_op([helper.make_node("MatMul", ["x", "w"], ["y"])],
                              {"x": (3, 24)}, (3, 10), {"w": _w(24, 10)}), "Gemm"),
    "add": (lambda: one_op([helper.make_node("Add", ["x", "x2"], ["y"])],
                           {"x": (1, 4, 5, 6), "x2": (1, 4, 5, 6)}, (1, 4, 5, 6), {}), "Add"),
    "mul": (lambda: one_op([helper.make_node("Mul", ["x", "x2"], ["y"])],
                           {"x": (1, 4, 5, 6), "x2": (1, 1, 5, 6)}, (1, 4, 5, 6), {}), "Mul"),
    "average_pool": (lambda: after_matrix(helper.make_node("AveragePool", ["t"], ["y"], kernel_shape=[3, 3],
                                                           strides=[2, 2], pads=[1, 1, 1, 1]),
                                          (1, 8, 9, 9), (1, 8, 5, 5)), "AveragePool"),
    "global_pool": (lambda: after_matrix(helper.make_node("GlobalAveragePool", ["t"], ["y"]),
                                         (1, 8, 6, 6), (1, 8, 1, 1)), "GlobalAveragePool"),
    "max_pool": (lambda: after_matrix(helper.make_node("MaxPool", ["t"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
                                      (1, 8, 6, 6), (1, 8, 3, 3)), "MaxPool"),
    "sigmoid": (lambda: after_pool(helper.make_node("Sigmoid", ["p"], ["y"])), "Unary"),
    "clip": (lambda: after_pool(helper.make_node("Clip", ["p", "lo", "hi"], ["y"])), "Unary"),
    "relu": (lambda: after_pool(helper.make_node("Relu", ["p"], ["y"])), "Unary"),
    "softmax": (lambda: after_pool(helper.make_node("Softmax", ["p"], ["y"], axis=1)), "Softmax"),
    "softmax_last": (lambda: after_pool(helper.make_node("Softmax", ["p"], ["y"], axis=-1)), "Softmax"),
}


@pytest.mark.parametrize("op", sorted(MODELS))
def test_each_op_runs_on_int16_within_one_step_of_onnxruntime(op, tmp_path):
    build, aot_op = MODELS[op]
    path = a16w8(build(), tmp_path)
    assert_checks(path)
    assert aot_op in int16_ops(path), f"{aot_op} does not run on int16"


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55"])
@pytest.mark.parametrize("op", sorted(MODELS))
def test_each_op_on_int16_on_cortex_m(op, target, tmp_path):
    assert_checks(a16w8(MODELS[op][0](), tmp_path), target=target)


@pytest.mark.parametrize("activation", [("Relu", ()), ("Sigmoid", ()), ("Clip", ("lo", "hi"))])
@pytest.mark.parametrize("residual", [False, True])
def test_activations_after_a_convolution_run_in_its_epilogue(activation, residual, tmp_path):
    """Conv [-> Add of another tensor] -> Relu/Sigmoid/Clip, each between Quantize and Dequantize as the
    quantizer leaves them under symmetric ranges: one kernel, the activation applied to the convolution's
    integer result (after the residual) exactly as its own kernel would."""
    op, bounds = activation
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             *([helper.make_node("Add", ["c", "x"], ["s"])] if residual else []),
             helper.make_node(op, ["s" if residual else "c", *bounds], ["y"])]
    model = one_op(nodes, {"x": (1, 8, 6, 6)}, (1, 8, 6, 6),
                   {"w": _w(8, 8, 3, 3), "b": _w(8), **{n: CONSTANTS[n] for n in bounds}})
    path = a16w8(model, tmp_path)
    assert_checks(path)
    program = aot.build(path, out_dir=None).program
    ops = [c.node.op for c in program.calls]
    assert ops == ["Quantize", "Conv", "Dequantize"], ops
    (conv,) = [c.node for c in program.calls if c.node.op == "Conv"]
    assert conv.attrs["function"][0] == op.lower() and ("own_result" in conv.attrs) == residual


def _convolutions() -> onnx.ModelProto:
    """Convolutions the int16 kernels of each target take in their different forms: padded and strided windows,
    channel counts that do not fill a vector (5, 12), a dilated one, a depthwise one, a fully connected one."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], pads=[0, 1, 2, 1], strides=[2, 1]),
             helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], pads=[2, 2, 2, 2], dilations=[2, 2]),
             helper.make_node("Conv", ["c3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], group=12),
             helper.make_node("Relu", ["c4"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w5", "b5"], ["y"], transB=1)]
    weights = {"w1": _w(12, 5, 3, 3), "b1": _w(12), "w2": _w(12, 12, 3, 3), "b2": _w(12),
               "w3": _w(12, 12, 3, 3, scale=0.2), "b3": _w(12), "w4": _w(12, 1, 3, 3), "b4": _w(12),
               "w5": _w(7, 12), "b5": _w(7)}
    return one_op(nodes, {"x": (1, 5, 11, 9)}, (1, 7), weights)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m4", "cortex-m7", "aarch64", "armv7-neon"])
def test_int16_convolution_forms_on_arm(target, tmp_path):
    assert_checks(a16w8(_convolutions(), tmp_path), target=target)


def test_int16_convolution_forms_on_the_host(tmp_path):
    assert_checks(a16w8(_convolutions(), tmp_path))


def _signs(seed: int, shape: tuple) -> np.ndarray:
    return np.where(rng(seed).random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


@pytest.mark.parametrize("target", ["host", *(pytest.param(t, marks=pytest.mark.qemu)
                                              for t in ("cortex-m4", "cortex-m55", "cortex-m0plus", "aarch64"))])
def test_sums_that_could_overflow_int32_run_in_int64(target, tmp_path):
    """Weights of +-1 (int8 codes +-127) over 1024 inputs (a MatMul) or 64 channels x 5x5 taps (a
    convolution), fed int16 activations near their calibrated maximum with the signs of one output's
    weights: that sum passes int32 (wrapped, it would come out at the wrong end of the range). Such nodes
    still run on integers, summed in int64, within a step of onnxruntime."""
    w = _signs(1, (1024, 8))
    gemm = one_op([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": (1, 1024)}, (1, 8), {"w": w})
    gemm_feed = {"x": 3.0 * w[None, :, 0]}
    k = _signs(2, (16, 64, 5, 5))
    conv = one_op([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[2, 2, 2, 2])],
                  {"x": (1, 64, 6, 7)}, (1, 16, 6, 7), {"w": k})
    conv_feed = np.zeros((1, 64, 6, 7), np.float32)
    conv_feed[0, :, 1:6, 1:6] = 3.0 * k[0]          # the window of output pixel (3, 3), signed as channel 0
    for name, model, feed, op in (("gemm", gemm, gemm_feed, "Gemm"), ("conv", conv, {"x": conv_feed}, "Conv")):
        path = a16w8(model, tmp_path, name)
        assert integer_ops(path).get(op), name
        result = aot.check(path, inputs=feed, target=target)
        assert all(c.step > 0 for c in result.comparisons), result.comparisons
        assert result.ok, (name, result.comparisons, result.arbitration)


@pytest.mark.parametrize("name", ["ds_cnn", "resnet8", "mobilenet_v1", "fc_autoencoder"])
def test_mlperf_tiny_a16w8(name, tmp_path):
    assert_checks(a16w8(zoo.ZOO[name](), tmp_path))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55", "cortex-m0plus", "aarch64", "armv7-neon"])
@pytest.mark.parametrize("name", ["ds_cnn", "resnet8"])
def test_a16w8_on_arm(name, target, tmp_path):
    assert_checks(a16w8(zoo.ZOO[name](), tmp_path), target=target)


@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def test_int16_inputs_and_outputs_reach_the_caller_as_int16(target, tmp_path):
    """A model that takes and returns int16 codes (its input's QuantizeLinear and output's DequantizeLinear
    cut away): int16_t in the header with SCALE and ZERO_POINT, the codes within a step of onnxruntime's."""
    model = onnx.load(a16w8(MODELS["conv"][0](), tmp_path))
    graph = model.graph
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    dq = next(n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    graph.node.remove(q)
    graph.node.remove(dq)
    graph.input[0].CopyFrom(helper.make_tensor_value_info(q.output[0], TensorProto.INT16, [1, 8, 9, 10]))
    graph.output[0].CopyFrom(helper.make_tensor_value_info(dq.input[0], TensorProto.INT16, [1, 16, 5, 10]))
    codes = rng(3).integers(-20000, 20000, (1, 8, 9, 10)).astype(np.int16)
    result = aot.check(model, inputs={q.output[0]: codes}, target=target)
    assert result.ok and all(c.max_abs <= c.step for c in result.comparisons), result.comparisons
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b")
    header = (tmp_path / "b" / f"{artifact.name}.h").read_text()
    assert "const int16_t *" in header and "_ZERO_POINT 0" in header
