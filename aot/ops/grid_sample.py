"""GridSample: sample the input (N, C, *spatial) at the normalized points of a run-time grid
(N, *out, rank), with nearest, linear or cubic interpolation and zeros, border or reflection padding.

Per output point the kernel denormalizes the grid's coordinates (the grid lists them innermost axis
first), maps points outside the input by the padding mode, and then for every channel sums the taps
(2 per axis for linear, 4 for cubic, 1 for nearest) times their weights, as ONNX's reference does.
Tap indices are clamped for the memory access; with zeros padding an outside tap weighs 0.
"""

from __future__ import annotations

import itertools

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel import math as kmath
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import define

_MODES = {"bilinear": "linear", "linear": "linear", "bicubic": "cubic", "cubic": "cubic", "nearest": "nearest"}
_PADDINGS = ("zeros", "border", "reflection")
_CUBIC_A = -0.75


def canonical_grid_sample(rw: Rewriter, node: Node) -> None:
    mode = _MODES.get(node.attrs.get("mode", "bilinear" if rw.graph.opset < 20 else "linear"))
    padding = node.attrs.get("padding_mode", "zeros")
    rank = len(rw.values[node.inputs[0]].shape) - 2
    if mode is None or padding not in _PADDINGS:
        raise refuse(node, f"mode '{node.attrs.get('mode')}' / padding_mode '{padding}' is not supported")
    if rank not in (1, 2, 3):
        raise refuse(node, f"{rank}-D sampling is not supported (1-D to 3-D are)")
    rw.add("GridSample", node.name, node.inputs[:2], node.outputs, mode=mode, padding=padding,
           align_corners=int(node.attrs.get("align_corners", 0)))


def grid_sample(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, grid, out = ins[0], ins[1], outs[0]
    n, c, *dims = ctx.graph.shape(node.inputs[0])
    points = int(np.prod(ctx.graph.shape(node.outputs[0])[2:], dtype=np.int64))
    rank, mode, padding = len(dims), node.attrs["mode"], node.attrs["padding"]
    align = bool(node.attrs["align_corners"])
    plane = int(np.prod(dims, dtype=np.int64))
    b = Builder()
    with b.loop("n", 0, n) as i, b.loop("p", 0, points) as p:
        base = (i * points + p) * rank
        taps_per_axis = []
        for axis, size in enumerate(dims):       # the grid gives the innermost axis first
            coord = b.let("g", grid[base + (rank - 1 - axis)])
            taps_per_axis.append(_axis_taps(b, coord, size, align, mode, padding))
        strides = [int(np.prod(dims[a + 1:], dtype=np.int64)) for a in range(rank)]
        taps = []
        for combo in itertools.product(*taps_per_axis):
            weight = combo[0][1]
            for _, w in combo[1:]:
                weight = weight * w
            offset = sum((index * stride for (index, _), stride in zip(combo, strides)), const(0))
            taps.append((b.let("tap", offset), b.let("w", weight)))
        with b.loop("c", 0, c) as ch:
            channel = (i * c + ch) * plane
            total: Expr = const(0.0, "f32")
            for offset, weight in taps:
                total = total + x[channel + offset] * weight
            b.store(out, (i * c + ch) * points + p, total)
    return Kernel(name, params, b.block())


def _axis_taps(b: Builder, g: Expr, size: int, align: bool, mode: str, padding: str) -> list[tuple[Expr, Expr]]:
    """(index, weight) of each tap along one axis for normalized coordinate g."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    v = (g + 1.0) * (0.5 * (size - 1)) if align else ((g + 1.0) * size - 1.0) * 0.5
    if mode == "nearest":
        v = kmath.round(v)
    if padding == "border":              # only points outside [lo, hi]: lo may be -0.5
        outside = binop("or", binop("lt", v, lo), binop("gt", v, hi))
        v = select(outside, minimum(maximum(v, 0.0), size - 1.0), v)
    elif padding == "reflection":
        v = _reflect(v, lo, hi)
    v = b.let("v", v)
    if mode == "nearest":
        return [_pixel(b, Cast(v, "i32"), size, lo, hi, padding, const(1.0, "f32"))]
    first = b.let("x0", kmath.floor(v))
    t = b.let("t", v - first)
    start = Cast(first, "i32")
    if mode == "linear":
        weights = [1.0 - t, t]
        offsets = [0, 1]
    else:
        weights = _cubic_weights(t)
        offsets = [-1, 0, 1, 2]
    return [_pixel(b, start + k, size, lo, hi, padding, w) for k, w in zip(offsets, weights)]


def _pixel(b: Builder, index: Expr, size: int, lo: float, hi: float, padding: str,
           weight: Expr) -> tuple[Expr, Expr]:
    """An integer tap position as a safe element index and its weight, by the padding mode."""
    if padding == "zeros":
        inside = binop("and", binop("ge", index, 0), binop("lt", index, size))
        weight = select(inside, weight, 0.0)
    elif padding == "reflection":
        index = Cast(_reflect(Cast(index, "f32"), lo, hi), "i32")
    clamped = Cast(minimum(maximum(index, 0), size - 1), "idx")
    return b.let("i", clamped), b.let("w", weight)


def _reflect(v: Expr, lo: float, hi: float) -> Expr:
    """Fold v into [lo, hi] by reflecting at the nearer border, as often as needed."""
    span = hi - lo
    if span <= 0:
        return const(lo, "f32") if v.lanes == 1 else v * 0.0 + lo
    below, above = binop("lt", v, lo), binop("gt", v, hi)
    dist = select(below, lo - v, v - hi)
    turns = kmath.floor(dist * (1.0 / span))
    rest = dist - turns * span
    even = binop("eq", turns - kmath.floor(turns * 0.5) * 2.0, 0.0)
    from_lo, from_hi = lo + rest, hi - rest
    folded = select(below, select(even, from_lo, from_hi), select(even, from_hi, from_lo))
    return select(binop("or", below, above), folded, v)


def _cubic_weights(t: Expr) -> list[Expr]:
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for fraction t."""
    a = _CUBIC_A

    def near(x: Expr) -> Expr:       # |x| <= 1
        return ((x * (a + 2.0)) - (a + 3.0)) * x * x + 1.0

    def far(x: Expr) -> Expr:        # 1 < |x| < 2
        return ((x * a - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


define("GridSample", canonical=canonical_grid_sample, lower=grid_sample)
