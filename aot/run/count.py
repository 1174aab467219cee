"""Count the instructions a model's kernels execute, under the target's emulator.

Emulators model no pipeline or cache, so their times say little about a device; the number of
instructions executed does, and it is exact and the same on every run. The count covers the address
range of the model's kernels in the linked program (a Linux program is linked statically so that
range is fixed), using a small QEMU plugin (runtime_c/qemu/insncount.c) built with the host's C
compiler. The outputs of the counted run come back too, so a count is never taken of a wrong answer.
A profiled run (profile_instructions) also gives each instruction's count and control transfers, with
LLVM's disassembly of the kernels, which aot/run/cycles.py prices on the core.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.codegen.elf import functions
from aot.data import runtime_files
from aot.errors import RunError
from aot.run import local

LLVM_OBJDUMP = "llvm-objdump-19"


def kernel_spans(exe: Path, name: str) -> dict[str, tuple[int, int]]:
    """Each of the model's kernels (NAME_k<i>_<op>) in a linked program, and each body kernels share
    (NAME_k<i>_<op>.shared, see aot/codegen/llvm.py): its (address, size)."""
    funcs = functions(exe.read_bytes())
    return {f: span for f, span in funcs.items() if re.fullmatch(rf"{re.escape(name)}_k\d+_\w+(\.shared)?", f)}


def kernel_range(exe: Path, name: str) -> tuple[int, int]:
    """[lo, hi) of the model's kernels (NAME_k<i>_<op>) in a linked program; nothing else may lie inside."""
    kernels = kernel_spans(exe, name)
    if not kernels:
        raise RunError(f"{exe.name}: no kernels of {name} in its symbol table")
    return functions_range(exe, set(kernels), f"the kernels of {name}")


def functions_range(exe: Path, chosen: set[str], what: str) -> tuple[int, int]:
    """[lo, hi) of the `chosen` functions (`what` they are, for the error) in a linked program: the range
    the counting plugin counts, so a function of any other name inside it is refused."""
    funcs = functions(exe.read_bytes())
    spans = [span for f, span in funcs.items() if f in chosen and span[1]]
    lo = min(addr for addr, _ in spans)
    hi = max(addr + size for addr, size in spans)
    strangers = sorted(f for f, (addr, size) in funcs.items() if f not in chosen and size and lo <= addr < hi)
    if strangers:
        raise RunError(f"{exe.name}: functions {', '.join(strangers[:3])} lie among {what}; "
                       "their instructions would be counted too")
    return lo, hi


def build_plugin(workdir: Path) -> Path:
    if shutil.which("gcc") is None:
        raise RunError("counting instructions needs the host's gcc to build the QEMU plugin")
    plugin = workdir / "insncount.so"
    with runtime_files("qemu/insncount.c") as (source,):
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", str(plugin),
                               str(source)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(f"building the instruction-counting plugin failed:\n{proc.stderr.strip()}")
    return plugin


def count_instructions(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                       ) -> tuple[dict[str, np.ndarray], int]:
    """Run the model once under the target's emulator; return its outputs and the number of
    instructions its kernels executed."""
    outputs, total, _, _ = _count(artifact, inputs, timeout, per_kernel=False)
    return outputs, total


def count_kernel_instructions(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                              ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Like count_instructions, with the instructions of each kernel function by name (in call order
    of their addresses); they add up to the total."""
    outputs, _, per_kernel, _ = _count(artifact, inputs, timeout, per_kernel=True)
    return outputs, per_kernel


@dataclass(frozen=True)
class Profile:
    """One run's instructions in the model's kernels: per address, how often it executed, how often it
    transferred control (a taken branch, call or return) and the bus transfers its misaligned data accesses
    took beyond aligned ones; the kernels' (address, size) by name; the linked program's kernels
    disassembled by LLVM (address -> instruction text), for pricing them; and, where kernels share a body
    (NAME_k<i>_<op>.shared, listed among the kernels), each kernel's instructions with those it ran in
    the shared body, and the body each such kernel calls."""

    counts: dict[int, int]
    taken: dict[int, int]
    split: dict[int, int]
    kernels: dict[str, tuple[int, int]]
    disassembly: dict[int, str]
    instructions: dict[str, int] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)


def profile_instructions(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                         ) -> tuple[dict[str, np.ndarray], Profile]:
    """Run the model once under the target's emulator with per-instruction counts (aot/run/cycles.py
    prices them)."""
    found: dict = {}

    def options(exe: Path, workdir: Path, lo: int, hi: int) -> str:
        found.update(path=workdir / "profile.txt", lo=lo, kernels=kernel_spans(exe, artifact.name),
                     disassembly=disassemble(exe, artifact.target, lo, hi))
        return f",profile={found['path']}"

    def collect(workdir: Path) -> None:
        path = found["path"]
        if not path.exists():
            raise RunError(f"{artifact.name} on {artifact.target.name}: the emulator wrote no profile")
        found["text"] = path.read_text()

    outputs, _, instructions, calls = _count(artifact, inputs, timeout, per_kernel=True, more_options=options,
                                             collect_from=collect)
    counts, taken, split = read_profile(found["text"], found["lo"])
    return outputs, Profile(counts, taken, split, found["kernels"], found["disassembly"], instructions, calls)


def read_profile(text: str, lo: int) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """The plugin's profile file (lines "OFFSET COUNT TAKEN SPLIT", hex offsets from `lo`): executions,
    control transfers and misaligned accesses' extra bus transfers per address."""
    counts, taken, split = {}, {}, {}
    for line in text.splitlines():
        offset, count, transfers, extra = line.split()
        pc = lo + int(offset, 16)
        counts[pc] = int(count)
        if int(transfers):
            taken[pc] = int(transfers)
        if int(extra):
            split[pc] = int(extra)
    return counts, taken, split


def disassemble(exe: Path, target, lo: int, hi: int) -> dict[int, str]:
    """[lo, hi) of a linked program as LLVM disassembles it for the target: address -> "mnemonic operands"
    (comments dropped)."""
    tool = shutil.which(LLVM_OBJDUMP)
    if tool is None:
        raise RunError(f"estimating cycles needs {LLVM_OBJDUMP} and llvm-mca-19 (Debian's llvm-19 package)")
    proc = subprocess.run([tool, "-d", "--no-show-raw-insn", f"--triple={target.triple}", f"--mcpu={target.cpu}",
                           f"--mattr={target.features}", f"--start-address={lo:#x}", f"--stop-address={hi:#x}",
                           str(exe)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(f"{LLVM_OBJDUMP} failed on {exe.name}: {proc.stderr.strip()[-300:]}")
    found = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if match:
            found[int(match.group(1), 16)] = match.group(2).split("@")[0].strip()
    return found


def _count(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float, per_kernel: bool,
           more_options=None, collect_from=None
           ) -> tuple[dict[str, np.ndarray], int, dict[str, int], dict[str, str]]:
    """The outputs, the kernels' instructions and, with `per_kernel`, each kernel's, and the body each
    kernel calls where it calls one that kernels share (NAME_k<i>_<op>.shared): the instructions of a
    shared body count towards the kernel that called it."""
    tgt = artifact.target
    if not tgt.run_command:
        raise RunError(f"target {tgt.name} runs natively; instructions are counted under an emulator "
                       "(use an emulated target such as aarch64 or cortex-m4)")
    spans: list[tuple[str, int, int]] = []

    def instrument(exe: Path, workdir: Path) -> tuple[str, ...]:
        lo, hi = kernel_range(exe, artifact.name)
        options = f"{build_plugin(workdir)},lo={lo:#x},hi={hi:#x}"
        if more_options is not None:
            options += more_options(exe, workdir, lo, hi)
        if per_kernel:
            spans.extend(sorted(((f, addr, addr + size) for f, (addr, size) in
                                 kernel_spans(exe, artifact.name).items() if size), key=lambda s: s[1]))
            options += "".join(f",{'shared' if f.endswith('.shared') else 'range'}={a:#x}-{b:#x}"
                               for f, a, b in spans)
        return ("-plugin", options, "-d", "plugin")

    outputs, proc = local.run_program(artifact, inputs, timeout, static=True, instrument=instrument,
                                      collect=collect_from)
    found = re.findall(r"^insns: (\d+)$", proc.stderr, re.M)
    if len(found) != 1:
        raise RunError(f"{artifact.name} on {tgt.name}: the emulator printed no instruction count "
                       f"(does {tgt.run_command[0]} support -plugin?): {proc.stderr.strip()[-200:]}")
    counts = {int(i): int(n) for i, n in re.findall(r"^range (\d+): (\d+)$", proc.stderr, re.M)}
    if per_kernel and len(counts) != len(spans):
        raise RunError(f"{artifact.name} on {tgt.name}: the emulator printed {len(counts)} of {len(spans)} "
                       "per-kernel counts")
    calls = {spans[int(i)][0]: spans[int(j)][0] for i, j in re.findall(r"^range (\d+) calls (\d+)$", proc.stderr, re.M)}
    return outputs, int(found[0]), {name: counts[i] for i, (name, _, _) in enumerate(spans)
                                    if not name.endswith(".shared")}, calls
