"""Quantization: how an integer tensor encodes real numbers (`QuantParams`, a field of its Value) and the
arithmetic it implies (fixed-point multipliers, output clamps). A node's integer view of its operands'
parameters (`Quant`) is in aot/graph/node_quant.py, above the graph IR."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1)}


@dataclass(frozen=True, eq=False)
class QuantParams:
    """real = (q - zero_point) * scale: per tensor (`axis` None, scalars) or per channel along `axis`
    (arrays, for weights and biases)."""

    scale: float | np.ndarray
    zero_point: int | np.ndarray
    axis: int | None = None

    @staticmethod
    def per_tensor(scale: float, zero_point: int) -> QuantParams:
        return QuantParams(float(scale), int(zero_point))

    def same_as(self, other: QuantParams | None) -> bool:
        return (other is not None and self.axis == other.axis
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


def as_clamp(fn: str, params: tuple, x_scale: float, x_zp: int, y_scale: float, y_zp: int, x_dtype: str,
             y_dtype: str) -> bool:
    """Whether Relu or Clip between two integer tensors of one encoding is exactly an integer clamp (clamp_for):
    the real value of a code, divided by the same scale, rounds back to that code, and a clipped one to the
    bound's code."""
    return fn in ("relu", "clip") and x_scale == y_scale and x_zp == y_zp and x_dtype == y_dtype


def clamp_for(acts: tuple, y_scale: float, y_zp: int, y_dtype: str) -> tuple[int, int]:
    """The output's integer range after fused Relu/Clip activations: a bound's code as QuantizeLinear makes
    it (divided in float32, rounded to nearest even)."""
    def code(bound: float) -> int:
        return int(np.rint(np.float32(bound) / np.float32(y_scale))) + y_zp

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
