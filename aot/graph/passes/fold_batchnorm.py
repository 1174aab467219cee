"""Fold BatchNormalization into the matrix op (Conv, Gemm) that feeds it; turn a lone one into Mul + Add.

y = (x - mean) / sqrt(var + eps) * gamma + beta  =  x * a + b  with  a = gamma / sqrt(var + eps), b = beta - mean * a.
Folding scales the producer's output channels by a and adds b to its bias.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.registry import Fusion, op_def, operand, with_operands


def fold_batchnorm(graph: Graph) -> Graph:
    users = graph.consumers()
    producers = graph.producers()
    folded: dict[str, Node] = {}       # producer name -> its replacement with the BN folded in
    absorbed: set[str] = set()          # BN nodes folded away
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op != "BatchNormalization":
            continue
        src = producers.get(node.inputs[0])
        if (src is not None and op_def(src.op).fusion is Fusion.MATRIX and len(users.get(src.outputs[0], [])) == 1
                and src.outputs[0] not in graph.outputs and src.name not in folded):
            a, b = _affine(rw, node)
            folded[src.name] = _fold_into(rw, src, a, b, node.outputs[0])
            absorbed.add(node.name)
    for node in graph.nodes:
        if node.name in absorbed:
            continue
        if node.name in folded:
            rw.keep(folded[node.name])
        elif node.op == "BatchNormalization":
            _to_mul_add(rw, node)
        else:
            rw.keep(node)
    return rw.finish()


def _affine(rw: Rewriter, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    gamma, beta, mean, var = (rw.constants[name].astype(np.float64) for name in bn.inputs[1:5])
    with np.errstate(all="ignore"):     # a negative variance gives NaN (and a zero one inf), as in onnxruntime
        a = gamma / np.sqrt(var + bn.attrs["epsilon"])
        return a, beta - mean * a


def _fold_into(rw: Rewriter, src: Node, a: np.ndarray, b: np.ndarray, out: str) -> Node:
    w, bias = operand(src, "weight"), operand(src, "bias")
    weight = rw.constants[w].astype(np.float64)
    old_bias = rw.constants[bias].astype(np.float64) if bias else 0.0
    axis_shape = [1] * weight.ndim              # scale the weight's output channels
    axis_shape[op_def(src.op).weight_channel_axis] = -1
    with np.errstate(all="ignore"):     # infinite or NaN statistics give infinities and NaN, no warning
        weight = weight * a.reshape(axis_shape)
        new_bias = old_bias * a + b
    new_w = rw.constant(w + "_bn", weight.astype(np.float32))
    new_b = rw.constant(src.name + "_bias_bn", new_bias.astype(np.float32))
    return with_operands(src, weight=new_w, bias=new_b).with_(outputs=(out,))


def _to_mul_add(rw: Rewriter, bn: Node) -> None:
    a, b = _affine(rw, bn)
    x, out = bn.inputs[0], bn.outputs[0]
    shape = rw.values[x].shape
    channel_shape = (-1,) + (1,) * (len(shape) - 2)
    scale = rw.constant(bn.name + "_scale", a.astype(np.float32).reshape(channel_shape))
    shift = rw.constant(bn.name + "_shift", b.astype(np.float32).reshape(channel_shape))
    scaled = rw.value(out + "_scaled", shape)
    rw.add("Mul", bn.name + "_mul", [x, scale], [scaled])
    rw.add("Add", bn.name + "_add", [scaled, shift], [out])
