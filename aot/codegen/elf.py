"""Just enough ELF reading to list an object's undefined symbols (what a link must provide), the global
symbols it defines (a library's index), its sections' sizes (the report's code and weights) and a linked
program's function addresses (what an instruction counter is told to watch)."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator, Sequence

# An ELF file in memory: its bytes, or its chunks in order (relocatable.join can leave a model's weights in
# the arrays that hold them rather than copy them into one bytes object).
Blob = bytes | Sequence[bytes | memoryview]

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 8, 9
SHT_GROUP, SHT_SYMTAB_SHNDX, SHT_LLVM_ADDRSIG = 17, 18, 0x6FFF4C03
SHF_ALLOC, SHF_EXECINSTR, SHF_LINK_ORDER = 0x2, 0x4, 0x80
STB_GLOBAL, STT_OBJECT = 1, 1
SHN_LORESERVE = 0xFF00


def chunks(blob: Blob) -> list[bytes | memoryview]:
    """A file's chunks in order (one, where it is given as its bytes)."""
    return [blob] if isinstance(blob, (bytes, bytearray, memoryview)) else list(blob)


class _Reader:
    """Reads an ELF file in place, whole or in chunks."""

    def __init__(self, elf: Blob):
        self.chunks = chunks(elf)
        self.starts = [0]
        for chunk in self.chunks:
            self.starts.append(self.starts[-1] + len(chunk))

    def read(self, offset: int, size: int) -> bytes:
        """`size` bytes from `offset` (fewer at the end)."""
        if len(self.chunks) == 1:
            return bytes(self.chunks[0][offset:offset + size])
        parts, i = [], bisect.bisect_right(self.starts, offset) - 1
        while size > 0 and 0 <= i < len(self.chunks):
            at = offset - self.starts[i]
            part = self.chunks[i][at:at + size]
            parts.append(bytes(part))
            offset, size, i = offset + len(part), size - len(part), i + 1
        return b"".join(parts)

    def unpack(self, fmt: str, offset: int) -> tuple:
        return struct.unpack(fmt, self.read(offset, struct.calcsize(fmt)))

    def string(self, offset: int) -> str:
        """The NUL-terminated string at `offset`."""
        text = b""
        while b"\0" not in text:
            more = self.read(offset + len(text), 64)
            if not more:
                raise ValueError("an ELF string runs past the end of the file")
            text += more
        return text[:text.index(b"\0")].decode()


def _section_table(elf: _Reader) -> tuple[bool, str, list[tuple[int, int, int, int, int, int, int]]]:
    """(64-bit, byte order, each section's (name offset, type, flags, offset, size, link, entry size))."""
    ident = elf.read(0, 6)
    if ident[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    is64, little = ident[4] == 2, ident[5] == 1
    end = "<" if little else ">"
    if is64:
        shoff, = elf.unpack(end + "Q", 0x28)
        shentsize, shnum = elf.unpack(end + "HH", 0x3A)
    else:
        shoff, = elf.unpack(end + "I", 0x20)
        shentsize, shnum = elf.unpack(end + "HH", 0x2E)
    table = elf.read(shoff, shnum * shentsize)
    sections = []
    for i in range(shnum):
        if is64:
            name, kind, flags, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIQQQQIIQQ", table,
                                                                                         i * shentsize)
        else:
            name, kind, flags, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIIIIIIIII", table,
                                                                                         i * shentsize)
        sections.append((name, kind, flags, offset, size, link, entsize))
    return is64, end, sections


def sections(elf: Blob) -> list[tuple[str, int, int]]:
    """Each section's (name, flags, size), read in place (an object may carry megabytes of weights)."""
    reader = _Reader(elf)
    is64, end, table = _section_table(reader)
    shstrndx, = reader.unpack(end + "H", 0x3E if is64 else 0x32)
    names_at = table[shstrndx][3] if table else 0
    return [(reader.string(names_at + name), flags, size) for name, _, flags, _, size, _, _ in table[1:]]


def _symbols(elf: Blob) -> Iterator[tuple[str, int, int, int, int]]:
    """(name, value, size, info, section index) of every named symbol in the symbol tables."""
    reader = _Reader(elf)
    is64, end, table = _section_table(reader)
    sections = [(kind, offset, size, link, entsize) for _, kind, _, offset, size, link, entsize in table]
    for kind, offset, size, link, entsize in sections:
        if kind != SHT_SYMTAB:
            continue
        str_offset, str_size = sections[link][1], sections[link][2]
        strings, symbols = reader.read(str_offset, str_size), reader.read(offset, size)
        for pos in range(entsize, size, entsize):   # entry 0 is the null symbol
            if is64:
                name, info, _, shndx, value, sym_size = struct.unpack_from(end + "IBBHQQ", symbols, pos)
            else:
                name, value, sym_size, info, _, shndx = struct.unpack_from(end + "IIIBBH", symbols, pos)
            if name:
                yield strings[name:strings.index(b"\0", name)].decode(), value, sym_size, info, shndx


def undefined_symbols(obj: Blob) -> list[str]:
    """Names of the global symbols the object references but does not define, sorted."""
    return sorted({name for name, _, _, info, shndx in _symbols(obj) if shndx == 0 and info >> 4 in (1, 2)})


def functions(elf: Blob) -> dict[str, tuple[int, int]]:
    """Each defined function's (address, size); Thumb addresses without their low bit."""
    return {name: (value & ~1, size) for name, value, size, info, shndx in _symbols(elf)
            if info & 0xF == 2 and shndx != 0}        # STT_FUNC


def defined_globals(obj: Blob) -> list[str]:
    """Names of the global and weak symbols the object defines, in its symbol table's order (what an
    archive's index lists for it)."""
    return list(dict.fromkeys(name for name, _, _, info, shndx in _symbols(obj) if shndx != 0 and info >> 4 in (1, 2)))
