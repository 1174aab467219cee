"""Graph.verify: the invariants every pass must keep, checked after each one.

Well-formed: node names are unique, every input is a graph input, a constant or the output of an
earlier node, every value is produced once, every name has a Value whose shape and dtype match its
constant, quantization only on integer values and per-channel parameters sized to their axis.
Consistent: each op's registered shape rule (OpDef.check) holds, and an integer matrix op has
per-channel weight parameters.
"""

from __future__ import annotations

from aot.errors import InternalError
from aot.graph.ir import Graph, Node
from aot.graph.node_quant import node_quant
from aot.graph.quant import RANGES
from aot.registry import QuantForm, op_def


def verify(graph: Graph, stage: str) -> Graph:
    """Return `graph` unchanged, or raise InternalError naming the stage and the node at fault."""
    def fail(node: Node | None, why: str) -> InternalError:
        where = f"node '{node.name}' ({node.op})" if node is not None else f"graph '{graph.name}'"
        return InternalError(f"after {stage}: {where}: {why}")

    available = set(graph.inputs) | set(graph.constants)
    for name in available:
        _check_value(graph, name, lambda why: fail(None, why))
    names: set[str] = set()
    for node in graph.nodes:
        if node.name in names:
            raise fail(node, "another node has the same name")
        names.add(node.name)
        for name in node.inputs:
            if name and name not in available:
                raise fail(node, f"reads '{name}', which no earlier node, input or constant provides")
        for name in filter(None, node.outputs):
            if name in available:
                raise fail(node, f"writes '{name}', which already has a value")
            available.add(name)
            _check_value(graph, name, lambda why: fail(node, why))
        definition = op_def(node.op)
        if definition.operands and len(node.inputs) > len(definition.operands):
            raise fail(node, f"{len(node.inputs)} inputs for the operands {list(definition.operands)}")
        problem = definition.check(graph, node) if definition.check else None
        if problem:
            raise fail(node, problem)
        if definition.quant is QuantForm.MATRIX and node_quant(graph.values, node) is not None \
                and node.inputs[1] in graph.constants:      # (a MatMul of two computed tensors has no weight)
            weight = graph.values[node.inputs[1]].quant
            if weight is None or weight.axis is None:
                raise fail(node, f"integer op without per-channel parameters on its weight '{node.inputs[1]}'")
    for name in graph.outputs:
        if name not in available:
            raise fail(None, f"graph output '{name}' is never computed")
    return graph


def _check_value(graph: Graph, name: str, fail) -> None:
    value = graph.values.get(name)
    if value is None:
        raise fail(f"'{name}' has no value (shape and dtype)")
    if value.name != name:
        raise fail(f"the value recorded for '{name}' is named '{value.name}'")
    array = graph.constants.get(name)
    if array is not None and (tuple(array.shape) != value.shape or str(array.dtype) != value.dtype):
        raise fail(f"constant '{name}' is {array.dtype}{list(array.shape)}, its value says "
                   f"{value.dtype}{list(value.shape)}")
    quant = value.quant
    if quant is not None:
        if value.dtype not in RANGES:
            raise fail(f"'{name}' is {value.dtype} but has quantization parameters")
        if quant.axis is not None and not (0 <= quant.axis < len(value.shape)
                                           and quant.scale.size == quant.zero_point.size == value.shape[quant.axis]):
            raise fail(f"'{name}' {list(value.shape)}: per-channel parameters of size {quant.scale.size} on "
                       f"axis {quant.axis}")
