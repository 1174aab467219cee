"""Just enough ELF reading to list an object's undefined symbols (what a link must provide)."""

from __future__ import annotations

import struct


def undefined_symbols(obj: bytes) -> list[str]:
    """Names of the global symbols the object references but does not define, sorted."""
    if obj[:4] != b"\x7fELF":
        raise ValueError("not an ELF object")
    is64, little = obj[4] == 2, obj[5] == 1
    end = "<" if little else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", obj, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", obj, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", obj, 0x2E)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if is64:
            _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIQQQQIIQQ", obj, base)
        else:
            _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(end + "IIIIIIIIII", obj, base)
        sections.append((kind, offset, size, link, entsize))
    names = set()
    for kind, offset, size, link, entsize in sections:
        if kind != 2:           # SHT_SYMTAB
            continue
        str_offset = sections[link][1]
        for pos in range(offset + entsize, offset + size, entsize):   # entry 0 is the null symbol
            if is64:
                name, info, _, shndx = struct.unpack_from(end + "IBBH", obj, pos)
            else:
                name, _, _, info, _, shndx = struct.unpack_from(end + "IIIBBH", obj, pos)
            if shndx == 0 and name and info >> 4 in (1, 2):       # undefined, GLOBAL or WEAK
                stop = obj.index(b"\0", str_offset + name)
                names.add(obj[str_offset + name:stop].decode())
    return sorted(names)
