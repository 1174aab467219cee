"""TFLite's int8 activations as 256-entry tables looked up by the activation's kernel (elementwise.unary):
LOGISTIC and TANH, which its reference kernels compute as tables too, built at compile time as LiteRT's
reference kernel builds them, in float32; HARD_SWISH, which they compute per element in 16-bit fixed
point, by that arithmetic run for each of the 256 codes.

LiteRT calls the host C library's expf and tanhf; aot takes their correctly rounded values (the float64
function rounded to float32), the same on every build machine. glibc's agree with them but in rare
arguments: no table differed over 3,000 random LOGISTIC and 3,000 TANH encodings, but one LOGISTIC input
scale in about 800,000 (0x1.000016p-7) gives a table one step off LiteRT's on glibc 2.36."""

from __future__ import annotations

import math

import numpy as np

from aot.errors import InternalError
from aot.graph.node_quant import Quant
from aot.graph.quant import RANGES, round_half_away, tflite_multiplier

F32 = np.float32


def _logistic(d: np.float32) -> np.float32:
    with np.errstate(over="ignore"):        # past float32's range: infinity, as expf gives
        e = F32(math.exp(-float(d))) if -float(d) < 89.0 else F32(np.inf)
    return F32(1.0) / (F32(1.0) + e)


def _tanh(d: np.float32) -> np.float32:
    return F32(math.tanh(float(d)))


FUNCTIONS = {"sigmoid": _logistic, "tanh": _tanh}


def table(fn: str, quant: Quant) -> np.ndarray | None:
    """The outputs for the input codes from the type's lowest up (256 for int8), or None when TFLite
    computes `fn` otherwise than by a table. For each code v: d = s_in * (v - z_in) and t = fn(d) in float32,
    then round(t * (1 / s_out)) + z_out, rounded half away from zero, saturated."""
    if quant.x_dtype != "int8":
        return None
    if fn == "hard_swish":
        return _hard_swish(quant)
    f = FUNCTIONS.get(fn)
    if f is None:
        return None
    lo, hi = RANGES[quant.y_dtype]
    inverse = F32(1.0) / F32(quant.y_scale)
    codes = []
    for v in range(-128, 128):
        t = f(F32(quant.x_scale) * F32(v - quant.x_zp))
        r = round_half_away(float(F32(t * inverse)))
        q = int(F32(r) + F32(quant.y_zp))
        codes.append(min(max(q, max(lo, quant.qmin)), min(hi, quant.qmax)))
    return np.array(codes, np.int8 if quant.y_dtype == "int8" else np.int16)


# --- HARD_SWISH: x * relu6(x + 3) / 6 in int16 fixed point -----------------------------------------------

def _int16(v: int) -> int:
    """C's conversion to int16_t: the low 16 bits, as two's complement."""
    return (v + 0x8000) % 0x10000 - 0x8000


def _doubling_high_16(a: int, b: int, rounded: bool) -> int:
    """The high half of 2*a*b for int16 operands, rounded to nearest (gemmlowp's
    SaturatingRoundingDoublingHighMul) or toward zero (TFLite's SaturatingDoublingHighMul); -32768 squared
    saturates to 32767."""
    if a == b == -32768:
        return 32767
    ab = a * b
    nudge = (1 << 14 if ab >= 0 else 1 - (1 << 14)) if rounded else 0
    return _int16(int((ab + nudge) / (1 << 15)))      # C division truncates toward zero


def _rounding_divide_16(x: int, exponent: int) -> int:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent rounded to nearest, ties away from zero, its mask
    an int16 as for int16 operands (all ones from an exponent of 16 up)."""
    mask = _int16((1 << exponent) - 1)
    threshold = _int16((mask >> 1) + (1 if x < 0 else 0))
    return _int16((x >> exponent) + (1 if _int16(x & mask) > threshold else 0))


def _saturating_left_shift_16(x: int, amount: int) -> int:
    return min(max(x * (1 << amount), -32768), 32767)


def _multiplier_16(real: float) -> tuple[int, int]:
    """QuantizeMultiplier's 31-bit mantissa rounded to 15 bits (DownScaleInt32ToInt16Multiplier) and its
    exponent (TFLite's shift: positive to the left)."""
    (m0,), (shift,) = tflite_multiplier(np.array([real]))
    m16 = 32767 if m0 >= (1 << 31) - 1 - (1 << 15) else (int(m0) + (1 << 15)) >> 16
    return m16, 31 - int(shift)


def _hard_swish(quant: Quant) -> np.ndarray:
    hires_scale = F32(F32(1.0 / 128.0) * F32(quant.x_scale))
    out_m, out_exponent = _multiplier_16(float(hires_scale / F32(quant.y_scale)))
    relu_m, relu_exponent = _multiplier_16(float(hires_scale / F32(3.0 / 32768.0)))
    if out_exponent > 0:
        raise InternalError("hard_swish's output multiplier shifts left (the TFLite frontend refuses it)")
    lo, hi = RANGES[quant.y_dtype]
    codes = []
    for v in range(-128, 128):
        hires = _int16((v - quant.x_zp) * 128)
        on_output_scale = _doubling_high_16(hires, out_m, True)
        reluish = hires
        if relu_exponent > 0:
            reluish = _saturating_left_shift_16(reluish, relu_exponent - 1)
        reluish = _doubling_high_16(reluish, relu_m, True)
        if relu_exponent > 0:
            reluish = _saturating_left_shift_16(reluish, 1)
        if relu_exponent < 0:
            reluish = _rounding_divide_16(reluish, -relu_exponent)
        reluish = (reluish + (1 << 15)) >> 1            # [-1, 1] to [0, 1]
        y = _rounding_divide_16(_doubling_high_16(reluish, on_output_scale, False), -out_exponent)
        codes.append(min(max(_int16(y + quant.y_zp), max(lo, quant.qmin)), min(hi, quant.qmax)))
    return np.array(codes, np.int8)
