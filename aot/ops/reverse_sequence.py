"""ReverseSequence: reverse the first seq_lens[b] steps of each batch entry along the time axis (run-time
lengths, int64 or int32), leaving the rest in place. A length outside [0, T] is clamped to it."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Cast, Kernel, binop, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import ALL_DTYPES, define


def canonical_reverse_sequence(rw: Rewriter, node: Node) -> None:
    batch_axis, time_axis = int(node.attrs.get("batch_axis", 1)), int(node.attrs.get("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise refuse(node, "batch_axis and time_axis must be 0 and 1")
    rw.add("ReverseSequence", node.name, node.inputs[:2], node.outputs, batch_axis=batch_axis)


def reverse_sequence(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, lengths, out = ins[0], ins[1], outs[0]
    shape = ctx.graph.shape(node.inputs[0])
    batch_axis = node.attrs["batch_axis"]
    steps, batches = (shape[1], shape[0]) if batch_axis == 0 else (shape[0], shape[1])
    inner = int(np.prod(shape[2:], dtype=np.int64))

    def offset(b_, t_):
        return ((b_ * steps + t_) if batch_axis == 0 else (t_ * batches + b_)) * inner

    b = Builder()
    with b.loop("b", 0, batches) as i:
        length = b.let("len", Cast(minimum(maximum(lengths[i], 0), steps), "idx"))
        with b.loop("t", 0, steps) as t:
            source = b.let("src", select(binop("lt", t, length), length - 1 - t, t))
            with b.loop("k", 0, inner) as k:
                b.store(out, offset(i, t) + k, x[offset(i, source) + k])
    return Kernel(name, params, b.block())


define("ReverseSequence", canonical=canonical_reverse_sequence, lower=reverse_sequence, dtypes=ALL_DTYPES)
