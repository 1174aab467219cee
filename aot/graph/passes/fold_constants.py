"""Evaluate at compile time every node whose inputs are all constants (and Shape/Size of static tensors).

The ONNX reference implementation does the arithmetic, so any standard op folds with ONNX semantics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from aot.graph.evaluate import evaluate
from aot.graph.ir import Graph, Node, Rewriter
from aot.registry import op_def


def fold_constants(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        if folds(node, lambda name: name in rw.constants):
            results = _evaluated(node, rw, graph.opset)
            if results is not None:
                rw.constants.update(results)
                continue
            node = _computed_data(rw, node)
        rw.keep(node)
    return rw.finish()


def _evaluated(node: Node, rw: Rewriter, opset: int) -> dict[str, np.ndarray] | None:
    """The node's outputs by the ONNX reference implementation, None where it fails or gives a result of
    another size than inference says (it has bugs of its own: grouped ConvTranspose, padded MaxPool)."""
    feeds = {name: rw.constants[name] if name in rw.constants
             else np.zeros(rw.values[name].shape, rw.values[name].dtype)
             for name in node.inputs if name}
    try:
        with np.errstate(all="ignore"):
            results = evaluate(_to_onnx(node), feeds, opset)
    except Exception:       # noqa: BLE001 - aot's kernel computes what the reference cannot
        return None
    arrays = {}
    for name, result in zip(node.outputs, results):
        value = rw.values[name]
        array = np.ascontiguousarray(np.asarray(result, dtype=value.dtype))
        if array.size != value.size:
            return None
        arrays[name] = array.reshape(value.shape)
    return arrays


def _computed_data(rw: Rewriter, node: Node) -> Node:
    """The node reading its first operand, the data, through a Copy: its kernel computes it at run time."""
    data = node.inputs[0] if node.inputs else ""
    if data not in rw.constants:
        return node
    copy = rw.like(data + "_computed", data)
    rw.add("Copy", node.name + "_data", [data], [copy])
    return node.with_(inputs=(copy, *node.inputs[1:]))


def folds(node: Node, is_constant: Callable[[str], bool]) -> bool:
    """fold_constants computes `node` now: every input a constant (but those of which it reads only the
    type), or an op that reads only its input's static shape; never an op whose result is random (the
    registry's `random`, `shape_only` and `dtype_only` facts). lower_quantized asks the same question
    before the constants exist, with `is_constant` telling what will fold."""
    definition = op_def(node.op)
    if definition.random or node.attrs.get("domain"):
        return False
    if definition.shape_only:
        return True
    return all(is_constant(name) for i, name in enumerate(node.inputs) if name and i not in definition.dtype_only)


def _to_onnx(node: Node) -> onnx.NodeProto:
    attrs = {}
    for key, value in node.attrs.items():
        if isinstance(value, np.ndarray):
            value = numpy_helper.from_array(value)
        elif isinstance(value, tuple):
            value = list(value)
        attrs[key] = value
    return onnx.helper.make_node(node.op, list(node.inputs), list(node.outputs), name=node.name, **attrs)
