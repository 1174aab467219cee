"""A TFLite model's int8/int16 MEAN, as its reference kernel (QuantizedMeanOrSum) computes it: the input codes
summed in int32 over the reduced axes, the zero point times the count taken off, and the sum rescaled by
the fixed-point multiplier of s_in / s_out (formed in double) with 1/count folded into it: the count's
largest power of two k in the shift (at most 32, and 31 plus the multiplier's exponent), the rest divided
into the multiplier, rounded down; then rounded twice (multiply_twice_rounded) and saturated. No fused
activation. The frontend makes it (op TfliteMean, attrs axes); the result keeps the reduced axes as 1."""

from __future__ import annotations

import contextlib
import math

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.graph.quant import RANGES, tflite_multiplier
from aot.kernel.ir import Builder, Kernel, const
from aot.ops import LowerContext
from aot.ops.quantized import multiply_twice_rounded, saturate, widen
from aot.registry import ALL_DTYPES, AxisAttr, Layout, define


def multiplier(x_scale: float, y_scale: float, count: int) -> tuple[int, int]:
    """(m0, shift) of the rescale with 1/count folded in, in tflite_multiplier's form."""
    m0, shift = (int(v[0]) for v in tflite_multiplier(float(x_scale) / float(y_scale)))
    exponent = 31 - shift
    k = min(count.bit_length() - 1, 32, 31 + exponent)
    return (m0 << k) // count, shift + k


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, y = ins[0], outs[0]
    shape = ctx.graph.shape(node.inputs[0])
    axes = sorted(set(node.attrs["axes"]))
    quant = node_quant(ctx.graph.values, node)
    count = math.prod(shape[a] for a in axes)
    m0, shift = multiplier(quant.x_scale, quant.y_scale, count)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out_strides = [int(np.prod(out_shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]
    kept = [i for i in range(len(shape)) if i not in axes]
    lo, hi = RANGES[quant.y_dtype]
    b = Builder()
    with contextlib.ExitStack() as outer:
        index = {i: outer.enter_context(b.loop(f"k{i}", 0, shape[i])) for i in kept}
        total = b.local("total", const(0, "i32"))
        with contextlib.ExitStack() as inner:
            index.update({i: inner.enter_context(b.loop(f"r{i}", 0, shape[i])) for i in axes})
            at = sum((index[i] * strides[i] for i in range(len(shape))), const(0))
            b.assign(total, total + widen(x[at]))
        value = multiply_twice_rounded(total - quant.x_zp * count, const(m0, "i32"), const(shift, "i32")) + quant.y_zp
        where = sum((index[i] * out_strides[i] for i in kept), const(0))
        b.store(y, where, saturate(value, lo, hi, quant.y_dtype))
    return Kernel(name, params, b.block())


def _keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node)


define("TfliteMean", canonical=_keep, lower=lower, layout=Layout.FOLLOW, axis_attrs={"axes": AxisAttr.AXES},
       dtypes=ALL_DTYPES)
