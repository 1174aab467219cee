"""int8 convolutions as dot products along window rows (aot/ops/conv_rows.py): Helium (VMLADAVA.S8,
predicated loads for borders and row tails) and 32-bit NEON (VMULL.S8/VMLAL.S8 + VPADAL.S16). Edge
shapes against onnxruntime under qemu, and the instructions in the assembly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper
from quantize import quantize_model

import aot
from aot.codegen.llvm import ModuleBuilder
from aot.target import get_target


def qdq_conv(c: int, m: int, hw: tuple[int, int], kernel: tuple[int, int], group: int = 1, seed: int = 0,
             **attrs) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """int8 x -> Dequantize -> Conv (per-channel int8 weights, int32 bias) -> Quantize -> int8 y."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (m, c // group, *kernel)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, m).astype(np.float32)
    bias = rng.integers(-2000, 2000, m).astype(np.int32)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], group=group, **attrs),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("xz", TensorProto.INT8, [], [-7]),
             onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(w_scale, "ws"),
             onnx.numpy_helper.from_array(np.zeros(m, np.int8), "wz"),
             onnx.numpy_helper.from_array(bias, "b"), onnx.numpy_helper.from_array(w_scale * np.float32(0.05), "bs"),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.1]),
             helper.make_tensor("yz", TensorProto.INT8, [], [3])]
    x = helper.make_tensor_value_info("x", TensorProto.INT8, [1, c, *hw])
    y = helper.make_tensor_value_info("y", TensorProto.INT8, None)
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    return model, {"x": rng.integers(-128, 128, (1, c, *hw)).astype(np.int8)}


# (input channels, output channels, input size, kernel, attributes): row lengths under, at and over a
# vector (16 bytes), tails, padding on every side, strides, dilation, 1x1 and depthwise.
CASES = {
    "3x3 c16 pad": (16, 8, (7, 9), (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3 c3 pad stride2": (3, 6, (9, 8), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3 c17 asym pad": (17, 5, (6, 7), (3, 3), {"pads": [0, 2, 1, 0]}),
    "1x1 c24": (24, 12, (5, 5), (1, 1), {}),
    "1x1 c8 stride2": (8, 16, (6, 6), (1, 1), {"strides": [2, 2]}),
    "3x2 c9 dilated": (9, 7, (8, 9), (3, 2), {"pads": [2, 1, 2, 1], "dilations": [2, 2]}),
    "depthwise 3x3 c12 pad": (12, 12, (6, 7), (3, 3), {"pads": [1, 1, 1, 1], "group": 12}),
    "depthwise 3x3 c6 stride2": (6, 6, (7, 7), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 6}),
}


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m55", "armv7-neon"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_shapes_match_onnxruntime(case, target):
    c, m, hw, kernel, attrs = CASES[case]
    attrs = dict(attrs)
    model, feeds = qdq_conv(c, m, hw, kernel, group=attrs.pop("group", 1), **attrs)
    result = aot.check(model, target=target, inputs=feeds)
    assert result.comparisons[0].max_abs <= 1, result.comparisons[0]


def _assembly(model: onnx.ModelProto, target: str, tmp_path) -> str:
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b")
    mb = ModuleBuilder("m", get_target(target))
    for call in artifact.program.calls:
        mb.add_kernel(call.kernel)
    return mb.emit_assembly()


def test_helium_sums_16_bytes_per_instruction_in_hardware_loops(tmp_path):
    asm = _assembly(quantize_model(zoo.ds_cnn(), "QDQ"), "cortex-m55", tmp_path)
    assert "vmlava.s8" in asm                      # VMLADAVA.S8: 16 int8 products into a core register
    assert "vldrb.s32" in asm                      # depthwise: bytes widened to int32 lanes as they load
    assert "\tle\t" in asm or "\tletp\t" in asm    # low-overhead loops


def test_helium_row_tails_are_predicated(tmp_path):
    model, _ = qdq_conv(3, 8, (8, 8), (3, 3), pads=[1, 1, 1, 1])      # rows of 9 bytes: one partial vector
    asm = _assembly(model, "cortex-m55", tmp_path)
    assert "vctp.8" in asm or "vpst" in asm or "vpt" in asm


def test_neon_widens_in_pairs(tmp_path):
    asm = _assembly(quantize_model(zoo.mobilenet_v1(), "QDQ"), "armv7-neon", tmp_path)
    assert "vmull.s8" in asm and "vpadal.s16" in asm
