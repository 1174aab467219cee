"""Kernels alike but for their numbers share one body: the numbers that differ become a table of constants.

A quantized network's repeated blocks lower to kernels that differ in their weights (buffers, which a
shared body already takes as parameters) and in a few numbers written into the code: zero points,
scales, clamp bounds. Those made every block's Gemm a function of its own: LLVM compiled ViT-tiny's 49
projections one by one. Here kernels whose bodies match but for such numbers (their loose structure)
read the numbers that differ from a small constant buffer of their own instead, each at its place; the
rewritten kernels then have one structure, and code generation builds one body for all of them
(ModuleBuilder._source). A kernel alike no other, or whose numbers all agree with its twins', is kept
as it is, its numbers in the code.

Only numbers that are values are moved: never one that takes part in an index, a loop bound, or the
divisor of a division or remainder (a divisor known at compile time is a multiply; a loaded one, a
division instruction, or a library call on cores without one).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from aot.kernel import ir as k

# Fields whose expressions index memory or bound loops: numbers in them stay in the code.
_STRICT_FIELDS = {
    k.Load: {"index"}, k.Store: {"index"}, k.MaskedLoad: {"index", "hi", "lo"}, k.For: {"start", "stop"},
    k.Tile: {"index", "stride"}, k.PairLoop: {"pixel", "weights"},
}
_MOVABLE = frozenset({"f32", "f64", "i64", "i32", "i16", "i8", "u8"})
_NUMPY = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
          "u8": np.uint8}
TABLE_BYTES = 4096      # a kernel's table stays smaller: weights this large are joined to the object as data
TABLES = 2              # tables a kernel may have (ModuleBuilder counts the object's sections with them)


@dataclasses.dataclass(frozen=True)
class Loose:
    """A kernel's structure with its movable numbers left out (`key`), and those numbers in walk order."""
    key: tuple | None
    numbers: tuple[k.Const, ...]


def loose_structure(kernel: k.Kernel) -> Loose:
    """As k.structure, but each number that is a value (a Const of a value type outside indices, bounds and
    divisors) counts by its type and lanes only; the numbers themselves are listed in the order met.
    The key is None where the body holds a value structure() does not compare."""
    weights = {buf.name: i for i, buf in enumerate(k.constants(kernel))}
    seen: dict[tuple[int, bool], int] = {}
    numbers: list[k.Const] = []

    def of(node: object, strict: bool) -> object:
        if isinstance(node, (k.Expr, k.Stmt)):
            key = (id(node), strict)
            if key in seen:
                return ("ref", seen[key])
            seen[key] = len(seen)
            if not strict and isinstance(node, k.Const) and node.dtype in _MOVABLE:
                numbers.append(node)
                return ("number", node.dtype, node.lanes)
            return (type(node).__name__, *[of(getattr(node, name), strict or _strict(node, name))
                                           for name in k.field_names(type(node))])
        if isinstance(node, tuple):
            return tuple([of(item, strict) for item in node])
        if isinstance(node, k.Buffer):
            if node.is_const:
                return ("weights", weights[node.name], node.dtype, node.size)
            return ("buffer", node.name, node.dtype, node.size)
        return k.leaf_structure(node)
    try:
        key = (of(kernel.params, True), of(kernel.stack, True), bool(kernel.reuse), of(kernel.body, False))
    except k.UnknownStructure:
        return Loose(None, ())
    return Loose(key, tuple(numbers))


def _strict(node: k.Expr | k.Stmt, name: str) -> bool:
    if isinstance(node, k.Bin) and name == "b" and node.op in ("div", "rem"):
        return True
    return name in _STRICT_FIELDS.get(type(node), ())


def differing(group: list[Loose]) -> list[list[int]]:
    """The numbers not the same in every kernel of a group of one loose key, as slots of a table: each slot
    the positions (in the loose structures' order) that hold the same number as one another in every
    kernel (a zero point met at several places takes one slot)."""
    slots: dict[tuple, list[int]] = {}
    for i in range(len(group[0].numbers)):
        column = tuple(_bits(loose.numbers[i]) for loose in group)
        if any(bits != column[0] for bits in column[1:]):
            slots.setdefault(column, []).append(i)
    return list(slots.values())


def with_table(kernel: k.Kernel, loose: Loose, slots: list[list[int]]) -> k.Kernel | None:
    """The kernel with the numbers at the positions of each slot (of its loose structure) read from its
    slot of constant buffers of its own, one per type (named after the kernel); None if a table would be
    as large as weights joined as data, or the numbers are of more than TABLES types."""
    by_dtype: dict[str, list[list[int]]] = {}
    for positions in slots:
        by_dtype.setdefault(loose.numbers[positions[0]].dtype, []).append(positions)
    if len(by_dtype) > TABLES:
        return None
    replacement: dict[int, k.Expr] = {}
    for dtype, columns in sorted(by_dtype.items()):
        data = np.array([_value(loose.numbers[positions[0]]) for positions in columns], dtype=_NUMPY[dtype])
        if data.nbytes >= TABLE_BYTES:
            return None
        table = k.Buffer(f"{kernel.name}_numbers_{dtype}", dtype, len(columns), data)
        for slot, positions in enumerate(columns):
            load = k.Load(table, k.const(slot))
            for i in positions:
                c = loose.numbers[i]
                replacement[id(c)] = load if c.lanes == 1 else k.Broadcast(load, c.lanes)
    return dataclasses.replace(kernel, body=_rewritten(kernel.body, replacement))


def _rewritten(body: k.Block, replacement: dict[int, k.Expr]) -> k.Block:
    """`body` with the Consts named in `replacement` (by id) replaced where they are values, every other
    node kept (and shared subtrees kept shared) where nothing below it changed."""
    memo: dict[tuple[int, bool], object] = {}

    def walk(node: object, strict: bool) -> object:
        if isinstance(node, tuple):
            items = [walk(item, strict) for item in node]
            return node if all(a is b for a, b in zip(items, node)) else tuple(items)
        if not isinstance(node, (k.Expr, k.Stmt)):
            return node
        key = (id(node), strict)
        if key not in memo:
            if not strict and isinstance(node, k.Const) and node.dtype in _MOVABLE:
                memo[key] = replacement.get(id(node), node)
            else:
                names = k.field_names(type(node))
                new = {name: walk(getattr(node, name), strict or _strict(node, name)) for name in names}
                same = all(new[name] is getattr(node, name) for name in names)
                memo[key] = node if same else dataclasses.replace(node, **new)
        return memo[key]
    return walk(body, False)


def _value(c: k.Const) -> int | float:
    """The number as its type holds it (an integer wrapped to its width, as LLVM's constant takes it)."""
    if c.dtype in k.FLOATS:
        return float(c.value)
    bits = np.dtype(_NUMPY[c.dtype]).itemsize * 8
    v = int(c.value) & ((1 << bits) - 1)
    return v - (1 << bits) if c.dtype != "u8" and v >= 1 << (bits - 1) else v


def _bits(c: k.Const) -> tuple:
    """What tells two numbers apart: exact value and sign (0.0 is not -0.0)."""
    return (c.dtype, float(c.value).hex()) if c.dtype in k.FLOATS else (c.dtype, int(c.value))
