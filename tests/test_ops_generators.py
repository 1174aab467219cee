"""Tensors of a shape the declared output gives, their sizes or bounds fed at run time (aot/ops/generators.py):
the cosine-sum windows, Range and ConstantOfShape, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import onnxruntime_outputs

import aot


def _window(op: str, length: int, periodic: int, out_type: int = TensorProto.FLOAT):
    """A window whose size is fed at run time; its length is the declared output's."""
    node = helper.make_node(op, ["size"], ["y"], name="window", periodic=periodic, output_datatype=out_type)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("size", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", out_type, [length])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("length", [1, 2, 7, 16])
def test_window_of_a_size_fed_at_run_time(op, periodic, length):
    """Built from the declared length, against onnxruntime fed the size (a symmetric window of length 1
    is 0/0 there too: NaN)."""
    model = _window(op, length, periodic)
    size = np.array(length, np.int64)
    got = aot.run(model, inputs={"size": size})["y"]
    want = onnxruntime_outputs(model, {"size": size})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_a_window_never_reads_its_size():
    """A size at run time that contradicts the declared length is the model's error; the build gives
    the declared length's window whatever comes in, and reads nothing out of bounds."""
    model = _window("HannWindow", 4, 1)
    for size in (4, 0, -3, 1 << 40):
        got = aot.run(model, inputs={"size": np.array(size, np.int64)})["y"]
        np.testing.assert_allclose(got, [0.0, 0.5, 1.0, 0.5], atol=1e-7)


def test_a_window_of_integer_type_truncates_as_onnxruntime():
    model = _window("HannWindow", 8, 1, TensorProto.INT64)
    size = np.array(8, np.int64)
    got = aot.run(model, inputs={"size": size})["y"]
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, {"size": size})["y"])


def _range(length: int, elem: int = TensorProto.FLOAT):
    """Range with start, limit and delta fed at run time; its length is the declared output's."""
    node = helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="range")
    inputs = [helper.make_tensor_value_info(n, elem, []) for n in ("start", "limit", "delta")]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, [length])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


RANGES = {      # (start, limit, delta, dtype): float32 steps that are inexact add up as onnxruntime adds them
    "tenths": (0.1, 10.0, 0.1, np.float32),
    "thirds_down": (5.0, -7.0, -1 / 3, np.float32),
    "large_start": (16777216.0, 16777316.0, 3.0, np.float32),
    "one": (2.5, 3.0, 4.0, np.float32),
    "int32_down": (10, -20, -3, np.int32),
    "int64": (-5, 100, 7, np.int64),
    "int32_wraps": (2**31 - 5, 2**31 - 1, 1, np.int32),      # limit as if past the top: the sums wrap
}


@pytest.mark.parametrize("name", RANGES)
def test_range_fed_at_run_time_matches_onnxruntime_bit_for_bit(name):
    start, limit, delta, dtype = RANGES[name]
    feeds = {"start": np.array(start, dtype), "limit": np.array(limit, dtype), "delta": np.array(delta, dtype)}
    if name == "int32_wraps":       # no valid model gives it: onnxruntime reads the declared length from
        feeds["limit"] = np.array(2**31 - 1, dtype)     # the values, so compare with its own repeated addition
        want = np.array([2**31 - 5 + i for i in range(8)], np.int64).astype(np.int32)
        length = 8
    else:
        length = max(int(np.ceil((float(feeds["limit"]) - float(feeds["start"])) / float(feeds["delta"]))), 0)
    model = _range(length, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    got = aot.run(model, inputs=feeds)["y"]
    if name != "int32_wraps":
        want = onnxruntime_outputs(model, feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(set(RANGES) - {"int32_wraps"}))
def test_range_of_constants_folds_to_what_runs_at_run_time(name):
    """Frozen, the Range folds at compile time; the evaluator adds in order too (ONNX's reference takes
    numpy's arange, a float32 step or two apart), so both builds give onnxruntime's values."""
    start, limit, delta, dtype = RANGES[name]
    feeds = {"start": np.array(start, dtype), "limit": np.array(limit, dtype), "delta": np.array(delta, dtype)}
    length = max(int(np.ceil((float(feeds["limit"]) - float(feeds["start"])) / float(feeds["delta"]))), 0)
    model = _range(length, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    folded = aot.run(model, inputs={}, freeze=feeds)["y"]
    np.testing.assert_array_equal(folded, onnxruntime_outputs(model, feeds)["y"])


def test_range_reads_only_start_and_delta():
    """Bounds that contradict the declared length (the model's error) change nothing but the values read:
    start and delta; the build writes the declared length and never out of bounds."""
    model = _range(5)
    for limit, delta in ((100.0, 1.0), (-100.0, 1.0), (0.0, 0.0), (np.inf, np.nan)):
        feeds = {"start": np.array(1.0, np.float32), "limit": np.array(limit, np.float32),
                 "delta": np.array(delta, np.float32)}
        got = aot.run(model, inputs=feeds)["y"]
        np.testing.assert_array_equal(got, np.cumsum(np.array([1.0] + [delta] * 4, np.float32)))   # in order


@pytest.mark.parametrize("value", [None, np.array([1.5], np.float32), np.array([-7], np.int64)])
def test_constant_of_shape_fed_at_run_time(value):
    """The declared shape decides; the values are the attribute's. A shape fed at run time that
    contradicts it (the model's error) is not read."""
    attrs = {} if value is None else {"value": helper.make_tensor("v", helper.np_dtype_to_tensor_dtype(value.dtype),
                                                                    [1], value)}
    elem = TensorProto.FLOAT if value is None else helper.np_dtype_to_tensor_dtype(value.dtype)
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", elem, [2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    shape = np.array([2, 3, 4], np.int64)
    want = onnxruntime_outputs(model, {"shape": shape})["y"]
    for fed in (shape, np.array([0, -1, 1 << 40], np.int64)):
        got = aot.run(model, inputs={"shape": fed})["y"]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_range_bounds_of_one_element():
    """AffineGrid's function body, its If inlined and its sizes folded, gives Range a limit of shape [1]
    (onnxruntime runs the body: its Range kernel takes one element, and its loader never sees the shape).
    ONNX's inference wants scalars and refused it; aot reads the one element."""
    node = helper.make_node("Range", ["start", "limit", "delta"], ["r"])
    scale = helper.make_node("Mul", ["r", "x"], ["y"])
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "start"),
             numpy_helper.from_array(np.array([5.0], np.float32), "limit"),
             numpy_helper.from_array(np.array(1.0, np.float32), "delta")]
    graph = helper.make_graph([node, scale], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.arange(5, dtype=np.float32) + 0.5
    np.testing.assert_array_equal(aot.run(model, {"x": x})["y"], np.arange(5, dtype=np.float32) * x)
