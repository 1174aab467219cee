"""The Cortex-M DSP int8 kernels (byte pairs: sxtb16/sxtab16 + SMLAD; depthwise SMLABB/SMLATT; vcvtr
requantization): the instructions appear, and single layers at edge sizes (channels a multiple of 4,
tiles of 1, mr-1, mr, mr+1 columns, borders, zero points, int8 and uint8 activations) match onnxruntime
within one step and the scalar int8 build exactly (the same integer sums and the same float
requantization)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper
from test_quantized import quantized

import aot
from aot.codegen.llvm import ModuleBuilder
from aot.kernel.ir import constants, dump
from aot.target import get_target

_ONNX = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def qdq_conv(c: int, m: int, kernel: int, stride: int, pad: int, hw: tuple[int, int], group: int = 1,
             dtype: str = "int8", x_zp: int = 3, seed: int = 0) -> tuple[onnx.ModelProto, np.ndarray]:
    """int8 (or uint8) x -> DequantizeLinear -> Conv (per-channel int8 weights, int32 bias) -> QuantizeLinear,
    and an input for it."""
    rng = np.random.default_rng(seed)
    h, w = hw
    x_scale, y_scale = 0.05, 0.08
    w_q = rng.integers(-127, 128, (m, c // group, kernel, kernel)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, m).astype(np.float32)
    bias = rng.integers(-2000, 2000, m).astype(np.int32)
    zp_y = 5 if dtype == "int8" else 128
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], kernel_shape=[kernel, kernel], group=group,
                              strides=[stride, stride], pads=[pad] * 4),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [x_scale]),
             helper.make_tensor("xz", _ONNX[dtype], [], [x_zp]),
             onnx.numpy_helper.from_array(w_q, "w"), onnx.numpy_helper.from_array(w_scale, "ws"),
             onnx.numpy_helper.from_array(np.zeros(m, np.int8), "wz"),
             onnx.numpy_helper.from_array(bias, "b"),
             onnx.numpy_helper.from_array((np.float32(x_scale) * w_scale).astype(np.float32), "bs"),
             onnx.numpy_helper.from_array(np.zeros(m, np.int32), "bz"),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [y_scale]),
             helper.make_tensor("yz", _ONNX[dtype], [], [zp_y])]
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", _ONNX[dtype], [1, c, h, w])],
                              [helper.make_tensor_value_info("y", _ONNX[dtype], [1, m, oh, ow])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    info = np.iinfo(dtype)
    return model, rng.integers(info.min, info.max + 1, (1, c, h, w)).astype(dtype)


def assembly(model, target: str, tmp_path) -> str:
    artifact = aot.build(model, target=target, out_dir=tmp_path / target)
    mb = ModuleBuilder("m", get_target(target))
    for call in artifact.program.calls:
        mb.add_kernel(call.kernel)
    return mb.emit_assembly()


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_int8_models_use_byte_pairs_smlad_and_rounding_conversions(target, tmp_path):
    asm = assembly(quantized(zoo.ds_cnn(), tmp_path, "QDQ", True), target, tmp_path)
    for instruction in ("sxtb16", "sxtab16", "smlad", "smlabb", "smlatt", "vcvtr.s32.f32"):
        assert f"\t{instruction}\t" in asm, instruction
    assert "ror #8" in asm          # the odd bytes' rotate folds into the widening


def test_a_layer_without_padding_takes_the_zero_point_through_the_bias(tmp_path):
    pointwise, _ = qdq_conv(8, 8, 1, 1, 0, (3, 5))
    asm = assembly(pointwise, "cortex-m4", tmp_path)
    assert "\tsxtb16\t" in asm and "\tsxtab16\t" not in asm and "\tsmlad\t" in asm
    padded, _ = qdq_conv(8, 8, 3, 1, 1, (3, 5))
    assert "\tsxtab16\t" in assembly(padded, "cortex-m4", tmp_path / "p")


CASES = {   # c, m, kernel, stride, pad, (h, w), group, dtype, x_zp
    "pointwise_w1": (4, 3, 1, 1, 0, (2, 1), 1, "int8", 3),
    "pointwise_w2": (8, 4, 1, 1, 0, (1, 2), 1, "int8", -7),
    "pointwise_w4": (12, 7, 1, 1, 0, (2, 4), 1, "int8", 0),
    "pointwise_u8": (8, 5, 1, 1, 0, (3, 5), 1, "uint8", 131),
    "conv3x3_pad": (4, 6, 3, 1, 1, (4, 5), 1, "int8", 11),
    "conv3x3_stride2_u8": (8, 4, 3, 2, 1, (5, 7), 1, "uint8", 120),
    "conv3x3_valid": (8, 3, 3, 1, 0, (4, 6), 1, "int8", -20),
    "depthwise_w1": (4, 4, 3, 1, 1, (3, 1), 4, "int8", 9),
    "depthwise_w5": (12, 12, 3, 1, 1, (4, 5), 12, "int8", -3),
    "depthwise_stride2": (8, 8, 3, 2, 1, (5, 6), 8, "int8", 17),
    "depthwise_valid_u8": (8, 8, 3, 1, 0, (4, 6), 8, "uint8", 140),
    "one_pixel": (20, 7, 1, 1, 0, (1, 1), 1, "int8", 4),
    "conv3x3_sixteen": (16, 6, 3, 1, 1, (5, 7), 1, "int8", -5),
    "rgb_padded_to_words": (3, 16, 3, 1, 1, (6, 9), 1, "int8", 7),
    "seven_padded_u8": (7, 6, 3, 1, 1, (7, 8), 1, "uint8", 133),
}


@pytest.mark.qemu
@pytest.mark.parametrize("case", sorted(CASES))
def test_dsp_layers_match_onnxruntime_and_the_scalar_build(case):
    c, m, kernel, stride, pad, hw, group, dtype, x_zp = CASES[case]
    model, x = qdq_conv(c, m, kernel, stride, pad, hw, group, dtype, x_zp)
    dsp = aot.check(model, inputs={"x": x}, target="cortex-m4")
    assert dsp.comparisons[0].max_abs <= 1, dsp.comparisons[0]
    scalar = aot.check(model, inputs={"x": x}, target="cortex-m4", knobs={"simd": False})
    np.testing.assert_array_equal(dsp.outputs["y"], scalar.outputs["y"])


@pytest.mark.qemu
@pytest.mark.parametrize("to_end", [True, False])
@pytest.mark.parametrize("case", ["pointwise_w2", "pointwise_w4", "one_pixel", "conv3x3_pad", "conv3x3_stride2_u8"])
def test_pair_loops_sum_what_the_generic_tile_loop_sums(case, to_end, tmp_path):
    """Full tiles run their channels as a PairLoop (1 to 5 steps of 4 channels), ending on the weight pointer
    or on a counter, with the zero point's pair (padded), uint8 activations; a one-pixel output in a tile of
    1 x 3 channels. Bit-identical to the generic tile loop, and within one step of onnxruntime."""
    model, x = qdq_conv(*CASES[case])
    pairs = {"pair_loop_steps": 1, "pair_loop_to_end": to_end}
    kernels = {call.kernel.name: dump(call.kernel) for call in
               aot.build(model, target="cortex-m4", out_dir=tmp_path / "m4", knobs=pairs).program.calls}
    loops = [line for text in kernels.values() for line in text.splitlines() if "pair_loop[" in line]
    assert loops and all(("to the weights end" in line) == to_end for line in loops), loops
    if case == "one_pixel":
        assert any("_1x3_" in name for name in kernels), list(kernels)
    paired = aot.check(model, inputs={"x": x}, target="cortex-m4", knobs=pairs)
    assert paired.comparisons[0].max_abs <= 1, paired.comparisons[0]
    generic = aot.check(model, inputs={"x": x}, target="cortex-m4", knobs={"pair_loop_steps": 0})
    np.testing.assert_array_equal(paired.outputs["y"], generic.outputs["y"])


def test_pair_loops_take_the_longer_channel_loops_by_default(tmp_path):
    """On the Cortex-M4 from 5 steps (20 channels) on: shorter loops LLVM unrolls whole, and the generic
    loop's straight line schedules better there (estimated cycles, ResNet-8's 16-channel layers)."""
    names = [call.kernel.name for call in aot.build(qdq_conv(*CASES["one_pixel"])[0], target="cortex-m4",
                                                    out_dir=tmp_path / "long").program.calls]
    assert any(name.endswith("_pairs") for name in names), names
    names = [call.kernel.name for call in aot.build(qdq_conv(*CASES["pointwise_w4"])[0], target="cortex-m4",
                                                    out_dir=tmp_path / "short").program.calls]
    assert not any(name.endswith("_pairs") for name in names), names


def test_pair_loops_are_refused_without_the_dsp(tmp_path):
    model, _ = qdq_conv(*CASES["pointwise_w2"])
    calls = aot.build(model, target="cortex-m0plus", out_dir=tmp_path / "m0").program.calls
    node = next(call.node.name for call in calls if call.kernel.schedule)
    with pytest.raises(aot.OptionError, match='channels = "pairs" needs the Arm DSP.s byte pairs, which '
                                              'cortex-m0plus lacks'):
        aot.build(model, target="cortex-m0plus", out_dir=tmp_path / "p", knobs={"node": {node: {"channels": "pairs"}}})
    assert not (tmp_path / "p").exists()


@pytest.mark.qemu
@pytest.mark.parametrize("case", ["pointwise_w2", "one_pixel", "conv3x3_pad", "conv3x3_stride2_u8"])
@pytest.mark.parametrize("pair_loop_steps", [0, 1])
def test_widened_weights_sum_what_int8_weights_sum(case, pair_loop_steps, tmp_path):
    """The knob wide_weights (on by default on the M4) stores each weight word as its two 16-bit pairs:
    twice the weight bytes, the same sums bit for bit, in the generic tile loop and in PairLoops."""
    model, x = qdq_conv(*CASES[case])
    builds = {wide: aot.build(model, target="cortex-m4", out_dir=tmp_path / str(wide),
                              knobs={"wide_weights": wide, "pair_loop_steps": pair_loop_steps})
              for wide in (False, True)}
    runs = {wide: aot.check(artifact, inputs={"x": x}) for wide, artifact in builds.items()}
    np.testing.assert_array_equal(runs[True].outputs["y"], runs[False].outputs["y"])
    assert runs[True].comparisons[0].max_abs <= 1, runs[True].comparisons[0]
    weights = {wide: {buf.name: buf.dtype for call in artifact.program.calls for buf in constants(call.kernel)
                      if re.search(r"_w\d+$", buf.name)} for wide, artifact in builds.items()}
    assert weights[True] and weights[True].keys() == weights[False].keys(), weights
    assert set(weights[True].values()) == {"i16"} and set(weights[False].values()) == {"i8"}, weights


def test_widened_weights_give_way_to_a_flash_limit_they_exceed(tmp_path):
    """Over --memory flash the build keeps the weights int8 (and says so in metadata.json's knobs), unless
    wide_weights was asked for: then it fails naming the flash."""
    model, _ = qdq_conv(64, 64, 3, 1, 1, (4, 4))
    flash = {wide: aot.build(model, target="cortex-m4", out_dir=tmp_path / str(wide),
                             knobs={"wide_weights": wide}).metadata["memory"]["flash"] for wide in (False, True)}
    assert flash[True] > flash[False] + 30_000, flash
    limit = {"flash": (flash[True] + flash[False]) // 2}
    fitted = aot.build(model, target="cortex-m4", out_dir=tmp_path / "fit", memory=limit)
    assert fitted.metadata["knobs"]["wide_weights"] is False
    assert fitted.metadata["memory"]["flash"] == flash[False]
    with pytest.raises(aot.PlanError, match="bytes of FLASH"):
        aot.build(model, target="cortex-m4", out_dir=tmp_path / "asked", memory=limit, knobs={"wide_weights": True})
    assert not (tmp_path / "asked").exists()


@pytest.mark.parametrize("channels, stride, padded", [(3, 1, True), (7, 1, True), (11, 1, True), (2, 1, False),
                                                     (4, 1, False), (6, 1, False), (3, 2, False)])
def test_channels_one_short_of_a_word_are_padded_with_the_zero_point(channels, stride, padded, tmp_path):
    """An int8 convolution over 3 (7, 11) input channels reads them through a Pad to 4 (8, 12) that adds the
    zero point, its weights a zero channel (pad_channels); fewer channels, whole words and strided rows
    stay as they are. The MACs reported are the model's."""
    from aot.ops import macs

    model, _ = qdq_conv(channels, 8, 3, stride, 1, (5, 6), x_zp=-9)
    program = aot.build(model, target="cortex-m4", out_dir=tmp_path).program
    ops = [call.node.op for call in program.calls if call.node.op != "Transpose"]    # NCHW in and out
    assert ops == (["Pad", "Conv"] if padded else ["Conv"])
    conv = next(call.node for call in program.calls if call.node.op == "Conv")
    x = program.graph.values[conv.inputs[0]]
    assert x.shape[-1] == (channels + 1 if padded else channels)
    out = program.graph.values[conv.outputs[0]].shape
    assert macs(program.graph, conv) == out[1] * out[2] * 8 * channels * 9
    if padded:
        pad = next(call.node for call in program.calls if call.node.op == "Pad")
        assert pad.attrs["value"] == -9 and x.quant.same_as(program.graph.values[pad.inputs[0]].quant)
        assert not program.graph.constants[conv.inputs[1]][:, channels:].any()
    host = aot.build(model, target="host", out_dir=tmp_path / "host").program
    assert "Pad" not in [call.node.op for call in host.calls]      # other targets read the channels as they are



def test_the_word_pad_writes_over_its_input_in_place():
    """The Pad to whole words copies rows from the last, each read whole before its copy is written: its
    declaration (the result may start where the input does) holds against its loops replayed, one two
    bytes bolder does not, and the plan places the two at the same byte (no second copy of the input)."""
    import dataclasses

    from kernel_trace import Trace

    model, _ = qdq_conv(3, 8, 3, 1, 1, (6, 7))
    program = aot.build(model, target="cortex-m4", out_dir=None).program
    call = next(c for c in program.calls if c.node.op == "Pad")
    (reuse,) = call.kernel.reuse
    Trace(call.kernel).check(reuse)
    bolder = dataclasses.replace(reuse, progress=tuple((written + 2, needed) for written, needed in reuse.progress))
    with pytest.raises(AssertionError, match="breaks its reads"):
        Trace(call.kernel).check(bolder)
    source, result = program.roots[call.node.inputs[0]], program.roots[call.node.outputs[0]]
    assert program.plan.offsets[source] == program.plan.offsets[result]


@pytest.mark.parametrize("case, fresh", [("conv3x3_sixteen", True), ("conv3x3_valid", True), ("conv3x3_pad", False),
                                         ("conv3x3_stride2_u8", False)])
def test_taps_at_stride_one_load_their_words_anew(case, fresh, tmp_path):
    """At a stride of 1 a pixel's taps and its neighbour's read the same words; where a tap takes more than
    one step of 4 channels, the tile loop loads them anew at each tap (Load.fresh: volatile loads in the
    LLVM IR) rather than keep them across taps. One step a tap (4 channels) or a stride of 2: plain loads.
    The outputs are checked by test_dsp_layers_match_onnxruntime_and_the_scalar_build."""
    model, _ = qdq_conv(*CASES[case])
    artifact = aot.build(model, target="cortex-m4", out_dir=tmp_path, knobs={"pair_loop_steps": 0})
    mb = ModuleBuilder("m", get_target("cortex-m4"))
    for call in artifact.program.calls:
        mb.add_kernel(call.kernel)
    text = "\n".join(dump(call.kernel) for call in artifact.program.calls)
    assert (" fresh" in text) == fresh
    assert ("load volatile" in mb.compile().ir) == fresh

