"""TFLite's SVDF (a singular-value-decomposed filter over time, keyword spotting's layer): one kernel per node,
float32 or integer, computed as TFLite's reference kernels compute it.

Each of the F filters keeps the last M values of its feature in the state, a variable tensor (batch, F * M).
A run shifts every filter's memory one step left and writes the newest feature, W_feature[f] . x, last;
then each filter's memory is dotted with its time weights W_time[f]; a unit (F / rank of them) sums the
`rank` filters it owns, plus its bias; the fused activation last.

Integer (int8 input and output, int16 state and time weights, int32 bias): the feature is requantized by
the multiplier of s_in * s_feature / s_state (formed in float32, rounded twice), clamped to int16 and
offset by the state's zero point; the time products sum in int32 around that zero point, the unit's sum
is requantized by s_state * s_time / s_out and clamped to int8. The fused activation (LiteRT requires
RELU) is not applied: TFLite's integer kernels clamp to int8 only. TFLite Micro also takes int8 state
and time weights (which LiteRT cannot run), computed the same way: the requantized feature clamped to
int8 before the state's zero point is added, the sum kept in the state's type.

Inputs: x (batch, in), W_feature (F, in), W_time (F, M), bias (units) or "", the state; outputs: y and the
new state (the frontend makes it the state's next value, graph.State).
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.graph.quant import RANGES, tflite_multiplier
from aot.kernel.ir import Builder, Cast, Kernel, const, maximum, minimum
from aot.ops import LowerContext
from aot.ops.epilogue import apply
from aot.ops.quantized import multiply_twice_rounded, saturate, widen
from aot.registry import ALL_DTYPES, define

F32 = np.float32


def multipliers(x_scale: float, feature_scale: float, state_scale: float, time_scale: float,
                y_scale: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """(m0, shift) of the feature's requantization to the state and of the units' to the output, from
    scales multiplied and divided in float32 as LiteRT's Prepare does."""
    first = float(F32(F32(x_scale) * F32(feature_scale)) / F32(state_scale))
    second = float(F32(F32(state_scale) * F32(time_scale)) / F32(y_scale))
    return tuple((int(m[0]), int(s[0])) for m, s in (tflite_multiplier(first), tflite_multiplier(second)))


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, features, times, bias, state = ins
    y, new_state = outs
    batch, width = ctx.graph.shape(node.inputs[0])
    filters, memory = ctx.graph.shape(node.inputs[2])
    rank = node.attrs["rank"]
    quant = node_quant(ctx.graph.values, node)
    values = ctx.graph.values
    integer = quant is not None
    if integer:
        sq, fq, tq = (values[node.inputs[i]].quant for i in (4, 1, 2))
        (m1, s1), (m2, s2) = multipliers(quant.x_scale, float(np.asarray(fq.scale).reshape(-1)[0]), sq.scale,
                                         float(np.asarray(tq.scale).reshape(-1)[0]), quant.y_scale)
        state_type = values[node.inputs[4]].dtype
        low, high = RANGES[state_type]
        acc = "i32"
    else:
        acc = "f32"
    zero = const(0, acc) if integer else const(0.0, "f32")
    b = Builder()
    with b.loop("b", 0, batch) as row:
        with b.loop("u", 0, filters // rank) as unit:
            total = b.local("total", Cast(bias[unit], acc) if bias is not None else zero)
            with b.loop("r", 0, rank) as r:
                f = unit * rank + r
                at = row * (filters * memory) + f * memory
                with b.loop("j", 0, memory - 1) as j:      # the memory one step older
                    b.store(new_state, at + j, state[at + j + 1])
                dot = b.local("dot", zero)
                with b.loop("c", 0, width) as c:
                    value = widen(x[row * width + c]) - quant.x_zp if integer else x[row * width + c]
                    b.assign(dot, dot + widen(features[f * width + c]) * value)
                if integer:     # requantized, clamped to the state's type, then offset by its zero point
                    newest = minimum(maximum(multiply_twice_rounded(dot, const(m1, "i32"), const(s1, "i32")), low),
                                     high) + sq.zero_point
                    b.store(new_state, at + memory - 1, Cast(newest, _C[state_type]))
                else:
                    b.store(new_state, at + memory - 1, dot)
                with b.loop("j", 0, memory) as j:
                    held = widen(new_state[at + j]) - sq.zero_point if integer else new_state[at + j]
                    b.assign(total, total + widen(times[f * memory + j]) * held)
            if integer:
                out = multiply_twice_rounded(total, const(m2, "i32"), const(s2, "i32")) + quant.y_zp
                b.store(y, row * (filters // rank) + unit, saturate(out, quant.qmin, quant.qmax, quant.y_dtype))
            else:
                b.store(y, row * (filters // rank) + unit, apply(node.attrs.get("acts", ()), total))
    return Kernel(name, params, b.block())


_C = {"int8": "i8", "int16": "i16"}


def _keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node)


define("TfliteSvdf", canonical=_keep, lower=lower, dtypes=ALL_DTYPES)
