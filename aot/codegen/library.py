"""What a firmware's build system takes from a build directory: `NAME.a` (the model object and the wrapper
compiled with the target's own compiler and flags), `CMakeLists.txt` (an imported library target NAME),
`NAME.mk` (a Make fragment: sources, object, include path, flags) and, for a cross target,
`toolchain.cmake` (a CMake toolchain file for the target's compiler and core).

Each is the same bytes for the same build: the archive is deterministic (archive.py), its wrapper object
compiled from a relative path, the text files carry no paths."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aot.codegen import TEMPLATES
from aot.codegen.archive import archive
from aot.codegen.elf import Blob
from aot.errors import OptionError, RunError
from aot.target import Target

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


def static_library(name: str, tgt: Target, obj: Blob, header: str, source: str) -> list[bytes | memoryview] | None:
    """NAME.a as chunks to write in order (see archive.py): the model object NAME.o and the wrapper compiled
    from NAME.c with the target's compiler and flags (member NAME.c.o); None where that compiler is not
    installed."""
    cc = shutil.which(tgt.cc)
    if cc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="aot-lib-") as tmp:
        work = Path(tmp)
        try:
            (work / f"{name}.h").write_text(header)
            (work / f"{name}.c").write_text(source)
        except OSError as err:      # a --name the file system refuses (too long)
            shown = f"{name[:60]}{'...' if len(name) > 60 else ''}"
            raise OptionError(f"cannot make {shown}.a: {err.strerror or err}") from None
        cmd = [cc, *compile_flags(tgt), "-c", f"{name}.c", "-o", f"{name}.c.o"]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)    # relative: no path in it
        if proc.returncode != 0:
            raise RunError(f"target {tgt.name}: compiling {name}.c for {name}.a failed ({' '.join(cmd)}):\n"
                           f"{proc.stderr.strip()}")
        wrapper = (work / f"{name}.c.o").read_bytes()
    return archive([(f"{name}.o", obj), (f"{name}.c.o", wrapper)])


def missing_tools(tgt: Target) -> str:
    """Why static_library made nothing (the one reason it has), for a note."""
    return f"{tgt.cc} not found"


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
    files = {"CMakeLists.txt": TEMPLATES.get_template("CMakeLists.txt.j2").render(**context).encode(),
             f"{name}.mk": TEMPLATES.get_template("model.mk.j2").render(**context).encode()}
    if cross:
        files["toolchain.cmake"] = TEMPLATES.get_template("toolchain.cmake.j2").render(**context).encode()
    return files
