"""ReverseSequence and MaxUnpool, whose second operand is an int64 tensor read at run time, against
onnxruntime (or ONNX's reference where they disagree); out-of-range lengths never reach outside."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import aot


def _model(node, inputs, outputs, opset=17):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.mark.parametrize("batch_axis, shape", [(1, (5, 3, 4)), (0, (3, 5, 2, 2))])
@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def test_reverse_sequence(batch_axis, shape, target):
    time_axis = 1 - batch_axis
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)
    batches = shape[batch_axis]
    model = _model(node, [("x", F, shape), ("lens", I64, [batches])], [("y", F, shape)])
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32),
             "lens": np.array([shape[time_axis], 1, 3][:batches], np.int64)}
    assert aot.check(model, inputs=feeds, target=target).ok


def test_reverse_sequence_clamps_lengths():
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)
    model = _model(node, [("x", F, (4, 2)), ("lens", I64, [2])], [("y", F, (4, 2))])
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    y = aot.run(model, {"x": x, "lens": np.array([99, -5], np.int64)})["y"]
    np.testing.assert_array_equal(y, np.stack([x[::-1, 0], x[:, 1]], axis=1))


@pytest.mark.parametrize("out_shape", [(1, 2, 4, 6), (1, 2, 6, 7)])
def test_max_unpool(out_shape):
    x = np.random.default_rng(1).standard_normal((1, 2, 2, 3)).astype(np.float32)
    indices = np.random.default_rng(2).permutation(48)[:12].reshape(1, 2, 2, 3).astype(np.int64)
    inputs = ["x", "i"] + (["shape"] if out_shape != (1, 2, 4, 6) else [])
    node = helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[2, 2], strides=[2, 2])
    inits = [helper.make_tensor("shape", I64, [4], list(out_shape))] if len(inputs) == 3 else []
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 2, 2, 3]),
                                            helper.make_tensor_value_info("i", I64, [1, 2, 2, 3])],
                              [helper.make_tensor_value_info("y", F, list(out_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": x, "i": indices}
    if len(inputs) == 2:
        assert aot.check(model, inputs=feeds).ok
    else:   # onnxruntime reads the indices in the output_shape (as PyTorch); ONNX's own test data and
        # reference place the unpooled tensor at the output's origin, and so does aot
        np.testing.assert_array_equal(aot.run(model, feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])
