"""Quantization: how an integer tensor encodes real numbers (`QuantParams`, a field of its Value), the
view an integer op's kernel takes of its operands' parameters (`Quant`), and the arithmetic they imply."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aot.graph.ir import Node, Value

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


@dataclass(frozen=True, eq=False)
class ResidualSum:
    """An integer residual Add fused into a convolution: the convolution's own int8 result (the Quant's
    y) plus the residual operand, requantized to the sum's encoding as the Add alone would have done."""

    r_scale: float
    r_zp: int
    y_scale: float
    y_zp: int
    y_dtype: str
    qmin: int
    qmax: int


@dataclass(frozen=True, eq=False)
class QuantizedFunction:
    """An activation between integer tensors (a Unary a quantizer kept between Dequantize and Quantize) fused
    into a convolution: its input (x_scale, x_zp) is the convolution's integer result, dequantized; fn is
    applied in float32 and the value quantized to the node's output, as the activation's own kernel would
    have done."""

    fn: str
    params: tuple
    x_scale: float
    x_zp: int
    y_scale: float
    y_zp: int
    y_dtype: str
    qmin: int
    qmax: int


@dataclass(frozen=True, eq=False)
class Quant:
    """How an integer op reads its inputs and writes its output, gathered from its operands' QuantParams.

    x_scale/x_zp/x_dtype: the (first) activation input; w_scale/w_zp: weights, per output channel (arrays);
    b_scale/b_zp: a second activation input (Add, Mul); y_scale/y_zp/y_dtype: the output;
    qmin/qmax: the output clamp, narrowed by fused Relu/Clip; residual: a fused integer residual Add,
    applied to y (then y is the convolution's own result, not the node's output); function: a fused
    activation applied last (then y, or the residual sum, is its input, not the node's output).
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
    residual: ResidualSum | None = None
    function: QuantizedFunction | None = None
    x_dtype: str = "int8"

    def __repr__(self) -> str:
        w = f", w_scale[{self.w_scale.size}]" if self.w_scale is not None else ""
        return (f"Quant(x={self.x_scale:.4g}/{self.x_zp}, y={self.y_scale:.4g}/{self.y_zp} {self.y_dtype} "
                f"[{self.qmin},{self.qmax}]{w})")


def node_quant(values: Mapping[str, Value], node: Node) -> Quant | None:
    """The integer view of `node`, or None when it computes in float: its first input and its output carry
    per-tensor quantization. A constant second input with per-channel parameters is the weight (Conv,
    Gemm); a computed one the second operand (Add, Mul). The output range is narrowed by the activations
    fused into the node (attrs["acts"]). A node with a fused integer residual Add (attrs["own_result"]:
    the encoding of its result before the Add, see fuse_epilogues) reads the residual as input 3; one with
    a fused activation (attrs["function"]: fn, params and the encoding of its input) applies it last."""
    if not (node.inputs and node.inputs[0] and node.outputs and node.outputs[0]):
        return None
    x, y = values[node.inputs[0]], values[node.outputs[0]]
    if x.quant is None or y.quant is None or x.quant.axis is not None or y.quant.axis is not None:
        return None
    extra: dict = {}
    acts = node.attrs.get("acts", ())
    if "function" in node.attrs:
        fn, params, scale, zp, dtype = node.attrs["function"]
        if as_clamp(fn, params, scale, zp, y.quant.scale, y.quant.zero_point, dtype, y.dtype):
            acts = acts + (("clip", (0.0, math.inf) if fn == "relu" else tuple(params)),)
        else:
            extra["function"] = QuantizedFunction(fn, tuple(params), scale, zp, y.quant.scale, y.quant.zero_point,
                                                  y.dtype, *RANGES[y.dtype])
        y = dataclasses.replace(y, dtype=dtype, quant=QuantParams.per_tensor(scale, zp))
    qmin, qmax = clamp_for(acts, y.quant.scale, y.quant.zero_point, y.dtype)
    if "own_result" in node.attrs:
        r = values[node.inputs[3]]
        extra["residual"] = ResidualSum(r.quant.scale, r.quant.zero_point, y.quant.scale, y.quant.zero_point,
                                        y.dtype, qmin, qmax)
        own_scale, own_zp, own_dtype = node.attrs["own_result"]
        y = dataclasses.replace(y, dtype=own_dtype, quant=QuantParams.per_tensor(own_scale, own_zp))
        qmin, qmax = RANGES[own_dtype]
    second = values[node.inputs[1]].quant if len(node.inputs) > 1 and node.inputs[1] else None
    if second is not None and second.axis is not None:
        extra.update(w_scale=np.asarray(second.scale, np.float64), w_zp=np.asarray(second.zero_point, np.int64))
    elif second is not None:
        extra.update(b_scale=second.scale, b_zp=second.zero_point)
    return Quant(x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point, y.dtype, qmin, qmax,
                 x_dtype=x.dtype, **extra)


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
