"""A view of a constant is a constant: give it the bytes it shows.

A view (Reshape, RowSlice) has no kernel; its output shares its source's storage. A constant's storage
is read-only data that kernels embed, not a buffer passed at run time, so a view of one would be read from
nowhere. Rewrites make such views from nodes that fold_constants cannot evaluate (CastLike of a constant
to a computed value's type becomes a Reshape of the constant): this pass turns each into the constant it
shows, views of views included.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Rewriter
from aot.registry import op_def


def fold_constant_views(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        definition = op_def(node.op)
        source = node.inputs[0] if node.inputs else ""
        if definition.view and source in rw.constants:
            offset = definition.view_offset(graph, node) if definition.view_offset else 0
            out = graph.values[node.outputs[0]]
            data = rw.constants[source].tobytes()[offset:offset + out.nbytes]
            rw.constants[out.name] = np.frombuffer(data, out.dtype).reshape(out.shape).copy()
        else:
            rw.keep(node)
    return rw.finish()
