"""A static library in the GNU `ar` format, written here so that the model object, often megabytes of
weights, goes into it without a copy: the archive is a list of byte chunks (headers, an index of the
members' global symbols, the members as they are). Deterministic as `ar rcsD`: no dates, owners or
modes but 0 and 644. Linkers (GNU ld, lld, the Arm toolchains') read it as any `ar` archive."""

from __future__ import annotations

import struct

from aot.codegen.elf import Blob, chunks, defined_globals

MAGIC = b"!<arch>\n"


def _header(name: str, size: int, mode: str = "644") -> bytes:
    head = f"{name:<16}{'0':<12}{'0':<6}{'0':<6}{mode:<8}{size:<10}`\n".encode()
    assert len(head) == 60, name
    return head


def _padded(data_size: int) -> bytes:
    return b"\n" if data_size % 2 else b""


def archive(members: list[tuple[str, Blob]]) -> list[bytes | memoryview]:
    """The archive of `members` ((file name, ELF object: bytes or chunks) in link order) as chunks to write
    in order."""
    members = [(name, chunks(data)) for name, data in members]
    names = b"".join(f"{name}/\n".encode() for name, _ in members if len(name) > 15)
    refs, at = [], 0
    for name, _ in members:     # short names in the header, long ones in the "//" member
        if len(name) > 15:
            refs.append(f"/{at}")
            at += len(name) + 2
        else:
            refs.append(f"{name}/")
    symbols = [defined_globals(data) for _, data in members]
    table_size = 4 + 4 * sum(map(len, symbols)) + sum(len(s) + 1 for syms in symbols for s in syms)
    offset = len(MAGIC) + 60 + table_size + len(_padded(table_size))
    if names:
        offset += 60 + len(names) + len(_padded(len(names)))
    starts, sizes = [], [sum(map(len, data)) for _, data in members]
    for size in sizes:
        starts.append(offset)
        offset += 60 + size + len(_padded(size))
    index = struct.pack(">I", sum(map(len, symbols))) + b"".join(
        struct.pack(">I", start) for start, syms in zip(starts, symbols) for _ in syms)
    index += b"".join(s.encode() + b"\0" for syms in symbols for s in syms)
    out = [MAGIC, _header("/", len(index), "0"), index, _padded(len(index))]
    if names:
        out += [_header("//", len(names), ""), names, _padded(len(names))]
    for ref, (_, data), size in zip(refs, members, sizes):
        out += [_header(ref, size), *data, _padded(size)]
    return [c for c in out if len(c)]
