"""Run a build on a microcontroller board: link the firmware, load and start it, and over its console run
the model, collect each timed run's ticks and the outputs, then stop what was started.

Under qemu (the `qemu` loader) the counters count instructions, one per virtual nanosecond; with
`count` the model's kernels' instructions are also counted exactly by the plugin `aot run` counts with
(aot/run/count.py), over all runs, so the figure per run equals what `aot run --target` reports.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.device.board import DeviceBoard
from aot.device.console import Console, Timer, open_serial
from aot.device.firmware import Build, build_firmware
from aot.device.loaders import started
from aot.errors import RunError
from aot.run.count import build_plugin, kernel_range

HANDSHAKE_S = 20.0


@dataclass(frozen=True)
class DeviceRun:
    outputs: dict[str, np.ndarray]      # by ONNX name, from the last run
    laps: list[int]                     # timer ticks of each timed run
    timer: Timer
    kernel_instructions: int | None     # per run, counted by qemu's plugin (`count` under the qemu loader)


def run_on_board(artifact: Artifact | Build, board: DeviceBoard, inputs: dict[str, np.ndarray], warmup: int = 1,
                 laps: int = 10, timeout: float = 600.0, count: bool = False,
                 accept_new_host_key: bool = False) -> DeviceRun:
    """Run `artifact` on `board` with `inputs` (by ONNX name): `warmup` untimed runs, then `laps` timed ones.
    `timeout` is how long the device may stay silent."""
    if laps < 1 or warmup < 0:
        raise RunError(f"board {board.name}: need at least one timed run and no negative warm-up")
    artifact = Build.of(artifact)
    outs = artifact.outputs
    what = f"{artifact.name} on board {board.name}"
    with tempfile.TemporaryDirectory(prefix="aot-device-") as tmp:
        work = Path(tmp)
        elf = build_firmware(artifact, board, inputs, work)
        plugin: tuple[str, ...] = ()
        counting = count and board.emulated and board.ssh is None
        if counting:
            lo, hi = kernel_range(elf, artifact.name)
            plugin = ("-plugin", f"{build_plugin(work)},lo={lo:#x},hi={hi:#x}", "-d", "plugin")
        with started(board, elf, plugin, accept_new_host_key) as running:
            port = open_serial(running.url, board.console.baud, what)
            try:
                console = Console(port, what, timeout)
                timer = console.handshake(artifact.name, min(timeout, HANDSHAKE_S))
                reply = console.run(warmup, laps, len(outs))
                if board.emulated:
                    console.send("exit")
            finally:
                port.close()
            log = running.finish(timeout) if board.emulated else ""
    outputs = _outputs(artifact, reply, what)
    instructions = None
    if counting:
        found = re.findall(r"^insns: (\d+)$", log, re.M)
        if len(found) != 1:
            raise RunError(f"{what}: qemu printed no instruction count: {log.strip()[-200:]}")
        total, runs = int(found[0]), warmup + laps
        if total % runs:
            raise RunError(f"{what}: the kernels executed {total} instructions in {runs} runs, which is not the "
                           "same number each run")
        instructions = total // runs
    return DeviceRun(outputs, reply.laps, timer, instructions)


def run_samples_on_board(artifact: Artifact | Build, board: DeviceBoard, samples: Iterable[dict[str, np.ndarray]],
                         timeout: float = 600.0, accept_new_host_key: bool = False,
                         on_sample: Callable[[int], None] | None = None) -> list[dict[str, np.ndarray]]:
    """Run `artifact` on `board` once for each of `samples` (inputs by ONNX name), flashing it once: each
    sample's inputs are sent over the console to a loadable harness, then the model runs and its outputs come
    back. `on_sample(i)` is called as each is done."""
    artifact = Build.of(artifact)
    what = f"{artifact.name} on board {board.name}"
    results = []
    with tempfile.TemporaryDirectory(prefix="aot-device-") as tmp:
        elf = build_firmware(artifact, board, None, Path(tmp))
        with started(board, elf, (), accept_new_host_key) as running:
            port = open_serial(running.url, board.console.baud, what)
            try:
                console = Console(port, what, timeout)
                console.handshake(artifact.name, min(timeout, HANDSHAKE_S))
                for i, sample in enumerate(samples):
                    for t in artifact.inputs:
                        data = np.ascontiguousarray(np.asarray(sample[t.onnx_name], dtype=t.dtype).reshape(t.shape))
                        console.load(t.index, data.tobytes())
                    results.append(_outputs(artifact, console.run(0, 1, len(artifact.outputs)), what))
                    if on_sample:
                        on_sample(i)
                if board.emulated:
                    console.send("exit")
            finally:
                port.close()
            if board.emulated:
                running.finish(timeout)
    return results


def _outputs(artifact: Build, reply, what: str) -> dict[str, np.ndarray]:
    outputs = {}
    for t in artifact.outputs:
        data = reply.outputs[t.index]
        if len(data) != t.bytes:
            raise RunError(f"{what}: output '{t.onnx_name}' has {len(data)} bytes, expected {t.bytes}")
        outputs[t.onnx_name] = np.frombuffer(data, dtype=t.dtype).reshape(t.shape).copy()
    return outputs
