"""A RAM budget that picks the schedule (`--memory ram=SIZE`).

The build first plans the graph as it is, with in-place results, overlaps and the order search that
cost nothing. If the workspace and the caller's input and output buffers need more than the budget,
it runs the leading layers in row bands (aot/graph/passes/row_bands.py), which costs the MACs of the
halo rows computed twice: of the band schedules whose plain plan (no sharing, an upper bound) fits,
the one with the fewest MACs is built, then the next ones if sharing somehow does worse. When nothing
fits, the error names the step where the most bytes are live, its tensors, and how far over they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from aot.errors import PlanError
from aot.graph.ir import Graph
from aot.graph.passes.row_bands import BandChoice, Stage, computes_rows, split_into_bands, stage_problem
from aot.knobs import Knobs
from aot.ops import macs
from aot.program import Program, build_program, plain_workspace
from aot.target import Target

BANDS = (2, 3, 4, 6, 8, 12, 16)     # band counts tried (more bands: less memory, more halo MACs)
BUILDS = 3                           # band schedules built (lowered and planned) at most


def total_macs(graph: Graph) -> int:
    return sum(macs(graph, node) for node in graph.nodes)


def io_bytes(graph: Graph) -> int:
    """The caller's input and output buffers, which the RAM budget includes (not the model's state, which
    the workspace holds: graph.State)."""
    state = {name for s in graph.state for name in (s.read, s.written)}
    return sum(graph.values[v].nbytes for v in (*graph.inputs, *graph.outputs) if v not in state)


def band_stages(graph: Graph) -> Iterator[Stage]:
    """Row-band schedules of the graph's leading run of row-computing nodes, shortest stages first."""
    start = next((i for i, node in enumerate(graph.nodes) if computes_rows(graph, node)), None)
    if start is None:
        return
    end = start
    while end < len(graph.nodes) and computes_rows(graph, graph.nodes[end]):
        rows = graph.shape(graph.nodes[end].outputs[0])[1]
        for bands in BANDS:
            stage = Stage(start, end, bands)
            if bands <= rows and stage_problem(graph, stage) is None:
                yield stage
        end += 1


def fit(graph: Graph, target: Target, name: str, knobs: Knobs, ram: int,
        label: str) -> tuple[Program, BandChoice | None]:
    """The program of the graph, or of its cheapest row-band schedule, that needs at most `ram` bytes
    with its inputs and outputs; and the BandChoice (None: the graph as it is). `label` names the model
    in errors."""
    io = io_bytes(graph)
    program = build_program(graph, target, name, knobs)
    if program.plan.size + io <= ram:
        return program, None
    plain = total_macs(graph)
    fitting = []
    for stage in band_stages(graph):
        banded = split_into_bands(graph, stage)
        if plain_workspace(banded, target) + io <= ram:
            fitting.append((total_macs(banded), stage.bands, stage.last, stage, banded))
    fitting.sort(key=lambda f: f[:3])
    for cost, _, _, stage, banded in fitting[:BUILDS]:
        candidate = build_program(banded, target, name, knobs)
        if candidate.plan.size + io <= ram:
            first, last = graph.nodes[stage.first].name, graph.nodes[stage.last].name
            choice = BandChoice(stage, first, last, cost, plain, ram)
            return dataclasses.replace(candidate, bands=choice), choice
    need = program.plan.size + io
    where = f"; {peak(program)}" if program.plan.size else " (the inputs and outputs alone are over)"
    raise PlanError(f"{label}: needs {need:,} bytes of RAM (workspace {program.plan.size:,} + inputs and outputs "
                    f"{io:,}), {need - ram:,} over ram={ram:,}, and no row-band schedule of its leading layers "
                    f"fits{where}")


def peak(program: Program) -> str:
    """The step where the most workspace bytes are live, and its tensors, largest first."""
    steps = len(program.calls)
    live = [[b for b in program.buffers if b.first <= step <= b.last] for step in range(steps)]
    step = max(range(steps), key=lambda s: (sum(b.size for b in live[s]), -s)) if steps else 0
    tensors = sorted(live[step], key=lambda b: (-b.size, b.name)) if steps else []
    node = program.calls[step].node.name if steps else "-"
    listed = ", ".join(f"{b.name} ({b.size:,} B)" for b in tensors[:4])
    return f"the most is live at step {step} (node {node}): {listed}"
