"""Drop nodes none of whose outputs reach a graph output."""

from __future__ import annotations

from aot.graph.ir import Graph, Rewriter


def eliminate_dead_code(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(out in live for out in node.outputs):
            kept.append(node)
            live.update(name for name in node.inputs if name)
    rw = Rewriter(graph)
    for node in reversed(kept):
        rw.keep(node)
    return rw.finish()
