"""int8 models quantized by onnxruntime's own tools (QDQ and QOperator, per-tensor and per-channel),
compiled to integer kernels and compared with onnxruntime running the same quantized model."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import recurrent_models
import zoo
from onnxruntime.quantization import QuantType
from quantize import quantize_model

import aot
from aot.graph.node_quant import node_quant
from aot.quantize import quantize as aot_quantize
from aot.registry import op_def


def quantized(model: onnx.ModelProto, tmp_path, fmt: str, per_channel: bool,
              activations: QuantType = QuantType.QInt8) -> str:
    """The model as onnxruntime's documented flow quantizes it (examples/quantize.py), saved."""
    out = tmp_path / f"{fmt}_{int(per_channel)}_{activations.name}.onnx"
    onnx.save(quantize_model(model, fmt, per_channel, activations.name), out)
    return str(out)


def assert_within_one_step(path: str | onnx.ModelProto, target: str = "host"):
    result = aot.check(path, target=target)
    for c in result.comparisons:
        assert c.step > 0, f"{c.output} is not computed by quantized arithmetic"
        assert c.max_abs <= c.step * 1.001, f"{c.output}: max error {c.max_abs} > one step {c.step}"
        if c.size >= 100:       # a fraction says little about a dozen class scores
            assert c.off_by_one <= c.size // 10, f"{c.output}: {c.off_by_one} of {c.size} elements off by one"
    return result


def integer_ops(path: str) -> dict[str, int]:
    """Count of ops compiled as integer kernels (with quantization parameters), by op."""
    artifact = aot.build(path, out_dir=None)
    counts: dict[str, int] = {}
    graph = artifact.program.graph
    for call in artifact.program.calls:
        if node_quant(graph.values, call.node) and not op_def(call.node.op).moves_values:
            counts[call.node.op] = counts.get(call.node.op, 0) + 1
    return counts


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"])
def test_mlperf_tiny_int8(name, fmt, per_channel, tmp_path):
    path = quantized(zoo.ZOO[name](), tmp_path, fmt, per_channel)
    assert_within_one_step(path)


@pytest.mark.parametrize("activations", [QuantType.QInt8, QuantType.QUInt8])
def test_activation_types(activations, tmp_path):
    path = quantized(zoo.resnet8(), tmp_path, "QOperator", True, activations)
    assert_within_one_step(path)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("activations", [QuantType.QInt8, QuantType.QUInt8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_small_mobilenet_v2_int8(fmt, activations, per_channel, tmp_path):
    """Inverted residuals, Relu6 clamps, int8 residual Adds whose sums also feed the next block. On x86
    without VNNI, onnxruntime's default uint8 x int8 kernels saturate pairs of products in its first
    convolution (3 input channels, full-range weights), 7-8 steps off at the output, until the
    reference ran onnxruntime as on ARM (aot.reference)."""
    model = zoo.mobilenet_v2(width=0.35, resolution=48, classes=10)
    assert_within_one_step(quantized(model, tmp_path, fmt, per_channel, activations))


def test_convolutions_and_products_run_in_integers(tmp_path):
    path = quantized(zoo.resnet8(), tmp_path, "QDQ", True)
    counts = integer_ops(path)
    # the residual Adds run as the epilogues of the integer convolutions before them
    assert counts.get("Conv") == 9 and counts.get("Gemm") == 1 and "Add" not in counts, counts
    residuals = [n for n in aot.build(str(path), target="host", out_dir=tmp_path / "b").program.graph.nodes
                 if n.op == "Conv" and len(n.inputs) == 4]
    assert len(residuals) == 3


def test_int8_weights_take_a_quarter_of_the_flash(tmp_path):
    model = zoo.mobilenet_v1()
    plain = {"share_memory": False}         # tensors in bytes of their own: a quarter of the size each
    float_build = aot.build(model, out_dir=tmp_path / "f32", knobs=plain)
    int8_build = aot.build(quantized(model, tmp_path, "QDQ", True), out_dir=tmp_path / "i8", knobs=plain)
    ratio = int8_build.metadata["memory"]["weights"] / float_build.metadata["memory"]["weights"]
    assert 0.2 < ratio < 0.35, ratio
    assert int8_build.plan["workspace_size"] < float_build.plan["workspace_size"] / 3


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_large_int8(name, fmt, tmp_path):
    """x86 onnxruntime by default runs 15 of MobileNetV2's 52 QDQ convolutions and its Adds in float,
    2 steps off at the output after 50 layers; the reference runs them in integers as on ARM."""
    assert_within_one_step(quantized(zoo.ZOO[name](), tmp_path, fmt, True))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7", "cortex-m55", "aarch64", "armv7-neon", "cortex-m0plus",
                                    "x86-64-avx2", "x86-64-avx512"])
@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"])
def test_mlperf_tiny_int8_on_arm(name, target, tmp_path):
    from aot.target import get_target

    tgt = get_target(target)
    if not tgt.run_command and not tgt.runs_natively():
        pytest.skip(f"this CPU lacks {', '.join(tgt.cpu_flags)} and no emulator runs {target}")
    assert_within_one_step(quantized(zoo.ZOO[name](), tmp_path, "QDQ", True), target=target)


def test_integer_inputs_and_outputs_keep_their_dtype_and_document_quantization(tmp_path):
    """A model taking and returning int8 (Dequantize at the input, Quantize at the output): the C API
    keeps int8 and the header gives each tensor's scale and zero point."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(4)
    w = rng.integers(-100, 100, (8, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["yf"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("xz", TensorProto.INT8, [], [3]),
             onnx.numpy_helper.from_array(w, "w"),
             onnx.numpy_helper.from_array(rng.uniform(0.001, 0.01, 8).astype(np.float32), "ws"),
             onnx.numpy_helper.from_array(np.zeros(8, np.int8), "wz"),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.2]),
             helper.make_tensor("yz", TensorProto.INT8, [], [-5])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 3, 6, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 8, 6, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result = aot.check(model, inputs={"x": rng.integers(-128, 127, (1, 3, 6, 7)).astype(np.int8)})
    assert result.outputs["y"].dtype == np.int8
    assert result.comparisons[0].max_abs <= 1
    artifact = aot.build(model, out_dir=tmp_path / "b", name="net")
    header = artifact.header.read_text()
    assert "const int8_t *x;" in header and "int8_t *y;" in header
    assert "#define NET_INPUT_X_SCALE 0.0500000007f" in header and "#define NET_INPUT_X_ZERO_POINT 3" in header
    assert "#define NET_OUTPUT_Y_SCALE 0.200000003f" in header and "#define NET_OUTPUT_Y_ZERO_POINT -5" in header


DOT_INSTRUCTION = {"x86-64-avx512-vnni": "vpdpbusd", "x86-64-avx512": "vpmaddwd", "x86-64-avx2": "vpmaddwd",
                   "aarch64-dotprod": "sdot", "aarch64": "smlal", "armv7-neon": "vmlal.s16", "cortex-m4": "smlad",
                   "cortex-m7": "smlad", "cortex-m55": "vmlava"}


@pytest.mark.parametrize("target", sorted(DOT_INSTRUCTION))
def test_pointwise_convolutions_use_dot_product_instructions(target, tmp_path):
    from aot.codegen.llvm import ModuleBuilder
    from aot.target import get_target

    artifact = aot.build(quantized(zoo.ds_cnn(), tmp_path, "QDQ", True), target=target, out_dir=tmp_path / "b")
    tgt = get_target(target)
    mb = ModuleBuilder("m", tgt)
    for call in artifact.program.calls:
        mb.add_kernel(call.kernel)
    assert DOT_INSTRUCTION[target] in mb.emit_assembly()


@pytest.mark.qemu
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_dot_product_kernels_on_aarch64_dotprod(fmt, tmp_path):
    for name in ("ds_cnn", "fc_autoencoder"):
        assert_within_one_step(quantized(zoo.ZOO[name](), tmp_path, fmt, True), target="aarch64-dotprod")


def _qdq_around(op: str, shape: tuple[int, ...], out_shape: tuple[int, ...] | None = None,
                operands: dict[str, np.ndarray] | None = None, **attrs) -> onnx.ModelProto:
    """x (float) -> QuantizeLinear -> DequantizeLinear -> op -> QuantizeLinear -> DequantizeLinear -> y:
    the op has no integer kernel, so it runs in float between the Dequantize and Quantize kernels."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node(op, ["xf", *(operands or {})], ["yf"], name="middle", **attrs),
             helper.make_node("QuantizeLinear", ["yf", "ys", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"])]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.01]),
             helper.make_tensor("z", TensorProto.INT8, [], [0])]
    inits += [onnx.numpy_helper.from_array(value, name) for name, value in (operands or {}).items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape or shape))],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


NO_INTEGER_KERNEL = {
    "LayerNormalization": ("Normalize", {"operands": {"scale": np.linspace(0.5, 1.5, 8, dtype=np.float32)}}),
    "Resize": ("Resize", {"out_shape": (1, 4, 12, 16), "mode": "nearest",
                          "operands": {"roi": np.zeros(0, np.float32),
                                       "scales": np.array([1, 1, 2, 2], np.float32)}}),
}


@pytest.mark.parametrize("op", sorted(NO_INTEGER_KERNEL))
def test_ops_without_an_integer_kernel_run_in_float_between_quantize_kernels(op, tmp_path):
    kernel_op, attrs = NO_INTEGER_KERNEL[op]
    model = _qdq_around(op, (1, 4, 6, 8), **attrs)
    result = aot.check(model)
    comparison = result.comparisons[0]
    assert comparison.max_abs <= comparison.step * 1.001, comparison
    report = aot.build(model, out_dir=tmp_path / "b").report
    assert f"in float between Dequantize and Quantize: {kernel_op} middle" in report, report


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.1}),
                                      ("HardSwish", {}), ("Relu", {}),
                                      ("Clip", {"operands": {"lo": np.float32(-0.3), "hi": np.float32(0.4)}}),
                                      ("Softmax", {"axis": -1}), ("Softmax", {"axis": 1}),
                                      ("LogSoftmax", {"axis": -1}), ("LogSoftmax", {"axis": 2})])
def test_activations_between_quantize_kernels_run_on_the_integers(op, attrs, tmp_path):
    """An activation a quantizer keeps between Dequantize and Quantize (signed ranges keep Relu and Clip too)
    runs as one kernel from integers to integers: dequantized, the function in float32, quantized."""
    model = _qdq_around(op, (1, 4, 6, 8), **attrs)
    assert_within_one_step(model)
    report = aot.build(model, out_dir=tmp_path / "b").report
    assert "1 integer kernels; 0 in float" in report, report


def _conv_then(clamps: list[tuple[str, tuple[float, ...]]]) -> onnx.ModelProto:
    """A QDQ convolution whose output passes through clamps (Relu, Clip) before its QuantizeLinear, the
    output zero point off zero so that a clamp at 0 changes the integer range."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["wf"]),
             helper.make_node("Conv", ["xf", "wf"], ["t0"], pads=[1, 1, 1, 1], name="conv")]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("ws", TensorProto.FLOAT, [], [0.02]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.03]),
             helper.make_tensor("z", TensorProto.INT8, [], [0]),
             helper.make_tensor("yz", TensorProto.INT8, [], [-20]),
             onnx.numpy_helper.from_array(rng.integers(-60, 60, (6, 4, 3, 3)).astype(np.int8), "wq")]
    for i, (op, bounds) in enumerate(clamps):
        names = []
        for j, bound in enumerate(bounds):
            names.append(f"b{i}_{j}")
            inits.append(helper.make_tensor(names[-1], TensorProto.FLOAT, [], [bound]))
        nodes.append(helper.make_node(op, [f"t{i}", *names], [f"t{i + 1}"]))
    nodes += [helper.make_node("QuantizeLinear", [f"t{len(clamps)}", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("clamps", [[("Relu", ())], [("Clip", (0.0, 1.5))], [("Relu", ()), ("Clip", (-1.0, 0.9))]],
                         ids=["relu", "clip", "relu+clip"])
def test_clamps_before_quantize_fuse_into_the_integer_convolution(clamps, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_conv_then(clamps), path)
    assert integer_ops(str(path)) == {"Conv": 1}
    assert "%yq<1x6x6x6 int8 q0.03/-20>" in aot.build(str(path), out_dir=None).program.graph.dump()
    assert_within_one_step(str(path))


def lane_net() -> onnx.ModelProto:
    """Convolutions whose input channels come in whole groups of 8 (AArch64's lane kernels: SMLAL by element),
    padded and strided, with output channels that leave a tail under a vector, a residual Add and a Gemm."""
    from onnx import helper
    from oracle import make_model

    rng = np.random.default_rng(8)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="ar"),
             helper.make_node("Conv", ["ar", "wb"], ["b"], name="b", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "ar"], ["s"], name="s"),
             helper.make_node("Conv", ["s", "wc", "bc"], ["c"], name="c", strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"], name="f"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="g", transB=1)]
    weights = {"wa": w(24, 16, 3, 3), "ba": w(24), "wb": w(24, 24, 3, 3), "wc": w(13, 24, 1, 1), "bc": w(13),
               "wg": w(5, 13 * 4 * 4), "bg": w(5)}
    return make_model(nodes, {"x": (1, 16, 7, 7)}, {"y": None}, weights)


@pytest.mark.qemu
@pytest.mark.parametrize("activations", [QuantType.QInt8, QuantType.QUInt8])
@pytest.mark.parametrize("target,forms,instructions", [
    # whole vectors of output channels on SMULL/SMLAL2/SADALP, the 13- and 5-channel layers by element
    ("aarch64", "widening8 widening8 lane8 lane8",
     (r"smull\s+v\d+\.8h, v\d+\.8b", r"smlal2\s+v\d+\.8h, v\d+\.16b", r"sadalp\s+v\d+\.4s, v\d+\.8h",
      r"smlal2?\s+v\d+\.4s, v\d+\.[48]h, v\d+\.h\[\d\]")),
    # padded layers too, through init_window; 16 input channels at a time by element (a, g), 24 broadcast (b, c)
    ("aarch64-dotprod", "dot4raw " * 4,
     (r"sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.4b\[\d\]", r"sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.16b")),
    # two pixels x two channels of 8 bytes by SMMLA where the output channels fill vectors, sdot elsewhere
    ("aarch64-i8mm", "matrix8 matrix8 dot4raw dot4raw", (r"smmla\s+v\d+\.4s, v\d+\.16b, v\d+\.16b",
                                                         r"sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.4b\[\d\]")),
    ("x86-64-avx512-vnni", "dot4raw " * 4, (r"vpdpbusd",))])
def test_int8_forms_of_padded_and_strided_layers(target, forms, instructions, activations, tmp_path):
    from aot.codegen.llvm import ModuleBuilder
    from aot.target import get_target

    tgt = get_target(target)
    path = quantized(lane_net(), tmp_path, "QDQ", True, activations)
    artifact = aot.build(path, target=target, out_dir=tmp_path / "b")
    assert {s["node"]: s["workload"].split()[-1] for s in artifact.metadata["schedules"]} == dict(
        zip("abcg", forms.split()))
    mb = ModuleBuilder("m", tgt)
    for call in artifact.program.calls:
        mb.add_kernel(call.kernel)
    assembly = mb.emit_assembly()
    for instruction in instructions:
        assert re.search(instruction, assembly), instruction
    if not tgt.run_command and not tgt.runs_natively():
        pytest.skip(f"this CPU lacks {', '.join(tgt.cpu_flags)}: built and read, not run")
    assert_within_one_step(path, target=target)


@pytest.mark.qemu
@pytest.mark.parametrize("low,form", [(-127, "widening8"), (-128, "lane8")])
def test_widening_products_need_weights_above_minus_128(low, form, tmp_path):
    """SMULL/SMLAL2 add two products in 16 bits, which only fits without -128 * -128: a weight of -128
    takes the by-element form, with uint8 activations flipped to the -128 they can reach, and int8 ones."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (8, 16, 1, 1)).astype(np.int8)
    w[:, :, 0, 0] = low     # every product of a pair at its extreme where the input is too
    for x_type, x_np, x_zp in ((TensorProto.UINT8, np.uint8, 255), (TensorProto.INT8, np.int8, 127)):
        nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
                 helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
                 helper.make_node("Conv", ["xf", "wf"], ["yf"]),
                 helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
        inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
                 helper.make_tensor("xz", x_type, [], [x_zp]),
                 onnx.numpy_helper.from_array(w, "w"),
                 onnx.numpy_helper.from_array(np.full(8, 0.004, np.float32), "ws"),
                 helper.make_tensor("ys", TensorProto.FLOAT, [], [2.0]),
                 helper.make_tensor("yz", TensorProto.INT8, [], [0])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, [1, 16, 3, 5])],
                                  [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 8, 3, 5])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        feeds = {"x": np.full((1, 16, 3, 5), np.iinfo(x_np).min, x_np)}    # -128 as the products see it
        built = aot.build(model, target="aarch64", out_dir=tmp_path / str(x_np.__name__))
        assert [s["workload"].split()[-1] for s in built.metadata["schedules"]] == [form]
        result = aot.check(model, target="aarch64", inputs=feeds)
        assert result.comparisons[0].max_abs == 0, result.comparisons[0]


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "aarch64-dotprod"])
@pytest.mark.parametrize("attrs", [{"pads": [1, 1, 1, 1]}, {"pads": [0, 1, 2, 1], "strides": [2, 2]},
                                   {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, {}])
def test_depthwise_int8_on_aarch64_widens_raw_bytes(target, attrs, tmp_path):
    """AArch64's depthwise form (WideArith): raw activation bytes, 16 channels a load and the 4 left over,
    the zero point through the bias and, where padding clips a window, the table of the taps it keeps;
    int8 activations with weights in [-127, 127] (taps two at a time in 16 bits) and with a -128 weight
    (one at a time), uint8 ones with asymmetric uint8 weights."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(6)
    c = 20
    for x_type, x_np, x_zp, w_type, w_zp, w_low in ((TensorProto.INT8, np.int8, -7, TensorProto.INT8, 0, -127),
                                                    (TensorProto.INT8, np.int8, 9, TensorProto.INT8, 0, -128),
                                                    (TensorProto.UINT8, np.uint8, 131, TensorProto.UINT8, 120, 0)):
        w_np = np.int8 if w_type == TensorProto.INT8 else np.uint8
        info = np.iinfo(w_np)
        weights = rng.integers(w_low, info.max + 1, (c, 1, 3, 3)).astype(w_np)
        weights[0, 0, 0, 0] = w_low
        nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
                 helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
                 helper.make_node("Conv", ["xf", "wf", "b"], ["yf"], group=c, **attrs),
                 helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
        inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
                 helper.make_tensor("xz", x_type, [], [x_zp]),
                 onnx.numpy_helper.from_array(weights, "w"),
                 onnx.numpy_helper.from_array(rng.uniform(0.002, 0.02, c).astype(np.float32), "ws"),
                 onnx.numpy_helper.from_array(np.full(c, w_zp, w_np), "wz"),
                 onnx.numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
                 helper.make_tensor("ys", TensorProto.FLOAT, [], [0.1]),
                 helper.make_tensor("yz", x_type, [], [x_zp // 2])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, [1, c, 9, 11])],
                                  [helper.make_tensor_value_info("y", x_type, None)], inits)
        model = onnx.shape_inference.infer_shapes(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
        built = aot.build(model, target=target, out_dir=tmp_path / f"{x_np.__name__}{w_low}")
        assert [s["workload"].split()[-1] for s in built.metadata["schedules"]] == ["wide16"]
        info = np.iinfo(x_np)
        result = aot.check(model, target=target, inputs={"x": rng.integers(info.min, info.max + 1, (1, c, 9, 11))
                                                         .astype(x_np)})
        assert result.comparisons[0].max_abs <= result.comparisons[0].step, result.comparisons[0]


@pytest.mark.parametrize("target,form", [pytest.param("aarch64", "widening8", marks=pytest.mark.qemu),
                                         pytest.param("aarch64-dotprod", "dot4raw", marks=pytest.mark.qemu),
                                         ("x86-64-avx512-vnni", "dot4raw"),
                                         pytest.param("cortex-m4", "pairs", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("channels,attrs", [
    (3, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),   # an image network's first layer
    (1, {"kernel_shape": [5, 3], "pads": [2, 1, 2, 1]}),
    (3, {"kernel_shape": [3, 5], "strides": [1, 2], "pads": [0, 2, 1, 1]}),
    (2, {"kernel_shape": [2, 2]}),                                             # no padding
])
def test_first_layers_run_by_window_rows(target, form, channels, attrs, tmp_path):
    """A convolution over 1-3 channels reads each window row's kw x C bytes as one tap's channels
    (lower_row_windows): the bytes past the row's end meet zero weights, the zero point comes off through
    the window table where padding clips rows (in the widening on the Arm DSP), and the clipped columns take
    plain integer arithmetic."""
    from onnx import helper
    from oracle import make_model

    from aot.target import get_target

    rng = np.random.default_rng(12)
    kh, kw = attrs["kernel_shape"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs),
             helper.make_node("Relu", ["y"], ["r"], name="relu")]
    model = make_model(nodes, {"x": (1, channels, 17, 29)}, {"r": None},
                       {"w": (rng.standard_normal((16, channels, kh, kw)) * 0.3).astype(np.float32),
                        "b": rng.standard_normal(16).astype(np.float32)})
    for activations in (QuantType.QInt8, QuantType.QUInt8):
        path = quantized(model, tmp_path, "QDQ", True, activations)
        built = aot.build(path, target=target, out_dir=tmp_path / activations.name)
        assert [s["workload"].split()[0] for s in built.metadata["schedules"]] == ["row_windows"]
        assert [s["workload"].split()[-1] for s in built.metadata["schedules"]] == [form]
        if not get_target(target).run_command and not get_target(target).runs_natively():
            continue        # built and read: this CPU lacks the target's instructions
        assert_within_one_step(path, target=target)


@pytest.mark.parametrize("target", ["host", pytest.param("aarch64-dotprod", marks=pytest.mark.qemu),
                                    pytest.param("aarch64", marks=pytest.mark.qemu),
                                    pytest.param("aarch64-i8mm", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("attrs", [
    {"pads": [2, 0, 1, 3], "kernel_shape": [3, 2]},
    {"pads": [1, 2, 1, 2], "dilations": [2, 2], "strides": [1, 2]},
    {"pads": [3, 3, 3, 3]},                          # some windows lie wholly in the padding
    {"pads": [5, 4, 4, 5], "kernel_shape": [2, 3]},  # padding wider than the kernel
])
def test_dot_products_on_raw_bytes_keep_the_zero_point_of_clipped_windows(target, attrs, tmp_path):
    """A padded window skips its taps over the border; the zero point's share of the bias must be that of
    the taps it keeps (DotArith.init_window), in the border tiles, the clipped pixels and the rows."""
    from onnx import helper
    from oracle import make_model

    rng = np.random.default_rng(11)
    kh, kw = attrs.get("kernel_shape", [3, 3])
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)]
    model = make_model(nodes, {"x": (1, 8, 9, 11)}, {"y": None},
                       {"w": (rng.standard_normal((12, 8, kh, kw)) * 0.3).astype(np.float32),
                        "b": rng.standard_normal(12).astype(np.float32)})
    for activations in (QuantType.QInt8, QuantType.QUInt8):
        path = quantized(model, tmp_path, "QDQ", True, activations)
        built = aot.build(path, target=target, out_dir=tmp_path / activations.name)
        forms = {s["workload"].split()[-1] for s in built.metadata["schedules"]}
        assert forms == {"aarch64": {"widening8"}, "aarch64-dotprod": {"dot4raw"},
                         "aarch64-i8mm": {"matrix8"}}[target] if target != "host" \
            else forms <= {"dot4raw", "dot2"}, forms
        assert_within_one_step(path, target=target)


@pytest.mark.qemu
@pytest.mark.parametrize("knobs", [{"mr": 3, "border_tiles": True}, {"mr": 8, "border_tiles": True},
                                   {"mr": 5, "border_tiles": False}])
def test_matrix_multiply_pairs_pixels_and_leaves_none_behind(knobs, tmp_path):
    """SMMLA (MatrixArith) takes two pixels at a time: an odd tile's last pixel pairs with zeros, and so
    does a pixel whose neighbour a border tap does not reach (border tiles) or which runs alone (clipped
    columns); a Gemm's odd row count likewise. int8 and uint8 activations, against onnxruntime."""
    from onnx import helper
    from oracle import make_model

    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 2, 1, 0], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "rows"], ["f"], name="rows"),     # 5 rows for the Gemm
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="gemm", transB=1)]
    model = make_model(nodes, {"x": (1, 16, 5, 11)}, {"y": None},
                       {"w": (rng.standard_normal((8, 16, 3, 3)) * 0.2).astype(np.float32),
                        "b": rng.standard_normal(8).astype(np.float32),
                        "rows": np.array([5, 88], np.int64),
                        "wg": (rng.standard_normal((12, 88)) * 0.1).astype(np.float32),
                        "bg": rng.standard_normal(12).astype(np.float32)})
    for activations in (QuantType.QInt8, QuantType.QUInt8):
        path = quantized(model, tmp_path, "QDQ", True, activations)
        built = aot.build(path, target="aarch64-i8mm", knobs=knobs, out_dir=tmp_path / activations.name)
        assert [s["workload"].split()[-1] for s in built.metadata["schedules"]] == ["matrix8", "matrix8"]
        result = aot.check(path, target="aarch64-i8mm", knobs=knobs)
        for c in result.comparisons:
            assert c.max_abs <= c.step * 1.001, c


def _amx_net():
    """A padded, strided 3x3 convolution to 48 channels (a last block of 16: half a tile pair) over 63
    output pixels (a last tile of 31), a pointwise one to 32, and a Gemm over 5 rows (too few: VNNI)."""
    from onnx import helper
    from oracle import make_model

    rng = np.random.default_rng(17)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 2, 1, 0], kernel_shape=[3, 3],
                              strides=[1, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["p"], name="pw"),
             helper.make_node("Reshape", ["p", "rows"], ["f"], name="rows"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="gemm", transB=1)]
    return make_model(nodes, {"x": (1, 20, 9, 13)}, {"y": None},
                      {"w": (rng.standard_normal((48, 20, 3, 3)) * 0.2).astype(np.float32),
                       "b": rng.standard_normal(48).astype(np.float32),
                       "w2": (rng.standard_normal((32, 48, 1, 1)) * 0.2).astype(np.float32),
                       "rows": np.array([7, 288], np.int64),
                       "wg": (rng.standard_normal((16, 288)) * 0.05).astype(np.float32),
                       "bg": rng.standard_normal(16).astype(np.float32)})


def _emulated_amx_target(tmp_path) -> str:
    """The x86-64-amx target without the AMX instructions (an Ice Lake CPU): its kernels take the same
    tile form with the tile instructions emulated, so any AVX-512 VNNI host runs them."""
    from aot.target import target_text

    text = (target_text("x86-64-amx").replace('"x86-64-amx"', '"x86-64-amx-emulated"')
            .replace('"sapphirerapids"', '"icelake-server"').replace("+amx-tile,+amx-int8,", "")
            .replace('"amx_tile", "amx_int8", ', ""))
    path = tmp_path / "x86-64-amx-emulated.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("activations", [QuantType.QInt8, QuantType.QUInt8])
def test_amx_tiles_compute_what_onnxruntime_does(activations, tmp_path):
    """The AMX form (aot/ops/conv/amx.py) with its tile instructions emulated: im2row with the zero point
    in the padding, the last partial tile of pixels and half-used tile pair of channels, against
    onnxruntime; the Gemm over 5 rows stays on VNNI."""
    from aot.target import get_target

    target = _emulated_amx_target(tmp_path)
    if not get_target(target).runs_natively():
        pytest.skip("this CPU lacks AVX-512 VNNI, which the emulated tiles run on")
    path = quantized(_amx_net(), tmp_path, "QDQ", True, activations)
    built = aot.build(path, target=target, out_dir=tmp_path / "b")
    assert [s["workload"].split()[0] for s in built.metadata["schedules"]] == ["amx", "amx", "dense"]
    result = aot.check(path, target=target)
    for c in result.comparisons:
        assert c.max_abs <= c.step * 1.001, c


def test_amx_build_runs_on_tiles_or_refuses_without_them(tmp_path):
    """The x86-64-amx build: its convolutions' code is the tile instructions (a configuration, loads,
    TDPBUSD, stores, a release), and its wrapper either runs on this CPU (with AMX: checked against
    onnxruntime) or returns MODEL_ERR_CPU before any kernel runs (without: no illegal instruction)."""
    import subprocess

    from aot.codegen.llvm import ModuleBuilder
    from aot.run import local
    from aot.target import get_target, host_cpu_flags

    tgt = get_target("x86-64-amx")
    path = quantized(_amx_net(), tmp_path, "QDQ", True, QuantType.QInt8)
    built = aot.build(path, target="x86-64-amx", out_dir=tmp_path / "b")
    mb = ModuleBuilder("m", tgt)
    for call in built.program.calls:
        mb.add_kernel(call.kernel)
    assembly = mb.emit_assembly()
    for instruction in (r"ldtilecfg", r"tilezero\s+%tmm3", r"tileloadd\s+.*%tmm7",
                        r"tdpbusd\s+%tmm7, %tmm5, %tmm3", r"tilestored\s+%tmm0", r"tilerelease"):
        assert re.search(instruction, assembly), instruction
    header = (built.dir / f"{built.name}.h").read_text()
    assert f"{built.name.upper()}_ERR_CPU (-3)" in header
    if {"amx_tile", "amx_int8"} <= host_cpu_flags():
        assert_within_one_step(path, target="x86-64-amx")
        return
    work = tmp_path / "run"
    work.mkdir()
    (work / "main.c").write_text(local.render_harness(built))
    local.link(tgt, [work / "main.c", built.source], [built.object], built.dir, work / "prog", "the harness")
    for t in aot.codegen.wrapper.io_tensors(built.program)[0]:
        np.zeros(t.size, t.dtype).tofile(work / f"input_{t.index}.bin")
    proc = subprocess.run([str(work / "prog")], cwd=work, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (4, f"harness: {built.name}_run returned -3"), proc


def _quantize_dequantize(scale: float) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]),
             helper.make_tensor("z", TensorProto.INT8, [], [-128])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bits", range(1, 17))
def test_dequantizing_by_a_power_of_two_builds_on_helium(bits, tmp_path):
    """LLVM turns a multiply by 2**-n after an int-to-float conversion into a fixed-point VCVT, whose Helium
    encoding aborted LLVM for n = 4 and 8 (a Softmax output at 1/256 met it); the build must go through."""
    artifact = aot.build(_quantize_dequantize(2.0 ** -bits), target="cortex-m55", out_dir=tmp_path / "b")
    assert artifact.object.stat().st_size > 0


@pytest.mark.qemu
def test_dequantizing_by_a_power_of_two_on_helium_is_right():
    assert_within_one_step(_quantize_dequantize(2.0 ** -8), target="cortex-m55")


def test_an_opset_11_softmax_between_integer_tensors_keeps_its_encoding_through_its_2d_view():
    """Before opset 13 Softmax normalizes the input coerced to 2-D at its axis: the view it runs on must keep
    the integer type and encoding of its output."""
    model = _qdq_around("Softmax", (1, 3, 4, 2), axis=1)
    model.opset_import[0].version = 11
    result = assert_within_one_step(model)
    assert result.ok


def _quantized_recurrent(model: onnx.ModelProto, tmp_path, scheme: str = "int8") -> str:
    """`model` quantized by `aot quantize` (onnxruntime's get_qdq_config, which puts DequantizeLinear on an
    LSTM's weights) on random calibration data."""
    src, out = tmp_path / f"{model.graph.name}.onnx", tmp_path / f"{model.graph.name}_{scheme}.onnx"
    onnx.save(model, src)
    aot_quantize(src, out, allow_random=True, scheme=scheme)
    return str(out)


@pytest.mark.parametrize("scheme", ["int8", "a16w8"])
def test_quantized_recurrent_layers_keep_their_weight_codes(scheme, tmp_path):
    """onnxruntime's quantizer leaves an LSTM in float with dequantized weights: with the `weight_codes`
    knob (the Cortex-M default) the layer reads the codes and dequantizes them as it loads them, in a
    quarter (int8) or half (int16) of the bytes, and computes what onnxruntime does either way."""
    for model in (recurrent_models.lstm_kws(), recurrent_models.crnn()):
        path = _quantized_recurrent(model, tmp_path, scheme)
        weights = {}
        for codes in (False, True):
            result = aot.check(path, knobs={"weight_codes": codes})
            assert result.ok, (path, codes, result.comparisons)
            weights[codes] = aot.build(path, out_dir=None, knobs={"weight_codes": codes}).metadata["memory"]["weights"]
        assert weights[True] < 0.75 * weights[False], (path, weights)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55", "cortex-m0plus"])
def test_quantized_recurrent_layers_on_cortex_m(target, tmp_path):
    assert aot.check(_quantized_recurrent(recurrent_models.crnn(), tmp_path), target=target).ok


@pytest.mark.parametrize("case", ["test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_3D_int8_float32"])
def test_qlinear_matmul_of_two_computed_tensors_is_one_integer_kernel(case):
    """ONNX's own QLinearMatMul tests (scales and zero points frozen: the tests feed them): one integer
    MatMul kernel, equal to the stored outputs."""
    from onnx.backend.test.case.node import collect_testcases

    (test,) = [c for c in collect_testcases("QLinearMatMul") if c.name == case]
    (inputs, (expected,)), = test.data_sets[:1]
    feeds = {vi.name: v for vi, v in zip(test.model.graph.input, inputs)}
    frozen = {k: v for k, v in feeds.items() if k not in ("a", "b")}
    program = aot.build(test.model, freeze=frozen, out_dir=None).program
    assert [c.node.op for c in program.calls] == ["MatMul"]
    assert node_quant(program.graph.values, program.calls[0].node) is not None
    (got,) = aot.run(test.model, inputs={"a": feeds["a"], "b": feeds["b"]}, freeze=frozen).values()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["Slice", "Split"])
def test_slices_and_splits_of_one_encoding_move_the_integers(op, tmp_path):
    """A Slice or a Split between Dequantize and Quantize of the input's own encoding (what onnxruntime's
    quantizer writes for GhostNet's and ViT's) moves the int8 codes: no float tensor, no Dequantize or
    Quantize kernel, the codes onnxruntime's float Slice and Quantize give, exactly."""
    from onnx import TensorProto, helper

    outs = ["a", "b"] if op == "Split" else ["a"]
    middle = (helper.make_node("Split", ["xf", "parts"], ["af", "bf"], axis=1) if op == "Split" else
              helper.make_node("Slice", ["xf", "starts", "ends", "axes"], ["af"]))
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]), middle]
    nodes += [helper.make_node("QuantizeLinear", [f"{o}f", "s", "z"], [o]) for o in outs]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z", TensorProto.INT8, [], [-3]),
             onnx.numpy_helper.from_array(np.array([2, 4], np.int64), "parts"),
             onnx.numpy_helper.from_array(np.array([1], np.int64), "starts"),
             onnx.numpy_helper.from_array(np.array([5], np.int64), "ends"),
             onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")]
    shape = {"a": [1, 2 if op == "Split" else 4, 5, 3], "b": [1, 4, 5, 3]}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 6, 5, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.INT8, shape[o]) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    artifact = aot.build(model, out_dir=tmp_path / "b")
    assert {call.node.op for call in artifact.program.calls} <= {"Slice"}, artifact.report
    x = np.random.default_rng(0).integers(-128, 128, (1, 6, 5, 3)).astype(np.int8)
    import onnxruntime as ort
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = aot.run(model, inputs={"x": x})
    for name, want in zip(outs, expected):
        np.testing.assert_array_equal(got[name], want)
