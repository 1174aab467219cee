"""Conv (NHWC), lowered to register-blocked micro-kernels: the package's entry, which picks a lowering.

Dense and grouped convolution, and Gemm as a 1x1 convolution over a 1 x M "image", share one
micro-kernel: a tile of MR output pixels x NR vectors of output channels lives in registers while
the reduction runs over (kh, kw, c); each step broadcasts one input value per pixel and loads NR
weight vectors. Weights are packed at compile time in exactly that read order, one panel per block
of output channels. Depthwise convolution vectorizes along channels instead.

Padding is handled without copies: output columns whose window stays inside the input take the
fast path; the few border columns (and rows) clip their window with runtime loop bounds. Dense
convolution may instead take its border columns in whole tiles (Columns, border "tiles"): each window
tap of a tile at a constant column covers a range of its pixels known at compile time.

The modules, each building on those before it:
- geometry: a convolution's shapes, its windows and taps, its workload key;
- tiling: loop orders and the tiles of output columns (spatial_loops);
- blocks: output channels in register blocks, and weights packed for them;
- arith: the arithmetic forms (float, integer, 64-bit, lanes, dot products, matrix, byte pairs) and
  which one a node takes;
- declarations: what a convolution lets the memory planner overlap (its loops replayed);
- dense, depthwise, row_windows: the micro-kernel lowerings; rows, amx: the row kernels of 32-bit NEON
  and Helium, and x86 AMX tiles; direct: convolutions whose weights arrive at run time.
"""

from __future__ import annotations

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel.ir import Kernel
from aot.ops import LowerContext
from aot.ops.conv import amx, rows
from aot.ops.conv.arith import (
    BytePairArith,
    DotArith,
    IntArith,
    _arith,
    _long_arith,
    _minus_zero_point,
    _residual,
    dot_style,
)
from aot.ops.conv.dense import lower_dense
from aot.ops.conv.depthwise import depthwise_pairs_style, lower_depthwise, lower_depthwise_pairs
from aot.ops.conv.direct import canonical_conv_computed
from aot.ops.conv.geometry import geometry
from aot.ops.conv.row_windows import lower_row_windows, row_window_style
from aot.ops.conv_volume import canonical_volume_conv
from aot.ops.rewrite import fused_acts, lift_1d, refuse, spatial_attrs, view
from aot.registry import MATRIX_OPERANDS, Fusion, Layout, QuantForm, define, operand


def _conv_macs(graph: Graph, node: Node) -> int:
    w = graph.constants[node.inputs[1]]
    channels = w.shape[1] - node.attrs.get("padded_channels", 0)     # see pad_channels
    return int(np.prod(graph.shape(node.outputs[0]))) * channels * int(np.prod(w.shape[2:]))


def conv(ctx: LowerContext, node: Node, name: str) -> Kernel:
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
    if not depthwise and amx.applies(ctx, style, g, groups):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        arith = DotArith(ctx, style, node_quant(ctx.graph.values, node), bias, weight, ins[0].dtype,
                         _residual(node, ins))      # unpadded: im2row fills the padding with the zero point
        return amx.lower_amx(ctx, node, name, g, weight, arith, ins[0], outs[0], params)
    arith = _arith(ctx, node, ins, style, weight, depthwise)
    quant = node_quant(ctx.graph.values, node)
    if quant is not None and not (style and style.raw_bytes):
        weight = _minus_zero_point(weight, quant, axis=0)
    if not depthwise and rows.applies(ctx, quant, groups, weight, ins[0].dtype, g):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        return rows.lower_rows(ctx, node, name, g, weight, IntArith(ctx, quant, bias, _residual(node, ins)), quant,
                                    ins[0], outs[0], params)
    if depthwise and ctx.target.int_simd.predicated and rows.applies(ctx, quant, 1, weight, ins[0].dtype):
        bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
        return rows.lower_depthwise(ctx, node, name, g, weight,
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
    or bias computed at run time takes a direct convolution instead (direct.py), and so does a 3-D
    convolution (conv_volume.py)."""
    _check_group(rw, node)
    x, weight, bias = (operand(node, name) for name in ("x", "weight", "bias"))
    if len(rw.values[weight].shape) == 5:      # 3-D: direct loops over the model's NCDHW layout
        canonical_volume_conv(rw, node)
        return
    if any(name and name not in rw.constants for name in (weight, bias)):
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
