"""Depthwise convolution, vectorized along channels; on the Arm DSP two taps at a time as byte pairs."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node
from aot.graph.node_quant import node_quant
from aot.isa import DotStyle
from aot.kernel.ir import (
    Buffer,
    Builder,
    BytePairs,
    Cast,
    Const,
    Expr,
    Kernel,
    Reinterpret,
    Shuffle,
    binop,
    const,
)
from aot.ops import LowerContext
from aot.ops.conv.arith import Arith, IntArith, WideArith, _dot_operands, arith_form, store_pixel
from aot.ops.conv.blocks import channel_blocks
from aot.ops.conv.declarations import conv_reuse, row_order
from aot.ops.conv.geometry import Geometry, workload
from aot.ops.conv.tiling import spatial_loops
from aot.schedule import Schedule


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
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen,
                  whole_pixels=order.careful)


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
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen,
                  whole_pixels=order.careful)
