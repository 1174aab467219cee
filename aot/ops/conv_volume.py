"""3-D convolution (Conv over N x C x D x H x W) on the model's NCDHW layout: direct loops, each output
element the sum over its group's input channels and its window's taps, a tap outside the input (in
the padding) weighed 0. The weight (O, I/group, kD, kH, kW) is read as ONNX lays it out, constant or
computed at run time, and so is the bias.

3-D ConvTranspose gathers the same way: output element y (per axis, counted from the begin pad b)
takes x[i] * w[k] for every tap k with i * s + k * d = y + b, i.e. where y + b - k * d is a multiple
of the stride and the quotient i lies in the input. (1-D and 2-D ConvTranspose are phase
convolutions: conv_transpose.py.)

Correctness first: no register blocking and no vectors (the 2-D micro-kernels of conv/ do that for
the NHWC layout); the innermost loop runs over the window's width, whose taps are contiguous in both
the input row and the weight.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse, spatial_attrs
from aot.registry import define


def canonical_volume_conv(rw: Rewriter, node: Node) -> None:
    """Conv(x, w, b?) with a 5-D weight -> VolumeConv, attributes made explicit (auto_pad resolved)."""
    if node_quant(rw.values, node) is not None:
        raise refuse(node, "a quantized 3-D convolution is not supported (float32 is)")
    attrs = spatial_attrs(rw, node, tuple(rw.values[node.inputs[1]].shape[2:]))
    attrs["group"] = int(node.attrs.get("group", 1))
    rw.add("VolumeConv", node.name, list(node.inputs[:3]), node.outputs[:1], **attrs)


def add_volume_conv_transpose(rw: Rewriter, node: Node, strides: tuple[int, ...], dilations: tuple[int, ...],
                              begins: list[int], groups: int) -> None:
    """ConvTranspose(x, w, b?) with a 5-D weight -> VolumeConvTranspose; conv_transpose.py reads and checks
    the attributes and calls this."""
    rw.add("VolumeConvTranspose", node.name, list(node.inputs[:3]), node.outputs[:1], strides=tuple(strides),
           dilations=tuple(dilations), begins=tuple(begins), group=groups)


def _macs(graph: Graph, node: Node) -> int:
    per_output = int(np.prod(graph.shape(node.inputs[1])[1:], dtype=np.int64))
    return int(np.prod(graph.shape(node.outputs[0]), dtype=np.int64)) * per_output


def volume_conv(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, w, out = ins[0], ins[1], outs[0]
    bias = ins[2] if len(ins) > 2 else None
    n, c, *size = ctx.graph.shape(node.inputs[0])
    m, cg, *kernel = ctx.graph.shape(node.inputs[1])
    out_size = ctx.graph.shape(node.outputs[0])[2:]
    strides, dilations, pads = node.attrs["strides"], node.attrs["dilations"], node.attrs["pads"]
    groups = node.attrs["group"]
    mg = m // groups
    volume, out_volume, taps = (int(np.prod(s, dtype=np.int64)) for s in (size, out_size, kernel))
    b = Builder()
    with b.loop("n", 0, n) as batch, b.loop("g", 0, groups) as group, b.loop("m", 0, mg) as within, \
            b.loop("o", 0, out_volume) as o:
        channel = b.let("ch", group * mg + within)
        coords = _coords(b, o, out_size)
        starts = [b.let("start", coords[a] * strides[a] - pads[a]) for a in range(3)]
        acc = b.local("acc", bias[channel] if bias is not None else const(0.0, "f32"))
        with b.loop("c", 0, cg) as ci:
            x_channel = b.let("xc", ((batch * c) + group * cg + ci) * volume)
            w_channel = b.let("wc", (channel * cg + ci) * taps)
            with b.loop("kd", 0, kernel[0]) as kd, b.loop("kh", 0, kernel[1]) as kh, \
                    b.loop("kw", 0, kernel[2]) as kw:
                position = [starts[a] + tap * dilations[a] for a, tap in enumerate((kd, kh, kw))]
                inside = _all(binop("and", binop("ge", q, 0), binop("lt", q, size[a])) for a, q in enumerate(position))
                at = _flat([Cast(minimum(maximum(q, 0), size[a] - 1), "idx") for a, q in enumerate(position)], size)
                value = b.let("v", x[x_channel + at] * w[w_channel + (kd * kernel[1] + kh) * kernel[2] + kw])
                b.assign(acc, acc + select(inside, value, 0.0))
        b.store(out, ((batch * m) + channel) * out_volume + o, acc)
    return Kernel(name, params, b.block())


def volume_conv_transpose(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, w, out = ins[0], ins[1], outs[0]
    bias = ins[2] if len(ins) > 2 else None
    n, c, *size = ctx.graph.shape(node.inputs[0])
    _, mg, *kernel = ctx.graph.shape(node.inputs[1])
    m, *out_size = ctx.graph.shape(node.outputs[0])[1:]
    strides, dilations, begins = node.attrs["strides"], node.attrs["dilations"], node.attrs["begins"]
    groups = node.attrs["group"]
    cg = c // groups
    volume, out_volume, taps = (int(np.prod(s, dtype=np.int64)) for s in (size, out_size, kernel))
    b = Builder()
    with b.loop("n", 0, n) as batch, b.loop("g", 0, groups) as group, b.loop("m", 0, mg) as within, \
            b.loop("o", 0, out_volume) as o:
        channel = b.let("ch", group * mg + within)
        shifted = [b.let("at", coord + begins[a]) for a, coord in enumerate(_coords(b, o, out_size))]
        acc = b.local("acc", bias[channel] if bias is not None else const(0.0, "f32"))
        with b.loop("c", 0, cg) as ci:
            x_channel = b.let("xc", ((batch * c) + group * cg + ci) * volume)
            w_channel = b.let("wc", ((group * cg + ci) * mg + within) * taps)
            with b.loop("kd", 0, kernel[0]) as kd, b.loop("kh", 0, kernel[1]) as kh, \
                    b.loop("kw", 0, kernel[2]) as kw:
                reach = [b.let("r", shifted[a] - tap * dilations[a]) for a, tap in enumerate((kd, kh, kw))]
                source = [b.let("i", binop("div", maximum(r, 0), strides[a])) for a, r in enumerate(reach)]
                lands = _all(binop("and", binop("eq", source[a] * strides[a], r), binop("lt", source[a], size[a]))
                             for a, r in enumerate(reach))
                at = _flat([Cast(minimum(i, size[a] - 1), "idx") for a, i in enumerate(source)], size)
                value = b.let("v", x[x_channel + at] * w[w_channel + (kd * kernel[1] + kh) * kernel[2] + kw])
                b.assign(acc, acc + select(lands, value, 0.0))
        b.store(out, ((batch * m) + channel) * out_volume + o, acc)
    return Kernel(name, params, b.block())


def _transpose_macs(graph: Graph, node: Node) -> int:
    _, mg, *kernel = graph.shape(node.inputs[1])
    return int(np.prod(graph.shape(node.inputs[0]), dtype=np.int64)) * mg * int(np.prod(kernel, dtype=np.int64))


def _coords(b: Builder, o: Expr, out_size) -> list[Expr]:
    """The (d, h, w) coordinates of flat output position o."""
    strides = [int(np.prod(out_size[a + 1:], dtype=np.int64)) for a in range(3)]
    return [b.let("oc", binop("div", o, strides[a]) - binop("div", o, strides[a] * out_size[a]) * out_size[a])
            for a in range(3)]


def _flat(index: list[Expr], size: list[int]) -> Expr:
    return (index[0] * size[1] + index[1]) * size[2] + index[2]


def _all(conditions) -> Expr:
    result = None
    for cond in conditions:
        result = cond if result is None else binop("and", result, cond)
    return result


define("VolumeConv", lower=volume_conv, macs=_macs, operands=("x", "weight", "bias"))
define("VolumeConvTranspose", lower=volume_conv_transpose, macs=_transpose_macs, operands=("x", "weight", "bias"))
