"""Targets are data: `targets/<name>.toml` files describing a CPU, its vector unit and its toolchain."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.errors import TargetError

TARGETS_DIR = Path(os.environ.get("AOT_TARGETS_DIR", Path(__file__).resolve().parent.parent / "targets"))
# "host" picks the best x86-64 config this machine's CPU can run, most capable first.
_HOST_CANDIDATES = ("x86-64-avx512-vnni", "x86-64-avx512", "x86-64-avx2", "x86-64")


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    triple: str                      # LLVM triple; bare-metal ARM needs all 4 parts for the hard-float ABI
    cpu: str
    features: str
    reloc: str                       # "pic" for Linux (PIE by default), "static" for bare metal
    pointer_bits: int
    vector_bits: int                 # float SIMD width; 32 means scalar FPU
    vector_registers: int            # registers the micro-kernel tiles are sized for
    fma: bool                        # fused multiply-add in hardware (else a*b+c may stay unfused)
    align: int                       # workspace and weight alignment in bytes
    weights_section: str             # weights go to <weights_section>.<symbol>, for linker scripts
    os: str = "linux"                # "linux" or "none" (bare metal)
    float_abi: str = "hard"
    int_simd: str = "none"           # integer SIMD style: avx2, avx512-vnni, neon, neon-dotprod, dsp, mve
    cpu_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags needed to run natively (x86)
    cc: str = "gcc"
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    run_command: tuple[str, ...] = ()   # emulator prefix; empty: run natively
    linker_script: str = ""          # bare metal: file in runtime_c/baremetal/
    memory: dict = field(default_factory=dict)   # {"flash": bytes, "ram": bytes} limits, if known
    aliases: tuple[str, ...] = ()
    source: str = ""
    knobs: dict = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        """float32 lanes per vector register."""
        return max(1, self.vector_bits // 32)

    def runs_natively(self) -> bool:
        """True if this machine can run the target's programs without an emulator."""
        import platform

        if self.run_command:
            return False
        return platform.machine() in ("x86_64", "AMD64") and set(self.cpu_flags) <= host_cpu_flags()


def _parse(path: Path) -> Target:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TargetError(f"{path}: cannot read target config: {err}") from None
    toolchain = data.pop("toolchain", {})
    run = data.pop("run", {})
    try:
        memory = {k: parse_size(v) for k, v in data.pop("memory", {}).items()}
        return Target(
            cpu_flags=tuple(data.pop("cpu_flags", ())), aliases=tuple(data.pop("aliases", ())),
            knobs=dict(data.pop("knobs", {})), cc=toolchain.get("cc", "gcc"),
            cflags=tuple(toolchain.get("cflags", ())), ldflags=tuple(toolchain.get("ldflags", ())),
            linker_script=toolchain.get("linker_script", ""), run_command=tuple(run.get("command", ())),
            memory=memory, source=str(path), **data)
    except (TypeError, ValueError) as err:
        raise TargetError(f"{path}: bad target config: {err}") from None


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30}


def parse_size(text: int | str) -> int:
    """Bytes from 524288, "512K", "512KiB", "2M", "1.5MB"."""
    if isinstance(text, int):
        return text
    import re

    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"'{text}' is not a size (e.g. 512K, 2MiB, 1048576)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def all_targets() -> list[Target]:
    return sorted((_parse(p) for p in TARGETS_DIR.glob("*.toml")), key=lambda t: t.name)


def host_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_target_name() -> str:
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        raise TargetError(f"target 'host' is only detected on x86-64 machines (this is {platform.machine()}); "
                          "name a target explicitly (see `aot targets`)")
    flags = host_cpu_flags()
    by_name = {t.name: t for t in all_targets()}
    for name in _HOST_CANDIDATES:
        if name in by_name and set(by_name[name].cpu_flags) <= flags:
            return name
    raise TargetError("no target config in targets/ matches this machine's CPU")


def get_target(name: str) -> Target:
    if isinstance(name, Target):
        return name
    if name == "host":
        name = host_target_name()
    targets = all_targets()
    for t in targets:
        if name == t.name or name in t.aliases:
            return t
    known = ", ".join(["host"] + [t.name for t in targets])
    raise TargetError(f"unknown target '{name}' (known targets: {known})")
