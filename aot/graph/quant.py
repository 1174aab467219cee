"""Quantization parameters carried by integer ops, and the integer arithmetic they imply."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2**31), 2**31 - 1)}


@dataclass(frozen=True, eq=False)
class Quant:
    """How an integer op reads its inputs and writes its output.

    x_scale/x_zp: the (first) activation input; w_scale/w_zp: weights, per output channel (arrays);
    b_scale/b_zp: a second activation input (Add, Mul); y_scale/y_zp/y_dtype: the output;
    qmin/qmax: the output clamp, narrowed by fused Relu/Clip.
    """

    x_scale: float
    x_zp: int
    y_scale: float
    y_zp: int
    y_dtype: str
    qmin: int
    qmax: int
    w_scale: np.ndarray | None = None
    w_zp: np.ndarray | None = None
    b_scale: float = 0.0
    b_zp: int = 0

    def __repr__(self) -> str:
        w = f", w_scale[{self.w_scale.size}]" if self.w_scale is not None else ""
        return (f"Quant(x={self.x_scale:.4g}/{self.x_zp}, y={self.y_scale:.4g}/{self.y_zp} {self.y_dtype} "
                f"[{self.qmin},{self.qmax}]{w})")


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


def clamp_for(acts: tuple, y_scale: float, y_zp: int, y_dtype: str) -> tuple[int, int]:
    """The output's integer range after fused Relu/Clip activations."""
    lo, hi = RANGES[y_dtype]
    for fn, params in acts:
        if fn == "relu":
            lo = max(lo, y_zp)
        elif fn == "clip":
            if not math.isinf(params[0]):
                lo = max(lo, min(hi, round(params[0] / y_scale) + y_zp))
            if not math.isinf(params[1]):
                hi = min(hi, max(lo, round(params[1] / y_scale) + y_zp))
        else:
            raise ValueError(fn)
    return lo, hi
