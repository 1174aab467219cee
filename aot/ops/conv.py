"""Conv (NHWC), lowered to register-blocked micro-kernels.

Dense and grouped convolution, and Gemm as a 1x1 convolution over a 1 x M "image", share one
micro-kernel: a tile of MR output pixels x NR vectors of output channels lives in registers while
the reduction runs over (kh, kw, c); each step broadcasts one input value per pixel and loads NR
weight vectors. Weights are packed at compile time in exactly that read order, one panel per block
of output channels. Depthwise convolution vectorizes along channels instead.

Padding is handled without copies: output columns whose window stays inside the input take the
fast path; the few border columns (and rows) clip their window with runtime loop bounds. Dense
convolution may instead take its border columns in whole tiles (Columns, border "tiles"): each window
tap of a tile at a constant column covers a range of its pixels known at compile time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.quant import RANGES, Quant, fixed_point, node_quant
from aot.isa import DotStyle
from aot.kernel.ir import (
    Broadcast,
    Buffer,
    Builder,
    BytePairs,
    Cast,
    Const,
    Dot,
    Expr,
    Kernel,
    Lanes,
    MatrixDot,
    Reinterpret,
    Reuse,
    Shuffle,
    WideningDot,
    as_expr,
    binop,
    const,
    fma,
    maximum,
    minimum,
    select,
)
from aot.ops import LowerContext
from aot.ops.conv_volume import canonical_volume_conv
from aot.ops.epilogue import apply
from aot.ops.quantized import add_quantized, narrows_by_halves, quantize, quantized_function, requantize_fixed, widen
from aot.ops.registry import MATRIX_OPERANDS, Fusion, Layout, QuantForm, define, op_def, operand
from aot.ops.rewrite import fused_acts, lift_1d, refuse, spatial_attrs, view
from aot.schedule import Schedule, workload_key


@dataclass(frozen=True)
class Geometry:
    n: int
    h: int
    w: int
    c: int
    oh: int
    ow: int
    m: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]     # top, left, bottom, right

    def in_row(self, o: Expr | int, axis: int) -> Expr:
        """First input coordinate of output coordinate o along axis 0 (rows) or 1 (columns)."""
        return as_expr(o) * self.stride[axis] - self.pads[axis]

    def window(self, o: Expr, axis: int) -> tuple[Expr, Expr]:
        """Taps [lo, hi) of the window at output coordinate o that fall inside the input."""
        k, d, size = (self.kh, self.dilation[0], self.h) if axis == 0 else (self.kw, self.dilation[1], self.w)
        first = self.in_row(o, axis)          # input coordinate of tap 0; tap t reads first + t*d
        lo = maximum(binop("div", (0 - first) + (d - 1), const(d)), 0)
        hi = minimum(binop("div", (size - first) + (d - 1), const(d)), k)
        return lo, hi

    def progress(self, order: Order, in_bytes: int, out_bytes: int) -> tuple[tuple[int, int], ...]:
        """Reuse checkpoints (see kernel.ir.Reuse) of spatial_loops in `order`, one per phase: a tile (all
        its blocks of channels, each read and stored in turn: its reads and writes interleave) or a half of
        a pixel computed whole (its reads, then its writes). Each phase's writes are the tile's output
        pixels, its reads the bytes from the first to the last of its window's. Front to back a checkpoint
        is (the end of all writes so far, the start of all reads still to come, this phase's included);
        back to front (the start of all writes so far, the end of all reads still to come).

        Computed with numpy a row of tiles at a time (a long 1-D signal has tens of thousands)."""
        written, needed = self._checkpoint_arrays(order, in_bytes, out_bytes)
        # nothing written before a read: any placement will do
        return tuple(zip(written.tolist(), needed.tolist())) or ((0, 0),)

    def shift(self, order: Order, in_bytes: int, out_bytes: int) -> int:
        """Reuse.shift of progress(order, ...), without building its tuple (row_order asks for many)."""
        written, needed = self._checkpoint_arrays(order, in_bytes, out_bytes)
        if not written.size:
            return 0
        return int(((needed - written) if order.backward else (written - needed)).max())

    def _checkpoint_arrays(self, order: Order, in_bytes: int, out_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """progress's checkpoints as two arrays, written and needed."""
        out_pixel, in_pixel = self.m * out_bytes, self.c * in_bytes
        cols = Columns.of(self, order.mr, order.border)
        template = {careful: self._row_phases(cols.tiles(careful, order.columns_backward))
                    for careful in {0, order.careful}}
        images = range(self.n - 1, -1, -1) if order.backward else range(self.n)
        rows = range(self.oh - 1, -1, -1) if order.backward else range(self.oh)
        parts = []
        for n in images:
            for oh in rows:
                in_rows = [oh * self.stride[0] - self.pads[0] + t * self.dilation[0] for t in range(self.kh)]
                in_rows = [r for r in in_rows if 0 <= r < self.h]
                ow0, width, writes, col_lo, col_hi, reads = template[order.careful if n == oh == 0 else 0]
                first = (n * self.oh + oh) * self.ow
                read = reads & bool(in_rows)
                top, bottom = ((n * self.h + in_rows[0]) * self.w, (n * self.h + in_rows[-1]) * self.w) \
                    if in_rows else (0, 0)
                parts.append((writes, (first + ow0) * out_pixel, (first + ow0 + width) * out_pixel,
                              read, (top + col_lo) * in_pixel, (bottom + col_hi + 1) * in_pixel))
        writes, w_lo, w_hi, reads, r_lo, r_hi = (np.concatenate(column) for column in zip(*parts))
        return _checkpoints(writes, w_lo, w_hi, reads, r_lo, r_hi, order.backward)

    def _row_phases(self, tiles: list[tuple[int, int, bool]]) -> tuple[np.ndarray, ...]:
        """The phases of one row of `tiles` (first column, width, computed whole): per phase its tile's first
        column and width, whether it writes, the first and last input column its window reads and whether
        it reads any (a pixel computed whole is two phases: its reads, then its writes)."""
        ow0 = np.array([t[0] for t in tiles], np.int64).reshape(-1, 1)
        width = np.array([t[1] for t in tiles], np.int64).reshape(-1, 1)
        whole = np.array([t[2] for t in tiles], bool)
        s = self.stride[1]
        offsets = np.arange(self.kw, dtype=np.int64) * self.dilation[1] - self.pads[1]  # column o reads o * s + off
        lo = np.maximum(ow0, -(offsets // s))
        hi = np.minimum(ow0 + width, (self.w - 1 - offsets) // s + 1)
        inside = lo < hi
        col_lo = np.where(inside, lo * s + offsets, np.iinfo(np.int64).max).min(axis=1)
        col_hi = np.where(inside, (hi - 1) * s + offsets, np.iinfo(np.int64).min).max(axis=1)
        reads = inside.any(axis=1)
        ow0, width = ow0[:, 0], width[:, 0]
        # a pixel computed whole: (no writes, its reads) then (its writes, no reads)
        repeat = np.where(whole, 2, 1)
        second = np.zeros(int(repeat.sum()), bool)
        second[np.cumsum(repeat)[whole] - 1] = True
        ow0, width, col_lo, col_hi, reads, whole = (np.repeat(a, repeat) for a in (ow0, width, col_lo, col_hi,
                                                                                 reads, whole))
        writes = ~whole | second
        reads = reads & ~second
        return ow0, width, writes, np.where(reads, col_lo, 0), np.where(reads, col_hi, 0), reads

    def tap_pixels(self, ow0: int, width: int) -> list[tuple[int, int, int]]:
        """(tap, first pixel, end pixel) of each column tap that reads inside the input for some of the
        `width` output columns from ow0: the pixels [first, end) of the tile (a contiguous range)."""
        s, out = self.stride[1], []
        for t in range(self.kw):
            off = t * self.dilation[1] - self.pads[1]       # output column o reads input column o * s + off
            lo = max(ow0, -(off // s))                      # the first o with o * s + off >= 0
            hi = min(ow0 + width, (self.w - 1 - off) // s + 1)
            if lo < hi:
                out.append((t, lo - ow0, hi - ow0))
        return out

    def interior(self, axis: int) -> tuple[int, int]:
        """Output coordinates [lo, hi) whose whole window lies inside the input."""
        k, d, size, s = ((self.kh, self.dilation[0], self.h, self.stride[0]) if axis == 0
                         else (self.kw, self.dilation[1], self.w, self.stride[1]))
        pad, out = self.pads[axis], (self.oh if axis == 0 else self.ow)
        lo = min(out, -(-pad // s))
        hi = max(lo, min(out, (size - 1 - (k - 1) * d + pad) // s + 1))
        return lo, hi


def _checkpoints(writes: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray, reads: np.ndarray, r_lo: np.ndarray,
                 r_hi: np.ndarray, backward: bool) -> tuple[np.ndarray, np.ndarray]:
    """Reuse checkpoints of phases run in order, phase i writing [w_lo, w_hi) if writes[i] and reading
    [r_lo, r_hi) if reads[i]: after each phase that has some write before it and some read from it on, front
    to back (the end of the writes so far, the start of the reads from this phase on); back to front (the
    start of the writes so far, the end of the reads from this phase on)."""
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    if backward:
        written = np.minimum.accumulate(np.where(writes, w_lo, big))
        needed = np.maximum.accumulate(np.where(reads, r_hi, small)[::-1])[::-1]
        valid = (written != big) & (needed != small)
    else:
        written = np.maximum.accumulate(np.where(writes, w_hi, small))
        needed = np.minimum.accumulate(np.where(reads, r_lo, big)[::-1])[::-1]
        valid = (written != small) & (needed != big)
    return written[valid], needed[valid]


def geometry(graph: Graph, node: Node) -> Geometry:
    n, h, w, c = graph.shape(node.inputs[0])
    _, oh, ow, m = graph.shape(node.outputs[0])
    kh, kw = node.attrs["kernel"]
    return Geometry(n, h, w, c, oh, ow, m, kh, kw, tuple(node.attrs["strides"]),
                    tuple(node.attrs.get("dilations", (1, 1))), tuple(node.attrs["pads"]))


@dataclass(frozen=True)
class Order:
    """How spatial_loops walks the output: tiles of up to `mr` columns; images and rows last to first if
    `backward`; and the first `careful` pixels of image 0 (within its first row) one at a time, each
    computed whole: all of its window read before any of its results is stored. Near where the output
    catches up with the input, that lets it overlap the input closer (see Geometry.progress). The tiles of
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


# --- channel blocks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChannelBlock:
    start: int      # first output channel (within a group)
    nr: int         # vectors per tile row
    lanes: int      # lanes per vector
    count: int = 1  # identical blocks side by side, walked by a runtime loop (one code copy)

    @property
    def width(self) -> int:
        return self.nr * self.lanes


def channel_blocks(channels: int, lanes: int, nr_max: int) -> list[ChannelBlock]:
    """Cover `channels` with runs of blocks of nr_max full vectors, then one of fewer vectors, then
    narrower vectors, then scalars."""
    blocks, start = [], 0
    full = channels // (lanes * nr_max)
    if full:
        blocks.append(ChannelBlock(0, nr_max, lanes, full))
        start = full * lanes * nr_max
    if channels - start >= lanes:
        nr = (channels - start) // lanes
        blocks.append(ChannelBlock(start, nr, lanes))
        start += nr * lanes
    half = lanes // 2
    while half >= 4:
        if channels - start >= half:
            blocks.append(ChannelBlock(start, 1, half))
            start += half
        half //= 2
    if channels > start:
        blocks.append(ChannelBlock(start, channels - start, 1))
    return blocks


# --- dense / grouped convolution --------------------------------------------------------------------

def store_pixel(b: Builder, out: Buffer, arith: Arith, blk: ChannelBlock, accs: list[Expr], ch0: Expr,
                base: Expr, gather: int = 1) -> None:
    """One pixel's accumulators for a block of channels, finished and stored at `base`: where integers
    narrow in halving steps (see quantize), up to 16 lanes side by side at a time, so they narrow to bytes
    together; scalar integer accumulators (one channel each: Helium's VMLADAV) `gather` at a time as one
    vector, so they requantize together; otherwise vector by vector."""
    together = max(1, 16 // blk.lanes) if isinstance(arith, IntArith) and arith.halving and blk.lanes > 1 else 1
    if isinstance(arith, IntArith) and blk.lanes == 1:
        together = max(together, gather)
    j = 0
    while j < len(accs):
        n = 1 << (min(together, len(accs) - j).bit_length() - 1)     # a power of two of vectors
        acc = Lanes(tuple(accs[j: j + n])) if n > 1 else accs[j]
        at = base + j * blk.lanes
        b.store(out, at, arith.result(acc, ch0 + j * blk.lanes, at, n * blk.lanes))
        j += n


def _pack_dense(weight: np.ndarray, groups: int, blocks: list[ChannelBlock], group: int = 1,
                channels_inner: bool = False) -> tuple[np.ndarray, list[int]]:
    """OIHW weights -> per group, per block: [kh][kw][c / group][block width][group] panels, concatenated;
    with `channels_inner`, [kh][kw][c / group][vector][group][lanes]: each vector's output channels
    consecutive for each input channel of the group (LaneArith's order).

    Returns the packed array and the offset of each (group, block run)."""
    m, cg, kh, kw = weight.shape
    mg = m // groups
    panels, offsets, offset = [], [], 0
    for g in range(groups):
        for blk in blocks:
            offsets.append(offset)
            for r in range(blk.count):
                first = g * mg + blk.start + r * blk.width
                rows = weight[first: first + blk.width]          # (width, cg, kh, kw)
                grouped = rows.reshape(blk.width, cg // group, group, kh, kw).transpose(3, 4, 1, 0, 2)
                if channels_inner:
                    grouped = grouped.reshape(kh, kw, cg // group, blk.nr, blk.lanes, group).transpose(0, 1, 2, 3, 5, 4)
                panel = np.ascontiguousarray(grouped).reshape(-1)
                panels.append(panel)
                offset += panel.size
    return np.concatenate(panels), offsets


class FloatArith:
    """fp32: FMA into fp32 accumulators; the epilogue adds the residual and applies the activations.

    On AArch64 a pixel's 4 input channels load as one vector and each step multiplies by one of its lanes
    (FMLA by element): a load per 4 steps, not per step."""

    acc_dtype = "f32"
    group = 1           # input channels per multiply-accumulate step
    scalar = False      # accumulators one channel wide whatever the vector width
    window = None       # see DotArith
    SPAN = 4

    def __init__(self, ctx: LowerContext, bias: np.ndarray | None, acts, residual: Buffer | None, channels: int = 1):
        self.bias = ctx.const(bias.astype(np.float32), "b") if bias is not None else None
        self.acts, self.residual = acts, residual
        self.span = self.SPAN if ctx.target.aarch64_neon and ctx.knobs.simd and channels % self.SPAN == 0 else 1

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """A span keeps each pixel's 4 channels in a register besides its accumulators: 7 x 3 in 32."""
        return (min(mr, 7), nr) if self.span > 1 else (mr, nr)

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.astype(np.float32)

    def init(self, ch: Expr, lanes: int) -> Expr:
        return self.bias.vec(ch, lanes) if self.bias is not None else const(0.0, "f32", lanes)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        """The input value(s) multiplied at one step (FMA splats a scalar across the lanes)."""
        return self.load_x(x[index])

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        """The operands of each step of a span, loaded at once and bound by `bind`."""
        if self.span == 1:
            return [bind(self.operand(x, index, lanes))]
        quad = bind(x.vec(index, self.span))
        return [Shuffle(quad, (k,) * lanes) if lanes > 1 else Shuffle(quad, (k,)) for k in range(self.span)]

    def load_x(self, value: Expr) -> Expr:
        return value

    def load_w(self, value: Expr) -> Expr:
        return value

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return fma(a, w, acc)

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        if self.residual is not None:
            acc = acc + self.residual.vec(idx, lanes)
        return apply(self.acts, acc)


class IntArith:
    """int8: (x - x_zp) * (w - w_zp) summed in int32 (weight zero points subtracted at compile time),
    int32 bias. The epilogue requantizes each channel: with an FPU as onnxruntime does (float32 scale,
    round to nearest even), which keeps deep networks within a step of it; without one by a fixed-point
    multiplier and shift (TFLite's way)."""

    acc_dtype = "i32"
    group = 1
    scalar = False
    window = None
    narrowing = 0

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, residual: Buffer | None = None):
        self.q = quant
        self.residual = residual if quant.residual is not None else None
        self.fixed = not ctx.target.fpu
        self.halving = narrows_by_halves(ctx.target)
        self.float_bias = None
        if bias is not None and bias.dtype == np.float32:
            if self.fixed:      # no FPU: fold the float bias into the integer accumulator
                bias = np.round(bias / (quant.x_scale * quant.w_scale)).astype(np.int32)
            else:               # added after scaling, in units of the output scale
                self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")
                bias = None
        gain = 2.0 ** self.narrowing     # the sums reach the epilogue divided by it (LongArith)
        if self.fixed:
            m0, shift = fixed_point(quant.x_scale * quant.w_scale * gain / quant.y_scale)
            self.m0 = ctx.const(m0.astype(np.int32), "m")
            self.shift = ctx.const(shift.astype(np.int32), "s")
        else:
            scale = np.float32(quant.x_scale) * quant.w_scale.astype(np.float32) / np.float32(quant.y_scale)
            self.scale = ctx.const((scale * np.float32(gain)).astype(np.float32), "s")
        self.bias = ctx.const(bias.astype(np.int32), "b") if bias is not None else None
        # vectors of 8 or 16 int32 lanes the target multiplies as 16-bit pairs (x86's VPMADDWD; see mac)
        # (int16 activations less a zero point other than 0 may not fit 16 bits)
        pairs = any(d.group == 2 and not d.scalar and not d.raw_bytes for d in ctx.target.int_simd.dots)
        narrow = quant.x_dtype != "int16" or quant.x_zp == 0
        self.pair_lanes = {8, 16} if pairs and narrow and ctx.target.lanes >= 8 else set()

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.astype(np.int8 if packed.min() >= -128 and packed.max() <= 127 else np.int16)

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """The default register tile (pixels, vectors of channels) within what the form's registers allow."""
        return mr, nr

    def init(self, ch: Expr, lanes: int) -> Expr:
        return self.bias.vec(ch, lanes) if self.bias is not None else const(0, "i32", lanes)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return self.load_x(x[index])

    @property
    def span(self) -> int:
        """Input channels per activation load: one step unless the form says otherwise (DotArith)."""
        return self.group

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        return [bind(self.operand(x, index, lanes))]

    def load_x(self, value: Expr) -> Expr:
        return widen(value) - self.q.x_zp

    def load_w(self, value: Expr) -> Expr:
        return widen(value)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        """acc + a * w. Both fit in 16 bits (8-bit values less their zero points): where the target has a
        16-bit pairs multiply, a's lanes as pairs (a, its sign) times (w, 0) is a * w in one VPMADDWD,
        where the 32-bit multiply (VPMULLD) is two micro-ops of twice the latency."""
        if acc.lanes in self.pair_lanes:
            a, w = (Broadcast(v, acc.lanes) if v.lanes == 1 else v for v in (a, w))
            pairs = 2 * acc.lanes
            return Dot(acc, Reinterpret(a, "i16", pairs), Reinterpret(binop("and", w, 0xFFFF), "i16", pairs), False)
        return acc + a * w

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        q = self.q
        if self.fixed:
            y = requantize_fixed(acc, self.m0.vec(ch, lanes), self.shift.vec(ch, lanes), q.y_zp, q.qmin, q.qmax,
                                 q.y_dtype)
        else:
            value = Cast(acc, "f32") * self.scale.vec(ch, lanes)
            if self.float_bias is not None:
                value = value + self.float_bias.vec(ch, lanes)
            y = quantize(value, q.y_zp, q.qmin, q.qmax, q.y_dtype, self.halving)
        if self.residual is not None:
            s = q.residual      # the fused Add, on this result as the Add kernel would have read it
            y = add_quantized(y, q.y_scale, q.y_zp, self.residual.vec(idx, lanes), s.r_scale, s.r_zp,
                              s.y_scale, s.y_zp, s.qmin, s.qmax, s.y_dtype)
        f = q.function          # the fused activation, as its own kernel (elementwise.unary) computes it
        if f is not None:
            y = quantized_function(y, f.fn, f.params, f.x_scale, f.x_zp, f.y_scale, f.y_zp, f.qmin, f.qmax, f.y_dtype)
        return y


class LongArith(IntArith):
    """IntArith summing in int64, for a layer whose int32 sum could overflow (`accumulator_shift`): int16
    activations times int8 weights over a long window (a 3x3 convolution on 256 channels and more; CMSIS-NN's
    s16 convolution switches to 64-bit sums at 512 taps). Each product is widened to 64 bits (SMLAL on
    Arm) and the sum is brought back to int32 by a rounding shift right of `narrowing` bits before the usual
    epilogue, whose scale is that much larger: 2**-31 of the sum's range, far below float32's precision."""

    acc_dtype = "i64"

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, residual: Buffer | None,
                 narrowing: int):
        self.narrowing = narrowing
        super().__init__(ctx, quant, bias, residual)
        self.pair_lanes = set()

    def init(self, ch: Expr, lanes: int) -> Expr:
        return Cast(self.bias.vec(ch, lanes), "i64") if self.bias is not None else const(0, "i64", lanes)

    def load_x(self, value: Expr) -> Expr:
        return Cast(widen(value) - self.q.x_zp, "i64")

    def load_w(self, value: Expr) -> Expr:
        return Cast(widen(value), "i64")

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return acc + a * w

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        half = const(1 << (self.narrowing - 1), "i64", lanes)
        narrowed = Cast(binop("shr", acc + half, const(self.narrowing, "i64", lanes)), "i32")
        return super().result(narrowed, ch, idx, lanes)


def accumulator_shift(weight: np.ndarray, quant: Quant, bias: np.ndarray | None) -> int:
    """0 when each output channel's sum of (x - x_zp) (w - w_zp), plus its integer bias, fits int32 for every
    input the activation type holds; else the bits by which it may pass int32 (LongArith). weight: output
    channels first, zero points not yet subtracted."""
    lo, hi = RANGES[quant.x_dtype]
    x_max = max(abs(lo - quant.x_zp), abs(hi - quant.x_zp))
    w = weight.astype(np.int64).reshape(weight.shape[0], -1)
    bound = np.abs(w - np.asarray(quant.w_zp, np.int64).reshape(-1, 1)).sum(axis=1) * x_max
    if bias is not None and bias.dtype == np.int32:
        bound = bound + np.abs(bias.astype(np.int64))
    return max(0, int(bound.max(initial=0)).bit_length() - 31)


class LaneArith(IntArith):
    """int8 on AArch64 NEON without a dot product usable here: a step takes `group` (8) input channels of
    a pixel as one vector of 16-bit x - x_zp, and per input channel k multiplies the weights of the
    vector's output channels (consecutive: see _pack_dense's channels_inner; int8 in flash, widened 8 at a
    time) by lane k of it, widening into the int32 accumulators: SMLAL/SMLAL2 by element, 4
    multiply-accumulates an instruction, the activations loaded and widened once per 8 channels, not each."""

    group = 8

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """2 vectors of channels: 2 x MR accumulators, 8 widened weight registers."""
        return mr, min(nr, 2)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Cast(x.vec(index, self.group), "i16") - const(self.q.x_zp, "i16", self.group)

    def load_w(self, value: Expr) -> list[Expr]:
        """The step's weights widened to 16 bits 8 at a time (one SSHLL of a half register each), as
        vectors of 8 lanes that hold 8 // lanes input channels' weights."""
        return [Cast(Shuffle(value, tuple(range(i, i + 8))), "i16") if value.dtype == "i8"
                else Shuffle(value, tuple(range(i, i + 8))) for i in range(0, value.lanes, 8)]

    def mac(self, acc: Expr, a: Expr, w: list[Expr]) -> Expr:
        lanes = acc.lanes
        per_chunk = 8 // lanes
        for k in range(self.group):
            chunk, at = divmod(k, per_chunk)
            weights = Shuffle(w[chunk], tuple(range(at * lanes, (at + 1) * lanes))) if lanes < 8 else w[chunk]
            activation = Shuffle(a, (k,) * lanes) if lanes > 1 else Shuffle(a, (k,))
            acc = acc + Cast(weights, "i32") * Cast(activation, "i32")
        return acc


def lane_arith_applies(ctx: LowerContext, cg: int, quant: Quant | None) -> bool:
    """LaneArith's conditions: AArch64 NEON, a quantized Conv/Gemm with whole groups of 8 input channels,
    an activation zero point that keeps x - x_zp in 16 bits (any int8 or uint8 one does)."""
    return (quant is not None and ctx.target.aarch64_neon and cg % LaneArith.group == 0 and ctx.knobs.simd
            and (quant.x_dtype != "int16" or quant.x_zp == 0))


class DotArith(IntArith):
    """int8 on a dot-product instruction (see DotStyle): each step multiplies `group` input channels of
    one pixel, repeated across the lanes, with `group` weights per output channel, summed into the
    channel's int32 lane.

    With raw bytes, x - x_zp is never formed: the zero point (and the +-128 that turns int8 into the
    unsigned bytes VNNI wants, or uint8 into the signed ones of sdot) comes off once, through the bias:
    sum (x' - z') w = sum x' w - z' sum w. With padding, a window clipped at the border skips the taps
    over it, so its z' sum w is over the taps it keeps: init_window reads it from `window`, a table of
    z' sum w over the window's leading [0, a) x [0, b) taps, by inclusion-exclusion of four corners.

    Without a dot-product instruction (style.widening: AArch64 NEON) a step takes 8 input channels, each
    output channel owns two i32 lanes that k.WideningDot fills (the int bias and window sums in the first),
    and the result adds them.
    """

    window: Buffer | None = None    # padded: (kh + 1) x (kw + 1) x channels of prefix sums (see above)
    spread = 1                      # i32 lanes per output channel
    SPAN = 16                       # sdot: a pixel's 16 channels in one load, each step by element

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, residual: Buffer | None = None, padded: bool = False):
        self.style, self.group, self.scalar = style, style.group, style.scalar
        self.spread = 2 if style.widening else 1
        # NEON's sdot takes its 4 activation bytes by element from a vector: 16 channels load as one (the
        # broadcast form reloads each word, and AArch64's broadcasting load has no offset to fold)
        by_element = style.raw_bytes and not style.a_unsigned and style.group == 4 and not style.widening
        self.by_element = by_element and not style.scalar and weight.shape[1] % self.SPAN == 0
        x_int8 = x_dtype == "i8"
        self.flip = style.raw_bytes and (x_int8 == style.a_unsigned)      # flip x's top bit
        if style.raw_bytes:
            z = quant.x_zp + ((128 if x_int8 else -128) if self.flip else 0)
            self.raw_zero_point = z         # the zero point as the dot product sees the bytes
            taps = weight.astype(np.int64).sum(axis=1)                     # (out channels, kh, kw)
            int_bias = bias.astype(np.int64) if bias is not None and bias.dtype == np.int32 else 0
            if padded:
                prefix = np.zeros((taps.shape[1] + 1, taps.shape[2] + 1, taps.shape[0]), np.int64)
                prefix[1:, 1:] = (z * taps).transpose(1, 2, 0).cumsum(axis=0).cumsum(axis=1)
                self.window = ctx.const(self._spread(prefix).astype(np.int32), "zw")  # dot_style: it fits
                self.taps = taps.shape[1:]
                int_bias = int_bias + np.zeros(taps.shape[0], np.int64)
            else:
                int_bias = int_bias - z * taps.reshape(taps.shape[0], -1).sum(axis=1)
            int_bias = self._spread(np.clip(int_bias, -(2**31), 2**31 - 1))
            super().__init__(ctx, quant, int_bias.astype(np.int32), residual)
            if bias is not None and bias.dtype == np.float32:
                self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")
        else:
            super().__init__(ctx, quant, bias, residual)

    def _spread(self, per_channel: np.ndarray) -> np.ndarray:
        """Values per output channel (last axis) laid out as the accumulators hold them: with two lanes
        per channel, each followed by a zero."""
        if self.spread == 1:
            return per_channel
        return np.stack([per_channel, np.zeros_like(per_channel)], axis=-1).reshape(*per_channel.shape[:-1], -1)

    def init(self, ch: Expr, lanes: int) -> Expr:
        return super().init(ch * self.spread, lanes * self.spread)

    def init_window(self, ch: Expr, lanes: int, kh_lo: Expr, kh_hi: Expr, kw_lo: Expr, kw_hi: Expr) -> Expr:
        """The accumulator's start for a window clipped to taps [kh_lo, kh_hi) x [kw_lo, kw_hi); a window
        wholly over the padding may come as hi < lo (no taps): it keeps none."""
        kh, kw = self.taps
        channels = self.window.size // ((kh + 1) * (kw + 1))
        kh_lo, kw_lo = minimum(kh_lo, kh), minimum(kw_lo, kw)         # padding wider than the kernel
        kh_hi, kw_hi = maximum(kh_hi, kh_lo), maximum(kw_hi, kw_lo)

        def corner(a: Expr, b: Expr) -> Expr:
            return self.window.vec((a * (kw + 1) + b) * channels + ch * self.spread, lanes * self.spread)

        kept = corner(kh_hi, kw_hi) - corner(kh_lo, kw_hi) - corner(kh_hi, kw_lo) + corner(kh_lo, kw_lo)
        return self.init(ch, lanes) - kept

    def weights(self, packed: np.ndarray) -> np.ndarray:
        """int8 in flash whenever the values fit (16-bit pairs are widened as they are loaded). Widening:
        each vector's 4 channels x 8 input channels as k.WideningDot pairs them, channels (0, 1) then (2, 3),
        each pair's first 4 input channels then its last 4."""
        fits = self.style.raw_bytes or (packed.min() >= -128 and packed.max() <= 127)
        if self.style.widening:     # (pair, channel, half, 4) -> (pair, half, channel, 4)
            packed = packed.reshape(-1, 2, 2, 2, 4).transpose(0, 1, 3, 2, 4).reshape(-1)
        return packed.astype(np.int8 if fits else np.int16)

    @property
    def span(self) -> int:
        return self.SPAN if self.by_element else self.group

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """Widening: 2 accumulators per vector of channels and per pixel, 2 weight registers per vector.
        A span by element keeps each pixel's 16 bytes in a register besides its accumulators."""
        if self.style.widening:
            return min(mr, 4), min(nr, 2)
        return (min(mr, 8), min(nr, 2)) if self.span > self.group else (mr, nr)

    def raw_words(self, x: Buffer, index: Expr, count: int) -> Expr:
        """`count` bytes of a pixel's channels as 32-bit words, each byte's top bit flipped if it must be."""
        words = Reinterpret(x.vec(index, count), "i32", count // 4)
        return binop("xor", words, const(-0x7F7F7F80, "i32", count // 4)) if self.flip else words   # +-128 a byte

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        if self.span == self.group:
            return [bind(self.operand(x, index, lanes))]
        words = bind(self.raw_words(x, index, self.span))
        return [Reinterpret(Shuffle(words, (k,) * lanes), "i8", lanes * 4) for k in range(self.span // 4)]

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        if self.style.widening:     # 8 channels as words (0, 0, 1, 1): each channel pair's two halves
            words = self.raw_words(x, index, self.group)
            return Reinterpret(Shuffle(words, (0, 0, 1, 1) * (lanes // 2)), "i8", lanes * 8)
        if self.style.raw_bytes:
            word = self.raw_words(x, index, self.group)
        else:
            pair = Cast(widen(x.vec(index, self.group)) - self.q.x_zp, "i16")
            if lanes == 1:
                return pair
            word = Reinterpret(pair, "i32", 1)
        element = "i8" if self.style.raw_bytes else "i16"
        return Reinterpret(Broadcast(word, lanes) if lanes > 1 else word, element, lanes * self.group)

    def load_w(self, value: Expr) -> Expr:
        return Cast(value, "i16") if not self.style.raw_bytes and value.dtype == "i8" else value

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        if self.style.widening:
            return WideningDot(acc, a, w)
        return Dot(acc, a, w, self.style.a_unsigned)

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        if self.spread == 2:        # each channel's two lanes: ADDP
            acc = Shuffle(acc, tuple(range(0, 2 * lanes, 2))) + Shuffle(acc, tuple(range(1, 2 * lanes, 2)))
        return super().result(acc, ch, idx, lanes)


class MatrixArith(DotArith):
    """int8 on Armv8.6's matrix multiply (SMMLA; DotStyle.matrix): an accumulator holds two pixels x a vector
    of 4 output channels as two 2 x 2 blocks, lanes (p0 c0, p0 c1, p1 c0, p1 c1, p0 c2, p0 c3, p1 c2, p1 c3);
    a step multiplies the two pixels' 8 input channels, one 16-byte vector, by the vector's 32 weight
    bytes, each channel's 8 in a row (the dot-product packing with groups of 8). A pixel on its own (an odd
    tile, a tap that reaches only one of the two) pairs with zeros."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, residual: Buffer | None = None, padded: bool = False):
        super().__init__(ctx, style, quant, bias, weight, x_dtype, residual, padded)
        # 16 channels of a pixel in one load, its halves paired with the neighbour's (ZIP1, ZIP2): 4
        # instructions per two steps of two pixels, where 8 bytes at a time take 6
        self.wide = weight.shape[1] % 16 == 0

    @property
    def span(self) -> int:
        return 16 if self.wide else 8

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """4 pixels x 4 vectors of channels by default: 16 accumulator registers, 4 for the row pairs and 8
        for the weights; of 8 x 2, 6 x 3 and 4 x 4 it executed the fewest instructions over the int8 zoo."""
        return min(mr, 4), 4

    def join(self, starts: list[Expr]) -> Expr:
        """Two pixels' accumulator starts (4 channels each) as one accumulator; a lone pixel's twice."""
        first, second = starts[0], starts[-1]
        return Shuffle(Lanes((first, second)), (0, 1, 4, 5, 2, 3, 6, 7))

    def part(self, acc: Expr, k: int) -> Expr:
        """Pixel k's 4 channels of an accumulator."""
        return Shuffle(acc, (0, 1, 4, 5) if k == 0 else (2, 3, 6, 7))

    def pair_operands(self, x: Buffer, indexes: list[Expr | None], bind) -> list[Expr]:
        """Each step's row pair: two pixels' 8 channels, the pixels' span of channels at `indexes`; a pixel
        given as None (or missing: a lone pixel) is zeros."""
        words = self.span // 4
        rows = [bind(self.raw_words(x, i, self.span)) if i is not None else const(0, "i32", words) for i in indexes]
        rows += [const(0, "i32", words)] * (2 - len(rows))
        return [Reinterpret(Shuffle(Lanes(tuple(rows)), (k, k + 1, words + k, words + k + 1)), "i8", 16)
                for k in range(0, words, 2)]

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return MatrixDot(acc, a, w)


class WideArith(DotArith):
    """int8 depthwise convolution on AArch64 NEON (see lower_depthwise): raw activation bytes widened to
    16 bits (sign- or zero-extended as their type is) times 16-bit weights w - w_zp, the activation zero
    point through the bias and, where padding clips windows, DotArith's window table."""

    dw_nr = 4       # vectors of channels per tile by default: 16 channels, one 16-byte load

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, weight: np.ndarray, x_dtype: str,
                 residual: Buffer | None, padded: bool):
        super().__init__(ctx, DotStyle(1, True, a_unsigned=x_dtype == "u8"), quant, bias, weight, x_dtype,
                         residual, padded)
        # int8 activations and weights in [-127, 127]: two taps' products add in 16 bits
        self.pairs = x_dtype == "i8" and (weight.size == 0 or (weight.min() >= -127 and weight.max() <= 127))


class BytePairArith(IntArith):
    """int8 on the Arm DSP (see DotStyle.byte_pairs): one 32-bit load brings 4 input channels of a pixel,
    and one 4 weights of an output channel; each word widens into two 16-bit pairs, bytes (0, 2) and
    (1, 3) (sxtb16, and through a folded rotate), so activation and weight pairs match and two SMLADs
    take the 4 products. LLVM shares each pixel's and each channel's widening across the register tile.

    The activation zero point comes off in the widening (sxtab16 with the pair (-x_zp, -x_zp)) where the
    window may be clipped by padding; without padding it comes off once, through the bias:
    sum (x - z) w = sum x w - z sum w, and the widening is a plain sxtb16."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, padded: bool, residual: Buffer | None = None):
        self.group, self.scalar = style.group, True
        self.unsigned = x_dtype == "u8"
        self.zero_pair = None
        if padded or not quant.x_zp:
            super().__init__(ctx, quant, bias, residual)
            if quant.x_zp:
                half = -quant.x_zp & 0xFFFF
                self.zero_pair = const(np.int32(np.uint32(half * 0x10001)).item(), "i32")
            return
        sums = _minus_zero_point(weight, quant, axis=0).reshape(weight.shape[0], -1).astype(np.int64).sum(axis=1)
        int_bias = (bias.astype(np.int64) if bias is not None and bias.dtype == np.int32 else 0) - quant.x_zp * sums
        super().__init__(ctx, quant, np.clip(int_bias, -(2**31), 2**31 - 1).astype(np.int32), residual)
        if bias is not None and bias.dtype == np.float32:
            self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.astype(np.int8)      # dot_style checked that they fit

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Reinterpret(x.vec(index, self.group), "i32", 1)

    def load_w(self, value: Expr) -> Expr:
        return Reinterpret(value, "i32", 1)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        for odd in (False, True):
            xa = BytePairs(a, odd, self.zero_pair, self.unsigned)
            acc = Dot(acc, Reinterpret(xa, "i16", 2), Reinterpret(BytePairs(w, odd), "i16", 2), False)
        return acc


class HalfPairArith(IntArith):
    """int16 activations (zero point 0) times int8 weights on the Arm DSP (DotStyle.byte_pairs): a pixel's 4
    input channels load as two words, the pairs (c0, c1) and (c2, c3) as they lie in memory; an output
    channel's 4 weights as one word, stored (w0, w2, w1, w3) so that sxtb16 widens it into the matching
    pairs (w0, w1) and (w2, w3) (bytes 0, 2, and 1, 3 through a folded rotate). Two SMLADs take the 4
    products, and the weights stay int8 in flash."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 residual: Buffer | None = None):
        super().__init__(ctx, quant, bias, residual)
        self.group, self.scalar = style.group, True

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(-1).astype(np.int8)     # dot_style: they fit

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Reinterpret(x.vec(index, 4), "i32", 2)

    def load_w(self, value: Expr) -> Expr:
        return Reinterpret(value, "i32", 1)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        for odd in (0, 1):
            acc = Dot(acc, Reinterpret(Shuffle(a, (odd,)), "i16", 2), Reinterpret(BytePairs(w, bool(odd)), "i16", 2),
                      False)
        return acc


Arith = FloatArith | IntArith


def workload(template: str, g: Geometry, groups: int, x: Buffer, form: str) -> str:
    """The workload key (aot/schedule.py) of a convolution computed by `template` in arithmetic `form`."""
    return workload_key(template, (g.n, g.h, g.w, g.c), g.m, (g.kh, g.kw), g.stride, g.dilation, g.pads,
                        groups, f"{x.dtype} {form}" if form else x.dtype)


def arith_form(arith: Arith) -> str:
    """What a workload key says of the arithmetic: integer, dot products or byte pairs (nothing: float)."""
    if isinstance(arith, BytePairArith):
        return "pairs"
    if isinstance(arith, HalfPairArith):
        return "halfpairs"
    if isinstance(arith, WideArith):
        return "wide16"
    if isinstance(arith, MatrixArith):
        return f"matrix{arith.group}"
    if isinstance(arith, DotArith):
        if arith.style.widening:
            return f"widening{arith.group}"
        return f"dot{arith.group}" + ("raw" if arith.style.raw_bytes else "")
    if isinstance(arith, LaneArith):
        return f"lane{arith.group}"
    if isinstance(arith, LongArith):
        return "int64"
    return "int" if isinstance(arith, IntArith) else ""


def lower_dense(ctx: LowerContext, node: Node, name: str, g: Geometry, groups: int, weight: np.ndarray,
                arith: Arith, x: Buffer, out: Buffer, params: tuple[Buffer, ...], backward: bool = False,
                whole: bool = False) -> Kernel:
    """The schedule's `border` says how the columns whose window reaches into the padding are computed
    (see Columns): "clip", one pixel at a time with the window clipped at run time, or "tiles", in tiles
    as wide as the interior's, each tap's FMAs only for the pixels it reads inside the input."""
    cg, mg = g.c // groups, g.m // groups
    step = arith.group          # input channels per multiply-accumulate
    lanes = 1 if arith.scalar else ctx.target.lanes
    gather = ctx.target.lanes if arith.scalar else 1       # scalar sums requantized a vector at a time
    knobs = ctx.knobs
    # Scalar integer tiles live in the core registers (about 10 free on Arm Thumb).
    core = lanes == 1 and arith.acc_dtype == "i32"
    template = "dense_core" if core else "dense"
    weight_bytes = arith.weights(weight.reshape(-1)).nbytes

    def rules(s: Schedule) -> Schedule:
        """The loop order by memory traffic; border columns in tiles (see Columns) unless the knobs say clip."""
        if not s.loop:
            panels = groups * sum(blk.count for blk in channel_blocks(mg, lanes, min(s.nr, -(-mg // lanes))))
            outer = _weights_outer(g, weight_bytes, x.nbytes, panels, knobs.cache_kib * 1024)
            s = dataclasses.replace(s, loop="weights" if outer else "pixels")
        return s if s.border else dataclasses.replace(s, border="tiles" if knobs.border_tiles else "clip")

    default_tile = (knobs.core_mr, knobs.core_nr) if core else (knobs.mr, knobs.nr)
    default_tile = arith.tile(*default_tile)
    chosen = ctx.schedule(node, workload(template, g, groups, x, arith_form(arith)), Schedule(template, *default_tile),
                          rules)
    mr, nr, border = chosen.schedule.mr, chosen.schedule.nr, chosen.schedule.border
    blocks = channel_blocks(mg, lanes, min(nr, -(-mg // lanes)))
    packed, offsets = _pack_dense(weight, groups, blocks, step, isinstance(arith, LaneArith))
    wdata = arith.weights(packed)
    wbuf = ctx.const(wdata, "w")
    b = Builder()
    dy, dx = g.dilation

    panel_size = g.kh * g.kw * cg
    matrix = isinstance(arith, MatrixArith)

    def joined(starts: list[Expr]) -> Expr:
        return arith.join(starts) if matrix else starts[0]

    def part(acc: Expr, k: int) -> Expr:
        return arith.part(acc, k) if matrix else acc

    def block_body(items, group, rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        """Tiles of `rows` pixels x each block of channels in `items` (block, first channel, panel offset),
        accumulated over one pass through the window, then stored."""
        def start(i: int, ch: Expr, lanes: int) -> Expr:
            """Pixel i's accumulator at the start of its window (see DotArith.init_window)."""
            if arith.window is None:
                return arith.init(ch, lanes)
            if kw_lo is not None:
                return arith.init_window(ch, lanes, kh_lo, kh_hi, kw_lo, kw_hi)
            kept = [kw for kw, i0, i1 in g.tap_pixels(ow0.value, rows) if i0 <= i < i1]
            lo, hi = (min(kept), max(kept) + 1) if kept else (0, 0)
            return arith.init_window(ch, lanes, kh_lo, kh_hi, const(lo), const(hi))

        # Each accumulator holds one pixel, or with a MatrixArith two neighbours (a unit).
        units = [tuple(range(i, min(i + 2, rows))) for i in range(0, rows, 2)] if matrix else \
            [(i,) for i in range(rows)]
        accs = [[[b.local("acc", joined([start(i, ch0 + j * blk.lanes, blk.lanes) for i in unit]))
                  for j in range(blk.nr)] for unit in units] for blk, ch0, _ in items]

        def tap(kh, ih, kw, pixels: range) -> None:
            """One tap of the window for the tile's `pixels`, over the input channels."""
            pixel0 = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0 + pixels.start, 1) + kw * dx) * g.c
                           + group * cg)
            wrows = [b.let("wr", panel + (kh * g.kw + kw) * (cg * blk.width)) for blk, _, panel in items]
            def bound(weights: Expr | list[Expr]) -> Expr | list[Expr]:
                return [b.let("wv", w) for w in weights] if isinstance(weights, list) else b.let("wv", weights)

            with b.loop("c", 0, cg, arith.span) as c:
                def at(i: int) -> Expr:
                    return pixel0 + (i - pixels.start) * g.stride[1] * g.c + c

                def bind(operand: Expr) -> Expr:
                    return b.let("a", operand)

                operands: dict[tuple[int, int], list[Expr]] = {}    # one load per unit and vector width
                for s in range(0, arith.span, step):
                    wv = [[bound(arith.load_w(wbuf.vec(wrow + (c + s) * blk.width + j * blk.lanes * step,
                                                       blk.lanes * step)))
                           for j in range(blk.nr)] for (blk, _, _), wrow in zip(items, wrows)]
                    for u, unit in enumerate(units):
                        if not any(i in pixels for i in unit):
                            continue
                        for t, (blk, _, _) in enumerate(items):
                            if (u, blk.lanes) not in operands:
                                operands[u, blk.lanes] = arith.pair_operands(
                                    x, [at(i) if i in pixels else None for i in unit], bind) if matrix else \
                                    arith.operands(x, at(unit[0]), blk.lanes, bind)
                            a = operands[u, blk.lanes][s // step]
                            for j in range(blk.nr):
                                b.assign(accs[t][u][j], arith.mac(accs[t][u][j], a, wv[t][j]))

        with b.loop("kh", kh_lo, kh_hi) as kh:
            ih = g.in_row(oh, 0) + kh * dy
            if kw_lo is None:       # a border tile at a constant column: each tap for the pixels it fits
                for kw, i0, i1 in g.tap_pixels(ow0.value, rows):
                    tap(kh, ih, const(kw), range(i0, i1))
            else:
                with b.loop("kw", kw_lo, kw_hi) as kw:
                    tap(kh, ih, kw, range(rows))
        for t, (blk, ch0, _) in enumerate(items):
            for u, unit in enumerate(units):
                for k, i in enumerate(unit):
                    store_pixel(b, out, arith, blk, [part(acc, k) for acc in accs[t][u]], ch0,
                                ((n * g.oh + oh) * g.ow + ow0 + i) * g.m + ch0, gather)

    group_stride = offsets[len(blocks)] if groups > 1 else 0    # panels repeat per group
    if chosen.schedule.loop == "weights":
        # Each panel stays in cache while every output pixel passes over it.
        with b.loop("g", 0, groups) as group:
            for bi, blk in enumerate(blocks):
                with b.loop("cb", 0, blk.count) as cb:
                    ch0 = b.let("ch0", group * mg + blk.start + cb * blk.width)
                    panel = b.let("panel", group * group_stride + offsets[bi] + cb * (panel_size * blk.width))
                    spatial_loops(b, g, Order(mr, border=border), lambda rows, *at, blk=blk, ch0=ch0, panel=panel:
                                  block_body([(blk, ch0, panel)], group, rows, *at))
        return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, None), chosen)

    def tile(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        # Each tile of input pixels stays in cache while every panel passes over it.
        with b.loop("g", 0, groups) as group:
            for bi, blk in enumerate(blocks):
                with b.loop("cb", 0, blk.count) as cb:
                    ch0 = b.let("ch0", group * mg + blk.start + cb * blk.width)
                    panel = b.let("panel", group * group_stride + offsets[bi] + cb * (panel_size * blk.width))
                    block_body([(blk, ch0, panel)], group, rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi)

    def whole_pixel(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        # Every block of channels of one pixel at once (one group: see row_order's accumulators).
        items = [(blk, const(blk.start + r * blk.width), const(offsets[bi] + r * panel_size * blk.width))
                 for bi, blk in enumerate(blocks) for r in range(blk.count)]
        block_body(items, const(0), rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi)

    order = row_order(g, mr, backward, x, out,
                      sum(blk.nr * blk.count for blk in blocks) if whole and groups == 1 else None)
    if not order.careful:       # a careful prefix computes the left borders whole, one pixel at a time
        order = replace(order, border=border)
    spatial_loops(b, g, order, tile, whole_pixel)
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen)


def conv_reuse(g: Geometry, x: Buffer, out: Buffer, arith: Arith, order: Order | None) -> tuple[Reuse, ...]:
    """What a convolution lets the memory planner overlap: its output with its input behind what it has
    read, where it runs `order` (see Geometry.progress), and a fused residual exactly (read at an index,
    then written there) in any loop order."""
    reuse: tuple[Reuse, ...] = ()
    if order is not None:
        progress = g.progress(order, x.nbytes // x.size, out.nbytes // out.size)
        reuse += (Reuse(0, progress=progress, backward=order.backward),)
    if getattr(arith, "residual", None) is not None:
        reuse += (Reuse(3, exact=True),)
    return reuse


# A pixel computed whole keeps one accumulator per output channel (vector) while it reads its window:
# past this many, its unrolled code and spills are not worth trying for the bytes it may save.
WHOLE_ACCUMULATORS = 32


def row_order(g: Geometry, mr: int, backward: bool, x: Buffer, out: Buffer, accumulators: int | None) -> Order:
    """Tiles of `mr` columns in the direction given, with the shortest careful prefix (the left borders
    and a whole number of interior tiles) that lets the output overlap the input as closely as computing
    every interior tile of the first row whole would, if closer than without one; none if a pixel
    computed whole needs more than WHOLE_ACCUMULATORS `accumulators` (None: the kernel may not compute
    one whole). Past one tile, a longer prefix only splits phases, so the shift never grows with it and
    the shortest is found by bisection."""
    cols = Columns.of(g, mr)
    tiles = (cols.full - cols.lo) // cols.width if cols.width else 0
    if accumulators is None or accumulators > WHOLE_ACCUMULATORS or not tiles:
        return Order(mr, backward)

    def shift(order: Order) -> int:     # no output is placed past its input's start: 0 is the best
        return max(0, g.shift(order, x.nbytes // x.size, out.nbytes // out.size))

    def prefix(k: int) -> Order:
        return Order(mr, backward, cols.lo + k * cols.width)

    best = shift(prefix(tiles))
    if shift(Order(mr, backward)) <= best:
        return Order(mr, backward)
    lo, hi = 1, tiles               # shift(prefix(hi)) == best
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if shift(prefix(mid)) == best else (mid + 1, hi)
    return prefix(hi)


def _weights_outer(g: Geometry, weight_bytes: int, x_bytes: int, panels: int, cache: int) -> bool:
    """Loop order by memory traffic. With pixels outside, the weights are read again for each output
    row unless they fit in cache; with weight panels outside, the input is read again for each panel
    unless it fits. Ties keep pixels outside."""
    pixels_outer = weight_bytes * (g.n * g.oh if weight_bytes > cache else 1) + x_bytes
    panels_outer = x_bytes * (panels if x_bytes > cache else 1) + weight_bytes
    return panels_outer < pixels_outer


# --- int8 dot products ------------------------------------------------------------------------------

_BYTES = ("int8", "uint8")     # activations a 32-bit load takes 4 of


def _dot_operands(quant: Quant) -> bool:
    """Activations a dot product takes: bytes, or int16 ones whose zero point is 0 (so that x - x_zp, which
    the 16-bit pair forms multiply, stays within 16 bits)."""
    return quant.x_dtype in _BYTES or (quant.x_dtype == "int16" and quant.x_zp == 0)


def dot_style(ctx: LowerContext, node: Node, groups: int, cg: int) -> DotStyle | None:
    """The best dot-product form this quantized Conv/Gemm can use on the target, if any."""
    quant = node_quant(ctx.graph.values, node)
    if quant is None or groups != 1 or not _dot_operands(quant):
        return None
    halves = quant.x_dtype == "int16"
    weight = ctx.graph.constants[node.inputs[1]]
    out_channels = weight.shape[0 if weight.ndim == 4 else 1]
    for style in ctx.target.int_simd.dots:
        if cg % style.group or (halves and style.raw_bytes):
            continue
        # Widening: vectors of 4 whole channels, int16 pair sums; AArch64 only (32-bit NEON's 16 vector
        # registers take the row kernels, conv_rows.py).
        if style.widening and (not ctx.target.aarch64_neon or out_channels % 4
                               or weight.size and weight.min() < -127):
            continue
        if style.matrix and out_channels % 4:
            continue
        if style.raw_bytes and (weight.dtype != np.int8 or np.any(quant.w_zp) or (
                any(node.attrs.get("pads", (0,))) and not _window_sums_fit(weight))):
            continue
        if style.byte_pairs and not _fits_int8(_minus_zero_point(weight, quant, axis=0 if weight.ndim == 4 else 1)):
            continue
        return style
    return None


# --- depthwise --------------------------------------------------------------------------------------

def lower_depthwise(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray, arith: Arith,
                    x: Buffer, out: Buffer, params: tuple[Buffer, ...], backward: bool = False,
                    whole: bool = False) -> Kernel:
    """With a WideArith (AArch64 int8), the activations of up to 16 channels load at once as raw bytes and
    widen to 16 bits (SXTL, SXTL2), each half multiplied into its int32 accumulators by the 16-bit
    weights (SMLAL, SMLAL2): 16 multiply-accumulates for 7 instructions. Where its `pairs` allow, the
    taps of a window row whose columns are known at compile time go two at a time: their int8 products
    add in 16 bits (SMULL, SMLAL and their high halves), then into the int32 accumulators (SADDW, SADDW2):
    32 for 10."""
    lanes = ctx.target.lanes
    wide = isinstance(arith, WideArith)
    default = Schedule("depthwise", ctx.knobs.dw_mr, max(ctx.knobs.dw_nr, WideArith.dw_nr) if wide else ctx.knobs.dw_nr)
    chosen = ctx.schedule(node, workload("depthwise", g, g.c, x, arith_form(arith)), default)
    blocks = channel_blocks(g.c, lanes, chosen.schedule.nr)
    mr = chosen.schedule.mr
    taps = np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))       # [kh][kw][c]
    pairs = wide and arith.pairs
    wbuf = ctx.const(taps.astype(np.int8 if pairs else np.int16) if wide else arith.weights(taps), "w")
    b = Builder()
    dy, dx = g.dilation

    def block_body(items, rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        """Tiles of `rows` pixels x each block of channels in `items` (block, first channel), accumulated
        over one pass through the window, then stored."""
        def start(ch: Expr, lanes: int) -> Expr:
            if arith.window is None:
                return arith.init(ch, lanes)
            return arith.init_window(ch, lanes, kh_lo, kh_hi, kw_lo, kw_hi)

        accs = [[[b.local("acc", start(ch0 + j * blk.lanes, blk.lanes)) for j in range(blk.nr)]
                 for _ in range(rows)] for blk, ch0 in items]

        def plain_tap(kh, ih, kw) -> None:
            for t, (blk, ch0) in enumerate(items):
                pixel0 = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0, 1) + kw * dx) * g.c + ch0)
                wv = [b.let("wv", arith.load_w(wbuf.vec((kh * g.kw + kw) * g.c + ch0 + j * blk.lanes, blk.lanes)))
                      for j in range(blk.nr)]
                for i in range(rows):
                    at = pixel0 + i * g.stride[1] * g.c
                    for j in range(blk.nr):
                        xv = arith.load_x(x.vec(at + j * blk.lanes, blk.lanes))
                        b.assign(accs[t][i][j], arith.mac(accs[t][i][j], xv, wv[j]))

        def wide_taps(kh, ih, kws: tuple) -> None:
            """One tap, or two summed in 16 bits, of a window row, for every pixel and channel of the tile:
            vectors of channels whose bytes load as one (16 bytes), multiplied 8 at a time."""
            for t, (blk, ch0) in enumerate(items):
                per_load, per_half = max(1, 16 // blk.lanes), max(1, 8 // blk.lanes)
                loads = [range(j, min(j + per_load, blk.nr)) for j in range(0, blk.nr, per_load)]
                pixel0 = [b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0, 1) + kw * dx) * g.c + ch0) for kw in kws]
                wv: dict[tuple[int, int], Expr] = {}    # (tap, first vector of a half): its weights
                for k, kw in enumerate(kws):
                    wrow = (kh * g.kw + kw) * g.c + ch0
                    if not pairs:       # int16 in memory, a half per load
                        wv.update({(k, j): b.let("wv", wbuf.vec(wrow + j * blk.lanes,
                                                                min(per_half, blk.nr - j) * blk.lanes))
                                   for j in range(0, blk.nr, per_half)})
                        continue
                    for load in loads:  # int8 in memory, loaded as the activations are (SMULL2 takes high halves)
                        w8 = b.let("wv", wbuf.vec(wrow + load.start * blk.lanes, len(load) * blk.lanes))
                        for h in range(load.start, load.stop, per_half):
                            first, n_half = (h - load.start) * blk.lanes, min(per_half, load.stop - h) * blk.lanes
                            half = Shuffle(w8, tuple(range(first, first + n_half))) if n_half < w8.lanes else w8
                            wv[k, h] = b.let("ww", Cast(half, "i16")) if len(kws) == 1 else half
                for i in range(rows):
                    for load in loads:
                        xv = [b.let("xv", x.vec(p + i * g.stride[1] * g.c + load.start * blk.lanes,
                                                len(load) * blk.lanes)) for p in pixel0]
                        for h in range(load.start, load.stop, per_half):
                            n_half = min(per_half, load.stop - h) * blk.lanes
                            first = (h - load.start) * blk.lanes
                            xh = [Shuffle(v, tuple(range(first, first + n_half))) if n_half < v.lanes else v
                                  for v in xv]
                            if len(kws) == 2:
                                product = b.let("p", Cast(xh[0], "i16") * Cast(wv[0, h], "i16")
                                                + Cast(xh[1], "i16") * Cast(wv[1, h], "i16"))
                            else:
                                xw = b.let("xw", Cast(xh[0], "i16"))
                            for j in range(h, h + n_half // blk.lanes):
                                part = tuple(range((j - h) * blk.lanes, (j - h + 1) * blk.lanes))

                                def pick(v: Expr) -> Expr:
                                    return Shuffle(v, part) if v.lanes > blk.lanes else v
                                gain = (Cast(pick(product), "i32") if len(kws) == 2
                                        else Cast(pick(xw), "i32") * Cast(pick(wv[0, h]), "i32"))
                                b.assign(accs[t][i][j], accs[t][i][j] + gain)

        with b.loop("kh", kh_lo, kh_hi) as kh:
            ih = g.in_row(oh, 0) + kh * dy
            if pairs and isinstance(kw_lo, Const) and isinstance(kw_hi, Const):
                columns = list(range(kw_lo.value, kw_hi.value))
                for at in range(0, len(columns), 2):
                    wide_taps(kh, ih, tuple(const(kw) for kw in columns[at: at + 2]))
            else:
                with b.loop("kw", kw_lo, kw_hi) as kw:
                    if wide:
                        wide_taps(kh, ih, (kw,))
                    else:
                        plain_tap(kh, ih, kw)
        for t, (blk, ch0) in enumerate(items):
            for i in range(rows):
                store_pixel(b, out, arith, blk, accs[t][i], ch0, ((n * g.oh + oh) * g.ow + ow0 + i) * g.c + ch0)

    def tile(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        for blk in blocks:
            with b.loop("cb", 0, blk.count) as cb:
                block_body([(blk, b.let("ch0", blk.start + cb * blk.width))], rows, n, oh, ow0,
                           kh_lo, kh_hi, kw_lo, kw_hi)

    def whole_pixel(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        items = [(blk, const(blk.start + r * blk.width)) for blk in blocks for r in range(blk.count)]
        block_body(items, rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi)

    order = row_order(g, mr, backward, x, out, sum(blk.nr * blk.count for blk in blocks) if whole else None)
    spatial_loops(b, g, order, tile, whole_pixel)
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen)


def depthwise_pairs_style(ctx: LowerContext, node: Node, g: Geometry) -> DotStyle | None:
    """The byte-pair form for a quantized depthwise convolution on 4-channel words (or two words of int16
    channel pairs), if the target has it."""
    quant = node_quant(ctx.graph.values, node)
    if quant is None or g.c % 4 or not _dot_operands(quant):
        return None
    return next((style for style in ctx.target.int_simd.dots if style.byte_pairs), None)


def lower_depthwise_pairs(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray,
                          arith: IntArith, x: Buffer, out: Buffer, params: tuple[Buffer, ...],
                          backward: bool = False, whole: bool = False) -> Kernel:
    """Depthwise int8 on the Arm DSP, 4 channels per 32-bit load. A pixel's word widens into the pairs
    (c0, c2) and (c1, c3) (sxtab16, zero point included); the weights are stored already widened in that
    order, int16 (w_c0, w_c2, w_c1, w_c3) per tap; SMLABB and SMLATT multiply the low and high halves
    into the 4 channels' accumulators. int16 activations (zero point 0) come as pairs already: the words
    (c0, c1) and (c2, c3), weights in channel order, and `arith` is a plain IntArith. A tile is `dw_mr`
    output pixels sharing each tap's weights; border pixels clip their window with loop bounds, so no tap
    tests anything."""
    chosen = ctx.schedule(node, workload("depthwise_pairs", g, g.c, x, "pairs"),
                          Schedule("depthwise_pairs", ctx.knobs.dw_mr, 1))
    quads = g.c // 4
    halves = x.dtype == "i16"
    pairs = np.array([0, 1, 2, 3] if halves else [0, 2, 1, 3])
    taps = weight[:, 0].transpose(1, 2, 0).reshape(g.kh, g.kw, quads, 4)[..., pairs]   # [kh][kw][c/4][4]
    wbuf = ctx.const(np.ascontiguousarray(taps).astype(np.int16), "w")
    b = Builder()
    dy, dx = g.dilation

    def low(v: Expr) -> Expr:
        return Cast(Cast(v, "i16"), "i32")

    def high(v: Expr) -> Expr:
        return binop("shr", v, 16)

    def quads_body(qs, rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        """Tiles of `rows` pixels x each quad of channels in `qs`, accumulated over one pass through the
        window, then stored."""
        ch0s = [b.let("ch0", q * 4) for q in qs]
        accs = [[[b.local("acc", arith.init(ch0 + c, 1)) for c in range(4)] for _ in range(rows)] for ch0 in ch0s]
        with b.loop("kh", kh_lo, kh_hi) as kh:
            ih = g.in_row(oh, 0) + kh * dy
            with b.loop("kw", kw_lo, kw_hi) as kw:
                for q, ch0, acc in zip(qs, ch0s, accs):
                    pixel0 = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0, 1) + kw * dx) * g.c + ch0)
                    wrow = b.let("wr", ((kh * g.kw + kw) * quads + q) * 4)
                    wv = [b.let("wv", Reinterpret(wbuf.vec(wrow + 2 * odd, 2), "i32", 1)) for odd in (0, 1)]
                    for i in range(rows):
                        pixel = pixel0 + i * g.stride[1] * g.c
                        word = None if halves else b.let("xw", arith.operand(x, pixel, 1))
                        for odd in (0, 1):
                            if halves:      # (c0, c1) or (c2, c3)
                                pair = b.let("xp", Reinterpret(x.vec(pixel + 2 * odd, 2), "i32", 1))
                                lo, hi = acc[i][2 * odd], acc[i][2 * odd + 1]
                                b.assign(lo, lo + low(pair) * low(wv[odd]))
                                b.assign(hi, hi + high(pair) * high(wv[odd]))
                                continue
                            pair = b.let("xp", BytePairs(word, bool(odd), arith.zero_pair, arith.unsigned))
                            lo, hi = acc[i][odd], acc[i][odd + 2]      # (c0, c2) or (c1, c3)
                            b.assign(lo, lo + low(pair) * low(wv[odd]))
                            b.assign(hi, hi + high(pair) * high(wv[odd]))
        for ch0, acc in zip(ch0s, accs):
            for i in range(rows):
                base = ((n * g.oh + oh) * g.ow + ow0 + i) * g.c + ch0
                for c in range(4):
                    b.store(out, base + c, arith.result(acc[i][c], ch0 + c, base + c, 1))

    def tile(rows, *at) -> None:
        with b.loop("q", 0, quads) as q:
            quads_body([q], rows, *at)

    def whole_pixel(rows, *at) -> None:
        quads_body([const(q) for q in range(quads)], rows, *at)

    order = row_order(g, chosen.schedule.mr, backward, x, out, g.c if whole else None)
    spatial_loops(b, g, order, tile, whole_pixel)
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen)


# --- graph ops ---------------------------------------------------------------------------------------

# --- row windows: convolutions over too few channels for a step -----------------------------------

ROW_WINDOW_BYTES = 64       # longest window row taken as one tap's channels


def row_window_style(ctx: LowerContext, node: Node, g: Geometry, weight: np.ndarray) -> DotStyle | None:
    """The raw-bytes dot-product form for a quantized convolution whose input channels do not fill its steps
    (an image network's first layer, on 1 or 3 channels), if the target has one, or the Arm DSP's byte
    pairs: such a convolution runs by window rows (lower_row_windows). On AVX-512 VNNI MobileNetV2's first
    layer took 0.125 ms so, 0.33 ms in plain integer arithmetic (a scalar byte broadcast per pixel and input
    channel); on the Cortex-M4 ResNet-8's first layer takes 7 % fewer estimated cycles than one byte at a
    time, misaligned words included."""
    quant = node_quant(ctx.graph.values, node)
    if (quant is None or node.attrs["group"] != 1 or g.dilation[1] != 1
            or weight.dtype != np.int8 or np.any(quant.w_zp) or ctx.graph.values[node.inputs[0]].dtype not in _BYTES
            or not _window_sums_fit(weight)):
        return None
    for style in ctx.target.int_simd.dots:
        raw = style.raw_bytes and not style.scalar or style.byte_pairs
        if not raw or style.matrix or g.c % style.group == 0:
            continue        # no raw bytes, or the channels fill whole steps: the dense form takes them
        width = -(-g.kw * g.c // style.group) * style.group
        lo, hi = dataclasses.replace(g, kw=-(-width // g.c)).interior(1)
        if width > ROW_WINDOW_BYTES or 4 * (hi - lo) < 3 * g.ow:
            continue        # long rows; or narrow images, most of whose columns the padding clips
        if style.widening and (not ctx.target.aarch64_neon or g.m % 4 or weight.min() < -127):   # see dot_style
            continue
        return style
    return None


def lower_row_windows(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray, style: DotStyle,
                      ins: list[Buffer], out: Buffer, params: tuple[Buffer, ...], backward: bool) -> Kernel:
    """A row of a window, kw pixels x C channels, lies side by side in the NHWC input: read as the channels
    of one tap, it fills the steps of the dot-product form that few channels alone would leave mostly
    empty. Its bytes are padded to whole steps with zero weights, so the bytes read past the row's end (the
    next pixel's) add nothing; the zero point comes off through the bias and DotArith's window table over
    the rows the padding keeps (on the Arm DSP in the widening, BytePairArith). The columns are walked as
    if the window were as wide as the bytes it reads (`wide`): its interior, where those stay in their row,
    runs in tiles; the columns outside, whose window the padding clips, one pixel at a time over the taps
    they keep, in plain integer arithmetic."""
    x = ins[0]
    quant = node_quant(ctx.graph.values, node)
    bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
    residual = _residual(node, ins)
    row = g.kw * g.c
    width = -(-row // style.group) * style.group
    rows_w = np.zeros((g.m, width, g.kh, 1), np.int8)      # (out channels, row bytes, kh, 1)
    rows_w[:, :row, :, 0] = weight.transpose(0, 3, 1, 2).reshape(g.m, row, g.kh)
    if style.byte_pairs:        # the zero point comes off in the widening
        arith = BytePairArith(ctx, style, quant, bias, rows_w, x.dtype, True, residual)
    else:
        arith = DotArith(ctx, style, quant, bias, rows_w, x.dtype, residual, padded=True)
    plain = IntArith(ctx, quant, bias, residual)
    wide = dataclasses.replace(g, kw=-(-width // g.c))
    lanes, step = ctx.target.lanes, arith.group
    default = (ctx.knobs.core_mr, ctx.knobs.core_nr) if arith.scalar else (ctx.knobs.mr, ctx.knobs.nr)
    chosen = ctx.schedule(node, workload("row_windows", g, 1, x, arith_form(arith)),
                          Schedule("row_windows", *arith.tile(*default)))
    mr, nr = chosen.schedule.mr, chosen.schedule.nr
    blocks = channel_blocks(g.m, lanes, min(nr, -(-g.m // lanes)))
    packed, offsets = _pack_dense(rows_w, 1, blocks, step)
    wbuf = ctx.const(arith.weights(packed), "w")
    taps = ctx.const(weight.transpose(2, 3, 1, 0).copy(), "wt")        # [kh][kw][c][m] for the clipped columns
    b = Builder()
    dy = g.dilation[0]

    def windows(rows: int, n, oh, ow0, kh_lo, kh_hi, blk: ChannelBlock, ch0: Expr, panel: Expr) -> None:
        def start(ch: Expr) -> Expr:
            if arith.window is None:
                return arith.init(ch, blk.lanes)
            return arith.init_window(ch, blk.lanes, kh_lo, kh_hi, const(0), const(1))
        accs = [[b.local("acc", start(ch0 + j * blk.lanes)) for j in range(blk.nr)] for _ in range(rows)]
        with b.loop("kh", kh_lo, kh_hi) as kh:
            first = b.let("px", ((n * g.h + g.in_row(oh, 0) + kh * dy) * g.w + g.in_row(ow0, 1)) * g.c)
            wrow = b.let("wr", panel + kh * (width * blk.width))
            with b.loop("c", 0, width, arith.span) as c:
                operands: dict[int, list[Expr]] = {}
                for s in range(0, arith.span, step):
                    wv = [b.let("wv", arith.load_w(wbuf.vec(wrow + (c + s) * blk.width + j * blk.lanes * step,
                                                            blk.lanes * step))) for j in range(blk.nr)]
                    for i in range(rows):
                        if i not in operands:
                            operands[i] = arith.operands(x, first + i * g.stride[1] * g.c + c, blk.lanes,
                                                         lambda e: b.let("a", e))
                        for j in range(blk.nr):
                            b.assign(accs[i][j], arith.mac(accs[i][j], operands[i][s // step], wv[j]))
        for i in range(rows):
            store_pixel(b, out, arith, blk, accs[i], ch0, ((n * g.oh + oh) * g.ow + ow0 + i) * g.m + ch0)

    def clipped(n, oh, ow, kh_lo, kh_hi, blk: ChannelBlock, ch0: Expr) -> None:
        kw_lo, kw_hi = (b.let("kw", v) for v in g.window(ow, 1))
        accs = [b.local("acc", plain.init(ch0 + j * blk.lanes, blk.lanes)) for j in range(blk.nr)]
        with b.loop("kh", kh_lo, kh_hi) as kh:
            ih = g.in_row(oh, 0) + kh * dy
            with b.loop("kw", kw_lo, kw_hi) as kw:
                px = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow, 1) + kw) * g.c)
                for c in range(g.c):
                    a = b.let("a", plain.operand(x, px + c, blk.lanes))
                    at = ((kh * g.kw + kw) * g.c + c) * g.m + ch0
                    for j in range(blk.nr):
                        w = plain.load_w(taps.vec(at + j * blk.lanes, blk.lanes))
                        b.assign(accs[j], plain.mac(accs[j], a, w))
        store_pixel(b, out, plain, blk, accs, ch0, ((n * g.oh + oh) * g.ow + ow) * g.m + ch0)

    def tile(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        inside = isinstance(kw_lo, Const)       # the interior's tiles; a clipped pixel's window comes bound
        for bi, blk in enumerate(blocks):
            with b.loop("cb", 0, blk.count) as cb:
                ch0 = b.let("ch0", blk.start + cb * blk.width)
                if inside:
                    panel = b.let("panel", offsets[bi] + cb * (g.kh * width * blk.width))
                    windows(rows, n, oh, ow0, kh_lo, kh_hi, blk, ch0, panel)
                else:
                    clipped(n, oh, ow0, kh_lo, kh_hi, blk, ch0)

    order = Order(mr, backward=backward)
    spatial_loops(b, wide, order, tile)
    return Kernel(name, params, b.block(), conv_reuse(wide, x, out, arith, order), chosen)


def _conv_macs(graph: Graph, node: Node) -> int:
    w = graph.constants[node.inputs[1]]
    return int(np.prod(graph.shape(node.outputs[0]))) * int(np.prod(w.shape[1:]))


def conv(ctx: LowerContext, node: Node, name: str) -> Kernel:
    from aot.ops import conv_amx, conv_rows  # those modules build on this one
    ins, outs, params = ctx.io(node)
    g = geometry(ctx.graph, node)
    weight = ctx.graph.constants[node.inputs[1]]
    groups = node.attrs["group"]
    style = dot_style(ctx, node, groups, g.c // groups)
    depthwise = groups == g.c and weight.shape[1] == 1 and g.m == g.c
    long = _long_arith(ctx, node, ins, weight)
    if long is not None:        # the other forms sum in int32
        weight = _minus_zero_point(weight, long.q, axis=0)
        backward, whole = node.name in ctx.backward, node.name in ctx.whole
        if depthwise:
            return lower_depthwise(ctx, node, name, g, weight, long, ins[0], outs[0], params, backward, whole)
        return lower_dense(ctx, node, name, g, groups, weight, long, ins[0], outs[0], params, backward, whole)
    if not depthwise and conv_amx.applies(ctx, style, g, groups):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        arith = DotArith(ctx, style, node_quant(ctx.graph.values, node), bias, weight, ins[0].dtype,
                         _residual(node, ins))      # unpadded: im2row fills the padding with the zero point
        return conv_amx.lower_amx(ctx, node, name, g, weight, arith, ins[0], outs[0], params)
    arith = _arith(ctx, node, ins, style, weight, depthwise)
    quant = node_quant(ctx.graph.values, node)
    if quant is not None and not (style and style.raw_bytes):
        weight = _minus_zero_point(weight, quant, axis=0)
    if not depthwise and conv_rows.applies(ctx, quant, groups, weight, ins[0].dtype, g):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        return conv_rows.lower_rows(ctx, node, name, g, weight, IntArith(ctx, quant, bias, _residual(node, ins)), quant,
                                    ins[0], outs[0], params)
    if depthwise and ctx.target.int_simd.predicated and conv_rows.applies(ctx, quant, 1, weight, ins[0].dtype):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        return conv_rows.lower_depthwise(ctx, node, name, g, weight,
                                         IntArith(ctx, quant, bias, _residual(node, ins)), quant, ins[0], outs[0],
                                         params)
    backward, whole = node.name in ctx.backward, node.name in ctx.whole
    rows_style = None if depthwise else row_window_style(ctx, node, g, ctx.graph.constants[node.inputs[1]])
    if rows_style is not None:
        return lower_row_windows(ctx, node, name, g, ctx.graph.constants[node.inputs[1]], rows_style, ins, outs[0],
                                 params, backward)
    if depthwise:
        pairs = depthwise_pairs_style(ctx, node, g)
        if pairs is not None:
            bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
            arith = IntArith(ctx, quant, bias, _residual(node, ins)) if quant.x_dtype == "int16" else \
                BytePairArith(ctx, pairs, quant, bias, ctx.graph.constants[node.inputs[1]], ins[0].dtype,
                              any(node.attrs.get("pads", (0,))), _residual(node, ins))
            return lower_depthwise_pairs(ctx, node, name, g, weight, arith, ins[0], outs[0], params, backward,
                                         whole)
        return lower_depthwise(ctx, node, name, g, weight, arith, ins[0], outs[0], params, backward, whole)
    return lower_dense(ctx, node, name, g, groups, weight, arith, ins[0], outs[0], params, backward, whole)


def _long_arith(ctx: LowerContext, node: Node, ins, weight: np.ndarray) -> LongArith | None:
    """A LongArith for a quantized node whose int32 sums could overflow, else None. weight: OIHW."""
    quant = node_quant(ctx.graph.values, node)
    if quant is None:
        return None
    bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
    narrowing = accumulator_shift(weight, quant, bias)
    return LongArith(ctx, quant, bias, _residual(node, ins), narrowing) if narrowing else None


def _arith(ctx: LowerContext, node: Node, ins, style: DotStyle | None, weight: np.ndarray,
           depthwise: bool = False) -> Arith:
    """weight: OIHW (output channel first)."""
    bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
    quant = node_quant(ctx.graph.values, node)
    residual = _residual(node, ins)
    if style is not None and style.byte_pairs and quant.x_dtype == "int16":
        return HalfPairArith(ctx, style, quant, bias, residual)
    if style is not None and style.byte_pairs:
        return BytePairArith(ctx, style, quant, bias, weight, ins[0].dtype, any(node.attrs.get("pads", (0,))),
                             residual)
    if style is not None:
        return (MatrixArith if style.matrix else DotArith)(ctx, style, quant, bias, weight, ins[0].dtype, residual,
                                                           padded=style.raw_bytes and any(node.attrs.get("pads", (0,))))
    # AArch64 only: elsewhere the window table (16 int32 per channel of a padded 3x3 layer) costs more flash
    # than the speed it buys is worth (x86: 12 % on MobileNetV2's depthwise layers, int8 flash +35 %)
    if quant is not None and depthwise and quant.x_dtype in _BYTES and lane_arith_applies(ctx, LaneArith.group,
                                                                                          quant):
        wide = _minus_zero_point(weight, quant, axis=0)
        if _window_sums_fit(wide):
            return WideArith(ctx, quant, bias, wide, ins[0].dtype, residual, any(node.attrs.get("pads", (0,))))
    if quant is not None and lane_arith_applies(ctx, weight.shape[1], quant):
        return LaneArith(ctx, quant, bias, residual)
    if quant is not None:
        return IntArith(ctx, quant, bias, residual)
    return FloatArith(ctx, bias, node.attrs.get("acts", ()), residual, weight.shape[1])


def _residual(node: Node, ins: list[Buffer]) -> Buffer | None:
    """The buffer of a fused residual Add's other operand, if the node has one."""
    index = op_def(node.op).index("residual")
    return ins[index] if len(ins) > index else None


def _window_sums_fit(weight: np.ndarray) -> bool:
    """Whether DotArith's table of z' sum w over a padded window's taps fits int32 (|z'| <= 256)."""
    per_channel = np.abs(weight.astype(np.int64)).reshape(weight.shape[0], -1).sum(axis=1)
    return per_channel.size == 0 or int(per_channel.max()) * 256 < 2**31


def _fits_int8(values: np.ndarray) -> bool:
    return values.size == 0 or (values.min() >= -128 and values.max() <= 127)


def _minus_zero_point(weight: np.ndarray, quant: Quant, axis: int) -> np.ndarray:
    """Integer weights with their per-channel zero point subtracted (int16, narrowed when packed)."""
    shape = [1] * weight.ndim
    shape[axis] = -1
    return weight.astype(np.int16) - quant.w_zp.reshape(shape).astype(np.int16)


def _check_group(rw: Rewriter, node: Node) -> None:
    """`group` splits the input channels into groups the weight's second axis spans, and divides the
    output channels (onnx's inference does not check it)."""
    group = int(node.attrs.get("group", 1))
    channels = rw.values[node.inputs[0]].shape[1]
    out_channels, per_group = rw.values[node.inputs[1]].shape[:2]
    if group < 1 or channels != group * per_group or out_channels % group:
        raise ModelError(f"node '{node.name}' (Conv): group {group} does not fit {channels} input channels and "
                         f"a weight of {out_channels}x{per_group} channels")


def canonical_conv(rw: Rewriter, node: Node) -> None:
    """1-D and 2-D convolutions with constant weights; a 1-D one runs as 2-D over a height of 1. A weight
    or bias computed at run time takes a direct convolution instead (conv_direct.py), and so does a 3-D
    convolution (conv_volume.py)."""
    _check_group(rw, node)
    x, weight, bias = (operand(node, name) for name in ("x", "weight", "bias"))
    if len(rw.values[weight].shape) == 5:      # 3-D: direct loops over the model's NCDHW layout
        canonical_volume_conv(rw, node)
        return
    if any(name and name not in rw.constants for name in (weight, bias)):
        from aot.ops.conv_direct import canonical_conv_computed  # that module builds on this one
        canonical_conv_computed(rw, node)
        return
    w = rw.constants[weight]
    rank = w.ndim - 2
    if rank not in (1, 2):
        raise refuse(node, f"{rank}-D convolution is not supported (1-D and 2-D are)")
    attrs = spatial_attrs(rw, node, tuple(w.shape[2:]))
    attrs["group"] = int(node.attrs.get("group", 1))
    attrs.update(fused_acts(node))
    if rank == 1:
        x2, out2, w2 = lift_1d(rw, node, attrs, weight)
        rw.add("Conv", node.name, [x2, w2, bias], [out2], **attrs)
        view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    else:
        rw.add("Conv", node.name, [x, weight, bias], node.outputs, **attrs)


define("Conv", canonical=canonical_conv, lower=conv, macs=_conv_macs, layout=Layout.NHWC, fusion=Fusion.MATRIX,
       weight_channel_axis=0, operands=MATRIX_OPERANDS, rows_either_way=True, quant=QuantForm.MATRIX, quant_acts=True)
