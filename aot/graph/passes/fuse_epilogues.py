"""Fuse what follows an anchor op into the anchor's epilogue, so the result is written once.

Anchors are the ops registered with a fusion role (aot/ops/registry.py): matrix ops (Conv, Gemm),
MatMul, elementwise ops and activations. Fused, when the anchor's output has no other use:
  an activation (Unary)             -> appended to attrs["acts"] as (fn, params)
and into matrix anchors, before any activation:
  a per-channel constant Add        -> the anchor's bias
  a per-channel constant Mul        -> scaled weights and bias
  an Add of a same-shaped tensor    -> a residual input, added before the activations
The fused node takes the position of the node it absorbed, where all of its inputs exist.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.quant import node_quant
from aot.ops.registry import Fusion, op_def, operand, with_operands

_ANCHORS = {Fusion.MATRIX, Fusion.ANCHOR, Fusion.ACTIVATION}


def fuse_epilogues(graph: Graph) -> Graph:
    while True:
        fused = _fuse_once(graph)
        if fused is None:
            return graph
        graph = fused


def _fuse_once(graph: Graph) -> Graph | None:
    users = graph.consumers()
    for anchor in graph.nodes:
        if (op_def(anchor.op).fusion not in _ANCHORS or anchor.outputs[0] in graph.outputs
                or node_quant(graph.values, anchor) or len(anchor.outputs) > 1):
            continue
        next_users = users.get(anchor.outputs[0], [])
        if len(next_users) != 1:
            continue
        follower = next_users[0]
        rw = Rewriter(graph)
        merged = _merge(rw, anchor, follower)
        if merged is not None:
            for node in graph.nodes:
                if node is follower:
                    rw.keep(merged)
                elif node is not anchor:
                    rw.keep(node)
            return rw.finish()
    return None


def _merge(rw: Rewriter, anchor: Node, follower: Node) -> Node | None:
    graph = rw.graph
    out = follower.outputs[0]
    acts = anchor.attrs.get("acts", ())
    anchor_def, follower_def = op_def(anchor.op), op_def(follower.op)
    if follower_def.fusion is Fusion.ACTIVATION:
        return anchor.with_(outputs=(out,), attrs={**anchor.attrs, "acts": acts + ((follower.attrs["fn"],
                                                                                   follower.attrs["params"]),)})
    kind = follower_def.matrix_epilogue
    if not kind or anchor_def.fusion is not Fusion.MATRIX or acts:
        return None
    other = follower.inputs[1] if follower.inputs[0] == anchor.outputs[0] else follower.inputs[0]
    shape = graph.shape(anchor.outputs[0])
    if other == anchor.outputs[0] or graph.shape(out) != shape:
        return None
    w, bias = operand(anchor, "weight"), operand(anchor, "bias")
    channels = shape[-1]
    per_channel = _per_channel(graph.constants.get(other), channels)
    if kind == "mul":                   # scale the output channels: weights and bias
        if per_channel is None or operand(anchor, "residual"):
            return None
        weight = graph.constants[w]
        axis_shape = [1] * weight.ndim
        axis_shape[anchor_def.weight_channel_axis] = -1
        new_w = rw.constant(w + "_scaled", weight * per_channel.reshape(axis_shape))
        new_b = rw.constant(anchor.name + "_bias", graph.constants[bias] * per_channel) if bias else ""
        return with_operands(anchor, weight=new_w, bias=new_b).with_(outputs=(out,))
    if per_channel is not None:
        total = per_channel + graph.constants[bias] if bias else per_channel
        new_bias = rw.constant(anchor.name + "_bias", total)
        return with_operands(anchor, bias=new_bias).with_(outputs=(out,))
    if other in graph.constants or operand(anchor, "residual") or graph.shape(other) != shape:
        return None
    return with_operands(anchor, residual=other).with_(outputs=(out,))


def _per_channel(array: np.ndarray | None, channels: int) -> np.ndarray | None:
    """A constant that varies only along the last (channel) axis, as a (channels,) vector."""
    if array is None or array.size not in (1, channels):
        return None
    if array.size == channels and array.shape[-1:] != (channels,):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)).astype(np.float32)
