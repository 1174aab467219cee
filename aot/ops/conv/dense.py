"""Dense and grouped convolution (and Gemm as a 1x1 one) as a register-blocked micro-kernel: a tile of
output pixels x vectors of output channels accumulated over the window, weights packed per block."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np

from aot.graph.ir import Node
from aot.kernel.ir import (
    Buffer,
    Builder,
    Const,
    Expr,
    Kernel,
    PairLoop,
    const,
)
from aot.ops import LowerContext
from aot.ops.conv.arith import Arith, BytePairArith, LaneArith, MatrixArith, arith_form, store_pixel
from aot.ops.conv.blocks import _pack_dense, channel_blocks
from aot.ops.conv.declarations import conv_reuse, row_order
from aot.ops.conv.geometry import Geometry, workload
from aot.ops.conv.tiling import Order, spatial_loops
from aot.schedule import Schedule


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
        """The loop order by memory traffic; border columns in tiles (see Columns) unless the knobs say clip;
        the channels of a core tile in a PairLoop where the knobs say so."""
        if not s.loop:
            panels = groups * sum(blk.count for blk in channel_blocks(mg, lanes, min(s.nr, -(-mg // lanes))))
            outer = _weights_outer(g, weight_bytes, x.nbytes, panels, knobs.cache_kib * 1024)
            s = dataclasses.replace(s, loop="weights" if outer else "pixels")
        if s.border == "":
            s = dataclasses.replace(s, border="tiles" if knobs.border_tiles else "clip")
        if core and s.channels != "pairs":
            pairs = type(arith) is BytePairArith and not s.channels and 0 < knobs.pair_loop_steps <= cg // arith.span
            s = dataclasses.replace(s, channels="pairs" if pairs else "generic")
        elif core and type(arith) is not BytePairArith and ctx.target.int_simd.byte_pairs:
            s = dataclasses.replace(s, channels="generic")      # int16 activations: no PairLoop for them
        return s

    default_tile = (knobs.core_mr, knobs.core_nr) if core else (knobs.mr, knobs.nr)
    if core and g.oh * g.ow == 1 and knobs.core_vector_nr:     # a matrix times a vector: one pixel, more channels
        default_tile = (1, knobs.core_vector_nr)
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
    # A core tile's window columns unrolled: each tap then addresses its words by constant offsets, with no
    # loop over the taps (ResNet-8 int8, Cortex-M4: its two strided 3x3 layers -7 % estimated cycles). At a
    # stride of 1 a pixel's taps and its neighbour's read the same words, which LLVM would keep from one tap
    # to the next, out of registers beyond a step of 4 channels (its 16-channel layers +6 %): there each tap
    # loads its words anew (Load.fresh; those layers -3 to -5 % instead). One step a tap shares them; tiles
    # whose channels run in PairLoops keep the loop over their border tiles' taps.
    fresh = (type(arith) is BytePairArith and chosen.schedule.channels != "pairs" and g.stride[1] == 1
             and g.kw > 1 and cg // arith.span > 1)
    unrolled_columns = core and (g.stride[1] > 1 or fresh)
    if fresh:
        arith.fresh = True

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

            # a full tile's channels in a loop of their own
            if pixels == range(rows) and chosen.schedule.channels == "pairs":
                for wrow, acc in zip(wrows, accs):
                    b.emit(PairLoop(tuple(tuple(row) for row in acc), x, pixel0, g.stride[1] * g.c, wbuf, wrow,
                                    cg // arith.span, arith.unsigned, arith.zero_pair, knobs.pair_loop_to_end))
                return
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
            elif unrolled_columns and isinstance(kw_lo, Const) and isinstance(kw_hi, Const):
                for kw in range(kw_lo.value, kw_hi.value):
                    tap(kh, ih, const(kw), range(rows))
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
    return Kernel(name, params, b.block(), conv_reuse(g, x, out, arith, order), chosen,
                  whole_pixels=order.careful)


def _weights_outer(g: Geometry, weight_bytes: int, x_bytes: int, panels: int, cache: int) -> bool:
    """Loop order by memory traffic. With pixels outside, the weights are read again for each output
    row unless they fit in cache; with weight panels outside, the input is read again for each panel
    unless it fits. Ties keep pixels outside."""
    pixels_outer = weight_bytes * (g.n * g.oh if weight_bytes > cache else 1) + x_bytes
    panels_outer = x_bytes * (panels if x_bytes > cache else 1) + weight_bytes
    return panels_outer < pixels_outer
