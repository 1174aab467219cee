"""The integer view of a quantized node (`Quant`): how it reads its inputs and writes its output, gathered
from its operands' QuantParams and the epilogues fused into it (aot/graph/quant.py: the tensor encoding)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from aot.graph.ir import Node, Value
from aot.graph.quant import RANGES, QuantParams, as_clamp, clamp_for


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
    rules: str = "onnx"         # the integer arithmetic the model was quantized for (graph/quant.py RULES)
    rounding: str = "single"    # of the fixed-point requantization (QuantParams.rounding of the weights)

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
    rules = y.quant.rules
    acts = node.attrs.get("acts", ())
    if "function" in node.attrs:
        fn, params, scale, zp, dtype = node.attrs["function"]
        if as_clamp(fn, params, scale, zp, y.quant.scale, y.quant.zero_point, dtype, y.dtype):
            acts = acts + (("clip", (0.0, math.inf) if fn == "relu" else tuple(params)),)
        else:
            extra["function"] = QuantizedFunction(fn, tuple(params), scale, zp, y.quant.scale, y.quant.zero_point,
                                                  y.dtype, *RANGES[y.dtype])
        y = dataclasses.replace(y, dtype=dtype, quant=QuantParams.per_tensor(scale, zp, rules))
    qmin, qmax = clamp_for(acts, y.quant.scale, y.quant.zero_point, y.dtype, rules)
    if "own_result" in node.attrs:
        r = values[node.inputs[3]]
        extra["residual"] = ResidualSum(r.quant.scale, r.quant.zero_point, y.quant.scale, y.quant.zero_point,
                                        y.dtype, qmin, qmax)
        own_scale, own_zp, own_dtype = node.attrs["own_result"]
        y = dataclasses.replace(y, dtype=own_dtype, quant=QuantParams.per_tensor(own_scale, own_zp, rules))
        qmin, qmax = RANGES[own_dtype]
    second = values[node.inputs[1]].quant if len(node.inputs) > 1 and node.inputs[1] else None
    if second is not None and second.axis is not None:
        extra.update(w_scale=np.asarray(second.scale, np.float64), w_zp=np.asarray(second.zero_point, np.int64),
                     rounding=second.rounding)
    elif second is not None:
        extra.update(b_scale=second.scale, b_zp=second.zero_point)
    return Quant(x.quant.scale, x.quant.zero_point, y.quant.scale, y.quant.zero_point, y.dtype, qmin, qmax,
                 x_dtype=x.dtype, rules=rules, **extra)
