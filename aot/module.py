"""In-process modules: a build loaded into Python and called like a function (TVM's GraphModule habit).

    m = aot.load("build/model")             # a build directory; aot.compile("model.onnx") builds one and loads it
    m.set_input("input", x); m.run(); y = m.get_output(0)
    ys = m(x)                               # or m.run(input=x): the outputs, a list of numpy arrays
    m.benchmark(repeat=20, number=0, min_repeat_ms=100)   # time_evaluator semantics, as `aot bench`
    m.inputs, m.outputs, m.workspace_size, m.metadata

How a module runs its build depends on where the target's code can run:

- natively (a host target this CPU runs): the build's object NAME.o and wrapper NAME.c are linked with the
  target's C compiler and flags (plus -fPIC -shared) into a shared library in a private temporary directory,
  loaded with its own handle (RTLD_LOCAL, linked -Bsymbolic: several modules, even of models of the same
  name, live side by side), and `NAME_run(inputs, outputs, workspace)` is called through ctypes, without the
  GIL. The module owns a workspace aligned as NAME.h asks (one block per memory region, with regions).
  benchmark() times NAME_run with a small C loop linked into the same library.
- under the target's emulator (an ARM Linux target under qemu-user, a bare-metal one under qemu-system with
  semihosting), or on a board over SSH (`board=`): each run is one run of the C harness `aot run` uses,
  compiled once when the module loads; benchmark() runs the timing harness of `aot bench`. Bare-metal
  targets under qemu have no clock: they run, but are not timed.
- on a microcontroller board (`board=` a board file with a loader, aot/device/): each run links a firmware
  image with the inputs compiled in, loads it and runs it through the board's console; benchmark() counts
  each run in cycles (instructions under qemu) and returns them in the result's `device` figures.

Inputs and outputs are in the model's (ONNX) layout, as metadata.json lists them (name, dtype, shape); an
input of another shape or dtype is an OptionError naming the input, what it expects and what it was given.
Nothing is converted silently: a float64 array for a float32 input is refused (`x.astype(np.float32)`).

Threads. `set_input`, `run`, `get_output` and `benchmark` use the module's own inputs, outputs and workspace
under a lock: each call is atomic, but a set_input/run/get_output sequence is one thread's business.
`m(x)` (and `m.call(...)`) is the path for several threads: it reads only the arrays it is given, writes
fresh output arrays and uses a workspace of the calling thread's own (threading.local), so calls from
different threads run at once. `close()` (or leaving a `with` block) waits for calls in flight, unloads
the library and removes the module's temporary directory; a closed module refuses further calls.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aot.codegen import wrapper
from aot.device.board import DeviceBoard
from aot.errors import OptionError, RunError, TargetError
from aot.run import local
from aot.target import Target, get_target

if TYPE_CHECKING:
    import onnx

    from aot.bench import BenchResult
    from aot.build import Artifact
    from aot.remote.board import Board

RETURN_CODES = {-1: "ERR_NULL: an argument or a tensor pointer is NULL",
                -2: "ERR_ALIGN: the workspace or a tensor pointer is misaligned",
                -3: "ERR_CPU: this CPU or its OS does not offer the AMX tiles the build runs on"}


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of the build, as metadata.json describes it: its ONNX name, dtype and shape (the
    model's layout), its field in NAME_inputs / NAME_outputs, and for a quantized tensor its scale and zero
    point (real = scale * (q - zero_point))."""

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    c_name: str
    bytes: int
    scale: float | None = None
    zero_point: int | None = None

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def describe(self) -> str:
        return f"{self.dtype} {list(self.shape)}"


@dataclass(frozen=True)
class _Block:
    """A workspace block: the whole workspace, or one memory region's."""

    name: str           # the region's name ("" for the one workspace)
    size: int
    align: int


class _Build:
    """A build directory read back from its files: metadata.json, NAME.o, NAME.c, NAME.h."""

    def __init__(self, path: Path):
        meta_path = path / "metadata.json"
        if not path.is_dir():
            raise OptionError(f"{path}: no such build directory")
        try:
            self.metadata = json.loads(meta_path.read_text())
            self.name = self.metadata["name"]
            self.inputs = [_spec(i, t) for i, t in enumerate(self.metadata["inputs"])]
            self.outputs = [_spec(i, t) for i, t in enumerate(self.metadata["outputs"])]
            workspace = self.metadata["workspace"]
        except FileNotFoundError:
            raise OptionError(f"{path}: not a build directory (it has no metadata.json; make one with aot build)") \
                from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise OptionError(f"{meta_path}: not the metadata.json of an aot build ({type(err).__name__}: {err})") \
                from None
        self.dir = path
        for f in (self.object, self.source, self.header):
            if not f.is_file():
                raise OptionError(f"{path}: the build lacks {f.name}")
        for f in (self.object, self.header):
            recorded = self.metadata.get("files", {}).get(f.name)
            if recorded and hashlib.sha256(f.read_bytes()).hexdigest() != recorded:
                raise OptionError(f"{path}: {f.name} is not the file metadata.json describes (the directory "
                                  "was changed after the build); build it again")
        macros = {m.group(1): int(m.group(2)) for m in
                  re.finditer(rf"^#define {re.escape(self.name.upper())}_(\w+) (\d+)u?\b", self.header.read_text(),
                              re.M)}
        self.workspace_size = int(workspace["size"])
        self.workspace_align = int(workspace["align"])
        self.regions = [dict(r) for r in workspace.get("regions", ())]
        if self.regions:
            self.blocks = [_Block(r["name"], int(r["size"]),
                                  macros.get(f"WORKSPACE_{r['name'].upper()}_ALIGN", self.workspace_align))
                           for r in self.regions]
        else:
            self.blocks = [_Block("", self.workspace_size, macros.get("WORKSPACE_ALIGN", self.workspace_align))]

    @property
    def object(self) -> Path:
        return self.dir / f"{self.name}.o"

    @property
    def source(self) -> Path:
        return self.dir / f"{self.name}.c"

    @property
    def header(self) -> Path:
        return self.dir / f"{self.name}.h"

    def tensors(self) -> tuple[list[wrapper.Tensor], list[wrapper.Tensor]]:
        """The inputs and outputs as the harness templates take them (runtime_c/)."""
        def tensor(role: str, s: TensorSpec) -> wrapper.Tensor:
            return wrapper.Tensor(role, s.index, s.name, s.c_name, f"{role.upper()}_{s.c_name.upper()}", s.dtype,
                                  wrapper._CTYPES[s.dtype], s.shape, int(np.prod(s.shape, dtype=np.int64)),
                                  s.bytes, s.scale, s.zero_point)
        return [tensor("input", s) for s in self.inputs], [tensor("output", s) for s in self.outputs]

    def workspace_blocks(self) -> list[wrapper.WorkspaceBlock]:
        return [wrapper.WorkspaceBlock(r["name"], f"WORKSPACE_{r['name'].upper()}", b.size, int(r["capacity"]),
                                       int(r["rank"]), b.align, r["section"], 0, int(r.get("weights", 0)))
                for r, b in zip(self.regions, self.blocks)]

    def render(self, template: str, banner: str, **extra: Any) -> str:
        inputs, outputs = self.tensors()
        return local.runtime_templates().get_template(template).render(
            banner=f"{banner} for {self.name}", name=self.name,
            NAME=self.name.upper(), inputs=inputs, outputs=outputs, workspace_align=self.workspace_align,
            regions=self.workspace_blocks(), **extra)


def _spec(index: int, t: dict) -> TensorSpec:
    return TensorSpec(index, t["name"], t["dtype"], tuple(int(d) for d in t["shape"]), t["c_name"], int(t["bytes"]),
                      t.get("scale"), t.get("zero_point"))


def _aligned(nbytes: int, align: int) -> np.ndarray:
    """A zeroed byte buffer of `nbytes` (at least 1) whose address is a multiple of `align`."""
    nbytes, align = max(nbytes, 1), max(align, 1)
    raw = np.zeros(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]       # the view keeps `raw` alive


class _Workspace:
    """One workspace: its blocks, and the pointer NAME_run takes (the block, or a NAME_workspaces)."""

    def __init__(self, build: _Build):
        self.blocks = [_aligned(b.size, b.align) for b in build.blocks]
        if build.regions:
            self.table = (ctypes.c_void_p * len(self.blocks))(*(b.ctypes.data for b in self.blocks))
            self.arg = ctypes.addressof(self.table)
        else:
            self.arg = self.blocks[0].ctypes.data


# Linked beside NAME.c into the shared library: NUMBER back-to-back runs between two clock reads, as the
# timing harness of `aot bench` does (runtime_c/timing.c.j2), so the figures agree with it.
_TIMER_C = """/* aot module timer for {name}: times NUMBER calls of {name}_run (aot/module.py). */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "{name}.h"

double aot_module_time(const {name}_inputs *in, {name}_outputs *out, void *workspace, long number);

double aot_module_time(const {name}_inputs *in, {name}_outputs *out, void *workspace, long number)
{{
    struct timespec start, end;
    long i;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (i = 0; i < number; i++)
        if ({name}_run(in, out, {workspace}) != {NAME}_OK)
            return -1.0;
    clock_gettime(CLOCK_MONOTONIC, &end);
    return (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
}}
"""


class _Native:
    """Runs the build in this process: a shared library called through ctypes."""

    def __init__(self, build: _Build, tgt: Target, tmp: Path):
        self.build, self.target = build, tgt
        if shutil.which(tgt.cc) is None:
            raise RunError(f"target {tgt.name}: C compiler '{tgt.cc}' not found (install the target's toolchain)")
        if tgt.reloc != "pic":
            raise RunError(f"target {tgt.name} compiles position-dependent code (reloc = \"{tgt.reloc}\"); a "
                           "shared library needs reloc = \"pic\"")
        name = build.name
        timer = tmp / "aot_module_timer.c"
        timer.write_text(_TIMER_C.format(name=name, NAME=name.upper(), workspace=(
            f"(const {name}_workspaces *)workspace" if build.regions else "workspace")))
        lib = tmp / f"lib{name}.so"
        cmd = local.link_command(tgt, [timer, build.source], [build.object], build.dir, lib)
        cmd[1:1] = ["-fPIC", "-shared", "-Wl,-Bsymbolic"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RunError(f"linking {name} into a shared library ({tgt.name}) failed:\n{proc.stderr.strip()}")
        try:
            self.lib = ctypes.CDLL(str(lib), mode=os.RTLD_LOCAL | os.RTLD_NOW)
            self._run = self.lib[f"{name}_run"]
            self._time = self.lib["aot_module_time"]
        except (OSError, AttributeError) as err:
            raise RunError(f"cannot load the shared library of {name}: {err}") from None
        self._run.argtypes = [ctypes.c_void_p] * 3
        self._run.restype = ctypes.c_int32
        # a model with state (TFLite variable tensors) runs every call from its reset state, as the harnesses do
        self._reset = getattr(self.lib, f"{name}_reset", None)
        if self._reset is not None:
            self._reset.argtypes = [ctypes.c_void_p]
            self._reset.restype = ctypes.c_int32
        self._time.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long]
        self._time.restype = ctypes.c_double
        self.handle = self.lib._handle
        self.where, self.emulated = "local", False

    def describe(self) -> str:
        return "in process"

    def workspace(self) -> _Workspace:
        return _Workspace(self.build)

    def _tables(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> tuple[ctypes.Array, ctypes.Array]:
        in_table = (ctypes.c_void_p * max(1, len(ins)))(*(a.ctypes.data for a in ins))
        out_table = (ctypes.c_void_p * max(1, len(outs)))(*(a.ctypes.data for a in outs))
        return in_table, out_table

    def call(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], ws: _Workspace) -> None:
        in_table, out_table = self._tables(ins, outs)
        rc = self._reset(ws.arg) if self._reset is not None else 0
        if rc == 0:
            rc = self._run(ctypes.addressof(in_table), ctypes.addressof(out_table), ws.arg)
        if rc != 0:
            raise RunError(f"{self.build.name}_run returned {rc} ({RETURN_CODES.get(rc, 'an unknown code')})")

    def time(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], ws: _Workspace, warmup: int,
             number: int, repeat: int, min_repeat_ms: float) -> tuple[list[float], int]:
        """time_evaluator's loop (as timing.c.j2's): per measurement, the mean ms of `number` runs, `number`
        scaled up until a measurement lasts `min_repeat_ms`. Returns the measurements and the final number."""
        for _ in range(warmup):
            self.call(ins, outs, ws)
        in_table, out_table = self._tables(ins, outs)
        min_ns, times = min_repeat_ms * 1e6, []
        for _ in range(repeat):
            while True:
                elapsed = self._time(ctypes.addressof(in_table), ctypes.addressof(out_table), ws.arg, number)
                if elapsed < 0:
                    self.call(ins, outs, ws)         # raises with the return code
                    raise RunError(f"{self.build.name}_run failed while timed")
                if elapsed >= min_ns or number > 1_000_000_000:
                    break
                number = int(number * (min_ns / elapsed) * 1.1) + 1 if elapsed > 0 else number * 2
            times.append(elapsed / number / 1e6)
        if self._reset is not None:     # the outputs left are those of a run from the reset state
            self.call(ins, outs, ws)
        return times, number


class _Harness:
    """Runs the build as a program: the C harness of `aot run` under the target's emulator (or natively),
    or on a board over SSH; one program run per call, in a directory of its own."""

    def __init__(self, build: _Build, tgt: Target, tmp: Path, board: Board | None, timeout: float,
                 accept_new_host_key: bool):
        self.build, self.target, self.tmp, self.board = build, tgt, tmp, board
        self.timeout, self.accept_new_host_key = timeout, accept_new_host_key
        if shutil.which(tgt.cc) is None:
            raise RunError(f"target {tgt.name}: C compiler '{tgt.cc}' not found (install the target's toolchain)")
        self.exe = self._compile("harness.c.j2", "run", "aot harness")
        if board is None:
            local.run_command(tgt, self.exe)        # the emulator is there, or the CPU runs it: else a RunError
            self.where, self.emulated = "local", bool(tgt.run_command)
        else:
            self.where, self.emulated = board.name, bool(board.runner)
        self._timing: Path | None = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        if self.board is not None:
            return f"on board {self.board.name} over SSH"
        return f"under {self.target.run_command[0]}" if self.target.run_command else "as a program"

    def _compile(self, template: str, sub: str, banner: str, **extra: Any) -> Path:
        work = self.tmp / sub
        work.mkdir(exist_ok=True)
        main = work / "main.c"
        main.write_text(self.build.render(template, banner, **extra))
        # run_on_board runs ./bench; locally, a bare-metal program is an ELF file for qemu-system
        exe = work / ("bench" if self.board is not None else "prog.elf" if self.target.os == "none" else "prog")
        local.link(self.target, [main, self.build.source], [self.build.object], self.build.dir, exe,
                   f"the {sub} harness for {self.build.name}")
        return exe

    def workspace(self) -> None:
        return None     # the program has its own

    def _execute(self, exe: Path, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray],
                 args: list[str]) -> str:
        from aot.bench import run_on_board

        name = self.build.name
        work = Path(tempfile.mkdtemp(prefix="call-", dir=self.tmp))
        try:
            files = [exe]
            for i, array in enumerate(ins):
                files.append(work / f"input_{i}.bin")
                array.tofile(files[-1])
            out_names = [f"output_{i}.bin" for i in range(len(outs))]
            if self.board is None:
                stdout = local.execute(self.target, exe, work, self.timeout, name, args).stdout
            else:
                stdout = run_on_board(self.board, files, args, out_names, work, self.timeout,
                                      self.accept_new_host_key, name)
            for spec, out, fname in zip(self.build.outputs, outs, out_names):
                path = work / fname
                if not path.exists() or path.stat().st_size != out.nbytes:
                    raise RunError(f"{name} on {self.where}: output '{spec.name}' was not written completely")
                np.copyto(out, np.fromfile(path, dtype=out.dtype).reshape(out.shape))
            return stdout
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def call(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], ws: None) -> None:
        self._execute(self.exe, ins, outs, [])

    def time(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], ws: None, warmup: int, number: int,
             repeat: int, min_repeat_ms: float) -> tuple[list[float], int]:
        from aot.bench import _parse_times

        if self.target.os == "none":
            raise RunError(f"target {self.target.name}: the semihosting harness under qemu has no clock; load the "
                           "build with board= a microcontroller board (qemu-m4-uart, qemu-m55-uart, or a real one)")
        with self._lock:
            if self._timing is None:
                self._timing = self._compile("timing.c.j2", "timing", "aot timing harness", profile=False)
        stdout = self._execute(self._timing, ins, outs, [str(warmup), str(number), str(repeat),
                                                         f"{min_repeat_ms:g}"])
        return _parse_times(stdout)


class _Device:
    """Runs the build on a microcontroller board (aot/device/): one firmware image per call, with the
    inputs compiled in, loaded and run through the board's loader and console."""

    def __init__(self, build: _Build, tgt: Target, board: DeviceBoard, timeout: float, accept_new_host_key: bool):
        from aot.device.firmware import Build

        inputs, outputs = build.tensors()
        self.files = Build(build.name, tgt, build.dir, build.source, build.object, inputs, outputs,
                           build.workspace_align, build.workspace_blocks())
        self.build, self.board, self.timeout, self.accept_new_host_key = build, board, timeout, accept_new_host_key
        self.where, self.emulated = board.name, board.emulated

    def describe(self) -> str:
        return f"on microcontroller board {self.board.name} (loaded with {self.board.loader.tool})"

    def workspace(self) -> None:
        return None     # the firmware has its own

    def _run(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], warmup: int, laps: int):
        from aot.device.run import run_on_board

        feeds = {t.onnx_name: array for t, array in zip(self.files.inputs, ins)}
        run = run_on_board(self.files, self.board, feeds, warmup, laps, self.timeout,
                           accept_new_host_key=self.accept_new_host_key)
        for t, out in zip(self.files.outputs, outs):
            np.copyto(out, run.outputs[t.onnx_name])
        return run

    def call(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], ws: None) -> None:
        self._run(ins, outs, 0, 1)

    def bench(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], warmup: int, repeat: int) -> BenchResult:
        from aot.bench import BenchResult, device_figures

        figures = device_figures(self._run(ins, outs, warmup, repeat), self.board)
        model = self.build.metadata.get("model", {})
        return BenchResult.on_device(model.get("file", self.build.name), model.get("sha256", ""), self.board,
                                     self.files.target.name, figures)


def _release(tmp: str, handle: int | None) -> None:
    """Unload the library (if any) and remove the module's directory. Runs once: on close() or collection."""
    if handle is not None:
        try:
            import _ctypes

            _ctypes.dlclose(handle)
        except (ImportError, OSError, AttributeError):
            pass
    shutil.rmtree(tmp, ignore_errors=True)


class Module:
    """A loaded build (see the module docstring): made by aot.load and aot.compile."""

    def __init__(self, build: _Build, tgt: Target, board: Board | DeviceBoard | None, tmp: Path, timeout: float,
                 accept_new_host_key: bool, owned: Path | None = None):
        """`tmp`: the module's directory for its library or harnesses; `owned` (default `tmp`), the
        directory it removes when closed (or if this fails)."""
        self._build, self.target, self.board = build, tgt, board
        owned = owned or tmp
        try:
            if board is None and _runs_here(tgt):
                self._runner: _Native | _Harness | _Device = _Native(build, tgt, tmp)
            elif isinstance(board, DeviceBoard):
                self._runner = _Device(build, tgt, board, timeout, accept_new_host_key)
            else:
                self._runner = _Harness(build, tgt, tmp, board, timeout, accept_new_host_key)
        except BaseException:
            shutil.rmtree(owned, ignore_errors=True)
            raise
        self._finalizer = weakref.finalize(self, _release, str(owned), getattr(self._runner, "handle", None))
        self._lock = threading.Lock()          # the module's own inputs, outputs and workspace
        self._ins = [np.zeros(s.shape, s.np_dtype) for s in build.inputs]
        self._outs = [np.zeros(s.shape, s.np_dtype) for s in build.outputs]
        self._ws = self._runner.workspace()
        self._ran = False
        self._local = threading.local()        # each thread's workspace for __call__
        self._state = threading.Condition()    # calls in flight, which close() waits for
        self._busy = 0
        self._closed = False

    # --- what the build is

    @property
    def name(self) -> str:
        """The model's C name: the prefix of NAME_run and of the header's macros."""
        return self._build.name

    @property
    def dir(self) -> Path:
        """The build directory."""
        return self._build.dir

    @property
    def inputs(self) -> list[TensorSpec]:
        return list(self._build.inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        return list(self._build.outputs)

    @property
    def workspace_size(self) -> int:
        """Bytes of scratch memory one run needs (over all memory regions, if the target has several)."""
        return self._build.workspace_size

    @property
    def metadata(self) -> dict:
        """The build's metadata.json (a copy)."""
        return copy.deepcopy(self._build.metadata)

    @property
    def emulated(self) -> bool:
        return self._runner.emulated

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.describe()}" for s in self._build.inputs)
        outs = ", ".join(f"{s.name}: {s.describe()}" for s in self._build.outputs)
        state = "closed" if self._closed else self._runner.describe()
        return f"<aot.Module {self.name} for {self.target.name}, {state}; inputs {ins}; outputs {outs}>"

    # --- the stateful API (the module's own buffers, under its lock)

    def set_input(self, key: str | int, value: Any) -> None:
        """Copy `value` into the module's input `key` (an ONNX input name or an index)."""
        spec = self._input_spec(key)
        array = self._checked(spec, value)
        with self._using(), self._lock:
            np.copyto(self._ins[spec.index], array)

    def run(self, feeds: dict[str, Any] | None = None, /, **inputs: Any) -> list[np.ndarray]:
        """Run the model on the module's inputs, after setting those given (by name, in `feeds` or as
        keywords). Returns copies of the outputs, in graph order; get_output reads them too."""
        given = {**(feeds or {}), **inputs}
        checked = [(self._input_spec(k), v) for k, v in given.items()]
        checked = [(spec, self._checked(spec, v)) for spec, v in checked]
        with self._using(), self._lock:
            for spec, array in checked:
                np.copyto(self._ins[spec.index], array)
            self._runner.call(self._ins, self._outs, self._ws)
            self._ran = True
            return [out.copy() for out in self._outs]

    def get_output(self, key: str | int) -> np.ndarray:
        """A copy of output `key` (an ONNX output name or an index) of the last run() or benchmark()."""
        spec = self._lookup(self._build.outputs, key, "output")
        with self._using(), self._lock:
            if not self._ran:
                raise OptionError(f"{self.name}: no output yet: call run() first")
            return self._outs[spec.index].copy()

    # --- the thread-safe path

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run on the inputs given, positionally in the model's order and/or by name; every input is
        needed. Returns fresh output arrays in graph order. Safe to call from several threads at once:
        it touches no state of the module's (its workspace is the calling thread's)."""
        specs = self._build.inputs
        if len(args) > len(specs):
            raise OptionError(f"{self.name}: {len(args)} inputs given, the model has {len(specs)} "
                              f"({', '.join(s.name for s in specs) or 'none'})")
        given: dict[int, Any] = dict(enumerate(args))
        for key, value in kwargs.items():
            spec = self._input_spec(key)
            if spec.index in given:
                raise OptionError(f"{self.name}: input '{spec.name}' is given twice")
            given[spec.index] = value
        missing = [s.name for s in specs if s.index not in given]
        if missing:
            raise OptionError(f"{self.name}: no value given for input{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(repr(m) for m in missing)} (the model's inputs: "
                              f"{', '.join(f'{s.name!r} {s.describe()}' for s in specs)})")
        ins: list[np.ndarray] = []
        for spec in specs:
            array = np.require(self._checked(spec, given[spec.index]), requirements=["C_CONTIGUOUS", "ALIGNED"])
            if any(np.may_share_memory(array, other) for other in ins):
                array = array.copy()     # NAME_run's tensors must not overlap
            ins.append(array)
        outs = [np.empty(s.shape, s.np_dtype) for s in self._build.outputs]
        with self._using():
            ws = getattr(self._local, "workspace", None)
            if ws is None:
                ws = self._local.workspace = self._runner.workspace()
            self._runner.call(ins, outs, ws)
        return outs

    call = __call__

    # --- timing

    def benchmark(self, repeat: int = 10, number: int = 0, min_repeat_ms: float = 0.0,
                  warmup: int = 1) -> BenchResult:
        """Time NAME_run on the module's inputs (set_input; zeros where never set) with TVM time_evaluator's
        semantics, as `aot bench` does: `warmup` untimed runs, then `repeat` measurements, each the mean of
        `number` back-to-back runs (0: start from 1), `number` raised until a measurement lasts at least
        `min_repeat_ms`. Returns an aot.bench.BenchResult (times_ms, stats in ms, the final number; no
        comparisons); get_output then reads the last run's outputs. Under an emulator the figures are the
        emulator's (result.emulated)."""
        from aot.bench import BenchResult, Stats

        for what, value, low in (("repeat", repeat, 1), ("number", number, 0), ("warmup", warmup, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise OptionError(f"benchmark: {what} must be an integer >= {low}, not {value!r}")
        if isinstance(min_repeat_ms, bool) or not isinstance(min_repeat_ms, (int, float)) or not min_repeat_ms >= 0:
            raise OptionError(f"benchmark: min_repeat_ms must be a number >= 0, not {min_repeat_ms!r}")
        if isinstance(self._runner, _Device):
            with self._using(), self._lock:
                result = self._runner.bench(self._ins, self._outs, int(warmup), int(repeat))
                self._ran = True
            return result
        with self._using(), self._lock:
            times, final = self._runner.time(self._ins, self._outs, self._ws, int(warmup), max(1, int(number)),
                                             int(repeat), float(min_repeat_ms))
            self._ran = True
        model = self._build.metadata.get("model", {})
        return BenchResult(model.get("file", self.name), model.get("sha256", ""), self._runner.where,
                           self.target.name, self._runner.emulated, final, times, Stats.of(times))

    # --- lifetime

    def close(self) -> None:
        """Wait for calls in flight, unload the library and remove the module's temporary directory."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            self._state.wait_for(lambda: self._busy == 0)
        self._ws = None
        self._local = threading.local()
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _using(self) -> Iterator[None]:
        with self._state:
            if self._closed:
                raise OptionError(f"module {self.name} is closed")
            self._busy += 1
        try:
            yield
        finally:
            with self._state:
                self._busy -= 1
                self._state.notify_all()

    # --- inputs

    def _lookup(self, specs: list[TensorSpec], key: str | int, role: str) -> TensorSpec:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= key < len(specs):
                return specs[key]
            raise OptionError(f"{self.name}: no {role} {key} (the model has {len(specs)} {role}s)")
        for spec in specs:
            if spec.name == key:
                return spec
        raise OptionError(f"{self.name}: no {role} named {key!r} (its {role}s: "
                          f"{', '.join(repr(s.name) for s in specs) or 'none'})")

    def _input_spec(self, key: str | int) -> TensorSpec:
        return self._lookup(self._build.inputs, key, "input")

    def _checked(self, spec: TensorSpec, value: Any) -> np.ndarray:
        """`value` as an array, if it has the input's dtype and shape; an OptionError saying what differs."""
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as err:
            raise OptionError(f"{self.name}: input '{spec.name}' is not an array ({err}); the model expects "
                              f"{spec.describe()}") from None
        if array.dtype != spec.np_dtype:
            raise OptionError(f"{self.name}: input '{spec.name}' has dtype {array.dtype}, the model expects "
                              f"{spec.dtype} (shape {list(spec.shape)}); convert it, e.g. x.astype(np.{spec.dtype})")
        if array.shape != spec.shape:
            raise OptionError(f"{self.name}: input '{spec.name}' has shape {list(array.shape)}, the model expects "
                              f"{list(spec.shape)} ({spec.dtype}, the model's layout)")
        return array


def _runs_here(tgt: Target) -> bool:
    """True if this process can call the target's code: a Linux target this CPU runs without an emulator."""
    return (tgt.os != "none" and not tgt.run_command and tgt.triple.split("-")[0] == platform.machine()
            and tgt.runs_natively())


def _resolve(build: _Build, target: str | Target | None, board: str | Board | DeviceBoard | None,
             target_dirs: Sequence[str | os.PathLike], board_dirs: Sequence[str | os.PathLike]
             ) -> tuple[Target, Board | DeviceBoard | None]:
    """The target to link and run the build with: `target`, the board's, or the one metadata.json names."""
    import dataclasses

    from aot.boards import load_board

    recorded = build.metadata.get("target", {})
    brd = load_board(board, board_dirs) if isinstance(board, str) else board
    name = target if target is not None else brd.target if brd is not None else recorded.get("name")
    try:
        tgt = get_target(name, target_dirs)
    except TargetError as err:
        if target is not None:
            raise
        raise TargetError(f"{build.dir}: built for target '{name}', which is not found: {err} (pass target=, "
                          "a name or a .toml file)") from None
    if brd is not None and not isinstance(brd, DeviceBoard) and brd.regions:
        tgt = dataclasses.replace(tgt, regions=brd.regions)
    if recorded.get("triple") and tgt.triple != recorded["triple"]:
        via = f"board {brd.name}'s target" if brd is not None and target is None else "target"
        raise OptionError(f"{build.dir}: built for {recorded.get('name')} ({recorded['triple']}), but {via} "
                          f"{tgt.name} is {tgt.triple}; build it for {tgt.name}")
    return tgt, brd


def load(path: str | os.PathLike | Artifact, target: str | Target | None = None,
         board: str | Board | DeviceBoard | None = None,
         target_dirs: Sequence[str | os.PathLike] = (), board_dirs: Sequence[str | os.PathLike] = (),
         timeout: float = 600.0, accept_new_host_key: bool = False) -> Module:
    """Load a build directory (or an Artifact of aot.build) as a Module.

    The target is the one metadata.json names (`target` overrides it, e.g. a .toml file the build used),
    or the board's (`board`: a board name or file, looked up in `board_dirs`); either must have the
    build's triple. A target this machine runs is linked into a shared library and called in process;
    any other runs under its emulator, or on the board over SSH, one harness run per call. `timeout`
    (seconds) bounds each such run. Close the module (or use it in a `with` block) to remove its files."""
    from aot.build import Artifact

    if isinstance(path, Artifact):
        target = path.target if target is None and board is None else target
        path = path.dir
    build = _Build(Path(path))
    tgt, brd = _resolve(build, target, board, target_dirs, board_dirs)
    tmp = Path(tempfile.mkdtemp(prefix=f"aot-module-{build.name}-"))
    return Module(build, tgt, brd, tmp, timeout, accept_new_host_key)


def compile(model: str | os.PathLike | onnx.ModelProto, target: str | Target = "host",  # noqa: A001
            board: str | Board | DeviceBoard | None = None, target_dirs: Sequence[str | os.PathLike] = (),
            board_dirs: Sequence[str | os.PathLike] = (), timeout: float = 600.0, accept_new_host_key: bool = False,
            **build_options: Any) -> Module:
    """Build `model` for `target` (or `board`'s target) into a temporary directory the module owns, and
    load it (see load). `build_options` are aot.build's: name, input_shapes, knobs, memory, freeze,
    records, tflite_arithmetic; out_dir keeps the build there instead (the module then owns only its library)."""
    import dataclasses

    from aot.boards import load_board
    from aot.build import build

    brd = load_board(board, board_dirs) if isinstance(board, str) else board
    tgt = get_target(brd.target if brd is not None else target, target_dirs)
    if brd is not None and not isinstance(brd, DeviceBoard) and brd.regions:
        tgt = dataclasses.replace(tgt, regions=brd.regions)
    if isinstance(brd, DeviceBoard):       # a microcontroller's flash and RAM bound the build
        build_options["memory"] = brd.build_memory(build_options.get("memory"))
    work = Path(tempfile.mkdtemp(prefix="aot-compile-"))
    try:
        out_dir = build_options.pop("out_dir", None) or work / "build"
        artifact = build(model, target=tgt, out_dir=out_dir, **build_options)
        built = _Build(artifact.dir)
        tmp = work / "module"
        tmp.mkdir()
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    # the module owns the whole directory, the build as well as its library (and removes it if this fails)
    return Module(built, tgt, brd, tmp, timeout, accept_new_host_key, owned=work)
