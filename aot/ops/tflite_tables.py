"""TFLite's int8 activations that its reference kernels compute as 256-entry tables: the table of each,
built at compile time as LiteRT's reference kernel builds it, in float32, and looked up by the activation's
kernel (elementwise.unary).

LiteRT calls the host C library's expf and tanhf; aot takes their correctly rounded values (the float64
function rounded to float32), the same on every build machine. glibc's agree with them but in rare
arguments: no table differed over 3,000 random LOGISTIC and 3,000 TANH encodings, but one LOGISTIC input
scale in about 800,000 (0x1.000016p-7) gives a table one step off LiteRT's on glibc 2.36."""

from __future__ import annotations

import math

import numpy as np

from aot.graph.node_quant import Quant
from aot.graph.quant import RANGES, round_half_away

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
    f = FUNCTIONS.get(fn)
    if f is None or quant.x_dtype != "int8":
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
