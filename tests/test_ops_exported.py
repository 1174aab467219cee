"""Ops that PyTorch exporters emit beyond the core CNN set: reductions, slicing, GELU, LogSoftmax, ...
each alone and after a Conv (so the NHWC layout is exercised), compared with onnxruntime."""

import numpy as np
import pytest
from onnx import helper
from oracle import assert_matches_onnxruntime, make_model

rng = np.random.default_rng(7)
W = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)


def conv_then(op_nodes, x_shape=(1, 3, 7, 9)):
    """x -> Conv(6 channels, pad 1) -> c -> op_nodes -> y."""
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])
    return [conv, *op_nodes], {"x": x_shape}, {"w": W}


def i64(*values):
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"])
@pytest.mark.parametrize("axes,keepdims",
                         [((2, 3), 1), ((2, 3), 0), ((1,), 1), ((-1,), 0), ((1, 3), 1), ((0, 1, 2, 3), 0)])
def test_reduce_after_conv(op, axes, keepdims):
    # opset 17: ReduceSum takes axes as an input, the others as an attribute (inputs from opset 18).
    if op == "ReduceSum":
        node = helper.make_node(op, ["c", "axes"], ["y"], name="r", keepdims=keepdims)
        inits = {"axes": i64(*axes)}
    else:
        node = helper.make_node(op, ["c"], ["y"], name="r", axes=list(axes), keepdims=keepdims)
        inits = {}
    nodes, inputs, weights = conv_then([node])
    assert_matches_onnxruntime(make_model(nodes, inputs, {"y": None}, {**weights, **inits}))


def test_reduce_mean_opset18_axes_input():
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="r", keepdims=1)
    model = make_model([node], {"x": (2, 5, 3)}, {"y": None}, {"axes": i64(1)}, opset=18)
    assert_matches_onnxruntime(model)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ((1,), (5,), (1,), (1,)),                    # channels 1..4 of the conv output
    ((0, 2), (9, 7), (2, 3), (2, 1)),            # strided rows
    ((-1,), (-10,), (3,), (-1,)),                # reversed columns
    ((0,), (100,), (1,), (3,)),                  # end clamped
])
def test_slice_after_conv(starts, ends, axes, steps):
    node = helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["y"], name="slice")
    nodes, inputs, weights = conv_then([node])
    inits = {"s": i64(*starts), "e": i64(*ends), "a": i64(*axes), "st": i64(*steps)}
    assert_matches_onnxruntime(make_model(nodes, inputs, {"y": None}, {**weights, **inits}))


def test_split_into_chunks():
    node = helper.make_node("Split", ["c", "sizes"], ["y0", "y1", "y2"], name="split", axis=1)
    nodes, inputs, weights = conv_then([node])
    model = make_model(nodes, inputs, {"y0": None, "y1": None, "y2": None}, {**weights, "sizes": i64(1, 2, 3)})
    assert_matches_onnxruntime(model)


@pytest.mark.parametrize("op,attrs", [("Reciprocal", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})])
def test_unary(op, attrs):
    node = helper.make_node(op, ["x"], ["y"], name="u", **attrs)
    model = make_model([node], {"x": (3, 37)}, {"y": None}, opset=20)
    inputs = {"x": (rng.standard_normal((3, 37)) * 3 + (4 if op == "Reciprocal" else 0)).astype(np.float32)}
    assert_matches_onnxruntime(model, inputs=inputs)


def test_log_of_positive_values():
    node = helper.make_node("Log", ["x"], ["y"], name="log")
    model = make_model([node], {"x": (5, 41)}, {"y": None})
    x = np.exp(rng.uniform(-80, 80, (5, 41))).astype(np.float32)
    assert_matches_onnxruntime(model, inputs={"x": x})


@pytest.mark.parametrize("axis", [-1, 1])
def test_log_softmax(axis):
    nodes, inputs, weights = conv_then([helper.make_node("LogSoftmax", ["c"], ["y"], name="ls", axis=axis)])
    assert_matches_onnxruntime(make_model(nodes, inputs, {"y": None}, weights))
