"""TFLite builtin operators → graph ops: one rule per operator, each reading the operator's tensors and
options and adding the graph nodes that compute it (aot/frontend/tflite.py reads the file and calls them).

A rule sees float operators as the ONNX frontend's nodes would spell them (Conv, Gemm, AveragePool, ...,
activations as nodes after them) and quantized ones as lower_quantized's integer ops (the fused
activation as a clamp in attrs["acts"]); its tensors' encodings carry TFLite's rules (see tflite.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.quant import QuantParams, checked_log2, tflite_multiplier

_INTEGER = ("int8", "uint8", "int16")
_ACTIVATIONS = {0: None, 1: (0.0, math.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}      # fused activation -> clip
_ACTIVATION_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}


class Context:
    """What a rule works with: the importer (values, layouts), the node's name, and where it is for messages."""

    def __init__(self, importer, name: str, where: str):
        self.imp, self.name, self.where = importer, name, where

    def fail(self, message: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where}: {message}")

    def integer(self, x, y) -> bool:
        """Whether the operator computes on quantized integers (its input and output carry encodings)."""
        quantized = [t.dtype in _INTEGER and t.scale is not None for t in (x, y)]
        if quantized[0] != quantized[1]:
            raise self.fail(f"reads {x.dtype} and writes {y.dtype}; aot compiles this operator on float32 or "
                            "on quantized tensors in and out")
        if not quantized[0] and (x.dtype != "float32" or y.dtype != "float32"):
            raise self.fail(f"on {x.dtype} tensors is not supported (float32 or quantized int8/int16)")
        return quantized[0]

    def constant(self, t, what: str) -> np.ndarray:
        if t is None or t.data is None:
            raise self.fail(f"its {what} must be a constant tensor")
        return t.data

    def weights(self, w, array: np.ndarray, file_axis: int, axis: int, channels: int, rounding: str = "single") -> str:
        """Quantized weights `array` (already laid out as the graph op reads them), their scales per output
        channel (`axis` of `array`; `file_axis` of the file's tensor when per channel), and how the
        operator's kernel in TFLite rounds its requantization (QuantParams.rounding)."""
        if w.dtype not in ("int8", "uint8") or w.scale is None:
            raise self.fail(f"weights '{w.file_name}' are {w.dtype}{'' if w.scale is not None else ' unquantized'};"
                            " a quantized operator takes int8 weights with their scales (hybrid models, float "
                            "activations with int8 weights, are not supported)")
        if w.scale.size not in (1, channels):
            raise self.fail(f"weights '{w.file_name}' have {w.scale.size} scales for {channels} output channels")
        if w.scale.size > 1 and w.quantized_dimension != file_axis:
            raise self.fail(f"weights '{w.file_name}' are quantized along axis {w.quantized_dimension}; "
                            f"output channels are axis {file_axis}")
        scale = np.broadcast_to(w.scale.astype(np.float64), (channels,)).copy()
        zero_point = np.broadcast_to(w.zero_point, (channels,)).astype(np.int64)
        return self.imp.constant(w.name, array, QuantParams(scale, zero_point, axis, rules="tflite",
                                                                 rounding=rounding))

    def bias(self, b, x, w, channels: int) -> str:
        """The int32 bias of a quantized matrix op (in units of x_scale * w_scale), or "" if there is none."""
        if b is None:
            return ""
        data = self.constant(b, "bias").reshape(-1)
        kinds = (np.int32, np.int64) if x.dtype == "int16" else (np.int32,)
        if data.dtype not in kinds or data.size != channels:
            raise self.fail(f"bias '{b.file_name}' is {data.dtype} of {data.size} values; a quantized operator "
                            f"with {x.dtype} activations takes {channels} "
                            f"{' or '.join(np.dtype(k).name for k in kinds)} values")
        if data.dtype == np.int64:      # a 16x8 layer's: summed with the int64 products as it is
            return self.imp.constant(b.name, data)
        scale = np.float64(x.scale[0]) * np.broadcast_to(w.scale.astype(np.float64), (channels,))
        return self.imp.constant(b.name, data, QuantParams(scale, np.zeros(channels, np.int64), 0, rules="tflite"))

    def float_constant(self, t, what: str, array: np.ndarray | None = None) -> str:
        data = self.constant(t, what) if array is None else array
        if data.dtype != np.float32:
            raise self.fail(f"its {what} '{t.file_name}' is {data.dtype}; a float operator takes float32 ones "
                            "(hybrid models, float activations with int8 weights, are not supported)")
        return self.imp.constant(t.name, np.ascontiguousarray(data))

    def output(self, y, nchw: bool, activation: int, integer: bool, shape: tuple[int, ...] | None = None):
        """(the value the op writes, its extra attributes, a function adding what follows it): the fused
        activation, as a clamp on an integer op or as nodes after a float one, and, when the op makes
        `shape` rather than y's own, a Reshape into y."""
        imp = self.imp
        bounds = self.activation(activation, integer)
        reshaped = shape is not None and tuple(shape) != tuple(y.shape)
        if integer:
            acts = {"acts": (("clip", bounds),)} if bounds is not None else {}
            if not reshaped:
                return imp.result(y, nchw), acts, lambda: None
            raw = imp.declare(imp.fresh(f"{y.name}_raw"), shape, y.dtype, imp.quant(y))
            return raw, acts, lambda: self.reshape(raw, y)
        if bounds is None and activation != 4 and not reshaped:
            return imp.result(y, nchw), {}, lambda: None
        op_shape = shape if reshaped else (tuple(y.shape[p] for p in (0, 3, 1, 2)) if nchw else y.shape)
        raw = imp.declare(imp.fresh(f"{y.name}_raw"), op_shape, "float32")

        def after() -> None:
            value = raw
            if bounds is not None or activation == 4:
                last = imp.result(y, nchw) if not reshaped else imp.declare(imp.fresh(f"{y.name}_act"), shape,
                                                                             "float32")
                self.activate(value, last, bounds, activation)
                value = last
            if reshaped:
                self.reshape(value, y)
        return raw, {}, after

    def activation(self, code: int, integer: bool) -> tuple[float, float] | None:
        if code in _ACTIVATIONS:
            return _ACTIVATIONS[code]
        if code == 4 and not integer:
            return None     # TANH: a node of its own (activate)
        raise self.fail(f"fused activation {_ACTIVATION_NAMES.get(code, code)} is not supported")

    def activate(self, x: str, y: str, bounds: tuple[float, float] | None, code: int) -> None:
        imp = self.imp
        if code == 4:
            imp.add("Tanh", f"{self.name}_tanh", [x], [y])
        elif bounds == (0.0, math.inf):
            imp.add("Relu", f"{self.name}_relu", [x], [y])
        else:
            lo = imp.constant(f"{self.name}_min", np.array(bounds[0], np.float32))
            hi = imp.constant(f"{self.name}_max", np.array(bounds[1], np.float32))
            imp.add("Clip", f"{self.name}_clip", [x, lo, hi], [y])

    def reshape(self, x: str, y) -> str:
        """Value x viewed with tensor y's shape, written as y (in TFLite's layout)."""
        shape = self.imp.constant(f"{self.name}_shape", np.array(y.shape, np.int64))
        out = self.imp.result(y)
        self.imp.add("Reshape", f"{self.name}_{out}_reshape", [x, shape], [out])
        return out

    def view(self, x: str, shape: tuple[int, ...], hint: str) -> str:
        """Value x as `shape` (a new value, same encoding)."""
        imp = self.imp
        source = imp.values[x]
        if source.shape == tuple(shape):
            return x
        out = imp.declare(imp.fresh(hint), shape, source.dtype, source.quant)
        imp.add("Reshape", f"{out}_view", [x, imp.constant(f"{out}_shape", np.array(shape, np.int64))], [out])
        return out


# --- padding ---------------------------------------------------------------------------------------------

def _window(ctx: Context, padding: int, size: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int],
            dilations: tuple[int, int]) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """ONNX pads (top, left, bottom, right) and the output size of a 2-D window as TFLite computes them:
    SAME pads (total // 2) before and the rest after, VALID none."""
    if min(strides) < 1 or min(dilations) < 1:
        raise ctx.fail(f"strides {list(strides)} and dilations {list(dilations)} must be positive")
    before, after, out = [], [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        effective = (k - 1) * d + 1
        if padding == 0:        # SAME
            o = (n + s - 1) // s
            total = max((o - 1) * s + effective - n, 0)
            before.append(total // 2)
            after.append(total - total // 2)
        elif padding == 1:      # VALID
            o = (n + s - effective) // s
            before.append(0)
            after.append(0)
        else:
            raise ctx.fail(f"padding {padding} is not supported (SAME or VALID)")
        if o < 1:
            raise ctx.fail(f"a window of {k} (dilation {d}) does not fit an input of {n}")
        out.append(o)
    return (before[0], before[1], after[0], after[1]), (out[0], out[1])


def _check_shape(ctx: Context, y, expected: tuple[int, ...]) -> None:
    if tuple(y.shape) != tuple(expected):
        raise ctx.fail(f"output '{y.file_name}' is {list(y.shape)}; the operator computes {list(expected)}")


def _four_d(ctx: Context, t, what: str) -> None:
    if len(t.shape) != 4:
        raise ctx.fail(f"{what} '{t.file_name}' is {list(t.shape)}; this operator takes 4-D NHWC tensors")


# --- the operators ---------------------------------------------------------------------------------------

def conv_2d(ctx: Context, ins, outs, o, depthwise: bool = False) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    y = outs[0]
    _four_d(ctx, x, "input")
    data = ctx.constant(w, "weights")
    if data.ndim != 4:
        raise ctx.fail(f"weights '{w.file_name}' are {list(data.shape)}; a 2-D convolution takes 4-D weights")
    n, h, width, c = x.shape
    if depthwise:                       # (1, kh, kw, c * multiplier) -> (c * multiplier, 1, kh, kw)
        _, kh, kw, out_channels = data.shape
        if out_channels % c:
            raise ctx.fail(f"{out_channels} output channels are not a multiple of the {c} input channels")
        weight = data[0].transpose(2, 0, 1)[:, None]
        group, file_axis = c, 3
    else:                               # (out, kh, kw, in) -> (out, in, kh, kw)
        out_channels, kh, kw, per_group = data.shape
        if c % per_group:
            raise ctx.fail(f"{c} input channels are not a multiple of the weights' {per_group}")
        weight = data.transpose(0, 3, 1, 2)
        group, file_axis = c // per_group, 0
    strides = (o.StrideH(), o.StrideW())
    dilations = (o.DilationHFactor(), o.DilationWFactor())
    pads, (oh, ow) = _window(ctx, o.Padding(), (h, width), (kh, kw), strides, dilations)
    _check_shape(ctx, y, (n, oh, ow, out_channels))
    integer = ctx.integer(x, y)
    if not integer and w.dtype == "int8" and w.scale is not None:
        _hybrid_conv(ctx, x, w, b, y, o, weight, group, pads, strides, dilations, depthwise)
        return
    if integer:
        # LiteRT's reference convolutions round their requantization twice (gemmlowp's way, as TFLite
        # Micro's default build does everywhere)
        weight_name = ctx.weights(w, np.ascontiguousarray(weight), file_axis, 0, out_channels, "double")
        bias_name = ctx.bias(b, x, w, out_channels)
    else:
        weight_name = ctx.float_constant(w, "weights", np.ascontiguousarray(weight))
        bias_name = ctx.float_constant(b, "bias") if b is not None else ""
    xn = ctx.imp.as_nchw(x)
    target, acts, after = ctx.output(y, True, o.FusedActivationFunction(), integer)
    ctx.imp.add("Conv", ctx.name, [xn, weight_name, bias_name], [target], kernel_shape=(kh, kw), strides=strides,
                pads=pads, dilations=dilations, group=group, **acts)
    after()


def _run_time_codes(ctx: Context, source: str, w, taps: int) -> tuple[str, str]:
    """A hybrid layer's input quantized at run time, per batch row (ops/hybrid.py): (its codes as float32,
    the rows' factors, shaped to broadcast over the layer's output). The layer's sums of `taps` products
    of codes must stay exact in float32."""
    if w.scale.size != 1:
        raise ctx.fail("a hybrid layer (float32 activations, int8 weights) is supported with weights of one "
                       "scale only")
    if taps * 127 * 127 >= 1 << 24:
        raise ctx.fail(f"a hybrid layer summing {taps} products: its integer sums could pass float32's exact range")
    imp = ctx.imp
    shape = imp.values[source].shape
    codes = imp.declare(imp.fresh(f"{source}_codes"), shape, "float32")
    factor = imp.declare(imp.fresh(f"{source}_factor"), (shape[0],) + (1,) * (len(shape) - 1), "float32")
    imp.add("TfliteHybridQuantize", f"{ctx.name}_quantize", [source], [codes, factor],
            weight_scale=float(w.scale[0]))
    return codes, factor


def _rescaled(ctx: Context, sums: str, factor: str, b, target: str, bias_shape: tuple[int, ...]) -> None:
    """A hybrid layer's integer sums times the row's factor, plus the bias, into target."""
    imp = ctx.imp
    if b is None:
        imp.add("Mul", f"{ctx.name}_rescale", [sums, factor], [target])
        return
    scaled = imp.declare(imp.fresh(f"{sums}_scaled"), imp.values[sums].shape, "float32")
    imp.add("Mul", f"{ctx.name}_rescale", [sums, factor], [scaled])
    bias = imp.constant(f"{b.name}_shaped", ctx.constant(b, "bias").astype(np.float32).reshape(bias_shape))
    imp.add("Add", f"{ctx.name}_bias", [scaled, bias], [target])


def _hybrid_conv(ctx: Context, x, w, b, y, o, weight: np.ndarray, group: int, pads, strides, dilations,
                 depthwise: bool) -> None:
    """A hybrid CONV_2D (float32 activations, int8 weights): TFLite's run-time quantization of the input, a
    convolution of its codes with the weights' codes, exact in float32, times the factor, plus the bias."""
    if depthwise:
        raise ctx.fail("a hybrid DEPTHWISE_CONV_2D (float32 activations, int8 weights) is not supported")
    codes, factor = _run_time_codes(ctx, ctx.imp.value(x), w, int(np.prod(weight.shape[1:])))
    imp = ctx.imp
    n = x.shape[0]
    codes_nchw = imp.declare(imp.fresh(f"{x.name}_codes_nchw"), (n, x.shape[3], *x.shape[1:3]), "float32")
    imp.add("Transpose", f"{ctx.name}_codes_to_nchw", [codes], [codes_nchw], perm=(0, 3, 1, 2))
    out_channels, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    sums = imp.declare(imp.fresh(f"{y.name}_sums"), (n, out_channels, y.shape[1], y.shape[2]), "float32")
    imp.add("Conv", ctx.name, [codes_nchw, imp.constant(w.name, weight.astype(np.float32)), ""], [sums],
            kernel_shape=(kh, kw), strides=strides, pads=pads, dilations=dilations, group=group)
    target, _, after = ctx.output(y, True, o.FusedActivationFunction(), False)
    _rescaled(ctx, sums, factor, b, target, (out_channels, 1, 1))
    after()


def depthwise_conv_2d(ctx: Context, ins, outs, o) -> None:
    conv_2d(ctx, ins, outs, o, depthwise=True)


def fully_connected(ctx: Context, ins, outs, o) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    y = outs[0]
    if o is not None and o.WeightsFormat() != 0:
        raise ctx.fail("shuffled weights (weights_format SHUFFLED4x16INT8) are not supported")
    data = ctx.constant(w, "weights")
    if data.ndim != 2:
        raise ctx.fail(f"weights '{w.file_name}' are {list(data.shape)}; FULLY_CONNECTED takes (out, in) weights")
    out_channels, depth = data.shape
    size = int(np.prod(x.shape, dtype=np.int64))
    if size % depth:
        raise ctx.fail(f"input '{x.file_name}' {list(x.shape)} does not split into rows of {depth}")
    rows = size // depth
    if int(np.prod(y.shape, dtype=np.int64)) != rows * out_channels:
        raise ctx.fail(f"output '{y.file_name}' is {list(y.shape)}; the operator computes {rows} x {out_channels}")
    integer = ctx.integer(x, y)
    flat = ctx.view(ctx.imp.value(x), (rows, depth), f"{x.name}_rows")
    activation = o.FusedActivationFunction() if o is not None else 0
    if not integer and w.dtype == "int8" and w.scale is not None:    # hybrid: each row quantized at run time
        if o is not None and o.AsymmetricQuantizeInputs():
            raise ctx.fail("a hybrid FULLY_CONNECTED with asymmetric_quantize_inputs is not supported")
        codes, factor = _run_time_codes(ctx, flat, w, depth)
        target, _, after = ctx.output(y, False, activation, False, shape=(rows, out_channels))
        sums = ctx.imp.declare(ctx.imp.fresh(f"{y.name}_sums"), (rows, out_channels), "float32")
        ctx.imp.add("Gemm", ctx.name, [codes, ctx.imp.constant(w.name, data.astype(np.float32)), ""], [sums],
                    transB=1)
        _rescaled(ctx, sums, factor, b, target, (out_channels,))
        after()
        return
    target, acts, after = ctx.output(y, False, activation, integer, shape=(rows, out_channels))
    if integer:
        # LiteRT's reference FULLY_CONNECTED requantizes in double: round(acc * real multiplier); its 16x8 one
        # the int64 sum times the fixed-point multiplier, rounded once (ops/quantized.py multiply_wide).
        # TFLite Micro's (a model with an integer LSTM follows it) rounds twice, as CONV_2D does
        rounding = "double" if ctx.imp.micro else "single" if x.dtype == "int16" else "real"
        weight_name = ctx.weights(w, np.ascontiguousarray(data.T), 0, 1, out_channels, rounding)
        ctx.imp.add("Gemm", ctx.name, [flat, weight_name, ctx.bias(b, x, w, out_channels)], [target], **acts)
    else:
        bias_name = ctx.float_constant(b, "bias") if b is not None else ""
        ctx.imp.add("Gemm", ctx.name, [flat, ctx.float_constant(w, "weights"), bias_name], [target], transB=1)
    after()


def _pool(ctx: Context, ins, outs, o, op: str) -> None:
    x, y = ins[0], outs[0]
    _four_d(ctx, x, "input")
    n, h, w, c = x.shape
    kernel = (o.FilterHeight(), o.FilterWidth())
    strides = (o.StrideH(), o.StrideW())
    pads, (oh, ow) = _window(ctx, o.Padding(), (h, w), kernel, strides, (1, 1))
    _check_shape(ctx, y, (n, oh, ow, c))
    integer = ctx.integer(x, y)
    if integer and (x.dtype != y.dtype or x.scale[0] != y.scale[0] or x.zero_point[0] != y.zero_point[0]):
        raise ctx.fail("a quantized pool's input and output must have one encoding (as TFLite requires)")
    target, acts, after = ctx.output(y, True, o.FusedActivationFunction(), integer)
    extra = {"count_include_pad": 0} if op == "AveragePool" else {}
    ctx.imp.add(op, ctx.name, [ctx.imp.as_nchw(x)], [target], kernel_shape=kernel, strides=strides, pads=pads,
                **extra, **acts)
    after()


def average_pool_2d(ctx: Context, ins, outs, o) -> None:
    _pool(ctx, ins, outs, o, "AveragePool")


def max_pool_2d(ctx: Context, ins, outs, o) -> None:
    _pool(ctx, ins, outs, o, "MaxPool")


def _binary(ctx: Context, ins, outs, o, op: str) -> None:
    a, b = ins[0], ins[1]
    y = outs[0]
    integer = ctx.integer(a, y)
    if integer and not ctx.integer(b, y):
        raise ctx.fail("a quantized operator's operands must both be quantized")
    imp = ctx.imp
    computed = [t for t in (a, b) if t.data is None]
    # in NCHW where an operand was made there (a convolution's result): the Add can then fuse into it
    nchw = (len(y.shape) == 4 and any(t.index in imp.nchw for t in computed)
            and all(len(t.shape) == 4 for t in computed)
            and all(t.data.size == 1 for t in (a, b) if t.data is not None))
    operands = []
    for t in (a, b):
        if t.data is not None and nchw:
            operands.append(imp.constant(t.name, t.data.reshape(()), imp.quant(t)))
        else:
            operands.append(imp.as_nchw(t) if nchw else imp.value(t))
    activation = o.FusedActivationFunction() if o is not None else 0
    target, acts, after = ctx.output(y, nchw, activation, integer)
    imp.add(op, ctx.name, operands, [target], **acts)
    after()


def add(ctx: Context, ins, outs, o) -> None:
    _binary(ctx, ins, outs, o, "Add")


def sub(ctx: Context, ins, outs, o) -> None:
    _binary(ctx, ins, outs, o, "Sub")


def mul(ctx: Context, ins, outs, o) -> None:
    _binary(ctx, ins, outs, o, "Mul")


def softmax(ctx: Context, ins, outs, o) -> None:
    x, y = ins[0], outs[0]
    beta = float(np.float32(o.Beta())) if o is not None else 1.0
    integer = ctx.integer(x, y)
    imp = ctx.imp
    source = imp.value(x)
    axis = len(x.shape) - 1
    if integer:
        if (x.dtype, y.dtype) not in (("int8", "int8"), ("int8", "int16"), ("int16", "int16")):
            raise ctx.fail(f"quantized SOFTMAX from {x.dtype} to {y.dtype} is not supported (int8 to int8 or "
                           "int16, int16 to int16 are)")
        scale, zero = {"int8": (1 / 256, -128), "int16": (1 / 65536, -32768)}[y.dtype]
        if x.dtype == "int16":
            scale, zero = 1 / 32768, 0
        if abs(float(y.scale[0]) - scale) > 0.001 * scale or y.zero_point[0] != zero:     # (LiteRT's tolerance)
            raise ctx.fail(f"a quantized SOFTMAX's {y.dtype} output must have scale 1/{round(1 / scale)} and zero "
                           f"point {zero}, as TFLite requires")
        imp.add("Softmax", ctx.name, [source], [imp.result(y)], axis=axis, beta=beta)
        return
    if beta != 1.0:
        scaled = imp.declare(imp.fresh(f"{x.name}_beta"), x.shape, "float32")
        imp.add("Mul", f"{ctx.name}_beta", [source, imp.constant(f"{ctx.name}_beta", np.array(beta, np.float32))],
                [scaled])
        source = scaled
    imp.add("Softmax", ctx.name, [source], [imp.result(y)], axis=axis)


def reshape(ctx: Context, ins, outs, o) -> None:
    x, y = ins[0], outs[0]
    if int(np.prod(x.shape, dtype=np.int64)) != int(np.prod(y.shape, dtype=np.int64)):
        raise ctx.fail(f"reshapes {list(x.shape)} into {list(y.shape)}, which holds another number of elements")
    if (x.dtype, imp_quant(ctx, x)) != (y.dtype, imp_quant(ctx, y)):
        raise ctx.fail("input and output have different types or encodings")
    ctx.reshape(ctx.imp.value(x), y)


def imp_quant(ctx: Context, t):
    q = ctx.imp.quant(t)
    return None if q is None else (q.scale, q.zero_point)


def _activation_op(fn: Callable[[Context, str, str], None], quantized: tuple[str, ...] = ()) -> Callable:
    """An activation operator, float32 or on the `quantized` integer types (for int8 LOGISTIC and TANH,
    TFLite's table of it: ops/tflite_tables.py)."""
    def rule(ctx: Context, ins, outs, o) -> None:
        x, y = ins[0], outs[0]
        if ctx.integer(x, y) and not (x.dtype == y.dtype and x.dtype in quantized):
            raise ctx.fail(f"on {x.dtype} tensors is not supported yet (float32{''.join(f', {t}' for t in quantized)}"
                           " are)")
        fn(ctx, ctx.imp.value(x), ctx.imp.result(y))
    return rule


def _curve(fn: Callable[[Context, str, str], None]) -> Callable:
    """LOGISTIC or TANH: float32, int8 (TFLite's table of it: ops/tflite_tables.py) or int16, which TFLite
    computes from its sigmoid table (ops/tflite_sigmoid16.py), only for zero points 0 and an output scale of
    2**-15."""
    activation = _activation_op(fn, ("int8", "int16"))

    def rule(ctx: Context, ins, outs, o) -> None:
        x, y = ins[0], outs[0]
        if x.dtype == "int16" and y.dtype == "int16":
            if int(np.asarray(x.zero_point).reshape(-1)[0]) or int(np.asarray(y.zero_point).reshape(-1)[0]):
                raise ctx.fail("on int16 tensors takes zero points 0 only (TFLite's rule)")
            if checked_log2(float(np.asarray(y.scale).reshape(-1)[0])) != (-15, True):
                raise ctx.fail(f"on int16 tensors takes an output scale of 2**-15 only (TFLite's rule), not "
                               f"{float(np.asarray(y.scale).reshape(-1)[0])!r}")
        activation(ctx, ins, outs, o)
    return rule


def _same_encoding(ctx: Context, ins, outs) -> bool:
    """Whether the operator moves values (reshapes, slices, pads, ...): quantized ones keep their codes, so
    input and output must share one encoding, as TFLite requires of these operators."""
    x, y = ins[0], outs[0]
    integer = ctx.integer(x, y)
    if integer:
        for t in outs:
            if t.dtype != x.dtype or not np.array_equal(t.scale, x.scale) or not np.array_equal(t.zero_point,
                                                                                                 x.zero_point):
                raise ctx.fail(f"moves quantized values from one encoding to another ('{x.file_name}' to "
                               f"'{t.file_name}'); aot takes one encoding in and out")
    return integer


def _ints_of(ctx: Context, t, what: str) -> list[int]:
    return [int(v) for v in ctx.constant(t, what).reshape(-1)]


def _axis(ctx: Context, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} is outside a tensor of rank {rank}")
    return axis % rank


def squeeze(ctx: Context, ins, outs, o) -> None:
    _same_encoding(ctx, ins, outs)
    ctx.reshape(ctx.imp.value(ins[0]), outs[0])


def _reduced(ctx: Context, ins, outs, add: Callable[[str, list[int], str], None]) -> None:
    """A reduction over the constant axes ins[1]: add(input, axes, result) adds the node that keeps the reduced
    axes as 1, reshaped into the output if the operator drops them (keep_dims false)."""
    x, y = ins[0], outs[0]
    axes = sorted({_axis(ctx, a, len(x.shape)) for a in _ints_of(ctx, ins[1], "axes")})
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if int(np.prod(kept)) != int(np.prod(y.shape)):
        raise ctx.fail(f"output '{y.file_name}' is {list(y.shape)}; the reduction over axes {axes} has {list(kept)}")
    imp = ctx.imp
    out = imp.result(y) if kept == tuple(y.shape) else imp.declare(imp.fresh(f"{y.name}_kept"), kept, y.dtype,
                                                                   imp.quant(y))
    add(imp.value(x), axes, out)
    if out != y.name:
        ctx.reshape(out, y)


def mean(ctx: Context, ins, outs, o) -> None:
    if ctx.integer(ins[0], outs[0]):     # TFLite's integer mean (ops/mean_tflite.py)
        _reduced(ctx, ins, outs, lambda x, axes, out: ctx.imp.add("TfliteMean", ctx.name, [x], [out],
                                                                  axes=tuple(axes)))
    else:
        _reduced(ctx, ins, outs, lambda x, axes, out: ctx.imp.add("ReduceMean", ctx.name, [x], [out],
                                                                  axes=tuple(axes), keepdims=1))


def pad(ctx: Context, ins, outs, o) -> None:
    x, y = ins[0], outs[0]
    integer = _same_encoding(ctx, ins, outs)
    pads = ctx.constant(ins[1], "paddings").astype(np.int64).reshape(-1, 2)
    if pads.shape[0] != len(x.shape) or (pads < 0).any():
        raise ctx.fail(f"paddings {pads.tolist()} do not suit an input of rank {len(x.shape)}")
    _check_shape(ctx, y, tuple(int(d + a + b) for d, (a, b) in zip(x.shape, pads)))
    if len(ins) > 2 and ins[2] is not None:         # PADV2: the value, in the input's encoding
        value = ctx.constant(ins[2], "padding value").reshape(())
    else:
        value = np.array(x.zero_point[0] if integer else 0, x.dtype)
    imp = ctx.imp
    pads_name = imp.constant(f"{ctx.name}_pads", np.concatenate([pads[:, 0], pads[:, 1]]))
    value_name = imp.constant(f"{ctx.name}_value", np.asarray(value, x.dtype))
    imp.add("Pad", ctx.name, [imp.value(x), pads_name, value_name], [imp.result(y)], mode="constant")


def concatenation(ctx: Context, ins, outs, o) -> None:
    y = outs[0]
    integer = ctx.integer(ins[0], y)
    for t in ins:
        if integer:
            _same_encoding(ctx, [t], outs)
        elif ctx.integer(t, y):
            raise ctx.fail("mixes float and quantized inputs")
    if o is not None and o.FusedActivationFunction():
        raise ctx.fail("a fused activation on CONCATENATION is not supported")
    axis = _axis(ctx, o.Axis() if o is not None else 0, len(y.shape))
    ctx.imp.add("Concat", ctx.name, [ctx.imp.value(t) for t in ins], [ctx.imp.result(y)], axis=axis)


def transpose(ctx: Context, ins, outs, o) -> None:
    _same_encoding(ctx, ins, outs)
    perm = tuple(_axis(ctx, p, len(ins[0].shape)) for p in _ints_of(ctx, ins[1], "permutation"))
    _check_shape(ctx, outs[0], tuple(ins[0].shape[p] for p in perm))
    ctx.imp.add("Transpose", ctx.name, [ctx.imp.value(ins[0])], [ctx.imp.result(outs[0])], perm=perm)


def strided_slice(ctx: Context, ins, outs, o) -> None:
    """Each axis's slice as TFLite resolves it (masks, negative indices, clamping), then an ONNX Slice and,
    for the axes shrink_axis_mask drops, a reshape."""
    x, y = ins[0], outs[0]
    _same_encoding(ctx, ins, outs)
    begin, end, strides = (_ints_of(ctx, t, what) for t, what in zip(ins[1:4], ("begin", "end", "strides")))
    rank = len(x.shape)
    if o is not None and (o.EllipsisMask() or o.NewAxisMask() or o.Offset()):
        raise ctx.fail("ellipsis_mask, new_axis_mask and offset are not supported")
    if not len(begin) == len(end) == len(strides) == rank or 0 in strides:
        raise ctx.fail(f"begin {begin}, end {end} and strides {strides} do not suit an input of rank {rank}")
    masks = (o.BeginMask(), o.EndMask(), o.ShrinkAxisMask()) if o is not None else (0, 0, 0)
    starts, ends, steps, kept = [], [], [], []
    for axis, (b, e, s, dim) in enumerate(zip(begin, end, strides, x.shape)):
        shrink = masks[2] >> axis & 1
        if shrink:
            b = b + dim if b < 0 else b
            indices = [b] if 0 <= b < dim else []
        else:
            indices = list(range(dim))[slice(None if masks[0] >> axis & 1 else b,
                                             None if masks[1] >> axis & 1 else e, s)]
        if not indices:
            raise ctx.fail(f"axis {axis} keeps no element")
        starts.append(indices[0])
        last = indices[-1]
        ends.append(last + 1 if s > 0 else (last - 1 if last > 0 else -dim - 1))
        steps.append(s if len(indices) > 1 else 1)
        if not shrink:
            kept.append(len(indices))
    imp = ctx.imp
    sliced_shape = tuple(len(range(a, b, c)) if c > 0 else len(range(a, b if b >= 0 else -1, c))
                         for a, b, c in zip(starts, ends, steps))
    _check_shape(ctx, y, tuple(kept))
    sliced = imp.result(y) if sliced_shape == tuple(y.shape) else imp.declare(imp.fresh(f"{y.name}_sliced"),
                                                                              sliced_shape, y.dtype, imp.quant(y))
    operands = [imp.constant(f"{ctx.name}_{what}", np.array(v, np.int64))
                for what, v in (("starts", starts), ("ends", ends), ("axes", list(range(rank))), ("steps", steps))]
    imp.add("Slice", ctx.name, [imp.value(x), *operands], [sliced])
    if sliced != y.name:
        ctx.reshape(sliced, y)


def split(ctx: Context, ins, outs, o) -> None:
    axis_tensor, x = ins[0], ins[1]
    _same_encoding(ctx, [x], outs)
    axis = _axis(ctx, _ints_of(ctx, axis_tensor, "axis")[0], len(x.shape))
    sizes = [t.shape[axis] for t in outs]
    if sum(sizes) != x.shape[axis]:
        raise ctx.fail(f"outputs of {sizes} along axis {axis} do not make up the input's {x.shape[axis]}")
    imp = ctx.imp
    imp.add("Split", ctx.name, [imp.value(x), imp.constant(f"{ctx.name}_sizes", np.array(sizes, np.int64))],
            [imp.result(t) for t in outs], axis=axis)


def gather(ctx: Context, ins, outs, o) -> None:
    x, indices, y = ins[0], ins[1], outs[0]
    _same_encoding(ctx, [x], outs)
    if o is not None and o.BatchDims():
        raise ctx.fail("batch_dims other than 0 is not supported")
    axis = _axis(ctx, o.Axis() if o is not None else 0, len(x.shape))
    imp = ctx.imp
    imp.add("Gather", ctx.name, [imp.value(x), imp.value(indices)], [imp.result(y)], axis=axis)


def unary(op: str, **attrs) -> Callable:
    """A float32 elementwise function as the ONNX op of the same meaning."""
    def rule(ctx: Context, ins, outs, o) -> None:
        _float_only(ctx, ins, outs)
        ctx.imp.add(op, ctx.name, [ctx.imp.value(ins[0])], [ctx.imp.result(outs[0])], **attrs)
    return rule


def rsqrt(ctx: Context, ins, outs, o) -> None:
    _float_only(ctx, ins, outs)
    imp = ctx.imp
    root = imp.declare(imp.fresh(f"{outs[0].name}_sqrt"), outs[0].shape, "float32")
    imp.add("Sqrt", f"{ctx.name}_sqrt", [imp.value(ins[0])], [root])
    imp.add("Reciprocal", ctx.name, [root], [imp.result(outs[0])])


def square(ctx: Context, ins, outs, o) -> None:
    _float_only(ctx, ins, outs)
    x = ctx.imp.value(ins[0])
    ctx.imp.add("Mul", ctx.name, [x, x], [ctx.imp.result(outs[0])])


def float_binary(op: str, then: str | None = None) -> Callable:
    """A float32 operator of two broadcast operands as the ONNX op, `then` applied to its result (Floor, or
    Square as a product with itself): DIV, POW, FLOOR_DIV (Div, Floor), SQUARED_DIFFERENCE (Sub, Square)."""
    def rule(ctx: Context, ins, outs, o) -> None:
        _float_only(ctx, ins[:1], outs)
        if ins[1].dtype != "float32":
            raise ctx.fail(f"on {ins[1].dtype} tensors is not supported yet (float32 is)")
        if o is not None and hasattr(o, "FusedActivationFunction") and o.FusedActivationFunction():
            raise ctx.fail("a fused activation here is not supported")
        imp, y = ctx.imp, outs[0]
        first = imp.result(y) if then is None else imp.declare(imp.fresh(f"{y.name}_raw"), y.shape, "float32")
        imp.add(op, ctx.name if then is None else f"{ctx.name}_first", [imp.value(t) for t in ins[:2]], [first])
        if then == "Square":
            imp.add("Mul", ctx.name, [first, first], [imp.result(y)])
        elif then is not None:
            imp.add(then, ctx.name, [first], [imp.result(y)])
    return rule


def reduce(op: str) -> Callable:
    """SUM, REDUCE_PROD, REDUCE_MAX and REDUCE_MIN of float32 over constant axes."""
    def rule(ctx: Context, ins, outs, o) -> None:
        _float_only(ctx, ins[:1], outs)
        imp = ctx.imp

        def add(x: str, axes: list[int], out: str) -> None:
            if op == "ReduceSum":       # (an input at opset 13 and later; an attribute of the others until 18)
                imp.add(op, ctx.name, [x, imp.constant(f"{ctx.name}_axes", np.array(axes, np.int64))], [out],
                        keepdims=1)
            else:
                imp.add(op, ctx.name, [x], [out], axes=tuple(axes), keepdims=1)
        _reduced(ctx, ins, outs, add)
    return rule


def log_softmax(ctx: Context, ins, outs, o) -> None:
    _float_only(ctx, ins, outs)
    ctx.imp.add("LogSoftmax", ctx.name, [ctx.imp.value(ins[0])], [ctx.imp.result(outs[0])], axis=len(ins[0].shape) - 1)


def arg_max_min(op: str) -> Callable:
    """ARG_MAX / ARG_MIN over a constant axis, float32 or integer codes (compared as they are), into int32
    or int64 as the options say (ties: the first index, as TFLite's)."""
    def rule(ctx: Context, ins, outs, o) -> None:
        x, y = ins[0], outs[0]
        if y.dtype not in ("int32", "int64"):
            raise ctx.fail(f"an index output of {y.dtype} is not supported (int32 or int64)")
        axis = _axis(ctx, _ints_of(ctx, ins[1], "axis")[0], len(x.shape))
        _check_shape(ctx, y, tuple(d for i, d in enumerate(x.shape) if i != axis))
        imp = ctx.imp
        index = imp.declare(imp.fresh(f"{y.name}_int64"), y.shape, "int64")
        imp.add(op, ctx.name, [imp.value(x)], [index if y.dtype == "int32" else imp.result(y)], axis=axis,
                keepdims=0)
        if y.dtype == "int32":
            imp.add("Cast", f"{ctx.name}_cast", [index], [imp.result(y)], to=6)     # onnx INT32
    return rule


def pack(ctx: Context, ins, outs, o) -> None:
    """PACK: the inputs stacked along a new axis (a Concat of their views with that axis of 1)."""
    y = outs[0]
    for t in ins:
        _same_encoding(ctx, [t], outs)
    axis = _axis(ctx, o.Axis() if o is not None else 0, len(y.shape))
    _check_shape(ctx, y, tuple(ins[0].shape[:axis]) + (len(ins),) + tuple(ins[0].shape[axis:]))
    shape = tuple(ins[0].shape[:axis]) + (1,) + tuple(ins[0].shape[axis:])
    parts = [ctx.view(ctx.imp.value(t), shape, f"{t.name}_packed") for t in ins]
    ctx.imp.add("Concat", ctx.name, parts, [ctx.imp.result(y)], axis=axis)


def unpack(ctx: Context, ins, outs, o) -> None:
    """UNPACK: the input split along an axis into views without it."""
    x = ins[0]
    _same_encoding(ctx, [x], outs)
    axis = _axis(ctx, o.Axis() if o is not None else 0, len(x.shape))
    if x.shape[axis] != len(outs):
        raise ctx.fail(f"{len(outs)} outputs from an axis of {x.shape[axis]}")
    imp = ctx.imp
    pieces = [imp.declare(imp.fresh(f"{t.name}_slab"), tuple(1 if i == axis else d for i, d in enumerate(x.shape)),
                          t.dtype, imp.quant(t)) for t in outs]
    imp.add("Split", ctx.name, [imp.value(x), imp.constant(f"{ctx.name}_sizes", np.ones(len(outs), np.int64))],
            pieces, axis=axis)
    for piece, t in zip(pieces, outs):
        ctx.reshape(piece, t)


def split_v(ctx: Context, ins, outs, o) -> None:
    """SPLIT_V: SPLIT with the sizes given (one of them -1: the rest), which the outputs' shapes must have."""
    x = ins[0]
    sizes = _ints_of(ctx, ins[1], "sizes")
    axis = _axis(ctx, _ints_of(ctx, ins[2], "axis")[0], len(x.shape))
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if sizes != [t.shape[axis] for t in outs]:
        raise ctx.fail(f"sizes {sizes} along axis {axis} do not match the outputs")
    split(ctx, [ins[2], x], outs, o)


def tile(ctx: Context, ins, outs, o) -> None:
    _same_encoding(ctx, ins[:1], outs)
    repeats = _ints_of(ctx, ins[1], "multiples")
    imp = ctx.imp
    imp.add("Tile", ctx.name, [imp.value(ins[0]), imp.constant(f"{ctx.name}_repeats", np.array(repeats, np.int64))],
            [imp.result(outs[0])])


def depth_space(op: str) -> Callable:
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH on NHWC: ONNX's (DCR order) on the tensor transposed to NCHW."""
    def rule(ctx: Context, ins, outs, o) -> None:
        x, y = ins[0], outs[0]
        _same_encoding(ctx, ins, outs)
        _four_d(ctx, x, "input")
        block = o.BlockSize() if o is not None else 0
        if block < 1:
            raise ctx.fail(f"block size {block} is not positive")
        attrs = {"blocksize": block, **({"mode": "DCR"} if op == "DepthToSpace" else {})}
        ctx.imp.add(op, ctx.name, [ctx.imp.as_nchw(x)], [ctx.imp.result(y, nchw=True)], **attrs)
    return rule


def cast(ctx: Context, ins, outs, o) -> None:
    x, y = ins[0], outs[0]
    if x.scale is not None or y.scale is not None:
        raise ctx.fail("a CAST of quantized tensors is not supported (QUANTIZE and DEQUANTIZE convert encodings)")
    to = {"float32": 1, "int8": 3, "uint8": 2, "int16": 5, "int32": 6, "int64": 7, "bool": 9}
    if y.dtype not in to:
        raise ctx.fail(f"a CAST to {y.dtype} is not supported")
    ctx.imp.add("Cast", ctx.name, [ctx.imp.value(x)], [ctx.imp.result(y)], to=to[y.dtype])


def _float_only(ctx: Context, ins, outs) -> None:
    for t in list(ins[:1]) + list(outs):
        if t.dtype != "float32":
            raise ctx.fail(f"on {t.dtype} tensors is not supported yet (float32 is)")


def maximum_minimum(op: str) -> Callable:
    """float32, or int8 codes compared as they are (TFLite neither checks nor rescales their encodings)."""
    def rule(ctx: Context, ins, outs, o) -> None:
        if ctx.integer(ins[0], outs[0]) and not ctx.integer(ins[1], outs[0]):
            raise ctx.fail("mixes float and quantized operands")
        ctx.imp.add(op, ctx.name, [ctx.imp.value(t) for t in ins[:2]], [ctx.imp.result(outs[0])])
    return rule


def leaky_relu(ctx: Context, ins, outs, o) -> None:
    if not (ctx.integer(ins[0], outs[0]) and ins[0].dtype == outs[0].dtype and ins[0].dtype in ("int8", "int16")):
        _float_only(ctx, ins, outs)
    ctx.imp.add("LeakyRelu", ctx.name, [ctx.imp.value(ins[0])], [ctx.imp.result(outs[0])],
                alpha=float(np.float32(o.Alpha())) if o is not None else 0.2)


def hard_swish(ctx: Context, ins, outs, o) -> None:
    """float32, or int8 in TFLite's 16-bit fixed point (ops/tflite_tables.py)."""
    x, y = ins[0], outs[0]
    if ctx.integer(x, y) and x.dtype == y.dtype == "int8":
        px, py = ctx.imp.quant(x), ctx.imp.quant(y)
        (_,), (shift,) = tflite_multiplier(np.float32(np.float32(px.scale) / np.float32(128)) / np.float32(py.scale))
        if shift < 31:      # TFLite's HardSwishPrepare: the output multiplier may not shift left
            raise ctx.fail(f"output scale {py.scale:g} is at most input scale / 128 ({px.scale / 128:g}), "
                           "which TFLite does not allow")
    elif x.dtype != "float32" or y.dtype != "float32":
        raise ctx.fail(f"on {x.dtype} tensors is not supported (float32 and int8 are; TFLite has no other)")
    ctx.imp.add("HardSwish", ctx.name, [ctx.imp.value(ins[0])], [ctx.imp.result(outs[0])])


def prelu(ctx: Context, ins, outs, o) -> None:
    """float32, or int8 with an int8 slope of one encoding (ops/elementwise.py: TFLite's arithmetic)."""
    x, slope, y = ins[0], ins[1], outs[0]
    if ctx.integer(x, y) and x.dtype == y.dtype == "int8":
        if slope.dtype != "int8" or ctx.imp.quant(slope) is None:
            raise ctx.fail(f"the slope of an int8 PRELU must be quantized int8, not {slope.dtype}")
    else:
        _float_only(ctx, ins, outs)
    ctx.imp.add("PRelu", ctx.name, [ctx.imp.value(ins[0]), ctx.imp.value(ins[1])], [ctx.imp.result(outs[0])])


def resize(mode: str) -> Callable:
    def rule(ctx: Context, ins, outs, o) -> None:
        x, y = ins[0], outs[0]
        if not ctx.integer(x, y):        # quantized: TFLite resizes the codes (ops/resize.py)
            _float_only(ctx, ins, outs)
        elif x.dtype != y.dtype:
            raise ctx.fail(f"reads {x.dtype} and writes {y.dtype}")
        _four_d(ctx, x, "input")
        align, half = (bool(o.AlignCorners()), bool(o.HalfPixelCenters())) if o is not None else (False, False)
        if align and half:
            raise ctx.fail("align_corners and half_pixel_centers together are not supported")
        size = _ints_of(ctx, ins[1], "size")
        _check_shape(ctx, y, (x.shape[0], *size, x.shape[3]))
        if mode == "linear":
            attrs = {"coordinate_transformation_mode": "align_corners" if align else
                     "half_pixel" if half else "asymmetric"}
        else:
            # TFLite: floor(out * scale), or round() with align_corners, or floor((out + 0.5) * scale) with
            # half-pixel centers, which is ONNX's half_pixel rounded half up
            attrs = {"coordinate_transformation_mode": "align_corners" if align else
                     "half_pixel" if half else "asymmetric",
                     "nearest_mode": "round_prefer_ceil" if align or half else "floor"}
        imp = ctx.imp
        sizes = imp.constant(f"{ctx.name}_sizes", np.array([x.shape[0], x.shape[3], *size], np.int64))
        imp.add("Resize", ctx.name, [imp.as_nchw(x), "", "", sizes], [imp.result(y, nchw=True)], mode=mode, **attrs)
    return rule


def transpose_conv(ctx: Context, ins, outs, o) -> None:
    shape_tensor, w, x = ins[0], ins[1], ins[2]
    b = ins[3] if len(ins) > 3 else None
    y = outs[0]
    integer = ctx.integer(x, y)
    _four_d(ctx, x, "input")
    data = ctx.constant(w, "weights")        # (out, kh, kw, in)
    out_channels, kh, kw, in_channels = data.shape
    n, h, width, c = x.shape
    if c != in_channels:
        raise ctx.fail(f"weights for {in_channels} input channels, input of {c}")
    out_shape = tuple(_ints_of(ctx, shape_tensor, "output shape"))
    _check_shape(ctx, y, out_shape)
    strides = (o.StrideH(), o.StrideW())
    pads, adjust = [], []
    for size, out, k, s in zip((h, width), out_shape[1:3], (kh, kw), strides):
        total = (size - 1) * s + k - out
        if o.Padding() == 1 and total:      # VALID: the output is the full transposed convolution
            raise ctx.fail(f"a VALID output of {out} from {size} (kernel {k}, stride {s}) is not the full one")
        before = max(total, 0) // 2
        pads.append((before, max(total, 0) - before))
        adjust.append(max(-total, 0))
    imp = ctx.imp
    weight = np.ascontiguousarray(data.transpose(3, 0, 1, 2))     # (in, out, kh, kw)
    if integer:     # requantized as LiteRT's reference convolutions are, rounded twice
        weight_name = ctx.weights(w, weight, 0, 1, out_channels, "double")
        bias = ctx.bias(b, x, w, out_channels)
    else:
        weight_name = ctx.float_constant(w, "weights", weight)
        bias = ctx.float_constant(b, "bias") if b is not None else ""
    activation = o.FusedActivationFunction() if o is not None else 0
    target, acts, after = ctx.output(y, True, activation, integer)
    imp.add("ConvTranspose", ctx.name, [imp.as_nchw(x), weight_name, bias], [target], kernel_shape=(kh, kw),
            strides=strides, pads=(pads[0][0], pads[1][0], pads[0][1], pads[1][1]), output_padding=tuple(adjust),
            **acts)
    after()


# UNIDIRECTIONAL_SEQUENCE_LSTM's operands: the input, then per gate (input, forget, cell, output) the input
# weights, the recurrent weights, the peepholes (none for the cell gate) and the biases, the projection, the
# two variable state tensors, the layer norm coefficients
_LSTM_W, _LSTM_R, _LSTM_P, _LSTM_B = (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, None, 11), (12, 13, 14, 15)
_LSTM_PROJECTION, _LSTM_H, _LSTM_C, _LSTM_NORMS = (16, 17), 18, 19, (20, 21, 22, 23)


def unidirectional_sequence_lstm(ctx: Context, ins, outs, o) -> None:
    """float32, as an ONNX LSTM (gates reordered to i, o, f, c) whose initial states are the two variable
    tensors and whose final states update them, with TFLite's cell clipping and coupled input and forget
    gates (CIFG: no input gate weights, i = 1 - f); without the projection or layer normalization that
    TFLite also allows."""
    ins = list(ins) + [None] * (24 - len(ins))
    x, y = ins[0], outs[0]
    if ctx.integer(x, y):
        return _integer_lstm(ctx, ins, outs, o)
    _float_only(ctx, ins, outs)
    cifg = ins[_LSTM_W[0]] is None
    for what, indices in (("a projection", _LSTM_PROJECTION), ("layer normalization", _LSTM_NORMS)):
        if any(ins[i] is not None for i in indices):
            raise ctx.fail(f"with {what} is not supported")
    cell_clip = float(np.float32(o.CellClip())) if o is not None and o.CellClip() > 0 else None
    activation = o.FusedActivationFunction() if o is not None else 4
    acts = {4: "Tanh", 1: "Relu"}.get(activation)
    if acts is None:
        raise ctx.fail(f"activation {_ACTIVATION_NAMES.get(activation, activation)} is not supported (TANH, RELU)")
    h, c = ins[_LSTM_H], ins[_LSTM_C]
    if h is None or c is None or not (h.variable and c.variable):
        raise ctx.fail("its output and cell state must be variable tensors")
    time_major = bool(o.TimeMajor()) if o is not None else False
    if len(x.shape) != 3:
        raise ctx.fail(f"input '{x.file_name}' is {list(x.shape)}; it takes (batch, time, input) or (time, "
                       "batch, input)")
    steps, batch = x.shape[:2] if time_major else x.shape[1::-1]
    if any(ins[i] is None for i in _LSTM_W[1:] + _LSTM_R[1:]) or (ins[_LSTM_R[0]] is None) != cifg:
        raise ctx.fail("lacks gate weights: only the input gate's may be absent (CIFG), both of them")
    forget = ctx.constant(ins[_LSTM_W[1]], "input weights")
    if forget.ndim != 2:
        raise ctx.fail(f"input weights '{ins[_LSTM_W[1]].file_name}' are {list(forget.shape)}, not (cells, inputs)")
    hidden, width = forget.shape
    weights = [ctx.constant(ins[i], "input weights").astype(np.float32) if ins[i] is not None else
               np.zeros((hidden, width), np.float32) for i in _LSTM_W]
    recurrent = [ctx.constant(ins[i], "recurrent weights").astype(np.float32) if ins[i] is not None else
                 np.zeros((hidden, hidden), np.float32) for i in _LSTM_R]
    if x.shape[2] != width or any(r.shape != (hidden, hidden) for r in recurrent) or h.shape != (batch, hidden) \
            or c.shape != (batch, hidden):
        raise ctx.fail(f"weights for {width} inputs and {hidden} cells do not fit input {list(x.shape)} and "
                       f"states {list(h.shape)}, {list(c.shape)}")
    _check_shape(ctx, y, (steps, batch, hidden) if time_major else (batch, steps, hidden))
    order = (0, 3, 1, 2)        # TFLite's i, f, c, o as ONNX's i, o, f, c
    imp = ctx.imp
    zeros = np.zeros(hidden, np.float32)

    def vectors(indices, what: str) -> list[np.ndarray]:     # per gate, zeros for an absent one
        return [ctx.constant(ins[i], what).astype(np.float32) if i is not None and ins[i] is not None else zeros
                for i in indices]

    bias = vectors(_LSTM_B, "gate bias")
    state_shape = (1, batch, hidden) if time_major else (batch, 1, hidden)
    operands = [imp.value(x),
                imp.constant(f"{ctx.name}_W", np.concatenate([weights[g] for g in order])[None]),
                imp.constant(f"{ctx.name}_R", np.concatenate([recurrent[g] for g in order])[None]),
                imp.constant(f"{ctx.name}_B", np.concatenate([bias[g] for g in order] + [zeros] * 4)[None]),
                "",
                ctx.view(imp.value(h), state_shape, f"{ctx.name}_h0"),
                ctx.view(imp.value(c), state_shape, f"{ctx.name}_c0")]
    if any(i is not None and ins[i] is not None for i in _LSTM_P):
        peep = vectors(_LSTM_P, "peephole weights")
        operands.append(imp.constant(f"{ctx.name}_P", np.concatenate([peep[0], peep[3], peep[1]])[None]))
    ys = imp.declare(imp.fresh(f"{ctx.name}_y"), (steps, 1, batch, hidden) if time_major else (batch, steps, 1, hidden),
                     "float32")
    yh = imp.declare(imp.fresh(f"{ctx.name}_h"), state_shape, "float32")
    yc = imp.declare(imp.fresh(f"{ctx.name}_c"), state_shape, "float32")
    imp.add("LSTM", ctx.name, operands, [ys, yh, yc], hidden_size=hidden, layout=0 if time_major else 1,
            activations=("Sigmoid", acts, acts), **({"cell_clip": cell_clip} if cell_clip else {}),
            **({"cifg": True} if cifg else {}))
    ctx.reshape(ys, y)
    imp.write_state(h, ctx.view(yh, (batch, hidden), f"{ctx.name}_h_next"))
    imp.write_state(c, ctx.view(yc, (batch, hidden), f"{ctx.name}_c_next"))


def _integer_lstm(ctx: Context, ins, outs, o) -> None:
    """TFLite Micro's integer LSTM (ops/lstm_tflite.py): int8 input, output and hidden state (or int16 ones,
    16x8), int8 weights of one scale per matrix, int32 (int64) biases, an int16 cell state of a power-of-two
    scale; all four gates, no peepholes, projection or layer normalization, as TFLite Micro requires."""
    x, y = ins[0], outs[0]
    h, c = ins[_LSTM_H], ins[_LSTM_C]
    if h is None or c is None or not (h.variable and c.variable):
        raise ctx.fail("its output and cell state must be variable tensors")
    wide = x.dtype == "int16"
    bias_type = "int64" if wide else "int32"
    if x.dtype not in ("int8", "int16") or y.dtype != x.dtype or h.dtype != x.dtype or c.dtype != "int16":
        raise ctx.fail(f"quantized takes int8 (or int16) input, output and hidden state and an int16 cell state, "
                       f"not {x.dtype} input, {y.dtype} output, {h.dtype} hidden and {c.dtype} cell state")
    absent = [i for i in _LSTM_W + _LSTM_R + _LSTM_B if ins[i] is None]
    if absent:
        raise ctx.fail("quantized needs all four gates' weights and biases (TFLite Micro takes no coupled input "
                       "and forget gates)")
    for what, indices in (("peepholes", (9, 10, 11)), ("a projection", _LSTM_PROJECTION),
                          ("layer normalization", _LSTM_NORMS)):
        if any(ins[i] is not None for i in indices):
            raise ctx.fail(f"quantized with {what} is not supported (nor by TFLite Micro)")
    activation = o.FusedActivationFunction() if o is not None else 4
    if activation != 4:
        raise ctx.fail(f"quantized with activation {_ACTIVATION_NAMES.get(activation, activation)} is not "
                       "supported (TFLite Micro's integer LSTM takes TANH only)")
    if len(x.shape) != 3:
        raise ctx.fail(f"input '{x.file_name}' is {list(x.shape)}; it takes (batch, time, input) or (time, "
                       "batch, input)")
    time_major = bool(o.TimeMajor()) if o is not None else False
    steps, batch = x.shape[:2] if time_major else x.shape[1::-1]
    width = x.shape[2]
    cells = ctx.constant(ins[_LSTM_W[0]], "input weights").shape[0]

    def scale(t) -> float:
        if t.scale is None or t.scale.size != 1:
            raise ctx.fail(f"tensor '{t.file_name}' must have one scale (TFLite Micro's integer LSTM takes no "
                           "scales per channel)")
        return float(t.scale[0])

    def zero(t) -> int:
        return int(np.asarray(t.zero_point).reshape(-1)[0])

    matrices = []
    for indices, n, what in ((_LSTM_W, width, "input weights"), (_LSTM_R, cells, "recurrent weights")):
        for i in indices:
            w = ins[i]
            data = ctx.constant(w, what)
            if w.dtype != "int8" or data.shape != (cells, n) or zero(w):
                raise ctx.fail(f"{what} '{w.file_name}' are {w.dtype} {list(data.shape)}; the layer takes int8 "
                               f"({cells}, {n}) weights of zero point 0")
            matrices.append(data)
    biases = []
    for i in _LSTM_B:
        data = ctx.constant(ins[i], "gate bias")
        if ins[i].dtype != bias_type or data.shape != (cells,):
            raise ctx.fail(f"gate bias '{ins[i].file_name}' is {ins[i].dtype} {list(data.shape)}, not {bias_type} "
                           f"({cells},)")
        biases.append(data)
    if h.shape != (batch, cells) or c.shape != (batch, cells):
        raise ctx.fail(f"states {list(h.shape)}, {list(c.shape)} do not fit {batch} rows of {cells} cells")
    _check_shape(ctx, y, (steps, batch, cells) if time_major else (batch, steps, cells))
    cell_scale = scale(c)
    if zero(c) or not checked_log2(cell_scale)[1]:
        raise ctx.fail(f"cell state '{c.file_name}' must have zero point 0 and a power-of-two scale (TFLite "
                       "Micro's rule)")
    if wide and (zero(x) or zero(h)):
        raise ctx.fail("int16 input and hidden state must have zero point 0 (16x8)")
    clip = o.CellClip() if o is not None else 0.0
    quantized_clip = int(min(max(float(clip) / float(np.float32(cell_scale)), -32768.0), 32767.0)) if clip > 0 else 0
    imp = ctx.imp
    operands = [imp.value(x),
                imp.constant(f"{ctx.name}_W", np.concatenate(matrices[:4])),
                imp.constant(f"{ctx.name}_R", np.concatenate(matrices[4:])),
                imp.constant(f"{ctx.name}_B", np.concatenate(biases)),
                imp.value(h), imp.value(c)]
    new_h = imp.declare(imp.fresh(f"{h.name}_next"), h.shape, h.dtype, imp.quant(h))
    new_c = imp.declare(imp.fresh(f"{c.name}_next"), c.shape, c.dtype, imp.quant(c))
    gates = imp.declare(imp.fresh(f"{ctx.name}_gates"), (4 * cells,), "int16")
    imp.add("TfliteLstm", ctx.name, operands, [imp.result(y), new_h, new_c, gates], steps=steps, batch=batch,
            width=width, cells=cells, time_major=time_major, wide=wide, x_scale=scale(x),
            h_scale=scale(h), cell_scale=cell_scale, x_zp=zero(x), h_zp=zero(h), clip=quantized_clip,
            w_scales=tuple(scale(ins[i]) for i in _LSTM_W), r_scales=tuple(scale(ins[i]) for i in _LSTM_R))
    imp.write_state(h, new_h)
    imp.write_state(c, new_c)


def svdf(ctx: Context, ins, outs, o) -> None:
    """float32, or TFLite's integer SVDF: int8 in and out, int16 state and time weights, or int8 ones as TFLite
    Micro takes them (LiteRT does not: a model with one follows TFLite Micro) (ops/svdf.py)."""
    x, features, times, state, y = ins[0], ins[1], ins[2], ins[4], outs[0]
    bias = ins[3]
    rank = o.Rank() if o is not None else 1
    integer = ctx.integer(x, y)
    if len(x.shape) != 2 or state is None or not state.variable:
        raise ctx.fail("takes a (batch, input) tensor and a variable state")
    feature_data, time_data = ctx.constant(features, "feature weights"), ctx.constant(times, "time weights")
    filters, width = feature_data.shape
    memory = time_data.shape[1]
    batch = x.shape[0]
    if rank < 1 or filters % rank or time_data.shape[0] != filters or x.shape[1] != width \
            or tuple(state.shape) != (batch, filters * memory):
        raise ctx.fail(f"shapes do not fit: input {list(x.shape)}, feature weights {list(feature_data.shape)}, "
                       f"time weights {list(time_data.shape)}, state {list(state.shape)}, rank {rank}")
    _check_shape(ctx, y, (batch, filters // rank))
    activation = o.FusedActivationFunction() if o is not None else 0
    imp = ctx.imp
    if integer:
        if x.dtype != "int8" or y.dtype != "int8" or features.dtype != "int8" or state.dtype not in ("int8", "int16") \
                or times.dtype != state.dtype:
            raise ctx.fail("quantized takes int8 input, output and feature weights, and int16 (or, as TFLite Micro "
                           f"does, int8) state and time weights of one type (this one: {state.dtype} state, "
                           f"{times.dtype} time weights)")
        for t in (features, times):
            if t.scale is None or t.scale.size != 1:
                raise ctx.fail(f"weights '{t.file_name}' must have one scale")
        operands = [imp.constant(features.name, feature_data, QuantParams(float(features.scale[0]), 0, rules="tflite")),
                    imp.constant(times.name, time_data, QuantParams(float(times.scale[0]), 0, rules="tflite")),
                    imp.constant(bias.name, ctx.constant(bias, "bias").astype(np.int32)) if bias is not None else ""]
        acts = {}
    else:
        _float_only(ctx, [x, state], outs)
        operands = [ctx.float_constant(features, "feature weights"), ctx.float_constant(times, "time weights"),
                    ctx.float_constant(bias, "bias") if bias is not None else ""]
        bounds = ctx.activation(activation, False)
        if activation == 4:
            raise ctx.fail("a fused TANH is not supported")
        acts = {"acts": (("clip", bounds),)} if bounds is not None else {}
    new_state = imp.declare(imp.fresh(f"{state.name}_next"), state.shape, state.dtype, imp.quant(state))
    imp.add("TfliteSvdf", ctx.name, [imp.value(x), *operands, imp.value(state)], [imp.result(y), new_state],
            rank=rank, **acts)
    imp.write_state(state, new_state)


def quantize(ctx: Context, ins, outs, o) -> None:
    """float32 -> int8/int16 (QUANTIZE), or one encoding to another."""
    x, y = ins[0], outs[0]
    q = ctx.imp.quant(y)
    if q is None:
        raise ctx.fail(f"output '{y.file_name}' has no quantization")
    imp = ctx.imp
    if x.dtype == "float32":
        imp.add("Quantize", ctx.name, [imp.value(x)], [imp.result(y)], scale=q.scale, zero_point=q.zero_point)
        return
    p = imp.quant(x)
    if p is None:
        raise ctx.fail(f"input '{x.file_name}' is {x.dtype} without quantization")
    imp.add("Requantize", ctx.name, [imp.value(x)], [imp.result(y)], from_scale=p.scale,
            from_zero_point=p.zero_point, scale=q.scale, zero_point=q.zero_point)


def dequantize(ctx: Context, ins, outs, o) -> None:
    x, y = ins[0], outs[0]
    p = ctx.imp.quant(x)
    if p is None or y.dtype != "float32":
        raise ctx.fail(f"dequantizes '{x.file_name}' ({x.dtype}{'' if p else ', no quantization'}) to {y.dtype}; "
                       "aot takes quantized int8/int16 to float32")
    imp = ctx.imp
    imp.add("Dequantize", ctx.name, [imp.value(x)], [imp.result(y)], scale=p.scale, zero_point=p.zero_point)


@dataclass(frozen=True)
class Mapping:
    rule: Callable
    options: str | None = None      # the tflite package's class of the operator's options table


MAPPINGS: dict[str, Mapping] = {
    "CONV_2D": Mapping(conv_2d, "Conv2DOptions"),
    "DEPTHWISE_CONV_2D": Mapping(depthwise_conv_2d, "DepthwiseConv2DOptions"),
    "FULLY_CONNECTED": Mapping(fully_connected, "FullyConnectedOptions"),
    "AVERAGE_POOL_2D": Mapping(average_pool_2d, "Pool2DOptions"),
    "MAX_POOL_2D": Mapping(max_pool_2d, "Pool2DOptions"),
    "ADD": Mapping(add, "AddOptions"),
    "SUB": Mapping(sub, "SubOptions"),
    "MUL": Mapping(mul, "MulOptions"),
    "SOFTMAX": Mapping(softmax, "SoftmaxOptions"),
    "RESHAPE": Mapping(reshape, "ReshapeOptions"),
    "SQUEEZE": Mapping(squeeze, "SqueezeOptions"),
    "EXPAND_DIMS": Mapping(squeeze, "ExpandDimsOptions"),
    "MEAN": Mapping(mean, "ReducerOptions"),
    "PAD": Mapping(pad, "PadOptions"),
    "PADV2": Mapping(pad, "PadV2Options"),
    "CONCATENATION": Mapping(concatenation, "ConcatenationOptions"),
    "TRANSPOSE": Mapping(transpose, "TransposeOptions"),
    "STRIDED_SLICE": Mapping(strided_slice, "StridedSliceOptions"),
    "SPLIT": Mapping(split, "SplitOptions"),
    "GATHER": Mapping(gather, "GatherOptions"),
    "MAXIMUM": Mapping(maximum_minimum("Max"), "MaximumMinimumOptions"),
    "MINIMUM": Mapping(maximum_minimum("Min"), "MaximumMinimumOptions"),
    "LEAKY_RELU": Mapping(leaky_relu, "LeakyReluOptions"),
    "HARD_SWISH": Mapping(hard_swish, "HardSwishOptions"),
    "PRELU": Mapping(prelu),
    "RESIZE_BILINEAR": Mapping(resize("linear"), "ResizeBilinearOptions"),
    "RESIZE_NEAREST_NEIGHBOR": Mapping(resize("nearest"), "ResizeNearestNeighborOptions"),
    "TRANSPOSE_CONV": Mapping(transpose_conv, "TransposeConvOptions"),
    "SVDF": Mapping(svdf, "SVDFOptions"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Mapping(unidirectional_sequence_lstm, "UnidirectionalSequenceLSTMOptions"),
    "ABS": Mapping(unary("Abs")),
    "EXP": Mapping(unary("Exp")),
    "LOG": Mapping(unary("Log")),
    "SQRT": Mapping(unary("Sqrt")),
    "RSQRT": Mapping(rsqrt),
    "NEG": Mapping(unary("Neg")),
    "FLOOR": Mapping(unary("Floor")),
    "SIN": Mapping(unary("Sin")),
    "COS": Mapping(unary("Cos")),
    "SQUARE": Mapping(square),
    "LOG_SOFTMAX": Mapping(log_softmax),
    "DIV": Mapping(float_binary("Div"), "DivOptions"),
    "POW": Mapping(float_binary("Pow")),
    "FLOOR_DIV": Mapping(float_binary("Div", "Floor")),
    "SQUARED_DIFFERENCE": Mapping(float_binary("Sub", "Square")),
    "SUM": Mapping(reduce("ReduceSum"), "ReducerOptions"),
    "REDUCE_PROD": Mapping(reduce("ReduceProd"), "ReducerOptions"),
    "REDUCE_MAX": Mapping(reduce("ReduceMax"), "ReducerOptions"),
    "REDUCE_MIN": Mapping(reduce("ReduceMin"), "ReducerOptions"),
    "ARG_MAX": Mapping(arg_max_min("ArgMax"), "ArgMaxOptions"),
    "ARG_MIN": Mapping(arg_max_min("ArgMin"), "ArgMinOptions"),
    "PACK": Mapping(pack, "PackOptions"),
    "UNPACK": Mapping(unpack, "UnpackOptions"),
    "SPLIT_V": Mapping(split_v, "SplitVOptions"),
    "TILE": Mapping(tile),
    "DEPTH_TO_SPACE": Mapping(depth_space("DepthToSpace"), "DepthToSpaceOptions"),
    "SPACE_TO_DEPTH": Mapping(depth_space("SpaceToDepth"), "SpaceToDepthOptions"),
    "CAST": Mapping(cast),
    "QUANTIZE": Mapping(quantize, "QuantizeOptions"),
    "DEQUANTIZE": Mapping(dequantize, "DequantizeOptions"),
    "RELU": Mapping(_activation_op(lambda ctx, x, y: ctx.activate(x, y, (0.0, math.inf), 1), ("int8", "int16"))),
    "RELU6": Mapping(_activation_op(lambda ctx, x, y: ctx.activate(x, y, (0.0, 6.0), 3), ("int8", "int16"))),
    "RELU_N1_TO_1": Mapping(_activation_op(lambda ctx, x, y: ctx.activate(x, y, (-1.0, 1.0), 2), ("int8",))),
    "TANH": Mapping(_curve(lambda ctx, x, y: ctx.activate(x, y, None, 4))),
    "LOGISTIC": Mapping(_curve(lambda ctx, x, y: ctx.imp.add("Sigmoid", ctx.name, [x], [y]))),
}
