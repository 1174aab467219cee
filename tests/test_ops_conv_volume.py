"""3-D convolution against onnxruntime: Conv over N x C x D x H x W with bias or none, groups (depthwise
too), strides, dilations, explicit and automatic pads, a weight computed at run time, and a small 3-D
network around it (BatchNormalization, Relu, MaxPool, GlobalAveragePool over five dimensions); 3-D
ConvTranspose with strides, dilations, groups, pads, output_padding, auto_pad and output_shape."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from oracle import assert_matches_onnxruntime, make_model

import aot
from aot.errors import ModelError

X = (2, 4, 5, 6, 7)
# attributes, weight shape (O, I/group, kD, kH, kW), with a bias
CASES = {
    "plain": ({}, (3, 4, 3, 3, 3), True),
    "no_bias_strided_padded": ({"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}, (5, 4, 3, 2, 3), False),
    "grouped_dilated": ({"group": 2, "dilations": [2, 1, 2]}, (6, 2, 2, 3, 2), True),
    "depthwise": ({"group": 4, "pads": [1] * 6}, (4, 1, 3, 3, 3), True),
    "same_lower": ({"auto_pad": "SAME_LOWER", "strides": [2, 2, 3]}, (3, 4, 2, 3, 4), True),
    "pointwise": ({}, (7, 4, 1, 1, 1), True),
    "window_past_the_input": ({"pads": [2, 3, 3, 2, 3, 3]}, (2, 4, 5, 7, 7), False),
}


def _conv(case: str, seed: int = 0):
    attrs, wshape, bias = CASES[case]
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal(wshape).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(wshape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", *inits], ["y"], name="conv", **attrs)
    return make_model([node], {"x": X}, {"y": None}, inits, opset=17)


@pytest.mark.parametrize("case", sorted(CASES))
def test_volume_conv(case):
    assert_matches_onnxruntime(_conv(case))


def test_volume_conv_weight_and_bias_computed_at_run_time():
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1], group=2)
    model = make_model([node], {"x": (1, 4, 3, 5, 5), "w": (6, 2, 2, 3, 3), "b": (6,)}, {"y": None}, opset=17)
    assert_matches_onnxruntime(model)


def test_volume_network():
    rng = np.random.default_rng(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    inits = {"w1": f32(4, 2, 3, 3, 3), "b1": f32(4), "scale": np.abs(f32(4)) + 0.5, "shift": f32(4),
             "mean": f32(4), "var": np.abs(f32(4)) + 0.5, "w2": f32(6, 2, 1, 3, 3), "fc": f32(6, 5)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 6),
             helper.make_node("BatchNormalization", ["c1", "scale", "shift", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["c2"], group=2),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["flat"]),
             helper.make_node("MatMul", ["flat", "fc"], ["y"])]
    assert_matches_onnxruntime(make_model(nodes, {"x": (1, 2, 6, 8, 8)}, {"y": None}, inits, opset=17))


TRANSPOSED = {
    "plain": ({}, (4, 3, 2, 2, 2), True),
    "strided_padded": ({"strides": [2, 2, 2], "pads": [1, 0, 1, 0, 1, 1]}, (4, 2, 3, 3, 3), False),
    "output_padding_dilated": ({"strides": [2, 1, 3], "output_padding": [1, 0, 2], "dilations": [1, 2, 1]},
                               (4, 3, 2, 2, 3), True),
    "grouped": ({"group": 2, "strides": [2, 2, 1], "dilations": [2, 1, 1]}, (4, 3, 2, 3, 2), True),
    "same_upper": ({"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}, (4, 2, 3, 3, 3), True),
    "output_shape": ({"output_shape": [5, 9, 10], "strides": [2, 2, 2]}, (4, 2, 3, 3, 2), True),
}


def _conv_transpose(case: str, seed: int = 0):
    attrs, wshape, bias = TRANSPOSED[case]
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal(wshape).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(wshape[1] * attrs.get("group", 1)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", *inits], ["y"], name="deconv", **attrs)
    return make_model([node], {"x": (2, 4, 3, 4, 5)}, {"y": None}, inits, opset=17)


@pytest.mark.parametrize("case", sorted(TRANSPOSED))
def test_volume_conv_transpose(case):
    assert_matches_onnxruntime(_conv_transpose(case))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_volume_conv_under_emulation(target):
    assert_matches_onnxruntime(_conv("grouped_dilated"), target=target)
    assert_matches_onnxruntime(_conv_transpose("grouped"), target=target)


@pytest.mark.parametrize("rank", [2, 3])
def test_conv_transpose_weight_not_fitting_the_input_channels_is_named(rank, tmp_path):
    """onnx's inference does not check that the weight's first axis spans the input's channels."""
    weight = np.ones((3, 4) + (2,) * rank, np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="deconv", strides=[2] * rank)
    model = make_model([node], {"x": (1, 4) + (3,) * rank}, {"y": None}, {"w": weight}, opset=17)
    shape = ", ".join(map(str, weight.shape))
    with pytest.raises(ModelError, match=rf"node 'deconv' \(ConvTranspose\): input 'x' has 4 channels, but "
                                         rf"weight 'w' \[{shape}\] takes 3"):
        aot.build(model, target="host", out_dir=tmp_path)


@pytest.mark.parametrize("rank", [2, 3])
def test_conv_transpose_output_shape_with_an_odd_total_pad(rank):
    """output_shape without auto_pad puts the odd pad at the beginning (ONNX's rule, onnxruntime's result),
    unlike SAME_UPPER; 2-D shares the rule with 3-D."""
    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((2, 3) + (3,) * rank).astype(np.float32)}
    # per axis: 2 * (n - 1) + 3 - out = 1 for n = 3, out = 6
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2] * rank, output_shape=[6] * rank)
    model = make_model([node], {"x": (1, 2) + (3,) * rank}, {"y": None}, inits, opset=17)
    assert assert_matches_onnxruntime(model)["y"].shape == (1, 3) + (6,) * rank
