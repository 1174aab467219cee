"""What a firmware's build system takes from a build directory: `NAME.a` (the model object and the wrapper
compiled with the target's own compiler and flags), `CMakeLists.txt` (an imported library target NAME),
`NAME.mk` (a Make fragment: sources, object, include path, flags) and, for a cross target,
`toolchain.cmake` (a CMake toolchain file for the target's compiler and core).

Each is the same bytes for the same build: the archive is written by the toolchain's `ar` in its
deterministic mode, its wrapper object compiled from a relative path, the text files carry no paths."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from aot.errors import OptionError, TargetError
from aot.target import Target

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("aot.codegen", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)

# What the compiler predefines for each instruction set: the header checks the architecture (and the
# float ABI, see guard), a CMake project's configure step only the family, which a compiler shows by
# default, before any -mcpu flag a project may give its targets alone.
_ARCHES = {     # triple prefix -> (arch, family)
    "thumbv6m": ("defined(__ARM_ARCH_6M__)", "__arm__"),
    "thumbv7em": ("defined(__ARM_ARCH_7EM__)", "__arm__"),
    # gcc says 8M_MAIN for Armv8.1-M too; clang says 8_1M_MAIN. The M55's object needs MVE.
    "thumbv8.1m.main": ("(defined(__ARM_ARCH_8_1M_MAIN__) || defined(__ARM_ARCH_8M_MAIN__)) "
                        "&& defined(__ARM_FEATURE_MVE)", "__arm__"),
    "armv7a": ("defined(__ARM_ARCH_7A__)", "__arm__"),
    "aarch64": ("defined(__aarch64__)", "__aarch64__"),
    "x86_64": ("defined(__x86_64__)", "__x86_64__"),
}
_NATIVE_COMPILERS = ("gcc", "cc", "clang")     # a target built with one of these needs no toolchain file


@dataclass(frozen=True)
class Guard:
    """The predefined macros a compiler for the target has: `check` (core and float ABI), `family`."""
    check: str
    family: str


def guard(tgt: Target) -> Guard | None:
    """The target's predefined-macro test, or None for a triple aot knows no macros of."""
    prefix = tgt.triple.split("-")[0]
    if prefix not in _ARCHES:
        return None
    arch, family = _ARCHES[prefix]
    check = arch
    if family == "__arm__":     # 32-bit Arm: hard-float objects link only with hard-float ones
        check += " && defined(__ARM_PCS_VFP)" if tgt.float_abi == "hard" else " && !defined(__ARM_PCS_VFP)"
    return Guard(check, f"defined({family})")


def compile_flags(tgt: Target) -> list[str]:
    """The flags NAME.c is compiled with into NAME.a: the target file's."""
    return list(tgt.cflags)


def archiver(tgt: Target) -> str:
    """The toolchain's ar beside its compiler: arm-none-eabi-gcc -> arm-none-eabi-ar, gcc or cc -> ar."""
    return tgt.cc[: -len("gcc")] + "ar" if tgt.cc.endswith("gcc") else "ar"


def static_library(name: str, tgt: Target, obj: bytes, header: str, source: str) -> bytes | None:
    """NAME.a: the model object NAME.o and the wrapper compiled from NAME.c with the target's compiler and
    flags (member NAME.c.o); None where that compiler or its ar is not installed."""
    cc, ar = shutil.which(tgt.cc), shutil.which(archiver(tgt))
    if cc is None or ar is None:
        return None
    with tempfile.TemporaryDirectory(prefix="aot-lib-") as tmp:
        work = Path(tmp)
        try:
            (work / f"{name}.h").write_text(header)
            (work / f"{name}.c").write_text(source)
            (work / f"{name}.o").write_bytes(obj)
        except OSError as err:      # a --name the file system refuses (too long)
            shown = f"{name[:60]}{'...' if len(name) > 60 else ''}"
            raise OptionError(f"cannot make {shown}.a: {err.strerror or err}") from None
        steps = ([cc, *compile_flags(tgt), "-c", f"{name}.c", "-o", f"{name}.c.o"],
                 [ar, "rcsD", f"{name}.a", f"{name}.o", f"{name}.c.o"])
        for cmd in steps:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
            if proc.returncode != 0:
                raise TargetError(f"target {tgt.name}: making {name}.a failed ({' '.join(cmd)}):\n"
                                  f"{proc.stderr.strip()}")
        return (work / f"{name}.a").read_bytes()


def missing_tools(tgt: Target) -> str:
    """Why static_library made nothing, for a note."""
    absent = [tool for tool in (tgt.cc, archiver(tgt)) if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not found" if absent else ""


def build_files(name: str, tgt: Target, banner: str, library: bool) -> dict[str, bytes]:
    """CMakeLists.txt, NAME.mk and (cross targets) toolchain.cmake for a build of `name` for `tgt`;
    `library`: whether NAME.a was made."""
    g = guard(tgt)
    flags = compile_flags(tgt)
    cross = tgt.cc not in _NATIVE_COMPILERS
    context = dict(banner=banner, name=name, NAME=name.upper(), target=tgt, flags=flags, library=library, cross=cross,
                   family=g.family if g else "", tools=missing_tools(tgt) if not library else "",
                   cmake_flags=" ".join(f for f in flags if not f.startswith("-O")),
                   system="Generic" if tgt.os == "none" else "Linux",
                   processor=tgt.cpu if tgt.os == "none" else tgt.triple.split("-")[0])
    files = {"CMakeLists.txt": _TEMPLATES.get_template("CMakeLists.txt.j2").render(**context).encode(),
             f"{name}.mk": _TEMPLATES.get_template("model.mk.j2").render(**context).encode()}
    if cross:
        files["toolchain.cmake"] = _TEMPLATES.get_template("toolchain.cmake.j2").render(**context).encode()
    return files
