"""Losses exported with training graphs: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss as a
LogSoftmax over the classes followed by it.

    loss[n, d] = -x[n, t, d] * w[t]   with t = target[n, d], w the class weights (1 without them),
                                       and 0 (weight 0) where t is ignore_index
    reduction "none": loss;  "sum": the sum;  "mean": the sum divided by the sum of the weights used

The target is read at run time (int64 or int32); a class index outside [0, C) is clamped for the
memory access (ONNX leaves that case undefined), so a bad label never reads outside the input.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Cast, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import FLOAT, define

_TARGETS = FLOAT | {"int64", "int32"}


def canonical_nll(rw: Rewriter, node: Node) -> None:
    _add_nll(rw, node, node.inputs[0], node.outputs[0])


def canonical_softmax_cross_entropy(rw: Rewriter, node: Node) -> None:
    scores = node.inputs[0]
    if len(rw.values[scores].shape) < 2:
        raise refuse(node, "the scores need a class axis (rank 2 or more)")
    log_prob = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else rw.like(scores + "_log_prob", scores)
    rw.add("LogSoftmax", node.name + "_log_softmax", [scores], [log_prob], axis=1)
    _add_nll(rw, node, log_prob, node.outputs[0])


def _add_nll(rw: Rewriter, node: Node, x: str, out: str) -> None:
    reduction = node.attrs.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise refuse(node, f"reduction '{reduction}' is not one of none, sum, mean")
    if len(rw.values[x].shape) < 2:
        raise refuse(node, "the input needs a class axis (rank 2 or more)")
    inputs = [x, node.inputs[1]] + ([node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else [])
    ignore = node.attrs.get("ignore_index")
    rw.add("NLLLoss", node.name, inputs, [out], reduction=reduction,
           ignore_index=None if ignore is None else int(ignore))


def nll_loss(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, target, weight = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    shape = ctx.graph.shape(node.inputs[0])
    n, c = shape[0], shape[1]
    d = int(np.prod(shape[2:], dtype=np.int64))
    reduction, ignore = node.attrs["reduction"], node.attrs["ignore_index"]
    b = Builder()
    total = b.local("total", const(0.0, "f32"))
    weights = b.local("weights", const(0.0, "f32"))
    with b.loop("n", 0, n) as i:
        with b.loop("d", 0, d) as j:
            t = b.let("t", target[i * d + j])
            cls = b.let("cls", Cast(minimum(maximum(t, 0), c - 1), "idx"))
            w = weight[cls] if weight is not None else const(1.0, "f32")
            if ignore is not None:
                w = select(binop("eq", t, ignore), 0.0, w)
            w = b.let("w", w)
            loss = b.let("loss", -(x[(i * c + cls) * d + j]) * w)
            if reduction == "none":
                b.store(outs[0], i * d + j, loss)
            else:
                b.assign(total, total + loss)
                b.assign(weights, weights + w)
    if reduction == "sum":
        b.store(outs[0], 0, total)
    elif reduction == "mean":
        b.store(outs[0], 0, total / weights)
    return Kernel(name, params, b.block())


define("NegativeLogLikelihoodLoss", canonical=canonical_nll, dtypes=_TARGETS)
define("SoftmaxCrossEntropyLoss", canonical=canonical_softmax_cross_entropy, dtypes=_TARGETS)
define("NLLLoss", lower=nll_loss, dtypes=_TARGETS)
