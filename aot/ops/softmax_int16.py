"""int16 Softmax as TFLite's reference kernel (SoftmaxInt16) computes it: two 513-entry tables, looked up with
linear interpolation.

Per row: each difference from the row's maximum is rescaled (the fixed-point multiplier of s_in * beta /
(10 / 65535), rounded twice) so that [-65535, 0] spans [-10, 0], recentred to int16 and looked up in the
exp table (Q0.15); the sum of the row's exponentials is normalized by its leading zeros into the
1 / (1 + x) table; each exponential times that reciprocal, shifted back, is the output (scale 1/32768,
zero point 0). The tables are TFLite's LUTPopulate: float32 samples of the function over 512 steps, each
biased by half the interpolation error at its step's midpoint, built here with the same float32
arithmetic (exp correctly rounded to float32).
"""

from __future__ import annotations

import math

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.quant import tflite_multiplier
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops.quantized import multiply_twice_rounded, widen
from aot.ops.softmax_tflite import row_max_and_sum

F32 = np.float32


def _round(v: np.float32) -> np.float32:
    """TfLiteRound: half away from zero."""
    return F32(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def lut(input_scale: float, input_zp: int, output_scale: float, output_zp: int, fn) -> np.ndarray:
    """TFLite's LUTPopulate for int16 in float32: 512 biased samples of fn, and its value at the top."""
    input_min = F32(input_scale) * F32(-32768 - input_zp)
    input_max = F32(input_scale) * F32(32767 - input_zp)
    output_min = F32(output_scale) * F32(-32768 - output_zp)
    output_max = F32(output_scale) * F32(32767 - output_zp)
    step = (input_max - input_min) / F32(512)
    half_step = step / F32(2)
    inverse = F32(65536) / (output_max - output_min)
    table = np.zeros(513, np.int64)
    for i in range(512):
        at = input_min + F32(i) * step
        val, midpoint, following = fn(at), fn(at + half_step), fn(input_min + F32(i + 1) * step)
        sample = _round(val * inverse)
        interpolated = _round((following * inverse + _round(val * inverse)) / F32(2))
        bias = _round((interpolated - _round(midpoint * inverse)) / F32(2))
        table[i] = min(max(float(sample - bias), -32768.0), 32767.0)
    table[512] = min(max(float(_round(fn(input_max) * inverse)), -32768.0), 32767.0)
    return table.astype(np.int16)


def _exp(x: np.float32) -> np.float32:
    return F32(math.exp(float(x)))


def _one_over_one_plus(x: np.float32) -> np.float32:
    return F32(1) / (F32(1) + x)


RANGE = 65535       # int16 max - min
EXP_TABLE = None    # built on first use (the same two tables for every model)
RECIPROCAL_TABLE = None


def tables() -> tuple[np.ndarray, np.ndarray]:
    global EXP_TABLE, RECIPROCAL_TABLE
    if EXP_TABLE is None:
        EXP_TABLE = lut(10.0 / RANGE, 32767, 2.0 / RANGE, 0, _exp)
        RECIPROCAL_TABLE = lut(1.0 / RANGE, -32768, 2.0 / RANGE, 0, _one_over_one_plus)
    return EXP_TABLE, RECIPROCAL_TABLE


def _lookup(table, value: Expr) -> Expr:
    """LUTLookup of an int16 value (as int32): the entry at 256 + value >> 7 and the slope to the next,
    times the low 7 bits, rounded."""
    index = binop("shr", value, const(7, "i32")) + 256
    base = widen(table[Cast(index, "idx")])
    slope = widen(table[Cast(index + 1, "idx")]) - base
    delta = binop("shr", slope * binop("and", value, const(0x7F, "i32")) + 64, const(7, "i32"))
    return Cast(Cast(base + delta, "i16"), "i32")


def _clamp16(v: Expr) -> Expr:
    return minimum(maximum(v, const(-32768, "i32")), const(32767, "i32"))


def lower(ctx, node, name: str, quant, rows: int, n: int) -> Kernel:
    """The Softmax of `rows` contiguous rows of n int16 values into int16."""
    real = float(quant.x_scale) * float(node.attrs.get("beta", 1.0)) / (10.0 / RANGE)
    (m0,), (shift,) = tflite_multiplier(real)
    if 31 - shift > 15:     # a difference of -65535 shifted left would pass int32
        raise UnsupportedOpError(f"node '{node.name}': input scale {quant.x_scale:g} times beta is too large for "
                                 "TFLite's int16 Softmax")
    ins, outs, params = ctx.io(node)
    x, y = ins[0], outs[0]
    exps, reciprocals = (ctx.const(t, hint) for t, hint in zip(tables(), ("exp", "recip")))
    b = Builder()

    def exp_of(base: Expr, k: Expr, top: Expr) -> Expr:
        scaled = multiply_twice_rounded(widen(x[base + k]) - top, const(int(m0), "i32"), const(int(shift), "i32"))
        return _lookup(exps, _clamp16(scaled + 32767))

    with b.loop("r", 0, rows) as r:
        base = r * n
        top, total = row_max_and_sum(b, x, base, n, -32768, lambda k, top: exp_of(base, k, top))
        # the sum's leading zeros as a 32-bit word (it is at least 1: the maximum's exponential)
        leading = const(0, "i32")
        for bit in range(0, 31):
            leading = leading + select(binop("lt", total, const(1 << bit, "i32")), const(1, "i32"), const(0, "i32"))
        zeros = b.let("zeros", leading + 1)
        shifted = Cast(binop("shr", binop("shl", Cast(total, "i64"), Cast(zeros - 1, "i64")) + (1 << 13),
                             const(14, "i64")), "i32")
        reciprocal = b.let("recip", _lookup(reciprocals, _clamp16(shifted - ((1 << 15) + (1 << 16)))))
        right = b.let("right", Cast(const(31, "i32") - zeros, "i64"))
        with b.loop("k", 0, n) as k:
            product = Cast(exp_of(base, k, top), "i64") * Cast(reciprocal, "i64")
            out = binop("shr", product + binop("shl", const(1, "i64"), right - 1), right)
            b.store(y, base + k, Cast(minimum(maximum(Cast(out, "i32"), const(0, "i32")), const(32767, "i32")), "i16"))
    return Kernel(name, params, b.block())
