"""TFLite's hybrid convolution (float32 activations, int8 weights: dynamic-range quantization, the converter's
default): the input quantized at run time, per batch, as LiteRT's reference kernel quantizes it, then an
integer convolution rescaled to float.

`TfliteHybridQuantize` makes, per batch row, TFLite's symmetric quantization of the input: the codes
round(x * (127 / r)) (half away from zero, clamped to +-127) for r the row's largest magnitude, all 0 when
r is 0, and the row's factor (r / 127) * s_weights, 1 * s_weights when r is 0. The frontend convolves the
codes, held as float32, with the weights' int8 codes: every partial sum of those products is an integer
below 2**24 (it checks the window), so the float convolution computes TFLite's int32 sum exactly; the
sum times the factor, plus the bias, is TFLite's output.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Cast, Kernel, binop, const, maximum, select
from aot.ops import LowerContext
from aot.ops.quantized import quantize_half_away
from aot.registry import Layout, define


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, (codes, factor) = ins[0], outs
    shape = ctx.graph.shape(node.inputs[0])
    batch, size = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    weight_scale = float(np.float32(node.attrs["weight_scale"]))
    b = Builder()
    with b.loop("b", 0, batch) as row:
        largest = b.local("range", const(0.0, "f32"))
        with b.loop("i", 0, size) as i:
            v = x[row * size + i]
            b.assign(largest, maximum(largest, select(binop("lt", v, 0.0), 0.0 - v, v)))
        empty = b.let("empty", binop("eq", largest, 0.0))
        inverse = b.let("inverse", select(empty, const(0.0, "f32"), const(127.0, "f32") / largest))
        b.store(factor, row, select(empty, const(1.0, "f32"), largest / 127.0) * weight_scale)
        with b.loop("i", 0, size) as i:
            code = quantize_half_away(x[row * size + i] * inverse, 0, -127, 127, "int32")
            b.store(codes, row * size + i, Cast(code, "f32"))
    return Kernel(name, params, b.block())


def _keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node)


define("TfliteHybridQuantize", canonical=_keep, lower=lower, layout=Layout.FOLLOW)
