"""MatMul of two computed tensors (attention-style products), batched with numpy broadcasting of the
batch dimensions; vectorized along N; in float, or on two int8/uint8 operands summed in int32. A MatMul by
a constant 2-D matrix becomes a Gemm."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import Quant, node_quant
from aot.graph.quant import fixed_point
from aot.kernel.ir import Broadcast, Builder, Cast, Expr, Kernel, const, fma
from aot.ops import LowerContext
from aot.ops.conv.blocks import channel_blocks
from aot.ops.elementwise import broadcast_strides
from aot.ops.epilogue import apply
from aot.ops.quantized import narrows_by_halves, quantize, requantize_fixed, widen
from aot.ops.rewrite import view
from aot.registry import Fusion, QuantForm, define


def _macs(graph: Graph, node: Node) -> int:
    out = graph.shape(node.outputs[0])
    return int(np.prod(out, dtype=np.int64)) * graph.shape(node.inputs[0])[-1]


def _integer_product(ctx: LowerContext, node: Node, quant: Quant):
    """(load of an a element, load of a b vector, multiply-accumulate, the stored result) for two int8/uint8
    operands: (a - a_zp) * (b - b_zp) summed in int32, requantized as onnxruntime's QLinearMatMul does
    (float32 multiplier a_scale * b_scale / y_scale, ties to even), or by a fixed-point multiplier without
    an FPU."""
    q = quant
    halving = narrows_by_halves(ctx.target)
    if ctx.target.fpu:
        scale = float(np.float32(q.x_scale) * np.float32(q.b_scale) / np.float32(q.y_scale))

        def result(acc: Expr) -> Expr:
            return quantize(Cast(acc, "f32") * scale, q.y_zp, q.qmin, q.qmax, q.y_dtype, halving)
    else:
        m0, shift = (int(v[0]) for v in fixed_point(np.array([q.x_scale * q.b_scale / q.y_scale])))

        def result(acc: Expr) -> Expr:
            return requantize_fixed(acc, const(m0, "i32", acc.lanes), const(shift, "i32", acc.lanes), q.y_zp,
                                    q.qmin, q.qmax, q.y_dtype)
    return (lambda v: widen(v) - q.x_zp, lambda v: widen(v) - q.b_zp,
            lambda a, bv, acc: acc + (Broadcast(a, bv.lanes) if bv.lanes > 1 else a) * bv, result, "i32")


def _float_product(acts, dtype: str):
    return (lambda v: v, lambda v: v, lambda a, bv, acc: fma(a, bv, acc), lambda acc: apply(acts, acc), dtype)


def matmul(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    a, bm, out = ins[0], ins[1], outs[0]
    ashape, bshape = ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.inputs[1])
    oshape = ctx.graph.shape(node.outputs[0])
    m, k = ashape[-2:]
    n = bshape[-1]
    batch = oshape[:-2]
    a_strides = broadcast_strides(ashape[:-2], batch)     # in matrices
    b_strides = broadcast_strides(bshape[:-2], batch)
    o_strides = broadcast_strides(batch, batch)
    quant = node_quant(ctx.graph.values, node)
    load_a, load_b, mac, result, acc_dtype = (_integer_product(ctx, node, quant) if quant is not None
                                              else _float_product(node.attrs.get("acts", ()), a.dtype))
    b = Builder()

    def product(a_off: Expr, b_off: Expr, o_off: Expr) -> None:
        with b.loop("m", 0, m) as i:
            for blk in channel_blocks(n, ctx.target.lanes, 4):
                with b.loop("cb", 0, blk.count) as cb:
                    col = b.let("col", blk.start + cb * blk.width)
                    accs = [b.local("acc", const(0, acc_dtype, blk.lanes)) for _ in range(blk.nr)]
                    with b.loop("k", 0, k) as r:
                        av = b.let("a", load_a(a[a_off + i * k + r]))
                        for j, acc in enumerate(accs):
                            idx = b_off + r * n + col + j * blk.lanes
                            b.assign(acc, mac(av, load_b(bm.vec(idx, blk.lanes)), acc))
                    for j, acc in enumerate(accs):
                        b.store(out, o_off + i * n + col + j * blk.lanes, result(acc))

    def batches(depth: int, a_off, b_off, o_off) -> None:
        if depth == len(batch):
            product(a_off, b_off, o_off)
            return
        with b.loop("batch", 0, batch[depth]) as t:
            batches(depth + 1, a_off + t * (a_strides[depth] * m * k), b_off + t * (b_strides[depth] * k * n),
                    o_off + t * (o_strides[depth] * m * n))

    batches(0, const(0), const(0), const(0))
    return Kernel(name, params, b.block())


def _lift_vectors(rw: Rewriter, node: Node) -> None:
    """numpy's rule for 1-D operands: a (K,) is a (1, K) row, b (K,) a (K, 1) column, and the product
    drops the axis added. The 2-D (or batched) product is canonicalized, then viewed back."""
    a, b = node.inputs
    out = node.outputs[0]
    ashape, bshape = rw.values[a].shape, rw.values[b].shape
    if len(ashape) == 1:
        a = view(rw, node, a, (1,) + ashape)
    if len(bshape) == 1:
        b = (rw.constant(b + "_col", rw.constants[b].reshape(-1, 1)) if b in rw.constants
             else view(rw, node, b, bshape + (1,)))
    full = np.broadcast_shapes(rw.values[a].shape[:-2], rw.values[b].shape[:-2])
    full += (rw.values[a].shape[-2], rw.values[b].shape[-1])
    product = rw.like(out + "_2d", out, full)
    canonical_matmul(rw, node.with_(inputs=(a, b), outputs=(product,)))
    view(rw, node, product, rw.values[out].shape, out)


def canonical_matmul(rw: Rewriter, node: Node) -> None:
    a, b = node.inputs
    out = node.outputs[0]
    if len(rw.values[a].shape) == 1 or len(rw.values[b].shape) == 1:
        _lift_vectors(rw, node)
        return
    ashape, bshape, oshape = rw.values[a].shape, rw.values[b].shape, rw.values[out].shape
    if b in rw.constants and len(bshape) == 2 and rw.values[a].dtype == "float32":     # float64: this kernel
        k, n = bshape
        rows = int(np.prod(ashape[:-1], dtype=np.int64))
        a2 = a if len(ashape) == 2 else view(rw, node, a, (rows, k))
        out2 = out if len(ashape) == 2 else rw.like(out + "_2d", out, (rows, n))
        rw.add("Gemm", node.name, [a2, b, ""], [out2])
        if out2 != out:
            view(rw, node, out2, oshape, out)
        return
    rw.keep(node if node_quant(rw.values, node) is not None else node.with_(attrs={}))


define("MatMul", canonical=canonical_matmul, lower=matmul, macs=_macs, fusion=Fusion.ANCHOR,
       quant=QuantForm.MATRIX, quant_acts=True, dtypes=frozenset({"float32", "float64"}))
