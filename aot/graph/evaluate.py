"""Evaluate one ONNX node on numpy arrays with the reference implementation, at a given opset.

Used to fold constants. The node is wrapped in a one-node model so that the model's opset picks
the op's version (a bare NodeProto would get the newest semantics).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator


def evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_value_info(name, onnx.TypeProto()) for name in feeds],
        [onnx.helper.make_value_info(name, onnx.TypeProto()) for name in node.output if name])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        evaluator = ReferenceEvaluator(model)
    except RuntimeError:    # no implementation registered at this opset: use the op's newest one
        evaluator = ReferenceEvaluator(node)
    return [np.asarray(r) for r in evaluator.run(None, feeds)]
