"""Pooling in NHWC, vectorized along channels: MaxPool, AveragePool and LpPool (dilated windows too),
GlobalAveragePool, GlobalMaxPool, GlobalLpPool (an LpPool over the whole image)."""

from __future__ import annotations

from math import prod

from aot.graph.ir import Node, Rewriter
from aot.graph.node_quant import Quant, node_quant
from aot.graph.quant import RANGES
from aot.kernel import math
from aot.kernel.ir import Broadcast, Builder, Cast, Expr, Kernel, binop, const, maximum, minimum
from aot.ops import LowerContext
from aot.ops.conv.blocks import channel_blocks
from aot.ops.conv.geometry import Geometry
from aot.ops.conv.tiling import Order, spatial_loops
from aot.ops.quantized import int_dtype, quantize, saturate, widen
from aot.ops.rewrite import crop, fused_acts, lift_1d, refuse, spatial_attrs, view
from aot.registry import Layout, QuantForm, define

_LOWEST = -3.4028234663852886e38


def pool(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, out = ins[0], outs[0]
    n, h, w, c = ctx.graph.shape(node.inputs[0])
    _, oh, ow, _ = ctx.graph.shape(node.outputs[0])
    kh, kw = node.attrs["kernel"]
    pads = tuple(node.attrs["pads"])
    dy, dx = node.attrs.get("dilations", (1, 1))
    g = Geometry(n, h, w, c, oh, ow, c, kh, kw, tuple(node.attrs["strides"]), (dy, dx), pads)
    is_max = node.op == "MaxPool"
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    blocks = channel_blocks(c, ctx.target.lanes, 2)
    values = _Values(ctx.graph.values[node.inputs[0]].dtype, is_max, node_quant(ctx.graph.values, node),
                     node.attrs.get("p"))
    b = Builder()

    def divisor(oh_: Expr, ow_: Expr, kh_lo, kh_hi, kw_lo, kw_hi) -> Expr:
        """The window's count of taps: inside the input, or inside the padded input (pads counted)."""
        if include_pad:
            hs, ws = g.in_row(oh_, 0), g.in_row(ow_, 1)
            rows = minimum(binop("div", h + pads[2] - hs + (dy - 1), const(dy)), kh)
            cols = minimum(binop("div", w + pads[3] - ws + (dx - 1), const(dx)), kw)
            return Cast(rows * cols, "i32")
        return Cast((kh_hi - kh_lo) * (kw_hi - kw_lo), "i32")

    def tile(rows, n_, oh_, ow_, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        for blk in blocks:
            with b.loop("cb", 0, blk.count) as cb:
                block(blk, blk.start + cb * blk.width, n_, oh_, ow_, kh_lo, kh_hi, kw_lo, kw_hi)

    def block(blk, ch0, n_, oh_, ow_, kh_lo, kh_hi, kw_lo, kw_hi) -> None:
        accs = [b.local("acc", values.init(blk.lanes)) for _ in range(blk.nr)]
        with b.loop("kh", kh_lo, kh_hi) as r:
            with b.loop("kw", kw_lo, kw_hi) as s:
                base = ((n_ * h + g.in_row(oh_, 0) + r * dy) * w + g.in_row(ow_, 1) + s * dx) * c + ch0
                for j, acc in enumerate(accs):
                    b.assign(acc, values.combine(acc, x.vec(base + j * blk.lanes, blk.lanes)))
        taps = None if is_max or values.p else divisor(oh_, ow_, kh_lo, kh_hi, kw_lo, kw_hi)
        inv = None if taps is None else b.let("count", taps) if values.tflite else b.let("inv", 1.0 / Cast(taps, "f32"))
        obase = ((n_ * oh + oh_) * ow + ow_) * c + ch0
        for j, acc in enumerate(accs):
            b.store(out, obase + j * blk.lanes, values.finish(acc, inv))

    spatial_loops(b, g, Order(1), tile)
    return Kernel(name, params, b.block())


class _Values:
    """What a pool accumulates: floats, or integers (int32 sums of x - zero point for averages,
    requantized at the end; maxima compared as integers, same scale in and out); or, for LpPool (p set),
    the float sum of |x|**p, whose p-th root is taken at the end."""

    def __init__(self, dtype: str, is_max: bool, quant: Quant | None, p: int | None = None):
        self.dtype, self.is_max, self.quant, self.p = dtype, is_max, quant, p
        self.integer = dtype != "float32"
        # TFLite averages the codes themselves (input and output share one encoding), dividing the int32 sum
        # by the count of taps, rounded half away from zero; finish then takes the count, not its inverse
        self.tflite = quant is not None and quant.rules == "tflite" and not is_max

    def init(self, lanes: int) -> Expr:
        if not self.integer:
            return const(_LOWEST if self.is_max else 0.0, "f32", lanes)
        return const(RANGES[self.dtype][0] if self.is_max else 0, "i32", lanes)

    def combine(self, acc: Expr, v: Expr) -> Expr:
        if self.p:
            return acc + math.pow_const(math.fabs(v), self.p)
        if self.integer:
            v = widen(v) if self.is_max or self.tflite else widen(v) - self.quant.x_zp
        return maximum(acc, v) if self.is_max else acc + v

    def finish(self, acc: Expr, inv: Expr | float | None) -> Expr:
        if self.p:
            return math.pow_const(acc, 1.0 / self.p)
        if self.is_max:
            return Cast(acc, int_dtype(self.dtype)) if self.integer else acc
        if not self.integer:
            return acc * inv
        q = self.quant
        if self.tflite:
            count = inv
            if acc.lanes > 1 and count.lanes == 1:
                count = Broadcast(count, acc.lanes)
            half = binop("div", count, 2)
            sign = binop("shr", acc, 31)                    # -1 for a negative sum, else 0
            average = binop("div", acc + (binop("xor", half, sign) - sign), count)
            return saturate(average, q.qmin, q.qmax, q.y_dtype)
        real_over_scale = Cast(acc, "f32") * inv * (q.x_scale / q.y_scale)
        return quantize(real_over_scale, q.y_zp, q.qmin, q.qmax, q.y_dtype)


def global_pool(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    n, h, w, c = ctx.graph.shape(node.inputs[0])
    is_max = node.op == "GlobalMaxPool"
    values = _Values(ctx.graph.values[node.inputs[0]].dtype, is_max, node_quant(ctx.graph.values, node))
    b = Builder()
    with b.loop("n", 0, n) as n_:
        for blk in channel_blocks(c, ctx.target.lanes, 4):
            with b.loop("cb", 0, blk.count) as cb:
                ch0 = b.let("ch0", blk.start + cb * blk.width)
                accs = [b.local("acc", values.init(blk.lanes)) for _ in range(blk.nr)]
                with b.loop("p", 0, h * w) as p:
                    base = (n_ * (h * w) + p) * c + ch0
                    for j, acc in enumerate(accs):
                        b.assign(acc, values.combine(acc, ins[0].vec(base + j * blk.lanes, blk.lanes)))
                taps = const(h * w, "i32") if values.tflite else 1.0 / (h * w)
                for j, acc in enumerate(accs):
                    b.store(outs[0], n_ * c + ch0 + j * blk.lanes, values.finish(acc, taps))
    return Kernel(name, params, b.block())


def canonical_pool(rw: Rewriter, node: Node) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise refuse(node, "the Indices output is not supported")
    kernel = tuple(node.attrs["kernel_shape"])
    # SAME with a kernel shorter than the stride gives a negative total pad, split as the reference that
    # runs the op does: onnxruntime's AveragePool (opset 19 on) and LpPool, ONNX's reference the MaxPool
    # onnxruntime refuses.
    attrs = spatial_attrs(rw, node, kernel, negative="floor" if node.op == "MaxPool" else "trunc")
    pads = attrs["pads"]
    if any(p < 0 for p in pads):        # SAME with a kernel shorter than the stride: the window shifts
        rank = len(kernel)
        full = (0, 0, *pads[:rank], 0, 0, *pads[rank:])
        node = node.with_(inputs=(crop(rw, node, node.inputs[0], full), *node.inputs[1:]))
        attrs["pads"] = tuple(max(p, 0) for p in pads)
    attrs.update(fused_acts(node))
    if node.op == "AveragePool":
        attrs["count_include_pad"] = int(node.attrs.get("count_include_pad", 0))
    if node.op == "LpPool":
        attrs["p"] = int(node.attrs.get("p", 2))
        if attrs["p"] < 1:
            raise refuse(node, f"p={attrs['p']} is not supported (p >= 1)")
    if len(kernel) == 1:
        x2, out2, _ = lift_1d(rw, node, attrs)
        rw.add(node.op, node.name, [x2], [out2], **attrs)
        view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    elif len(kernel) == 2:
        rw.add(node.op, node.name, [node.inputs[0]], node.outputs[:1], **attrs)
    elif len(kernel) == 3 and node_quant(rw.values, node) is None:
        rw.add("VolumePool", node.name, [node.inputs[0]], node.outputs[:1], kind=node.op, **attrs)
    else:
        raise refuse(node, f"{len(kernel)}-D pooling is not supported")


def canonical_global_pool(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    if len(shape) == 4:
        rw.keep(node.with_(attrs=fused_acts(node)))
    elif len(shape) >= 3:     # 1-D, 3-D, ...: the spatial axes seen as one row of a 2-D input
        x2 = view(rw, node, node.inputs[0], shape[:2] + (1, prod(shape[2:])))
        out2 = rw.like(node.outputs[0] + "_2d", node.outputs[0], shape[:2] + (1, 1))
        rw.add(node.op, node.name, [x2], [out2], **fused_acts(node))
        view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    else:
        raise refuse(node, f"input of rank {len(shape)} is not supported (rank 3 or more)")


def canonical_global_lp_pool(rw: Rewriter, node: Node) -> None:
    """GlobalLpPool: LpPool with the whole spatial extent as its window."""
    shape = rw.values[node.inputs[0]].shape
    if len(shape) < 3:
        raise refuse(node, f"input of rank {len(shape)} is not supported (rank 3 or more)")
    attrs = {"kernel_shape": tuple(shape[2:]), "p": node.attrs.get("p", 2)}
    canonical_pool(rw, Node("LpPool", node.name, node.inputs, node.outputs, attrs))


_INT8 = frozenset({"float32", "int8", "uint8", "int16"})
define("MaxPool", canonical=canonical_pool, lower=pool, layout=Layout.NHWC, moves_values=True, dtypes=_INT8,
       quant=QuantForm.MOVE)
define("AveragePool", canonical=canonical_pool, lower=pool, layout=Layout.NHWC, quant=QuantForm.RESCALE)
define("LpPool", canonical=canonical_pool, lower=pool, layout=Layout.NHWC)
define("GlobalAveragePool", canonical=canonical_global_pool, lower=global_pool, layout=Layout.NHWC,
       quant=QuantForm.RESCALE)
define("GlobalMaxPool", canonical=canonical_global_pool, lower=global_pool, layout=Layout.NHWC)
define("GlobalLpPool", canonical=canonical_global_lp_pool)
