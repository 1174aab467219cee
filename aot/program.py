"""Graph → Program: one kernel per node in execution order, where every tensor lives, the memory plan.

A tensor lives in the caller's input or output buffer (graph inputs and outputs, and whatever a
graph output is a view of), in the workspace at a planned offset, or in read-only data (constants).
Views (Reshape) share their source's storage and have no kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aot.errors import InternalError, UnsupportedOpError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.passes.pad_channels import pad_channels
from aot.graph.passes.row_bands import BandChoice
from aot.kernel.ir import Kernel, Reuse, constants
from aot.knobs import Knobs, resolve
from aot.ops import LowerContext, lower, macs
from aot.plan import memory, regions
from aot.plan.order import search as search_order
from aot.registry import op_def
from aot.target import Target


@dataclass(frozen=True)
class Location:
    kind: str       # "input", "output", "workspace", "constant"
    index: int      # input/output position, or workspace offset
    offset: int = 0     # bytes into that storage (a view of part of a tensor, a part assembled in place)
    region: str = ""    # the memory region of a workspace tensor ("": the target declares none)


@dataclass(frozen=True)
class Call:
    kernel: Kernel
    node: Node
    args: tuple[str, ...]     # value names in kernel parameter order: computed inputs, then outputs


@dataclass(frozen=True)
class OrderChoice:
    """How the call order was chosen: the workspace the graph's own order needs, and the one the
    searched order needs (None when the search kept the graph's order or did not run). The searched
    order runs only when it needs less."""

    graph_order: int
    searched: int | None = None
    search_ran: bool = True

    @property
    def changed(self) -> bool:
        return self.searched is not None and self.searched < self.graph_order


@dataclass(frozen=True)
class Program:
    name: str
    graph: Graph
    calls: tuple[Call, ...]
    locations: dict[str, Location]
    plan: memory.Plan
    buffers: tuple[memory.Buffer, ...]
    roots: dict[str, str]      # value -> the value whose storage it shares (itself if none)
    order: OrderChoice
    shared: tuple[tuple[int, str, str, Reuse], ...] = ()   # (step, source, result, reuse) the plan may use
    bands: BandChoice | None = None     # leading layers run in row bands to fit a RAM budget (aot/budget.py)
    # the workspace split over the target's memory regions, fastest first (plan then holds every buffer's
    # offset in its region and the regions' total size); empty: one workspace
    regions: tuple[regions.Placement, ...] = ()


def sharing_used(program: Program) -> list[tuple[int, str, str, Reuse]]:
    """The entries of `program.shared` the plan took up: the result sits over bytes of its source."""
    sizes = {buf.name: buf.size for buf in program.buffers}
    at = program.plan.offsets
    return [(step, source, result, reuse) for step, source, result, reuse in program.shared
            if at[source] < at[result] + sizes[result] and at[result] < at[source] + sizes[source]]


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
    moved: dict[str, str] = {}      # constant outputs: their new names, which their readers read
    for out in graph.outputs:
        r = root(out)
        if out in graph.constants:
            moved[out] = rw.constant(out + "_value", rw.constants.pop(out), rw.values[out].quant)
            rw.add("Copy", out + "_copy", [moved[out]], [out])
        elif out not in producers:
            raise UnsupportedOpError(f"graph output '{out}' is also a graph input: aot needs it computed by the model")
        elif r in graph.inputs or r in graph.constants or r in claimed:
            copies[out] = rw.like(out + "_src", out)
        else:
            claimed.add(r)
    # A copied output's readers read its source: a view of it that is an output itself claimed that
    # storage above, and must see the value there, not in the copy (which would leave it unwritten).
    # A kernel reading a constant output (a weight) reads the constant under its new name.
    reads = {**copies, **moved}
    for node in graph.nodes:
        rw.keep(node.with_(inputs=tuple(reads.get(i, i) for i in node.inputs),
                           outputs=tuple(copies.get(out, out) for out in node.outputs)))
        for out in node.outputs:
            if out in copies:
                rw.add("Copy", out + "_copy", [copies[out]], [out])
    return rw.finish()


def keep_state(graph: Graph) -> Graph:
    """The model's state (graph.state) taken out of its inputs and outputs: each state tensor becomes a
    workspace buffer live through the whole run (and, untouched by anything else, between runs), which
    the kernels read, and a last Copy writes the run's new value back into it (State.written names that
    copy's result, which shares the buffer's storage)."""
    if not graph.state:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        rw.keep(node)
    kept = []
    for state in graph.state:
        if state.read not in graph.inputs or state.written not in graph.outputs:
            raise InternalError(f"state '{state.read}' is not a graph input and output pair")
        back = rw.like(state.read + "_next", state.read)
        rw.add("Copy", state.read + "_keep", [state.written], [back])
        kept.append(dataclasses.replace(state, written=back))
    reads, writes = {s.read for s in graph.state}, {s.written for s in graph.state}
    finished = rw.finish()
    return finished.replace(inputs=tuple(v for v in graph.inputs if v not in reads),
                            outputs=tuple(v for v in graph.outputs if v not in writes), state=tuple(kept))


def build_program(graph: Graph, target: Target, name: str, knobs: Knobs | None = None) -> Program:
    graph = materialize_outputs(graph)
    if target.int_simd.byte_pairs:
        graph = pad_channels(graph)
    graph = keep_state(graph)
    knobs = knobs or resolve(target)
    share = knobs.share_memory
    either_way = frozenset(n.name for n in graph.nodes if op_def(n.op).rows_either_way) if share else frozenset()
    ctx = LowerContext(graph, target, name, knobs, _alternate_rows(graph) if share else frozenset(), either_way)
    root = _Storage(graph)
    calls = [Call(_named(lower(ctx, node, _kernel_name(name, step, node)), name, step, node), node,
                  _args(graph, node))
             for step, node in enumerate(_kernel_nodes(graph))]
    program = _whole_where_it_pays(_place(graph, target, name, knobs, calls, root), calls, ctx, knobs, root)
    _verify(program, root, max(target.align, 16))
    return program


def _whole_where_it_pays(program: Program, calls: list[Call], ctx: LowerContext, knobs: Knobs,
                         root: _Storage) -> Program:
    """A kernel computing its first pixels whole to overlap its input closer (conv.Order) spends code on
    them: keep each such kernel only where the workspace would grow without it. The lean variants are
    tried all together first (in the models seen, none costs a byte), then, where together they cost
    bytes, each half of them, down to one at a time; a trial is kept whenever it costs no byte. A lean
    variant that declares the same overlaps (Reuse shifts) is kept without a trial: the plan is the same."""
    lean = dataclasses.replace(ctx, whole=frozenset())
    variants, calls, alike = [], list(calls), False
    for i, call in enumerate(calls):
        if call.kernel.whole_pixels:
            kernel = lower(lean, call.node, call.kernel.name)
            if _declared_shifts(kernel) != _declared_shifts(call.kernel):
                variants.append((i, kernel))
            else:
                calls[i], alike = Call(kernel, call.node, call.args), True
    if alike:
        program = _place(program.graph, ctx.target, program.name, knobs, calls, root)

    def attempt(group: list[tuple[int, Kernel]]) -> None:
        nonlocal program, calls
        trial_calls = list(calls)
        for i, kernel in group:
            trial_calls[i] = Call(kernel, calls[i].node, calls[i].args)
        trial = _place(program.graph, ctx.target, program.name, knobs, trial_calls, root)
        if trial.plan.size <= program.plan.size:
            program, calls = trial, trial_calls
        elif len(group) > 1:
            attempt(group[:len(group) // 2])
            attempt(group[len(group) // 2:])
    if variants:
        attempt(variants)
    return program


def _declared_shifts(kernel: Kernel) -> tuple:
    """What the memory planner reads of a kernel's Reuse declarations (see _overlaps)."""
    return tuple((r.input, r.output, r.exact, r.backward, r.shift) for r in kernel.reuse)


def _place(graph: Graph, target: Target, name: str, knobs: Knobs, calls: list[Call], root: _Storage) -> Program:
    """Where every tensor of the calls (in the graph's order) lives: the order they run in, the memory
    plan (per region where the target has regions). Not verified: the build weighs several and verifies
    the one it keeps."""
    locations = _external(graph, root)
    align = max(target.align, 16)
    layout, choice = _choose_order(calls, graph, root, locations, align, name, knobs)
    layout, placements = _in_regions(layout, graph, root, target, align, name) if target.regions else (layout, ())
    region_of = {b: p.region.name for p in placements for b in p.plan.offsets}
    for b in layout.buffers:
        locations[b.name] = Location("workspace", layout.plan.offsets[b.name], region=region_of.get(b.name, ""))
    for v in graph.values:
        if v in graph.constants:
            locations[v] = Location("constant", 0)
        elif v not in locations and root(v) in locations:
            locations[v] = dataclasses.replace(locations[root(v)], offset=root.offset(v))
    for call in layout.calls:
        for v in call.args:
            if locations.get(v, Location("constant", 0)).kind == "constant":
                raise InternalError(f"kernel {call.kernel.name} (node '{call.node.name}') would read '{v}' from no "
                                    "buffer: a view of a constant was not folded")
    return Program(name, graph, layout.calls, locations, layout.plan, layout.buffers,
                   {v: root(v) for v in graph.values}, choice, layout.shared, regions=placements)


def _verify(program: Program, root: _Storage, align: int) -> None:
    """The memory plan checked against the calls' reads and writes (aot/plan/memory.py, regions.py)."""
    sizes = {b.name: b.size for b in program.buffers}
    steps = _steps(program.calls, root)
    kept = [s.read for s in program.graph.state]
    if program.regions:
        regions.verify(steps, program.regions, sizes, align, program.shared, kept)
    else:
        memory.verify(steps, program.plan.offsets, sizes, program.plan.size, align, program.shared, kept)


def plain_workspace(graph: Graph, target: Target) -> int:
    """The workspace the graph needs without sharing (an upper bound of build_program's, found without
    lowering a kernel): each tensor in bytes of its own from its first to its last use."""
    graph = keep_state(materialize_outputs(graph))
    root = _Storage(graph)
    calls = [Call(None, node, _args(graph, node)) for node in _kernel_nodes(graph)]   # type: ignore[arg-type]
    return _layout(calls, graph, root, _external(graph, root), max(target.align, 16), False).plan.size


def _kernel_nodes(graph: Graph) -> list[Node]:
    """The nodes that run a kernel: all but views and in-place assemblies, which move no data."""
    return [n for n in graph.nodes if not (op_def(n.op).view or op_def(n.op).assembled)]


def _args(graph: Graph, node: Node) -> tuple[str, ...]:
    return tuple(n for n in node.inputs if n and n not in graph.constants) + node.outputs


def _external(graph: Graph, root: _Storage) -> dict[str, Location]:
    """Where the caller's buffers hold the graph's inputs and outputs."""
    locations = {v: Location("input", i) for i, v in enumerate(graph.inputs)}
    locations.update({root(v): Location("output", i) for i, v in enumerate(graph.outputs)})
    return locations


class _Storage:
    """Which value owns a value's bytes, and where in them it lies: a view is part of its input (all of
    it for Reshape), an input of an in-place assembly (ConcatInPlace) part of its output. Calling it gives
    the owner (the value itself if none)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        links: dict[str, tuple[str, int]] = {}
        for node in graph.nodes:
            definition = op_def(node.op)
            if definition.view:
                offset = definition.view_offset(graph, node) if definition.view_offset else 0
                links[node.outputs[0]] = (node.inputs[0], offset)
            elif definition.assembled:
                offset = 0
                for v in node.inputs:
                    owner = v
                    while owner in links and links[owner][1] == 0 and self._same_size(owner, links[owner][0]):
                        owner = links[owner][0]         # a Reshape: its source is the part
                    if owner in links:
                        raise InternalError(f"'{v}' is part of two tensors' storage")
                    links[owner] = (node.outputs[0], offset)
                    offset += graph.values[v].nbytes
        for state in graph.state:       # (after keep_state) the new value is written over the old
            links[state.written] = (state.read, 0)
        self.places: dict[str, tuple[str, int]] = {}
        for v in links:
            owner, offset = v, 0
            while owner in links:
                owner, step = links[owner]
                offset += step
            self.places[v] = (owner, offset)

    def __call__(self, v: str) -> str:
        return self.places.get(v, (v, 0))[0]

    def _same_size(self, a: str, b: str) -> bool:
        return self.graph.values[a].nbytes == self.graph.values[b].nbytes

    def offset(self, v: str) -> int:
        return self.places.get(v, (v, 0))[1]

    def whole(self, v: str) -> bool:
        """v is all of its owner's bytes (not a part of a tensor)."""
        return self.offset(v) == 0 and self.graph.values[v].nbytes == self.graph.values[self(v)].nbytes


@dataclass(frozen=True)
class _Layout:
    """The calls in one order and the memory plan made for it."""

    calls: tuple[Call, ...]
    buffers: tuple[memory.Buffer, ...]
    plan: memory.Plan
    shared: tuple[tuple[int, str, str, Reuse], ...]


def _choose_order(calls: list[Call], graph: Graph, root, external: dict[str, Location], align: int, name: str,
                  knobs: Knobs) -> tuple[_Layout, OrderChoice]:
    """The calls in the graph's order, or in the order searched for the fewest live bytes when its plan
    needs a smaller workspace: live bytes only estimate what placement and sharing achieve, so both
    orders are planned (ties keep the graph's order)."""
    given = _layout(calls, graph, root, external, align, knobs.share_memory)
    if not knobs.reorder or graph.state:    # (the state's copies must run last, after every reader)
        return given, OrderChoice(given.plan.size, search_ran=False)
    order = search_order(_steps(calls, root), {b.name: b.size for b in given.buffers})
    if order == tuple(range(len(calls))):
        return given, OrderChoice(given.plan.size)
    moved = [_renumbered(calls[i], name, step) for step, i in enumerate(order)]
    searched = _layout(moved, graph, root, external, align, knobs.share_memory)
    choice = OrderChoice(given.plan.size, searched.plan.size)
    return (searched if choice.changed else given), choice


def _layout(calls: list[Call], graph: Graph, root, external: dict[str, Location], align: int,
            share_memory: bool) -> _Layout:
    """The workspace buffers of `calls` run in the order given (each live from its first to its last
    use; inputs, outputs and constants are elsewhere) and their plan."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, call in enumerate(calls):
        for v in call.args:
            r = root(v)
            if r in external or r in graph.constants:
                continue
            first.setdefault(r, step)
            last[r] = step
    kept = [s.read for s in graph.state]
    for r in kept:      # the model's state: its bytes are its own at every step, and between runs
        first[r], last[r] = 0, len(calls) - 1
    buffers = tuple(memory.Buffer(r, memory.align_up(graph.values[r].nbytes, align), first[r], last[r])
                    for r in first)
    shared = [s for s in _shared(calls, root, first, last) if not {s[1], s[2]} & set(kept)] if share_memory else []
    plan = memory.plan(buffers, align, _overlaps(shared))
    return _Layout(tuple(calls), buffers, plan, tuple(shared))


def _overlaps(shared: Sequence[tuple[int, str, str, Reuse]]) -> list[memory.Overlap]:
    return [memory.Overlap(source, result, step, reuse.shift, reuse.exact, reuse.backward)
            for step, source, result, reuse in shared]


def _in_regions(layout: _Layout, graph: Graph, root, target: Target, align: int, name: str) \
        -> tuple[_Layout, tuple[regions.Placement, ...]]:
    """The layout's buffers over the target's memory regions, each region planned on its own
    (aot/plan/regions.py): its plan becomes every buffer's offset in its region and the regions' total
    size; sharing declared between buffers of different regions is dropped."""
    weights = _weight_bytes(layout.calls, target.align) if any(r.weights for r in target.regions) else 0
    placements = regions.place(layout.buffers, _overlaps(layout.shared), _accesses(layout.calls, graph, root),
                               target.regions, align, name, weights)
    region_of = {b: p.region.name for p in placements for b in p.plan.offsets}
    plan = memory.Plan({b: offset for p in placements for b, offset in p.plan.offsets.items()},
                       sum(p.plan.size for p in placements), layout.plan.lower_bound, "split over memory regions",
                       align)
    shared = tuple(s for s in layout.shared if region_of[s[1]] == region_of[s[2]])
    return dataclasses.replace(layout, plan=plan, shared=shared), placements


def _weight_bytes(calls: Sequence[Call], align: int) -> int:
    """The room the weights take, for a region that holds them: every constant array the kernels read,
    aligned as the object aligns it (an upper bound: LLVM may fold a small one into the code)."""
    arrays = {array.name: array for call in calls for array in constants(call.kernel)}
    return sum(memory.align_up(array.data.nbytes, align) for array in arrays.values())


def _accesses(calls: Sequence[Call], graph: Graph, root) -> dict[str, int]:
    """Bytes the kernels read and write of each storage owner, as region placement ranks them: a call
    writes its outputs once and reads an input once per MAC per element, at least once (a convolution
    reads its input about kernel area x output channels times, an Add once)."""
    moved: dict[str, int] = {}
    for call in calls:
        work, written = macs(graph, call.node), len(call.args) - len(call.node.outputs)
        for position, v in enumerate(call.args):
            value = graph.values[v]
            times = 1 if position >= written else max(1, work // max(1, value.size))
            moved[root(v)] = moved.get(root(v), 0) + value.nbytes * times
    return moved


def _steps(calls: Sequence[Call], root) -> list[tuple[list[str], list[str]]]:
    """What each call reads and writes, views resolved to the storage they share."""
    return [([root(v) for v in call.args[:len(call.args) - len(call.node.outputs)]],
             [root(v) for v in call.node.outputs]) for call in calls]


def _kernel_name(model: str, step: int, node: Node, kernel: Kernel | None = None) -> str:
    """`model_k3_conv_6x2_wouter`: the step, the op and, for a template with a schedule, its tile and order."""
    tag = f"_{kernel.schedule.schedule.tag}" if kernel is not None and kernel.schedule is not None else ""
    return f"{model}_k{step}_{node.op.lower()}{tag}"


def _named(kernel: Kernel, model: str, step: int, node: Node) -> Kernel:
    return dataclasses.replace(kernel, name=_kernel_name(model, step, node, kernel))


def _renumbered(call: Call, model: str, step: int) -> Call:
    """The call at another step: its kernel's symbol names the step."""
    return dataclasses.replace(call, kernel=_named(call.kernel, model, step, call.node))


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
            value, made = call.node.inputs[reuse.input], call.node.outputs[reuse.output]
            source, result = root(value), root(made)
            if (source in first and result in first and last[source] == step and first[result] == step
                    and reads.count(source) == 1 and root.whole(value) and root.whole(made)):
                shared.append((step, source, result, reuse))
    return shared
