"""int8 convolutions as dot products along window rows (aot/ops/conv/rows.py): Helium (VMLADAVA.S8,
predicated loads for borders and row tails) and 32-bit NEON (VMULL.S8/VMLAL.S8 + VPADAL.S16). Edge
shapes against onnxruntime under qemu, and the instructions in the assembly."""

from __future__ import annotations

import re

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
             bias: bool = True, **attrs) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """int8 x -> Dequantize -> Conv (per-channel int8 weights, int32 bias unless not `bias`) -> Quantize
    -> int8 y."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (m, c // group, *kernel)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, m).astype(np.float32)
    b = rng.integers(-2000, 2000, m).astype(np.int32)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"] if bias else ["xf", "wf"], ["yf"], group=group, **attrs),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("xz", TensorProto.INT8, [], [-7]),
             onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(w_scale, "ws"),
             onnx.numpy_helper.from_array(np.zeros(m, np.int8), "wz"),
             onnx.numpy_helper.from_array(b, "b"), onnx.numpy_helper.from_array(w_scale * np.float32(0.05), "bs"),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.1]),
             helper.make_tensor("yz", TensorProto.INT8, [], [3])]
    if not bias:
        nodes, inits = nodes[:2] + nodes[3:], [i for i in inits if i.name not in ("b", "bs")]
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
    # taps of whole vectors: a border window skips its taps over the padding (loop bounds, corrected bias)
    "3x3 c32 pad stride2 m5": (32, 5, (8, 7), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3 c16 pad 1x1 input": (16, 4, (1, 1), (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3 c16 pad 2x3 input": (16, 6, (2, 3), (3, 3), {"pads": [1, 1, 1, 1]}),
    "5x5 c16 asym pad": (16, 7, (6, 5), (5, 5), {"pads": [2, 1, 2, 0]}),
    "1x3 c48 column pad": (48, 3, (4, 7), (1, 3), {"pads": [0, 1, 0, 1]}),
    "3x1 c16 row pad stride2": (16, 4, (7, 3), (3, 1), {"pads": [1, 0, 1, 0], "strides": [2, 1]}),
    "3x3 c16 pad no bias": (16, 2, (5, 6), (3, 3), {"pads": [1, 1, 1, 1], "bias": False}),
    "3x3 c16 row-dilated pad": (16, 5, (7, 6), (3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]}),
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


@pytest.mark.qemu
@pytest.mark.parametrize("width", [3, 4, 5, 6, 7])
def test_neon_padded_rows_at_tile_edges(width):
    """Padded 3x3, taps of whole vectors, on NEON (tiles of core_mr = 3 pixels): interior runs of 1..5
    output columns, so none, a partial, one and more than one tile, then the border columns alone."""
    model, feeds = qdq_conv(16, 3, (4, width), (3, 3), seed=width, pads=[1, 1, 1, 1])
    result = aot.check(model, target="armv7-neon", inputs=feeds)
    assert result.comparisons[0].max_abs <= 1, result.comparisons[0]


def test_neon_padded_rows_widen_in_pairs_without_lane_loads(tmp_path):
    """A padded convolution takes the row kernel on NEON (VMULL.S8, VPADAL.S16) and its border windows
    load whole vectors: no masked load split into single lanes."""
    model, _ = qdq_conv(16, 8, (7, 9), (3, 3), pads=[1, 1, 1, 1])
    artifact = aot.build(model, target="armv7-neon", out_dir=tmp_path / "b")
    mb = ModuleBuilder("m", get_target("armv7-neon"))
    for call in artifact.program.calls:
        if call.node.op == "Conv":
            mb.add_kernel(call.kernel)
    asm = mb.emit_assembly()
    assert "vmull.s8" in asm and "vpadal.s16" in asm
    assert not re.search(r"\{d\d+\[\d+\]\}", asm) and "vmov.8" not in asm     # lane loads, lane inserts
