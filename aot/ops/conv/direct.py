"""Conv whose weight (or bias) is computed at run time: a direct convolution reading the weight from a
buffer, with nothing packed at compile time.

A Transpose node first lays the weight (O, I/group, kh, kw) out as (kh, kw, I/group, O), seen as a
matrix (kh*kw*I/group, O), so that output channels are contiguous. The kernel then has the shape of the
packed micro-kernel (aot/ops/conv/dense.py): a tile of output pixels x vectors of output channels held in
registers while the reduction runs over (kh, kw, c), one input value broadcast per step; only the
weight's address differs: ((kh*KW + kw)*cg + c)*O + channel. The input is NHWC, as Conv's.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel.ir import Builder, Kernel, const, fma
from aot.ops import LowerContext
from aot.ops.conv.blocks import ChannelBlock, channel_blocks
from aot.ops.conv.geometry import geometry, workload
from aot.ops.conv.tiling import Order, spatial_loops
from aot.ops.epilogue import apply
from aot.ops.rewrite import lift_1d, refuse, spatial_attrs, view
from aot.registry import Fusion, Layout, define
from aot.schedule import Schedule


def _macs(graph: Graph, node: Node) -> int:
    return int(np.prod(graph.shape(node.outputs[0]), dtype=np.int64)) * graph.shape(node.inputs[1])[0]


def conv_direct(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, w, bias, out = ins[0], ins[1], ins[2] if len(ins) > 2 else None, outs[0]
    g = geometry(ctx.graph, node)
    groups = node.attrs["group"]
    cg, mg = g.c // groups, g.m // groups
    acts = node.attrs.get("acts", ())
    lanes = ctx.target.lanes
    chosen = ctx.schedule(node, workload("direct", g, groups, x, ""),
                          Schedule("direct", ctx.knobs.mr, ctx.knobs.nr))
    blocks = channel_blocks(mg, lanes, min(chosen.schedule.nr, -(-mg // lanes)))
    dy, dx = g.dilation
    b = Builder()

    def block_tile(blk: ChannelBlock):
        def tile(rows, n, oh, ow0, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
            with b.loop("g", 0, groups) as group, b.loop("cb", 0, blk.count) as cb:
                ch0 = b.let("ch0", group * mg + blk.start + cb * blk.width)
                init = [bias.vec(ch0 + j * blk.lanes, blk.lanes) if bias is not None
                        else const(0.0, "f32", blk.lanes) for j in range(blk.nr)]
                accs = [[b.local("acc", init[j]) for j in range(blk.nr)] for _ in range(rows)]
                with b.loop("kh", kh_lo, kh_hi) as kh:
                    ih = g.in_row(oh, 0) + kh * dy
                    with b.loop("kw", kw_lo, kw_hi) as kw:
                        pixel0 = b.let("px", ((n * g.h + ih) * g.w + g.in_row(ow0, 1) + kw * dx) * g.c + group * cg)
                        wrow = b.let("wr", (kh * g.kw + kw) * (cg * g.m) + ch0)
                        with b.loop("c", 0, cg) as c:
                            wv = [b.let("wv", w.vec(wrow + c * g.m + j * blk.lanes, blk.lanes))
                                  for j in range(blk.nr)]
                            for i in range(rows):
                                a = b.let("a", x[pixel0 + i * g.stride[1] * g.c + c])
                                for j in range(blk.nr):
                                    b.assign(accs[i][j], fma(a, wv[j], accs[i][j]))
                for i in range(rows):
                    base = ((n * g.oh + oh) * g.ow + ow0 + i) * g.m + ch0
                    for j in range(blk.nr):
                        b.store(out, base + j * blk.lanes, apply(acts, accs[i][j]))
        return tile

    def tile(*at) -> None:
        for blk in blocks:
            block_tile(blk)(*at)

    spatial_loops(b, g, Order(chosen.schedule.mr), tile)
    return Kernel(name, params, b.block(), schedule=chosen)


def canonical_conv_computed(rw: Rewriter, node: Node) -> None:
    """Conv(x, w, b?) with w or b computed at run time -> Transpose(w) -> ConvDirect (1-D as 2-D)."""
    if node_quant(rw.values, node) is not None:
        raise refuse(node, "a quantized convolution needs constant weights and bias")
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    wshape = rw.values[w].shape
    rank = len(wshape) - 2
    if rank not in (1, 2):
        raise refuse(node, f"{rank}-D convolution is not supported (1-D and 2-D are)")
    attrs = spatial_attrs(rw, node, tuple(wshape[2:]))
    attrs["group"] = int(node.attrs.get("group", 1))
    out2 = out
    if rank == 1:
        x, out2, _ = lift_1d(rw, node, attrs)
        wshape = (wshape[0], wshape[1], 1, wshape[2])
        w = (rw.constant(w + "_2d", rw.constants[w].reshape(wshape)) if w in rw.constants
             else view(rw, node, w, wshape))
    o, cg, kh, kw = wshape
    if w in rw.constants:      # only the bias is computed: lay the weight out now
        matrix = rw.constant(w + "_hwio", np.ascontiguousarray(rw.constants[w].transpose(2, 3, 1, 0)).reshape(-1, o))
    else:
        hwio = rw.like(w + "_hwio", w, (kh, kw, cg, o))
        rw.add("Transpose", node.name + "_weight", [w], [hwio], perm=(2, 3, 1, 0))
        matrix = view(rw, node, hwio, (kh * kw * cg, o))
    rw.add("ConvDirect", node.name, [x, matrix, bias], [out2], **attrs)
    if out2 != out:
        view(rw, node, out2, rw.values[out].shape, out)


define("ConvDirect", lower=conv_direct, macs=_macs, layout=Layout.NHWC, fusion=Fusion.ANCHOR)
