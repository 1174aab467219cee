"""How a convolution walks its output: loop orders (Order), the tiles of each output row (Columns) and
the loops that call a tile body for each (spatial_loops)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aot.kernel.ir import (
    Builder,
    Expr,
    binop,
    const,
    select,
)
from aot.ops.conv.geometry import Geometry


@dataclass(frozen=True)
class Order:
    """How spatial_loops walks the output: tiles of up to `mr` columns; images and rows last to first if
    `backward`; and the first `careful` pixels of image 0 (within its first row) one at a time, each
    computed whole: all of its window read before any of its results is stored. Near where the output
    catches up with the input, that lets it overlap the input closer (see declarations.progress). The tiles of
    a row run first to last, but last to first in a backward order with a careful prefix, which then, at
    the start of image 0's first row, runs last."""
    mr: int
    backward: bool = False
    careful: int = 0
    border: str = "clip"    # how Columns covers the border columns: "clip" or "tiles"

    @property
    def columns_backward(self) -> bool:
        return self.backward and self.careful > 0


def _row_widths(ow: int, mr: int) -> list[int]:
    """Widths of tiles covering a row of `ow` columns left to right: tiles of `mr`, the last two evened
    out when the row is not a whole number of them (14 in tiles of 6: 6 + 4 + 4; 7: 4 + 3)."""
    count = -(-ow // mr)
    widths = [mr] * count
    if count * mr > ow:
        last = ow - (count - 2) * mr if count > 1 else ow      # the columns of the last two tiles (or one)
        widths[-2:] = [last - last // 2, last // 2] if count > 1 else [last]
    return widths


@dataclass(frozen=True)
class Columns:
    """The tiles of one output row. With border "clip": interior columns (window inside the input) from
    `lo` in tiles of `width` up to `full`, the rest of the interior up to `end` as one narrower tile, then
    every other column alone, its window clipped at run time (one code copy for both sides). With border
    "tiles": `runs` cover the row left to right in tiles of up to mr columns (_row_widths), each run
    (first column, width, count, clipped); a clipped run is one tile that reaches into a border, at a
    constant column, so each tap of its window covers a range of its pixels known at compile time
    (Geometry.tap_pixels)."""
    lo: int
    width: int
    full: int
    end: int
    borders: int        # columns outside [lo, end)
    runs: tuple[tuple[int, int, int, bool], ...] = ()

    @staticmethod
    def of(g: Geometry, mr: int, border: str = "clip") -> Columns:
        lo, hi = g.interior(1)
        if border == "tiles":
            runs: list[tuple[int, int, int, bool]] = []
            ow0 = 0
            for width in _row_widths(g.ow, mr):
                clipped = ow0 < lo or ow0 + width > hi
                if runs and not clipped and not runs[-1][3] and runs[-1][1] == width:
                    runs[-1] = (runs[-1][0], width, runs[-1][2] + 1, False)
                else:
                    runs.append((ow0, width, 1, clipped))
                ow0 += width
            return Columns(lo, mr, lo, lo, 0, tuple(runs))
        assert border == "clip", border
        width = min(mr, hi - lo)
        full = lo + (hi - lo) // width * width if width else lo
        end = hi if hi - full > 1 else full
        return Columns(lo, width, full, end, lo + g.ow - end)

    def border(self, e):
        """The column of border column e (left ones first), for an int or an Expr."""
        if isinstance(e, int):
            return e if e < self.lo else e + (self.end - self.lo)
        return select(binop("lt", e, self.lo), e, e + (self.end - self.lo))

    def tiles(self, careful: int, backward: bool) -> list[tuple[int, int, bool]]:
        """(first column, width, computed whole) of each tile of a row in the order spatial_loops runs
        them (last to first if `backward`), the row's first `careful` pixels computed whole."""
        if self.runs:
            assert not careful
            row = [(ow0 + k * width, width, False) for ow0, width, count, _ in self.runs for k in range(count)]
            return row[::-1] if backward else row
        row = [(ow, 1, True) for ow in range(careful)]
        if self.full > self.lo:
            row += [(ow, self.width, False) for ow in range(max(careful, self.lo), self.full, self.width)]
        if self.end > self.full:
            row.append((self.full, self.end - self.full, False))
        row += [(self.border(e), 1, False) for e in range(self.lo if careful else 0, self.borders)]
        return row[::-1] if backward else row


TileFn = Callable[[int, Expr, Expr, Expr, Expr, Expr, Expr, Expr], None]


def spatial_loops(b: Builder, g: Geometry, order: Order, tile: TileFn, whole: TileFn | None = None) -> None:
    """Emit loops over (n, oh, ow) calling tile(mr, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) per output tile,
    in `order` (see Order and Columns); whole(1, ...) computes each careful pixel. Row windows are clipped
    only if some row needs it. With border "tiles", a tile reaching into a border comes at a constant
    column ow0 (a Const) with kw_lo = kw_hi = None: its taps are Geometry.tap_pixels(ow0, width)."""
    row_lo, row_hi = g.interior(0)
    cols = Columns.of(g, order.mr, order.border)
    careful, descending = order.careful, order.columns_backward
    assert careful == 0 or (whole is not None and not cols.runs and cols.lo <= careful <= cols.full
                            and (careful - cols.lo) % cols.width == 0)
    with b.loop("n", 0, g.n) as n:
        n = b.let("n", (g.n - 1) - n) if order.backward and g.n > 1 else n
        with b.loop("oh", 0, g.oh) as oh:
            oh = b.let("oh", (g.oh - 1) - oh) if order.backward else oh
            if row_lo == 0 and row_hi == g.oh:
                kh_lo, kh_hi = const(0), const(g.kh)
            else:
                kh_lo, kh_hi = b.let("kh_lo", g.window(oh, 0)[0]), b.let("kh_hi", g.window(oh, 0)[1])
            first = None        # the careful row: image 0's first
            if careful:
                first = b.let("first", binop("eq", oh, 0) if g.n == 1 else
                              binop("and", binop("eq", oh, 0), binop("eq", n, 0)))

            def in_first(value: int, otherwise: int) -> Expr:
                return select(first, value, otherwise) if first is not None else const(otherwise)

            def clipped(ow: Expr, fn: TileFn) -> None:
                kw_lo, kw_hi = g.window(ow, 1)
                fn(1, n, oh, ow, kh_lo, kh_hi, b.let("kw_lo", kw_lo), b.let("kw_hi", kw_hi))

            def whole_pixels() -> None:
                if careful:
                    with b.loop("p", 0, in_first(careful, 0)) as p:
                        clipped(b.let("ow", (careful - 1) - p) if descending else p, whole)

            def interior() -> None:
                if cols.full > cols.lo:
                    start = in_first(careful, cols.lo) if careful else const(cols.lo)
                    if not descending:
                        with b.loop("ow", start, cols.full, cols.width) as ow:
                            tile(cols.width, n, oh, ow, kh_lo, kh_hi, const(0), const(g.kw))
                        return
                    with b.loop("t", 0, in_first((cols.full - careful) // cols.width,
                                                 (cols.full - cols.lo) // cols.width)) as t:
                        ow = b.let("ow", (cols.full - cols.width) - t * cols.width)
                        tile(cols.width, n, oh, ow, kh_lo, kh_hi, const(0), const(g.kw))

            def leftover() -> None:
                if cols.end > cols.full:
                    tile(cols.end - cols.full, n, oh, const(cols.full), kh_lo, kh_hi, const(0), const(g.kw))

            def borders() -> None:
                if cols.borders:
                    skip = in_first(cols.lo, 0) if careful else const(0)     # done whole in the careful row
                    if not descending:
                        with b.loop("e", skip, cols.borders) as e:
                            clipped(b.let("ow", cols.border(e)), tile)
                        return
                    with b.loop("e", 0, cols.borders - skip) as e:
                        clipped(b.let("ow", cols.border((cols.borders - 1) - e)), tile)

            def tiled() -> None:
                for ow0, width, count, clip in cols.runs:
                    if clip:
                        tile(width, n, oh, const(ow0), kh_lo, kh_hi, None, None)
                    elif count == 1:
                        tile(width, n, oh, const(ow0), kh_lo, kh_hi, const(0), const(g.kw))
                    else:
                        with b.loop("ow", ow0, ow0 + count * width, width) as ow:
                            tile(width, n, oh, ow, kh_lo, kh_hi, const(0), const(g.kw))

            phases = (tiled,) if cols.runs else (whole_pixels, interior, leftover, borders)
            for phase in reversed(phases) if descending else phases:
                phase()
