"""Just enough ELF reading to list an object's undefined symbols (what a link must provide), the global
symbols it defines (a library's index), its sections' sizes (the report's code and weights) and a linked
program's function addresses (what an instruction counter is told to watch)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 8, 9
SHT_GROUP, SHT_SYMTAB_SHNDX, SHT_LLVM_ADDRSIG = 17, 18, 0x6FFF4C03
SHF_ALLOC, SHF_EXECINSTR, SHF_LINK_ORDER = 0x2, 0x4, 0x80
STB_GLOBAL, STT_OBJECT = 1, 1
SHN_LORESERVE = 0xFF00


def _section_table(elf: bytes) -> tuple[bool, str, list[tuple[int, int, int, int, int, int, int]]]:
    """(64-bit, byte order, each section's (name offset, type, flags, offset, size, link, entry size))."""
    if elf[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    is64, little = elf[4] == 2, elf[5] == 1
    end = "<" if little else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", elf, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", elf, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", elf, 0x2E)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if is64:
            name, kind, flags, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIQQQQIIQQ", elf, base)
        else:
            name, kind, flags, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIIIIIIIII", elf, base)
        sections.append((name, kind, flags, offset, size, link, entsize))
    return is64, end, sections


def sections(elf: bytes) -> list[tuple[str, int, int]]:
    """Each section's (name, flags, size), read in place (an object may carry megabytes of weights)."""
    _, end, table = _section_table(elf)
    shstrndx, = struct.unpack_from(end + "H", elf, 0x3E if elf[4] == 2 else 0x32)
    names_at = table[shstrndx][3] if table else 0
    return [(elf[names_at + name:elf.index(b"\0", names_at + name)].decode(), flags, size)
            for name, _, flags, _, size, _, _ in table[1:]]


def _symbols(elf: bytes) -> Iterator[tuple[str, int, int, int, int]]:
    """(name, value, size, info, section index) of every named symbol in the symbol tables."""
    is64, end, table = _section_table(elf)
    sections = [(kind, offset, size, link, entsize) for _, kind, _, offset, size, link, entsize in table]
    for kind, offset, size, link, entsize in sections:
        if kind != SHT_SYMTAB:
            continue
        str_offset = sections[link][1]
        for pos in range(offset + entsize, offset + size, entsize):   # entry 0 is the null symbol
            if is64:
                name, info, _, shndx, value, sym_size = struct.unpack_from(end + "IBBHQQ", elf, pos)
            else:
                name, value, sym_size, info, _, shndx = struct.unpack_from(end + "IIIBBH", elf, pos)
            if name:
                stop = elf.index(b"\0", str_offset + name)
                yield elf[str_offset + name:stop].decode(), value, sym_size, info, shndx


def undefined_symbols(obj: bytes) -> list[str]:
    """Names of the global symbols the object references but does not define, sorted."""
    return sorted({name for name, _, _, info, shndx in _symbols(obj) if shndx == 0 and info >> 4 in (1, 2)})


def functions(elf: bytes) -> dict[str, tuple[int, int]]:
    """Each defined function's (address, size); Thumb addresses without their low bit."""
    return {name: (value & ~1, size) for name, value, size, info, shndx in _symbols(elf)
            if info & 0xF == 2 and shndx != 0}        # STT_FUNC


def defined_globals(obj: bytes) -> list[str]:
    """Names of the global and weak symbols the object defines, in its symbol table's order (what an
    archive's index lists for it)."""
    return list(dict.fromkeys(name for name, _, _, info, shndx in _symbols(obj) if shndx != 0 and info >> 4 in (1, 2)))
