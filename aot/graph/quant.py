"""Quantization: how an integer tensor encodes real numbers (`QuantParams`, a field of its Value) and the
arithmetic it implies (fixed-point multipliers, output clamps). A node's integer view of its operands'
parameters (`Quant`) is in aot/graph/node_quant.py, above the graph IR."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The integer arithmetic of a quantized model: "onnx" as onnxruntime computes QDQ and QOperator models
# (requantization in float32, rounding to nearest even); "tflite" as TFLite's reference kernels compute
# (fixed-point multipliers and shifts from the scales, its rounding, its Softmax and pooling).
RULES = ("onnx", "tflite")

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1)}


@dataclass(frozen=True, eq=False)
class QuantParams:
    """real = (q - zero_point) * scale: per tensor (`axis` None, scalars) or per channel along `axis`
    (arrays, for weights and biases). `rules` names the integer arithmetic the model was quantized for
    (RULES): how kernels on this tensor round and rescale."""

    scale: float | np.ndarray
    zero_point: int | np.ndarray
    axis: int | None = None
    rules: str = "onnx"
    # weights only: how their products' sums are requantized, "single" (the int64 product by a fixed-point
    # multiplier, one rounding shift), "double" (gemmlowp's rounding doubling high multiply, then a rounding
    # shift) or "real" (times the real multiplier, rounded half away from zero): with TFLite's rules, as its
    # reference kernel of the operator these weights belong to does
    rounding: str = "single"

    @staticmethod
    def per_tensor(scale: float, zero_point: int, rules: str = "onnx") -> QuantParams:
        return QuantParams(float(scale), int(zero_point), rules=rules)

    def same_as(self, other: QuantParams | None) -> bool:
        return (other is not None and self.axis == other.axis and self.rules == other.rules
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point))

    def __repr__(self) -> str:
        if self.axis is None:
            return f"q{self.scale:.4g}/{self.zero_point}"
        return f"q[{np.size(self.scale)} channels on axis {self.axis}]"


def fixed_point(multiplier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real multipliers (0, 2**31) as (m0, shift): x * multiplier ~ (x * m0) >> shift, m0 in [2**30, 2**31)."""
    m0s, shifts = [], []
    for m in np.asarray(multiplier, dtype=np.float64).reshape(-1):
        if m <= 0:
            m0s.append(0)
            shifts.append(31)
            continue
        mantissa, exponent = math.frexp(m)          # m = mantissa * 2**exponent, mantissa in [0.5, 1)
        m0 = round(mantissa * (1 << 31))
        if m0 == 1 << 31:
            m0, exponent = m0 // 2, exponent + 1
        shift = 31 - exponent
        if shift > 62:                               # too small to matter: the result rounds to 0
            m0, shift = 0, 31
        m0s.append(m0)
        shifts.append(shift)
    return np.array(m0s, np.int64), np.array(shifts, np.int64)


def round_half_away(x: float) -> float:
    """Round to nearest, ties away from zero (C's round(), TFLite's TfLiteRound)."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def tflite_multiplier(real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real multipliers as TFLite's QuantizeMultiplier makes them, in fixed_point's form (m0, shift):
    the mantissa rounded half away from zero to 31 bits, a multiplier below 2**-32 as 0, one of 2**31 or
    more saturated (TFLite's single-rounding form allows left shifts of 30 at most)."""
    m0s, shifts = [], []
    for m in np.asarray(real, dtype=np.float64).reshape(-1):
        if m <= 0:
            m0s.append(0)
            shifts.append(31)
            continue
        mantissa, exponent = math.frexp(m)
        m0 = int(math.floor(mantissa * (1 << 31) + 0.5))
        if m0 == 1 << 31:
            m0, exponent = m0 // 2, exponent + 1
        if exponent < -31:
            m0, exponent = 0, 0
        if exponent > 30:
            m0, exponent = (1 << 31) - 1, 30
        m0s.append(m0)
        shifts.append(31 - exponent)
    return np.array(m0s, np.int64), np.array(shifts, np.int64)


def checked_log2(x: float) -> tuple[int, bool]:
    """TFLite's CheckedLog2 in float32: log2(x) rounded (half away from zero), and whether x is a power of
    two to within 1e-3 of a step of the exponent."""
    f32 = np.float32
    log2 = f32(f32(math.log(float(f32(x)))) * (f32(1.0) / f32(math.log(2.0))))
    rounded = f32(math.copysign(math.floor(abs(float(log2)) + 0.5), float(log2)))
    return int(rounded), abs(float(f32(log2 - rounded))) < 1e-3


def real_multiplier(real: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Real multipliers in (0, 2**19) exactly, for multiply_real: (high, low, shift) with real = (high * 2**32
    + low) * 2**-shift, high * 2**32 + low the 53-bit mantissa; 0 as (0, 0, 33)."""
    highs, lows, shifts = [], [], []
    for m in np.asarray(real, dtype=np.float64).reshape(-1):
        if m <= 0:
            highs.append(0)
            lows.append(0)
            shifts.append(33)
            continue
        mantissa, exponent = math.frexp(m)
        if exponent > 20:
            raise ValueError(f"multiplier {m} is too large for an exact requantization")
        whole = int(mantissa * (1 << 53))          # exact: a double's mantissa has 53 bits
        highs.append(whole >> 32)
        lows.append(whole & 0xFFFFFFFF)
        shifts.append(53 - exponent)
    return np.array(highs, np.int64), np.array(lows, np.int64), np.array(shifts, np.int64)


def as_clamp(fn: str, params: tuple, x_scale: float, x_zp: int, y_scale: float, y_zp: int, x_dtype: str,
             y_dtype: str) -> bool:
    """Whether Relu or Clip between two integer tensors of one encoding is exactly an integer clamp (clamp_for):
    the real value of a code, divided by the same scale, rounds back to that code, and a clipped one to the
    bound's code."""
    return fn in ("relu", "clip") and x_scale == y_scale and x_zp == y_zp and x_dtype == y_dtype


def clamp_for(acts: tuple, y_scale: float, y_zp: int, y_dtype: str, rules: str = "onnx") -> tuple[int, int]:
    """The output's integer range after fused Relu/Clip activations: a bound's code as QuantizeLinear makes
    it (divided in float32, rounded to nearest even), or as TFLite's activation range does (divided in
    float32, rounded half away from zero)."""
    def code(bound: float) -> int:
        quotient = np.float32(bound) / np.float32(y_scale)
        rounded = np.rint(quotient) if rules == "onnx" else round_half_away(float(quotient))
        return int(rounded) + y_zp

    lo, hi = RANGES[y_dtype]
    for fn, params in acts:
        if fn == "relu":
            lo = max(lo, y_zp)
        elif fn == "clip":
            if not math.isinf(params[0]):
                lo = max(lo, min(hi, code(params[0])))
            if not math.isinf(params[1]):
                hi = min(hi, max(lo, code(params[1])))
        else:
            raise ValueError(fn)
    return lo, hi
