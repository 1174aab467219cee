"""Resize and Upsample: per-axis source indices and weights computed at compile time, so the kernel is
table lookups and multiply-adds.

Interpolation is separable: along each resized axis an output coordinate reads T input coordinates
(nearest 1, linear 2, cubic 4) with T weights. The tables follow onnxruntime's arithmetic (float32
coordinates, its rounding for nearest, edge clamping), which the ONNX reference agrees with. The op
follows its input's layout: after a convolution a 4-D resize over H and W runs channels-last and is
vectorized along channels; otherwise along the innermost axis when that one is not resized.

Scales, sizes or roi fed at run time, with the output's shape static (declared by the model), are read
by the kernel where they decide the coordinates: a scale where the transformation uses it (asymmetric,
the half_pixel family, nearest "simple"; from sizes, the common scale of keep_aspect_ratio_policy), a
roi for tf_crop_and_resize. The kernel then computes an axis's source coordinates, indices and weights
per output coordinate, in float32 with the compile-time formulas. Otherwise the tables come from the
declared shape at compile time (sizes fed with the stretch policy are the output's shape in a valid
model; align_corners reads only sizes). A scale or size that gives another output size than the
declared one is the model's error: onnxruntime would give another shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.kernel.ir import Buffer, Builder, Cast, Expr, Kernel, binop, const, fma, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import const_input, fed_input, refuse
from aot.registry import FLOAT, AxisAttr, Layout, define

_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


@dataclass(frozen=True, eq=False)
class Taps:
    """One resized axis: output coordinate o reads input coordinates index[o, :] with weight[o, :]
    (None: a single tap of weight 1, nearest); keep[o] is 0 where the output takes the
    extrapolation value (tf_crop_and_resize), None when no coordinate leaves the input."""

    index: np.ndarray           # (out, T) int64, inside [0, in)
    weight: np.ndarray | None   # (out, T) float32
    keep: np.ndarray | None     # (out,) float32 of 0 and 1


@dataclass(frozen=True)
class FedTaps:
    """One resized axis whose taps the kernel computes at run time from a scale or roi fed at run time;
    the inputs are named by their position among the Resize node's inputs."""

    in_len: int
    out_len: int
    spec: Spec
    # how to read the scale: ("scales", input, element); ("sizes", input, ((element, in_len), ...), policy)
    # for keep_aspect_ratio_policy's common scale; () when the transformation does not read it
    scale: tuple = ()
    roi: tuple[int, int, int] | None = None     # (input, start element, end element): tf_crop_and_resize

    @property
    def count(self) -> int:
        return {"nearest": 1, "linear": 2, "cubic": 4}[self.spec.mode]


@dataclass(frozen=True)
class Spec:
    """How one Resize samples: the ONNX attributes that matter, validated."""

    mode: str
    transform: str
    nearest: str
    cubic_a: float
    exclude_outside: bool
    antialias: bool = False     # linear and cubic: when downsampling, the filter stretched by 1 / scale


# --- tables ------------------------------------------------------------------------------------------

def source_coords(spec: Spec, out_len: int, in_len: int, scale: np.float32, roi: tuple[float, float]
                  ) -> np.ndarray:
    """Each output coordinate's position in the input (float32, onnxruntime's formulas)."""
    f = np.float32
    x = np.arange(out_len, dtype=f)
    t = spec.transform
    if t == "asymmetric":
        return x / scale
    if t == "half_pixel":
        return (x + f(0.5)) / scale - f(0.5)
    if t == "pytorch_half_pixel":
        return (x + f(0.5)) / scale - f(0.5) if out_len > 1 else np.zeros(out_len, f)
    if t == "half_pixel_symmetric":
        adjustment = f(out_len) / (scale * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adjustment)
        return offset + (x + f(0.5)) / scale - f(0.5)
    if t == "align_corners":
        return x * f(in_len - 1) / f(out_len - 1) if out_len > 1 else np.zeros(out_len, f)
    start, end = f(roi[0]), f(roi[1])      # tf_crop_and_resize
    if out_len > 1:
        return start * f(in_len - 1) + x * (end - start) * f(in_len - 1) / f(out_len - 1)
    return np.full(out_len, f(0.5) * (start + end) * f(in_len - 1), f)


def _nearest_index(spec: Spec, xs: np.ndarray, downsampling: bool) -> np.ndarray:
    mode = spec.nearest
    if mode == "round_prefer_floor":
        return np.where(xs == np.trunc(xs) + np.float32(0.5), np.floor(xs), _round_away(xs))
    if mode == "round_prefer_ceil":
        return _round_away(xs)
    if mode == "floor":
        return np.floor(xs)
    if mode == "ceil":
        return np.ceil(xs)
    return np.ceil(xs) if downsampling else np.trunc(xs)    # simple (Upsample, opset-10 Resize)


def _round_away(xs: np.ndarray) -> np.ndarray:
    """C's round(): halves away from zero."""
    return np.sign(xs) * np.floor(np.abs(xs) + np.float32(0.5))


def _cubic(ratio: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the 4 neighbours at offsets -1, 0, 1, 2 (rows: outputs)."""
    s = ratio.astype(np.float64)[:, None]
    d = np.concatenate([s + 1, s, 1 - s, 2 - s], axis=1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, far)


def axis_taps(spec: Spec, in_len: int, out_len: int, scale: np.float32, roi: tuple[float, float]) -> Taps:
    """The table of one resized axis."""
    xs = source_coords(spec, out_len, in_len, scale, roi)
    keep = None
    if spec.transform == "tf_crop_and_resize":
        outside = (xs < 0) | (xs > np.float32(in_len - 1))
        keep = None if not outside.any() else (~outside).astype(np.float32)
    last = in_len - 1
    if spec.antialias and scale < 1:
        return _antialias_taps(spec, xs.astype(np.float64), in_len, float(scale), keep)
    if spec.mode == "nearest":
        index = np.clip(_nearest_index(spec, xs, scale < 1), 0, last).astype(np.int64)[:, None]
        return Taps(index, None, keep)
    if spec.mode == "linear":
        x = np.clip(xs, np.float32(0), np.float32(last))
        i1 = np.minimum(x.astype(np.int64), last)
        i2 = np.minimum(i1 + 1, last)
        d1, d2 = np.abs(x - i1.astype(np.float32)), np.abs(x - i2.astype(np.float32))
        same = i1 == i2
        d1, d2 = np.where(same, np.float32(0.5), d1), np.where(same, np.float32(0.5), d2)
        weight = np.stack([d2, d1], axis=1).astype(np.float32)
        return Taps(np.stack([i1, i2], axis=1), weight, keep)
    base = np.floor(xs)
    raw = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    weight = _cubic(xs - base, spec.cubic_a)
    if spec.exclude_outside:
        weight = np.where((raw < 0) | (raw > last), 0.0, weight)
        weight = weight / weight.sum(axis=1, keepdims=True)
    return Taps(np.clip(raw, 0, last), weight.astype(np.float32), keep)


def tflite_linear_taps(in_len: int, out_len: int, align_corners: bool, half_pixel: bool) -> Taps:
    """TFLite's integer bilinear taps (its ResizeBilinearInteger): the source coordinate in 10-bit fixed
    point from a scale rounded to 1/1024, the two neighbours below and above it (C's truncating division,
    clamped), weights 1024 - f and f for its fraction f. Int32 weights mark the taps as integer: the kernel
    sums the codes times them and rounds half away from zero (resize())."""
    scale = ((1 << 10) * in_len + out_len // 2) // out_len
    if align_corners and out_len > 1:
        scale = ((1 << 10) * (in_len - 1) + (out_len - 1) // 2) // (out_len - 1)
    index, weight = [], []
    for o in range(out_len):
        v = o * scale + scale // 2 - (1 << 9) if half_pixel else o * scale
        lo = max(int(v / (1 << 10)), 0)                    # C division: toward zero
        hi = min(int((v + (1 << 10) - 1) / (1 << 10)), in_len - 1)
        index.append((lo, hi))
        weight.append(((1 << 10) - (v - (lo << 10)), v - (lo << 10)))
    return Taps(np.array(index, np.int64), np.array(weight, np.int32), None)


def _antialias_taps(spec: Spec, xs: np.ndarray, in_len: int, scale: float, keep: np.ndarray | None) -> Taps:
    """Downsampling with antialias: the linear (triangle) or cubic filter widened by 1 / scale, so that
    every input element contributes; n taps per output, the weights normalized to sum to 1, the window
    the n inputs nearest each source coordinate (ties to the smaller index), as ONNX's reference."""
    base = np.floor(xs)
    ratio = np.where(xs == base, 1.0, xs - base)
    if spec.mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        offsets = np.arange(start, 2 - start)
        weight = np.clip(1 - np.abs((offsets[None, :] - ratio[:, None]) * scale), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        offsets = np.arange(start, 2 - start)
        d = np.abs(scale * (offsets[None, :] - ratio[:, None]))
        a = spec.cubic_a
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        weight = np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    weight = weight / weight.sum(axis=1, keepdims=True)
    n = len(offsets)
    pad = -(-n // 2)
    padded = xs + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if n % 2 == 0:
        first = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        first = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    raw = (p + first)[:, None] + np.arange(n)[None, :] - pad
    if spec.exclude_outside:
        weight = np.where((raw < 0) | (raw >= in_len), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return Taps(np.clip(raw, 0, in_len - 1), weight.astype(np.float32), keep)


# --- taps at run time (scales fed at run time) ------------------------------------------------------

F32 = "f32"


def _f(value: float) -> Expr:
    return const(value, F32)


def _trunc(x: Expr) -> Expr:
    return Cast(Cast(x, "idx"), F32)


def _floor(b: Builder, x: Expr) -> Expr:
    t = b.let("t", _trunc(x))
    return t - select(binop("lt", x, t), _f(1.0), _f(0.0))


def _ceil(b: Builder, x: Expr) -> Expr:
    t = b.let("t", _trunc(x))
    return t + select(binop("gt", x, t), _f(1.0), _f(0.0))


def _abs(x: Expr) -> Expr:
    return maximum(x, _f(0.0) - x)


def _fed_scale(b: Builder, ins: list, source: tuple) -> Expr | None:
    """The scale an axis reads, loaded (and for keep_aspect_ratio_policy picked) once per kernel."""
    if not source:
        return None
    if source[0] == "scales":
        return b.let("scale", ins[source[1]][source[2]])
    _, at, pairs, policy = source
    pick = minimum if policy == "not_larger" else maximum
    scale = None
    for element, in_len in pairs:      # float32(size) / float32(in), as _sizes_and_scales computes it
        ratio = Cast(ins[at][element], F32) / _f(float(in_len))
        scale = ratio if scale is None else pick(scale, ratio)
    return b.let("scale", scale)


def _fed_roi(b: Builder, ins: list, roi: tuple[int, int, int] | None) -> tuple[Expr, Expr] | None:
    if roi is None:
        return None
    at, start, end = roi
    return b.let("roi0", ins[at][start]), b.let("roi1", ins[at][end])


def fed_coord(b: Builder, fed: FedTaps, scale: Expr | None, roi: tuple[Expr, Expr] | None, o: Expr) -> Expr:
    """Output coordinate o's position in the input, as source_coords computes it (float32, the same
    order of operations)."""
    x = b.let("x", Cast(o, F32))
    t = fed.spec.transform
    if t in ("align_corners", "tf_crop_and_resize"):      # computed here only for a roi fed at run time
        assert roi is not None, t
        start, end = roi
        if fed.out_len > 1:
            return b.let("xs", start * _f(fed.in_len - 1)
                         + x * (end - start) * _f(fed.in_len - 1) / _f(fed.out_len - 1))
        return b.let("xs", _f(0.5) * (start + end) * _f(fed.in_len - 1))
    assert scale is not None, t
    if t == "asymmetric":
        return b.let("xs", x / scale)
    if t == "pytorch_half_pixel" and fed.out_len <= 1:
        return _f(0.0)
    centre = b.let("xs", (x + _f(0.5)) / scale)
    if t in ("half_pixel", "pytorch_half_pixel"):
        return b.let("xs", centre - _f(0.5))
    assert t == "half_pixel_symmetric", t        # the others do not read the scale (see canonical_resize)
    adjustment = b.let("adj", _f(fed.out_len) / (scale * _f(fed.in_len)))
    offset = b.let("off", _f(fed.in_len) / _f(2.0) * (_f(1.0) - adjustment))
    return b.let("xs", offset + centre - _f(0.5))


def _fed_nearest(b: Builder, fed: FedTaps, scale: Expr, xs: Expr) -> Expr:
    """The nearest input coordinate (float32 holding an integer), as _nearest_index rounds."""
    mode = fed.spec.nearest
    if mode == "floor":
        return _floor(b, xs)
    if mode == "ceil":
        return _ceil(b, xs)
    if mode == "simple":
        return select(binop("lt", scale, _f(1.0)), _ceil(b, xs), _trunc(xs))
    away = b.let("r", _trunc(_abs(xs) + _f(0.5)))
    away = b.let("r", select(binop("lt", xs, _f(0.0)), _f(0.0) - away, away))     # C's round()
    if mode == "round_prefer_ceil":
        return away
    half = binop("eq", xs, _trunc(xs) + _f(0.5))
    return select(half, _floor(b, xs), away)


def fed_taps(b: Builder, fed: FedTaps, scale: Expr | None, roi: tuple[Expr, Expr] | None, o: Expr
             ) -> tuple[list[Expr], list[Expr | None], Expr | None]:
    """The input indices (within [0, in)) and weights of output coordinate o, computed at run time as
    axis_taps computes them at compile time, and with a roi, 1.0 or 0.0 where the output takes the
    extrapolation value."""
    xs = fed_coord(b, fed, scale, roi, o)
    last = fed.in_len - 1
    keep = None
    if roi is not None:
        outside = binop("lt", xs, _f(0.0))
        keep = b.let("keep", select(outside, _f(0.0), select(binop("gt", xs, _f(float(last))), _f(0.0), _f(1.0))))
    return (*_fed_indices(b, fed, scale, xs, last), keep)


def _fed_indices(b: Builder, fed: FedTaps, scale: Expr | None, xs: Expr, last: int
                 ) -> tuple[list[Expr], list[Expr | None]]:
    def clamp(i: Expr) -> Expr:
        return b.let("i", minimum(maximum(i, 0), last))

    if fed.spec.mode == "nearest":
        return [clamp(Cast(_fed_nearest(b, fed, scale, xs), "idx"))], [None]
    if fed.spec.mode == "linear":
        x = b.let("xc", minimum(maximum(xs, _f(0.0)), _f(float(last))))
        i1 = b.let("i1", minimum(Cast(x, "idx"), last))
        i2 = b.let("i2", minimum(i1 + 1, last))
        same = binop("eq", i1, i2)
        d1 = select(same, _f(0.5), _abs(x - Cast(i1, F32)))
        d2 = select(same, _f(0.5), _abs(x - Cast(i2, F32)))
        return [i1, i2], [b.let("w", d2), b.let("w", d1)]
    return _fed_cubic(b, fed, xs, last, clamp)


def _fed_cubic(b: Builder, fed: FedTaps, xs: Expr, last: int, clamp) -> tuple[list[Expr], list[Expr | None]]:
    """Keys' cubic weights of the 4 neighbours at offsets -1..2 (as _cubic, in float32)."""
    a = fed.spec.cubic_a
    base = b.let("base", _floor(b, xs))
    ratio = b.let("ratio", xs - base)
    first = b.let("i0", Cast(base, "idx") - 1)
    raw = [first + k for k in range(4)]
    weights = []
    for k, d in enumerate((ratio + _f(1.0), ratio, _f(1.0) - ratio, _f(2.0) - ratio)):
        d = b.let("d", d)
        near = ((_f(a + 2) * d - _f(a + 3)) * d) * d + _f(1.0)
        far = ((_f(a) * d - _f(5 * a)) * d + _f(8 * a)) * d - _f(4 * a)
        w = select(binop("le", d, _f(1.0)), near, far)
        if fed.spec.exclude_outside:
            w = select(binop("lt", raw[k], 0), _f(0.0), select(binop("gt", raw[k], last), _f(0.0), w))
        weights.append(b.let("w", w))
    if fed.spec.exclude_outside:
        total = b.let("sum", weights[0] + weights[1] + weights[2] + weights[3])
        weights = [b.let("w", w / total) for w in weights]
    return [clamp(i) for i in raw], list(weights)


# --- kernel ------------------------------------------------------------------------------------------

def _strides(shape) -> list[int]:
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


def _merge_axes(in_shape, out_shape, taps) -> tuple[list[int], list[int], list[Taps | None]]:
    """Adjacent axes that are not resized merge into one (fewer loops, longer vectors)."""
    ins, outs, merged = [], [], []
    for i, o, t in zip(in_shape, out_shape, taps):
        if t is None and merged and merged[-1] is None:
            ins[-1] *= i
            outs[-1] *= o
        else:
            ins.append(i)
            outs.append(o)
            merged.append(t)
    return ins, outs, merged


@dataclass
class _Axis:
    """Per resized axis, the kernel's constant tables: element offsets into the input, weights, keep."""

    taps: int
    offset: Buffer
    weight: Buffer | None
    keep: Buffer | None


@dataclass
class _FedAxis:
    """Per resized axis whose scale is read at run time: how to compute its taps, the input stride."""

    fed: FedTaps
    scale: Expr | None
    roi: tuple[Expr, Expr] | None
    stride: int

    @property
    def taps(self) -> int:
        return self.fed.count


def resize(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    in_shape, out_shape, taps = _merge_axes(ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.outputs[0]),
                                            node.attrs["taps"])
    strides = _strides(in_shape)
    b = Builder()
    axes: list[_Axis | _FedAxis | None] = []
    for t, stride in zip(taps, strides):
        if t is None:
            axes.append(None)
            continue
        if isinstance(t, FedTaps):      # the scale read once, the taps computed per output coordinate
            axes.append(_FedAxis(t, _fed_scale(b, ins, t.scale), _fed_roi(b, ins, t.roi), stride))
            continue
        offset = ctx.const((t.index * stride).astype(np.int32), "ix")
        weight = ctx.const(t.weight, "wt") if t.weight is not None else None
        keep = ctx.const(t.keep, "keep") if t.keep is not None else None
        axes.append(_Axis(t.index.shape[1], offset, weight, keep))
    extrapolation = float(node.attrs.get("extrapolation_value", 0.0))
    x, out = ins[0], outs[0]
    out_strides = _strides(out_shape)
    lanes = ctx.target.lanes
    # integer taps (tflite_linear_taps): codes times 10-bit weights, summed in int32 (int64 for int16 codes)
    fraction_bits = 10 * sum(isinstance(t, Taps) and t.weight is not None and t.weight.dtype == np.int32
                             for t in taps)
    wide = "i64" if x.dtype == "i16" else "i32"

    def finish(value: Expr, keep: Expr | None) -> Expr:
        """Outputs whose source lies outside the input (keep 0) take the extrapolation value; integer sums
        are divided by their weights' scale, rounded half away from zero."""
        if fraction_bits:
            half = const(1 << (fraction_bits - 1), wide, value.lanes)
            positive = binop("gt", value, const(0, wide, value.lanes))
            quotient = select(positive, value + half, value - half) / const(1 << fraction_bits, wide, value.lanes)
            return Cast(quotient, x.dtype)
        return value if keep is None else value * keep + (1.0 - keep) * extrapolation

    def combine(terms, width: int, delta: Expr | int) -> Expr:
        """Sum of weight * x over the taps (vectors of `width` lanes at offset + delta)."""
        acc: Expr | None = None
        for offset, weight in terms:
            v = x.vec(offset + delta, width) if width > 1 else x[offset + delta]
            if weight is None:
                acc = v if acc is None else acc + v
            elif fraction_bits:
                term = Cast(weight, wide) * Cast(v, wide)
                acc = term if acc is None else acc + term
            else:
                acc = weight * v if acc is None else fma(weight, v, acc)
        return acc

    def level(depth: int, terms, d_off: Expr | int, keep: Expr | None) -> None:
        axis = axes[depth]
        inner = depth == len(in_shape) - 1
        if axis is None and inner:      # contiguous, not resized: vectors along it
            n = out_shape[depth]
            width = lanes if n >= lanes else 1
            main = n - n % width
            for lo, hi, w in ((0, main, width), (main, n, 1)):
                if hi > lo:
                    with b.loop("j", lo, hi, w) as j:
                        b.store(out, d_off + j, finish(combine(terms, w, j), keep))
            return
        with b.loop("o", 0, out_shape[depth]) as o:
            if axis is None:
                new_terms = [(off + o * strides[depth], wt) for off, wt in terms]
                new_keep = keep
            else:
                new_terms, new_keep = _taps_at(b, axis, o, terms, keep)
            if inner:
                b.store(out, d_off + o, finish(combine(new_terms, 1, 0), new_keep))
            else:
                level(depth + 1, new_terms, d_off + o * out_strides[depth], new_keep)

    level(0, [(0, None)], 0, None)
    return Kernel(name, params, b.block())


def _taps_at(b: Builder, axis: _Axis | _FedAxis, o: Expr, terms, keep: Expr | None):
    """Extend every (offset, weight) term by this axis's taps at output coordinate o."""
    if isinstance(axis, _FedAxis):
        indices, weights, fed_keep = fed_taps(b, axis.fed, axis.scale, axis.roi, o)
        offsets = [b.let("src", i * axis.stride) for i in indices]
        if fed_keep is not None:
            keep = fed_keep if keep is None else b.let("keep", keep * fed_keep)
    else:
        offsets = [b.let("src", Cast(axis.offset[o * axis.taps + k], "idx")) for k in range(axis.taps)]
        weights = [b.let("w", axis.weight[o * axis.taps + k]) if axis.weight is not None else None
                   for k in range(axis.taps)]
    new_terms = []
    for off, wt in terms:
        for src, w in zip(offsets, weights):
            weight = w if wt is None else (wt if w is None else b.let("ww", wt * w))
            new_terms.append((off + src, weight))
    if isinstance(axis, _Axis) and axis.keep is not None:
        k = b.let("keep", axis.keep[o])
        keep = k if keep is None else b.let("keep", keep * k)
    return new_terms, keep


# --- ONNX Resize / Upsample -> Resize(taps) ----------------------------------------------------------

def _spec(node: Node, opset: int) -> Spec:
    mode = node.attrs.get("mode", "nearest")
    if isinstance(mode, bytes):
        mode = mode.decode()
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    if mode not in _MODES:
        raise refuse(node, f"mode '{mode}' is not supported ({', '.join(_MODES)})")
    old = node.op == "Upsample" or opset < 11
    transform = "asymmetric" if old else node.attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = "simple" if old else node.attrs.get("nearest_mode", "round_prefer_floor")
    if transform not in _TRANSFORMS:
        raise refuse(node, f"coordinate_transformation_mode '{transform}' is not supported")
    if nearest not in _NEAREST:
        raise refuse(node, f"nearest_mode '{nearest}' is not supported")
    antialias = bool(int(node.attrs.get("antialias", 0)))
    if antialias and mode == "nearest":
        raise refuse(node, "antialias=1 is defined for the linear and cubic modes, not nearest")
    return Spec(mode, transform, nearest, float(node.attrs.get("cubic_coeff_a", -0.75)),
                bool(node.attrs.get("exclude_outside", 0)), antialias)


def _fed(rw: Rewriter, node: Node, index: int) -> str:
    """The node's input `index` when it is computed (fed at run time) and not empty, else ''."""
    name = fed_input(rw, node, index)
    return name if name and 0 not in rw.values[name].shape else ""


def _scales_index(rw: Rewriter, node: Node) -> int | None:
    """Which input holds the scales: 1 for Upsample and opset-10 Resize, 2 from opset 11; None for an
    Upsample of opset 7, whose scales are an attribute."""
    if node.op == "Upsample" or rw.graph.opset < 11:
        return None if "scales" in node.attrs else 1
    return 2


def _sizes_and_scales(rw: Rewriter, node: Node, rank: int, in_shape: tuple[int, ...], axes: list[int]
                      ) -> tuple[list[int], list[np.float32]]:
    """Output sizes and per-axis scales (float32, as onnxruntime uses them) from the node's inputs. With
    scales or sizes fed at run time: the declared output's sizes and out/in as scales, which only the
    tables that do not read the scale use (see _fed_sources)."""
    declared = rw.values[node.outputs[0]].shape
    scales_at = _scales_index(rw, node)
    if scales_at is not None and (_fed(rw, node, scales_at) or (scales_at == 2 and _fed(rw, node, 3))):
        return list(declared), [np.float32(o) / np.float32(i) for o, i in zip(declared, in_shape)]
    if scales_at is None:
        scales_arr, sizes_arr = np.asarray(node.attrs["scales"], np.float32), None
    elif scales_at == 1:
        scales_arr, sizes_arr = const_input(rw, node, 1, "scales"), None
    else:
        scales_arr = _constant_or_empty(rw, node, 2, "scales")
        sizes_arr = _constant_or_empty(rw, node, 3, "sizes")
    full_scale = [np.float32(1)] * rank
    full_size = list(in_shape)
    if sizes_arr is None:
        if scales_arr is None:
            raise refuse(node, "neither scales nor sizes are given")
        for axis, s in zip(axes, scales_arr.astype(np.float32)):
            full_scale[axis] = np.float32(s)
            full_size[axis] = int(np.float32(in_shape[axis]) * np.float32(s))
        return full_size, full_scale
    for axis, s in zip(axes, sizes_arr):
        full_size[axis] = int(s)
        full_scale[axis] = np.float32(int(s)) / np.float32(in_shape[axis])
    policy = _policy(node)
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        scale = pick(full_scale[a] for a in axes)
        for axis in axes:
            full_scale[axis] = scale
            full_size[axis] = int(math.floor(float(scale) * in_shape[axis] + 0.5))
    return full_size, full_scale


def _constant_or_empty(rw: Rewriter, node: Node, index: int, what: str) -> np.ndarray | None:
    """A constant input, None when absent or empty (a computed empty tensor included)."""
    name = node.inputs[index] if len(node.inputs) > index else ""
    if name and name not in rw.constants and 0 in rw.values[name].shape:
        return None
    array = const_input(rw, node, index, what)
    return None if array is None or array.size == 0 else array


def _policy(node: Node) -> str:
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise refuse(node, f"keep_aspect_ratio_policy '{policy}' is not supported")
    return policy


# transformations whose coordinates read the scale (nearest "simple" reads it too, with asymmetric)
_READS_SCALE = ("asymmetric", "half_pixel", "pytorch_half_pixel", "half_pixel_symmetric")


def _per_axis(rw: Rewriter, node: Node, name: str, what: str, count: int) -> None:
    shape = rw.values[name].shape
    if shape != (count,):
        raise refuse(node, f"{what} of shape {list(shape)} is not {count} values")


def _fed_sources(rw: Rewriter, node: Node, spec: Spec, axes: list[int]) -> tuple[dict[int, tuple], dict[int, str]]:
    """Per axis, what its taps read at run time: the scale source (input name, element...) and the roi
    (input name, start, end); empty when everything is known now."""
    at = _scales_index(rw, node)
    scales, sizes = (_fed(rw, node, at) if at is not None else ""), (_fed(rw, node, 3) if at == 2 else "")
    roi = _fed(rw, node, 1) if at == 2 and spec.transform == "tf_crop_and_resize" else ""
    scale_source: dict[int, tuple] = {}
    if spec.transform in _READS_SCALE and sizes and _policy(node) != "stretch":
        _per_axis(rw, node, sizes, "sizes", len(axes))
        pairs = tuple((i, rw.values[node.inputs[0]].shape[a]) for i, a in enumerate(axes))
        scale_source = {a: ("sizes", sizes, pairs, _policy(node)) for a in axes}
    elif spec.transform in _READS_SCALE and scales and not sizes:
        _per_axis(rw, node, scales, "scales", len(axes))
        scale_source = {a: ("scales", scales, i) for i, a in enumerate(axes)}
    if spec.antialias and ((scales and not sizes) or scale_source):
        raise refuse(node, "antialias=1 with its scale fed at run time is not supported: the filter's width "
                           "depends on the scale (give the scales, or sizes with the stretch policy)")
    roi_source = {}
    if roi:
        _per_axis(rw, node, roi, "roi", 2 * len(axes))
        roi_source = {a: (roi, i, len(axes) + i) for i, a in enumerate(axes)}
    return scale_source, roi_source


def _fed_taps(rw: Rewriter, node: Node, spec: Spec, sizes: list[int], axes: list[int]
              ) -> tuple[list[str], dict[int, FedTaps]]:
    """The inputs a Resize reads besides x, and the axes whose taps it computes at run time. An axis of
    length 1 both sides reads element 0 whatever its scale and roi."""
    scale_source, roi_source = _fed_sources(rw, node, spec, axes)
    in_shape = rw.values[node.inputs[0]].shape
    extra: list[str] = []

    def position(name: str) -> int:
        if name not in extra:
            extra.append(name)
        return 1 + extra.index(name)

    fed = {}
    for axis in sorted(set(scale_source) | set(roi_source)):
        if in_shape[axis] == sizes[axis] == 1:
            continue
        scale = scale_source.get(axis, ())
        if scale:
            scale = (scale[0], position(scale[1]), *scale[2:])
        roi = roi_source.get(axis)
        if roi:
            roi = (position(roi[0]), roi[1], roi[2])
        fed[axis] = FedTaps(in_shape[axis], sizes[axis], spec, scale, roi)
    return extra, fed


def canonical_resize(rw: Rewriter, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    if rw.values[x].dtype == "int64":       # admitted by the registry for sizes only
        raise refuse(node, f"input '{x}' is int64; the data is resized as float32")
    in_shape = rw.values[x].shape
    rank = len(in_shape)
    spec = _spec(node, rw.graph.opset)
    axes = [int(a) % rank for a in node.attrs.get("axes", range(rank))]
    sizes, scales = _sizes_and_scales(rw, node, rank, in_shape, axes)
    if tuple(sizes) != rw.values[y].shape:
        raise refuse(node, f"computed output shape {sizes} differs from the model's {list(rw.values[y].shape)}")
    if any(s == 0 for s in sizes):
        raise refuse(node, "an empty output is not supported")
    if node_quant(rw.values, node) is not None:     # a TFLite model's int8/int16 RESIZE_*: on the codes
        _tflite_resize(rw, node, spec, in_shape, sizes, scales)
        return
    extra, fed = _fed_taps(rw, node, spec, sizes, axes)
    roi = None
    if spec.transform == "tf_crop_and_resize" and not _fed(rw, node, 1):
        roi = _roi(rw, node, rank, axes)
    taps: list[Taps | FedTaps | None] = []
    for axis in range(rank):
        if axis in fed:
            taps.append(fed[axis])
            continue
        identity = sizes[axis] == in_shape[axis] and scales[axis] == 1 and (roi is None or roi[axis] == (0, 1))
        taps.append(None if identity else axis_taps(spec, in_shape[axis], sizes[axis], scales[axis],
                                                    roi[axis] if roi else (0.0, 1.0)))
    if all(t is None for t in taps):
        rw.add("Copy", node.name, [x], [y])
        return
    rw.add("Resize", node.name, [x, *extra] if fed else [x], [y], taps=tuple(taps),
           extrapolation_value=float(node.attrs.get("extrapolation_value", 0.0)))


def _tflite_resize(rw: Rewriter, node: Node, spec: Spec, in_shape: tuple[int, ...], sizes: list[int],
                   scales: list) -> None:
    """TFLite resizes quantized tensors' codes as they are, whatever the two encodings: nearest with the
    float taps (the same indices), bilinear with its own integer ones."""
    if node_quant(rw.values, node).rules != "tflite":
        raise refuse(node, "a quantized Resize is supported in TFLite models only")
    taps: list[Taps | None] = []
    for i, o, scale in zip(in_shape, sizes, scales):
        if i == o:
            taps.append(None)
        elif spec.mode == "nearest":
            taps.append(axis_taps(spec, i, o, scale, (0.0, 1.0)))
        else:
            t = tflite_linear_taps(i, o, spec.transform == "align_corners", spec.transform == "half_pixel")
            if t.index.max() >= i:
                raise refuse(node, f"TFLite's bilinear coordinates from {i} to {o} read past the input")
            taps.append(t)
    rw.add("Resize", node.name, node.inputs[:1], node.outputs, taps=tuple(taps), extrapolation_value=0.0)


def _roi(rw: Rewriter, node: Node, rank: int, axes: list[int]) -> list[tuple[float, float]]:
    roi = const_input(rw, node, 1, "roi")
    if roi is None or roi.size != 2 * len(axes):
        raise refuse(node, "tf_crop_and_resize needs a constant roi with a start and an end per axis")
    full = [(0.0, 1.0)] * rank
    for i, axis in enumerate(axes):
        full[axis] = (float(roi[i]), float(roi[len(axes) + i]))
    return full


def check_resize(graph: Graph, node: Node) -> str | None:
    if "taps" not in node.attrs:      # the ONNX node, before canonicalize
        return None
    x, y = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    for axis, (t, i, o) in enumerate(zip(node.attrs["taps"], x, y)):
        if t is None and i != o:
            return f"axis {axis} is not resized but changes from {i} to {o}"
        if isinstance(t, FedTaps):
            if (t.in_len, t.out_len) != (i, o):
                return f"the run-time taps of axis {axis} map {t.out_len} outputs into {t.in_len} inputs, not " \
                       f"{o} into {i}"
            continue
        if t is not None and (t.index.shape[0] != o or t.index.max() >= i):
            return f"the table of axis {axis} does not map {o} outputs into {i} inputs"
    return None


# int64 for sizes fed at run time (canonical_resize refuses any other input that is not float32)
define("Resize", canonical=canonical_resize, lower=resize, layout=Layout.FOLLOW,
       axis_attrs={"taps": AxisAttr.PER_AXIS}, check=check_resize, dtypes=FLOAT | frozenset({"int64"}))
define("Upsample", canonical=canonical_resize)
