"""What a convolution lets the memory planner overlap (kernel.ir.Reuse): its loops replayed in the order
they run, as checkpoints of what has been written and what is still to be read, and the loop order
whose first pixels, computed whole, let the output overlap the input closest (row_order)."""

from __future__ import annotations

import numpy as np

from aot.kernel.ir import (
    Buffer,
    Reuse,
)
from aot.ops.conv.arith import Arith
from aot.ops.conv.geometry import Geometry
from aot.ops.conv.tiling import Columns, Order


def progress(g: Geometry, order: Order, in_bytes: int, out_bytes: int) -> tuple[tuple[int, int], ...]:
    """The Reuse checkpoint (see kernel.ir.Reuse) of spatial_loops in `order` that binds, of one per
    phase: a tile (all its blocks of channels, each read and stored in turn: its reads and writes
    interleave) or a half of a pixel computed whole (its reads, then its writes). Each phase's writes are
    the tile's output pixels, its reads the bytes from the first to the last of its window's. Front to
    back a checkpoint is (the end of all writes so far, the start of all reads still to come, this
    phase's included); back to front (the start of all writes so far, the end of all reads still to
    come). The one kept has the largest shift: the others allow every placement it allows.

    Computed with numpy (a long 1-D signal has tens of thousands of phases)."""
    written, needed = _checkpoint_arrays(g, order, in_bytes, out_bytes)
    if not written.size:        # nothing written before a read: any placement will do
        return ((0, 0),)
    binding = int(((needed - written) if order.backward else (written - needed)).argmax())
    return ((int(written[binding]), int(needed[binding])),)

def overlap_shift(g: Geometry, order: Order, in_bytes: int, out_bytes: int) -> int:
    """Reuse.shift of progress(g, order, ...) (row_order asks for many)."""
    written, needed = _checkpoint_arrays(g, order, in_bytes, out_bytes)
    if not written.size:
        return 0
    return int(((needed - written) if order.backward else (written - needed)).max())

def _checkpoint_arrays(g: Geometry, order: Order, in_bytes: int, out_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """progress's checkpoints as two arrays, written and needed: every row's phases at once, each row's
    those of one row of tiles (_row_phases) moved to its pixels and to the input rows its window reads."""
    out_pixel, in_pixel = g.m * out_bytes, g.c * in_bytes
    cols = Columns.of(g, order.mr, order.border)
    template = {careful: _row_phases(g, cols.tiles(careful, order.columns_backward))
                for careful in {0, order.careful}}
    image, row = np.arange(g.n).repeat(g.oh), np.tile(np.arange(g.oh), g.n)    # the rows in the order they run
    if order.backward:
        image, row = image[::-1], row[::-1]
    taps = row[:, None] * g.stride[0] - g.pads[0] + np.arange(g.kh) * g.dilation[0]   # the input rows read
    inside = (taps >= 0) & (taps < g.h)
    read_any = inside.any(axis=1)
    top = np.where(read_any, (image * g.h + np.where(inside, taps, g.h).min(axis=1)) * g.w, 0)
    bottom = np.where(read_any, (image * g.h + np.where(inside, taps, -1).max(axis=1)) * g.w, 0)
    first = (image * g.oh + row) * g.ow

    def phases(rows: slice, careful: int) -> list[np.ndarray]:
        ow0, width, writes, col_lo, col_hi, reads = template[careful]
        at = first[rows, None] + ow0
        return [np.broadcast_to(writes, at.shape).ravel(), (at * out_pixel).ravel(),
                ((at + width) * out_pixel).ravel(), (reads & read_any[rows, None]).ravel(),
                ((top[rows, None] + col_lo) * in_pixel).ravel(), ((bottom[rows, None] + col_hi + 1) * in_pixel).ravel()]
    count = len(first)      # image 0's first row, where the careful pixels are, runs first (last backward)
    if not order.careful:
        runs = [phases(slice(0, count), 0)]
    elif order.backward:
        runs = [phases(slice(0, count - 1), 0), phases(slice(count - 1, count), order.careful)]
    else:
        runs = [phases(slice(0, 1), order.careful), phases(slice(1, count), 0)]
    writes, w_lo, w_hi, reads, r_lo, r_hi = (np.concatenate(column) for column in zip(*runs))
    return _checkpoints(writes, w_lo, w_hi, reads, r_lo, r_hi, order.backward)


def _row_phases(g: Geometry, tiles: list[tuple[int, int, bool]]) -> tuple[np.ndarray, ...]:
    """The phases of one row of `tiles` (first column, width, computed whole): per phase its tile's first
    column and width, whether it writes, the first and last input column its window reads and whether
    it reads any (a pixel computed whole is two phases: its reads, then its writes)."""
    ow0 = np.array([t[0] for t in tiles], np.int64).reshape(-1, 1)
    width = np.array([t[1] for t in tiles], np.int64).reshape(-1, 1)
    whole = np.array([t[2] for t in tiles], bool)
    s = g.stride[1]
    offsets = np.arange(g.kw, dtype=np.int64) * g.dilation[1] - g.pads[1]  # column o reads o * s + off
    lo = np.maximum(ow0, -(offsets // s))
    hi = np.minimum(ow0 + width, (g.w - 1 - offsets) // s + 1)
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


def conv_reuse(g: Geometry, x: Buffer, out: Buffer, arith: Arith, order: Order | None) -> tuple[Reuse, ...]:
    """What a convolution lets the memory planner overlap: its output with its input behind what it has
    read, where it runs `order` (see progress), and a fused residual exactly (read at an index,
    then written there) in any loop order."""
    reuse: tuple[Reuse, ...] = ()
    if order is not None:
        checkpoints = progress(g, order, x.nbytes // x.size, out.nbytes // out.size)
        reuse += (Reuse(0, progress=checkpoints, backward=order.backward),)
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
        return max(0, overlap_shift(g, order, x.nbytes // x.size, out.nbytes // out.size))

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
