"""Targets are data: `<name>.toml` files describing a CPU, its vector unit and its toolchain. aot ships
some (targets/); users add or replace them from their own directories (`--target-dir DIR`,
$AOT_TARGET_PATH), or name a file with `--target path/to/file.toml`."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.config_schema import TARGET, problems
from aot.data import SHIPPED, SearchDir, config_files, describe_search, search_dirs
from aot.errors import OptionError, TargetError
from aot.isa import IntSimd, int_simd

if TYPE_CHECKING:
    from importlib.abc import Traversable

TARGET_PATH = "AOT_TARGET_PATH"      # os.pathsep-separated directories of user targets, searched after --target-dir
# "host" picks the best x86-64 config this machine's CPU can run, most capable first.
_HOST_CANDIDATES = ("x86-64-amx", "x86-64-avx512-vnni", "x86-64-avx512", "x86-64-avx2", "x86-64")
_FLOAT_ABIS = ("hard", "soft")
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Bool _Complex _Imaginary""".split())
_TOTALS = ("flash", "ram")       # the device's totals in [memory] and --memory; no region takes these names


@dataclass(frozen=True)
class Region:
    """A part of the device's RAM the workspace may use (DTCM, SRAM, external SDRAM), from the
    `[[memory.regions]]` of a target or board file; aot/plan/regions.py fills them."""

    name: str       # a C identifier: the field of NAME_workspaces, NAME_WORKSPACE_<NAME>_SIZE
    size: int       # bytes the workspace (and the weights, if it holds them) may take in it
    rank: int       # speed: 0 is the fastest
    weights: bool = False   # the weights go in this RAM region (section .data.aot.<name>.<symbol>), not in flash

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name) \
                or self.name in C_KEYWORDS:
            raise ValueError(f"name {self.name!r} is not a C identifier (it names a struct field and macros)")
        if self.name.lower() in _TOTALS:
            raise ValueError(f"name '{self.name}' is taken: flash and ram are the device's totals ([memory], --memory)")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size <= 0:
            raise ValueError(f"size must be a positive number of bytes, not {self.size!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank must be an integer from 0 (the fastest) up, not {self.rank!r}")
        if not isinstance(self.weights, bool):
            raise ValueError(f"weights must be true or false, not {self.weights!r}")

    @property
    def section(self) -> str:
        """The linker section of its workspace block."""
        return f".bss.aot.{self.name}"


def read_regions(entries: object) -> tuple[Region, ...]:
    """The `[[memory.regions]]` tables of a target or board file, checked, fastest first; a ValueError names
    the entry and field at fault."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("memory.regions must be an array of tables ([[memory.regions]] with name, size, rank)")
    regions = []
    for i, entry in enumerate(entries):
        where = f"memory.regions[{i}]" + (f" ('{entry['name']}')" if isinstance(entry.get("name"), str) else "")
        unknown = sorted(set(entry) - {"name", "size", "rank", "weights"})
        missing = [k for k in ("name", "size", "rank") if k not in entry]
        if unknown or missing:
            raise ValueError(f"{where}: {f'unknown key {unknown[0]!r}' if unknown else 'lacks ' + ', '.join(missing)} "
                             "(a region has name, size, rank and maybe weights)")
        try:
            regions.append(Region(entry["name"], parse_size(entry["size"]), entry["rank"], entry.get("weights", False)))
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    by_rank = tuple(sorted(regions, key=lambda r: r.rank))
    for i, region in enumerate(by_rank):
        for other in by_rank[:i]:
            if other.name.upper() == region.name.upper():
                raise ValueError(f"memory.regions: two are named '{region.name}' (macros are in upper case)")
            if other.rank == region.rank:
                raise ValueError(f"memory.regions: '{other.name}' and '{region.name}' both have rank {region.rank}; "
                                 "each region has its own (0 is the fastest)")
            if other.weights and region.weights:
                raise ValueError(f"memory.regions: '{other.name}' and '{region.name}' both hold the weights; "
                                 "one region may")
    return by_rank


def resized(regions: Sequence[Region], sizes: dict[str, int]) -> tuple[Region, ...]:
    """The regions with some sizes given anew (`--memory dtcm=32K`); a name that is no region is an OptionError."""
    unknown = sorted(set(sizes) - {r.name for r in regions})
    if unknown:
        have = f"its regions are {', '.join(r.name for r in regions)}" if regions else "it declares none"
        raise OptionError(f"--memory {unknown[0]}=SIZE: the target has no memory region '{unknown[0]}' (--memory "
                          f"takes flash=SIZE, ram=SIZE and REGION=SIZE for the target's regions; {have})")
    try:
        return tuple(dataclasses.replace(r, size=sizes.get(r.name, r.size)) for r in regions)
    except ValueError as err:
        raise OptionError(f"--memory: {err}") from None


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
    float_abi: str = "hard"          # "hard" (floats in FPU registers) or "soft" (library calls)
    fpu: bool = True                 # floating-point instructions in hardware; soft float has none
    fp64: bool | None = None         # double precision in hardware too (float64 kernels); default: fpu
    int_simd: IntSimd = field(default_factory=lambda: int_simd("none"))   # a registered form (aot/isa.py);
                                     # a target file names it: avx2, avx512-vnni, amx, neon, neon-dotprod,
                                     # neon-i8mm, dsp, mve
    cpu_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags needed to run natively (x86)
    cc: str = "gcc"
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    run_command: tuple[str, ...] = ()   # emulator prefix; empty: run natively
    linker_script: str = ""          # bare metal: a file in runtime_c/baremetal/, or an absolute path
    memory: dict = field(default_factory=dict)   # {"flash": bytes, "ram": bytes} limits, if known
    regions: tuple[Region, ...] = ()  # RAM regions the workspace is split over, fastest first; none: one workspace
    aliases: tuple[str, ...] = ()
    source: str = ""                 # the config file
    origin: str = SHIPPED            # the user directory it came from, or "aot" for a shipped config
    knobs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "int_simd", int_simd(self.int_simd))     # a name becomes its capability
        if self.float_abi not in _FLOAT_ABIS:
            raise TargetError(f"float_abi '{self.float_abi}' is not one of {', '.join(_FLOAT_ABIS)}")
        if not isinstance(self.fpu, bool):
            raise TargetError(f"fpu must be true or false, not {self.fpu!r}")
        if self.fp64 is None:
            object.__setattr__(self, "fp64", self.fpu)
        if self.fp64 and not self.fpu:
            raise TargetError("fp64 = true needs fpu = true: double precision in hardware is part of an FPU")
        if self.fpu != (self.float_abi == "hard"):
            raise TargetError(f"fpu = {str(self.fpu).lower()} contradicts float_abi = \"{self.float_abi}\": "
                              "soft float means no FPU (fpu = false), the hard-float ABI needs one (fpu = true)")

    @property
    def weights_prefix(self) -> str:
        """The weights go to <prefix>.<symbol>: the target's read-only section, or the .data section of the
        RAM region that holds them."""
        held = [r.name for r in self.regions if r.weights]
        return f".data.aot.{held[0]}" if held else self.weights_section

    @property
    def lanes(self) -> int:
        """float32 lanes per vector register."""
        return max(1, self.vector_bits // 32)

    @property
    def aarch64_neon(self) -> bool:
        """AArch64 with its NEON (with or without the dot product): the kernels' AArch64-only forms."""
        return self.pointer_bits == 64 and self.int_simd.name in ("neon", "neon-dotprod", "neon-i8mm")

    def runs_natively(self) -> bool:
        """True if this machine can run the target's programs without an emulator."""
        import platform

        if self.run_command:
            return False
        return platform.machine() in ("x86_64", "AMD64") and set(self.cpu_flags) <= host_cpu_flags()


def _parse(path: Path | Traversable, origin: str) -> Target:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TargetError(f"{path}: cannot read target config: {err}") from None
    found = problems(data, TARGET)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise TargetError(f"{path}: {found[0]}{more}")
    toolchain = data.pop("toolchain", {})
    run = data.pop("run", {})
    script = toolchain.get("linker_script", "")
    if script and isinstance(path, Path) and (path.parent / script).is_file():   # a user's, beside its target
        script = str((path.parent / script).resolve())
    try:
        memory = dict(data.pop("memory", {}))
        regions = read_regions(memory.pop("regions")) if "regions" in memory else ()
        memory = {k: parse_size(v) for k, v in memory.items()}
        return Target(
            cpu_flags=tuple(data.pop("cpu_flags", ())), aliases=tuple(data.pop("aliases", ())),
            knobs=dict(data.pop("knobs", {})), cc=toolchain.get("cc", "gcc"),
            cflags=tuple(toolchain.get("cflags", ())), ldflags=tuple(toolchain.get("ldflags", ())),
            linker_script=script, run_command=tuple(run.get("command", ())),
            memory=memory, regions=regions, source=str(path), origin=origin, **data)
    except (TypeError, ValueError, TargetError) as err:
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


TargetDirs = Sequence[str | os.PathLike]


def _search(dirs: TargetDirs) -> list[SearchDir]:
    return search_dirs(dirs, TARGET_PATH, "--target-dir")


def _configs(dirs: TargetDirs, want: str | None = None,
             skipped: list[str] | None = None) -> list[tuple[Target, Path | Traversable]]:
    """Each target with its file, in search order; a name an earlier file took shadows later files. A user's
    file that does not read is skipped, its error added to `skipped`, unless its file is named `want`."""
    found: dict[str, tuple[Target, Path | Traversable]] = {}
    for cfg in config_files("targets", _search(dirs)):
        try:
            tgt = _parse(cfg.file, cfg.origin)
        except TargetError as err:
            if cfg.origin == SHIPPED or cfg.name == want:
                raise
            if skipped is not None:
                skipped.append(str(err))
            continue
        found.setdefault(tgt.name, (tgt, cfg.file))
    return list(found.values())


def all_targets(dirs: TargetDirs = (), skipped: list[str] | None = None) -> list[Target]:
    """Every target, from `dirs`, then $AOT_TARGET_PATH, then the shipped configs; a user file shadows a
    shipped config of the same name; a user file that does not read is skipped, its error put in `skipped`."""
    return sorted((tgt for tgt, _ in _configs(dirs, skipped=skipped)), key=lambda t: t.name)


def host_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_target_name(dirs: TargetDirs = ()) -> str:
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        raise TargetError(f"target 'host' is only detected on x86-64 machines (this is {platform.machine()}); "
                          "name a target explicitly (see `aot targets`)")
    flags = host_cpu_flags()
    by_name = {t.name: t for t in all_targets(dirs)}
    for name in _HOST_CANDIDATES:
        if name in by_name and set(by_name[name].cpu_flags) <= flags:
            return name
    raise TargetError(f"no target config named {', '.join(_HOST_CANDIDATES)} matches this machine's CPU "
                      f"(searched {describe_search('targets', _search(dirs))})")


def _find(name: str, dirs: TargetDirs) -> tuple[Target, Path | Traversable]:
    if name.endswith(".toml"):       # a file named by path; target names never end so
        path = Path(name).expanduser()
        if not path.is_file():
            raise TargetError(f"target file {name}: no such file")
        return _parse(path, str(path.resolve().parent)), path
    if name == "host":
        name = host_target_name(dirs)
    configs = _configs(dirs, want=name)
    for match in (lambda t: name == t.name, lambda t: name in t.aliases):    # a name before an alias
        for tgt, file in configs:                                           # user files first
            if match(tgt):
                return tgt, file
    known = ", ".join(["host"] + sorted(t.name for t, _ in configs))
    raise TargetError(f"unknown target '{name}' (known targets: {known}; searched "
                      f"{describe_search('targets', _search(dirs))}; or give a path to a .toml file)")


def get_target(name: str | Target, dirs: TargetDirs = ()) -> Target:
    """A target by name or alias, searched in `dirs`, then $AOT_TARGET_PATH, then the shipped configs;
    "host" is the best x86-64 config this CPU runs; a name ending in .toml is a path to a target file."""
    return name if isinstance(name, Target) else _find(name, dirs)[0]


def target_text(name: str, dirs: TargetDirs = ()) -> str:
    """The TOML text of a target's file, as `aot targets NAME` shows it."""
    return _find(name, dirs)[1].read_text()
