"""Evaluate at compile time every node whose inputs are all constants (and Shape/Size of static tensors).

The ONNX reference implementation does the arithmetic, so any standard op folds with ONNX semantics.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from aot.graph.evaluate import evaluate
from aot.graph.ir import Graph, Node, Rewriter

# Ops whose result is not a function of their inputs, or that only look at shapes.
_NEVER = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
_SHAPE_ONLY = {"Shape", "Size"}


def fold_constants(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        if _foldable(node, rw):
            feeds = {name: rw.constants[name] if name in rw.constants
                     else np.zeros(rw.values[name].shape, rw.values[name].dtype)
                     for name in node.inputs if name}
            results = evaluate(_to_onnx(node), feeds, graph.opset)
            for name, result in zip(node.outputs, results):
                array = np.ascontiguousarray(np.asarray(result, dtype=rw.values[name].dtype))
                rw.constants[name] = array.reshape(rw.values[name].shape)
        else:
            rw.keep(node)
    return rw.finish()


def _foldable(node: Node, rw: Rewriter) -> bool:
    if node.op in _NEVER or node.attrs.get("domain"):
        return False
    if node.op in _SHAPE_ONLY:
        return True
    return all(name in rw.constants for name in node.inputs if name)


def _to_onnx(node: Node) -> onnx.NodeProto:
    attrs = {}
    for key, value in node.attrs.items():
        if isinstance(value, np.ndarray):
            value = numpy_helper.from_array(value)
        elif isinstance(value, tuple):
            value = list(value)
        attrs[key] = value
    return onnx.helper.make_node(node.op, list(node.inputs), list(node.outputs), name=node.name, **attrs)
