"""Concatenations that cost nothing: where the axis has only 1s before it, each input is one contiguous
block of the result, so its producer can write it there directly. The Concat becomes a ConcatInPlace
(no kernel; the program makes each input, or the tensor a Reshape of it views, a part of the result's
storage) when every such tensor is computed by a kernel, is no graph output (nor viewed by one),
appears once, has the result's element type and encoding, and the Concat applies no activation.
"""

from __future__ import annotations

from aot.graph.ir import Graph, Node, Rewriter
from aot.registry import op_def


def concat_in_place(graph: Graph) -> Graph:
    producers = graph.producers()
    claimed: set[str] = set()       # tensors already made part of a result
    claimed.update(_owner(v, producers) for v in graph.outputs)     # a graph output has a buffer of its own
    replacement: dict[str, Node] = {}
    for node in graph.nodes:
        owners = [_owner(v, producers) for v in node.inputs] if node.op == "Concat" else []
        if owners and _contiguous(graph, node, owners, producers, claimed):
            claimed.update(owners)
            replacement[node.name] = Node("ConcatInPlace", node.name, node.inputs, node.outputs, {})
    return Rewriter(graph).rebuild(replacement, set()) if replacement else graph


def _owner(v: str, producers: dict[str, Node]) -> str:
    """The tensor whose bytes v is: v, or what a whole view (Reshape) of it views."""
    while v in producers and op_def(producers[v].op).view and op_def(producers[v].op).view_offset is None:
        v = producers[v].inputs[0]
    return v


def _contiguous(graph: Graph, node: Node, owners: list[str], producers: dict[str, Node], claimed: set[str]) -> bool:
    out = graph.values[node.outputs[0]]
    if node.attrs.get("acts") or any(d != 1 for d in out.shape[:node.attrs["axis"]]):
        return False
    if len(set(owners)) != len(owners) or node.outputs[0] in graph.inputs:
        return False
    for v, owner in zip(node.inputs, owners):
        value, producer = graph.values[v], producers.get(owner)
        if (producer is None or owner in claimed or owner in graph.outputs or owner in graph.constants
                or op_def(producer.op).view or op_def(producer.op).assembled or value.dtype != out.dtype
                or (value.quant is None) != (out.quant is None)
                or (value.quant is not None and not value.quant.same_as(out.quant))):
            return False
    return True
