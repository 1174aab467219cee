"""`aot tune`: measure candidate schedules per workload and log them as records for `--records`.

The model is compiled as for a build; each distinct workload (aot/schedule.py: template, shapes, type)
is cut out as a program of its one kernel, with its own inputs, and measured alone with the schedules
its template allows: timed natively on the host (the timing harness of `aot bench`), under the target's
emulator priced in cycles estimated for its core (aot/run/cycles.py; the Cortex-M0+, M4, M7 and M55) or counted
in executed instructions (aot/run/count.py; other cores, or `unit="instructions"`), timed on a board over SSH, or
counted in cycles on a microcontroller board (aot/device/; under qemu its kernel's exact instruction
count). Several boards of one target form a farm: measurements spread over them, one at a time on each.
The default schedule is measured first; every candidate's outputs must equal the default's (to the
float tolerance) before its cost counts.

The search, per workload, is a hill climb seeded at the default: the untried neighbours of the best
schedule so far (one field one step away) come first, then the rest of the space in a fixed shuffled
order. Trials go to the workload whose share of the model's cost is largest for the trials it had so
far, so the layers that take the time get the most tries. A schedule's cost is the median of its
measurements; when timing, the last fifth of the budget measures each workload's three leaders again,
alternating with the default (the cheapest of many single timings is cheap partly by luck).

Records are JSON lines appended as each measurement ends (so an interrupted run keeps its work): the
workload, the target, the schedule, the cost and its unit, an error if the candidate failed, when it was
measured and by which aot; a second run with the same file skips what is measured already.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aot.boards import load_board
from aot.build import Artifact
from aot.codegen import wrapper
from aot.codegen.elf import undefined_symbols
from aot.codegen.llvm import ModuleBuilder
from aot.device.board import DeviceBoard
from aot.errors import AotError, OptionError, RunError
from aot.frontend.model import load, to_graph
from aot.frontend.onnx import FreezeValue
from aot.graph.ir import Graph, Node
from aot.graph.passes import optimize
from aot.kernel.ir import dump
from aot.knobs import Knobs, resolve, scalar_variant
from aot.ops import macs as node_macs
from aot.program import Program, build_program
from aot.remote.board import Board
from aot.run import cycles
from aot.schedule import TEMPLATES, Overrides, Schedule, check
from aot.target import Target, get_target
from aot.version import __version__

SEARCHES = ("climb", "random")
FLUSH_MB = 64       # written through before each timed run: more than the last-level cache of the boards we time


@dataclass(frozen=True)
class Workload:
    key: str
    nodes: tuple[str, ...]      # the model's nodes with this key
    default: Schedule
    graph: Graph                # the first node's kernel alone: its computed inputs are the graph's inputs
    macs: int                   # per node


def kernel_graph(graph: Graph, node: Node) -> Graph:
    """A graph of `node` alone: its computed inputs become graph inputs, its outputs graph outputs."""
    inputs = tuple(dict.fromkeys(v for v in node.inputs if v and v not in graph.constants))
    used = set(node.inputs) | set(node.outputs)
    return graph.replace(name=f"{graph.name}_{node.name}", nodes=(node,), inputs=inputs, outputs=node.outputs, state=(),
                         values={k: v for k, v in graph.values.items() if k in used},
                         constants={k: v for k, v in graph.constants.items() if k in used})


def workloads(program: Program) -> list[Workload]:
    """The distinct workloads of a compiled program's templated kernels, in call order."""
    found: dict[str, list] = {}
    for call in program.calls:
        chosen = call.kernel.schedule
        if chosen is None:
            continue
        if chosen.workload not in found:
            found[chosen.workload] = [[], chosen.schedule, kernel_graph(program.graph, call.node),
                                      node_macs(program.graph, call.node)]
        found[chosen.workload][0].append(call.node.name)
    return [Workload(key, tuple(nodes), default, graph, macs) for key, (nodes, default, graph, macs) in found.items()]


def space(workload: Workload, target: Target) -> list[Schedule]:
    """Every valid schedule of the workload's template, the default first."""
    template = TEMPLATES[workload.default.template]
    names = list(template.space)
    out = [workload.default]
    for values in itertools.product(*(template.space[n] for n in names)):
        schedule = dataclasses.replace(workload.default, **dict(zip(names, values)))
        try:
            check(schedule, target, workload.key)
        except OptionError:
            continue
        if schedule != workload.default:
            out.append(schedule)
    return out


def neighbours(schedule: Schedule, target: Target) -> list[Schedule]:
    """Schedules one field one step away in its template's space."""
    template = TEMPLATES[schedule.template]
    out = []
    for name, values in template.space.items():
        current = getattr(schedule, name)
        if current not in values:
            continue
        i = values.index(current)
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                out.append(dataclasses.replace(schedule, **{name: values[j]}))
    valid = []
    for s in out:
        try:
            check(s, target, "")
            valid.append(s)
        except OptionError:
            pass
    return valid


# --- measuring one kernel ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Method:
    """How a cost is measured: "time" (ms, natively or on a Linux `board`), "count" (instructions,
    emulated), "cycles" (cycles estimated from an emulated run, aot/run/cycles.py) or "device" (a
    microcontroller `board`: cycles, or instructions when qemu stands in)."""
    kind: str
    board: Board | DeviceBoard | None = None
    accept_new_host_key: bool = False
    timeout: float = 120.0

    @property
    def unit(self) -> str:
        if self.kind == "device":
            return "instructions" if self.board.emulated else "cycles"
        return {"count": "instructions", "cycles": "estimated cycles"}.get(self.kind, "ms")

    @property
    def noisy(self) -> bool:
        """Whether repeated measurements differ: timings, and cycles on hardware (counts are exact)."""
        return self.kind == "time" or (self.kind == "device" and not self.board.emulated)

    def where(self, target: Target) -> str:
        if self.board is not None:
            return f"board {self.board.name}"
        return f"{target.run_command[0]} (emulated)" if target.run_command else "host"


@dataclass(frozen=True)
class Job:
    workload: Workload
    schedule: Schedule
    target: Target          # the lowering target (the scalar variant for simd = false)
    build_target: Target    # the target the harness is linked for
    knobs: Knobs
    method: Method
    inputs: dict[str, np.ndarray]


@dataclass(frozen=True)
class Outcome:
    cost: float | None
    error: str | None
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    fingerprint: str = ""


def kernel_program(job: Job) -> Program:
    node = job.workload.graph.nodes[0].name
    fields = {k: getattr(job.schedule, k) for k in TEMPLATES[job.schedule.template].fields}
    knobs = dataclasses.replace(job.knobs, schedules=Overrides.of(nodes={node: fields}))
    return build_program(job.workload.graph, job.target, "tk", knobs)


def fingerprint(job: Job) -> str:
    """The kernel's code as text, hashed: two schedules with one fingerprint emit the same kernel."""
    program = kernel_program(job)
    text = "\n".join(dump(dataclasses.replace(c.kernel, name="k")) for c in program.calls)
    return hashlib.sha256(text.encode()).hexdigest()


def measure(job: Job) -> Outcome:
    """Build the workload's kernel alone with the job's schedule, run it, and return its cost and outputs."""
    try:
        with tempfile.TemporaryDirectory(prefix="aot-tune-") as tmp:
            work = Path(tmp)
            artifact = _compile(kernel_program(job), job.build_target, job.knobs, work / "build")
            if job.method.kind == "count":
                from aot.run.count import count_instructions
                outputs, insns = count_instructions(artifact, job.inputs, job.method.timeout)
                return Outcome(float(insns), None, outputs)
            if job.method.kind == "cycles":
                outputs, estimate = cycles.estimate_cycles(artifact, job.inputs, job.method.timeout)
                return Outcome(float(estimate.cycles), None, outputs)
            if job.method.kind == "device":
                from aot.device.run import run_on_board as run_on_device
                board = job.method.board
                run = run_on_device(artifact, board, job.inputs, warmup=1, laps=1 if board.emulated else 11,
                                    timeout=job.method.timeout, count=board.emulated,
                                    accept_new_host_key=job.method.accept_new_host_key)
                cost = run.kernel_instructions if board.emulated else statistics.median(run.laps)
                return Outcome(float(cost), None, run.outputs)
            return _time(artifact, job, work)
    except AotError as err:
        return Outcome(None, str(err).splitlines()[0][:300])


def _compile(program: Program, target: Target, knobs: Knobs, out: Path) -> Artifact:
    out.mkdir(parents=True)
    mb = ModuleBuilder(program.name, target, vectorize=knobs.simd, opt_level=knobs.opt_level,
                       share=knobs.share_bodies, float_lsr_limit=knobs.float_lsr_limit,
                       share_numbers=knobs.share_numbers)
    for call in program.calls:
        mb.add_kernel(call.kernel)
    obj = mb.emit_object()
    header, source = wrapper.render(program, "aot tuning kernel", undefined_symbols(obj), target)
    (out / "tk.o").write_bytes(obj)
    (out / "tk.h").write_text(header)
    (out / "tk.c").write_text(source)
    return Artifact(out, program.name, target, program, None, {}, {}, "")   # type: ignore[arg-type]


def _time(artifact: Artifact, job: Job, work: Path) -> Outcome:
    from aot.bench import _parse_times, _render_timing, run_on_board
    from aot.run import local

    _render_timing(artifact, work / "timing.c", profile=False)
    exe = work / "bench"
    local.link(artifact.target, [work / "timing.c", artifact.source], [artifact.object], artifact.dir, exe,
               "the tuning harness")
    ins, outs = wrapper.io_tensors(artifact.program)
    files = [exe]
    for t in ins:
        path = work / f"input_{t.index}.bin"
        np.ascontiguousarray(job.inputs[t.onnx_name], dtype=t.dtype).reshape(t.shape).tofile(path)
        files.append(path)
    # one warm-up, then 11 runs timed one by one, each after cold caches: inside a model, the layers before
    # a kernel evict its weights (timed warm, a schedule that re-reads them looks better than it is)
    args = ["1", "1", "11", "0", str(FLUSH_MB)]
    out_names = [f"output_{t.index}.bin" for t in outs]
    if job.method.board is None:
        stdout = local.execute(artifact.target, exe, work, job.method.timeout, "the tuning harness", args).stdout
    else:
        stdout = run_on_board(job.method.board, files, args, out_names, work, job.method.timeout,
                              job.method.accept_new_host_key, "the tuning harness")
    times, _ = _parse_times(stdout)
    outputs = {t.onnx_name: np.fromfile(work / f"output_{t.index}.bin", dtype=t.dtype).reshape(t.shape)
               for t in outs}
    return Outcome(float(np.median(times)), None, outputs)


def same_outputs(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> str | None:
    """None if `got` equals the default schedule's outputs `want` (floats to 1e-5 of their scale), else why not."""
    for name, expected in want.items():
        actual = got.get(name)
        if actual is None or actual.shape != expected.shape:
            return f"output {name} missing or of another shape"
        if np.issubdtype(expected.dtype, np.floating):
            scale = float(np.abs(expected).max()) or 1.0
            err = float(np.abs(actual.astype(np.float64) - expected).max())
            if not err <= 1e-5 * scale:
                return f"output {name} differs from the default schedule's by {err:.3g} (scale {scale:.3g})"
        elif not np.array_equal(actual, expected):
            return f"output {name} differs from the default schedule's in {int((actual != expected).sum())} elements"
    return None


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name in graph.inputs:
        value = graph.values[name]
        if value.dtype.startswith("float"):
            out[name] = rng.standard_normal(value.shape).astype(value.dtype)
        else:
            info = np.iinfo(value.dtype)
            lo, hi = max(info.min, -128), min(info.max, 255)
            out[name] = rng.integers(lo, hi + 1, value.shape).astype(value.dtype)
    return out


# --- records ---------------------------------------------------------------------------------------

def read_log(path: Path) -> list[dict]:
    from aot.schedule import read_records
    return read_records(path) if path.exists() else []


def target_version(target: Target) -> str:
    """A hash of the target description: records from an edited target file are told apart."""
    text = Path(target.source).read_bytes() if target.source and Path(target.source).is_file() else \
        repr(target).encode()
    return hashlib.sha256(text).hexdigest()[:16]


# --- the search ------------------------------------------------------------------------------------

@dataclass
class Progress:
    """Per workload: what was tried and the best so far."""
    workload: Workload
    candidates: list[Schedule]
    tried: set = field(default_factory=set)             # schedules (measured, or equal code to one measured)
    costs: dict = field(default_factory=dict)           # schedule -> its costs measured (this run and earlier)
    best: tuple[float, Schedule] | None = None          # the lowest median cost, and its schedule
    reference: dict[str, np.ndarray] | None = None
    fingerprints: dict[str, Schedule] = field(default_factory=dict)
    trials: int = 0                 # measured in this run
    earlier: int = 0                # measured by an earlier run with the same records file
    shuffled: list[Schedule] = field(default_factory=list)

    def resume(self, records: list[dict]) -> None:
        """Take in the measurements of an earlier run: tried, and the best of them so far."""
        for record in records:
            try:
                schedule = Schedule(**record["schedule"])
            except TypeError:
                continue
            if schedule not in self.candidates:
                continue
            self.tried.add(schedule)
            self.earlier += 1
            if not record.get("error") and record.get("cost") is not None:
                self.consider(float(record["cost"]), schedule)

    def consider(self, cost: float, schedule: Schedule) -> None:
        self.costs.setdefault(schedule, []).append(cost)
        cost = statistics.median(self.costs[schedule])
        if self.best is None or cost < self.best[0] or self.best[1] == schedule:
            self.best = min(((statistics.median(c), s) for s, c in self.costs.items()), key=lambda b: b[0])

    @property
    def default_cost(self) -> float | None:
        costs = self.costs.get(self.workload.default)
        return statistics.median(costs) if costs else None

    def leaders(self, count: int) -> list[Schedule]:
        """The `count` schedules other than the default with the lowest median costs."""
        ranked = sorted((statistics.median(c), s.tag, s) for s, c in self.costs.items() if s != self.workload.default)
        return [s for _, _, s in ranked[:count]]

    def weight(self) -> float:
        cost = self.default_cost if self.default_cost is not None else float(self.workload.macs)
        return cost * len(self.workload.nodes) / (1 + self.trials)

    def next(self, target: Target, climb: bool = True) -> Schedule | None:
        if climb and self.best is not None:
            for s in neighbours(self.best[1], target):
                if s not in self.tried and s in self.candidates:
                    return s
        while self.shuffled:
            s = self.shuffled.pop()
            if s not in self.tried:
                return s
        return None


@dataclass(frozen=True)
class WorkloadResult:
    key: str
    nodes: tuple[str, ...]
    trials: int             # measurements in the records, this run's and earlier ones
    default_cost: float | None
    best_cost: float | None
    best: Schedule | None


def emulated_method(target: Target, unit: str | None = None) -> Method:
    """How a run under `target`'s emulator is measured: in estimated cycles where the core has a model (or
    as `unit` says, "cycles" or "instructions")."""
    if unit not in (None, "cycles", "instructions"):
        raise OptionError(f"--unit must be cycles or instructions, not {unit!r}")
    if unit == "cycles" and not cycles.available(target):
        raise OptionError(f"target {target.name}: no cycle estimate here (a model for {', '.join(cycles.REFILL)}, "
                          "and llvm-19's llvm-mca); use --unit instructions")
    return Method("cycles" if unit == "cycles" or (unit is None and cycles.available(target)) else "count")


def tune(model, target: str | Target = "host", board: str | Board | DeviceBoard | list | None = None,
         records: str | os.PathLike = "records.json", budget_s: float = 600.0, trials: int | None = None,
         jobs: int | None = None, input_shapes: dict[str, tuple[int, ...]] | None = None,
         freeze: dict[str, FreezeValue] | None = None, knobs: dict | None = None,
         accept_new_host_key: bool = False, seed: int = 0, search: str = "climb",
         report: Callable[[str], None] | None = None, unit: str | None = None,
         tflite_arithmetic: str | None = None) -> list[WorkloadResult]:
    """Tune `model`'s workloads for `target` (or `board`'s), appending records to `records`, for at most
    `budget_s` seconds and `trials` measurements per workload. `board` may be a list: boards of one target,
    each measuring one candidate at a time. `search` is "climb" (from the default, see above) or "random"
    (the space in a shuffled order, for comparison). Under an emulator `unit` is "cycles" (estimated;
    the default where the core has a model, aot/run/cycles.py) or "instructions". `tflite_arithmetic` is
    aot.build's. Returns each workload's outcome."""
    if search not in SEARCHES:
        raise OptionError(f"--search must be one of {', '.join(SEARCHES)}, not {search!r}")
    given = board if isinstance(board, (list, tuple)) else [board] if board is not None else []
    boards = [load_board(b) if isinstance(b, str) else b for b in given]
    if len({b.target for b in boards}) > 1:
        raise OptionError("the boards of one tuning run must share a target: "
                          + ", ".join(f"{b.name} is {b.target}" for b in boards))
    if len({b.name for b in boards}) < len(boards):
        raise OptionError("a board is named twice: each measures one candidate at a time")
    tgt = get_target(boards[0].target) if boards else get_target(target) if isinstance(target, str) else target
    if tgt.os == "none" and not tgt.run_command and not boards:
        raise OptionError(f"target {tgt.name}: tuning measures under an emulator, and this target has none")
    if boards:
        methods = [Method("device" if isinstance(b, DeviceBoard) else "time", b, accept_new_host_key)
                   for b in boards][:jobs or None]
    elif tgt.run_command:
        methods = [emulated_method(tgt, unit)] * (jobs or 2)
    else:
        if not tgt.runs_natively():
            raise OptionError(f"target {tgt.name} cannot run on this machine and has no emulator: "
                              "tune it on a board (--board)")
        methods = [Method("time")] * (jobs or 1)
    method = methods[0]
    if shutil.which(tgt.cc) is None:
        raise RunError(f"target {tgt.name}: C compiler '{tgt.cc}' not found (install the target's toolchain)")
    knob_values = resolve(tgt, knobs)
    lowering_target = tgt if knob_values.simd else scalar_variant(tgt)
    loaded = load(model, input_shapes, freeze, tflite_arithmetic)
    graph = optimize(to_graph(loaded))
    program = build_program(graph, lowering_target, "m", knob_values)
    found = workloads(program)
    if not found:
        raise OptionError(f"{loaded.label}: no kernel with a schedule to tune (convolutions, Gemm)")
    path = Path(records)
    earlier = read_log(path)
    rng = random.Random(seed)
    states = []
    for w in found:
        cands = space(w, tgt)
        state = Progress(w, cands)
        state.shuffled = cands[1:]
        rng.shuffle(state.shuffled)
        state.shuffled.reverse()
        state.resume([r for r in earlier if r["workload"] == w.key and r["target"] == tgt.name
                      and r.get("unit", method.unit) == method.unit])
        states.append(state)
    say = report or (lambda line: None)
    bar = _Bar(sum(min(len(s.candidates), trials or len(s.candidates)) for s in states), budget_s)
    version = target_version(tgt)
    start = time.monotonic()
    free = list(methods)            # each board (or emulator slot) measures one candidate at a time
    parallel = len(free)

    def job(state: Progress, schedule: Schedule, on: Method = method) -> Job:
        return Job(state.workload, schedule, lowering_target, tgt, knob_values, on,
                   random_inputs(state.workload.graph, seed))

    def log(state: Progress, schedule: Schedule, outcome: Outcome, on: Method) -> None:
        entry = {"workload": state.workload.key, "target": tgt.name, "schedule": schedule.describe(),
                 "cost": outcome.cost, "unit": on.unit, "error": outcome.error,
                 "where": on.where(tgt),
                 "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "aot": __version__, "target_sha256": version}
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def settle(state: Progress, schedule: Schedule, outcome: Outcome, on: Method = method) -> None:
        state.trials += 1
        if outcome.error is None and schedule == state.workload.default and state.reference is None:
            state.reference = outcome.outputs
        elif outcome.error is None and state.reference is not None and outcome.outputs:
            why = same_outputs(outcome.outputs, state.reference)
            if why is not None:
                outcome = Outcome(None, f"wrong result: {why}")
        log(state, schedule, outcome, on)
        if outcome.error is None and outcome.cost is not None:
            state.consider(outcome.cost, schedule)
        bar.step(state, outcome)

    with ProcessPoolExecutor(max_workers=parallel) as pool:
        # the defaults first, one at a time per workload: their outputs are what candidates must give
        for state in states:
            default = state.workload.default
            state.tried.add(default)
            measured_before = default in state.costs
            outcome = measure(job(state, default))       # its outputs are needed even if measured before
            if measured_before and outcome.error is None:
                state.reference = outcome.outputs       # its earlier costs are in state.costs already
                continue
            settle(state, default, outcome)
            if outcome.error is not None:
                say(f"{state.workload.key}: the default schedule failed: {outcome.error}")
        running: dict[Future, tuple[Progress, Schedule, Method]] = {}
        # timings are noisy, and the cheapest of many single measurements is cheap partly by luck: the
        # last fifth of the budget measures the leaders again, alternating with the default
        confirm = method.noisy
        search_s = budget_s * (0.8 if confirm else 1.0)
        while True:
            over = time.monotonic() - start >= search_s
            while not over and len(running) < parallel:
                picked = _pick(states, tgt, trials, running, search == "climb")
                if picked is None:
                    break
                state, schedule = picked
                state.tried.add(schedule)
                candidate = job(state, schedule)
                mark = fingerprint(candidate)
                if mark in state.fingerprints:  # the same kernel as one measured: nothing to learn
                    continue
                state.fingerprints[mark] = schedule
                on = free.pop()
                running[pool.submit(measure, dataclasses.replace(candidate, method=on))] = (state, schedule, on)
            if not running:
                break
            finished, _ = wait(running, timeout=max(1.0, search_s - (time.monotonic() - start)),
                               return_when=FIRST_COMPLETED)
            for future in finished:
                state, schedule, on = running.pop(future)
                free.append(on)
                settle(state, schedule, future.result(), on)
            if time.monotonic() - start >= search_s and not finished:
                for future in running:
                    future.cancel()
                break
        if confirm:
            _confirm(states, lambda st, sc: settle(st, sc, measure(job(st, sc))),
                     lambda: time.monotonic() - start < budget_s)
    bar.close()
    return [WorkloadResult(s.workload.key, s.workload.nodes, s.trials + s.earlier, s.default_cost,
                           s.best[0] if s.best else None, s.best[1] if s.best else None) for s in states]


CONFIRM_LEADERS, CONFIRM_ROUNDS = 3, 3


def _confirm(states: list[Progress], remeasure: Callable[[Progress, Schedule], None],
             time_left: Callable[[], bool]) -> None:
    """Measure each workload's leaders again, alternating with the default, costliest workloads first."""
    for state in sorted(states, key=lambda s: -(s.default_cost or 0.0) * len(s.workload.nodes)):
        if state.default_cost is None:
            continue
        leaders = state.leaders(CONFIRM_LEADERS)
        for _ in range(CONFIRM_ROUNDS if leaders else 0):
            for schedule in (state.workload.default, *leaders):
                if not time_left():
                    return
                remeasure(state, schedule)


def _pick(states: list[Progress], target: Target, trials: int | None, running: dict,
          climb: bool) -> tuple[Progress, Schedule] | None:
    """The next (workload, schedule) to measure: the workload that most deserves a trial, its next schedule."""
    busy = {id(state) for state, *_ in running.values()}
    order = sorted(states, key=lambda s: (id(s) in busy, -s.weight()))
    for state in order:
        if state.default_cost is None or (trials is not None and state.trials >= trials):
            continue
        schedule = state.next(target, climb)
        if schedule is not None:
            return state, schedule
    return None


class _Bar:
    """One line on a terminal, redrawn per measurement: trials, time, and the best saving so far."""

    def __init__(self, total: int, budget_s: float) -> None:
        self.total, self.budget_s, self.done = total, budget_s, 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, state: Progress, outcome: Outcome) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        shown = min(1.0, max(self.done / max(self.total, 1), elapsed / self.budget_s))
        filled = int(shown * 24)
        best = ""
        if state.best is not None and state.default_cost:
            best = (f"  best {state.best[0]:.4g} vs default {state.default_cost:.4g} "
                    f"({state.best[1].tag}) {state.workload.key[:48]}")
        line = (f"[{'#' * filled}{'.' * (24 - filled)}] {self.done} trials {int(elapsed) // 60}:"
                f"{int(elapsed) % 60:02d}/{int(self.budget_s) // 60}:{int(self.budget_s) % 60:02d}{best}")
        if self.tty:
            width = shutil.get_terminal_size().columns - 1        # as wide as the terminal, never wrapping
            sys.stderr.write("\r" + line[:width].ljust(width))
            sys.stderr.flush()
        elif self.done % 25 == 0:
            print(line, file=sys.stderr)

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def parse_budget(text: str) -> float:
    """`10m`, `90s`, `1h`, `1h30m` or plain seconds -> seconds."""
    import re
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise OptionError(f"--budget {text!r}: give a duration such as 10m, 90s or 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
