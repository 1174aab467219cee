"""Run a build on a Linux board over SSH once for each of many samples: the I/O harness (runtime_c/harness.c.j2)
linked statically for the board's target, uploaded once into a fresh directory there, then for each sample its
inputs uploaded, the harness run under the board's prefix (env, CPU pinning, runner) and its outputs fetched."""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.codegen import wrapper
from aot.errors import RunError
from aot.remote.board import Board
from aot.remote.ssh import Session
from aot.run import local


def run_samples_on_linux_board(artifact: Artifact, board: Board, samples: Iterable[dict[str, np.ndarray]],
                               timeout: float = 600.0, accept_new_host_key: bool = False,
                               on_sample: Callable[[int], None] | None = None) -> list[dict[str, np.ndarray]]:
    """The outputs of `artifact` on `board` for each of `samples` (inputs by ONNX name); `on_sample(i)` as each
    is done."""
    ins, outs = wrapper.io_tensors(artifact.program)
    what = f"{artifact.name} on board {board.name}"
    results = []
    with tempfile.TemporaryDirectory(prefix="aot-remote-") as tmp, Session(board, accept_new_host_key) as session:
        work = Path(tmp)
        exe = local.compile_harness(artifact, work, static=True)
        remote = session.make_remote_dir()
        session.upload([exe])
        command = " ".join(shlex.quote(part) for part in [*board.command_prefix(), f"./{exe.name}"])
        for i, sample in enumerate(samples):
            session.upload(local.write_inputs(ins, sample, work))
            rc, stdout, stderr = session.run(f"cd {shlex.quote(remote)} && {command}", timeout)
            if rc != 0:
                detail = (stderr.strip() or stdout.strip()).splitlines()
                raise RunError(f"{what}: the harness exited with status {rc} on sample {i}"
                               + (f": {detail[-1]}" if detail else ""))
            session.download([f"output_{t.index}.bin" for t in outs], work)
            results.append(local.read_outputs(artifact, outs, work))
            if on_sample:
                on_sample(i)
    return results
