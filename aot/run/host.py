"""Run a build on this machine: render the harness from runtime_c/, compile it with the target's C
compiler against the generated wrapper and object, and run it as a separate process."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jinja2
import numpy as np

from aot.build import Artifact
from aot.codegen import wrapper
from aot.errors import RunError

RUNTIME_DIR = Path(__file__).resolve().parent.parent.parent / "runtime_c"
STRICT_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")


def render_harness(artifact: Artifact) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(RUNTIME_DIR), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    inputs, outputs = wrapper.io_tensors(artifact.program)
    name = artifact.name
    return env.get_template("host_main.c.j2").render(
        banner=f"aot harness for {name}", name=name, NAME=name.upper(), inputs=inputs, outputs=outputs,
        workspace_align=artifact.program.plan.alignment)


def compile_harness(artifact: Artifact, workdir: Path) -> Path:
    tgt = artifact.target
    if shutil.which(tgt.cc) is None:
        raise RunError(f"target {tgt.name}: C compiler '{tgt.cc}' not found")
    main = workdir / "main.c"
    main.write_text(render_harness(artifact))
    exe = workdir / "prog"
    cmd = [tgt.cc, *STRICT_CFLAGS, *tgt.cflags, f"-I{artifact.dir}", str(main), str(artifact.source),
           str(artifact.object), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(f"compiling the harness for {artifact.name} failed:\n{proc.stderr.strip()}")
    return exe


def run(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 300.0) -> dict[str, np.ndarray]:
    """Feed `inputs` (by ONNX name) to the compiled model; return its outputs by ONNX name."""
    tgt = artifact.target
    if not tgt.runs_natively():
        raise RunError(f"target {tgt.name} needs CPU features {', '.join(tgt.cpu_flags)}, which this machine "
                       "lacks; build for a target it can run (see `aot targets`)")
    ins, outs = wrapper.io_tensors(artifact.program)
    with tempfile.TemporaryDirectory(prefix="aot-run-") as tmp:
        work = Path(tmp)
        exe = compile_harness(artifact, work)
        args = [str(exe)]
        for t in ins:
            path = work / f"in{t.index}.bin"
            np.ascontiguousarray(inputs[t.onnx_name], dtype=t.dtype).reshape(t.shape).tofile(path)
            args.append(str(path))
        out_paths = [work / f"out{t.index}.bin" for t in outs]
        args += [str(p) for p in out_paths]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
        except subprocess.TimeoutExpired:
            raise RunError(f"{artifact.name}: the compiled model did not finish within {timeout:g} s") from None
        if proc.returncode != 0:
            what = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0
                    else f"exited with status {proc.returncode}")
            raise RunError(f"{artifact.name}: the compiled model {what}: {proc.stderr.strip()}")
        return {t.onnx_name: np.fromfile(p, dtype=t.dtype).reshape(t.shape) for t, p in zip(outs, out_paths)}
