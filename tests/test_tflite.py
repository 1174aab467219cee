"""TFLite models (frontend/tflite.py): each operator and small networks, float32 and int8, built by code and
compared with LiteRT's reference kernels; int8 results must equal them bit for bit. And the files aot must
refuse, with one line naming what is wrong."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tflite_models
from tflite_builder import ModelBuilder
from tflite_models import Net

import aot

pytest.importorskip("ai_edge_litert")


def feeds_for(path, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs over the whole int8 or int16 range (random normal values would use a few codes only)."""
    from aot.frontend.model import load

    rng = np.random.default_rng(seed)
    return {name: rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
            if dtype in ("int8", "int16") else rng.standard_normal(shape).astype(dtype)
            for name, shape, dtype in load(path).file.inputs}


def check(data: bytes, tmp_path, target: str = "host", seeds=(0, 1), reference: str = "litert") -> float:
    """The largest difference from the reference (LiteRT, or TFLite Micro for a model that follows it) over a
    few inputs: 0 for int8 models, within the float tolerance for float32 ones (aot.check fails otherwise)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    worst = 0.0
    for seed in seeds:
        result = aot.check(str(path), inputs=feeds_for(path, seed), target=target)
        assert result.reference_used == reference
        assert result.ok, result.comparisons
        for name, ref in result.reference.items():
            got = result.outputs[name]
            assert got.dtype == ref.dtype and got.shape == ref.shape
            worst = max(worst, float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()))
    return worst


def single(int8: bool, build, seed: int = 0) -> bytes:
    net = Net(int8, seed)
    return net.build(build(net))


CONVS = {
    "3x3 same relu": lambda net: net.conv(net.input((1, 12, 11, 8)), (1, 12, 11, 8), 24)[0],
    "5x3 valid stride 2 relu6": lambda net: net.conv(net.input((1, 15, 13, 5)), (1, 15, 13, 5), 16, (5, 3), 2,
                                                     "VALID", "RELU6")[0],
    "1x1 none per tensor": lambda net: net.conv(net.input((1, 9, 9, 32)), (1, 9, 9, 32), 20, (1, 1), act="NONE",
                                                per_channel=False)[0],
    "dilated relu_n1_to_1": lambda net: net.conv(net.input((1, 14, 14, 4)), (1, 14, 14, 4), 8, dilation=2,
                                                 act="RELU_N1_TO_1")[0],
    "depthwise": lambda net: net.conv(net.input((1, 16, 15, 24)), (1, 16, 15, 24), 0, depthwise=True)[0],
    "depthwise x2 stride 2": lambda net: net.conv(net.input((1, 17, 16, 8)), (1, 17, 16, 8), 0, stride=2,
                                                  depthwise=True, multiplier=2, act="RELU6")[0],
    "depthwise per tensor valid": lambda net: net.conv(net.input((1, 10, 10, 12)), (1, 10, 10, 12), 0, (3, 3), 1,
                                                       "VALID", "NONE", depthwise=True, per_channel=False)[0],
}
OTHERS = {
    "dense": lambda net: net.dense(net.input((1, 200)), 200, 40, "RELU"),
    "dense per channel, 4-D input": lambda net: net.dense(net.input((1, 1, 4, 32)), 128, 24, per_channel=True),
    "dense batch 3, no bias": lambda net: net.dense(net.input((3, 64)), 64, 16, out_shape=(3, 16), bias=False),
    "average pool same": lambda net: net.pool(net.input((1, 11, 9, 20)), (1, 11, 9, 20), "AVERAGE_POOL_2D",
                                              (3, 3), 2, "SAME")[0],
    "average pool whole": lambda net: net.pool(net.input((1, 25, 5, 64)), (1, 25, 5, 64), "AVERAGE_POOL_2D",
                                               (25, 5), 1)[0],
    "max pool": lambda net: net.pool(net.input((1, 12, 12, 8)), (1, 12, 12, 8), "MAX_POOL_2D", (2, 2), 2)[0],
    "softmax": lambda net: net.softmax(net.input((2, 50), 0.1, 7), (2, 50)),
}


@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float32"])
@pytest.mark.parametrize("case", sorted({**CONVS, **OTHERS}))
def test_an_operator_matches_litert(case, int8, tmp_path):
    worst = check(single(int8, {**CONVS, **OTHERS}[case]), tmp_path, seeds=(0, 1, 2))
    if int8:
        assert worst == 0


@pytest.mark.parametrize("scales", [(0.05, 0.1, 0.12, "NONE"), (0.2, 0.03, 0.07, "RELU"), (0.1, 0.1, 0.05, "RELU6")])
def test_int8_add_matches_litert_bit_for_bit(scales, tmp_path):
    a_scale, b_scale, y_scale, act = scales
    b = ModelBuilder()
    a = b.input("a", (1, 6, 7, 9), "int8", scale=a_scale, zero_point=3)
    c = b.input("b", (1, 6, 7, 9), "int8", scale=b_scale, zero_point=-7)
    y = b.tensor("y", (1, 6, 7, 9), "int8", scale=y_scale, zero_point=-2)
    b.op("ADD", [a, c], [y], fused_activation_function=act)
    b.output(y)
    assert check(b.build(), tmp_path, seeds=(0, 1, 2)) == 0


def one_op(op: str, shape_in, shape_out, dtype: str = "float32", constants=(), out=None, **options) -> bytes:
    """A model of one operator on input x, its other operands `constants`, its output y (dtype and encoding
    `out`, else x's)."""
    b = ModelBuilder()
    encoding = {"int8": dict(scale=0.1, zero_point=3), "int16": dict(scale=0.001, zero_point=0)}.get(dtype, {})
    x = b.input("x", shape_in, dtype, **encoding)
    y = b.tensor("y", shape_out, out[0] if out else dtype, **(out[1] if out else encoding))
    b.op(op, [x, *(b.constant(f"c{i}", c) for i, c in enumerate(constants))], [y], **options)
    b.output(y)
    return b.build()


def _i32(*values):
    return np.array(values, np.int32)


MOVES = {      # operators that move values: float32 and int8 alike
    "SQUEEZE": (((1, 5, 1, 3), (5, 3)), (), {"squeeze_dims": [0, 2]}),
    "EXPAND_DIMS": (((5, 3), (5, 1, 3)), (_i32(1),), {}),
    "PAD": (((1, 4, 5, 3), (1, 6, 8, 3)), (np.array([[0, 0], [1, 1], [2, 1], [0, 0]], np.int32),), {}),
    "TRANSPOSE": (((2, 4, 5, 3), (2, 3, 5, 4)), (_i32(0, 3, 2, 1),), {}),
    "STRIDED_SLICE": (((2, 9, 8, 6), (9, 3, 2)), (_i32(1, 0, 1, 0), _i32(2, 9, 7, 6), _i32(1, 1, 2, 3)),
                      {"shrink_axis_mask": 1}),
    "STRIDED_SLICE backwards": (((9, 8), (5, 8)), (_i32(-1, 0), _i32(0, 8), _i32(-2, 1)), {"end_mask": 1}),
    "GATHER": (((6, 5), (3, 5)), (_i32(4, 0, 2),), {"axis": 0}),
    "MAX_POOL_2D": (((1, 7, 7, 4), (1, 4, 4, 4)), (), dict(padding="SAME", stride_w=2, stride_h=2, filter_width=3,
                                                             filter_height=3)),
}


@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("case", sorted(MOVES))
def test_operators_that_move_values(case, dtype, tmp_path):
    (shape_in, shape_out), constants, options = MOVES[case]
    assert check(one_op(case.split()[0], shape_in, shape_out, dtype, constants, **options), tmp_path) == 0


FLOATS = {
    "MEAN": (((1, 7, 6, 5), (1, 5)), (_i32(1, 2),), {"keep_dims": False}),
    "MEAN keep_dims": (((1, 7, 6, 5), (1, 1, 1, 5)), (_i32(1, 2),), {"keep_dims": True}),
    "LEAKY_RELU": (((3, 7), (3, 7)), (), {"alpha": 0.3}),
    "HARD_SWISH": (((3, 7), (3, 7)), (), {}),
    "PRELU": (((1, 4, 4, 3), (1, 4, 4, 3)), (np.array([[[0.1, -0.2, 0.3]]], np.float32),), {}),
    "RESIZE_BILINEAR": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),), {}),
    "RESIZE_BILINEAR align_corners": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),), {"align_corners": True}),
    "RESIZE_BILINEAR half_pixel_centers": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),),
                                           {"half_pixel_centers": True}),
    "RESIZE_NEAREST_NEIGHBOR": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),), {}),
    "RESIZE_NEAREST_NEIGHBOR align_corners": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),), {"align_corners": True}),
    "RESIZE_NEAREST_NEIGHBOR half_pixel_centers": (((1, 5, 6, 3), (1, 9, 13, 3)), (_i32(9, 13),),
                                                   {"half_pixel_centers": True}),
}


FLOATS.update({
    **{op: (((2, 3, 7), (2, 3, 7)), (), {}) for op in ("ABS", "EXP", "NEG", "FLOOR", "SIN", "COS", "SQUARE",
                                                      "LOG_SOFTMAX")},
    "SUM": (((2, 5, 4, 3), (2, 1, 4, 1)), (_i32(1, 3),), {"keep_dims": True}),
    "REDUCE_PROD": (((2, 5, 3), (2, 3)), (_i32(1),), {"keep_dims": False}),
    "REDUCE_MAX": (((2, 5, 4, 3), (2, 4)), (_i32(1, 3),), {"keep_dims": False}),
    "REDUCE_MIN": (((2, 5, 4, 3), (1, 5, 4, 1)), (_i32(0, 3),), {"keep_dims": True}),
    "TILE": (((2, 3), (4, 9)), (_i32(2, 3),), {}),
    "DEPTH_TO_SPACE": (((1, 3, 4, 8), (1, 6, 8, 2)), (), {"block_size": 2}),
    "SPACE_TO_DEPTH": (((1, 6, 4, 3), (1, 3, 2, 12)), (), {"block_size": 2}),
    "DIV": (((2, 3, 4), (2, 3, 4)), (np.linspace(0.5, 3, 4).astype(np.float32),), {}),
    "FLOOR_DIV": (((2, 3, 4), (2, 3, 4)), (np.linspace(0.5, 3, 4).astype(np.float32),), {}),
    "SQUARED_DIFFERENCE": (((2, 3, 4), (2, 3, 4)), (np.linspace(-1, 1, 4).astype(np.float32),), {}),
})
@pytest.mark.parametrize("op", ["LOG", "SQRT", "RSQRT", "POW"])
def test_float_functions_of_positive_values(op, tmp_path):
    """On values above 0 (feeds_for draws normal ones); POW to exponents 2, 3, 0.5 and -1."""
    constants = (np.array([2.0, 3.0, 0.5, -1.0], np.float32),) if op == "POW" else ()
    path = tmp_path / "positive.tflite"
    path.write_bytes(one_op(op, (3, 4), (3, 4), constants=constants))
    x = np.random.default_rng(0).uniform(0.01, 20.0, (3, 4)).astype(np.float32)
    assert aot.check(str(path), inputs={"x": x}).ok


@pytest.mark.parametrize("dtype", ["float32", "int8", "int16"])
@pytest.mark.parametrize("case", ["PACK", "UNPACK", "SPLIT_V", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "TILE"])
def test_more_operators_that_move_values(case, dtype, tmp_path):
    if dtype == "int16" and case in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        pytest.skip("LiteRT has no int16 DEPTH_TO_SPACE or SPACE_TO_DEPTH")
    b = ModelBuilder()
    encoding = {"int8": dict(scale=0.1, zero_point=3), "int16": dict(scale=0.001, zero_point=0)}.get(dtype, {})
    if case in ("PACK", "UNPACK", "SPLIT_V"):
        x = b.input("x", (2, 6, 3), dtype, **encoding)
        if case == "PACK":
            other = b.input("z", (2, 6, 3), dtype, **encoding)
            outs = [b.tensor("y", (2, 2, 6, 3), dtype, **encoding)]
            b.op("PACK", [x, other], outs, axis=1, values_count=2)
        elif case == "UNPACK":
            outs = [b.tensor(f"y{i}", (2, 3), dtype, **encoding) for i in range(6)]
            b.op("UNPACK", [x], outs, axis=1, num=6)
        else:
            outs = [b.tensor(f"y{i}", (2, n, 3), dtype, **encoding) for i, n in enumerate((1, 3, 2))]
            b.op("SPLIT_V", [x, b.constant("sizes", _i32(1, -1, 2)), b.constant("axis", _i32(1))], outs, num_splits=3)
        for t in outs:
            b.output(t)
        data = b.build()
    else:
        (shape_in, shape_out), constants, options = FLOATS[case]
        data = one_op(case, shape_in, shape_out, dtype, constants, **options)
    assert check(data, tmp_path) == 0


@pytest.mark.parametrize("op, out", [("ARG_MAX", "int32"), ("ARG_MIN", "int64")])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_arg_max_and_min(op, out, dtype, tmp_path):
    b = ModelBuilder()
    encoding = {"int8": dict(scale=0.1, zero_point=3), "int16": dict(scale=0.001, zero_point=0)}.get(dtype, {})
    x = b.input("x", (3, 5, 4), dtype, **encoding)
    y = b.tensor("y", (3, 4), out)
    b.op(op, [x, b.constant("axis", _i32(1))], [y], output_type=out)
    b.output(y)
    assert check(b.build(), tmp_path) == 0


def test_cast(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (3, 5), "float32")
    y = b.tensor("y", (3, 5), "int32")
    b.op("CAST", [x], [y])
    b.output(y)
    path = tmp_path / "cast.tflite"
    path.write_bytes(b.build())
    x = (np.random.default_rng(0).standard_normal((3, 5)) * 50).astype(np.float32)
    result = aot.check(str(path), inputs={"x": x})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("case", sorted(FLOATS))
def test_float_operators(case, tmp_path):
    (shape_in, shape_out), constants, options = FLOATS[case]
    check(one_op(case.split()[0], shape_in, shape_out, "float32", constants, **options), tmp_path)


@pytest.mark.parametrize("padding, stride, out", [("SAME", 2, 10), ("VALID", 2, 11), ("SAME", 1, 5)])
def test_transpose_conv(padding, stride, out, tmp_path):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, 4), "float32")
    y = b.tensor("y", (1, out, out, 6), "float32")
    weights = b.constant("w", rng.standard_normal((6, 3, 3, 4)).astype(np.float32))
    bias = b.constant("b", rng.standard_normal(6).astype(np.float32))
    b.op("TRANSPOSE_CONV", [b.constant("shape", _i32(1, out, out, 6)), weights, x, bias], [y], padding=padding,
         stride_w=stride, stride_h=stride)
    b.output(y)
    check(b.build(), tmp_path)


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("padding, stride, out, kernel, act, per_channel", [
    ("SAME", 2, 10, (3, 3), "NONE", True), ("VALID", 2, 11, (3, 3), "RELU", True),
    ("SAME", 1, 5, (3, 3), "RELU6", False), ("VALID", 3, 16, (4, 2), "NONE", True),
    ("SAME", 2, 10, (1, 1), "NONE", True)])
def test_quantized_transpose_conv_matches_litert(padding, stride, out, kernel, act, per_channel, dtype, tmp_path):
    """int8 and 16x8: the phases of an integer convolution requantize as LiteRT's scatter does, kernels
    smaller than, equal to and larger than the stride, fused activations."""
    rng = np.random.default_rng(0)
    kh, kw = kernel
    out_w = (5 - 1) * stride + kw if padding == "VALID" else out
    out_h = (5 - 1) * stride + kh if padding == "VALID" else out
    b = ModelBuilder()
    x_scale = 0.05 if dtype == "int8" else 0.0002
    x = b.input("x", (1, 5, 5, 4), dtype, scale=x_scale, zero_point=0 if dtype == "int16" else -4)
    y = b.tensor("y", (1, out_h, out_w, 6), dtype, scale=0.04 if dtype == "int8" else 0.001,
                 zero_point=0 if dtype == "int16" else 3)
    scales = rng.uniform(0.002, 0.02, 6 if per_channel else 1).astype(np.float32)
    weights = b.constant("w", rng.integers(-127, 128, (6, kh, kw, 4)).astype(np.int8), scale=scales,
                         zero_point=np.zeros(scales.size, np.int64), quantized_dimension=0)
    bias_scale = (np.float32(x_scale) * np.broadcast_to(scales, (6,))).astype(np.float32)
    bias_type = np.int64 if dtype == "int16" else np.int32
    bias = b.constant("b", rng.integers(-3000, 3000, 6).astype(bias_type), scale=bias_scale,
                      zero_point=np.zeros(6, np.int64), quantized_dimension=0)
    b.op("TRANSPOSE_CONV", [b.constant("shape", _i32(1, out_h, out_w, 6)), weights, x, bias], [y], padding=padding,
         stride_w=stride, stride_h=stride, fused_activation_function=act)
    b.output(y)
    assert check(b.build(), tmp_path) == 0


def _hybrid_conv(scales: np.ndarray, batch: int = 2) -> bytes:
    rng = np.random.default_rng(5)
    b = ModelBuilder()
    x = b.input("x", (batch, 9, 7, 5), "float32")
    y = b.tensor("y", (batch, 5, 4, 8), "float32")
    w = b.constant("w", rng.integers(-127, 128, (8, 3, 3, 5)).astype(np.int8), scale=scales,
                   zero_point=np.zeros(scales.size, np.int64), quantized_dimension=0)
    bias = b.constant("b", rng.standard_normal(8).astype(np.float32))
    b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU")
    b.output(y)
    return b.build()


def test_a_hybrid_convolution_quantizes_its_input_as_litert_does(tmp_path):
    """Float activations, int8 weights (dynamic-range quantization): the input quantized per batch at run
    time. Within the float tolerance of LiteRT only because the quantization is TFLite's: the same layer in
    float with the weights dequantized is about 1e-2 off. One batch all zeros (its factor is the weights')."""
    path = tmp_path / "hybrid.tflite"
    path.write_bytes(_hybrid_conv(np.array([0.013], np.float32)))
    x = np.random.default_rng(6).standard_normal((2, 9, 7, 5)).astype(np.float32)
    x[1] = 0.0
    result = aot.check(str(path), inputs={"x": x})
    assert result.ok, result.comparisons
    assert np.allclose(result.outputs["y"], result.reference["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_a_hybrid_fully_connected_quantizes_each_row_as_litert_does(bias, tmp_path):
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    x = b.input("x", (4, 2, 30), "float32")
    y = b.tensor("y", (8, 9), "float32")
    w = b.constant("w", rng.integers(-127, 128, (9, 30)).astype(np.int8), scale=0.02, zero_point=0)
    operands = [x, w, b.constant("b", rng.standard_normal(9).astype(np.float32)) if bias else None]
    b.op("FULLY_CONNECTED", operands, [y], fused_activation_function="RELU6")
    b.output(y)
    path = tmp_path / "hybrid_fc.tflite"
    path.write_bytes(b.build())
    xs = (rng.standard_normal((4, 2, 30)) * np.array([1, 0, 30, 0.01]).reshape(4, 1, 1)).astype(np.float32)
    result = aot.check(str(path), inputs={"x": xs})
    assert result.ok, result.comparisons
    assert np.allclose(result.outputs["y"], result.reference["y"], rtol=1e-5, atol=1e-6)


def test_a_hybrid_convolution_with_per_channel_weights_is_refused(tmp_path):
    _refused(_hybrid_conv(np.linspace(0.01, 0.02, 8).astype(np.float32)), tmp_path, "CONV_2D", "hybrid")


def test_quantize_rounds_ties_away_from_zero_as_tflite_does(tmp_path):
    """Inputs on the half steps of the output scale: TFLite rounds them away from zero (ONNX to even)."""
    data = one_op("QUANTIZE", (1, 64), (1, 64), "float32", out=("int8", dict(scale=0.5, zero_point=0)))
    path = tmp_path / "q.tflite"
    path.write_bytes(data)
    ties = ((np.arange(64, dtype=np.float32) - 32) * 0.25).reshape(1, 64)
    result = aot.check(str(path), inputs={"x": ties})
    assert np.array_equal(result.outputs["y"], result.reference["y"])
    assert result.outputs["y"][0, 34] == 1 and result.outputs["y"][0, 30] == -1      # +-0.5 -> +-1


@pytest.mark.parametrize("case", ["QUANTIZE", "DEQUANTIZE", "QUANTIZE int8 to int8"])
def test_quantize_and_dequantize(case, tmp_path):
    if case == "QUANTIZE":
        data = one_op("QUANTIZE", (4, 50), (4, 50), "float32", out=("int8", dict(scale=0.02, zero_point=-5)))
    elif case == "DEQUANTIZE":
        data = one_op("DEQUANTIZE", (3, 20), (3, 20), "int8", out=("float32", {}))
    else:
        data = one_op("QUANTIZE", (4, 50), (4, 50), "int8", out=("int8", dict(scale=0.033, zero_point=7)))
    assert check(data, tmp_path, seeds=(0, 1, 2)) == 0


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM", "CONCATENATION"])
def test_float_operators_of_two_inputs(op, tmp_path):
    b = ModelBuilder()
    x = b.input("a", (2, 3, 4), "float32")
    z = b.input("b", (2, 3, 4), "float32")
    y = b.tensor("y", (2, 6, 4) if op == "CONCATENATION" else (2, 3, 4), "float32")
    b.op(op, [x, z], [y], **({"axis": 1} if op == "CONCATENATION" else {}))
    b.output(y)
    check(b.build(), tmp_path)


def test_split(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (2, 9, 4), "int8", scale=0.1, zero_point=3)
    parts = [b.tensor(f"y{i}", (2, 3, 4), "int8", scale=0.1, zero_point=3) for i in range(3)]
    b.op("SPLIT", [b.constant("axis", _i32(1)), x], parts, num_splits=3)
    for part in parts:
        b.output(part)
    assert check(b.build(), tmp_path) == 0


def _near_ties(real_multiplier: float, count: int = 255) -> np.ndarray:
    """int32 sums whose requantized values lie on or beside a rounding tie: where requantizations that round
    once, twice or in double disagree (random inputs seldom come near them)."""
    ties = np.round((np.arange(-count // 2, count // 2) + 0.5) / real_multiplier).astype(np.int64)
    return np.unique((ties[:, None] + np.arange(-3, 4)).reshape(-1)).astype(np.int32)


# input, weight and output scales where a few sums in range round otherwise with the real multiplier than with
# TFLite's 31-bit fixed-point one (found by a search over random scales: a few in a hundred thousand sums)
TIE_SCALES = (0.13448986411094666, 0.002370604779571295, 0.6632967591285706)


def _where_roundings_differ(scales: tuple[float, float, float]) -> np.ndarray:
    """The sums whose product with the real multiplier rounds (half away from zero) otherwise than the
    31-bit fixed-point multiplier rounds it once."""
    from aot.graph.quant import tflite_multiplier

    real = scales[0] * scales[1] / scales[2]
    m0, shift = (int(v[0]) for v in tflite_multiplier(real))
    sums = np.arange(-int(120 / real), int(120 / real), dtype=np.int64)
    exact = np.sign(sums) * np.floor(np.abs(sums) * real + 0.5)
    once = (sums * m0 + (1 << (shift - 1))) >> shift
    return sums[exact != once].astype(np.int32)


@pytest.mark.parametrize("op", ["FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"])
def test_requantization_rounds_as_litert_at_the_ties(op, tmp_path):
    """Each output channel's sum is its bias (the input equals its zero point): the bias runs over sums
    near every rounding tie and where roundings differ, each rounded as LiteRT's kernel of the operator
    rounds it."""
    x_scale, w_scale, y_scale = TIE_SCALES
    differ = _where_roundings_differ(TIE_SCALES)
    assert differ.size >= 4
    sums = np.union1d(_near_ties(x_scale * w_scale / y_scale), differ)
    channels = sums.size
    b = ModelBuilder()
    x = b.input("x", (1, 1) if op == "FULLY_CONNECTED" else (1, 1, 1, 1), "int8", scale=x_scale, zero_point=-7)
    shape = {"FULLY_CONNECTED": (channels, 1), "CONV_2D": (channels, 1, 1, 1), "DEPTHWISE_CONV_2D": (1, 1, 1, channels)}
    w = b.constant("w", np.ones(shape[op], np.int8), scale=w_scale, zero_point=0)
    bias = b.constant("b", sums, scale=float(np.float32(x_scale) * np.float32(w_scale)), zero_point=0)
    y = b.tensor("y", (1, channels) if op == "FULLY_CONNECTED" else (1, 1, 1, channels), "int8", scale=y_scale,
                 zero_point=0)
    options = {} if op == "FULLY_CONNECTED" else dict(padding="VALID", stride_w=1, stride_h=1)
    if op == "DEPTHWISE_CONV_2D":
        options["depth_multiplier"] = channels
    b.op(op, [x, w, bias], [y], **options)
    b.output(y)
    path = tmp_path / "ties.tflite"
    path.write_bytes(b.build())
    result = aot.check(str(path), inputs={"x": np.full((1, 1) if op == "FULLY_CONNECTED" else (1, 1, 1, 1), -7,
                                                       np.int8)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])
    assert len(np.unique(result.outputs["y"])) > 200         # the sums span the int8 range


@pytest.mark.parametrize("scale, beta", [(0.003, 1.0), (0.0039, 1.0), (0.05, 1.0), (0.17, 1.0), (0.5, 0.5), (2.0, 1.0)])
def test_int8_softmax_matches_litert_at_every_difference(scale, beta, tmp_path):
    """Rows holding every int8 code (every difference from the maximum, 0 to -255), and rows of ten."""
    b = ModelBuilder()
    x = b.input("x", (41, 256), "int8", scale=scale, zero_point=5)
    y = b.tensor("y", (41, 256), "int8", scale=1 / 256, zero_point=-128)
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    path = tmp_path / "softmax.tflite"
    path.write_bytes(b.build())
    rng = np.random.default_rng(0)
    rows = np.concatenate([np.arange(-128, 128, dtype=np.int8)[None], rng.integers(-128, 128, (40, 256), np.int8)])
    rows[1:, 10:] = -128        # rows of ten values, the rest far below
    result = aot.check(str(path), inputs={"x": rows})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("scale", [0.003, 0.05, 0.5])
def test_int8_softmax_into_int16_matches_litert_at_every_difference(scale, tmp_path):
    """TFLite's second output encoding, 1/65536 from -32768 (keyword spotting models end in it)."""
    b = ModelBuilder()
    x = b.input("x", (2, 256), "int8", scale=scale, zero_point=0)
    y = b.tensor("y", (2, 256), "int16", scale=1 / 65536, zero_point=-32768)
    b.op("SOFTMAX", [x], [y], beta=1.0)
    b.output(y)
    path = tmp_path / "softmax16.tflite"
    path.write_bytes(b.build())
    codes = np.stack([np.arange(-128, 128), np.where(np.arange(256) % 3 == 0, 127, -128)]).astype(np.int8)
    result = aot.check(str(path), inputs={"x": codes})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("scale, beta, depth", [(0.0001, 1.0, 40), (0.001, 1.0, 300), (0.01, 0.5, 7), (0.1, 1.0, 2)])
def test_int16_softmax_matches_litert(scale, beta, depth, tmp_path):
    """TFLite's two interpolated tables (exp, 1 / (1 + x)) and their float32 construction: rows of random codes,
    of a few distinct values, and of one value repeated."""
    b = ModelBuilder()
    x = b.input("x", (6, depth), "int16", scale=scale, zero_point=0)
    y = b.tensor("y", (6, depth), "int16", scale=1 / 32768, zero_point=0)
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    path = tmp_path / "softmax16.tflite"
    path.write_bytes(b.build())
    rng = np.random.default_rng(3)
    rows = [rng.integers(-32768, 32768, depth), rng.integers(-300, 300, depth), rng.choice([-32768, 0, 32767], depth),
            np.full(depth, 123), rng.integers(-30, 30, depth) * 1000, np.arange(depth) * 50 - 4000]
    codes = np.stack(rows).astype(np.int16)
    result = aot.check(str(path), inputs={"x": codes})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


def test_int8_softmax_over_more_values_than_tflite_can_sum_is_refused(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 512), "int8", scale=0.1, zero_point=0)
    y = b.tensor("y", (1, 512), "int8", scale=1 / 256, zero_point=-128)
    b.op("SOFTMAX", [x], [y], beta=1.0)
    b.output(y)
    path = tmp_path / "wide.tflite"
    path.write_bytes(b.build())
    with pytest.raises(aot.UnsupportedOpError, match="rows of 511 at most"):
        aot.build(str(path), out_dir=tmp_path / "b")


# the scales: ordinary ones, and (for MUL) ones where a multiplier formed in float32 and one formed in double
# differ in their low bits (LiteRT forms MUL's in float32)
@pytest.mark.parametrize("op, scales, act", [
    ("ADD", (0.0371, 0.0113, 0.0457), "NONE"), ("ADD", (0.0470954, 0.00195223, 0.0230043), "RELU6"),
    ("SUB", (0.0371, 0.0113, 0.0457), "NONE"), ("SUB", (0.0113366, 0.0524518, 0.24949), "RELU"),
    ("MUL", (0.0113366, 0.0524518, 0.24949), "NONE"), ("MUL", (0.399412, 0.00393889, 0.100181), "RELU")])
def test_int8_add_sub_mul_match_litert_over_every_pair_of_codes(op, scales, act, tmp_path):
    b = ModelBuilder()
    a = b.input("a", (256, 256), "int8", scale=scales[0], zero_point=9)
    c = b.input("b", (256, 256), "int8", scale=scales[1], zero_point=-21)
    y = b.tensor("y", (256, 256), "int8", scale=scales[2], zero_point=4)
    b.op(op, [a, c], [y], fused_activation_function=act)
    b.output(y)
    path = tmp_path / "add.tflite"
    path.write_bytes(b.build())
    codes = np.arange(-128, 128, dtype=np.int8)
    result = aot.check(str(path), inputs={"a": np.repeat(codes, 256).reshape(256, 256),
                                          "b": np.tile(codes, 256).reshape(256, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("op, encodings", [
    ("LOGISTIC", (0.0123, -17, 1 / 256, -128)), ("LOGISTIC", (0.31, 40, 1 / 256, -128)),
    ("TANH", (0.0071, 3, 1 / 128, 0)), ("TANH", (0.11, -50, 0.0123, 4))])
def test_int8_logistic_and_tanh_match_litert_for_every_code(op, encodings, tmp_path):
    path = tmp_path / "act.tflite"
    path.write_bytes(_with_input_encoding(op, *encodings))
    result = aot.check(str(path), inputs={"x": np.arange(-128, 128, dtype=np.int8).reshape(1, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


def _with_input_encoding(op: str, x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 256), "int8", scale=x_scale, zero_point=x_zp)
    y = b.tensor("y", (1, 256), "int8", scale=y_scale, zero_point=y_zp)
    b.op(op, [x], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("shape, axes, keep, encodings", [
    ((1, 7, 6, 5), [1, 2], True, (0.1, 0, 0.1, 0)), ((1, 7, 6, 5), [1, 2], False, (0.05, 3, 0.02, -7)),
    ((3, 5, 4, 6), [0, 3], True, (0.07, -20, 0.013, 5)), ((1, 4, 1, 8), [1], True, (0.1, 0, 0.1, 0)),
    ((2, 4, 3), [2], False, (0.1, 0, 0.1, 0))])
def test_int8_mean_matches_litert(shape, axes, keep, encodings, tmp_path):
    """TFLite's integer mean: 1/count folded into the multiplier, so halves round as its shifts make them."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    b = ModelBuilder()
    x = b.input("x", shape, "int8", scale=encodings[0], zero_point=encodings[1])
    y = b.tensor("y", kept if keep else tuple(d for i, d in enumerate(shape) if i not in axes), "int8",
                 scale=encodings[2], zero_point=encodings[3])
    b.op("MEAN", [x, b.constant("axes", np.array(axes, np.int32))], [y], keep_dims=keep)
    b.output(y)
    assert check(b.build(), tmp_path, seeds=(0, 1, 2)) == 0


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1"])
@pytest.mark.parametrize("encodings", [(0.05, 3, 0.05, 3), (0.05, 3, 0.031, -9), (0.0235294, 0, 6 / 255, -128)])
def test_int8_relu_operators_match_litert_for_every_code(op, encodings, tmp_path):
    path = tmp_path / "relu.tflite"
    path.write_bytes(_with_input_encoding(op, *encodings))
    result = aot.check(str(path), inputs={"x": np.arange(-128, 128, dtype=np.int8).reshape(1, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("alpha", [0.1, 0.0, 1.5, -0.3])
def test_int8_leaky_relu_matches_litert_for_every_code(alpha, tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 256), "int8", scale=0.047, zero_point=-11)
    y = b.tensor("y", (1, 256), "int8", scale=0.031, zero_point=6)
    b.op("LEAKY_RELU", [x], [y], alpha=alpha)
    b.output(y)
    path = tmp_path / "leaky.tflite"
    path.write_bytes(b.build())
    result = aot.check(str(path), inputs={"x": np.arange(-128, 128, dtype=np.int8).reshape(1, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("encodings", [(0.047, -11, 0.031, 6), (0.0235, 0, 0.02, -128), (0.2, 30, 0.15, -20),
                                       (0.0031, -100, 0.002, 50), (1.7, 3, 0.9, 0)])
def test_int8_hard_swish_matches_litert_for_every_code(encodings, tmp_path):
    """TFLite's 16-bit fixed point: its reluish multiplier shifting left (large scales) and right (small)."""
    path = tmp_path / "hard_swish.tflite"
    path.write_bytes(_with_input_encoding("HARD_SWISH", *encodings))
    result = aot.check(str(path), inputs={"x": np.arange(-128, 128, dtype=np.int8).reshape(1, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


def test_int8_hard_swish_with_an_output_scale_tflite_refuses_is_refused(tmp_path):
    _refused(_with_input_encoding("HARD_SWISH", 0.5, 0, 0.001, 0), tmp_path, "HARD_SWISH", "output scale")


@pytest.mark.parametrize("slope_shape, encodings", [
    ((1, 1, 4), (0.047, -11, 0.031, 6, 0.004, 3)), ((4,), (0.2, 30, 0.15, -20, 0.01, -60)),
    ((1, 8, 4), (0.01, 0, 0.03, 0, 0.02, 0))])
def test_int8_prelu_matches_litert_for_every_code(slope_shape, encodings, tmp_path):
    """Every input code against slopes of both signs, broadcast per channel or given per element."""
    x_scale, x_zp, y_scale, y_zp, a_scale, a_zp = encodings
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (8, 8, 4), "int8", scale=x_scale, zero_point=x_zp)
    y = b.tensor("y", (8, 8, 4), "int8", scale=y_scale, zero_point=y_zp)
    slope = b.constant("slope", rng.integers(-128, 128, slope_shape).astype(np.int8), scale=a_scale,
                       zero_point=a_zp)
    b.op("PRELU", [x, slope], [y])
    b.output(y)
    path = tmp_path / "prelu.tflite"
    path.write_bytes(b.build())
    result = aot.check(str(path), inputs={"x": np.arange(-128, 128, dtype=np.int8).reshape(8, 8, 4)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


RESIZES = [(op, options) for op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
           for options in ({}, {"align_corners": True}, {"half_pixel_centers": True})]


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("shapes", [((1, 5, 6, 3), (9, 13)), ((2, 7, 9, 17), (3, 4)), ((1, 3, 8, 4), (11, 8)),
                                    ((1, 1, 5, 2), (1, 21))])
@pytest.mark.parametrize("op, options", RESIZES, ids=[f"{op}-{'-'.join(o) or 'asymmetric'}" for op, o in RESIZES])
def test_quantized_resize_matches_litert(op, options, shapes, dtype, tmp_path):
    """The codes resized as TFLite resizes them (bilinear in 10-bit fixed point), up and down, one axis
    kept, and with encodings that differ (TFLite does not rescale)."""
    shape, size = shapes
    b = ModelBuilder()
    zero = 0 if dtype == "int16" else -7
    x = b.input("x", shape, dtype, scale=0.05, zero_point=zero)
    y = b.tensor("y", (shape[0], *size, shape[3]), dtype, scale=0.07, zero_point=zero)
    b.op(op, [x, b.constant("size", np.array(size, np.int32))], [y], **options)
    b.output(y)
    assert check(b.build(), tmp_path, seeds=(0, 1, 2)) == 0


@pytest.mark.parametrize("op, options", [("RELU", {}), ("RELU6", {}),
                                         ("LEAKY_RELU", {"alpha": 0.2}), ("LEAKY_RELU", {"alpha": -0.3})])
@pytest.mark.parametrize("y_scale", [0.001, 0.00037])
def test_int16_relus_match_litert_for_every_code(op, options, y_scale, tmp_path):
    """All 65,536 codes, one encoding in and out (a clamp of the codes) and two (rescaled)."""
    _every_int16_code_matches(op, options, 0.001, y_scale, tmp_path)


def _every_int16_code_matches(op: str, options: dict, x_scale: float, y_scale: float, tmp_path) -> None:
    b = ModelBuilder()
    x = b.input("x", (1, 65536), "int16", scale=x_scale, zero_point=0)
    y = b.tensor("y", (1, 65536), "int16", scale=y_scale, zero_point=0)
    b.op(op, [x], [y], **options)
    b.output(y)
    path = tmp_path / "every_code.tflite"
    path.write_bytes(b.build())
    result = aot.check(str(path), inputs={"x": np.arange(-32768, 32768).astype(np.int16).reshape(1, 65536)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("x_scale", [2**-12, 2**-11, 2**-10, 0.0003, 0.0011, 1e-6])
def test_int16_sigmoid_and_tanh_match_litert_for_every_code(op, x_scale, tmp_path):
    """All 65,536 codes through TFLite's sigmoid table: the scales it rescales by 3 << k (2**-12, tanh's
    2**-11) and by a 15-bit multiplier and shift (the rest, a power of two among them)."""
    _every_int16_code_matches(op, {}, x_scale, 2**-15, tmp_path)


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("encoding, message", [((2**-12, 3, 2**-15, 0), "zero points 0 only"),
                                               ((2**-12, 0, 2**-14, 0), "output scale of 2**-15 only")])
def test_int16_sigmoid_and_tanh_outside_tflites_rule_are_refused(op, encoding, message, tmp_path):
    x_scale, x_zp, y_scale, y_zp = encoding
    b = ModelBuilder()
    x = b.input("x", (1, 8), "int16", scale=x_scale, zero_point=x_zp)
    y = b.tensor("y", (1, 8), "int16", scale=y_scale, zero_point=y_zp)
    b.op(op, [x], [y])
    b.output(y)
    path = tmp_path / "curve16.tflite"
    path.write_bytes(b.build())
    with pytest.raises(aot.UnsupportedOpError, match=re.escape(message)):
        aot.compile(str(path))


def _16x8_dense(per_channel: bool, act: str) -> bytes:
    rng = np.random.default_rng(4)
    b = ModelBuilder()
    x = b.input("x", (400, 40), "int16", scale=0.0004, zero_point=0)
    y = b.tensor("y", (400, 7), "int16", scale=0.0011, zero_point=0)
    scales = rng.uniform(0.002, 0.02, 7 if per_channel else 1).astype(np.float32)
    w = b.constant("w", rng.integers(-127, 128, (7, 40)).astype(np.int8), scale=scales,
                   zero_point=np.zeros(scales.size, np.int64), quantized_dimension=0)
    bias = b.constant("b", rng.integers(-40000, 40000, 7).astype(np.int64),
                      scale=(np.float32(0.0004) * np.broadcast_to(scales, (7,))).astype(np.float32),
                      zero_point=np.zeros(7, np.int64), quantized_dimension=0)
    b.op("FULLY_CONNECTED", [x, w, bias], [y], fused_activation_function=act)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("per_channel, act", [(True, "NONE"), (False, "RELU")])
def test_16x8_fully_connected_matches_litert(per_channel, act, tmp_path):
    """int16 activations, int8 weights, an int64 bias: the int64 sum times the whole fixed-point multiplier,
    rounded once (not the 15-bit multiplier of the 16x8 convolutions: hundreds of the 2,800 outputs differ)."""
    assert check(_16x8_dense(per_channel, act), tmp_path, seeds=(0, 1)) == 0


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
def test_int8_maximum_minimum_compare_the_codes(op, tmp_path):
    b = ModelBuilder()
    a = b.input("a", (256, 256), "int8", scale=0.1, zero_point=3)
    c = b.input("b", (256, 256), "int8", scale=0.07, zero_point=-3)
    y = b.tensor("y", (256, 256), "int8", scale=0.1, zero_point=3)
    b.op(op, [a, c], [y])
    b.output(y)
    path = tmp_path / "mm.tflite"
    path.write_bytes(b.build())
    codes = np.arange(-128, 128, dtype=np.int8)
    result = aot.check(str(path), inputs={"a": np.repeat(codes, 256).reshape(256, 256),
                                          "b": np.tile(codes, 256).reshape(256, 256)})
    assert np.array_equal(result.outputs["y"], result.reference["y"])


def _16x8_conv(op: str) -> bytes:
    """int16 activations (zero point 0), int8 weights per channel, an int64 bias."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 11, 10, 6), "int16", scale=0.0007, zero_point=0)
    channels = 12
    scales = rng.uniform(0.002, 0.02, channels).astype(np.float32)
    shape = (channels, 3, 3, 6) if op == "CONV_2D" else (1, 3, 3, channels)
    w = b.constant("w", rng.integers(-127, 128, shape).astype(np.int8), scale=scales,
                   zero_point=np.zeros(channels, np.int64), quantized_dimension=0 if op == "CONV_2D" else 3)
    bias = b.constant("b", rng.integers(-2**20, 2**20, channels).astype(np.int64), scale=scales * np.float32(0.0007),
                      zero_point=np.zeros(channels, np.int64))
    y = b.tensor("y", (1, 6, 5, channels), "int16", scale=0.0031, zero_point=0)
    options = dict(padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6")
    if op == "DEPTHWISE_CONV_2D":
        options["depth_multiplier"] = 2
    b.op(op, [x, w, bias], [y], **options)
    b.output(y)
    return b.build()


def test_a_16x8_convolution_with_a_residual_add_matches_litert(tmp_path):
    """The int16 ADD after a 16x8 convolution runs in the convolution's epilogue: after the int64
    requantization, as the ADD kernel would have computed it."""
    rng = np.random.default_rng(5)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 5, 8), "int16", scale=0.0007, zero_point=0)
    other = b.input("other", (1, 6, 5, 8), "int16", scale=0.0011, zero_point=0)
    scales = rng.uniform(0.002, 0.02, 8).astype(np.float32)
    w = b.constant("w", rng.integers(-127, 128, (8, 3, 3, 8)).astype(np.int8), scale=scales,
                   zero_point=np.zeros(8, np.int64))
    bias = b.constant("b", rng.integers(-2**20, 2**20, 8).astype(np.int64), scale=scales * np.float32(0.0007),
                      zero_point=np.zeros(8, np.int64))
    conv = b.tensor("conv", (1, 6, 5, 8), "int16", scale=0.0031, zero_point=0)
    y = b.tensor("y", (1, 6, 5, 8), "int16", scale=0.0042, zero_point=0)
    b.op("CONV_2D", [x, w, bias], [conv], padding="SAME", stride_w=1, stride_h=1)
    b.op("ADD", [conv, other], [y], fused_activation_function="NONE")
    b.output(y)
    path = tmp_path / "residual16.tflite"
    path.write_bytes(b.build())
    artifact = aot.build(str(path), out_dir=tmp_path / "b")
    ops = [n.op for n in artifact.program.graph.nodes]
    assert ops.count("Conv") == 1 and "Add" not in ops        # the Add is the convolution's epilogue
    result = aot.check(str(path), inputs=feeds_for(path))
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_16x8_convolutions_match_litert(op, tmp_path):
    """Summed in int64 and requantized from it, as TFLite's 16x8 kernels do (feeds_for: the whole int16
    range)."""
    path = tmp_path / "16x8.tflite"
    path.write_bytes(_16x8_conv(op))
    result = aot.check(str(path), inputs=feeds_for(path))
    assert result.outputs["y"].dtype == np.int16
    assert np.array_equal(result.outputs["y"], result.reference["y"])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
def test_float_binary_ops_broadcast_as_tflite_does(op, tmp_path):
    b = ModelBuilder()
    a = b.input("a", (1, 5, 6, 4), "float32")
    c = b.input("b", (1, 1, 6, 4), "float32")
    y = b.tensor("y", (1, 5, 6, 4), "float32")
    b.op(op, [a, c], [y], fused_activation_function="RELU6")
    b.output(y)
    check(b.build(), tmp_path)


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC"])
def test_float_activations(op, tmp_path):
    b = ModelBuilder()
    x = b.input("x", (2, 33), "float32")
    y = b.tensor("y", (2, 33), "float32")
    b.op(op, [x], [y])
    b.output(y)
    check(b.build(), tmp_path)


@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float32"])
@pytest.mark.parametrize("network", ["ds_cnn", "resnet_block"])
def test_networks_of_mlperf_tinys_shapes_match_litert(network, int8, tmp_path):
    worst = check(getattr(tflite_models, network)(int8), tmp_path)
    if int8:
        assert worst == 0


def test_the_layout_transposes_cancel(tmp_path):
    """NHWC in, NHWC out, NHWC inside: no kernel moves data between layouts."""
    path = tmp_path / "m.tflite"
    path.write_bytes(tflite_models.resnet_block(True))
    artifact = aot.build(str(path), out_dir=tmp_path / "b")
    ops = [node.op for node in artifact.program.graph.nodes]
    assert "Transpose" not in ops and ops.count("Conv") == 6, ops
    assert artifact.program.graph.shape(artifact.program.graph.inputs[0]) == (1, 16, 16, 3)


def test_int8_interface_keeps_the_models_dtypes_and_encodings(tmp_path):
    path = tmp_path / "kws.tflite"
    path.write_bytes(tflite_models.ds_cnn(True))
    artifact = aot.build(str(path), out_dir=tmp_path / "b", name="kws")
    header = artifact.header.read_text()
    assert "const int8_t *input;" in header and "    int8_t *t22;" in header
    assert "#define KWS_INPUT_INPUT_SCALE 0.584699988f" in header       # float32(0.5847)
    assert "#define KWS_INPUT_INPUT_ZERO_POINT 83" in header
    assert "#define KWS_OUTPUT_T22_SCALE 0.00390625f" in header and "KWS_OUTPUT_T22_ZERO_POINT -128" in header


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m0plus", "aarch64-dotprod"])
def test_int8_networks_are_bit_exact_on_other_targets(target, tmp_path):
    assert check(tflite_models.ds_cnn(True), tmp_path, target, seeds=(0,)) == 0
    assert check(tflite_models.resnet_block(True), tmp_path, target, seeds=(0,)) == 0


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m0plus"])
def test_softmax_mean_and_16x8_are_bit_exact_on_other_targets(target, tmp_path):
    b = ModelBuilder()
    x = b.input("x", (9, 40), "int8", scale=0.05, zero_point=5)
    y = b.tensor("y", (9, 40), "int8", scale=1 / 256, zero_point=-128)
    b.op("SOFTMAX", [x], [y], beta=1.0)
    b.output(y)
    assert check(b.build(), tmp_path, target, seeds=(0,)) == 0
    mean = ModelBuilder()
    x = mean.input("x", (1, 5, 4, 6), "int8", scale=0.07, zero_point=-20)
    y = mean.tensor("y", (1, 1, 1, 6), "int8", scale=0.013, zero_point=5)
    mean.op("MEAN", [x, mean.constant("axes", np.array([1, 2], np.int32))], [y], keep_dims=True)
    mean.output(y)
    assert check(mean.build(), tmp_path, target, seeds=(0,)) == 0
    assert check(_16x8_conv("DEPTHWISE_CONV_2D"), tmp_path, target, seeds=(0,)) == 0
    assert check(_16x8_dense(True, "NONE"), tmp_path, target, seeds=(0,)) == 0
    softmax16 = ModelBuilder()
    x = softmax16.input("x", (4, 30), "int16", scale=0.0007, zero_point=0)
    y = softmax16.tensor("y", (4, 30), "int16", scale=1 / 32768, zero_point=0)
    softmax16.op("SOFTMAX", [x], [y], beta=1.0)
    softmax16.output(y)
    assert check(softmax16.build(), tmp_path, target, seeds=(0,)) == 0


def _upsampling_head() -> bytes:
    """TRANSPOSE_CONV, HARD_SWISH, PRELU and RESIZE_BILINEAR in turn, int8 (a decoder's shapes)."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, 4), "int8", scale=0.05, zero_point=-4)
    up = b.tensor("up", (1, 10, 10, 6), "int8", scale=0.04, zero_point=3)
    scales = rng.uniform(0.002, 0.02, 6).astype(np.float32)
    weights = b.constant("w", rng.integers(-127, 128, (6, 3, 3, 4)).astype(np.int8), scale=scales,
                         zero_point=np.zeros(6, np.int64), quantized_dimension=0)
    b.op("TRANSPOSE_CONV", [b.constant("shape", _i32(1, 10, 10, 6)), weights, x, None], [up], padding="SAME",
         stride_w=2, stride_h=2)
    swish = b.tensor("swish", (1, 10, 10, 6), "int8", scale=0.03, zero_point=-20)
    b.op("HARD_SWISH", [up], [swish])
    prelu = b.tensor("prelu", (1, 10, 10, 6), "int8", scale=0.02, zero_point=5)
    slope = b.constant("slope", rng.integers(-128, 128, (1, 1, 6)).astype(np.int8), scale=0.004, zero_point=2)
    b.op("PRELU", [swish, slope], [prelu])
    y = b.tensor("y", (1, 7, 13, 6), "int8", scale=0.02, zero_point=5)
    b.op("RESIZE_BILINEAR", [prelu, b.constant("size", _i32(7, 13))], [y], half_pixel_centers=True)
    b.output(y)
    return b.build()


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m4", "aarch64"])
def test_transpose_conv_hard_swish_prelu_and_resize_are_bit_exact_on_other_targets(target, tmp_path):
    assert check(_upsampling_head(), tmp_path, target, seeds=(0,)) == 0


SEQUENCE_PROGRAM = r"""
#include <stdio.h>
#include "m.h"

static {ctype_in} x[RUNS][M_INPUT_{IN}_SIZE];
static {ctype_out} y[RUNS][M_OUTPUT_{OUT}_SIZE];
static unsigned char ws[M_WORKSPACE_SIZE] __attribute__((aligned(64)));

/* runs the inputs in turn from the reset state, then the last one again after a reset */
int main(void)
{{
    m_inputs in;
    m_outputs out;
    int k;
    FILE *f = fopen("x.bin", "rb");
    if (f == NULL || fread(x, sizeof x[0], RUNS - 1, f) != RUNS - 1 || M_STATE_BYTES == 0)
        return 10;
    fclose(f);
    if (m_reset(0) != M_ERR_NULL || m_reset(ws) != M_OK)
        return 11;
    for (k = 0; k < RUNS; k++) {{
        if (k == RUNS - 1 && m_reset(ws) != M_OK)
            return 12;
        in.{in_field} = x[k < RUNS - 1 ? k : RUNS - 2];
        out.{out_field} = y[k];
        if (m_run(&in, &out, ws) != M_OK)
            return 13;
    }}
    f = fopen("y.bin", "wb");
    if (f == NULL || fwrite(y, sizeof y, 1, f) != 1)
        return 14;
    return fclose(f) != 0;
}}
"""


def _runs_in_sequence_as_the_reference_does(data: bytes, xs: np.ndarray, tmp_path, target: str = "host",
                                            reference: str = "litert") -> np.ndarray:
    """The model's one input fed xs in turn, its state carried over, then xs[-1] again after a reset, through
    the C API (m_reset, m_run) of a build for `target`; checked against the reference's invokes in the same
    sequence (LiteRT's reset_all_variables, or TFLite Micro's reset, for the reset). Returns the outputs, one
    row per run."""
    from aot.codegen.library import compile_flags
    from aot.target import get_target

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    artifact = aot.build(str(path), target=target, out_dir=tmp_path / "build", name="m")
    (spec_in,), (spec_out,) = artifact.metadata["inputs"], artifact.metadata["outputs"]
    ctypes = {"float32": "float", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}
    program = SEQUENCE_PROGRAM.format(ctype_in=ctypes[spec_in["dtype"]], ctype_out=ctypes[spec_out["dtype"]],
                                      IN=spec_in["c_name"].upper(), OUT=spec_out["c_name"].upper(),
                                      in_field=spec_in["c_name"], out_field=spec_out["c_name"])
    (tmp_path / "main.c").write_text(f"#define RUNS {len(xs) + 1}\n" + program)
    (tmp_path / "x.bin").write_bytes(np.ascontiguousarray(xs).tobytes())
    tgt = get_target(target)
    assert tgt.os != "none", "a Linux target: the program reads and writes files"
    build = subprocess.run([tgt.cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *compile_flags(tgt),
                            f"-I{artifact.dir}", "main.c", str(artifact.source), str(artifact.object), "-lm",
                            "-o", "prog"], cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([*tgt.run_command, "./prog"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = np.fromfile(tmp_path / "y.bin", spec_out["dtype"]).reshape(len(xs) + 1, -1)

    expected = np.stack(_reference_sequence(data, [*xs, xs[-1]], reset_before=len(xs), reference=reference))
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
    else:
        np.testing.assert_array_equal(got, expected)
    return got


def _reference_sequence(data: bytes, xs, reset_before: int, reference: str) -> list[np.ndarray]:
    """The reference's outputs for the inputs xs fed in turn, its variables reset before run `reset_before`."""
    outputs = []
    if reference == "tflite-micro":
        from tflite_micro.python.tflite_micro import runtime

        interpreter = runtime.Interpreter.from_bytes(data, arena_size=1 << 22)
        for k, x in enumerate(xs):
            if k == reset_before:
                interpreter.reset()
            interpreter.set_input(x, 0)
            interpreter.invoke()
            outputs.append(np.array(interpreter.get_output(0)).reshape(-1))
        return outputs
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    feed, fetch = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
    for k, x in enumerate(xs):
        if k == reset_before:
            interpreter.reset_all_variables()
        interpreter.set_tensor(feed, x)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(fetch).reshape(-1))
    return outputs


@pytest.mark.parametrize("options", [{}, {"time_major": True}, {"peepholes": True}, {"stacked": True},
                                     {"cell_clip": 0.3}, {"cifg": True, "peepholes": True}],
                         ids=["batch_major", "time_major", "peepholes", "stacked", "cell_clip", "cifg"])
def test_float_lstm_matches_litert(options, tmp_path):
    assert check(tflite_models.lstm(**options), tmp_path) < 1e-5


def test_lstm_state_is_kept_between_runs_and_reset(tmp_path):
    """The variable tensors live in the workspace: a run continues from the previous run's state, as LiteRT's
    next invoke does, and after m_reset the model starts over."""
    xs = np.random.default_rng(0).standard_normal((3, 2, 5, 3)).astype(np.float32)
    got = _runs_in_sequence_as_the_reference_does(tflite_models.lstm(stacked=True), xs, tmp_path)
    assert not np.allclose(got[2], got[3], atol=1e-3)       # the state did carry over
    header = (tmp_path / "build" / "m.h").read_text()
    assert "int32_t m_reset(void *workspace);" in header
    assert "#define M_STATE_BYTES 128u" in header        # two layers' h and c, 2 x 4 floats each


INTEGER_LSTMS = [{}, {"time_major": True}, {"stacked": True, "head": 48}, {"cell_clip": 0.7}, {"cell_power": -15},
                 {"cell_power": -9, "x_zp": 0, "h_zp": 0}, {"batch": 1, "steps": 1, "width": 257, "hidden": 40},
                 {"act": "int16"}, {"act": "int16", "time_major": True, "stacked": True, "head": 48}]


@pytest.mark.parametrize("options", INTEGER_LSTMS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "int8")
def test_integer_lstm_matches_tflite_micro(options, tmp_path):
    """int8 (and 16x8) LSTMs as TFLite Micro's reference kernel computes them, bit for bit: both layouts,
    stacked with a dense head (which then follows TFLite Micro's requantization too), cell clipping, cell
    scales from 2**-15 to 2**-9, zero points folded or not."""
    pytest.importorskip("tflite_micro")
    data = tflite_models.integer_lstm(**options)
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    for seed in (0, 1, 2):
        result = aot.check(str(path), inputs=feeds_for(path, seed))
        assert result.reference_used == "tflite-micro"
        for name, ref in result.reference.items():
            assert np.array_equal(result.outputs[name], ref), name


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55", "cortex-m0plus"])
def test_integer_lstm_matches_tflite_micro_on_cortex_m(target, tmp_path):
    pytest.importorskip("tflite_micro")
    for options in ({"stacked": True, "head": 48}, {"act": "int16", "time_major": True}):
        assert check(tflite_models.integer_lstm(**options), tmp_path / str(len(options)), target, seeds=(0,),
                     reference="tflite-micro") == 0


def test_integer_lstm_state_is_kept_between_runs_and_reset(tmp_path):
    pytest.importorskip("tflite_micro")
    rng = np.random.default_rng(5)
    xs = rng.integers(-128, 128, (4, 2, 6, 9)).astype(np.int8)
    got = _runs_in_sequence_as_the_reference_does(tflite_models.integer_lstm(stacked=True), xs, tmp_path,
                                                  reference="tflite-micro")
    assert not np.array_equal(got[-2], got[-1])       # the state made the difference


def _dense_where_the_runtimes_differ(tmp_path) -> tuple:
    """A FULLY_CONNECTED layer and inputs on which LiteRT (requantizing in double) and TFLite Micro (in fixed
    point) give different codes: a precondition, checked."""
    from aot.frontend.tflite import load as load_tflite
    from aot.reference import litert_outputs, tflite_micro_outputs

    rng = np.random.default_rng(7)
    b = ModelBuilder()
    x = b.input("x", (64, 96), "int8", scale=0.05, zero_point=-3)
    w_scale = 0.5 / 127 / np.sqrt(96)
    w = b.constant("w", rng.integers(-127, 128, (48, 96)).astype(np.int8), scale=w_scale, zero_point=0)
    bias = b.constant("bias", rng.integers(-5000, 5000, 48).astype(np.int32), scale=0.05 * w_scale, zero_point=0)
    y = b.tensor("y", (64, 48), "int8", scale=0.0371, zero_point=4)
    b.op("FULLY_CONNECTED", [x, w, bias], [y])
    b.output(y)
    path = tmp_path / "dense.tflite"
    path.write_bytes(b.build())
    feeds = feeds_for(path, 0)
    file = load_tflite(path, path.read_bytes()).file
    assert not np.array_equal(litert_outputs(file, feeds)["y"], tflite_micro_outputs(file, feeds)["y"])
    return path, feeds


def test_the_tflite_arithmetic_follows_litert_or_tflite_micro_as_asked(tmp_path):
    """By default LiteRT's FULLY_CONNECTED (and LiteRT the reference); with tflite_arithmetic="tflite-micro"
    TFLite Micro's, bit for bit, checked against TFLite Micro's interpreter; the build says which."""
    pytest.importorskip("tflite_micro")
    path, feeds = _dense_where_the_runtimes_differ(tmp_path)
    for arithmetic, expected in ((None, "litert"), ("litert", "litert"), ("tflite-micro", "tflite-micro")):
        result = aot.check(str(path), inputs=feeds, tflite_arithmetic=arithmetic, out_dir=tmp_path / str(arithmetic))
        assert result.reference_used == expected
        assert np.array_equal(result.outputs["y"], result.reference["y"])
        meta = json.loads((tmp_path / str(arithmetic) / "metadata.json").read_text())
        assert meta["model"]["arithmetic"] == expected


def test_the_tflite_arithmetic_option_is_checked(tmp_path):
    lstm = tmp_path / "lstm.tflite"
    lstm.write_bytes(tflite_models.integer_lstm())
    run = _aot("build", str(lstm), "--tflite-arithmetic", "litert", "-o", str(tmp_path / "out"))
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM) computes as TFLite Micro does" in run.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(aot.OptionError, match="is not one of litert, tflite-micro"):
        aot.compile(str(lstm), tflite_arithmetic="micro")
    onnx_model = tmp_path / "m.onnx"
    onnx_model.write_bytes(_tiny_onnx())
    with pytest.raises(aot.OptionError, match="an ONNX model's is onnxruntime's"):
        aot.compile(str(onnx_model), tflite_arithmetic="litert")


def _tiny_onnx() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("change, words", [
    ({"peepholes": True}, ("peepholes",)), ({"per_channel": True}, ("one scale",)),
    ({"cell_power": None}, ("power-of-two scale",)), ({"cell_act": "RELU"}, ("activation RELU", "TANH only")),
    ({"cifg": True}, ("all four gates",))])
def test_integer_lstm_beyond_tflite_micro_is_refused(change, words, tmp_path):
    _refused(tflite_models.integer_lstm(**change), tmp_path, "UNIDIRECTIONAL_SEQUENCE_LSTM", *words)


@pytest.mark.parametrize("dtype", ["float32", "int16"])
@pytest.mark.parametrize("options", [{}, {"rank": 1, "act": "NONE", "bias": False}], ids=["rank2", "rank1"])
def test_svdf_matches_litert_over_a_sequence_of_runs(dtype, options, tmp_path):
    """More runs than the memory is long: every filter's memory fills and shifts out, run after run."""
    if dtype != "float32" and options.get("act") == "NONE":
        options = {**options, "act": "RELU"}        # LiteRT's integer SVDF takes RELU only (and ignores it)
    rng = np.random.default_rng(1)
    xs = (rng.integers(-128, 128, (7, 2, 12)).astype(np.int8) if dtype != "float32"
          else rng.standard_normal((7, 2, 12)).astype(np.float32))
    got = _runs_in_sequence_as_the_reference_does(tflite_models.svdf(dtype, **options), xs, tmp_path)
    assert not np.array_equal(got[-2], got[-1])


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "armv7-neon"])
def test_state_is_kept_between_runs_on_other_targets(target, tmp_path):
    rng = np.random.default_rng(2)
    codes = rng.integers(-128, 128, (6, 2, 12)).astype(np.int8)
    _runs_in_sequence_as_the_reference_does(tflite_models.svdf("int16"), codes, tmp_path / "svdf", target)
    values = rng.standard_normal((3, 2, 5, 3)).astype(np.float32)
    _runs_in_sequence_as_the_reference_does(tflite_models.lstm(), values, tmp_path / "lstm", target)
    lstm_codes = rng.integers(-128, 128, (3, 2, 6, 9)).astype(np.int8)
    _runs_in_sequence_as_the_reference_does(tflite_models.integer_lstm(), lstm_codes, tmp_path / "lstm8", target,
                                            "tflite-micro")


# --- files aot refuses --------------------------------------------------------------------------------------

def _aot(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True, cwd=cwd)


def _refused(data: bytes, tmp_path, *words: str) -> None:
    path = tmp_path / "bad.tflite"
    path.write_bytes(data)
    out = tmp_path / "out"
    run = _aot("build", str(path), "-o", str(out))
    assert run.returncode == 1, run.stderr
    message = run.stderr.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message, message
    assert message.startswith("aot: error: bad.tflite"), message
    for word in words:
        assert word in message, message
    assert not out.exists()


def test_a_truncated_file_is_refused(tmp_path):
    data = tflite_models.ds_cnn(True)
    _refused(data[: len(data) // 3], tmp_path, "truncated or corrupt")


def test_a_corrupt_file_is_refused(tmp_path):
    data = bytearray(tflite_models.ds_cnn(True))
    data[8:200] = bytes(range(192))
    _refused(bytes(data), tmp_path)


def test_a_custom_operator_is_refused_by_name(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.custom_op("MyDetector", [x], [y])
    b.output(y)
    _refused(b.build(), tmp_path, "operator 0", "custom operator 'MyDetector'")


def test_an_unsupported_builtin_is_refused_with_its_index(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    z = b.tensor("z", (1, 4), "float32")
    b.op("RELU", [x], [y])
    b.op("HASHTABLE_LOOKUP", [y], [z])
    b.output(z)
    _refused(b.build(), tmp_path, "operator 1 (HASHTABLE_LOOKUP)", "not supported")


@pytest.mark.parametrize("options", [{}, {"rank": 1, "layers": 1, "memory": 9}])
def test_an_svdf_with_int8_state_matches_tflite_micro_over_a_sequence_of_runs(options, tmp_path):
    """TFLite Micro's int8-state SVDF (a state zero point of 5), which LiteRT cannot run: the model follows
    TFLite Micro, and is checked against its interpreter."""
    pytest.importorskip("tflite_micro")
    rng = np.random.default_rng(3)
    xs = rng.integers(-128, 128, (8, 2, 12)).astype(np.int8)
    got = _runs_in_sequence_as_the_reference_does(tflite_models.svdf("int8", **options), xs, tmp_path,
                                                  reference="tflite-micro")
    assert not np.array_equal(got[-2], got[-1])


def test_a_float16_tensor_is_refused(tmp_path):
    _refused(one_op("RELU", (1, 4), (1, 4), "float16"), tmp_path, "float16")


# --- differential fuzzing: random TFLite graphs against LiteRT (the long run: benchmarks/fuzz_compiler.py) ---

@pytest.mark.parametrize("start", [0, 12])
def test_random_tflite_graphs_match_litert(start):
    from fuzz_tflite import check as fuzz_check
    from fuzz_tflite import generate

    failures = []
    for index in range(start, start + 12):
        outcome = fuzz_check(generate(2026, index))
        if outcome.kind != "pass":
            failures.append(f"graph {index}: {outcome.kind}: {outcome.detail}")
    assert not failures, failures


def test_the_tflite_graph_generator_is_deterministic_and_varied():
    from fuzz_tflite import generate

    first, again = generate(5, 3), generate(5, 3)
    assert first.data == again.data and np.array_equal(first.inputs["input"], again.inputs["input"])
    kinds = {generate(5, i).int8 for i in range(12)}
    ops = set().union(*(generate(5, i).ops for i in range(40)))
    assert kinds == {True, False} and {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SOFTMAX", "CONCATENATION"} <= ops


@pytest.mark.qemu
def test_random_tflite_graphs_match_litert_on_a_cortex_m4():
    from fuzz_tflite import check as fuzz_check
    from fuzz_tflite import generate

    outcomes = [fuzz_check(generate(2026, index), "cortex-m4") for index in range(100, 106)]
    assert all(o.kind == "pass" for o in outcomes), outcomes


def test_commands_for_onnx_models_only_say_so(tmp_path):
    path = tmp_path / "kws.tflite"
    path.write_bytes(tflite_models.ds_cnn(True))
    for args, words in ((("quantize", str(path), "-o", str(tmp_path / "q.onnx")), "quantizes ONNX models"),
                        (("run", str(path), "--bisect"), "--bisect runs ONNX models"),
                        (("run", str(path), "--reference", "onnx"), "reference 'onnx' does not run a TFLite model")):
        run = _aot(*args)
        assert run.returncode == 1 and words in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.parametrize("target, instruction", [("cortex-m55", "vqrdmulh.s32"), ("aarch64", "sqrdmulh"),
                                                 ("armv7-neon", "vqrdmulh.s32")])
def test_the_rounding_doubling_multiply_is_one_instruction_where_the_target_has_it(target, instruction, tmp_path):
    path = tmp_path / "kws.tflite"
    path.write_bytes(tflite_models.ds_cnn(True))
    artifact = aot.build(str(path), target=target, out_dir=tmp_path / "b", emit="asm")
    assert instruction in (artifact.dir / f"{artifact.name}.s").read_text()
