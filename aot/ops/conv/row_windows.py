"""Convolutions over too few input channels to fill a dot-product step (an image network's first layer):
each window row's kw x C bytes read as one tap's channels."""

from __future__ import annotations

import dataclasses

import numpy as np

from aot.graph.ir import Node
from aot.graph.node_quant import node_quant
from aot.isa import DotStyle
from aot.kernel.ir import (
    Buffer,
    Builder,
    Const,
    Expr,
    Kernel,
    const,
)
from aot.ops import LowerContext
from aot.ops.conv.arith import (
    _BYTES,
    BytePairArith,
    DotArith,
    IntArith,
    _residual,
    _window_sums_fit,
    arith_form,
    store_pixel,
)
from aot.ops.conv.blocks import ChannelBlock, _pack_dense, channel_blocks
from aot.ops.conv.declarations import conv_reuse
from aot.ops.conv.geometry import Geometry, workload
from aot.ops.conv.tiling import Order, spatial_loops
from aot.registry import operand
from aot.schedule import Schedule

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
