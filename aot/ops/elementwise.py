"""Elementwise ops: binary arithmetic with numpy broadcasting, unary activations and math functions,
and `Nary` ops over any number of broadcast operands (Sum, Mean, Max, Min of three or more, Pow and
PRelu with computed operands, Mod, Clip with computed bounds).

Loops run over the output with operands' strides computed at compile time (0 along broadcast
axes); adjacent axes that are contiguous for every operand are merged, and the innermost axis is
vectorized (stride 1: vector load, stride 0: one scalar splat).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from aot.errors import InternalError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.graph.quant import RANGES, as_clamp, clamp_for, tflite_multiplier
from aot.kernel import math as kmath
from aot.kernel.ir import Broadcast, Buffer, Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext, tflite_sigmoid16, tflite_tables
from aot.ops.epilogue import apply
from aot.ops.quantized import (
    add_quantized,
    add_tflite,
    dequantize,
    mul_tflite,
    multiply_twice_rounded,
    quantize,
    quantize_half_away,
    quantized_function,
    saturate,
    widen,
)
from aot.ops.rewrite import const_input, fused_acts, refuse, unary_rule, view
from aot.registry import FLOAT, Fusion, Layout, QuantForm, broadcast_shape, define, same_shape

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
# Integer operands compute in their own type: wrapping add/sub/mul, Div truncating toward zero (x / 0
# gives 0, see aot/kernel/ir.py), Neg/Abs wrapping at the minimum.
FLOAT_OR_INT = frozenset({"float32", "float64", "int8", "uint8", "int32", "int64"})


def broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major `shape` broadcast to `out` (0 on broadcast axes)."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step if size != 1 else 0)
        step *= size
    return list(reversed(strides))


def merge_axes(out: tuple[int, ...], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent axes that every operand walks contiguously (or not at all)."""
    dims, strd = [out[0]] if out else [1], [[s[0]] if out else [0] for s in strides]
    for axis in range(1, len(out)):
        size = out[axis]
        if all(s[axis] * size == t[-1] or (s[axis] == 0 and t[-1] == 0) for s, t in zip(strides, strd)):
            dims[-1] *= size
            for s, t in zip(strides, strd):
                t[-1] = s[axis]
        else:
            dims.append(size)
            for s, t in zip(strides, strd):
                t.append(s[axis])
    return dims, strd


def elementwise_loops(b: Builder, lanes: int, out_shape: tuple[int, ...], operands: list[tuple[Buffer, tuple]],
                      out: Buffer, compute, perm: tuple[int, ...] | None = None) -> None:
    """out[i] = compute([operand values at i]) over the output, vectorized along the innermost axis.
    With `perm`, the output is the result transposed (numpy's transpose(perm)): each operand, of the
    untransposed shape, is read along the permuted axes, one element at a time where that is not
    contiguous."""
    all_strides = [broadcast_strides(shape, out_shape) for _, shape in operands]
    if perm is not None:
        all_strides = [[s[axis] for axis in perm] for s in
                       (broadcast_strides(shape, tuple(out_shape[perm.index(a)] for a in range(len(perm))))
                        for _, shape in operands)]
    out_strides = broadcast_strides(out_shape, out_shape)
    dims, strides = merge_axes(out_shape, all_strides + [out_strides])
    if any(s[-1] not in (0, 1) for s in strides):
        lanes = 1

    def body(depth: int, offsets: list[Expr | int]) -> None:
        if depth < len(dims) - 1:
            with b.loop("i", 0, dims[depth]) as i:
                body(depth + 1, [off + i * s[depth] for off, s in zip(offsets, strides)])
            return
        inner = dims[-1]

        def step(width: int, start: int, stop: int) -> None:
            with b.loop("j", start, stop, width) as j:
                vals = []
                for (buf, _), off, s in zip(operands, offsets, strides):
                    if s[-1] == 0:
                        vals.append(buf[off])
                    else:
                        vals.append(buf.vec(off + j, width) if width > 1 else buf[off + j * s[-1]])
                b.store(out, offsets[-1] + j, _widen(compute(vals), width))

        main = inner - inner % lanes if lanes > 1 else 0
        if main:
            step(lanes, 0, main)
        if inner > main:
            step(1, main, inner)

    body(0, [0] * len(strides))


def _widen(value: Expr, lanes: int) -> Expr:
    """All operands broadcast along the vector axis: splat the scalar result."""
    return Broadcast(value, lanes) if lanes > 1 and value.lanes == 1 else value


def binary(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    op = _BINARY[node.op]
    shapes = [ctx.graph.shape(n) for n in node.inputs]
    acts = node.attrs.get("acts", ())
    quant = node_quant(ctx.graph.values, node)

    def compute(v: list[Expr]) -> Expr:
        if quant is None:
            return apply(acts, binop(op, v[0], v[1]))
        operands = (v[0], quant.x_scale, quant.x_zp, v[1], quant.b_scale, quant.b_zp, quant.y_scale, quant.y_zp,
                    quant.qmin, quant.qmax, quant.y_dtype)
        if quant.rules == "tflite" and op in ("max", "min"):    # TFLite compares the codes themselves
            return binop(op, v[0], v[1])
        if quant.rules == "tflite":     # TFLite's fixed-point Add, Sub and Mul
            return mul_tflite(*operands) if op == "mul" else add_tflite(*operands, subtract=op == "sub")
        # Quantized Add/Mul in float with onnxruntime's scale ratios (QLinearAdd/QLinearMul), then rounded.
        if op == "add":
            return add_quantized(v[0], quant.x_scale, quant.x_zp, v[1], quant.b_scale, quant.b_zp,
                                 quant.y_scale, quant.y_zp, quant.qmin, quant.qmax, quant.y_dtype)
        ratio = float(np.float32(quant.x_scale) * np.float32(quant.b_scale) / np.float32(quant.y_scale))
        value = dequantize(v[0], quant.x_zp, 1.0) * dequantize(v[1], quant.b_zp, ratio)
        return quantize(value, quant.y_zp, quant.qmin, quant.qmax, quant.y_dtype)

    b = Builder()
    elementwise_loops(b, ctx.target.lanes, ctx.graph.shape(node.outputs[0]), list(zip(ins, shapes)), outs[0], compute)
    return Kernel(name, params, b.block())


def quantize_linear(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Quantize: saturate(round(x / scale) + zero_point); Dequantize: (q - zero_point) * scale; Requantize:
    the two in turn, from one encoding to another (float32 between them, as the separate kernels)."""
    ins, outs, params = ctx.io(node)
    scale, zp = node.attrs["scale"], node.attrs["zero_point"]
    out_dtype = ctx.graph.values[node.outputs[0]].dtype
    lo, hi = RANGES.get(out_dtype, (0, 0))
    quant = ctx.graph.values[node.outputs[0]].quant
    tflite = quant is not None and quant.rules == "tflite"
    if node.op == "Quantize" and tflite:     # TFLite rounds half away from zero
        fn = lambda v: quantize_half_away(v[0] / scale, zp, lo, hi, out_dtype)
    elif node.op == "Quantize":
        fn = lambda v: quantize(v[0] / scale, zp, lo, hi, out_dtype)
    elif node.op == "Requantize" and tflite:    # TFLite's fixed-point multiplier, rounded twice
        m0, shift = (const(int(a[0]), "i32") for a in tflite_multiplier(node.attrs["from_scale"] / scale))
        fn = lambda v: saturate(multiply_twice_rounded(widen(v[0]) - node.attrs["from_zero_point"], m0, shift) + zp,
                                lo, hi, out_dtype)
    elif node.op == "Requantize":
        fn = lambda v: quantize(dequantize(v[0], node.attrs["from_zero_point"], node.attrs["from_scale"]) / scale,
                                zp, lo, hi, out_dtype)
    else:
        fn = lambda v: dequantize(v[0], zp, scale)
    shape, perm = _flat_unless_transposed(ctx, node)
    b = Builder()
    elementwise_loops(b, ctx.target.lanes, shape, [(ins[0], ctx.graph.shape(node.inputs[0]) if perm else shape)],
                      outs[0], fn, perm)
    return Kernel(name, params, b.block())


def unary(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """fn(x) and the fused activations; on integer tensors (an activation a quantizer kept between Dequantize
    and Quantize) the same in float32 between the two, as onnxruntime runs the three nodes; in a TFLite
    model, TFLite's table of the function (tflite_tables.py; int16 sigmoid and tanh: tflite_sigmoid16.py)."""
    ins, outs, params = ctx.io(node)
    acts = ((node.attrs["fn"], tuple(node.attrs["params"])),) + tuple(node.attrs.get("acts", ()))
    quant = node_quant(ctx.graph.values, node)

    fn, fn_params = node.attrs["fn"], tuple(node.attrs["params"])
    clamp = None
    if quant is not None and as_clamp(fn, fn_params, quant.x_scale, quant.x_zp, quant.y_scale, quant.y_zp,
                                      quant.x_dtype, quant.y_dtype):
        lo, hi = clamp_for((("clip", (0.0, math.inf) if fn == "relu" else fn_params),), quant.y_scale, quant.y_zp,
                           quant.y_dtype, quant.rules)
        clamp = max(lo, quant.qmin), min(hi, quant.qmax)

    lanes = ctx.target.lanes
    if quant is not None and quant.rules == "tflite" and clamp is None and fn in ("relu", "clip"):
        # TFLite's Relu family between encodings: rescaled by the multiplier of s_in / s_out (formed in
        # float32), rounded twice, then clamped to the bounds' codes
        m0, shift = (const(int(a[0]), "i32") for a in tflite_multiplier(
            float(np.float32(quant.x_scale) / np.float32(quant.y_scale))))
        lo, hi = clamp_for((("clip", (0.0, math.inf) if fn == "relu" else fn_params),), quant.y_scale, quant.y_zp,
                           quant.y_dtype, quant.rules)
        lo, hi = max(lo, quant.qmin), min(hi, quant.qmax)

        def compute(v: list[Expr]) -> Expr:
            y = multiply_twice_rounded(widen(v[0]) - quant.x_zp, m0, shift) + quant.y_zp
            return saturate(y, lo, hi, quant.y_dtype)
    elif quant is not None and quant.rules == "tflite" and fn == "leaky_relu":
        compute = partial(_leaky_relu_tflite, quant, float(fn_params[0]))
    elif quant is not None and quant.rules == "tflite" and quant.x_dtype == "int16" and fn in ("sigmoid", "tanh"):
        table, lanes = ctx.const(tflite_sigmoid16.table_codes(), "sigmoid"), 1
        multiplier, shift = tflite_sigmoid16.input_rescale(quant.x_scale, fn)
        curve = tflite_sigmoid16.sigmoid if fn == "sigmoid" else tflite_sigmoid16.tanh

        def compute(v: list[Expr]) -> Expr:
            return Cast(curve(table, widen(v[0]), multiplier, shift), "i16")
    elif quant is not None and quant.rules == "tflite" and clamp is None:
        codes = tflite_tables.table(fn, quant)
        if codes is None:
            raise InternalError(f"node '{node.name}': no TFLite form of quantized {fn}")
        lut, lanes = ctx.const(codes, "lut"), 1     # a table lookup per element

        def compute(v: list[Expr]) -> Expr:
            return lut[Cast(widen(v[0]) + 128, "idx")]
    else:
        compute = partial(_unary_value, acts, quant, clamp, fn, fn_params)
    b = Builder()
    shape, perm = _flat_unless_transposed(ctx, node)
    elementwise_loops(b, lanes, shape, [(ins[0], ctx.graph.shape(node.inputs[0]) if perm else shape)],
                      outs[0], compute, perm)
    return Kernel(name, params, b.block())


def _rescaled(x: Expr, real: float) -> Expr:
    """int32 x times a real multiplier as TFLite's fixed-point one, rounded twice."""
    (m0,), (shift,) = tflite_multiplier(real)
    return multiply_twice_rounded(x, const(int(m0), "i32", x.lanes), const(int(shift), "i32", x.lanes))


def _by_sign(quant, x: Expr, negative: Expr) -> Expr:
    """TFLite's LeakyRelu and PRELU: x = q - z_in times the multiplier of s_in / s_out (formed in float32)
    where it is not negative, `negative` where it is; then the output's zero point, saturated."""
    positive = _rescaled(x, float(np.float32(quant.x_scale) / np.float32(quant.y_scale)))
    y = select(binop("ge", x, const(0, "i32", x.lanes)), positive, negative) + quant.y_zp
    return saturate(y, quant.qmin, quant.qmax, quant.y_dtype)


def _leaky_relu_tflite(quant, alpha: float, v: list[Expr]) -> Expr:
    """TFLite's int8/int16 LeakyRelu: negative values times the multiplier of s_in * alpha / s_out (formed in
    float32; a negative alpha's by its magnitude, the result negated)."""
    f32 = np.float32
    scaled = float(f32(f32(quant.x_scale) * f32(alpha)) / f32(quant.y_scale))
    x = widen(v[0]) - quant.x_zp
    negative = _rescaled(x, abs(scaled))
    return _by_sign(quant, x, const(0, "i32", x.lanes) - negative if scaled < 0 else negative)


def _prelu_tflite(quant, v: list[Expr]) -> Expr:
    """TFLite's int8 PRELU: negative values times the slope's q - z_alpha and the multiplier of
    s_in * s_alpha / s_out (formed in float32)."""
    f32 = np.float32
    x = widen(v[0]) - quant.x_zp
    slope = widen(v[1]) - quant.b_zp
    return _by_sign(quant, x, _rescaled(x * slope, float(f32(quant.x_scale) * f32(quant.b_scale) / f32(quant.y_scale))))


def _unary_value(acts, quant, clamp, fn, fn_params, v: list[Expr]) -> Expr:
    if quant is None:
        return apply(acts, v[0])
    if clamp is not None:       # one encoding in and out: the codes themselves, clamped
        return minimum(maximum(v[0], clamp[0]), clamp[1])
    return quantized_function(v[0], fn, fn_params, quant.x_scale, quant.x_zp, quant.y_scale, quant.y_zp,
                              quant.qmin, quant.qmax, quant.y_dtype)


def _flat_unless_transposed(ctx: LowerContext, node: Node) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The loop shape of a one-operand elementwise kernel: flat, or the output's when it writes its result
    transposed (attrs["perm"], a Transpose folded in by the layout pass)."""
    perm = node.attrs.get("perm")
    if perm is not None:
        return ctx.graph.shape(node.outputs[0]), tuple(perm)
    return (int(np.prod(ctx.graph.shape(node.outputs[0]), dtype=np.int64)),), None


def _sum(v: list[Expr]) -> Expr:
    total = v[0]
    for x in v[1:]:            # left to right, as onnxruntime adds
        total = total + x
    return total


def _fold(op: str, v: list[Expr]) -> Expr:
    acc = v[0]
    for x in v[1:]:
        acc = binop(op, acc, x)
    return acc


# Nary fn -> (operands, the target has FMA, a let binding intermediate values) -> value. Clip's bounds go
# first in max/min so that a NaN input stays NaN (max/min return their second operand when unordered).
_NARY = {
    "sum": lambda v, fused, let: _sum(v),
    "mean": lambda v, fused, let: _sum(v) / float(len(v)),
    "max": lambda v, fused, let: _fold("max", v),
    "min": lambda v, fused, let: _fold("min", v),
    "pow": lambda v, fused, let: kmath.pow(v[0], v[1]),
    "prelu": lambda v, fused, let: select(binop("lt", v[0], 0.0), v[0] * v[1], v[0]),
    "fmod": lambda v, fused, let: kmath.fmod(v[0], v[1], fused, let),
    "mod": lambda v, fused, let: kmath.mod(v[0], v[1], fused, let),
    "clip": lambda v, fused, let: minimum(v[2], maximum(v[1], v[0])),
}


def nary(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out = fn(operands...) with numpy broadcasting; integer operands (Pow's exponent) become float."""
    ins, outs, params = ctx.io(node)
    shapes = [ctx.graph.shape(n) for n in node.inputs]
    fn, acts, fused = _NARY[node.attrs["fn"]], node.attrs.get("acts", ()), ctx.target.fma
    quant = node_quant(ctx.graph.values, node)
    if quant is not None and not (quant.rules == "tflite" and node.attrs["fn"] == "prelu"):
        raise InternalError(f"node '{node.name}': no integer form of Nary {node.attrs['fn']}")

    b = Builder()

    def compute(v: list[Expr]) -> Expr:     # called inside the loop body: lets land before the store
        if quant is not None:
            return _prelu_tflite(quant, v)
        return apply(acts, fn([x if x.dtype == "f32" else Cast(x, "f32") for x in v], fused,
                              lambda e: b.let("t", e)))

    elementwise_loops(b, ctx.target.lanes, ctx.graph.shape(node.outputs[0]), list(zip(ins, shapes)), outs[0],
                      compute)
    return Kernel(name, params, b.block())


# --- ONNX ops -> Add/Sub/..., Unary, Nary, Quantize/Dequantize -----------------------------------------

def canonical_binary(rw: Rewriter, node: Node) -> None:
    if node.op in _VARIADIC and len(node.inputs) != 2:
        canonical_variadic(rw, node)
        return
    if len(node.inputs) != 2:
        raise refuse(node, "only two operands are supported")
    rw.keep(node.with_(attrs=fused_acts(node)))


_VARIADIC = {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min"}


def canonical_variadic(rw: Rewriter, node: Node) -> None:
    """Sum, Mean, Max, Min of any number of operands: one operand is an Identity; Sum, Max and Min of two
    are the binary ops (an Add may fuse into a convolution as its residual); else one Nary kernel."""
    inputs = [name for name in node.inputs if name]
    if not inputs:
        raise refuse(node, "no operands")
    if len(inputs) == 1:
        view(rw, node, inputs[0], rw.values[node.outputs[0]].shape, node.outputs[0])
    elif len(inputs) == 2 and node.op != "Mean":
        rw.add({"Sum": "Add"}.get(node.op, node.op), node.name, inputs, node.outputs)
    else:
        rw.add("Nary", node.name, inputs, node.outputs, fn=_VARIADIC[node.op])


def canonical_pow(rw: Rewriter, node: Node) -> None:
    """A constant exponent, one value for every element: a Unary pow (multiplications or sqrt for small
    integers and halves, fusable); otherwise a Nary pow with the exponent read per element."""
    x, y = node.inputs[:2]
    if rw.values[x].dtype != "float32":
        raise refuse(node, f"only a float32 base is supported, not {rw.values[x].dtype}")
    exponent = rw.constants.get(y)
    same = rw.values[x].shape == rw.values[node.outputs[0]].shape
    if exponent is not None and exponent.size and same and np.all(exponent == exponent.reshape(-1)[0]):
        value = float(np.float32(exponent.reshape(-1)[0]))
        rw.add("Unary", node.name, [x], node.outputs, fn="pow", params=(value,))
    else:
        rw.add("Nary", node.name, [x, y], node.outputs, fn="pow")


def canonical_prelu(rw: Rewriter, node: Node) -> None:
    """One slope for every element: a LeakyRelu (fusable); otherwise a Nary prelu with the slope
    broadcast to x (ONNX's unidirectional broadcasting is numpy's with the output shaped as x)."""
    x, slope = node.inputs[:2]
    values = rw.constants.get(slope)
    same = rw.values[x].shape == rw.values[node.outputs[0]].shape
    quantized = node_quant(rw.values, node) is not None     # (a TFLite PRELU: its own integer arithmetic)
    if not quantized and values is not None and values.size and same and np.all(values == values.reshape(-1)[0]):
        rw.add("Unary", node.name, [x], node.outputs, fn="leaky_relu", params=(float(values.reshape(-1)[0]),))
    else:
        rw.add("Nary", node.name, [x, slope], node.outputs, fn="prelu")


def canonical_float_mod(rw: Rewriter, node: Node) -> None:
    """Float Mod (the op is defined in logical.py beside the integer kernel). fmod=1: C's fmod (the sign
    of x); fmod=0: Python's % (the sign of y), as numpy's mod for floats."""
    rw.add("Nary", node.name, node.inputs[:2], node.outputs, fn="fmod" if node.attrs.get("fmod", 0) else "mod")


def canonical_clip(rw: Rewriter, node: Node) -> None:
    """Constant bounds: a Unary clip (fusable, and an integer clamp when quantized); a bound computed at
    run time: a Nary clip of x and both bounds (an absent one as -+FLT_MAX, ONNX's default, so an infinite
    x is clipped as onnxruntime clips it)."""
    bounds = [node.inputs[i] if len(node.inputs) > i else "" for i in (1, 2)]
    if any(name and name not in rw.constants for name in bounds):
        top = np.finfo(np.float32).max
        names = [name or rw.constant(f"{node.name}_{key}", np.array(limit, np.float32))
                 for name, key, limit in zip(bounds, ("min", "max"), (-top, top))]
        rw.add("Nary", node.name, [node.inputs[0], *names], node.outputs, fn="clip")
        return
    lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
    lo_c, hi_c = const_input(rw, node, 1, "min"), const_input(rw, node, 2, "max")
    lo = float(lo_c) if lo_c is not None else float(lo)
    hi = float(hi_c) if hi_c is not None else float(hi)
    rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn="clip", params=(lo, hi))


def canonical_gelu(rw: Rewriter, node: Node) -> None:
    approximate = node.attrs.get("approximate", "none")
    rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn="gelu_tanh" if approximate == "tanh" else "gelu",
           params=())


def canonical_quantize(rw: Rewriter, node: Node) -> None:
    """QuantizeLinear / DequantizeLinear of a computed tensor, per-tensor: y = saturate(round(x / s) + zp),
    x = (q - zp) * s. (Those of constants were folded; per-channel weights belong to integer ops.)"""
    scale = const_input(rw, node, 1, "the scale")
    zp = const_input(rw, node, 2, "the zero point")
    if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
        raise refuse(node, "only per-tensor quantization of activations is supported")
    zp_value = int(zp.reshape(-1)[0]) if zp is not None else 0
    op = "Quantize" if node.op == "QuantizeLinear" else "Dequantize"
    rw.add(op, node.name, node.inputs[:1], node.outputs, scale=float(scale.reshape(-1)[0]), zero_point=zp_value)


_QUANT_FORMS = {"Add": (QuantForm.BINARY, True), "Mul": (QuantForm.BINARY, False)}
define("Nary", lower=nary, layout=Layout.FOLLOW, fusion=Fusion.ANCHOR, dtypes=FLOAT | {"int32", "int64"},
       elementwise=True, check=broadcast_shape)
for _op in ("Sum", "Mean"):
    define(_op, canonical=canonical_variadic, check=broadcast_shape)
define("Pow", canonical=canonical_pow, dtypes=FLOAT | {"int32", "int64"}, check=broadcast_shape)
define("PRelu", canonical=canonical_prelu, check=broadcast_shape)

for _op in _BINARY:
    _form, _acts = _QUANT_FORMS.get(_op, (QuantForm.NONE, False))
    define(_op, canonical=canonical_binary, lower=binary, layout=Layout.FOLLOW, fusion=Fusion.ANCHOR,
           matrix_epilogue={"Add": "add", "Mul": "mul"}.get(_op, ""), quant=_form, quant_acts=_acts,
           dtypes=FLOAT_OR_INT, elementwise=True, check=broadcast_shape)

define("Unary", lower=unary, layout=Layout.FOLLOW, fusion=Fusion.ACTIVATION, elementwise=True,
       writes_transposed=True, check=same_shape)
_UNARY = {
    "Relu": unary_rule("relu"), "LeakyRelu": unary_rule("leaky_relu", ("alpha", 0.01)),
    "Sigmoid": unary_rule("sigmoid"), "Tanh": unary_rule("tanh"), "Erf": unary_rule("erf"),
    "Exp": unary_rule("exp"), "Log": unary_rule("log"), "Neg": unary_rule("neg"), "Abs": unary_rule("abs"),
    "Reciprocal": unary_rule("reciprocal"),
    "HardSigmoid": unary_rule("hard_sigmoid", ("alpha", 0.2), ("beta", 0.5)), "HardSwish": unary_rule("hard_swish"),
    "Clip": canonical_clip, "Gelu": canonical_gelu,
    # math functions (aot/kernel/math.py), attribute defaults as in the ONNX spec
    "Floor": unary_rule("floor"), "Ceil": unary_rule("ceil"), "Round": unary_rule("round"),
    "Sign": unary_rule("sign"), "Sqrt": unary_rule("sqrt"),
    "Sin": unary_rule("sin"), "Cos": unary_rule("cos"), "Tan": unary_rule("tan"),
    "Asin": unary_rule("asin"), "Acos": unary_rule("acos"), "Atan": unary_rule("atan"),
    "Sinh": unary_rule("sinh"), "Cosh": unary_rule("cosh"),
    "Asinh": unary_rule("asinh"), "Acosh": unary_rule("acosh"), "Atanh": unary_rule("atanh"),
    "Softplus": unary_rule("softplus"), "Softsign": unary_rule("softsign"), "Mish": unary_rule("mish"),
    "Swish": unary_rule("swish", ("alpha", 1.0)),
    "Elu": unary_rule("elu", ("alpha", 1.0)),
    "Selu": unary_rule("selu", ("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "Celu": unary_rule("celu", ("alpha", 1.0)),
    "ThresholdedRelu": unary_rule("thresholded_relu", ("alpha", 1.0)),
    "Shrink": unary_rule("shrink", ("bias", 0.0), ("lambd", 0.5)),
}
def _clip_bounds(graph: Graph, node: Node) -> tuple[float, float] | None:
    """Clip's [min, max], None when a bound is computed at run time."""
    bounds = []
    for index, key, default in ((1, "min", -np.inf), (2, "max", np.inf)):
        name = node.inputs[index] if len(node.inputs) > index else ""
        if name and name not in graph.constants:
            return None
        bounds.append(float(graph.constants[name]) if name else float(node.attrs.get(key, default)))
    return bounds[0], bounds[1]


_CLAMPS = {"Relu": lambda graph, node: (0.0, np.inf), "Clip": _clip_bounds}
for _op, _rule in _UNARY.items():
    define(_op, canonical=_rule, clamp=_CLAMPS.get(_op), check=same_shape, quant=QuantForm.FUNCTION,
           dtypes=FLOAT_OR_INT if _op in ("Neg", "Abs", "Relu") else FLOAT)

def keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node)


define("QuantizeLinear", canonical=canonical_quantize)
define("DequantizeLinear", canonical=canonical_quantize, dtypes=frozenset({"int8", "uint8", "int16", "int32"}))
# kept as they come: the TFLite frontend makes them directly (an ONNX model's come from QuantizeLinear,
# DequantizeLinear and lower_quantized)
_INTEGERS = frozenset({"int8", "uint8", "int16", "int32"})
define("Quantize", canonical=keep, lower=quantize_linear, layout=Layout.FOLLOW, elementwise=True,
       writes_transposed=True, check=same_shape)
define("Requantize", canonical=keep, lower=quantize_linear, layout=Layout.FOLLOW,
       dtypes=frozenset({"int8", "uint8", "int16"}), elementwise=True, writes_transposed=True, check=same_shape)
define("Dequantize", canonical=keep, lower=quantize_linear, layout=Layout.FOLLOW, dtypes=_INTEGERS,
       elementwise=True, writes_transposed=True, check=same_shape)
