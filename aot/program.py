"""Graph → Program: one kernel per node in execution order, where every tensor lives, the memory plan.

A tensor lives in the caller's input or output buffer (graph inputs and outputs, and whatever a
graph output is a view of), in the workspace at a planned offset, or in read-only data (constants).
Views (Reshape) share their source's storage and have no kernel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aot.errors import UnsupportedOpError
from aot.graph.ir import Graph, Node, Rewriter
from aot.kernel.ir import Kernel, Reuse
from aot.knobs import Knobs, resolve
from aot.ops import LowerContext, lower
from aot.ops.registry import op_def
from aot.plan import memory
from aot.target import Target


@dataclass(frozen=True)
class Location:
    kind: str       # "input", "output", "workspace", "constant"
    index: int      # input/output position, or workspace offset


@dataclass(frozen=True)
class Call:
    kernel: Kernel
    node: Node
    args: tuple[str, ...]     # value names in kernel parameter order: computed inputs, then outputs


@dataclass(frozen=True)
class Program:
    name: str
    graph: Graph
    calls: tuple[Call, ...]
    locations: dict[str, Location]
    plan: memory.Plan
    buffers: tuple[memory.Buffer, ...]
    roots: dict[str, str]      # value -> the value whose storage it shares (itself if none)
    shared: tuple[tuple[int, str, str, Reuse], ...] = ()   # (step, source, result, reuse) the plan may use


def materialize_outputs(graph: Graph) -> Graph:
    """Give every graph output storage of its own: copy it if it is (a view of) an input, a constant,
    or storage that another output already uses. An output that is a constant itself (a model whose
    result folded) keeps its name: the constant moves to a fresh name and is copied out."""
    producers = graph.producers()

    def root(name: str) -> str:
        while name in producers and op_def(producers[name].op).view:
            name = producers[name].inputs[0]
        return name

    rw = Rewriter(graph)
    claimed: set[str] = set()
    copies: dict[str, str] = {}
    for out in graph.outputs:
        r = root(out)
        if out in graph.constants:
            rw.add("Copy", out + "_copy", [rw.constant(out + "_value", rw.constants.pop(out))], [out])
        elif out not in producers:
            raise UnsupportedOpError(f"graph output '{out}' is also a graph input: aot needs it computed by the model")
        elif r in graph.inputs or r in graph.constants or r in claimed:
            copies[out] = rw.like(out + "_src", out)
        else:
            claimed.add(r)
    for node in graph.nodes:
        rw.keep(node.with_(outputs=tuple(copies.get(out, out) for out in node.outputs)))
        for out in node.outputs:
            if out in copies:
                rw.add("Copy", out + "_copy", [copies[out]], [out])
    return rw.finish()


def build_program(graph: Graph, target: Target, name: str, knobs: Knobs | None = None) -> Program:
    graph = materialize_outputs(graph)
    knobs = knobs or resolve(target)
    share = knobs.share_memory
    either_way = frozenset(n.name for n in graph.nodes if op_def(n.op).rows_either_way) if share else frozenset()
    ctx = LowerContext(graph, target, name, knobs, _alternate_rows(graph) if share else frozenset(), either_way)
    roots: dict[str, str] = {}
    calls: list[Call] = []
    for node in graph.nodes:
        if op_def(node.op).view:
            src = node.inputs[0]
            roots[node.outputs[0]] = roots.get(src, src)
            continue
        kernel = lower(ctx, node, f"{name}_k{len(calls)}_{node.op.lower()}")
        args = tuple(n for n in node.inputs if n and n not in graph.constants) + node.outputs
        calls.append(Call(kernel, node, args))
    program = _place(graph, target, name, calls, roots, share)
    return _whole_where_it_pays(program, ctx, target, share)


def _whole_where_it_pays(program: Program, ctx: LowerContext, target: Target, share: bool) -> Program:
    """A kernel computing its first pixels whole to overlap its input closer (conv.Order) spends code on
    them: keep each such kernel only where the workspace would grow without it (the lean variant tried
    in call order, kept whenever it costs no byte)."""
    lean = dataclasses.replace(ctx, whole=frozenset())
    for i, call in enumerate(program.calls):
        if call.node.name not in ctx.whole:
            continue
        kernel = lower(lean, call.node, call.kernel.name)
        if kernel.reuse == call.kernel.reuse:
            continue
        calls = list(program.calls)
        calls[i] = Call(kernel, call.node, call.args)
        trial = _place(program.graph, target, program.name, calls, program.roots, share)
        if trial.plan.size <= program.plan.size:
            program = trial
    return program


def _place(graph: Graph, target: Target, name: str, calls: list[Call], roots: dict[str, str], share: bool) \
        -> Program:
    """Where every tensor of the call sequence lives, with the memory plan, verified."""

    def root(v: str) -> str:
        return roots.get(v, v)

    locations: dict[str, Location] = {}
    for i, v in enumerate(graph.inputs):
        locations[v] = Location("input", i)
    for i, v in enumerate(graph.outputs):
        locations[root(v)] = Location("output", i)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, call in enumerate(calls):
        for v in call.args:
            r = root(v)
            if r in locations or r in graph.constants:
                continue
            first.setdefault(r, step)
            last[r] = step
    align = max(target.align, 16)
    buffers = tuple(memory.Buffer(r, memory.align_up(graph.values[r].nbytes, align), first[r], last[r])
                    for r in first)
    shared = _shared(calls, root, first, last) if share else []
    plan = memory.plan(buffers, align, [memory.Overlap(source, result, step, reuse.shift, reuse.exact, reuse.backward)
                                        for step, source, result, reuse in shared])
    for b in buffers:
        locations[b.name] = Location("workspace", plan.offsets[b.name])
    for v in graph.values:
        if v in graph.constants:
            locations[v] = Location("constant", 0)
        elif v not in locations and root(v) in locations:
            locations[v] = locations[root(v)]
    steps = [([root(v) for v in call.args[:len(call.args) - len(call.node.outputs)]],
              [root(v) for v in call.node.outputs]) for call in calls]
    memory.verify(steps, plan.offsets, {b.name: b.size for b in buffers}, plan.size, align, shared)
    return Program(name, graph, tuple(calls), locations, plan, buffers, {v: root(v) for v in graph.values},
                   tuple(shared))


def _alternate_rows(graph: Graph) -> frozenset[str]:
    """The nodes whose kernels run their rows last to first: along a chain of such kernels every other
    one, so each output can overlap its input from above, then from below, within the bytes of one
    tensor and a few rows (in one direction only, the chain would drift by a few rows per step). A
    chain starts backward where its first input is computed (placed first, low in the workspace, the
    next output goes above it), forward where it is the caller's input (nothing to overlap)."""
    producers = graph.producers()
    backward: set[str] = set()
    for node in graph.nodes:
        if op_def(node.op).rows_either_way:
            source = producers.get(node.inputs[0])
            while source is not None and op_def(source.op).view:
                source = producers.get(source.inputs[0])
            if source is not None and not (op_def(source.op).rows_either_way and source.name in backward):
                backward.add(node.name)
    return frozenset(backward)


def _shared(calls: list[Call], root, first: dict[str, int], last: dict[str, int]) \
        -> list[tuple[int, str, str, Reuse]]:
    """The kernels' Reuse declarations that apply: (step, source, result, reuse) where the source is a
    workspace buffer read for the last time, and only once, by that call, and the result is born there."""
    shared = []
    for step, call in enumerate(calls):
        reads = [root(v) for v in call.node.inputs if v]
        for reuse in call.kernel.reuse:
            source, result = root(call.node.inputs[reuse.input]), root(call.node.outputs[reuse.output])
            if (source in first and result in first and last[source] == step and first[result] == step
                    and reads.count(source) == 1):
                shared.append((step, source, result, reuse))
    return shared
