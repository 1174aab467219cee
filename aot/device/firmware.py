"""The firmware image for a microcontroller board: the build's object and wrapper, the device harness
with the inputs compiled in, or loadable over the console (runtime_c/device/harness.c.j2), the start-up
code, the board's support sources, linked by the target's compiler with the board's linker script
(device.ld.j2 from its [flash] and [ram], or its own)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.codegen import wrapper
from aot.data import runtime_files
from aot.device.board import DeviceBoard
from aot.errors import RunError
from aot.run import local
from aot.target import Target

TIMER_CODES = {"systick": 0, "dwt": 1, "pmu": 2}
DEVICE_LDFLAGS = ("-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections",
                  "-Wl,-z,noexecstack", "-lm")
_PER_LINE = 8


def c_values(array: np.ndarray) -> str:
    """An array's elements as a C initializer, exactly (floats in hexadecimal)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype == np.float32:
        def literal(v: float) -> str:
            if np.isnan(v):
                return "__builtin_nanf(\"\")"
            if np.isinf(v):
                return "__builtin_inff()" if v > 0 else "-__builtin_inff()"
            return float(v).hex() + "f"
    elif flat.dtype == np.int64:
        def literal(v: int) -> str:
            return "(-9223372036854775807LL - 1)" if v == -2**63 else f"{v}LL"
    else:
        def literal(v: int) -> str:
            return str(int(v))
    items = [literal(v.item()) for v in flat] or ["0"]
    return ",\n".join("    " + ", ".join(items[i:i + _PER_LINE]) for i in range(0, len(items), _PER_LINE))


@dataclass(frozen=True)
class Build:
    """What the firmware takes from a build: an aot.build Artifact, or a build directory read back (aot.load)."""

    name: str
    target: Target
    dir: Path
    source: Path                            # NAME.c
    object: Path                            # NAME.o
    inputs: list[wrapper.Tensor]
    outputs: list[wrapper.Tensor]
    workspace_align: int
    regions: list[wrapper.WorkspaceBlock]

    @classmethod
    def of(cls, artifact: Artifact | Build) -> Build:
        if isinstance(artifact, Build):
            return artifact
        ins, outs = wrapper.io_tensors(artifact.program)
        return cls(artifact.name, artifact.target, artifact.dir, artifact.source, artifact.object, ins, outs,
                   artifact.program.plan.alignment, wrapper.workspace_blocks(artifact.program))


def render_harness(build: Build, inputs: dict[str, np.ndarray] | None) -> str:
    """The harness with `inputs` compiled in; None: with input buffers the host loads over the console."""
    values = None if inputs is None else [c_values(np.asarray(inputs[t.onnx_name], dtype=t.dtype).reshape(t.shape))
                                          for t in build.inputs]
    return local.runtime_templates().get_template("device/harness.c.j2").render(
        banner=f"aot device harness for {build.name}", name=build.name, NAME=build.name.upper(),
        inputs=build.inputs, outputs=build.outputs, input_values=values, loadable=inputs is None,
        workspace_align=build.workspace_align, regions=build.regions)


def render_linker_script(board: DeviceBoard) -> str:
    return local.runtime_templates().get_template("device/device.ld.j2").render(
        banner=f"aot device linker script for {board.name}", board=board.name, flash=board.flash, ram=board.ram,
        stack=board.stack)


def build_firmware(artifact: Artifact | Build, board: DeviceBoard, inputs: dict[str, np.ndarray] | None,
                   workdir: Path) -> Path:
    """Link the firmware image `workdir/NAME.elf` that runs `artifact` on `inputs` (by ONNX name) on `board`,
    or (None) on inputs loaded over the console."""
    artifact = Build.of(artifact)
    tgt = artifact.target
    if tgt.os != "none":
        raise RunError(f"board {board.name}: its target {tgt.name} is not a bare-metal target")
    if shutil.which(tgt.cc) is None:
        raise RunError(f"board {board.name}: C compiler '{tgt.cc}' not found (install the target's toolchain)")
    harness = workdir / "device_harness.c"
    harness.write_text(render_harness(artifact, inputs))
    script = Path(board.linker_script) if board.linker_script else workdir / "device.ld"
    if not board.linker_script:
        script.write_text(render_linker_script(board))
    elf = workdir / f"{artifact.name}.elf"
    shipped = [s for s in board.console.sources if not Path(s).is_absolute()]
    defines = [f"AOT_CLOCK_HZ={board.clock_hz}u", f"AOT_TIMER_ASKED={TIMER_CODES[board.timer]}",
               *(f"{k}={v}" for k, v in board.console.defines)]
    if board.emulated:
        defines.append("AOT_SEMIHOSTING_EXIT")
    if tgt.cpu == "cortex-m7":
        defines.append("AOT_DWT_UNLOCK")
    with runtime_files("device/startup.c", "device/aot_device.h", *(f"device/{s}" for s in shipped)) as paths:
        startup, header, shipped_paths = paths[0], paths[1], dict(zip(shipped, paths[2:]))
        sources = [harness, artifact.source, startup,
                   *(shipped_paths.get(s, Path(s)) for s in board.console.sources)]
        cmd = [tgt.cc, *local.STRICT_CFLAGS, *tgt.cflags, *(f"-D{d}" for d in defines), f"-I{artifact.dir}",
               f"-I{header.parent}", *map(str, sources), str(artifact.object), "-T", str(script),
               *DEVICE_LDFLAGS, "-o", str(elf)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(_link_failure(proc.stderr, artifact, board))
    return elf


def _link_failure(stderr: str, artifact: Build, board: DeviceBoard) -> str:
    over = re.search(r"region `(\w+)' overflowed by (\d+) bytes", stderr)
    where = f"model {artifact.name} on board {board.name}"
    if over:
        region = over.group(1)
        size = {"FLASH": board.flash, "RAM": board.ram}.get(region)
        total = f" of {size.size:,} bytes" if size else ""
        return (f"{where}: the firmware does not fit the board's {region.lower()}{total}: it is "
                f"{int(over.group(2)):,} bytes over (weights, code and harness in flash; data, workspace and "
                f"a {board.stack:,}-byte stack in RAM)")
    if "RAM overflowed" in stderr:
        return f"{where}: the firmware's data and workspace leave less RAM than its {board.stack:,}-byte stack needs"
    return f"{where}: linking the firmware failed:\n{stderr.strip()}"
