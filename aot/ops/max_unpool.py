"""MaxUnpool: scatter each input value to the flat position its index names in a zero output (the
indices of a MaxPool, int64, over the whole unpooled tensor). With an output_shape larger than the
unpooled shape, the unpooled tensor sits at the output's origin, as ONNX's reference places it. An
index outside the unpooled tensor is dropped."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import FLOAT, define


def canonical_max_unpool(rw: Rewriter, node: Node) -> None:
    x_shape = rw.values[node.inputs[0]].shape
    kernel = node.attrs["kernel_shape"]
    rank = len(kernel)
    strides = node.attrs.get("strides", (1,) * rank)
    pads = node.attrs.get("pads", (0,) * 2 * rank)
    unpooled = tuple(x_shape[:2]) + tuple((x_shape[2 + d] - 1) * strides[d] - pads[d] - pads[rank + d] + kernel[d]
                                          for d in range(rank))
    if any(o < u for o, u in zip(rw.values[node.outputs[0]].shape, unpooled)):
        raise refuse(node, f"output_shape is smaller than the unpooled shape {list(unpooled)}")
    rw.add("MaxUnpool", node.name, node.inputs[:2], node.outputs, unpooled=unpooled)


def max_unpool(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, indices, out = ins[0], ins[1], outs[0]
    out_shape = ctx.graph.shape(node.outputs[0])
    unpooled = node.attrs["unpooled"]
    size, total = int(np.prod(out_shape, dtype=np.int64)), int(np.prod(unpooled, dtype=np.int64))
    count = int(np.prod(ctx.graph.shape(node.inputs[0]), dtype=np.int64))
    b = Builder()
    with b.loop("i", 0, size) as i:
        b.store(out, i, const(0.0, "f32"))
    with b.loop("k", 0, count) as k:
        where = b.let("at", indices[k])
        inside = binop("and", binop("ge", where, 0), binop("lt", where, total))
        flat = b.let("flat", Cast(minimum(maximum(where, 0), total - 1), "idx"))
        slot = b.let("slot", _relocate(b, flat, unpooled, out_shape))
        b.store(out, slot, select(inside, x[k], out[slot]))
    return Kernel(name, params, b.block())


def _relocate(b: Builder, flat: Expr, unpooled: tuple[int, ...], out_shape: tuple[int, ...]) -> Expr:
    """The flat index in the output of flat index `flat` of the unpooled tensor at the output's origin."""
    if tuple(unpooled) == tuple(out_shape):
        return flat
    slot: Expr = const(0)
    rest = flat
    for axis in range(len(unpooled)):
        inner = int(np.prod(unpooled[axis + 1:], dtype=np.int64))
        coord = b.let("coord", binop("div", rest, inner))
        rest = b.let("rest", rest - coord * inner)
        slot = slot + coord * int(np.prod(out_shape[axis + 1:], dtype=np.int64))
    return slot


define("MaxUnpool", canonical=canonical_max_unpool, lower=max_unpool, dtypes=FLOAT | {"int64"})
