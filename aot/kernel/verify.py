"""The kernel-IR verifier, run on every kernel before code generation.

Types: operands of an operation agree in element type and lane count, conditions are i1, a store
writes its buffer's element type, indices are scalar `idx`, variables are bound before use and
assigned only when mutable. Bounds: an index whose range follows from constant loop bounds (interval
arithmetic over the loop variables) must stay inside its buffer, vector lanes included. Indices that
depend on run-time loop bounds, loaded values or selects (whose arms are valid only under their
condition) are not bounded here.
"""

from __future__ import annotations

from aot.errors import InternalError
from aot.kernel import ir as k

Interval = tuple[int, int] | None      # inclusive [lo, hi]; None: not known at compile time

_INTEGERS = {"i64", "i32", "i16", "i8", "u8", "idx"}
_BITS = {"f32": 32, "f64": 64, "i64": 64, "i32": 32, "i16": 16, "i8": 8, "u8": 8, "i1": 1}


def verify_kernel(kernel: k.Kernel, index_bits: int = 64) -> None:
    """Raise InternalError naming the kernel and the offending statement if the kernel is ill-formed."""
    _Verifier(kernel, index_bits).block(kernel.body)


class _Verifier:
    def __init__(self, kernel: k.Kernel, index_bits: int):
        self.kernel = kernel
        self.params = set(kernel.params) | set(kernel.stack)
        self.bits = dict(_BITS, idx=index_bits)
        self.scope: dict[str, k.Var] = {}
        self.mutable: set[str] = set()
        self.ranges: dict[str, Interval] = {}
        self.checked: set[int] = set()
        self.memo: dict[int, Interval] = {}

    def fail(self, why: str) -> InternalError:
        return InternalError(f"kernel {self.kernel.name}: {why}")

    # --- statements ---
    def block(self, block: k.Block) -> None:
        outer = dict(self.scope)
        for stmt in block.stmts:
            self.stmt(stmt)
        self.scope = outer

    def stmt(self, s: k.Stmt) -> None:
        if isinstance(s, k.Block):
            self.block(s)
        elif isinstance(s, k.Store):
            self.access(s.buf, s.index, s.value.lanes, store=True)
            self.expr(s.value)
            if s.value.dtype != s.buf.dtype:
                raise self.fail(f"stores {s.value.dtype} into {s.buf.name}, a {s.buf.dtype} buffer")
        elif isinstance(s, k.For):
            self.scalar_index(s.start, "a loop start")
            self.scalar_index(s.stop, "a loop stop")
            start, stop = self.interval(s.start), self.interval(s.stop)
            constant = start is not None and stop is not None and start[0] == start[1] and stop[0] == stop[1]
            if constant and stop[0] <= start[0]:
                return                      # never runs
            last = start[0] + (stop[0] - 1 - start[0]) // s.step * s.step if constant else 0
            self.bind(s.var, (start[0], last) if constant else None)
            self.block(s.body)
        elif isinstance(s, (k.Let, k.Local)):
            value = s.value if isinstance(s, k.Let) else s.init
            self.expr(value)
            if (value.dtype, value.lanes) != (s.var.dtype, s.var.lanes):
                raise self.fail(f"{s.var.name} is {s.var.dtype}x{s.var.lanes} but bound to a "
                                f"{value.dtype}x{value.lanes} value")
            self.bind(s.var, self.interval(value) if isinstance(s, k.Let) else None)
            if isinstance(s, k.Local):
                self.mutable.add(s.var.name)
        elif isinstance(s, k.Assign):
            if s.var.name not in self.mutable or self.scope.get(s.var.name) is not s.var:
                raise self.fail(f"assigns {s.var.name}, which is not a mutable local in scope")
            self.expr(s.value)
            if (s.value.dtype, s.value.lanes) != (s.var.dtype, s.var.lanes):
                raise self.fail(f"assigns a {s.value.dtype}x{s.value.lanes} value to {s.var.name} "
                                f"({s.var.dtype}x{s.var.lanes})")
        elif isinstance(s, k.Tile):
            self.tile(s)
        elif isinstance(s, k.PairLoop):
            self.pair_loop(s)
        else:
            raise self.fail(f"unknown statement {type(s).__name__}")

    def tile(self, s: k.Tile) -> None:
        """An AMX statement names as many tile registers as its op takes, each 0-7; a configuration reads
        64 bytes, a load or store one row from its index on (the rest follow at its stride)."""
        count = k.TILE_OPS.get(s.op)
        if count is None or len(s.tiles) != count or any(not 0 <= t < 8 for t in s.tiles):
            raise self.fail(f"tile_{s.op} of tiles {list(s.tiles)}")
        if (s.buf is not None) != (s.op in ("config", "load", "store")):
            raise self.fail(f"tile_{s.op} {'without' if s.buf is None else 'with'} a buffer")
        if s.op == "config" and s.buf.nbytes != 64:
            raise self.fail(f"tile configuration {s.buf.name} of {s.buf.nbytes} bytes, not 64")
        if s.op in ("load", "store"):
            if s.index is None or s.stride is None:
                raise self.fail(f"tile_{s.op} without an index and a stride")
            self.access(s.buf, s.index, 1, store=s.op == "store")
            self.scalar_index(s.stride, "a tile row stride")

    def pair_loop(self, s: k.PairLoop) -> None:
        """A full tile of int32 locals over bytes, every word of every step inside its buffer."""
        nr = len(s.accs[0]) if s.accs else 0
        if not nr or s.steps < 1 or any(len(row) != nr for row in s.accs):
            raise self.fail(f"pair_loop of {[len(row) for row in s.accs]} accumulators over {s.steps} steps")
        if s.x.dtype not in ("i8", "u8") or s.w.dtype not in ("i8", "i16"):
            raise self.fail(f"pair_loop over {s.x.dtype} activations and {s.w.dtype} weights, not bytes "
                            "and bytes or their pairs")
        for var in (v for row in s.accs for v in row):
            if var.name not in self.mutable or self.scope.get(var.name) is not var or var.dtype != "i32":
                raise self.fail(f"pair_loop accumulates into {var.name}, which is no mutable int32 local in scope")
        if s.zero_pair is not None:
            self.expr(s.zero_pair)
            if (s.zero_pair.dtype, s.zero_pair.lanes) != ("i32", 1):
                raise self.fail("pair_loop's zero pair is not one int32")
        last = 4 * (s.steps - 1)
        self.access(s.x, s.pixel, last + (len(s.accs) - 1) * s.pixel_stride + 4, store=False)
        self.access(s.w, s.weights, last * nr + 4 * nr, store=False)

    def bind(self, var: k.Var, interval: Interval) -> None:
        self.scope[var.name] = var
        self.ranges[var.name] = interval

    # --- expressions ---
    def expr(self, e: k.Expr) -> None:
        if id(e) in self.checked:
            return
        self.checked.add(id(e))
        if isinstance(e, k.Const):
            return
        if isinstance(e, k.Var):
            if self.scope.get(e.name) is not e:
                raise self.fail(f"reads {e.name} outside the scope that binds it")
            return
        if isinstance(e, k.Load):
            self.access(e.buf, e.index, e.lanes, store=False)
            return
        if isinstance(e, k.MaskedLoad):
            self.masked_access(e)
            return
        parts = [getattr(e, f) for f in e.__dataclass_fields__ if isinstance(getattr(e, f), k.Expr)]
        for part in parts:
            self.expr(part)
        self.types(e)

    def types(self, e: k.Expr) -> None:
        if isinstance(e, k.Bin):
            if (e.a.dtype, e.a.lanes) != (e.b.dtype, e.b.lanes):
                raise self.fail(f"{e.op} of {e.a.dtype}x{e.a.lanes} and {e.b.dtype}x{e.b.lanes}")
        elif isinstance(e, k.Fma):
            if len({(x.dtype, x.lanes) for x in (e.a, e.b, e.c)}) != 1 or e.c.dtype not in k.FLOATS:
                raise self.fail("fma operands differ in type or lanes, or are not floats")
        elif isinstance(e, k.Select):
            if e.cond.dtype != "i1" or e.cond.lanes not in (1, e.a.lanes):
                raise self.fail(f"select on a {e.cond.dtype}x{e.cond.lanes} condition")
            if (e.a.dtype, e.a.lanes) != (e.b.dtype, e.b.lanes):
                raise self.fail(f"select between {e.a.dtype}x{e.a.lanes} and {e.b.dtype}x{e.b.lanes}")
        elif isinstance(e, k.Broadcast):
            if e.value.lanes != 1:
                raise self.fail("broadcast of a vector")
        elif isinstance(e, k.Shuffle):
            if e.value.lanes < 2 or not e.picks or any(not 0 <= i < e.value.lanes for i in e.picks):
                raise self.fail(f"shuffle picks {list(e.picks)} from {e.value.lanes} lanes")
        elif isinstance(e, k.Cast):
            if e.bitcast and self.bits[e.value.dtype] != self.bits[e.dtype]:
                raise self.fail(f"bitcast of {e.value.dtype} to {e.dtype}")
        elif isinstance(e, k.Reinterpret):
            if self.bits[e.value.dtype] * e.value.lanes != self.bits[e.dtype] * e.lanes:
                raise self.fail(f"reinterpret of {e.value.dtype}x{e.value.lanes} as {e.dtype}x{e.lanes}")
        elif isinstance(e, k.RowDot):
            operands = {("i8", "i8")} | ({("i16", "i8")} if e.acc.lanes == 1 else set())
            if e.acc.dtype != "i32" or (e.a.dtype, e.b.dtype) not in operands or e.a.lanes != e.b.lanes \
                    or e.a.lanes % e.acc.lanes:
                raise self.fail("row dot of operands that are not int8 vectors (or int16 by int8 into one lane) "
                                "of a multiple of the lanes")
        elif isinstance(e, k.MatrixDot):
            if e.acc.dtype != "i32" or (e.a.dtype, e.b.dtype) != ("i8", "i8") or e.a.lanes != 16 \
                    or e.b.lanes != 4 * e.acc.lanes or e.acc.lanes % 4:
                raise self.fail("matrix dot of operands that are not a 2 x 8 int8 block and 16 bytes per 4 lanes")
        elif isinstance(e, k.WideningDot):
            if e.acc.dtype != "i32" or (e.a.dtype, e.b.dtype) != ("i8", "i8") or e.a.lanes != e.b.lanes \
                    or e.a.lanes != 4 * e.acc.lanes or e.acc.lanes % 4:
                raise self.fail("widening dot of operands that are not int8 blocks of 16 bytes per 4 lanes")
        elif isinstance(e, k.Lanes):
            if any((v.dtype, v.lanes) != (e.dtype, e.values[0].lanes) for v in e.values):
                raise self.fail("lanes of a vector differ in type or width")
        elif isinstance(e, k.DoublingHigh):
            if any((v.dtype, v.lanes) != ("i32", e.a.lanes) for v in (e.a, e.b, e.portable)):
                raise self.fail("doubling_high of operands that are not i32 of one width, or its portable form")
        elif isinstance(e, k.RoundInt):
            if e.value.dtype != "f32" or (e.portable.dtype, e.portable.lanes) != ("i32", e.value.lanes):
                raise self.fail("round_int of a non-float, or its portable form is not i32 of as many lanes")
        elif isinstance(e, k.BytePairs):
            if any(x is not None and (x.dtype, x.lanes) != ("i32", 1) for x in (e.word, e.addend)):
                raise self.fail("byte pairs of something other than a 32-bit word")
        elif isinstance(e, k.Dot):
            if e.acc.dtype != "i32" or e.a.lanes != e.b.lanes or e.a.lanes % e.acc.lanes:
                raise self.fail("dot operands do not group into the accumulator's lanes")

    def scalar_index(self, e: k.Expr, what: str) -> None:
        self.expr(e)
        if e.dtype != "idx" or e.lanes != 1:
            raise self.fail(f"{what} is {e.dtype}x{e.lanes}, not a scalar index")

    def access(self, buf: k.Buffer, index: k.Expr, lanes: int, store: bool) -> None:
        verb = "stores to" if store else "loads from"
        if buf not in self.params and not buf.is_const:
            raise self.fail(f"{verb} {buf.name}, which is neither a parameter nor a constant")
        if store and buf.is_const:
            raise self.fail(f"stores to constant {buf.name}")
        self.scalar_index(index, f"an index into {buf.name}")
        span = self.interval(index)
        if span is not None and (span[0] < 0 or span[1] + lanes > buf.size):
            raise self.fail(f"{verb} {buf.name}[{span[0]}..{span[1] + lanes - 1}], outside its {buf.size} elements")

    def masked_access(self, e: k.MaskedLoad) -> None:
        """A masked load's window may reach outside its buffer (only its active lanes are read)."""
        if e.buf not in self.params and not e.buf.is_const:
            raise self.fail(f"loads from {e.buf.name}, which is neither a parameter nor a constant")
        self.scalar_index(e.index, f"an index into {e.buf.name}")
        for bound in (e.hi, e.lo):
            if bound is not None:
                self.scalar_index(bound, f"a lane bound of a load from {e.buf.name}")

    # --- index ranges ---
    def interval(self, e: k.Expr) -> Interval:
        key = id(e)
        if key not in self.memo:
            self.memo[key] = self._interval(e)
        return self.memo[key]

    def _interval(self, e: k.Expr) -> Interval:
        if e.lanes != 1 or e.dtype not in _INTEGERS:
            return None
        if isinstance(e, k.Const):
            return (int(e.value), int(e.value))
        if isinstance(e, k.Var):
            return self.ranges.get(e.name)
        if not isinstance(e, k.Bin):
            return None
        a, b = self.interval(e.a), self.interval(e.b)
        if a is None or b is None:
            return None
        if e.op == "add":
            return (a[0] + b[0], a[1] + b[1])
        if e.op == "sub":
            return (a[0] - b[1], a[1] - b[0])
        if e.op == "mul":
            corners = [x * y for x in a for y in b]
            return (min(corners), max(corners))
        if e.op in ("min", "max"):
            pick = min if e.op == "min" else max
            return (pick(a[0], b[0]), pick(a[1], b[1]))
        if e.op == "div" and b[0] > 0 and a[0] >= 0:
            return (a[0] // b[1], a[1] // b[0])
        return None
