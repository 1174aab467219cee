"""An integer residual Add fused into the convolution before it: the convolution rounds to its own
output encoding, then adds the residual as the Add kernel would, so the fused build gives the bits of
the unfused one (and of onnxruntime within a step), and its result takes the residual's bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot

_ONNX = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def residual_block(c: int, hw: tuple[int, int], kernel: int, conv_first: bool = True, relu: bool = True,
                   dtype: str = "int8", expose_conv: bool = False, other_input: bool = False, seed: int = 0):
    """x -> Dequantize -> Conv -> Quantize -> Dequantize -> Add(., Dequantize(x)) [-> Relu] -> Quantize;
    with `other_input` the residual is a second input r of x's encoding. `expose_conv` also makes the
    convolution's quantized result a graph output, which keeps the Add a kernel of its own (the
    unfused build)."""
    rng = np.random.default_rng(seed)
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    zps = {"xz": 3 if dtype == "int8" else 120, "cz": -9 if dtype == "int8" else 131,
           "oz": 5 if dtype == "int8" else 100}
    w = rng.integers(-127, 128, (c, c, kernel, kernel)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, c).astype(np.float32)
    conv_out = ["cf", "cq"]
    residual = "rf" if other_input else "xf"
    add_in = ["cqf", residual] if conv_first else [residual, "cqf"]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             *([helper.make_node("DequantizeLinear", ["r", "xs", "xz"], ["rf"])] if other_input else []),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], conv_out[:1], pads=[kernel // 2] * 4),
             helper.make_node("QuantizeLinear", ["cf", "cs", "cz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["cqf"]),
             helper.make_node("Add", add_in, ["sf"]),
             *([helper.make_node("Relu", ["sf"], ["pf"])] if relu else []),
             helper.make_node("QuantizeLinear", ["pf" if relu else "sf", "os", "oz"], ["out"])]
    scalar = {"xs": 0.05, "cs": 0.07, "os": 0.09}
    inits = [helper.make_tensor(k, TensorProto.FLOAT, [], [v]) for k, v in scalar.items()]
    inits += [helper.make_tensor(k, _ONNX[dtype], [], [v]) for k, v in zps.items()]
    inits += [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(w_scale, "ws"),
              onnx.numpy_helper.from_array(np.zeros(c, np.int8), "wz"),
              onnx.numpy_helper.from_array(rng.integers(-2000, 2000, c).astype(np.int32), "b"),
              onnx.numpy_helper.from_array((w_scale * np.float32(0.05)).astype(np.float32), "bs")]
    shape = [1, c, *hw]
    outputs = [helper.make_tensor_value_info("out", _ONNX[dtype], shape)]
    if expose_conv:
        outputs.append(helper.make_tensor_value_info("cq", _ONNX[dtype], shape))
    names = ["x", "r"] if other_input else ["x"]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info(n, _ONNX[dtype], shape) for n in names],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {n: rng.integers(lo, hi + 1, shape).astype(dtype) for n in names}


def test_the_add_becomes_the_convolutions_residual(tmp_path):
    model, _ = residual_block(8, (6, 6), 3)
    artifact = aot.build(model, target="cortex-m7", out_dir=tmp_path / "b")
    ops = [call.node.op for call in artifact.program.calls]
    assert "Add" not in ops
    (conv,) = [call for call in artifact.program.calls if call.node.op == "Conv"]
    assert len(conv.node.inputs) == 4 and conv.node.inputs[3] == conv.node.inputs[0]
    # the unfused build keeps the Add where the convolution's own result is also an output
    unfused = aot.build(residual_block(8, (6, 6), 3, expose_conv=True)[0], target="cortex-m7",
                        out_dir=tmp_path / "u")
    assert "Add" in [call.node.op for call in unfused.program.calls]


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("cortex-m4", marks=pytest.mark.qemu),       # byte pairs (SMLAD)
    pytest.param("cortex-m55", marks=pytest.mark.qemu),      # Helium row kernels
    pytest.param("armv7-neon", marks=pytest.mark.qemu),      # NEON row kernels (1x1: no padding)
    pytest.param("cortex-m0plus", marks=pytest.mark.qemu),   # fixed-point requantization
])
@pytest.mark.parametrize("kernel, conv_first, relu, dtype, other", [
    (3, True, True, "int8", False), (1, False, False, "int8", True), (3, False, True, "uint8", True),
    (1, True, True, "uint8", False)])
def test_fused_residual_gives_the_unfused_bits_and_matches_onnxruntime(target, kernel, conv_first, relu, dtype,
                                                                        other):
    model, feeds = residual_block(16, (5, 7), kernel, conv_first, relu, dtype, other_input=other)
    fused = aot.check(model, target=target, inputs=feeds)
    assert fused.ok, fused.comparisons
    unfused_model, _ = residual_block(16, (5, 7), kernel, conv_first, relu, dtype, expose_conv=True,
                                      other_input=other)
    unfused = aot.run(unfused_model, feeds, target=target)
    np.testing.assert_array_equal(fused.outputs["out"], unfused["out"])


def test_the_result_takes_the_residuals_bytes(tmp_path):
    """The sum is written over the residual exactly: the workspace holds the channels-last copies of
    the two inputs (1,024 bytes each) and nothing else."""
    model, _ = residual_block(16, (8, 8), 3, other_input=True)
    artifact = aot.build(model, target="cortex-m7", out_dir=tmp_path / "b")
    assert [reuse for *_, reuse in artifact.program.shared if reuse.exact and reuse.input == 3]
    assert artifact.program.plan.size == 2 * 16 * 8 * 8
