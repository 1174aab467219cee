"""int8 convolution as dot products along the rows of the window, for Helium (Armv8.1-M MVE) and
32-bit NEON; int16 activations too on Helium, 8 to a vector (VMLADAVA.S16, the int8 weights widened as
they load).

In NHWC one row of a convolution window, kw pixels of c channels, is kw*c consecutive bytes of the
input (one tap's c bytes when the window is dilated along the row). With the weights packed so that
the same row of one output channel is consecutive too, a window is `segments` runs of `seg_len` bytes
and the reduction is a horizontal dot product over 16-byte vectors: VMLADAVA.S8 multiplies 16 int8
pairs and adds the sum to a core register. A tile of MR output pixels x NR output channels keeps
MR*NR such sums in core registers; each step loads MR input vectors and NR weight vectors for
MR*NR*16 multiply-accumulates. A run that is not a multiple of 16 ends with one predicated load
(VCTP); its weights are zero-padded in flash. On NEON each output's sum is a vector of 4 int32 lanes
(VMULL.S8, VPADAL.S16), added across once at the end.

The activations' zero point never comes off the bytes: sum (x - zx) w = sum x w - zx sum w, the last
term folded into the bias. No padding is copied. Where each tap is whole vectors (c a multiple of 16),
a border window skips its taps over the padding: its rows and taps are loop bounds, as in the generic
kernel, and its bias holds zx * w of the taps it keeps only (from a table of prefix sums). Elsewhere
(Helium only) a border window reads its taps over the padding as zx (the real 0) through predicated
loads whose inactive lanes are filled with zx, so the same folded bias holds everywhere.

The tile's sums are gathered into one vector per output pixel and requantized together (IntArith,
so the results are exactly those of the generic integer kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.graph.ir import Node
from aot.graph.node_quant import Quant
from aot.kernel.ir import (
    Buffer,
    Builder,
    Cast,
    Const,
    Expr,
    Kernel,
    Lanes,
    MaskedLoad,
    Reduce,
    RowDot,
    binop,
    const,
    maximum,
    minimum,
    select,
)
from aot.ops import LowerContext
from aot.ops.conv.arith import IntArith
from aot.ops.conv.blocks import ChannelBlock, channel_blocks
from aot.ops.conv.declarations import conv_reuse
from aot.ops.conv.geometry import Geometry, workload
from aot.ops.conv.tiling import Order, spatial_loops
from aot.schedule import Schedule

VECTOR = 16             # int8 lanes per 128-bit vector


def vector_lanes(x_dtype: str) -> int:
    """Activations per 128-bit vector: 16 bytes, or 8 int16 (Helium's VMLADAVA.S16, weights widened from
    int8 as they load)."""
    return VECTOR if x_dtype in ("i8", "u8") else VECTOR // 2


MIN_RUN = 8             # shorter window rows leave most of each vector idle: the generic kernel does better


def acc_lanes(ctx: LowerContext) -> int | None:
    """int32 lanes per output's sum: 1 on Helium (VMLADAVA into a core register), 4 on 32-bit NEON
    (VPADAL into a vector, summed across at the end); None where this lowering does not apply (AArch64's
    SDOT/SMLAL forms are the generic kernel's)."""
    lanes = ctx.target.int_simd.row_lanes
    if lanes == 1 or (lanes == 4 and ctx.target.pointer_bits == 32):
        return lanes
    return None


def applies(ctx: LowerContext, quant: Quant | None, groups: int, weight: np.ndarray, x_dtype: str,
            g: Geometry | None = None) -> bool:
    """Whether this lowering takes a Conv: quantized, int8 activations (or int16 ones on Helium), ungrouped,
    weights that stay int8 after their zero point comes off, on a target with Helium's or 32-bit NEON's row
    dot products; for a dense convolution (geometry `g`) also window rows of at least MIN_RUN elements."""
    lanes = acc_lanes(ctx)
    vector = vector_lanes(x_dtype)
    rows = Rows.of(g, vector) if g is not None else None
    return (lanes is not None and ctx.knobs.simd and quant is not None and groups == 1
            and (x_dtype == "i8" or (x_dtype == "i16" and lanes == 1))
            and weight.min() >= -128 and weight.max() <= 127
            and (rows is None or rows.seg_len >= MIN_RUN)
            # NEON has no predicated loads (LLVM splits a masked one into lanes): a border window clips to
            # whole vectors instead, so padding needs taps of whole vectors; and rows of at least a vector
            # (a short one's sums cost more to requantize than they save).
            and (lanes == 1 or (rows is not None and rows.seg_len >= vector
                                and (rows.tap_chunks > 0 or not any(g.pads)))))


@dataclass(frozen=True)
class Rows:
    """How a window splits into contiguous runs of the input."""
    segments: int       # runs per window: kh (whole rows) or kh * kw (one tap each, dilated rows)
    seg_len: int        # elements per run
    chunks: int         # vectors per run, the last one partial if seg_len is not a whole number of them
    tap_chunks: int     # vectors per tap where runs are whole rows and each tap is whole vectors (a window
                        # clipped to taps [lo, hi) is then chunks [lo, hi) * tap_chunks); else 0

    @staticmethod
    def of(g: Geometry, vector: int = VECTOR) -> Rows:
        whole_rows = g.dilation[1] == 1
        segments = g.kh if whole_rows else g.kh * g.kw
        seg_len = g.kw * g.c if whole_rows else g.c
        tap_chunks = g.c // vector if whole_rows and g.c % vector == 0 else 0
        return Rows(segments, seg_len, -(-seg_len // vector), tap_chunks)


def pack(weight: np.ndarray, rows: Rows, blocks: list[ChannelBlock], vector: int = VECTOR) \
        -> tuple[np.ndarray, list[int]]:
    """OIHW int weights -> per channel block: [segment][chunk][channel][vector] int8, zero-padded; returns
    the packed array and the offset of each block run."""
    m = weight.shape[0]
    runs = weight.transpose(0, 2, 3, 1).reshape(m, rows.segments, rows.seg_len)     # OHWI rows
    padded = np.zeros((m, rows.segments, rows.chunks * vector), np.int8)
    padded[:, :, :rows.seg_len] = runs
    panels, offsets, offset = [], [], 0
    for blk in blocks:
        offsets.append(offset)
        for r in range(blk.count):
            first = blk.start + r * blk.width
            block = padded[first:first + blk.width].reshape(blk.width, rows.segments, rows.chunks, vector)
            panel = np.ascontiguousarray(block.transpose(1, 2, 0, 3)).reshape(-1)
            panels.append(panel)
            offset += panel.size
    return np.concatenate(panels), offsets


def zero_point_prefix(quant: Quant, weight: np.ndarray) -> np.ndarray:
    """[kh + 1][kw + 1][m] int32: -zx times the weights of each output channel summed over the taps of
    window rows < r and columns < t (wrapping like the int32 sums it corrects)."""
    taps = weight.astype(np.int64).sum(axis=1).transpose(1, 2, 0)            # [kh][kw][m]
    prefix = np.zeros((taps.shape[0] + 1, taps.shape[1] + 1, taps.shape[2]), np.int64)
    prefix[1:, 1:] = taps.cumsum(axis=0).cumsum(axis=1)
    return (-quant.x_zp * prefix).astype(np.int32)


def folded_bias(arith: IntArith, quant: Quant, weight: np.ndarray) -> np.ndarray:
    """The integer bias with -zx * sum(w) of each output channel folded in."""
    sums = weight.reshape(weight.shape[0], -1).astype(np.int64).sum(axis=1)
    bias = arith.bias.data.astype(np.int64) if arith.bias is not None else 0
    return np.clip(bias - quant.x_zp * sums, -(2**31), 2**31 - 1).astype(np.int32)


Tile = Callable[[int, Expr, Expr, Expr, bool], None]
Window = tuple[Expr, ...] | None     # rows [hl, hh) and taps [wl, wh) a clipped window keeps; None: all


def spatial(b: Builder, g: Geometry, mr: int, tile: Tile) -> None:
    """Loops over the output calling tile(width, n, oh, ow0, masked) for each run of `width` output
    pixels of a row; `masked` where some tap of a window lies over the padding. Interior rows go in
    tiles of mr, then one pixel at a time; border rows and columns likewise but masked."""

    def columns(n: Expr, oh: Expr, lo: int, hi: int, masked: bool) -> None:
        width = min(mr, hi - lo)
        if width <= 0:
            return
        end = lo + (hi - lo) // width * width
        with b.loop("ow", lo, end, width) as ow:
            tile(width, n, oh, ow, masked)
        if end < hi:
            with b.loop("ow", end, hi) as ow:
                tile(1, n, oh, ow, masked)

    row_lo, row_hi = g.interior(0)
    col_lo, col_hi = g.interior(1)
    with b.loop("n", 0, g.n) as n:
        for lo, hi, inside in ((0, row_lo, False), (row_lo, row_hi, True), (row_hi, g.oh, False)):
            if hi <= lo:
                continue
            with b.loop("oh", lo, hi) as oh:
                if not inside:
                    columns(n, oh, 0, g.ow, True)
                    continue
                columns(n, oh, 0, col_lo, True)
                columns(n, oh, col_lo, col_hi, False)
                columns(n, oh, col_hi, g.ow, True)


def lower_rows(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray, arith: IntArith,
               quant: Quant, x: Buffer, out: Buffer, params: tuple[Buffer, ...]) -> Kernel:
    """weight: OIHW integers with their zero point subtracted."""
    vector = vector_lanes(x.dtype)
    rows = Rows.of(g, vector)
    chosen = ctx.schedule(node, workload("rows", g, 1, x, "int"),
                          Schedule("rows", ctx.knobs.core_mr, ctx.knobs.core_nr))
    mr, nr = chosen.schedule.mr, chosen.schedule.nr
    sums = acc_lanes(ctx) or 1
    # Requantized as one vector: 4 lanes; 2 too on NEON (a D register), not on Helium (no 64-bit vectors).
    vector_widths = (ctx.target.lanes,) if sums == 1 else (ctx.target.lanes, 2)
    pairs_fit = bool(weight.min() > -128)
    blocks = channel_blocks(g.m, 1, min(nr, g.m))
    packed, offsets = pack(weight, rows, blocks, vector)
    wbuf = ctx.const(packed, "w")
    bias = ctx.const(folded_bias(arith, quant, weight), "b")
    zx = quant.x_zp
    # Border windows skip their taps over the padding where taps are whole vectors (fewer products than
    # masked loads, and the only way without predication: see applies).
    clips = rows.tap_chunks > 0 and any(g.pads)
    b = Builder()
    dy, dx = g.dilation

    def segment_offset(s: Expr) -> Expr:
        """Input elements from a window's first tap to the start of run s."""
        if rows.segments == g.kh and g.dilation[1] == 1:
            return s * (dy * g.w * g.c)
        kh, kw = binop("div", s, const(g.kw)), binop("rem", s, const(g.kw))
        return (kh * (dy * g.w) + kw * dx) * g.c

    def valid_lanes(oh: Expr, ow: Expr, s: Expr) -> tuple[Expr, Expr]:
        """[lo, hi): the bytes of run s of the window at (oh, ow) that lie inside the input."""
        if rows.segments == g.kh and g.dilation[1] == 1:
            kh = s
            lo, hi = g.window(ow, 1)
            lo, hi = lo * g.c, hi * g.c
            col_ok = None
        else:
            kh, kw = binop("div", s, const(g.kw)), binop("rem", s, const(g.kw))
            iw = g.in_row(ow, 1) + kw * dx
            lo, hi = const(0), const(g.c)
            col_ok = binop("and", binop("ge", iw, 0), binop("lt", iw, g.w))
        ih = g.in_row(oh, 0) + kh * dy
        ok = binop("and", binop("ge", ih, 0), binop("lt", ih, g.h))
        if col_ok is not None:
            ok = binop("and", ok, col_ok)
        return select(ok, lo, 0), select(ok, hi, 0)

    full, tail = divmod(rows.seg_len, vector)
    prefix = ctx.const(zero_point_prefix(quant, weight), "z") if clips else None

    def window_bias(ch: Expr, window: Window) -> Expr:
        """The int32 bias of channel ch for a window clipped to rows [hl, hh) and taps [wl, wh): the raw
        bias less zx times the weights of the taps inside, their sum a rectangle of the prefix sums
        (corners on an empty prefix are zero and left out)."""
        if window is None:
            return bias[ch]
        hl, hh, wl, wh = window
        total = arith.bias[ch] if arith.bias is not None else const(0, "i32")
        for r, t, sign in ((hh, wh, 1), (hl, wh, -1), (hh, wl, -1), (hl, wl, 1)):
            if not any(isinstance(v, Const) and v.value == 0 for v in (r, t)):
                corner = prefix[(r * (g.kw + 1) + t) * g.m + ch]
                total = total + corner if sign > 0 else total - corner
        return total

    def tile(width: int, blk: ChannelBlock, n: Expr, oh: Expr, ow0: Expr, ch0: Expr, panel: Expr,
             masked: bool, window: Window) -> None:
        """`window`: the rows and taps a clipped window keeps (whole segments, whole chunks); None: all."""
        biases = [window_bias(ch0 + j, window) for j in range(blk.nr)]
        accs = [[b.local("acc", biases[j] if sums == 1 else const(0, "i32", sums)) for j in range(blk.nr)]
                for _ in range(width)]
        origin = [b.let("px", ((n * g.h + g.in_row(oh, 0)) * g.w + g.in_row(ow0 + i, 1)) * g.c)
                  for i in range(width)]
        step = blk.nr * vector
        segs, chunks = ((0, rows.segments), (0, full)) if window is None else \
            (window[:2], (window[2] * rows.tap_chunks, window[3] * rows.tap_chunks))
        with b.loop("s", *segs) as s:
            offset = b.let("so", segment_offset(s))
            wrow = b.let("wr", panel + s * (rows.chunks * step))
            bounds = [tuple(b.let(h, v) for h, v in zip(("lo", "hi"), valid_lanes(oh, ow0 + i, s)))
                      for i in range(width)] if masked else []

            def chunk(q: Expr, count: int | None) -> None:
                wv = [b.let("wv", wbuf.vec(wrow + q * step + j * vector, vector)) for j in range(blk.nr)]
                for i in range(width):
                    at = origin[i] + offset + q * vector
                    if masked:
                        lo, hi = bounds[i]
                        xv = MaskedLoad(x, at, vector, hi - q * vector, lo - q * vector, zx)
                    elif count is not None:
                        xv = MaskedLoad(x, at, vector, const(count))
                    else:
                        xv = x.vec(at, vector)
                    a = b.let("xv", xv)
                    for j in range(blk.nr):
                        b.assign(accs[i][j], RowDot(accs[i][j], a, wv[j], pairs_fit))

            if masked:
                with b.loop("q", 0, rows.chunks) as q:
                    chunk(q, None)
            else:
                if full:
                    with b.loop("q", *chunks) as q:
                        chunk(q, None)
                if tail:
                    chunk(const(full), tail)
        for i in range(width):
            idx = b.let("o", ((n * g.oh + oh) * g.ow + ow0 + i) * g.m + ch0)
            totals = accs[i] if sums == 1 else [Reduce("add", acc) + biases[j] for j, acc in enumerate(accs[i])]
            if blk.nr in vector_widths:
                b.store(out, idx, arith.result(Lanes(tuple(totals)), ch0, idx, blk.nr))
            else:
                for j in range(blk.nr):
                    b.store(out, idx + j, arith.result(totals[j], ch0 + j, idx + j, 1))

    def all_blocks(width: int, n: Expr, oh: Expr, ow0: Expr, masked: bool, window: Window) -> None:
        for bi, blk in enumerate(blocks):
            with b.loop("cb", 0, blk.count) as cb:
                ch0 = b.let("ch0", blk.start + cb * blk.width)
                panel = b.let("panel", offsets[bi] + cb * (rows.segments * rows.chunks * blk.width * vector))
                tile(width, blk, n, oh, ow0, ch0, panel, masked, window)

    def clipped(width: int, n: Expr, oh: Expr, ow0: Expr, *window: Expr) -> None:
        """A tile of conv.spatial_loops, its window clipped to rows [kh_lo, kh_hi) and taps [kw_lo, kw_hi)."""
        whole = all(isinstance(v, Const) and v.value == full_value
                    for v, full_value in zip(window, (0, g.kh, 0, g.kw)))
        all_blocks(width, n, oh, ow0, False, None if whole else window)

    if clips:
        spatial_loops(b, g, Order(mr), clipped)
    else:
        spatial(b, g, mr, lambda width, n, oh, ow0, masked: all_blocks(width, n, oh, ow0, masked, None))
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, None), chosen)


# --- depthwise ----------------------------------------------------------------------------------------

def lower_depthwise(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray, arith: IntArith,
                    quant: Quant, x: Buffer, out: Buffer, params: tuple[Buffer, ...]) -> Kernel:
    """Depthwise int8 along channels: 4 channels per vector, each byte loaded sign-extended to 32 bits
    (VLDRB.S32), multiplied and added in int32 lanes, a tile of dw_mr pixels sharing each weight load.
    Raw bytes as in lower_rows: the zero point folded into the bias, taps over the padding read as
    the zero point. weight: OIHW (I = 1) integers with their zero point subtracted."""
    lanes = ctx.target.lanes
    chosen = ctx.schedule(node, workload("depthwise_rows", g, g.c, x, "int"),
                          Schedule("depthwise_rows", ctx.knobs.dw_mr, ctx.knobs.dw_nr))
    blocks = channel_blocks(g.c, lanes, chosen.schedule.nr)
    wbuf = ctx.const(np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0)).astype(np.int8), "w")   # [kh][kw][c]
    bias = ctx.const(folded_bias(arith, quant, weight), "b")
    zx = quant.x_zp
    b = Builder()
    dy, dx = g.dilation

    def load_x(index: Expr, width: int, valid: Expr | None) -> Expr:
        if valid is None:
            return Cast(x.vec(index, width), "i32")
        if width == 1:      # a scalar: read a clamped address, keep the zero point where the tap is out
            safe = minimum(maximum(index, 0), x.size - 1)
            return Cast(select(valid, x[safe], const(zx, x.dtype)), "i32")
        return Cast(MaskedLoad(x, index, width, select(valid, width, 0), fill=zx), "i32")

    def tile(width: int, n: Expr, oh: Expr, ow0: Expr, masked: bool) -> None:
        for blk in blocks:
            with b.loop("cb", 0, blk.count) as cb:
                ch0 = b.let("ch0", blk.start + cb * blk.width)
                body(blk, width, n, oh, ow0, ch0, masked)

    def body(blk: ChannelBlock, width: int, n: Expr, oh: Expr, ow0: Expr, ch0: Expr, masked: bool) -> None:
        accs = [[b.local("acc", bias.vec(ch0 + j * blk.lanes, blk.lanes)) for j in range(blk.nr)]
                for _ in range(width)]
        with b.loop("kh", 0, g.kh) as kh:
            ih = g.in_row(oh, 0) + kh * dy
            row_ok = binop("and", binop("ge", ih, 0), binop("lt", ih, g.h))
            with b.loop("kw", 0, g.kw) as kw:
                pixel0 = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0, 1) + kw * dx) * g.c + ch0)
                wrow = (kh * g.kw + kw) * g.c + ch0
                wv = [b.let("wv", Cast(wbuf.vec(wrow + j * blk.lanes, blk.lanes), "i32")) for j in range(blk.nr)]
                for i in range(width):
                    valid = None
                    if masked:
                        iw = g.in_row(ow0 + i, 1) + kw * dx
                        valid = b.let("ok", binop("and", row_ok, binop("and", binop("ge", iw, 0),
                                                                            binop("lt", iw, g.w))))
                    for j in range(blk.nr):
                        xv = load_x(pixel0 + i * g.stride[1] * g.c + j * blk.lanes, blk.lanes, valid)
                        b.assign(accs[i][j], accs[i][j] + xv * wv[j])
        for i in range(width):
            base = ((n * g.oh + oh) * g.ow + ow0 + i) * g.c + ch0
            for j in range(blk.nr):
                idx = base + j * blk.lanes
                b.store(out, idx, arith.result(accs[i][j], ch0 + j * blk.lanes, idx, blk.lanes))

    spatial(b, g, chosen.schedule.mr, tile)
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, None), chosen)
