"""The build: model → optimized graph → program → object + wrapper + plan + metadata + report (text and SVG).

The output directory is the user's (aot/build_dir.py): each file is written aside and renamed into place
once all are complete, only files an earlier build wrote are replaced, and a failed build leaves the
directory as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import onnx

from aot import budget, build_dir, progress, report, report_svg, stages
from aot.codegen import library, wrapper
from aot.codegen.elf import Blob, chunks, undefined_symbols
from aot.codegen.llvm import ModuleBuilder, llvm_version
from aot.errors import ModelError, OptionError, PlanError, ShapeError, UnsupportedOpError
from aot.frontend.model import Loaded, load, to_graph
from aot.frontend.onnx import FreezeValue
from aot.frontend.tflite import TfliteModel
from aot.graph.ir import Graph
from aot.graph.passes import optimize
from aot.graph.verify import verify
from aot.knobs import Knobs, resolve, scalar_variant
from aot.program import Program, build_program, sharing_used
from aot.schedule import RANKED
from aot.target import Target, get_target, resized
from aot.version import __version__


@dataclass(frozen=True)
class Artifact:
    """A finished build directory and what is in it."""

    dir: Path
    name: str
    target: Target
    program: Program
    model: Loaded
    plan: dict
    metadata: dict
    report: str

    @property
    def object(self) -> Path:
        return self.dir / f"{self.name}.o"

    @property
    def header(self) -> Path:
        return self.dir / f"{self.name}.h"

    @property
    def source(self) -> Path:
        return self.dir / f"{self.name}.c"


def build(model: str | os.PathLike | onnx.ModelProto, target: str | Target = "host",
          out_dir: str | os.PathLike | None = None, name: str | None = None,
          input_shapes: dict[str, tuple[int, ...]] | None = None, knobs: dict | None = None,
          memory: dict[str, int] | None = None, on_pass: Callable[[str, Graph], None] | None = None,
          freeze: dict[str, FreezeValue] | None = None, records: str | os.PathLike | None = None,
          emit: str | Iterable[str] | None = (),
          after_optimize: Callable[[Graph], Graph] | None = None,
          extra_files: dict[str, bytes] | None = None, tflite_arithmetic: str | None = None) -> Artifact:
    """Compile an ONNX model (path or ModelProto) for `target` into `out_dir` (default build/NAME).

    `input_shapes` fixes dynamic input dimensions; `freeze` ({"sr": 16000}) binds inputs to constants
    (a number, a comma list, a .npy path or an array), which are then no longer inputs of the build.
    `tflite_arithmetic` ("litert" or "tflite-micro") is whose reference kernels a TFLite model's integer
    arithmetic follows (default: LiteRT's, unless the model has an operator only TFLite Micro computes so).

    `memory` ({"flash": bytes, "ram": bytes}) overrides the target's limits, and the sizes of its memory
    regions by name ({"dtcm": bytes}); a model that needs more fails the build with a PlanError. `knobs`
    overrides the target's schedule knobs (aot/knobs.py), with tables "node" and "workload" for one
    kernel's schedule; `records` (a log of `aot tune`) gives each workload the best schedule measured.

    `emit` ("graph", "kir", "llvm", "asm"; aot/stages.py) also writes those stages of the compilation as
    readable files into the build directory. `after_optimize` rewrites the optimized graph before it is
    lowered (aot.bisect adds outputs there). `extra_files` (name -> bytes) are written and listed with the
    build's own (the model `aot build --quantize` made, and its report).
    """
    emitted = stages.parse(emit)
    tgt = get_target(target) if isinstance(target, str) else target
    totals = {k: v for k, v in (memory or {}).items() if k in ("flash", "ram")}
    region_sizes = {k: v for k, v in (memory or {}).items() if k not in totals}
    if region_sizes:
        tgt = dataclasses.replace(tgt, regions=resized(tgt.regions, region_sizes))
    schedule = resolve(tgt, knobs, records=records)
    with progress.phase(f"reading {_label(model)}"):
        loaded = load(model, input_shapes, freeze, tflite_arithmetic)
        graph = to_graph(loaded)
    name = wrapper.c_identifier(name or graph.name or "model")
    dest = Path(out_dir) if out_dir is not None else Path("build") / name
    build_dir.check(dest, _usual_files(name))       # before the work: a user's file in the way stops the build
    if on_pass:
        on_pass("import", graph)
    try:
        with progress.phase(f"optimizing {len(graph.nodes):,} nodes"):
            graph = optimize(graph, on_pass)
    except (ModelError, UnsupportedOpError, ShapeError) as err:   # a node's fault: say which model it is in
        if str(err).startswith(loaded.label):
            raise
        raise type(err)(f"{loaded.label}: {err}") from None
    if after_optimize is not None:
        graph = verify(after_optimize(graph), "after_optimize")
    _check_float64(graph, tgt, loaded.label)
    limits = {**tgt.memory, **totals}
    report.check_weights_fit(graph, limits, loaded.label, tgt.name)
    try:
        program, schedule, files = _compile(graph, tgt, loaded, name, schedule, limits, emitted,
                                            narrow_over_limits="wide_weights" not in (knobs or {}))
    except _WideOverLimits:     # the weights as int8, twice smaller, may fit
        program, schedule, files = _compile(graph, tgt, loaded, name, dataclasses.replace(schedule, wide_weights=False),
                                            limits, emitted)
    if extra_files:
        files = _with_files(files, extra_files)
    with progress.phase(f"writing {dest}"):
        build_dir.write_build(dest, files)
    return Artifact(dest, name, tgt, program, loaded, json.loads(files["plan.json"]),
                    json.loads(files["metadata.json"]), files["report.txt"].decode())


Files = dict[str, Blob]     # a build's files by name: bytes, or chunks in order


def _check_float64(graph: Graph, tgt: Target, label: str) -> None:
    """float64 computed at run time needs a double-precision FPU: without one every operation would be a
    library call the object cannot carry (no undefined symbols)."""
    if tgt.fp64:
        return
    for node in graph.nodes:
        for name in node.outputs:
            if name and graph.values[name].dtype == "float64":
                raise UnsupportedOpError(
                    f"{label}: node '{node.name}' ({node.op}) computes '{name}' in float64 at run time, and target "
                    f"{tgt.name} has no double-precision FPU; cast the model to float32, or build for a target "
                    f"with one (x86-64, AArch64, ARMv7, cortex-m7, cortex-m55)")


def _with_files(files: Files, extra: dict[str, bytes]) -> Files:
    """The build's files and `extra`, each listed with its hash in metadata.json."""
    clash = sorted(set(extra) & set(files))
    if clash:
        raise OptionError(f"{', '.join(clash)}: the build writes a file of that name itself")
    metadata = json.loads(files["metadata.json"])
    metadata["files"] = dict(sorted({**metadata["files"], **{n: _sha256(d) for n, d in extra.items()}}.items()))
    return {**files, **extra, "metadata.json": _json(metadata)}


def _label(model) -> str:
    return os.path.basename(str(model)) if not isinstance(model, onnx.ModelProto) else (model.graph.name or "the model")


def _usual_files(name: str) -> list[str]:
    """The files every build named `name` writes (some builds write more: the library, --emit's stages)."""
    return [f"{name}.o", f"{name}.h", f"{name}.c", "plan.json", "report.txt", "report.svg", build_dir.METADATA]


class _WideOverLimits(Exception):
    """A build with its weights widened (knob wide_weights) went over the device's flash or RAM."""


def _compile(graph: Graph, tgt: Target, loaded: Loaded, name: str, schedule: Knobs, limits: dict[str, int],
             emitted: frozenset[str], narrow_over_limits: bool = False) -> tuple[Program, Knobs, Files]:
    """The program, the knobs it was built with (tuning records may step down) and the build's files.
    With `narrow_over_limits`, widened weights that do not fit raise _WideOverLimits."""
    lowering_target = tgt if schedule.simd else scalar_variant(tgt)
    with progress.phase(f"lowering {len(graph.nodes):,} kernels and planning their memory"):
        program = _program(graph, lowering_target, name, schedule, limits, loaded.label)
    if schedule.schedules.records and schedule.records_keep_workspace:
        program, schedule = _records_within_workspace(program, graph, lowering_target, name, schedule, limits,
                                                      loaded.label)
    _check_overrides_used(program, schedule)
    try:
        return program, schedule, _render(program, tgt, loaded, limits, schedule, emitted)
    except PlanError:
        if narrow_over_limits and schedule.wide_weights:
            raise _WideOverLimits() from None
        raise


def _program(graph: Graph, target: Target, name: str, knobs: Knobs, limits: dict[str, int], label: str) -> Program:
    if "ram" in limits:     # over budget, the leading layers run in row bands (aot/budget.py)
        return budget.fit(graph, target, name, knobs, limits["ram"], label)[0]
    return build_program(graph, target, name, knobs)


def _records_within_workspace(program: Program, graph: Graph, target: Target, name: str, knobs: Knobs,
                              limits: dict[str, int], label: str) -> tuple[Program, Knobs]:
    """A tuned schedule may give up what let its result overlap its input (weight panels outside read
    the whole input for each panel). Where that grows the workspace past the untuned build's, the nodes
    whose kernels lost an overlap the untuned plan used step down to their workload's next record (then
    the default), until the workspace is no larger; failing that, the untuned build. Returns the
    program and the knobs it was built with."""
    every = {call.node.name: RANKED for call in program.calls}
    untuned_knobs = dataclasses.replace(knobs, schedules=knobs.schedules.reranked(every))
    untuned = _program(graph, target, name, untuned_knobs, limits, label)
    if program.plan.size <= untuned.plan.size:
        return program, knobs
    default_reuse = {call.node.name: call.kernel.reuse for call in untuned.calls}
    overlapped = {untuned.calls[step].node.name for step, *_ in sharing_used(untuned)}
    for _ in range(RANKED):
        weaker = [call.node.name for call in program.calls if call.kernel.schedule is not None
                  and call.kernel.schedule.source == "records"
                  and call.kernel.reuse != default_reuse.get(call.node.name)]
        weaker = [n for n in weaker if n in overlapped] or weaker
        if not weaker:
            break
        schedules = knobs.schedules
        knobs = dataclasses.replace(knobs, schedules=schedules.reranked({n: schedules.rank(n) + 1 for n in weaker}))
        program = _program(graph, target, name, knobs, limits, label)
        if program.plan.size <= untuned.plan.size:
            return program, knobs
    return untuned, untuned_knobs


def _check_overrides_used(program: Program, knobs: Knobs) -> None:
    """A [node.NAME] or [workload."KEY"] table that no kernel took is a typo or a stale file: say so."""
    chosen = [call.kernel.schedule for call in program.calls if call.kernel.schedule is not None]
    for what, keys, have in (("node", knobs.schedules.nodes, {c.node for c in chosen}),
                             ("workload", knobs.schedules.workloads, {c.workload for c in chosen})):
        for key, _ in keys:
            if key not in have:
                listed = sorted(have)
                shown = ", ".join(listed[:6]) + (f", ... ({len(listed)} in all)" if len(listed) > 6 else "")
                raise OptionError(f"knobs [{what}.{key}]: no kernel with a schedule has that {what} "
                                  f"(they are: {shown or 'none'})")


def _render(program: Program, tgt: Target, loaded: Loaded, limits: dict[str, int],
            knobs: Knobs, emitted: frozenset[str] = frozenset()) -> Files:
    name = program.name
    banner = (f"Generated by aot {__version__} from {loaded.label} (sha256 {loaded.sha256[:16]}) "
              f"for target {tgt.name}. Do not edit.")
    mb = ModuleBuilder(name, tgt, vectorize=knobs.simd, opt_level=knobs.opt_level,
                       share=knobs.share_bodies, float_lsr_limit=knobs.float_lsr_limit,
                       share_numbers=knobs.share_numbers)
    for call in program.calls:
        mb.add_kernel(call.kernel)
    with progress.phase(f"compiling {len(program.calls):,} kernels for {tgt.name} with LLVM"):
        compiled = mb.compile() if emitted & stages.NEEDS_MODULE else None
        obj = compiled.object if compiled else mb.emit_object(chunked=True)     # the weights stay in their arrays
    fp = report.footprint(program, obj, tgt.weights_prefix)
    report.check_fits(fp, limits, loaded.label, tgt.name)
    requires = undefined_symbols(obj)
    header, source = wrapper.render(program, banner, requires, tgt)
    inputs, outputs = wrapper.io_tensors(program)
    archive = library.static_library(name, tgt, obj, header, source)
    files = {f"{name}.o": obj, f"{name}.h": header.encode(), f"{name}.c": source.encode(),
             **({f"{name}.a": archive} if archive is not None else {}),
             **library.build_files(name, tgt, banner, archive is not None),
             "plan.json": _json(plan_json(program)),
             "report.txt": report.render(program, fp, banner, limits, obj).encode(),
             "report.svg": report_svg.render(program, banner, tgt.name).encode(),
             **stages.render(emitted, program, compiled, banner)}
    metadata = {
        "generated_by": f"aot {__version__}", "llvm": llvm_version(), "name": name,
        "model": {"file": loaded.label, "sha256": loaded.sha256,
                  # a TFLite model's integer arithmetic: whose reference kernels it follows bit for bit
                  **({"arithmetic": loaded.file.runtime} if isinstance(loaded, TfliteModel) else {})},
        "target": {"name": tgt.name, "triple": tgt.triple, "cpu": tgt.cpu, "features": tgt.features},
        "knobs": knobs.describe(),
        # each templated kernel's schedule, its workload key, and whether the default rules, a --knobs
        # table or a tuning record chose it (aot/schedule.py)
        "schedules": [{"kernel": call.kernel.name, **call.kernel.schedule.describe()}
                      for call in program.calls if call.kernel.schedule is not None],
        "workspace": {"size": program.plan.size, "align": program.plan.alignment,
                      **({"regions": [{"name": r.name, "rank": r.rank, "size": r.size, "capacity": r.capacity,
                                       "weights": r.weights, "section": r.section}
                                      for r in wrapper.workspace_blocks(program)]} if program.regions else {})},
        "requires": requires,
        # NAME.a: the object and the wrapper compiled with these (null where the compiler was not found)
        "library": {"file": f"{name}.a" if archive is not None else None, "cc": tgt.cc,
                    "cflags": library.compile_flags(tgt),
                    **({} if archive is not None else {"missing": library.missing_tools(tgt)})},
        "memory": {"flash": fp.flash, "code": fp.code, "weights": fp.weights, "ram": fp.ram,
                   "limits": dict(sorted(limits.items()))},
        "inputs": [_io(t) for t in inputs], "outputs": [_io(t) for t in outputs],
        "files": {f: _sha256(data) for f, data in sorted(files.items())},
    }
    files["metadata.json"] = _json(metadata)
    return files


def _io(t: wrapper.Tensor) -> dict:
    io = {"name": t.onnx_name, "c_name": t.field, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.bytes}
    if t.scale is not None:
        io["scale"], io["zero_point"] = t.scale, t.zero_point
    return io


def _sha256(data: Blob) -> str:
    """A file's hash; a file given as chunks (the object and the library: elf.Blob) hashed as written."""
    digest = hashlib.sha256()
    for chunk in chunks(data):
        digest.update(chunk)
    return digest.hexdigest()


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode()


def plan_json(program: Program) -> dict:
    graph = program.graph
    producer = {out: call.node.name for call in program.calls for out in call.node.outputs}
    aliases: dict[str, list[str]] = {}
    for value, root in program.roots.items():
        if value != root and value not in graph.constants:
            aliases.setdefault(root, []).append(value)
    region = {b: p.region.name for p in program.regions for b in p.plan.offsets}
    buffers = [{"tensor": b.name, "producer": producer.get(b.name), "first_use": b.first, "last_use": b.last,
                "size": b.size, "offset": program.plan.offsets[b.name], "views": sorted(aliases.get(b.name, [])),
                **({"region": region[b.name]} if region else {})}
               for b in sorted(program.buffers, key=lambda b: (b.first, b.name))]
    external = [{"tensor": v, "binding": f"{loc.kind}[{loc.index}]", "views": sorted(aliases.get(v, []))}
                for v, loc in program.locations.items() if loc.kind in ("input", "output") and program.roots[v] == v]
    used = {(step, source, result) for step, source, result, _ in sharing_used(program)}
    return {"workspace_size": program.plan.size, "lower_bound": program.plan.lower_bound,
            "alignment": program.plan.alignment, "strategy": program.plan.strategy,
            # with memory regions, each planned on its own; a buffer's offset is in its region
            **({"regions": [{"name": p.region.name, "rank": p.region.rank, "capacity": p.region.size,
                             "size": p.plan.size, "weights": p.weights, "lower_bound": p.plan.lower_bound,
                             "strategy": p.plan.strategy} for p in program.regions]} if program.regions else {}),
            # the steps run in the graph's order or, when its plan needs less, in one searched for fewer live bytes
            "order": {"searched": program.order.changed, "graph_order_workspace": program.order.graph_order,
                      "searched_order_workspace": program.order.searched},
            # leading layers run band by band to fit the RAM budget (null: as the graph is)
            "row_bands": None if program.bands is None else {
                "first_node": program.bands.first_node, "last_node": program.bands.last_node,
                "bands": program.bands.stage.bands, "ram_budget": program.bands.ram, "macs": program.bands.macs,
                "macs_without": program.bands.plain_macs},
            "steps": [{"step": i, "kernel": c.kernel.name, "node": c.node.name, "op": c.node.op,
                       "reads": [v for v in c.args[:len(c.args) - len(c.node.outputs)]],
                       "writes": list(c.node.outputs)} for i, c in enumerate(program.calls)],
            "buffers": buffers, "external": external,
            # where the kernels let a result share bytes with a dying input: in place (exact), or
            # overlapping with the result starting `shift` bytes or more below (above if backward) it
            "shared": [{"step": step, "source": source, "result": result, "exact": reuse.exact,
                        "backward": reuse.backward, "shift": reuse.shift,
                        "used": (step, source, result) in used}
                       for step, source, result, reuse in program.shared]}
