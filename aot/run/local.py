"""Run a build on this machine: natively, or under the target's emulator (qemu-user for Linux
targets, qemu-system-arm with semihosting for bare-metal boards).

The harness (runtime_c/harness.c.j2) is compiled with the target's C compiler against the generated
wrapper and object; inputs and outputs cross as raw files in the program's working directory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import jinja2
import numpy as np

from aot.build import Artifact
from aot.codegen import wrapper
from aot.data import runtime_files, shipped
from aot.errors import RunError
from aot.target import Target

STRICT_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")
EXIT_MEANING = {2: "could not read its inputs or write its outputs", 3: "faulted (a bad memory access or "
                "an illegal instruction)", 4: "returned an error code"}


def _runtime_template(name: str) -> str:
    return shipped("runtime_c", *name.split("/")).read_text()


def runtime_templates() -> jinja2.Environment:
    """The harness templates in runtime_c/."""
    return jinja2.Environment(loader=jinja2.FunctionLoader(_runtime_template), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


def render_harness(artifact: Artifact) -> str:
    env = runtime_templates()
    inputs, outputs = wrapper.io_tensors(artifact.program)
    name = artifact.name
    return env.get_template("harness.c.j2").render(
        banner=f"aot harness for {name}", name=name, NAME=name.upper(), inputs=inputs, outputs=outputs,
        workspace_align=artifact.program.plan.alignment, regions=wrapper.workspace_blocks(artifact.program))


def link_command(tgt: Target, sources: list[Path], objects: list[Path], include: Path, exe: Path,
                 defines: tuple[str, ...] = (), baremetal: tuple[Path, Path] | None = None) -> list[str]:
    """The target compiler's command line that builds a program from C sources and the model object.
    A bare-metal target also needs `baremetal`, its startup code and linker script (see `link`)."""
    cmd = [tgt.cc, *STRICT_CFLAGS, *tgt.cflags, *(f"-D{d}" for d in defines), f"-I{include}"]
    if tgt.os == "none":
        if baremetal is None:
            raise ValueError(f"target {tgt.name} is bare metal: link_command needs its startup code and linker script")
        startup, script = baremetal
        cmd += [str(startup), "-T", str(script)]
    cmd += [*map(str, sources), *map(str, objects), *tgt.ldflags, "-o", str(exe)]
    return cmd


def link(tgt: Target, sources: list[Path], objects: list[Path], include: Path, exe: Path, what: str,
         defines: tuple[str, ...] = (), static: bool = False) -> None:
    """Build the program `exe` (`what`, for the error message) with the target's compiler; bare metal with
    the shipped startup code and the target's linker script (shipped, or a user's beside its target file).
    `static` makes a Linux program's addresses fixed."""
    own_script = Path(tgt.linker_script).is_absolute()
    names: tuple[str, ...] = ()
    if tgt.os == "none":
        names = ("baremetal/startup.c",) + (() if own_script else (f"baremetal/{tgt.linker_script}",))
    with runtime_files(*names) as paths:
        baremetal = None
        if paths:
            baremetal = (paths[0], Path(tgt.linker_script) if own_script else paths[1])
        cmd = link_command(tgt, sources, objects, include, exe, defines, baremetal)
        if static and tgt.os != "none":
            cmd.insert(-2, "-static")
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        overflow = re.search(r"region `?([^' ]+)'? overflowed by (\d+) bytes", proc.stderr)
        if overflow and tgt.os == "none":
            script = tgt.linker_script if own_script else f"aot's {tgt.linker_script}"
            raise RunError(f"compiling {what} ({tgt.name}) failed: the program does not fit the memory its linker "
                           f"script ({script}) gives the emulated board: region {overflow[1]} overflowed by "
                           f"{int(overflow[2]):,} bytes (a --memory limit above the board's own lets the build "
                           f"through but not the link)\n{proc.stderr.strip()}")
        raise RunError(f"compiling {what} ({tgt.name}) failed:\n{proc.stderr.strip()}")


def compile_harness(artifact: Artifact, workdir: Path, static: bool = False) -> Path:
    """Link the I/O harness with the build; `static` makes a Linux program's addresses fixed."""
    tgt = artifact.target
    if shutil.which(tgt.cc) is None:
        raise RunError(f"target {tgt.name}: C compiler '{tgt.cc}' not found (install the target's toolchain)")
    main = workdir / "main.c"
    main.write_text(render_harness(artifact))
    exe = workdir / ("prog.elf" if tgt.os == "none" else "prog")
    link(tgt, [main, artifact.source], [artifact.object], artifact.dir, exe, f"the harness for {artifact.name}",
         static=static)
    return exe


def run_command(tgt: Target, exe: Path, emulator_options: tuple[str, ...] = ()) -> list[str]:
    """How to start `exe`: natively, or under the target's emulator with `emulator_options` added."""
    if tgt.run_command:
        if shutil.which(tgt.run_command[0]) is None:
            raise RunError(f"target {tgt.name}: emulator '{tgt.run_command[0]}' not found")
        return [tgt.run_command[0], *emulator_options, *tgt.run_command[1:], str(exe)]
    if not tgt.runs_natively():
        raise RunError(f"target {tgt.name} cannot run on this machine (it needs CPU features "
                       f"{', '.join(tgt.cpu_flags)}); build for a target it can run (see `aot targets`)")
    return [str(exe)]


def execute(tgt: Target, exe: Path, workdir: Path, timeout: float, what: str,
            args: list[str] | None = None, emulator_options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run a program built for `tgt` in `workdir`; a crash, hang or non-zero exit raises a RunError."""
    try:
        proc = subprocess.run(run_command(tgt, exe, emulator_options) + list(args or []), cwd=workdir,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RunError(f"{what} on {tgt.name}: the program did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        if proc.returncode < 0:
            status = f"was killed by signal {-proc.returncode}"
        else:
            status = f"exited with status {proc.returncode}"
            if proc.returncode in EXIT_MEANING:
                status += f" ({EXIT_MEANING[proc.returncode]})"
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise RunError(f"{what} on {tgt.name}: the program {status}" + (f": {detail[-1]}" if detail else ""))
    return proc


def run(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0) -> dict[str, np.ndarray]:
    """Feed `inputs` (by ONNX name) to the compiled model; return its outputs by ONNX name."""
    return run_program(artifact, inputs, timeout)[0]


def run_samples(artifact: Artifact, samples: Iterable[dict[str, np.ndarray]], timeout: float = 600.0,
                on_sample: Callable[[int], None] | None = None) -> list[dict[str, np.ndarray]]:
    """Run the model once for each of `samples` (inputs by ONNX name) through one compiled harness; the
    outputs of each. `on_sample(i)` is called as each is done."""
    tgt = artifact.target
    ins, outs = wrapper.io_tensors(artifact.program)
    results = []
    with tempfile.TemporaryDirectory(prefix="aot-run-") as tmp:
        work = Path(tmp)
        exe = compile_harness(artifact, work)
        for i, inputs in enumerate(samples):
            write_inputs(ins, inputs, work)
            for t in outs:
                (work / f"output_{t.index}.bin").unlink(missing_ok=True)
            execute(tgt, exe, work, timeout, artifact.name)
            results.append(read_outputs(artifact, outs, work))
            if on_sample:
                on_sample(i)
    return results


def write_inputs(ins, inputs: dict[str, np.ndarray], work: Path) -> list[Path]:
    """The inputs (by ONNX name) as the harness reads them: work/input_<i>.bin, raw, in the model's dtype."""
    paths = []
    for t in ins:
        path = work / f"input_{t.index}.bin"
        np.ascontiguousarray(inputs[t.onnx_name], dtype=t.dtype).reshape(t.shape).tofile(path)
        paths.append(path)
    return paths


def read_outputs(artifact: Artifact, outs, work: Path) -> dict[str, np.ndarray]:
    """What the harness wrote: work/output_<i>.bin, each checked whole."""
    results = {}
    for t in outs:
        path = work / f"output_{t.index}.bin"
        if not path.exists() or path.stat().st_size != t.bytes:
            raise RunError(f"{artifact.name} on {artifact.target.name}: output '{t.onnx_name}' was not written "
                           "completely")
        results[t.onnx_name] = np.fromfile(path, dtype=t.dtype).reshape(t.shape)
    return results


def run_program(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0, static: bool = False,
                instrument: Callable[[Path, Path], tuple[str, ...]] | None = None,
                collect: Callable[[Path], None] | None = None
                ) -> tuple[dict[str, np.ndarray], subprocess.CompletedProcess]:
    """Run the model once through the harness: its outputs by ONNX name, and the finished process.
    `instrument(exe, workdir)` gives options for the target's emulator; `collect(workdir)` reads what
    they made there before the directory goes."""
    tgt = artifact.target
    ins, outs = wrapper.io_tensors(artifact.program)
    with tempfile.TemporaryDirectory(prefix="aot-run-") as tmp:
        work = Path(tmp)
        exe = compile_harness(artifact, work, static)
        write_inputs(ins, inputs, work)
        options = instrument(exe, work) if instrument else ()
        proc = execute(tgt, exe, work, timeout, artifact.name, emulator_options=options)
        if collect is not None:
            collect(work)
        return read_outputs(artifact, outs, work), proc
