"""int8 Softmax as TFLite's reference kernel computes it: gemmlowp's fixed-point arithmetic throughout.

Per row: each difference from the row's maximum, d in [-255, 0], is scaled by the input's scale and beta
(a fixed-point multiplier and left shift, PreprocessSoftmaxScaling with 5 integer bits) and exponentiated
in Q5.26 -> Q0.31 (exp_on_negative_values); the exponentials, rescaled to Q12.19, are summed; the sum's
reciprocal is found by Newton-Raphson (one_over_one_plus_x_for_x_in_0_1) and each exponential times it,
rounded, is the output in units of 1/256 less 128. An exponential depends only on d, so both the Q0.31
values and their Q12.19 summands are tables of 256 entries made here, at compile time, with the same
integer arithmetic; the sum, the reciprocal and the products run in the kernel.
"""

from __future__ import annotations

import math

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.quant import tflite_multiplier
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops.quantized import rounding_doubling_high, rounding_shift, saturate, widen

INT32_MAX = 2**31 - 1
SCALED_DIFF_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12
# Beyond this many values a row's exponentials may sum to 512, where TFLite's kernel aborts
MAX_ROW = 511


# --- gemmlowp's fixed-point primitives on Python ints (the tables) ---------------------------------------

def _srdhm(a: int, b: int) -> int:
    """Saturating rounding doubling high multiply."""
    if a == b == -(2**31):
        return INT32_MAX
    product = a * b
    nudged = product + ((1 << 30) if product >= 0 else 1 - (1 << 30))
    return nudged >> 31 if nudged >= 0 else -((-nudged) >> 31)         # divided, truncated toward zero


def _rdbpot(x: int, exponent: int) -> int:
    """Rounding divide by a power of two: to nearest, ties away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _saturating_shift(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT for exponent >= 0: x * 2**exponent, saturated to int32."""
    return max(-(2**31), min(INT32_MAX, x << exponent))


def _exp_quarter(a: int) -> int:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out."""
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _rdbpot(x4, 2)
    polynomial = _rdbpot(_srdhm(x4_over_4 + x3, 715827883) + x2, 1)
    return 1895147668 + _srdhm(1895147668, x + polynomial)


_BARRELS = ((24, 1672461947), (25, 1302514674), (26, 790015084), (27, 290630308), (28, 39332535), (29, 720401),
            (30, 242))


def _exp_on_negative_values(a: int) -> int:
    """exp(a) for a <= 0 in Q5.26, as Q0.31."""
    quarter = 1 << (26 - 2)
    remainder = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_saturating_shift(remainder, SCALED_DIFF_INTEGER_BITS))
    bits = remainder - a
    for bit, factor in _BARRELS:
        if bits & (1 << bit):
            result = _srdhm(result, factor)
    return INT32_MAX if a == 0 else result


def tables(input_scale: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """(exponentials in Q0.31, their Q12.19 summands) for row differences 0, -1, ..., -255."""
    real = min(float(beta) * float(input_scale) * (1 << (31 - SCALED_DIFF_INTEGER_BITS)), float(INT32_MAX))
    m0, shift = (int(v[0]) for v in tflite_multiplier(real))
    left = 31 - shift         # QuantizeMultiplierGreaterThanOne: a left shift
    if left < 0:
        raise UnsupportedOpError(f"input scale {input_scale} times beta {beta} is too small for TFLite's "
                                 "quantized Softmax")
    radius = math.floor(((1 << SCALED_DIFF_INTEGER_BITS) - 1) * (1 << (31 - SCALED_DIFF_INTEGER_BITS))
                        / (1 << left))
    exps = np.zeros(256, np.int64)
    for k in range(256):
        if -k >= -radius:
            exps[k] = _exp_on_negative_values(_srdhm(-k * (1 << left), m0))
    summands = np.array([_rdbpot(int(e), ACCUMULATION_INTEGER_BITS) for e in exps], np.int64)   # Q0.31 -> Q12.19
    return exps, summands


# --- the kernel --------------------------------------------------------------------------------------------

def _saturating_shift_expr(x: Expr, exponent: int) -> Expr:
    wide = binop("shl", Cast(x, "i64"), const(exponent, "i64"))
    return Cast(minimum(maximum(wide, const(-(2**31), "i64")), const(INT32_MAX, "i64")), "i32")


def _reciprocal(b: Builder, total: Expr, out_bits: int) -> tuple[Expr, Expr]:
    """GetReciprocal of a Q12.19 sum in [1, 512): (1/(1 + x) in Q0.31 of its normalized mantissa x, the
    right shift that makes the outputs units of 2**-out_bits)."""
    # its leading zeros as a 32-bit word: 1 to 12 (it is at least 2**19: the row's maximum contributes 1.0)
    leading = const(1, "i32")
    for bit in range(20, 31):
        leading = leading + select(binop("lt", total, const(1 << bit, "i32")), const(1, "i32"), const(0, "i32"))
    zeros = b.let("zeros", leading)
    mantissa = binop("shl", Cast(total, "i64"), Cast(zeros, "i64")) - const(1 << 31, "i64")
    x = b.let("mantissa", Cast(mantissa, "i32"))
    half = b.let("half", Cast(binop("shr", Cast(x, "i64") + const(INT32_MAX + 1, "i64"), const(1, "i64")), "i32"))
    estimate = b.local("estimate", const(1515870810, "i32") + rounding_doubling_high(half, const(-1010580540, "i32")))
    for _ in range(3):
        product = rounding_doubling_high(half, estimate)
        correction = rounding_doubling_high(estimate, const(1 << 29, "i32") - product)
        b.assign(estimate, estimate + _saturating_shift_expr(correction, 2))
    recip = b.let("recip", _saturating_shift_expr(estimate, 1))
    return recip, b.let("shift", const(12 + 31 - out_bits, "i32") - zeros)


def row_max_and_sum(b: Builder, x, base: Expr, n: int, lowest: int, summand) -> tuple[Expr, Expr]:
    """A row's largest code (int32) and the int32 sum of summand(k, largest) over it."""
    top = b.local("top", const(lowest, "i32"))
    with b.loop("k", 0, n) as k:
        b.assign(top, maximum(top, widen(x[base + k])))
    total = b.local("total", const(0, "i32"))
    with b.loop("k", 0, n) as k:
        b.assign(total, total + summand(k, top))
    return top, total


def lower(ctx, node, name: str, quant, rows: int, n: int) -> Kernel:
    """The Softmax of `rows` contiguous rows of n int8 values, into int8 (units of 1/256 from -128) or int16
    (units of 1/65536 from -32768), TFLite's two output encodings."""
    if n > MAX_ROW:
        raise UnsupportedOpError(f"node '{node.name}': a quantized Softmax over {n} values: TFLite's kernel aborts "
                                 f"where a row's exponentials sum to 512, so aot takes rows of {MAX_ROW} at most")
    ins, outs, params = ctx.io(node)
    x, y = ins[0], outs[0]
    exps, summands = tables(quant.x_scale, float(node.attrs.get("beta", 1.0)))
    exp_table = ctx.const(exps.astype(np.int32), "exp")
    sum_table = ctx.const(summands.astype(np.int32), "exps")
    b = Builder()
    with b.loop("r", 0, rows) as r:
        base = r * n
        top, total = row_max_and_sum(b, x, base, n, -128, lambda k, top: sum_table[Cast(top - widen(x[base + k]),
                                                                                          "idx")])
        bits = 16 if quant.y_dtype == "int16" else 8
        recip, shift = _reciprocal(b, total, bits)
        with b.loop("k", 0, n) as k:
            e = exp_table[Cast(top - widen(x[base + k]), "idx")]
            value = rounding_shift(rounding_doubling_high(recip, e), shift) - (1 << (bits - 1))
            b.store(y, base + k, saturate(value, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, quant.y_dtype))
    return Kernel(name, params, b.block())
