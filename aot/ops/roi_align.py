"""RoiAlign: for each region of interest (run-time boxes and batch indices), average or take the maximum
of bilinear samples on a grid in each output bin, as ONNX's reference (and onnxruntime) compute it:
a sample more than one pixel outside the input weighs 0, one inside clamps to the last row or column,
and sampling_ratio 0 takes ceil(bin size) samples per bin, decided at run time per region.
"""

from __future__ import annotations

from aot.graph.ir import Node, Rewriter
from aot.kernel import math as kmath
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import FLOAT, define


def canonical_roi_align(rw: Rewriter, node: Node) -> None:
    mode = node.attrs.get("mode", "avg")
    transform = node.attrs.get("coordinate_transformation_mode", "half_pixel" if rw.graph.opset >= 16
                               else "output_half_pixel")
    if mode not in ("avg", "max") or transform not in ("half_pixel", "output_half_pixel"):
        raise refuse(node, f"mode '{mode}' / coordinate_transformation_mode '{transform}' is not supported")
    if len(rw.values[node.inputs[0]].shape) != 4:
        raise refuse(node, "the input must be (N, C, H, W)")
    rw.add("RoiAlign", node.name, node.inputs[:3], node.outputs, mode=mode, half_pixel=transform == "half_pixel",
           sampling_ratio=int(node.attrs.get("sampling_ratio", 0)),
           spatial_scale=float(node.attrs.get("spatial_scale", 1.0)))


def roi_align(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, rois, batch_index, out = ins[0], ins[1], ins[2], outs[0]
    n, c, h, w = ctx.graph.shape(node.inputs[0])
    regions, _, ph, pw = ctx.graph.shape(node.outputs[0])
    scale, ratio = node.attrs["spatial_scale"], node.attrs["sampling_ratio"]
    offset = 0.5 if node.attrs["half_pixel"] else 0.0
    is_max = node.attrs["mode"] == "max"
    b = Builder()
    with b.loop("r", 0, regions) as r:
        image = b.let("image", Cast(minimum(maximum(batch_index[r], 0), n - 1), "idx"))
        start_w, start_h, end_w, end_h = (b.let("edge", rois[r * 4 + k] * scale - offset) for k in range(4))
        size_h, size_w = end_h - start_h, end_w - start_w
        if not node.attrs["half_pixel"]:
            size_h, size_w = maximum(size_h, 1.0), maximum(size_w, 1.0)
        bin_h, bin_w = b.let("bin_h", size_h * (1.0 / ph)), b.let("bin_w", size_w * (1.0 / pw))
        grid_h = const(ratio) if ratio > 0 else b.let("grid_h", Cast(kmath.ceil(bin_h), "idx"))
        grid_w = const(ratio) if ratio > 0 else b.let("grid_w", Cast(kmath.ceil(bin_w), "idx"))
        samples = b.let("samples", maximum(grid_h * grid_w, 0))
        count = b.let("count", Cast(maximum(samples, 1), "f32"))
        with b.loop("ch", 0, c) as ch, b.loop("oy", 0, ph) as oy, b.loop("ox", 0, pw) as ox:
            plane = (image * c + ch) * (h * w)
            acc = b.local("acc", const(float("-inf") if is_max else 0.0, "f32"))
            with b.loop("iy", 0, grid_h) as iy, b.loop("ix", 0, grid_w) as ix:
                y = start_h + Cast(oy, "f32") * bin_h + (Cast(iy, "f32") + 0.5) * bin_h / Cast(grid_h, "f32")
                xx = start_w + Cast(ox, "f32") * bin_w + (Cast(ix, "f32") + 0.5) * bin_w / Cast(grid_w, "f32")
                taps = _bilinear(b, b.let("y", y), b.let("x", xx), h, w)
                terms = [b.let("term", weight * x[plane + pos]) for pos, weight in taps]
                if is_max:
                    b.assign(acc, maximum(acc, maximum(maximum(terms[0], terms[1]), maximum(terms[2], terms[3]))))
                else:
                    b.assign(acc, acc + terms[0] + terms[1] + terms[2] + terms[3])
            result = select(binop("gt", samples, 0), acc, 0.0) if is_max else acc / count
            b.store(out, ((r * c + ch) * ph + oy) * pw + ox, result)
    return Kernel(name, params, b.block())


def _bilinear(b: Builder, y: Expr, x: Expr, h: int, w: int) -> list[tuple[Expr, Expr]]:
    """The four (flat position, weight) taps of a sample; all weights 0 more than a pixel outside."""
    outside = binop("or", binop("or", binop("lt", y, -1.0), binop("gt", y, float(h))),
                    binop("or", binop("lt", x, -1.0), binop("gt", x, float(w))))
    rows, cols = _axis(b, y, h), _axis(b, x, w)
    taps = []
    for (row, wy) in rows:
        for (col, wx) in cols:
            taps.append((b.let("pos", row * w + col), b.let("wt", select(outside, 0.0, wy * wx))))
    return taps


def _axis(b: Builder, v: Expr, size: int) -> list[tuple[Expr, Expr]]:
    """(low, 1 - frac), (high, frac) along one axis, clamped at the last index as the reference does."""
    v = maximum(v, 0.0)
    low = Cast(v, "i32")
    at_end = binop("ge", low, size - 1)
    v = b.let("v", select(at_end, float(size - 1), v))
    low = b.let("low", Cast(minimum(low, size - 1), "idx"))
    high = b.let("high", select(at_end, low, low + 1))
    frac = b.let("frac", v - Cast(low, "f32"))
    return [(low, 1.0 - frac), (high, frac)]


define("RoiAlign", canonical=canonical_roi_align, lower=roi_align, dtypes=FLOAT | {"int64"})
