"""Softmax along one axis: max, sum of exponentials, scale; vectorized along the reduction axis when
it is innermost, otherwise along the contiguous axes after it. Between integer tensors (the Softmax a
quantizer leaves between Dequantize and Quantize) the same in float32 from the dequantized input, each
result quantized as it is stored: the exponentials are computed again for the last pass rather than kept
in the integer output. A TFLite model's int8 Softmax is TFLite's fixed-point one (softmax_tflite.py), its
int16 one TFLite's tables (softmax_int16.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel import math as kmath
from aot.kernel.ir import Builder, Expr, Kernel, Reduce, const, maximum
from aot.ops import LowerContext, softmax_int16, softmax_tflite
from aot.ops.quantized import dequantize, quantize
from aot.ops.rewrite import axis_attr, view
from aot.registry import AxisAttr, Layout, QuantForm, define, same_shape

_LOWEST = -3.4028234663852886e38


def softmax(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Softmax: exp(x - max) / sum. LogSoftmax: x - max - log(sum)."""
    ins, outs, params = ctx.io(node)
    x, y = ins[0], outs[0]
    shape = ctx.graph.shape(node.inputs[0])
    axis = node.attrs["axis"]
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    n = shape[axis]
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    lanes = ctx.target.lanes
    log = node.op == "LogSoftmax"
    quant = node_quant(ctx.graph.values, node)
    if quant is not None and quant.rules == "tflite" and not log and inner == 1:
        lowering = softmax_int16.lower if quant.x_dtype == "int16" else softmax_tflite.lower
        return lowering(ctx, node, name, quant, outer, n)
    io = _Io(quant)
    b = Builder()
    with b.loop("o", 0, outer) as o:
        if inner == 1:
            _softmax_row(b, x, y, o * n, n, lanes, log, io)
        else:
            main = inner - inner % lanes if inner >= lanes else 0
            if main:
                with b.loop("i", 0, main, lanes) as i:
                    _softmax_strided(b, x, y, o * (n * inner) + i, n, inner, lanes, log, io)
            if inner > main:
                with b.loop("i", main, inner) as i:
                    _softmax_strided(b, x, y, o * (n * inner) + i, n, inner, 1, log, io)
    return Kernel(name, params, b.block())


class _Io:
    """How the kernel reads its input and writes its output: float32 as they are, or integers dequantized
    as they load and quantized as they store (`quant`)."""

    def __init__(self, quant):
        self.quant = quant
        self.load: Callable[[Expr], Expr] = (lambda v: v) if quant is None else \
            (lambda v: dequantize(v, quant.x_zp, quant.x_scale))

    def store(self, value: Expr) -> Expr:
        q = self.quant
        if q is None:
            return value
        return quantize(value / float(np.float32(q.y_scale)), q.y_zp, q.qmin, q.qmax, q.y_dtype)


def _softmax_row(b: Builder, x, y, base: Expr, n: int, lanes: int, log: bool, io: _Io) -> None:
    """A contiguous row: vector partial results, reduced across lanes once per pass."""
    def load(j, w) -> Expr:
        return io.load(x.vec(base + j, w) if w > 1 else x[base + j])

    vmax = b.local("vmax", const(_LOWEST, "f32", lanes))
    smax = b.local("smax", const(_LOWEST, "f32"))
    b.chunks("j", n, lanes, lambda j, w: b.assign(vmax, maximum(vmax, load(j, w))) if w > 1
            else b.assign(smax, maximum(smax, load(j, w))))
    top = b.let("top", maximum(Reduce("max", vmax) if lanes > 1 else vmax, smax))
    vsum = b.local("vsum", const(0.0, "f32", lanes))
    ssum = b.local("ssum", const(0.0, "f32"))

    def exp_pass(j, w) -> None:
        e = b.let("e", kmath.exp(load(j, w) - top))
        if not log and io.quant is None:
            b.store(y, base + j, e)
        b.assign(vsum if w > 1 else ssum, (vsum if w > 1 else ssum) + e)
    b.chunks("j", n, lanes, exp_pass)
    total = (Reduce("add", vsum) if lanes > 1 else vsum) + ssum
    if log:
        shift = b.let("shift", top + kmath.log(total))
        b.chunks("j", n, lanes, lambda j, w: b.store(y, base + j, io.store(load(j, w) - shift)))
        return
    inv = b.let("inv", 1.0 / total)
    if io.quant is not None:
        b.chunks("j", n, lanes, lambda j, w: b.store(y, base + j, io.store(kmath.exp(load(j, w) - top) * inv)))
        return
    b.chunks("j", n, lanes, lambda j, w: b.store(y, base + j, (y.vec(base + j, w) if w > 1 else y[base + j]) * inv))


def _softmax_strided(b: Builder, x, y, base: Expr, n: int, stride: int, width: int, log: bool, io: _Io) -> None:
    """`width` independent softmaxes side by side (the reduction axis is not innermost)."""
    def at(buf, k):
        return buf.vec(base + k * stride, width) if width > 1 else buf[base + k * stride]
    top = b.local("top", const(_LOWEST, "f32", width))
    with b.loop("k", 0, n) as k:
        b.assign(top, maximum(top, io.load(at(x, k))))
    total = b.local("sum", const(0.0, "f32", width))
    with b.loop("k", 0, n) as k:
        e = b.let("e", kmath.exp(io.load(at(x, k)) - top))
        if not log and io.quant is None:
            b.store(y, base + k * stride, e)
        b.assign(total, total + e)
    if log:
        shift = b.let("shift", top + kmath.log(total))
        with b.loop("k", 0, n) as k:
            b.store(y, base + k * stride, io.store(io.load(at(x, k)) - shift))
        return
    inv = b.let("inv", 1.0 / total)
    with b.loop("k", 0, n) as k:
        value = kmath.exp(io.load(at(x, k)) - top) * inv if io.quant is not None else at(y, k) * inv
        b.store(y, base + k * stride, io.store(value))


def canonical_softmax(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = axis_attr(node, len(shape), -1 if rw.graph.opset >= 13 else 1)
    beta = {"beta": node.attrs["beta"]} if "beta" in node.attrs else {}     # a TFLite model's
    if rw.graph.opset >= 13 or axis == len(shape) - 1:
        rw.add(node.op, node.name, node.inputs, node.outputs, axis=axis, **beta)
        return
    # Before opset 13 the input is coerced to 2-D at `axis` and normalized over the second dimension.
    rows, cols = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    flat = view(rw, node, node.inputs[0], (rows, cols))
    out = rw.like(node.outputs[0] + "_2d", node.outputs[0], (rows, cols))
    rw.add(node.op, node.name, [flat], [out], axis=1)
    view(rw, node, out, shape, node.outputs[0])


for _op in ("Softmax", "LogSoftmax"):
    define(_op, canonical=canonical_softmax, lower=softmax, layout=Layout.FOLLOW, axis_attrs={"axis": AxisAttr.AXIS},
           check=same_shape, quant=QuantForm.FUNCTION)
