"""Relocatable ELF objects joined into one, as `ld -r` would, for objects LLVM emitted for one target from
parts of one model (aot/codegen/llvm.py compiles the parts at the same time).

Every section of each object is kept as a section of its own, even where another has its name (a linker
takes input sections of one name from one object as it takes them from many): no section's bytes move
within it, so relocations keep their offsets and addends and only the symbol and section indices they
hold are renumbered. Sections that carry no code or data and are alike in both (`.note.GNU-stack`,
`.ARM.attributes`) are kept once, and LLVM's address-significance tables (`.llvm_addrsig`, symbol indices
that only identical-code folding reads) are left out, which a linker takes as "every address matters".
Objects with an extended section index table or with section groups are refused: LLVM gives neither to
aot's modules unless they hold tens of thousands of sections, and the caller then compiles the module
whole. data_object makes the object of a module's larger weights, which join makes local to the
object it joins them to (`localize`), as they would be had LLVM emitted them."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from aot.codegen.elf import (
    SHF_ALLOC,
    SHF_LINK_ORDER,
    SHN_LORESERVE,
    SHT_GROUP,
    SHT_LLVM_ADDRSIG,
    SHT_NOBITS,
    SHT_PROGBITS,
    SHT_REL,
    SHT_RELA,
    SHT_STRTAB,
    SHT_SYMTAB,
    SHT_SYMTAB_SHNDX,
    STB_GLOBAL,
    STT_OBJECT,
)

_ONCE = {".note.GNU-stack", ".ARM.attributes"}     # kept from the first object only


class CannotJoin(ValueError):
    """The objects hold something this joiner does not renumber."""


@dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    flags: int
    link: int
    info: int
    align: int
    entsize: int
    data: bytes | memoryview


@dataclass(frozen=True)
class _Symbol:
    name: str
    info: int
    other: int
    shndx: int
    value: int
    size: int


class _Layout:
    """The ELF class and byte order of an object, and its records' formats."""

    def __init__(self, elf: bytes):
        if elf[:4] != b"\x7fELF":
            raise CannotJoin("not an ELF file")
        self.is64, end = elf[4] == 2, "<" if elf[5] == 1 else ">"
        self.end = end
        self.header = end + ("16sHHIQQQIHHHHHH" if self.is64 else "16sHHIIIIIHHHHHH")
        self.section = end + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
        self.symbol = end + ("IBBHQQ" if self.is64 else "IIIBBH")
        self.rel = end + ("QQ" if self.is64 else "II")
        self.rela = end + ("QQq" if self.is64 else "IIi")
        self.sym_shift = 32 if self.is64 else 8

    def read(self, elf: bytes) -> tuple[tuple, list[_Section], list[_Symbol]]:
        """The header, the sections (their bytes as views of `elf`, not copies: weights run to megabytes)
        and the symbols of an object."""
        header = struct.unpack_from(self.header, elf, 0)
        view = memoryview(elf)
        shoff, shnum, shstrndx = header[6], header[12], header[13]
        raw = [struct.unpack_from(self.section, elf, shoff + i * struct.calcsize(self.section))
               for i in range(shnum)]
        names_at = raw[shstrndx][4]
        sections = []
        for name, kind, flags, _, offset, size, link, info, align, entsize in raw:
            if kind in (SHT_GROUP, SHT_SYMTAB_SHNDX):
                raise CannotJoin("section groups or extended section indices")
            data = bytes(size) if kind == SHT_NOBITS else view[offset:offset + size]   # (NOBITS: its size only)
            sections.append(_Section(_string(elf, names_at + name), kind, flags, link, info, align, entsize, data))
        symbols: list[_Symbol] = []
        for section in sections:
            if section.kind == SHT_SYMTAB:
                strings = bytes(sections[section.link].data)
                for pos in range(0, len(section.data), section.entsize):
                    fields = struct.unpack_from(self.symbol, section.data, pos)
                    if self.is64:
                        name, info, other, shndx, value, size = fields
                    else:
                        name, value, size, info, other, shndx = fields
                    symbols.append(_Symbol(_string(strings, name), info, other, shndx, value, size))
        return header, sections, symbols


def _string(table: bytes, at: int) -> str:
    return table[at:table.index(b"\0", at)].decode()


Read = tuple[tuple, list[_Section], list[_Symbol]]     # an object as _Layout.read gives it


def join(first: bytes, second: bytes | Read, localize: frozenset[str] = frozenset(), chunked: bool = False
         ) -> bytes | list[bytes | memoryview]:
    """One relocatable object holding both objects' sections and symbols (see the module docstring).
    The global symbols named in `localize`, defined in one object and referenced from the other, become
    local to the object joined (as the weights a module declares and a data object holds). `second` may
    be given read already (data_object's: its weights are never copied into an object of their own).
    `chunked`: the object as its chunks in order (elf.Blob), the sections' bytes as they were given."""
    layout = _Layout(first)
    if isinstance(second, tuple):
        header_b, sections_b, symbols_b = second
    else:
        if _Layout(second).header != layout.header:
            raise CannotJoin("objects of different ELF classes or byte orders")
        header_b, sections_b, symbols_b = layout.read(second)
    header, sections_a, symbols_a = layout.read(first)
    if header[1:4] != header_b[1:4] or header[7] != header_b[7]:
        raise CannotJoin("objects for different machines or ABIs")

    # Sections: the null one, one string table for the names of both, each object's own, one symbol table.
    out: list[_Section] = [sections_a[0], _Section(".strtab", SHT_STRTAB, 0, 0, 0, 1, 0, b"")]
    origin: list[int] = [0, 0]                  # which object each output section came from
    where: list[dict[int, int]] = [{}, {}]      # per object: its section index -> the output's
    kept: dict[str, int] = {}
    for which, sections in enumerate((sections_a, sections_b)):
        for i, section in enumerate(sections):
            if i == 0 or section.kind in (SHT_SYMTAB, SHT_STRTAB, SHT_LLVM_ADDRSIG):
                continue
            if section.name in _ONCE and section.name in kept:
                if out[kept[section.name]].data != section.data:
                    raise CannotJoin(f"the objects' {section.name} sections differ")
                where[which][i] = kept[section.name]
                continue
            kept.setdefault(section.name, len(out))
            where[which][i] = len(out)
            out.append(section)
            origin.append(which)
    symtab_index = len(out)
    if symtab_index >= SHN_LORESERVE:
        raise CannotJoin("too many sections for 16-bit section indices")

    # Symbols: the locals of both first, then the globals, each once (an undefined one joins its
    # definition in the other object).
    symbols: list[_Symbol] = [symbols_a[0]]
    index: list[dict[int, int]] = [{0: 0}, {0: 0}]      # per object: its symbol index -> the output's
    objects = list(enumerate(zip((symbols_a, symbols_b), (_first_global(sections_a), _first_global(sections_b)))))
    for which, (syms, first) in objects:
        for i in range(1, first):
            index[which][i] = len(symbols)
            symbols.append(_renumbered(syms[i], where[which]))
    named: dict[str, int] = {}
    for which, (syms, first) in objects:
        for i in range(first, len(syms)):
            if syms[i].name in localize and syms[i].shndx:
                if syms[i].name in named:
                    raise CannotJoin(f"both objects define {syms[i].name}")
                named[syms[i].name] = len(symbols)
                symbols.append(replace(_renumbered(syms[i], where[which]), info=syms[i].info & 0xF))   # STB_LOCAL
    if len(named) != len(localize):
        raise CannotJoin(f"no definition of {', '.join(sorted(localize - set(named)))}")
    first_global = len(symbols)
    for which, (syms, first) in objects:
        for i in range(first, len(syms)):
            symbol = _renumbered(syms[i], where[which])
            at = named.get(symbol.name)
            if symbol.name in localize:
                index[which][i] = at
                continue
            if at is None:
                named[symbol.name] = index[which][i] = len(symbols)
                symbols.append(symbol)
                continue
            if symbols[at].shndx and symbol.shndx:
                raise CannotJoin(f"both objects define {symbol.name}")
            if symbol.shndx:
                symbols[at] = symbol
            index[which][i] = at

    # Relocations and links between sections renumbered, then the tables written.
    for i in range(2, len(out)):
        section, which = out[i], origin[i]
        if section.kind in (SHT_REL, SHT_RELA):
            out[i] = replace(section, link=symtab_index, info=where[which][section.info],
                             data=_relocations(section, index[which], layout))
        elif section.flags & SHF_LINK_ORDER:
            out[i] = replace(section, link=where[which][section.link])
        elif section.link:
            raise CannotJoin(f"section {section.name} links to another in a way not renumbered")
    strings = _Strings()
    names = [strings.add(section.name) for section in out] + [strings.add(".symtab")]
    symtab = b"".join(_pack_symbol(layout, strings.add(s.name), s) for s in symbols)
    out[1] = replace(out[1], data=strings.data())
    out.append(_Section(".symtab", SHT_SYMTAB, 0, 1, first_global, 8 if layout.is64 else 4,
                        struct.calcsize(layout.symbol), symtab))
    return _write(layout, header, out, names, chunked)


def _first_global(sections: list[_Section]) -> int:
    symtabs = [s for s in sections if s.kind == SHT_SYMTAB]
    if len(symtabs) != 1:
        raise CannotJoin("an object without exactly one symbol table")
    return symtabs[0].info


def _renumbered(symbol: _Symbol, where: dict[int, int]) -> _Symbol:
    if symbol.shndx == 0 or symbol.shndx >= SHN_LORESERVE:       # undefined, absolute, common
        return symbol
    return replace(symbol, shndx=where[symbol.shndx])


def _relocations(section: _Section, index: dict[int, int], layout: _Layout) -> bytes:
    record = layout.rela if section.kind == SHT_RELA else layout.rel
    size = struct.calcsize(record)
    mask = (1 << layout.sym_shift) - 1
    out = bytearray(section.data)
    for pos in range(0, len(out), size):
        fields = list(struct.unpack_from(record, out, pos))
        fields[1] = (index[fields[1] >> layout.sym_shift] << layout.sym_shift) | (fields[1] & mask)
        struct.pack_into(record, out, pos, *fields)
    return bytes(out)


def _pack_symbol(layout: _Layout, name: int, s: _Symbol) -> bytes:
    if layout.is64:
        return struct.pack(layout.symbol, name, s.info, s.other, s.shndx, s.value, s.size)
    return struct.pack(layout.symbol, name, s.value, s.size, s.info, s.other, s.shndx)


class _Strings:
    """A string table, each string once."""

    def __init__(self) -> None:
        self._at: dict[str, int] = {"": 0}
        self._parts = [b"\0"]
        self._size = 1

    def add(self, text: str) -> int:
        if text not in self._at:
            self._at[text] = self._size
            encoded = text.encode() + b"\0"
            self._parts.append(encoded)
            self._size += len(encoded)
        return self._at[text]

    def data(self) -> bytes:
        return b"".join(self._parts)


def _write(layout: _Layout, header: tuple, sections: list[_Section], names: list[int], chunked: bool = False
           ) -> bytes | list[bytes | memoryview]:
    """The object: the header, each section's bytes aligned, the section header table; one copy of the
    bytes, joined at the end (with `chunked`, the chunks, nothing copied)."""
    chunks: list[bytes | memoryview] = []
    size = struct.calcsize(layout.header)
    offsets = [0]
    for section in sections[1:]:
        pad = -size % max(section.align, 1)
        chunks.append(bytes(pad))
        size += pad
        offsets.append(size)
        if section.kind != SHT_NOBITS:
            chunks.append(section.data)
            size += len(section.data)
    pad = -size % (8 if layout.is64 else 4)
    chunks.append(bytes(pad))
    shoff = size + pad
    for i, section in enumerate(sections):
        chunks.append(struct.pack(layout.section, names[i] if i else 0, section.kind, section.flags, 0,
                                  offsets[i] if i else 0, len(section.data), section.link, section.info,
                                  section.align, section.entsize))
    fields = list(header)
    fields[6], fields[12], fields[13] = shoff, len(sections), 1
    chunks.insert(0, struct.pack(layout.header, *fields))
    return [c for c in chunks if len(c)] if chunked else b"".join(chunks)


def data_object(like: bytes, blobs: list[tuple[str, str, bytes | memoryview, int]], read: bool = False
                ) -> bytes | Read:
    """A relocatable object for the machine and ABI of the object `like`, holding each blob (section
    name, symbol, bytes, alignment) as a read-only section of its own with a global data symbol of its
    size at its start; with `read`, as join takes it read (the blobs' bytes not copied)."""
    layout = _Layout(like)
    header = struct.unpack_from(layout.header, like, 0)
    sections = [_Section("", 0, 0, 0, 0, 0, 0, b""), _Section(".strtab", SHT_STRTAB, 0, 0, 0, 1, 0, b"")]
    symbols = [_Symbol("", 0, 0, 0, 0, 0)]
    for section, symbol, data, align in blobs:
        symbols.append(_Symbol(symbol, STB_GLOBAL << 4 | STT_OBJECT, 0, len(sections), 0, len(data)))
        sections.append(_Section(section, SHT_PROGBITS, SHF_ALLOC, 0, 0, align, 0, data))
    strings = _Strings()
    names = [strings.add(section.name) for section in sections] + [strings.add(".symtab")]
    symtab = b"".join(_pack_symbol(layout, strings.add(s.name), s) for s in symbols)
    sections[1] = replace(sections[1], data=strings.data())
    sections.append(_Section(".symtab", SHT_SYMTAB, 0, 1, 1, 8 if layout.is64 else 4, struct.calcsize(layout.symbol),
                             symtab))
    return (header, sections, symbols) if read else _write(layout, header, sections, names)
