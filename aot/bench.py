"""Benchmark a compiled model: locally (natively or under the target's emulator), on a board over SSH,
or on a microcontroller board through its loader and console (aot/device/).

The timing harness (runtime_c/timing.c.j2) times only `NAME_run`, with TVM time_evaluator's semantics:
`warmup` untimed runs, then `repeat` measurements, each the mean of `number` back-to-back runs, and
`number` raised until a measurement lasts at least `min_repeat_ms`. The outputs of the last run are
fetched and compared with the reference (onnxruntime, or onnx.reference when onnxruntime cannot run the
model; see aot.reference) on the same inputs. A mismatch is not arbitrated here: `aot run` does that.

On a microcontroller each timed run is counted in the ticks of the core's cycle counter (or SysTick at
the core clock): cycles, shown also in microseconds at the board's clock. Under qemu the counters count
instructions, and the figures say "instructions (emulated)", never cycles or time; beside them go the
kernels' cycles estimated from a profiled run (aot/run/cycles.py), labelled as an estimate.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aot import build_dir as build_dir_files
from aot import progress
from aot import reference as checks
from aot.api import quantization_steps
from aot.boards import all_boards, load_board
from aot.build import Artifact, build
from aot.codegen import wrapper
from aot.device.board import DeviceBoard
from aot.errors import OptionError, PlanError, RunError
from aot.frontend.onnx import FreezeValue
from aot.ops import macs as node_macs
from aot.remote.board import Board
from aot.remote.ssh import Session
from aot.report import describe
from aot.run import cycles, local
from aot.target import Target, get_target


@dataclass(frozen=True)
class Stats:
    """Statistics over the measurements: milliseconds (each a mean of `number` runs), or on a
    microcontroller the cycles or emulated instructions of each run."""

    min: float
    median: float
    mean: float
    p90: float
    stddev: float
    max: float

    @classmethod
    def of(cls, times_ms: list[float]) -> Stats:
        ordered = sorted(times_ms)
        # p90 by linear interpolation between closest ranks (numpy's default percentile).
        rank = 0.9 * (len(ordered) - 1)
        lo, hi = math.floor(rank), math.ceil(rank)
        p90 = ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)
        stddev = statistics.pstdev(ordered) if len(ordered) > 1 else 0.0
        return cls(ordered[0], statistics.median(ordered), statistics.fmean(ordered), p90, stddev, ordered[-1])


@dataclass(frozen=True)
class StepTime:
    """One kernel call of a profiled run: which node it computes and its mean time per run."""

    step: int
    kernel: str
    op: str             # the anchor op, with its fused epilogue
    node: str
    macs: int
    ms: float


@dataclass(frozen=True)
class StepCycles:
    """One kernel call of a run on an emulated microcontroller: its cycles per run, estimated
    (aot/run/cycles.py)."""

    step: int
    kernel: str
    op: str
    node: str
    macs: int
    cycles: int


@dataclass(frozen=True)
class DeviceFigures:
    """A microcontroller's count of each timed run."""

    unit: str                   # "cycles", or "instructions (emulated)" under qemu
    per_run: list[int]
    stats: Stats
    clock_hz: int               # the board's core clock (cycles / clock_hz = seconds)
    timer: str                  # the counter that counted: dwt, pmu or systick
    timer_note: str             # why it is not the one the board file asked for
    kernel_instructions: int | None = None     # qemu: the model's kernels' instructions per run, exactly
    estimated_cycles: int | None = None        # qemu: the kernels' cycles per run on the core, estimated
                                               # (aot/run/cycles.py) from a profiled run

    @property
    def estimated_micros(self) -> float | None:
        """The estimated kernel cycles in microseconds at the board's clock."""
        return None if self.estimated_cycles is None else self.estimated_cycles * 1e6 / self.clock_hz

    @property
    def micros(self) -> Stats | None:
        """The statistics in microseconds at the board's clock; none for emulated instructions."""
        if self.unit != "cycles":
            return None
        return Stats.of([c * 1e6 / self.clock_hz for c in self.per_run])


@dataclass
class BenchResult:
    model: str
    model_sha256: str
    where: str                  # board name or "local"
    target: str
    emulated: bool              # figures from an emulator are not real-time latencies
    number: int
    times_ms: list[float]
    stats: Stats
    comparisons: list = field(default_factory=list)
    profile: list[StepTime] = field(default_factory=list)
    macs: int = 0
    reference: str = "onnxruntime"      # what the outputs were compared with: onnxruntime, onnx or none
    fallback_reason: str = ""           # why onnxruntime, asked for, could not run the model
    device: DeviceFigures | None = None  # on a microcontroller board: each run counted, in cycles or instructions
    cycle_profile: list[StepCycles] = field(default_factory=list)     # emulated microcontroller, --profile

    @property
    def ok(self) -> bool:
        """All outputs within tolerance; True when nothing was compared (reference "none")."""
        return all(c.ok for c in self.comparisons)

    @classmethod
    def on_device(cls, model: str, sha256: str, board: DeviceBoard, target: str, figures: DeviceFigures,
                  **checked) -> BenchResult:
        """A microcontroller's result: times only where the counts are cycles (at the board's clock); its
        stats are in milliseconds then, else in the figures' unit. `checked`: comparisons, macs, reference..."""
        times = [] if board.emulated else [c * 1e3 / board.clock_hz for c in figures.per_run]
        return cls(model, sha256, board.name, target, board.emulated, 1, times,
                   Stats.of(times) if times else figures.stats, device=figures, **checked)


def _render_timing(artifact: Artifact, path: Path, profile: bool) -> None:
    env = local.runtime_templates()
    inputs, outputs = wrapper.io_tensors(artifact.program)
    path.write_text(env.get_template("timing.c.j2").render(
        banner=f"aot timing harness for {artifact.name}", name=artifact.name, NAME=artifact.name.upper(),
        inputs=inputs, outputs=outputs, workspace_align=artifact.program.plan.alignment,
        regions=wrapper.workspace_blocks(artifact.program), profile=profile))


def _parse_times(stdout: str) -> tuple[list[float], int]:
    found = re.findall(r"repeat \d+ number (\d+) mean_ns ([0-9.]+)", stdout)
    if not found:
        raise RunError(f"the timing harness printed no measurements: {stdout.strip()[:200]}")
    return [float(ns) / 1e6 for _, ns in found], int(found[-1][0])


def _parse_profile(stdout: str, artifact: Artifact) -> list[StepTime]:
    step_ns = {int(i): float(ns) for i, ns in re.findall(r"^step (\d+) mean_ns ([0-9.]+)$", stdout, re.M)}
    calls = artifact.program.calls
    if sorted(step_ns) != list(range(len(calls))):
        raise RunError(f"the profiling harness printed {len(step_ns)} step times for {len(calls)} kernel calls")
    graph = artifact.program.graph
    return [StepTime(i, call.kernel.name, describe(graph, call.node), call.node.name, node_macs(graph, call.node),
                     step_ns[i] / 1e6) for i, call in enumerate(calls)]


def bench(model, board: str | Board | DeviceBoard | None = None, target: str | Target | None = None, repeat: int = 10,
          number: int = 1, min_repeat_ms: float = 0.0, warmup: int = 1, build_dir: str | os.PathLike | None = None,
          timeout: float = 600.0, accept_new_host_key: bool = False, seed: int = 0, profile: bool = False,
          knobs: dict | None = None, input_shapes: dict[str, tuple[int, ...]] | None = None,
          freeze: dict[str, FreezeValue] | None = None, target_dirs: Sequence[str | os.PathLike] = (),
          board_dirs: Sequence[str | os.PathLike] = (), memory: dict[str, int] | None = None,
          records: str | os.PathLike | None = None, reference: str = "onnxruntime", count: bool = True,
          tflite_arithmetic: str | None = None, inputs: dict[str, np.ndarray] | None = None) -> BenchResult:
    """Build `model` for the board's target (or `target`), time it there and check its outputs: on
    `inputs` (one array per model input) if given, else on random ones (`seed`).
    `input_shapes`, `freeze`, `memory`, `knobs`, `records` and `tflite_arithmetic` are as for aot.build.
    Board and target names are looked up in `board_dirs` and `target_dirs` first (see aot.remote.board and
    aot.target); a board's memory regions, if it declares any, replace its target's.

    With `profile`, the wrapper is compiled with its timing hooks and the result lists each kernel
    call's mean time (the hooks' clock reads add a little to the total).

    `reference` is what the outputs are compared with, as for aot.check (without its arbitration):
    onnxruntime (onnx.reference if onnxruntime cannot run the model), onnx, or none.

    On a microcontroller board, `warmup` untimed runs precede `repeat` timed ones (`number` and
    `min_repeat_ms` do not apply), and `count` also counts the kernels' instructions exactly under qemu."""
    checks.check_reference(reference)
    brd = load_board(board, board_dirs) if isinstance(board, str) else board
    tgt = get_target(brd.target if brd else (target or "host"), target_dirs)
    if isinstance(brd, DeviceBoard):
        if profile and not brd.emulated:
            raise OptionError(f"board {brd.name}: --profile is not available on microcontroller hardware yet "
                              "(under qemu it prices each kernel in estimated cycles)")
        if profile and not cycles.available(tgt):
            raise OptionError(f"board {brd.name}: --profile prices each kernel in estimated cycles, and there is "
                              f"no estimate for {tgt.name} here (a model of its core, and llvm-19's llvm-mca)")
        if number != 1 or min_repeat_ms:
            raise OptionError(f"board {brd.name}: a microcontroller counts every run on its own (--repeat runs after "
                              "--warmup); --number and --min-repeat-ms do not apply")
        return _bench_on_device(model, brd, tgt, repeat, warmup, build_dir, timeout, accept_new_host_key, seed,
                                knobs, input_shapes, freeze, memory, records, reference, count, profile,
                                tflite_arithmetic, inputs)
    if brd and brd.regions:
        tgt = dataclasses.replace(tgt, regions=brd.regions)
    if tgt.os == "none":
        stand_ins = [b.name for b in all_boards() if isinstance(b, DeviceBoard) and b.emulated and b.target == tgt.name]
        board_hint = f"--board {stand_ins[0]} under qemu, or a real one" if stand_ins else "--board with a real one"
        raise RunError(f"target {tgt.name}: the semihosting harness under qemu has no clock; time it on a "
                       f"microcontroller board ({board_hint})")
    with tempfile.TemporaryDirectory(prefix="aot-bench-") as tmp:
        work = Path(tmp)
        artifact = build(model, target=tgt, out_dir=build_dir or work / "build", knobs=knobs,
                         input_shapes=input_shapes, freeze=freeze, memory=memory, records=records,
                         tflite_arithmetic=tflite_arithmetic)
        _render_timing(artifact, work / "timing.c", profile)
        exe = work / "bench"
        defines = (f"{artifact.name.upper()}_PROFILE",) if profile else ()
        local.link(tgt, [work / "timing.c", artifact.source], [artifact.object], artifact.dir, exe,
                   f"the timing harness for {artifact.name}", defines)
        feeds = _feeds(artifact, inputs, seed)
        ins, outs = wrapper.io_tensors(artifact.program)
        files = [exe, *local.write_inputs(ins, feeds, work)]
        args = [str(warmup), str(number), str(repeat), f"{min_repeat_ms:g}"]
        out_names = [f"output_{t.index}.bin" for t in outs]
        with progress.phase(f"timing {artifact.model.label} " + (f"on board {brd.name}" if brd else f"on {tgt.name}")):
            if brd is None:
                stdout = local.execute(tgt, exe, work, timeout, artifact.name, args).stdout
                where, emulated = "local", bool(tgt.run_command)
            else:
                stdout = run_on_board(brd, files, args, out_names, work, timeout, accept_new_host_key, artifact.name)
                where, emulated = brd.name, bool(brd.runner)
        times, final_number = _parse_times(stdout)
        outputs = {t.onnx_name: np.fromfile(work / f"output_{t.index}.bin", dtype=t.dtype).reshape(t.shape)
                   for t in outs}
        comparisons, used, reason = [], "none", ""
        if reference != "none":
            proto, frozen = artifact.model.reference()
            ref = checks.run_reference(proto, {**feeds, **frozen}, artifact.model.label, reference)
            comparisons = checks.compare(outputs, ref.outputs, quantization_steps(artifact.program))
            used, reason = ref.used, ref.fallback_reason
        return BenchResult(artifact.model.label, artifact.model.sha256, where, tgt.name, emulated, final_number,
                           times, Stats.of(times), comparisons, _parse_profile(stdout, artifact) if profile else [],
                           sum(node_macs(artifact.program.graph, c.node) for c in artifact.program.calls),
                           used, reason)


def _feeds(artifact, inputs: dict | None, seed: int) -> dict[str, np.ndarray]:
    proto = artifact.model.proto
    return checks.random_inputs(proto, seed) if inputs is None else \
        checks.validate_inputs(proto, inputs, artifact.model.label)


def _bench_on_device(model, brd: DeviceBoard, tgt: Target, repeat: int, warmup: int, build_dir, timeout: float,
                     accept_new_host_key: bool, seed: int, knobs, input_shapes, freeze, memory, records,
                     reference: str, count: bool, profile: bool = False,
                     tflite_arithmetic: str | None = None, inputs: dict | None = None) -> BenchResult:
    from aot.device.run import run_on_board as run_on_device

    with tempfile.TemporaryDirectory(prefix="aot-bench-") as tmp:
        try:
            artifact = build(model, target=tgt, out_dir=build_dir or Path(tmp) / "build", knobs=knobs,
                             input_shapes=input_shapes, freeze=freeze, memory=brd.build_memory(memory),
                             records=records, tflite_arithmetic=tflite_arithmetic)
        except PlanError as err:
            raise PlanError(f"on board {brd.name} (its [flash], and its [ram] less the stack): {err}") from None
        feeds = _feeds(artifact, inputs, seed)
        with progress.phase(f"running {artifact.model.label} on board {brd.name} ({warmup} + {repeat} runs)"):
            run = run_on_device(artifact, brd, feeds, warmup, repeat, timeout, count, accept_new_host_key)
        estimate, steps = None, []
        if (run.kernel_instructions is not None or profile) and cycles.available(tgt):  # emulated: price the run
            with progress.phase(f"pricing {artifact.model.label}'s instructions as {tgt.cpu} cycles"):
                priced = cycles.estimate_cycles(artifact, feeds, timeout)[1]
            estimate = priced.cycles
            graph = artifact.program.graph
            steps = [StepCycles(i, call.kernel.name, describe(graph, call.node), call.node.name,
                                node_macs(graph, call.node), priced.per_kernel.get(call.kernel.name, 0))
                     for i, call in enumerate(artifact.program.calls)] if profile else []
            if steps and build_dir:     # the kept build's report gets the figures it was asked for
                text = (artifact.dir / "report.txt").read_text()
                text += "\n" + cycle_profile_text(steps, brd.name, tgt.name) + "\n"
                build_dir_files.amend(artifact.dir, "report.txt", text.encode())
        comparisons, used, reason = [], "none", ""
        if reference != "none":
            proto, frozen = artifact.model.reference()
            ref = checks.run_reference(proto, {**feeds, **frozen}, artifact.model.label, reference)
            comparisons = checks.compare(run.outputs, ref.outputs, quantization_steps(artifact.program))
            used, reason = ref.used, ref.fallback_reason
        macs = sum(node_macs(artifact.program.graph, c.node) for c in artifact.program.calls)
        label, sha = artifact.model.label, artifact.model.sha256
    return BenchResult.on_device(label, sha, brd, tgt.name, device_figures(run, brd, estimate),
                                 comparisons=comparisons, macs=macs, reference=used, fallback_reason=reason,
                                 cycle_profile=steps)


def cycle_profile_text(steps: list[StepCycles], board: str, target: str) -> str:
    """The per-kernel estimated cycles as a table for report.txt."""
    return (f"Estimated cycles per kernel on {target} (aot bench --profile on {board}; an estimate: "
            f"{cycles.ESTIMATE})\n" + kernel_table(steps))


def kernel_table(steps: list[StepTime] | list[StepCycles]) -> str:
    """A profiled run per kernel call: step, op, node and MACs, then its mean ms per run and GMAC/s (timed)
    or its estimated cycles per run and MACs per cycle (StepCycles), and its share of the sum."""
    estimated = bool(steps) and isinstance(steps[0], StepCycles)
    values = [s.cycles if estimated else s.ms for s in steps]
    total = sum(values)
    rows = [("#", "op", "node", "MMACs", "est. cycles" if estimated else "ms", "%",
             "MACs/cycle" if estimated else "GMAC/s")]
    for s, v in zip(steps, values):
        rate = "" if not (s.macs and v) else f"{s.macs / v:.3f}" if estimated else f"{s.macs / v / 1e6:.2f}"
        rows.append((str(s.step), s.op, s.node, f"{s.macs / 1e6:.2f}", f"{v:,}" if estimated else f"{v:.4f}",
                     f"{100 * v / total:.1f}" if total else "", rate))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i in (0, 3, 4, 5, 6) else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows)


def device_figures(run, brd: DeviceBoard, estimated_cycles: int | None = None) -> DeviceFigures:
    """A device run's laps in the unit they mean: cycles, or under qemu instructions (with the kernels'
    estimated cycles, if they were estimated)."""
    timer = run.timer
    why = "qemu models neither DWT nor the PMU" if brd.emulated else "absent on this core, or held by the debugger"
    note = "" if timer.used == timer.asked else \
        f"the board asked for {timer.asked}, which did not count ({why}): SysTick at the core clock instead"
    if brd.emulated:
        # qemu -icount shift=0: one instruction per virtual nanosecond; the counters tick at the board's clock
        per_run, unit = [round(ticks * 1e9 / timer.hz) for ticks in run.laps], "instructions (emulated)"
    else:
        per_run, unit = list(run.laps), "cycles"
    return DeviceFigures(unit, per_run, Stats.of(per_run), brd.clock_hz, timer.used, note, run.kernel_instructions,
                         estimated_cycles)


def run_on_board(brd: Board, files: list[Path], args: list[str], out_names: list[str], work: Path,
                  timeout: float, accept_new_host_key: bool, what: str) -> str:
    with Session(brd, accept_new_host_key) as session:
        remote = session.make_remote_dir()
        session.upload(files)
        command = " ".join(shlex.quote(part) for part in [*brd.command_prefix(), "./bench", *args])
        rc, stdout, stderr = session.run(f"cd {shlex.quote(remote)} && {command}", timeout)
        if rc != 0:
            detail = (stderr.strip() or stdout.strip()).splitlines()
            meaning = {126: "cannot execute it: wrong architecture for this board?", 127: "command not found",
                       2: "could not read its inputs", 4: "the model returned an error code"}.get(rc, "")
            if rc > 128:
                meaning = f"killed by signal {rc - 128}"
            raise RunError(f"{what} on board {brd.name}: the program exited with status {rc}"
                           + (f" ({meaning})" if meaning else "") + (f": {detail[-1]}" if detail else ""))
        session.download(out_names, work)
        return stdout
