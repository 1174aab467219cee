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
_HOST_CANDIDATES = ("x86-64-avx512", "x86-64-avx2", "x86-64")


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    triple: str
    cpu: str
    features: str
    reloc: str
    pointer_bits: int
    vector_bits: int
    vector_registers: int
    align: int
    weights_section: str
    cpu_flags: tuple[str, ...] = ()
    cc: str = "gcc"
    cflags: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    source: str = ""
    knobs: dict = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        """float32 lanes per vector register."""
        return max(1, self.vector_bits // 32)

    def runs_natively(self) -> bool:
        return not self.cpu_flags or set(self.cpu_flags) <= host_cpu_flags()


def _parse(path: Path) -> Target:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TargetError(f"{path}: cannot read target config: {err}") from None
    toolchain = data.pop("toolchain", {})
    try:
        return Target(
            cpu_flags=tuple(data.pop("cpu_flags", ())), aliases=tuple(data.pop("aliases", ())),
            knobs=dict(data.pop("knobs", {})), cc=toolchain.get("cc", "gcc"),
            cflags=tuple(toolchain.get("cflags", ())), source=str(path), **data)
    except TypeError as err:
        raise TargetError(f"{path}: bad target config: {err}") from None


def all_targets() -> list[Target]:
    return [_parse(p) for p in sorted(TARGETS_DIR.glob("*.toml"))]


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
