"""Integer arithmetic shared by the quantized kernels, as kernel-IR expressions.

Rounding is to nearest with ties to even where a float is rounded (as ONNX QuantizeLinear and
onnxruntime's requantization do); the fixed-point requantization of Conv/Gemm accumulators rounds
ties up, which differs only on exact ties.
"""

from __future__ import annotations

import numpy as np

from aot.graph.quant import tflite_multiplier
from aot.kernel.ir import Broadcast, Cast, DoublingHigh, Expr, RoundInt, binop, const, maximum, minimum, select
from aot.ops.epilogue import apply

_MAGIC = 12582912.0      # 1.5 * 2**23: x + magic - magic rounds |x| < 2**22 to an integer, ties to even
_INT = {"int8": "i8", "uint8": "u8", "int16": "i16", "int32": "i32"}


def saturate(q: Expr, qmin: int, qmax: int, dtype: str) -> Expr:
    """An int32 value clamped to [qmin, qmax] and narrowed to `dtype` ("int8", "int16", ...)."""
    return Cast(minimum(maximum(q, qmin), qmax), _INT[dtype])


def round_even(x: Expr) -> Expr:
    """Round float x to the nearest integer (ties to even), as a float; |x| is clamped below 2**22."""
    x = minimum(maximum(x, -4194304.0), 4194304.0)
    return (x + _MAGIC) - _MAGIC


def widen(x: Expr) -> Expr:
    """An int8/uint8 value (or vector) as int32."""
    return Cast(x, "i32") if x.dtype in ("i8", "u8", "i16") else x


def quantize(real_over_scale: Expr, zero_point: int, qmin: int, qmax: int, dtype: str, halving: bool = False) -> Expr:
    """saturate(round(v) + zero_point) as `dtype` ("int8"/"uint8"), v already divided by the scale. With
    `halving` (see narrows_by_halves) a vector narrows in two steps, to 16 bits saturated and then to
    [qmin, qmax]."""
    q = RoundInt(real_over_scale, Cast(round_even(real_over_scale), "i32")) + zero_point
    if halving and q.lanes > 1 and dtype in ("int8", "uint8"):
        q = Cast(minimum(maximum(q, -(2**15)), 2**15 - 1), "i16")
    return saturate(q, qmin, qmax, dtype)


def quantize_half_away(real_over_scale: Expr, zero_point: int, qmin: int, qmax: int, dtype: str) -> Expr:
    """saturate(round(v) + zero_point), ties away from zero (TFLite's TfLiteRound), exactly: the value
    truncated, then moved one step out where the part cut off is half a step or more."""
    v = minimum(maximum(real_over_scale, -4194304.0), 4194304.0)
    whole = Cast(v, "i32")
    cut = v - Cast(whole, "f32")            # exact: |v| < 2**22
    one, zero = const(1, "i32", v.lanes), const(0, "i32", v.lanes)
    q = whole + select(binop("ge", cut, 0.5), one, zero) - select(binop("le", cut, -0.5), one, zero) + zero_point
    return saturate(q, qmin, qmax, dtype)


def narrows_by_halves(target) -> bool:
    """Whether quantize's vectors should narrow in halving steps on `target`: on AArch64 LLVM makes each
    step one saturating narrowing instruction (SQXTN, SQXTUN; a bound equal to the type's costs nothing),
    four vectors of int32 to 16 bytes in six; on 32-bit NEON and Helium it measured worse than one clamp."""
    return target.aarch64_neon


def dequantize(q: Expr, zero_point: int, scale: float) -> Expr:
    return Cast(widen(q) - zero_point, "f32") * scale


def quantized_function(q: Expr, fn: str, params: tuple, x_scale: float, x_zp: int, y_scale: float, y_zp: int,
                       qmin: int, qmax: int, y_dtype: str) -> Expr:
    """fn between integer encodings as onnxruntime runs DequantizeLinear -> fn -> QuantizeLinear: in float32,
    dividing by the output scale. Relu comes first, on the integers: relu((q - zp) s) = (max(q, zp) - zp) s
    exactly (scales are positive), one integer max for a float compare and select. Shared by the activation
    kernel and the activation fused into a convolution, so both give the same bits."""
    if fn == "relu":
        real = dequantize(maximum(widen(q), x_zp), x_zp, x_scale)
    else:
        real = apply(((fn, params),), dequantize(q, x_zp, x_scale))
    return quantize(real / float(np.float32(y_scale)), y_zp, qmin, qmax, y_dtype)


def add_quantized(a: Expr, a_scale: float, a_zp: int, b: Expr, b_scale: float, b_zp: int,
                  y_scale: float, y_zp: int, qmin: int, qmax: int, y_dtype: str) -> Expr:
    """An integer Add as onnxruntime's QLinearAdd computes it: each operand rescaled in float32 by its
    scale over the output's, summed, rounded. Shared by the Add kernel and the residual Add fused into
    a convolution, so both give the same bits."""
    y = np.float32(y_scale)
    value = (dequantize(a, a_zp, float(np.float32(a_scale) / y))
             + dequantize(b, b_zp, float(np.float32(b_scale) / y)))
    return quantize(value, y_zp, qmin, qmax, y_dtype)


def rounding_doubling_high(x: Expr, m0: Expr) -> Expr:
    """gemmlowp's saturating rounding doubling high multiply of int32 x by an int32 multiplier m0 (never both
    -2**31, its one saturating case): its nudge of 2**30 (1 - 2**30 for a negative product) then division
    truncating toward zero is floor((x * m0 + 2**30) / 2**31), round(x * m0 / 2**31) with ties up."""
    lanes = x.lanes
    if m0.lanes != lanes:
        m0 = Broadcast(m0, lanes)
    product = Cast(x, "i64") * Cast(m0, "i64")
    return DoublingHigh(x, m0, Cast(binop("shr", product + const(1 << 30, "i64", lanes), const(31, "i64", lanes)),
                                    "i32"))


def rounding_shift(x: Expr, exponent: Expr) -> Expr:
    """gemmlowp's rounding divide of int32 x by 2**exponent: to nearest, ties away from zero."""
    lanes = x.lanes
    mask = binop("shl", const(1, "i32", lanes), exponent) - 1
    threshold = binop("shr", mask, const(1, "i32", lanes)) - binop("shr", x, const(31, "i32", lanes))
    up = select(binop("gt", binop("and", x, mask), threshold), const(1, "i32", lanes), const(0, "i32", lanes))
    return binop("shr", x, exponent) + up


def multiply_twice_rounded(x: Expr, m0: Expr, shift: Expr) -> Expr:
    """int32 x times m0 * 2**-shift (tflite_multiplier's form) as TFLite's MultiplyByQuantizedMultiplier
    computes it in its default build (rounded twice): x shifted left by 31 - shift if that is positive,
    the rounding doubling high multiply, then a rounding shift right by shift - 31 if that is."""
    left = maximum(31 - shift, 0)
    right = maximum(shift - 31, 0)
    return rounding_shift(rounding_doubling_high(binop("shl", x, left), m0), right)


def multiply_real(x: Expr, high: Expr, low: Expr, shift: Expr) -> Expr:
    """int32 x times a real multiplier m * 2**-shift (m a 53-bit integer, high and low its bits above and
    below bit 32: real_multiplier's form), rounded half away from zero, exactly: |x| * m is formed in two
    int64 products, the rounding half added above bit 32, the sign put back. What LiteRT's FULLY_CONNECTED
    computes as round(double(x) * multiplier), to the bit unless the exact product lies within 2**-47 of a
    tie, where the double product may round onto it."""
    lanes = x.lanes
    wide = Cast(x, "i64")
    negative = binop("lt", wide, const(0, "i64", lanes))
    magnitude = select(negative, const(0, "i64", lanes) - wide, wide)
    upper = magnitude * Cast(high, "i64") + binop("shr", magnitude * Cast(low, "i64"), const(32, "i64", lanes))
    shift64 = Cast(shift, "i64")
    half = binop("shl", const(1, "i64", lanes), shift64 - 33)
    rounded = Cast(binop("shr", upper + half, shift64 - 32), "i32")
    return select(binop("lt", x, const(0, "i32", lanes)), const(0, "i32", lanes) - rounded, rounded)


def multiply_wide(x: Expr, m0: Expr, shift: Expr) -> Expr:
    """int64 x (below 2**47 in magnitude) times m0 * 2**-shift (tflite_multiplier's form), rounded once, half
    up, exactly: what LiteRT's 16x8 FULLY_CONNECTED computes. x * m0 may pass 64 bits, so m0 is split at bit
    16: (x * m0 + half) >> shift is ((x * m0_high) + ((x * m0_low + half) >> 16)) >> (shift - 16), the low
    bits dropped first changing no floor. shift is at least 16 (multipliers below 2**15). Per lane; int32."""
    lanes = x.lanes
    m = Cast(m0, "i64")
    high = binop("shr", m, const(16, "i64", lanes))
    low = binop("and", m, const(0xFFFF, "i64", lanes))
    shift64 = Cast(shift, "i64")
    half = binop("shl", const(1, "i64", lanes), shift64 - 1)
    carried = binop("shr", x * low + half, const(16, "i64", lanes))
    return Cast(binop("shr", x * high + carried, shift64 - 16), "i32")


def multiply_reduced(x: Expr, m0: Expr, shift: Expr) -> Expr:
    """int64 x times m0 * 2**-shift (tflite_multiplier's form) as TFLite's int64 MultiplyByQuantizedMultiplier
    does (its 16x8 kernels): the multiplier rounded to 15 bits first (half up, 0x7FFF at most), then one
    rounding shift, half up. Per lane; int32."""
    lanes = x.lanes
    m = Cast(m0, "i64")
    reduced = select(binop("lt", m, const(0x7FFF0000, "i64", lanes)),
                     binop("shr", m + const(1 << 15, "i64", lanes), const(16, "i64", lanes)),
                     const(0x7FFF, "i64", lanes))
    total = Cast(shift, "i64") - 16          # 15 - exponent, the exponent being 31 - shift
    half = binop("shl", const(1, "i64", lanes), total - 1)
    return Cast(binop("shr", x * reduced + half, total), "i32")


def add_tflite(a: Expr, a_scale: float, a_zp: int, b: Expr, b_scale: float, b_zp: int,
               y_scale: float, y_zp: int, qmin: int, qmax: int, y_dtype: str, subtract: bool = False) -> Expr:
    """An integer Add as TFLite's reference kernel computes it: each operand less its zero point, shifted
    left (20 bits for 8-bit outputs, 15 for int16), scaled by its fixed-point share of twice the larger
    input scale, summed, and the sum scaled to the output's encoding; each scaling rounded twice, as
    gemmlowp does (multiply_twice_rounded). `subtract`: SUB, the same with the second operand's share
    subtracted."""
    left_shift = 15 if y_dtype == "int16" else 20
    twice_max = 2.0 * max(float(np.float32(a_scale)), float(np.float32(b_scale)))
    a_m0, a_shift = (int(v[0]) for v in tflite_multiplier(float(np.float32(a_scale)) / twice_max))
    b_m0, b_shift = (int(v[0]) for v in tflite_multiplier(float(np.float32(b_scale)) / twice_max))
    y_m0, y_shift = (int(v[0]) for v in tflite_multiplier(twice_max / ((1 << left_shift)
                                                                        * float(np.float32(y_scale)))))
    shifted_a = binop("shl", widen(a) - a_zp, const(left_shift, "i32", a.lanes))
    shifted_b = binop("shl", widen(b) - b_zp, const(left_shift, "i32", b.lanes))
    def scaled(x: Expr, m0: int, shift: int) -> Expr:
        return multiply_twice_rounded(x, const(m0, "i32", x.lanes), const(shift, "i32", x.lanes))

    second = scaled(shifted_b, b_m0, b_shift)
    total = scaled(shifted_a, a_m0, a_shift) + (const(0, "i32", second.lanes) - second if subtract else second)
    return saturate(scaled(total, y_m0, y_shift) + y_zp, qmin, qmax, y_dtype)


def mul_tflite(a: Expr, a_scale: float, a_zp: int, b: Expr, b_scale: float, b_zp: int,
               y_scale: float, y_zp: int, qmin: int, qmax: int, y_dtype: str) -> Expr:
    """An integer Mul as LiteRT's reference kernel computes it: the product of the operands less their zero
    points, times the fixed-point multiplier of s_a * s_b / s_y (its two products and quotient in float32,
    as LiteRT forms it), rounded twice."""
    real = float(np.float32(np.float32(a_scale) * np.float32(b_scale)) / np.float32(y_scale))
    m0, shift = (int(v[0]) for v in tflite_multiplier(real))
    product = (widen(a) - a_zp) * (widen(b) - b_zp)
    y = multiply_twice_rounded(product, const(m0, "i32", product.lanes), const(shift, "i32", product.lanes)) + y_zp
    return saturate(y, qmin, qmax, y_dtype)


def requantize_fixed(acc: Expr, m0: Expr, shift: Expr, zero_point: int, qmin: int, qmax: int, dtype: str) -> Expr:
    """int32 accumulator * real multiplier (m0 * 2**-shift, per lane) + zero point, saturated."""
    wide = Cast(acc, "i64") * Cast(m0, "i64")
    shift64 = Cast(shift, "i64")
    half = binop("shl", const(1, "i64", acc.lanes), shift64 - 1)
    scaled = binop("shr", wide + half, shift64) + zero_point
    return saturate(scaled, qmin, qmax, dtype)


def int_dtype(dtype: str) -> str:
    return _INT[dtype]
