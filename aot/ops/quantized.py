"""Integer arithmetic shared by the quantized kernels, as kernel-IR expressions.

Rounding is to nearest with ties to even where a float is rounded (as ONNX QuantizeLinear and
onnxruntime's requantization do); the fixed-point requantization of Conv/Gemm accumulators rounds
ties up, which differs only on exact ties.
"""

from __future__ import annotations

import numpy as np

from aot.kernel.ir import Cast, Expr, RoundInt, binop, const, maximum, minimum
from aot.ops.epilogue import apply

_MAGIC = 12582912.0      # 1.5 * 2**23: x + magic - magic rounds |x| < 2**22 to an integer, ties to even
_INT = {"int8": "i8", "uint8": "u8", "int16": "i16", "int32": "i32"}


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
    return Cast(minimum(maximum(q, qmin), qmax), _INT[dtype])


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


def requantize_fixed(acc: Expr, m0: Expr, shift: Expr, zero_point: int, qmin: int, qmax: int, dtype: str) -> Expr:
    """int32 accumulator * real multiplier (m0 * 2**-shift, per lane) + zero point, saturated."""
    wide = Cast(acc, "i64") * Cast(m0, "i64")
    shift64 = Cast(shift, "i64")
    half = binop("shl", const(1, "i64", acc.lanes), shift64 - 1)
    scaled = binop("shr", wide + half, shift64) + zero_point
    return Cast(minimum(maximum(scaled, qmin), qmax), _INT[dtype])


def int_dtype(dtype: str) -> str:
    return _INT[dtype]
