"""Count the instructions a model's kernels execute, under the target's emulator.

Emulators model no pipeline or cache, so their times say little about a device; the number of
instructions executed does, and it is exact and the same on every run. The count covers the address
range of the model's kernels in the linked program (a Linux program is linked statically so that
range is fixed), using a small QEMU plugin (aot/data/runtime_c/qemu/insncount.c) built with the host's C
compiler. The outputs of the counted run come back too, so a count is never taken of a wrong answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.codegen.elf import functions
from aot.data import runtime_files
from aot.errors import RunError
from aot.run import local


def kernel_range(exe: Path, name: str) -> tuple[int, int]:
    """[lo, hi) of the model's kernels (NAME_k<i>_<op>) in a linked program; nothing else may lie inside."""
    funcs = functions(exe.read_bytes())
    kernels = {f: span for f, span in funcs.items() if re.fullmatch(rf"{re.escape(name)}_k\d+_\w+", f)}
    if not kernels:
        raise RunError(f"{exe.name}: no kernels of {name} in its symbol table")
    lo = min(addr for addr, _ in kernels.values())
    hi = max(addr + size for addr, size in kernels.values())
    strangers = sorted(f for f, (addr, size) in funcs.items() if f not in kernels and size and lo <= addr < hi)
    if strangers:
        raise RunError(f"{exe.name}: functions {', '.join(strangers[:3])} lie among the kernels of {name}; "
                       "their instructions would be counted too")
    return lo, hi


def _build_plugin(workdir: Path, plugin_name: str = "insncount") -> Path:
    """Build aot/data/runtime_c/qemu/<plugin_name>.c into a shared object in `workdir`."""
    if shutil.which("gcc") is None:
        raise RunError("counting instructions needs the host's gcc to build the QEMU plugin")
    plugin = workdir / f"{plugin_name}.so"
    with runtime_files(f"qemu/{plugin_name}.c") as (source,):
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", str(plugin),
                               str(source)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(f"building the instruction-counting plugin failed:\n{proc.stderr.strip()}")
    return plugin


def count_instructions(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                       ) -> tuple[dict[str, np.ndarray], int]:
    """Run the model once under the target's emulator; return its outputs and the number of
    instructions its kernels executed."""
    tgt = artifact.target
    if not tgt.run_command:
        raise RunError(f"target {tgt.name} runs natively; instructions are counted under an emulator "
                       "(use an emulated target such as aarch64 or cortex-m4)")

    def instrument(exe: Path, workdir: Path) -> tuple[str, ...]:
        lo, hi = kernel_range(exe, artifact.name)
        return ("-plugin", f"{_build_plugin(workdir)},lo={lo:#x},hi={hi:#x}", "-d", "plugin")

    outputs, proc = local.run_program(artifact, inputs, timeout, static=True, instrument=instrument)
    found = re.findall(r"^insns: (\d+)$", proc.stderr, re.M)
    if len(found) != 1:
        raise RunError(f"{artifact.name} on {tgt.name}: the emulator printed no instruction count "
                       f"(does {tgt.run_command[0]} support -plugin?): {proc.stderr.strip()[-200:]}")
    return outputs, int(found[0])


def kernel_ranges(exe: Path, name: str) -> dict[str, tuple[int, int]]:
    """Each of the model's kernels (NAME_k<i>_<op>) in a linked program: [lo, hi), by symbol."""
    funcs = functions(exe.read_bytes())
    spans = {f: (addr, addr + size) for f, (addr, size) in funcs.items()
             if size and re.fullmatch(rf"{re.escape(name)}_k\d+_\w+", f)}
    if not spans:
        raise RunError(f"{exe.name}: no kernels of {name} in its symbol table")
    return spans


def count_instructions_per_kernel(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                                  ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Run the model once under the target's emulator; return its outputs and the instructions each
    kernel executed, by kernel symbol in call order (a profile: where count_instructions gives the sum)."""
    tgt = artifact.target
    if not tgt.run_command:
        raise RunError(f"target {tgt.name} runs natively; instructions are counted under an emulator "
                       "(use an emulated target such as aarch64 or cortex-m4)")
    order: list[str] = []

    def instrument(exe: Path, workdir: Path) -> tuple[str, ...]:
        spans = sorted(kernel_ranges(exe, artifact.name).items(), key=lambda kv: kv[1])
        order.extend(f for f, _ in spans)
        table = workdir / "ranges.txt"
        table.write_text("".join(f"{lo:#x} {hi:#x}\n" for _, (lo, hi) in spans))
        plugin = _build_plugin(workdir, "insnprofile")
        return ("-plugin", f"{plugin},ranges={table}", "-d", "plugin")

    outputs, proc = local.run_program(artifact, inputs, timeout, static=True, instrument=instrument)
    found = {int(i): int(n) for i, n in re.findall(r"^range (\d+): (\d+)$", proc.stderr, re.M)}
    if len(found) != len(order):
        raise RunError(f"{artifact.name} on {tgt.name}: the emulator printed {len(found)} kernel counts for "
                       f"{len(order)} kernels: {proc.stderr.strip()[-200:]}")
    calls = [c.kernel.name for c in artifact.program.calls]
    by_name = {f: found[i] for i, f in enumerate(order)}
    return outputs, {f: by_name.get(f, 0) for f in calls}
