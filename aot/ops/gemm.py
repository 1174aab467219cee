"""Gemm: x (M,K) @ w (K,N) + bias with a constant weight, run as a 1x1 convolution over a 1 x M image
with the convolution micro-kernel. ONNX Gemm's transposes, alpha and beta are folded into the weight
and bias at compile time; a Gemm of two computed operands becomes a MatMul."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel.ir import Kernel
from aot.ops import LowerContext
from aot.ops.conv import amx
from aot.ops.conv.arith import _arith, _long_arith, _minus_zero_point, dot_style
from aot.ops.conv.dense import lower_dense
from aot.ops.conv.geometry import Geometry
from aot.ops.rewrite import view
from aot.registry import MATRIX_OPERANDS, Fusion, QuantForm, define


def _macs(graph: Graph, node: Node) -> int:
    k, n = graph.constants[node.inputs[1]].shape
    return int(np.prod(graph.shape(node.inputs[0])[:-1])) * k * n


def gemm(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """x (M,K) @ w (K,N): a 1x1 convolution over a 1 x M image with K channels."""
    ins, outs, params = ctx.io(node)
    rows, k = ctx.graph.shape(node.inputs[0])
    weight = ctx.graph.constants[node.inputs[1]]
    n = weight.shape[1]
    g = Geometry(1, 1, rows, k, 1, rows, n, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0))
    oihw = weight.T.reshape(n, k, 1, 1)
    style = dot_style(ctx, node, 1, k)
    long = _long_arith(ctx, node, ins, oihw)
    if long is not None:        # the other forms sum in int32
        return lower_dense(ctx, node, name, g, 1, _minus_zero_point(oihw, long.q, axis=0), long, ins[0], outs[0],
                           params)
    arith = _arith(ctx, node, ins, style, oihw)
    if amx.applies(ctx, style, g, 1):
        return amx.lower_amx(ctx, node, name, g, oihw, arith, ins[0], outs[0], params)
    quant = node_quant(ctx.graph.values, node)
    if quant is not None and not (style and style.raw_bytes):
        oihw = _minus_zero_point(oihw, quant, axis=0)
    return lower_dense(ctx, node, name, g, 1, oihw, arith, ins[0], outs[0], params)


def canonical_gemm(rw: Rewriter, node: Node) -> None:
    if node_quant(rw.values, node) is not None:     # already x (..., K) @ w (K,N) + bias (lower_quantized)
        _integer_rows(rw, node)
        return
    a, b = node.inputs[:2]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    m, n = rw.values[node.outputs[0]].shape
    if node.attrs.get("transA", 0):
        at = rw.value(a + "_t", rw.values[a].shape[::-1])
        rw.add("Transpose", node.name + "_transA", [a], [at], perm=(1, 0))
        a = at
    if b not in rw.constants:
        if node.attrs.get("transB", 0):
            bt = rw.value(b + "_t", rw.values[b].shape[::-1])
            rw.add("Transpose", node.name + "_transB", [b], [bt], perm=(1, 0))
            b = bt
        product = rw.value(node.outputs[0] + "_ab", (m, n)) if (alpha != 1 or c) else node.outputs[0]
        rw.add("MatMul", node.name, [a, b], [product])
        _gemm_tail(rw, node, product, alpha, c, beta)
        return
    weight = rw.constants[b].astype(np.float32)
    weight = (weight.T if node.attrs.get("transB", 0) else weight) * np.float32(alpha)
    bias, rest = _split_bias(rw, c, beta, m, n)
    w = rw.constant(b + "_kn", weight)
    out = node.outputs[0] if not rest else rw.value(node.outputs[0] + "_ab", (m, n))
    rw.add("Gemm", node.name, [a, w, bias], [out])
    if rest:
        rw.add("Add", node.name + "_c", [out, rest], node.outputs)


def _integer_rows(rw: Rewriter, node: Node) -> None:
    """An integer Gemm from a MatMul of a (..., M, K) tensor: the same product on the (rows, K) view."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    if len(shape) == 2:
        rw.keep(node)
        return
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    flat = view(rw, node, x, (rows, shape[-1]))
    product = rw.like(out + "_2d", out, (rows, rw.values[out].shape[-1]))
    rw.keep(node.with_(inputs=(flat,) + node.inputs[1:], outputs=(product,)))
    view(rw, node, product, rw.values[out].shape, out)


def _split_bias(rw: Rewriter, c: str, beta: float, m: int, n: int) -> tuple[str, str]:
    """Gemm's C as a per-column bias (fused) when it is a constant row; otherwise a separate addend."""
    if not c:
        return "", ""
    if c in rw.constants:
        full = np.broadcast_to(rw.constants[c].astype(np.float32) * np.float32(beta), (m, n))
        if np.all(full == full[:1]):
            return rw.constant(c + "_bias", np.ascontiguousarray(full[0])), ""
        return "", rw.constant(c + "_full", np.ascontiguousarray(full))
    if beta == 1:
        return "", c
    scaled = rw.value(c + "_scaled", rw.values[c].shape)
    rw.add("Mul", c + "_beta", [c, rw.constant("beta", np.array(beta, np.float32))], [scaled])
    return "", scaled


def _gemm_tail(rw: Rewriter, node: Node, product: str, alpha: float, c: str, beta: float) -> None:
    m, n = rw.values[node.outputs[0]].shape
    if alpha != 1:
        scaled = rw.value(node.outputs[0] + "_alpha", (m, n)) if c else node.outputs[0]
        rw.add("Mul", node.name + "_alpha", [product, rw.constant("alpha", np.array(alpha, np.float32))], [scaled])
        product = scaled
    if c:
        bias, rest = _split_bias(rw, c, beta, m, n)
        rw.add("Add", node.name + "_c", [product, bias or rest], node.outputs)


define("Gemm", canonical=canonical_gemm, lower=gemm, macs=_macs, fusion=Fusion.MATRIX, weight_channel_axis=1,
       operands=MATRIX_OPERANDS,
       quant=QuantForm.MATRIX, quant_acts=True)
