"""Kernel IR: a small loop language between graph ops and LLVM.

Expressions are immutable trees (shared subtrees are emitted once per statement); statements are
loops, stores and local variables. Element types: "f32", "f64", "i64", "i32", "i16", "i8", "u8" (uint8 and
bool, compared and divided as unsigned), "idx" (pointer-sized integer for indexing), "i1" (comparisons).
Integer "div" truncates toward zero and "rem" takes the dividend's sign; neither traps (a zero divisor
gives 0 and the dividend: see codegen). An expression with lanes > 1 is a vector. Arithmetic
operators build nodes and fold constants, so lowering code reads like the math it implements.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aot.schedule import Chosen

Number = int | float


class Expr:
    dtype: str
    lanes: int

    # Operators build Bin nodes; a Python number becomes a constant of the other operand's type.
    def __add__(self, o): return binop("add", self, o)
    def __radd__(self, o): return binop("add", o, self)
    def __sub__(self, o): return binop("sub", self, o)
    def __rsub__(self, o): return binop("sub", o, self)
    def __mul__(self, o): return binop("mul", self, o)
    def __rmul__(self, o): return binop("mul", o, self)
    def __truediv__(self, o): return binop("div", self, o)
    def __rtruediv__(self, o): return binop("div", o, self)
    def __neg__(self): return binop("sub", 0, self)


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Number
    dtype: str
    lanes: int = 1


@dataclass(frozen=True, eq=False)
class Var(Expr):
    name: str
    dtype: str = "idx"
    lanes: int = 1


@dataclass(frozen=True, eq=False)
class Load(Expr):
    buf: Buffer
    index: Expr
    lanes: int = 1
    fresh: bool = False     # read anew: never merged with an equal load nor moved past another fresh one

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buf.dtype


@dataclass(frozen=True, eq=False)
class Bin(Expr):
    op: str            # add sub mul div rem min max | and or xor shl shr | lt le gt ge eq ne
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "i1" if self.op in _COMPARE else self.a.dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.a.lanes


@dataclass(frozen=True, eq=False)
class Fma(Expr):
    a: Expr
    b: Expr
    c: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.c.dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.c.lanes


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.a.lanes


@dataclass(frozen=True, eq=False)
class Broadcast(Expr):
    value: Expr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.value.dtype


@dataclass(frozen=True, eq=False)
class Shuffle(Expr):
    """Lanes picked from a vector: lane i is value[picks[i]] (a splat of one lane, a slice). AArch64 takes
    a splat of a 16-bit lane as the by-element operand of SMLAL, a slice of the low or high half as is."""
    value: Expr
    picks: tuple[int, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.value.dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return len(self.picks)


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    """Numeric conversion (float -> int truncates toward zero; int narrowing wraps) or, with bitcast=True,
    reinterpretation. Float -> int of a value out of the integer's range is undefined unless `saturate`
    (then it clamps to the range and NaN gives 0: ONNX Cast; plain is cheaper on x86 where the value is
    known to fit, as in requantization)."""
    value: Expr
    dtype: str
    bitcast: bool = False
    saturate: bool = False

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.value.lanes


@dataclass(frozen=True, eq=False)
class Reinterpret(Expr):
    """The same bits as another type and lane count (e.g. 4 x i8 as one i32)."""
    value: Expr
    dtype: str
    lanes: int


@dataclass(frozen=True, eq=False)
class Accumulate(Expr):
    """acc (i32) plus products of the integer vectors a and b, summed into its lanes as the subclass says."""
    acc: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "i32"

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.acc.lanes


@dataclass(frozen=True, eq=False)
class Dot(Accumulate):
    """acc + groupwise dot products: lane l of acc (i32) adds sum over g < G of a[l*G+g] * b[l*G+g],
    a and b being 8- or 16-bit vectors with G times acc's lanes; b signed, a unsigned if `a_unsigned`.
    Targets with dot-product instructions (AVX-512 VNNI vpdpbusd, NEON sdot, Arm DSP SMLAD) do it in one."""
    a_unsigned: bool


@dataclass(frozen=True, eq=False)
class BytePairs(Expr):
    """Bytes 0 and 2 of a 32-bit word (bytes 1 and 3 if `odd`), sign-extended (zero-extended if
    `unsigned`) into the low and high 16-bit halves of an i32, plus `addend`'s halves if given (each
    half wraps on its own): the Arm DSP's sxtb16/sxtab16 (uxtb16/uxtab16, the odd bytes through a
    rotate). Activations and weights widened the same way line up pair for pair, so a Dot of the
    halves (SMLAD) multiplies matching bytes."""
    word: Expr
    odd: bool
    addend: Expr | None = None
    unsigned: bool = False

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "i32"

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return 1


@dataclass(frozen=True, eq=False)
class Sqrt(Expr):
    """Square root: the FPU's instruction where the target has one (correctly rounded); soft-float
    targets, where LLVM would call libm's sqrtf, compute `portable` instead (plain arithmetic)."""
    value: Expr
    portable: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.value.dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.value.lanes


@dataclass(frozen=True, eq=False)
class RoundInt(Expr):
    """A float rounded to the nearest integer, ties to even, as i32 (saturated): one conversion on
    FPUs that round in their default mode (Arm VFP's vcvtr); elsewhere `portable` (an i32 expression
    that gives the same value wherever the result is later clamped to a narrower range)."""
    value: Expr
    portable: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "i32"

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.value.lanes


@dataclass(frozen=True, eq=False)
class DoublingHigh(Expr):
    """gemmlowp's saturating rounding doubling high multiply of int32 lanes, floor((a * b + 2**30) / 2**31) but
    INT32_MAX for -2**31 * -2**31: one instruction where the target has it (NEON SQRDMULH / VQRDMULH, Helium
    VQRDMULH, on vectors); elsewhere `portable` (the same in int64, for operands that are never both -2**31)."""
    a: Expr
    b: Expr
    portable: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "i32"

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return self.a.lanes


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """Horizontal reduction of a vector to a scalar: op is "add" or "max"."""
    op: str
    value: Expr
    lanes: int = 1

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.value.dtype


@dataclass(frozen=True, eq=False)
class MaskedLoad(Expr):
    """`lanes` consecutive elements from buf[index]; lane l is read only if lo <= l < hi and is `fill`
    otherwise. Lanes outside [lo, hi) are never accessed, so they may lie outside the buffer (a window
    over padding): Arm's predicated loads (MVE, SVE) do this in one instruction."""
    buf: Buffer
    index: Expr
    lanes: int
    hi: Expr
    lo: Expr | None = None      # None: 0
    fill: Number = 0

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buf.dtype


@dataclass(frozen=True, eq=False)
class Lanes(Expr):
    """Values of one type and width side by side: of scalars, a vector whose lane i is values[i] (e.g.
    accumulators of neighbouring channels, gathered for a vector epilogue); of vectors, their concatenation
    (e.g. a pixel's accumulators, requantized and narrowed together)."""
    values: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.values[0].dtype

    @property
    def lanes(self) -> int:  # type: ignore[override]
        return len(self.values) * self.values[0].lanes


@dataclass(frozen=True, eq=False)
class RowDot(Accumulate):
    """acc plus the dot product of int8 vectors a and b, spread over acc's i32 lanes in whatever grouping
    the target sums fastest: only the total of acc's lanes is defined (Reduce it at the end). With one
    lane it is Helium's VMLADAVA (a may be int16, b int8 widened as it loads: VMLADAVA.S16); with four,
    32-bit NEON's VMULL.S8/VMLAL.S8 + VPADAL.S16. `pairs_fit`: no product is -128 * -128, so two
    products add in 16 bits."""
    pairs_fit: bool = False


@dataclass(frozen=True, eq=False)
class MatrixDot(Accumulate):
    """acc plus the products of a 2 x 8 int8 matrix a (16 bytes, row-major) with each 8 x 2 block of b, as
    Armv8.6's SMMLA takes them: b's 16-byte block q holds two rows of 8 bytes, and lane 4q + 2i + j of acc
    adds sum over k < 8 of a[8i + k] * b[16q + 8j + k]. In a convolution the rows of a are two pixels' 8
    input channels and those of b two output channels' weights."""


@dataclass(frozen=True, eq=False)
class WideningDot(Accumulate):
    """acc plus products of int8 vectors a and b summed as AArch64 NEON without a dot product sums them
    fastest: in each 16-byte block q of a and b, the products of bytes i and i + 8 add in 16 bits (SMULL,
    SMLAL2), then neighbouring 16-bit sums into a 32-bit lane (SADALP), so lane 4q + j of acc adds the
    products of the block's bytes 2j, 2j + 1, 2j + 8 and 2j + 9. The caller ensures each pair fits in 16
    bits: no two products of a pair are both -128 * -128 (weights in [-127, 127] do it)."""


_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}
_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "min": min, "max": max}


FLOATS = frozenset({"f32", "f64"})


def const(value: Number, dtype: str = "idx", lanes: int = 1) -> Const:
    return Const(float(value) if dtype in FLOATS else int(value), dtype, lanes)


def as_expr(value: Expr | Number, like: Expr | None = None) -> Expr:
    if isinstance(value, Expr):
        return value
    if like is not None:
        return const(value, "idx" if like.dtype == "i1" else like.dtype, like.lanes)
    return const(value, "f32" if isinstance(value, float) else "idx")


def binop(op: str, a: Expr | Number, b: Expr | Number) -> Expr:
    if not isinstance(a, Expr):
        a = as_expr(a, b if isinstance(b, Expr) else None)
    if not isinstance(b, Expr):
        b = as_expr(b, a)
    if a.lanes != b.lanes:        # a scalar meets a vector: splat it
        a, b = (Broadcast(a, b.lanes), b) if a.lanes == 1 else (a, Broadcast(b, a.lanes))
    if isinstance(a, Const) and isinstance(b, Const) and op in _FOLD and a.lanes == 1:
        return const(_FOLD[op](a.value, b.value), a.dtype)
    if a.dtype == "idx":          # keep index arithmetic small: x+0, x*1, x*0
        if op in ("add", "sub") and isinstance(b, Const) and b.value == 0:
            return a
        if op == "add" and isinstance(a, Const) and a.value == 0:
            return b
        if op == "mul" and isinstance(b, Const) and b.value in (0, 1):
            return a if b.value == 1 else b
        if op == "mul" and isinstance(a, Const) and a.value in (0, 1):
            return b if a.value == 1 else a
        if op == "div" and isinstance(b, Const) and b.value == 1:
            return a
    return Bin(op, a, b)


def minimum(a, b) -> Expr: return binop("min", a, b)
def maximum(a, b) -> Expr: return binop("max", a, b)
def fma(a: Expr, b: Expr, c: Expr) -> Expr: return Fma(*_splat(a, b, c))
def select(cond: Expr, a, b) -> Expr:
    a, b = as_expr(a, b if isinstance(b, Expr) else None), as_expr(b, a if isinstance(a, Expr) else None)
    # the condition too: a scalar operand of a vector kernel (Pow of a broadcast base) makes scalar
    # conditions meet vector values, and the other way round
    return Select(*_splat(cond, a, b))


def _splat(*exprs: Expr) -> list[Expr]:
    lanes = max(e.lanes for e in exprs)
    return [Broadcast(e, lanes) if e.lanes != lanes else e for e in exprs]


# --- statements --------------------------------------------------------------------------------

class Stmt:
    pass


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buf: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True, eq=False)
class For(Stmt):
    var: Var
    start: Expr
    stop: Expr
    body: Block
    step: int = 1


@dataclass(frozen=True, eq=False)
class Let(Stmt):
    """Bind an immutable value to `var` for the statements that follow in the same block."""
    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class Local(Stmt):
    """Declare a mutable local (a register after LLVM's mem2reg), readable through `var`."""
    var: Var
    init: Expr


@dataclass(frozen=True, eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class Block(Stmt):
    stmts: tuple[Stmt, ...]


TILE_OPS = {"config": 0, "zero": 1, "load": 1, "dot": 3, "store": 1, "release": 0}     # op: tile registers it names


@dataclass(frozen=True, eq=False)
class Tile(Stmt):
    """An x86 AMX tile instruction on tile registers `tiles` (numbers 0-7): "config" loads the tile
    shapes from the 64 bytes of `buf` (LDTILECFG; `tiles` empty), "zero" clears one (TILEZERO), "load" and
    "store" move one between its rows and `buf`'s bytes from `index` on, one row every `stride` bytes
    (TILELOADD, TILESTORED), "dot" adds to tiles[0] the products of unsigned tiles[1] and signed tiles[2]
    (TDPBUSD: C[m][n] += sum over k, i < 4 of A[m][4k + i] * B[k][4n + i]), "release" ends their use."""
    op: str
    tiles: tuple[int, ...] = ()
    buf: Buffer | None = None
    index: Expr | None = None
    stride: Expr | None = None


@dataclass(frozen=True, eq=False)
class PairLoop(Stmt):
    """The channel loop of an int8 register tile on the Arm DSP, as a loop of its own (the generic tile
    loop indexes every load from the loop variable and the tile's offsets): `steps` steps of 4 input
    channels, each taking pixel i's word x[pixel + i * pixel_stride + 4 step] and output channel j's word
    w[weights + 4 (step * nr + j)] (nr = the tile's channels), widening both into byte pairs as BytePairs
    does (the activations with `zero_pair` added, zero-extended if `unsigned`) and adding the products to
    accs[i][j], mutable int32 locals, two pairs at a time (SMLAD, wrapping as Dot). int16 weights are
    stored as those pairs already (BytePairArith.weights): the channel's two words, nothing to widen."""
    accs: tuple[tuple[Var, ...], ...]
    x: Buffer
    pixel: Expr
    pixel_stride: int
    w: Buffer
    weights: Expr
    steps: int
    unsigned: bool = False
    zero_pair: Expr | None = None
    to_end: bool = False    # the loop ends on the weight pointer, not on a counter (Knobs.pair_loop_to_end)


@dataclass(frozen=True, eq=False)
class Buffer:
    """A kernel's array: a pointer parameter, a constant (weights) emitted as read-only data, or scratch
    on the kernel's stack (listed in Kernel.stack, 64-byte aligned, undefined at the start of each call)."""
    name: str
    dtype: str
    size: int                              # elements
    data: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def nbytes(self) -> int:
        return self.size * {"f32": 4, "f64": 8, "i64": 8, "i32": 4, "i16": 2}.get(self.dtype, 1)

    def __getitem__(self, index: Expr | int) -> Load:
        return Load(self, as_expr(index))

    def vec(self, index: Expr | int, lanes: int) -> Load:
        return Load(self, as_expr(index), lanes)


@dataclass(frozen=True)
class Reuse:
    """A kernel's promise that its output may share bytes with one of its inputs, which dies with the
    call: the memory planner may then overlap them, and its verifier checks the placement against this.

    `exact`: element i of the output is written only after element i of the input is read, in any
    order and with elements of equal size, so the two may start at the same byte (and nowhere else in
    between). Otherwise `progress` lists checkpoints (written, needed) in bytes from the start of the
    output and of the input, each true at a point of the kernel's run (after a row, a tile, the reads or
    the writes of a pixel). A kernel running front to back has, by such a point, written only below
    `written`, and from there on reads the input only from `needed` on: the output may start `shift` =
    max(written - needed) bytes or more below the input. A kernel running back to front (`backward`) has
    written only from `written` on and reads only below `needed`: the output may start `shift` =
    max(needed - written) bytes or more above the input. Only the checkpoint that binds (the largest
    shift) need be listed: a convolution replays every phase of its run and keeps that one (see
    ops/conv/declarations.py). A pixel whose window is read whole before any of its results is written
    makes two phases (its reads, its writes), so its results may cover the very bytes it read."""

    input: int                              # position in node.inputs
    output: int = 0                         # position in node.outputs
    exact: bool = False
    progress: tuple[tuple[int, int], ...] = ()
    backward: bool = False

    @functools.cached_property          # the planner asks often
    def shift(self) -> int:
        if self.exact:
            return 0
        sign = -1 if self.backward else 1
        return max(sign * (written - needed) for written, needed in self.progress)

    def allows(self, source_offset: int, result_offset: int) -> bool:
        """Whether the output at `result_offset` may overlap the input at `source_offset`."""
        if self.exact:
            return source_offset == result_offset
        delta = source_offset - result_offset
        return -delta >= self.shift if self.backward else delta >= self.shift


@dataclass(frozen=True, eq=False)
class Kernel:
    name: str
    params: tuple[Buffer, ...]             # in call order: inputs then outputs
    body: Block
    reuse: tuple[Reuse, ...] = ()           # outputs that may overlap a dying input (see Reuse)
    schedule: Chosen | None = None          # the schedule it was emitted for (templates that have one)
    stack: tuple[Buffer, ...] = ()          # scratch buffers on the stack
    whole_pixels: int = 0                   # first pixels computed whole (conv Order.careful): their code
                                            # overlaps the input closer; a lean variant has none


def uses_tiles(kernel: Kernel) -> bool:
    """Whether the kernel runs AMX tile instructions (the wrapper must ask the OS for the tile state)."""
    stack: list[Stmt] = [kernel.body]
    while stack:
        s = stack.pop()
        if isinstance(s, Tile):
            return True
        if isinstance(s, Block):
            stack.extend(s.stmts)
        elif isinstance(s, For):
            stack.append(s.body)
    return False


def constants(kernel: Kernel) -> list[Buffer]:
    """The constant buffers (weights) the kernel's body reads, each once, in the order first met."""
    return list(_contents(kernel)[0])


def size(kernel: Kernel) -> int:
    """How many distinct expressions and statements the kernel's body holds: a measure of the code it
    compiles to (the IR is already tiled and unrolled as it runs)."""
    return _contents(kernel)[1]


_CONTENTS: weakref.WeakKeyDictionary[Kernel, tuple[tuple[Buffer, ...], int]] = weakref.WeakKeyDictionary()


def _contents(kernel: Kernel) -> tuple[tuple[Buffer, ...], int]:
    """The kernel's constants and size, from one walk of its body, kept while the kernel lives."""
    if kernel in _CONTENTS:
        return _CONTENTS[kernel]
    found: dict[str, Buffer] = {}
    seen: set[int] = set()
    stack: list[object] = [kernel.body]
    while stack:
        node = stack.pop()
        if id(node) in seen:        # expressions are shared within a body: visit each once
            continue
        seen.add(id(node))
        if isinstance(node, Buffer):
            if node.is_const:
                found.setdefault(node.name, node)
        elif isinstance(node, tuple):
            stack.extend(reversed(node))
        elif isinstance(node, (Expr, Stmt)):
            stack.extend(getattr(node, name) for name in field_names(type(node))[::-1])
    _CONTENTS[kernel] = result = (tuple(found.values()), len(seen))
    return result


def structure(kernel: Kernel) -> tuple | None:
    """Everything code generation reads of the kernel but its name and its weights' names and bytes: two
    kernels of one structure compile to one function of their weights. Every field of every node of
    the body counts (shared subexpressions as references to their first occurrence; numbers by type and
    exact value, so 0.0 is not -0.0), parameters and stack buffers by name, type and size, weights by
    the order first met, type and size. None where the body holds a value of a kind not listed here."""
    weights = {buf.name: i for i, buf in enumerate(constants(kernel))}
    seen: dict[int, int] = {}

    def of(node: object) -> object:
        if isinstance(node, (Expr, Stmt)):         # the most common first
            key = id(node)
            if key in seen:
                return ("ref", seen[key])
            seen[key] = len(seen)
            return (type(node).__name__, *[of(getattr(node, name)) for name in field_names(type(node))])
        if isinstance(node, tuple):
            return tuple([of(item) for item in node])
        if isinstance(node, Buffer):
            if node.is_const:
                return ("weights", weights[node.name], node.dtype, node.size)
            return ("buffer", node.name, node.dtype, node.size)
        return leaf_structure(node)
    try:
        return (of(kernel.params), of(kernel.stack), bool(kernel.reuse), of(kernel.body))
    except UnknownStructure:
        return None


def leaf_structure(node: object) -> tuple:
    """A field that is not a node, a tuple or a buffer, as structure() compares it: strings and numbers by
    type and exact value; anything else raises UnknownStructure."""
    if isinstance(node, str):
        return ("str", node)
    if isinstance(node, (float, np.floating)):
        return (type(node).__name__, float(node).hex())
    if node is None or isinstance(node, (bool, int, np.integer, np.bool_)):
        return (type(node).__name__, node.item() if isinstance(node, np.generic) else node)
    raise UnknownStructure


@functools.cache
def field_names(cls: type) -> tuple[str, ...]:
    """The names of a node class's fields, in order (dataclasses.fields is slow to ask per node)."""
    return tuple(f.name for f in fields(cls))


class UnknownStructure(Exception):
    """A value in a kernel body that structure() does not know how to compare."""


class Builder:
    """Collects statements; loops nest with `with b.loop(...) as i:`."""

    def __init__(self) -> None:
        self._stack: list[list[Stmt]] = [[]]
        self._names: dict[str, int] = {}

    def _fresh(self, hint: str) -> str:
        n = self._names.get(hint, 0)
        self._names[hint] = n + 1
        return f"{hint}{n}"

    def emit(self, stmt: Stmt) -> None:
        self._stack[-1].append(stmt)

    def store(self, buf: Buffer, index: Expr | int, value: Expr) -> None:
        self.emit(Store(buf, as_expr(index), value))

    def let(self, hint: str, value: Expr) -> Var:
        var = Var(self._fresh(hint), value.dtype, value.lanes)
        self.emit(Let(var, value))
        return var

    def local(self, hint: str, init: Expr) -> Var:
        var = Var(self._fresh(hint), init.dtype, init.lanes)
        self.emit(Local(var, init))
        return var

    def assign(self, var: Var, value: Expr) -> None:
        self.emit(Assign(var, value))

    def loop(self, hint: str, start: Expr | int, stop: Expr | int, step: int = 1) -> _LoopScope:
        return _LoopScope(self, Var(self._fresh(hint)), as_expr(start), as_expr(stop), step)

    def chunks(self, hint: str, n: int, lanes: int, body) -> None:
        """body(index, width) over [0, n): full vectors of `lanes`, then a scalar tail."""
        main = n - n % lanes if lanes > 1 else 0
        if main:
            with self.loop(hint, 0, main, lanes) as i:
                body(i, lanes)
        if n > main:
            with self.loop(hint, main, n) as i:
                body(i, 1)

    def block(self) -> Block:
        assert len(self._stack) == 1
        return Block(tuple(self._stack[0]))


class _LoopScope:
    def __init__(self, builder: Builder, var: Var, start: Expr, stop: Expr, step: int):
        self.b, self.var, self.start, self.stop, self.step = builder, var, start, stop, step

    def __enter__(self) -> Var:
        self.b._stack.append([])
        return self.var

    def __exit__(self, *exc) -> None:
        body = Block(tuple(self.b._stack.pop()))
        if exc[0] is None:
            self.b.emit(For(self.var, self.start, self.stop, body, self.step))


def dump(kernel: Kernel) -> str:
    """Readable text of a kernel, for tests and --dump-kernels."""
    lines = [f"kernel {kernel.name}({', '.join(f'{p.name}: {p.dtype}[{p.size}]' for p in kernel.params)})"]
    lines += [f"  stack {buf.name}: {buf.dtype}[{buf.size}]" for buf in kernel.stack]

    def ex(e: Expr) -> str:
        if isinstance(e, Const):
            return repr(e.value) if e.lanes == 1 else f"splat({e.value!r}, {e.lanes})"
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return (f"{e.buf.name}[{ex(e.index)}]" + (f"<{e.lanes}>" if e.lanes > 1 else "")
                    + (" fresh" if e.fresh else ""))
        if isinstance(e, Bin):
            return f"{e.op}({ex(e.a)}, {ex(e.b)})"
        if isinstance(e, Fma):
            return f"fma({ex(e.a)}, {ex(e.b)}, {ex(e.c)})"
        if isinstance(e, Select):
            return f"select({ex(e.cond)}, {ex(e.a)}, {ex(e.b)})"
        if isinstance(e, Broadcast):
            return f"splat({ex(e.value)}, {e.lanes})"
        if isinstance(e, Shuffle):
            return f"shuffle({ex(e.value)}, {list(e.picks)})"
        if isinstance(e, Cast):
            kind = "bitcast" if e.bitcast else "cast_sat" if e.saturate else "cast"
            return f"{kind}<{e.dtype}>({ex(e.value)})"
        if isinstance(e, Reduce):
            return f"reduce_{e.op}({ex(e.value)})"
        if isinstance(e, Sqrt):
            return f"sqrt({ex(e.value)})"
        if isinstance(e, RoundInt):
            return f"round_int({ex(e.value)})"
        if isinstance(e, DoublingHigh):
            return f"doubling_high({ex(e.a)}, {ex(e.b)})"
        if isinstance(e, Reinterpret):
            return f"reinterpret<{e.dtype}x{e.lanes}>({ex(e.value)})"
        if isinstance(e, Dot):
            return f"dot{'_u8' if e.a_unsigned else ''}({ex(e.acc)}, {ex(e.a)}, {ex(e.b)})"
        if isinstance(e, MaskedLoad):
            lo = ex(e.lo) if e.lo is not None else "0"
            return f"{e.buf.name}[{ex(e.index)}]<{e.lanes}, lanes {lo}..{ex(e.hi)} else {e.fill!r}>"
        if isinstance(e, MatrixDot):
            return f"matrix_dot({ex(e.acc)}, {ex(e.a)}, {ex(e.b)})"
        if isinstance(e, WideningDot):
            return f"widening_dot({ex(e.acc)}, {ex(e.a)}, {ex(e.b)})"
        if isinstance(e, RowDot):
            return f"rowdot({ex(e.acc)}, {ex(e.a)}, {ex(e.b)})"
        if isinstance(e, Lanes):
            return f"lanes({', '.join(ex(v) for v in e.values)})"
        if isinstance(e, BytePairs):
            name = f"{'u' if e.unsigned else 's'}xt{'a' if e.addend is not None else ''}b16"
            args = ([ex(e.addend)] if e.addend is not None else []) + [ex(e.word)]
            return f"{name}{'_odd' if e.odd else ''}({', '.join(args)})"
        raise TypeError(e)

    def st(s: Stmt, depth: int) -> None:
        pad = "  " * depth
        if isinstance(s, Block):
            for inner in s.stmts:
                st(inner, depth)
        elif isinstance(s, For):
            step = f", step {s.step}" if s.step != 1 else ""
            lines.append(f"{pad}for {s.var.name} in [{ex(s.start)}, {ex(s.stop)}{step}):")
            st(s.body, depth + 1)
        elif isinstance(s, Store):
            lines.append(f"{pad}{s.buf.name}[{ex(s.index)}] = {ex(s.value)}")
        elif isinstance(s, (Let, Local, Assign)):
            kw = {Let: "let ", Local: "var ", Assign: ""}[type(s)]
            value = s.init if isinstance(s, Local) else s.value
            lines.append(f"{pad}{kw}{s.var.name} = {ex(value)}")
        elif isinstance(s, PairLoop):
            accs = ", ".join(v.name for row in s.accs for v in row)
            zero = f", add {ex(s.zero_pair)}" if s.zero_pair is not None else ""
            lines.append(f"{pad}pair_loop[{len(s.accs)}x{len(s.accs[0])}]({accs} += {s.x.name}[{ex(s.pixel)}, "
                         f"pixels every {s.pixel_stride}] . {s.w.name}[{ex(s.weights)}], {s.steps} steps"
                         f"{', unsigned' if s.unsigned else ''}{zero}{', to the weights end' if s.to_end else ''})")
        elif isinstance(s, Tile):
            args = [f"tmm{t}" for t in s.tiles] + ([s.buf.name] if s.buf is not None else [])
            args += [f"at {ex(s.index)}"] if s.index is not None else []
            args += [f"stride {ex(s.stride)}"] if s.stride is not None else []
            lines.append(f"{pad}tile_{s.op}({', '.join(args)})")

    st(kernel.body, 1)
    return "\n".join(lines)
