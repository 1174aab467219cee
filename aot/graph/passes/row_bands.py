"""Row bands: run a stage of layers band by band, so that its large intermediate tensors never exist
whole (patch-based inference, as MCUNetV2 does for the memory-heavy first layers, in bands of rows).

A stage is a run of consecutive nodes whose every node computes rows of its output from a window of
rows of its inputs (a 2-D convolution, with any fused residual; a one-input elementwise op), and
whose tensors, but the last, are read inside the stage only. The stage's output is split into bands
of rows. For each band, every tensor of the stage is computed over the rows that band needs, which
is more than its share where windows overlap: the halo rows, also computed by the neighbouring band
(the price, in MACs, of the memory saved). Each node of a band is an ordinary copy of the original
with fewer rows and its padding adjusted; an input read over part of its rows is a RowSlice (a view);
the output's bands are written in place into the whole output by a ConcatInPlace (no kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.errors import PlanError
from aot.graph.ir import Graph, Node, Rewriter
from aot.registry import op_def

Rows = tuple[int, int]      # [first, last) row


@dataclass(frozen=True)
class Stage:
    """Nodes [first, last] of the graph's order, split into `bands` bands of output rows."""

    first: int
    last: int
    bands: int


@dataclass(frozen=True)
class BandChoice:
    """The row-band schedule a budget chose, and what it costs."""

    stage: Stage
    first_node: str
    last_node: str
    macs: int            # of the whole graph with the bands
    plain_macs: int      # without them
    ram: int             # the budget that asked for them

    def describe(self) -> str:
        extra = self.macs - self.plain_macs
        return (f"nodes {self.first_node}..{self.last_node} in {self.stage.bands} row bands to fit ram={self.ram:,}: "
                f"+{extra:,} MACs ({100 * extra / max(self.plain_macs, 1):.1f}% more)")


def computes_rows(graph: Graph, node: Node) -> bool:
    """Whether `node` computes rows from rows: NHWC batch-1 tensors, a Conv or a one-input elementwise op
    whose constant operands do not vary along rows."""
    out = graph.shape(node.outputs[0]) if len(node.outputs) == 1 else ()
    if len(out) != 4 or out[0] != 1 or "perm" in node.attrs:
        return False
    if node.op == "Conv":
        return True
    computed = [v for v in node.inputs if v and v not in graph.constants]
    constants_flat = all(len(graph.shape(v)) < 3 or graph.shape(v)[-3] == 1 for v in node.inputs
                         if v in graph.constants)
    return (op_def(node.op).elementwise and len(computed) == 1 and graph.shape(computed[0]) == out
            and constants_flat)


def stage_problem(graph: Graph, stage: Stage) -> str | None:
    """Why `stage` cannot run in bands, or None."""
    nodes = graph.nodes[stage.first:stage.last + 1]
    if not nodes or stage.bands < 2:
        return "a stage needs a node and two bands or more"
    bad = next((n for n in nodes if not computes_rows(graph, n)), None)
    if bad is not None:
        return f"node '{bad.name}' ({bad.op}) does not compute rows from rows"
    inside = {v for n in nodes[:-1] for v in n.outputs}
    users = graph.consumers()
    leaving = sorted(v for v in inside if v in graph.outputs
                     or any(u not in nodes for u in users.get(v, [])))
    if leaving:
        return f"tensor '{leaving[0]}' is read after the stage"
    if graph.shape(nodes[-1].outputs[0])[1] < stage.bands:
        return f"'{nodes[-1].outputs[0]}' has fewer rows than {stage.bands} bands"
    return None


def _window(graph: Graph, node: Node, slot: int, rows: Rows) -> Rows:
    """The rows of input `slot` that output rows `rows` of `node` read, within the input."""
    height = graph.shape(node.inputs[slot])[1]
    if node.op != "Conv" or slot != 0:          # elementwise, or a convolution's residual: the same rows
        return rows
    (kh, _), (sh, _), (dh, _) = node.attrs["kernel"], node.attrs["strides"], node.attrs.get("dilations", (1, 1))
    top = node.attrs["pads"][0]
    lo, hi = rows[0] * sh - top, (rows[1] - 1) * sh - top + (kh - 1) * dh + 1
    return max(lo, 0), min(hi, height)


def _padded(node: Node, height: int, rows: Rows) -> Node:
    """`node` computing output rows `rows` from its input's window rows only: the padding of a band
    is what of the original padding its window reaches."""
    if node.op != "Conv":
        return node
    (kh, _), (sh, _), (dh, _) = node.attrs["kernel"], node.attrs["strides"], node.attrs.get("dilations", (1, 1))
    top, left, _, right = node.attrs["pads"]
    lo, hi = rows[0] * sh - top, (rows[1] - 1) * sh - top + (kh - 1) * dh + 1
    return node.with_(attrs={**node.attrs, "pads": (max(0, -lo), left, max(0, hi - height), right)})


def _union(a: Rows | None, b: Rows) -> Rows:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


def split_into_bands(graph: Graph, stage: Stage) -> Graph:
    """The graph with `stage` run band by band (see the module's docstring)."""
    problem = stage_problem(graph, stage)
    if problem is not None:
        raise PlanError(f"cannot run nodes {stage.first}..{stage.last} in row bands: {problem}")
    nodes = graph.nodes[stage.first:stage.last + 1]
    result = nodes[-1].outputs[0]
    height = graph.shape(result)[1]
    bounds = [round(i * height / stage.bands) for i in range(stage.bands + 1)]
    rw = Rewriter(graph)
    for node in graph.nodes[:stage.first]:
        rw.keep(node)
    pieces = []
    for band in range(stage.bands):
        pieces.append(_emit_band(rw, nodes, (bounds[band], bounds[band + 1]), band))
    rw.add("ConcatInPlace", f"{nodes[-1].name}_bands", pieces, [result])
    for node in graph.nodes[stage.last + 1:]:
        rw.keep(node)
    return rw.finish()


def _emit_band(rw: Rewriter, nodes: tuple[Node, ...], out_rows: Rows, band: int) -> str:
    """One band's copies of the stage's nodes; returns the value holding its rows of the stage's output."""
    graph = rw.graph
    need: dict[str, Rows] = {nodes[-1].outputs[0]: out_rows}
    for node in reversed(nodes):
        rows = need[node.outputs[0]]
        for slot, v in enumerate(node.inputs):
            if v and v not in graph.constants:
                need[v] = _union(need.get(v), _window(graph, node, slot, rows))
    held: dict[str, tuple[str, Rows]] = {}     # stage tensor -> (its band value, the rows that holds)

    def rows_of(v: str, rows: Rows) -> str:
        """A value holding exactly rows `rows` of tensor v: v's band value, or a view of part of it."""
        value, have = held.get(v, (v, (0, graph.shape(v)[1])))
        if have == rows:
            return value
        shape = graph.shape(v)
        view = rw.like(f"{v}_rows{rows[0]}", v, (shape[0], rows[1] - rows[0], *shape[2:]))
        rw.add("RowSlice", f"{v}_rows{rows[0]}", [value], [view], start=rows[0] - have[0])
        return view

    for node in nodes:
        out = node.outputs[0]
        rows = need[out]
        inputs = tuple(v if not v or v in graph.constants else rows_of(v, _window(graph, node, slot, rows))
                       for slot, v in enumerate(node.inputs))
        shape = graph.shape(out)
        value = rw.like(f"{out}_band{band}", out, (shape[0], rows[1] - rows[0], *shape[2:]))
        copy = _padded(node, graph.shape(node.inputs[0])[1], rows)
        rw.add(node.op, f"{node.name}_band{band}", inputs, [value], **copy.attrs)
        held[out] = (value, rows)
    return held[nodes[-1].outputs[0]][0]
