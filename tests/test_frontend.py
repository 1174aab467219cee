"""Import: shapes that ONNX inference alone leaves unknown, as exporters write them."""

import numpy as np
import onnx
from onnx import TensorProto, helper
from oracle import assert_matches_onnxruntime


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_pad_amounts_computed_by_a_constant_chain():
    """PyTorch's legacy exporter computes F.pad's pads with Constant -> Transpose -> Reshape."""
    pads = helper.make_tensor("p", TensorProto.INT64, [2, 4], [0, 0, 1, 1, 0, 0, 1, 2])
    nodes = [helper.make_node("Constant", [], ["p"], value=pads),
             helper.make_node("Transpose", ["p"], ["pt"], perm=[1, 0]),
             helper.make_node("Reshape", ["pt", "m1"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")]
    m1 = helper.make_tensor("m1", TensorProto.INT64, [1], [-1])
    for opset in (13, 17):
        model = _model(nodes, [("x", [1, 2, 3, 3])], [("y", ["n", "c", "h", "w"])], [m1], opset)
        got = assert_matches_onnxruntime(model)
        assert got["y"].shape == (2, 3, 4, 5)   # pads [0,0,0,0, 1,1,1,2] after the transpose


def test_reshape_to_a_shape_read_from_the_input_at_old_opsets():
    """x.view(x.size(0), -1) exported at opset 11/13: Reshape's shape comes from Shape -> Gather -> Concat."""
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    minus1 = helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 9
    for opset in (11, 13):
        # Unsqueeze takes its axes as an attribute before opset 13, as an input from then on.
        unsqueeze = (helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]) if opset < 13
                     else helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]))
        nodes = [helper.make_node("Shape", ["x"], ["s"]),
                 helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                 unsqueeze,
                 helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
                 helper.make_node("Reshape", ["x", "shape"], ["r"]),
                 helper.make_node("Relu", ["r"], ["y"])]
        inits = [zero, minus1] + ([axes] if opset >= 13 else [])
        model = _model(nodes, [("x", [2, 3, 4])], [("y", ["n", "m"])], inits, opset)
        got = assert_matches_onnxruntime(model, inputs={"x": x})
        assert got["y"].shape == (2, 12)
