"""Reduce (sum, mean, max, min) over any axes, keeping dims; vectorized along the last axis when it is
not reduced. (Reductions over H and W of a 4-D tensor become global pooling instead.)"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Expr, Kernel, const, maximum, minimum
from aot.ops import LowerContext
from aot.ops.movement import _strides
from aot.ops.registry import AxisAttr, Layout, define
from aot.ops.rewrite import const_input, view

_INIT = {"sum": 0.0, "mean": 0.0, "max": -3.4028234663852886e38, "min": 3.4028234663852886e38}


def reduce(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    shape = ctx.graph.shape(node.inputs[0])
    axes = set(node.attrs["axes"])
    fn = node.attrs["fn"]
    in_strides = _strides(shape)
    out_strides = _strides(tuple(1 if a in axes else d for a, d in enumerate(shape)))
    kept = [a for a in range(len(shape)) if a not in axes]
    reduced = sorted(axes)
    count = int(np.prod([shape[a] for a in reduced], dtype=np.int64))
    vector_axis = kept[-1] if kept and kept[-1] == len(shape) - 1 else None
    b = Builder()

    def combine(acc: Expr, v: Expr) -> Expr:
        return {"max": maximum, "min": minimum}[fn](acc, v) if fn in ("max", "min") else acc + v

    def reduce_at(src: Expr, dst: Expr, width: int) -> None:
        acc = b.local("acc", const(_INIT[fn], "f32", width))

        def walk(depth: int, off: Expr) -> None:
            if depth == len(reduced):
                b.assign(acc, combine(acc, ins[0].vec(off, width) if width > 1 else ins[0][off]))
                return
            with b.loop("r", 0, shape[reduced[depth]]) as r:
                walk(depth + 1, off + r * in_strides[reduced[depth]])
        walk(0, src)
        b.store(outs[0], dst, acc * (1.0 / count) if fn == "mean" else acc)

    outer = [a for a in kept if a != vector_axis]

    def over_outputs(depth: int, src: Expr, dst: Expr) -> None:
        if depth < len(outer):
            with b.loop("o", 0, shape[outer[depth]]) as o:
                over_outputs(depth + 1, src + o * in_strides[outer[depth]], dst + o * out_strides[outer[depth]])
            return
        if vector_axis is None:
            reduce_at(src, dst, 1)
            return
        n, lanes = shape[vector_axis], ctx.target.lanes
        main = n - n % lanes if lanes > 1 else 0
        if main:
            with b.loop("j", 0, main, lanes) as j:
                reduce_at(src + j, dst + j, lanes)
        if n > main:
            with b.loop("j", main, n) as j:
                reduce_at(src + j, dst + j, 1)

    over_outputs(0, const(0), const(0))
    return Kernel(name, params, b.block())


def canonical_reduce(rw: Rewriter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    axes_input = const_input(rw, node, 1, "axes")
    axes = axes_input if axes_input is not None else node.attrs.get("axes")
    if axes is None or len(axes) == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            view(rw, node, x, shape, out)
            return
        axes = range(len(shape))
    axes = tuple(sorted({int(a) % len(shape) for a in axes}))
    fn = node.op[len("Reduce"):].lower()
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    keepdims = bool(node.attrs.get("keepdims", 1))
    target = out if keepdims else rw.value(out + "_keepdims", kept)
    if len(shape) == 4 and axes == (2, 3) and fn in ("mean", "max"):      # global pooling
        rw.add("GlobalAveragePool" if fn == "mean" else "GlobalMaxPool", node.name, [x], [target])
    else:
        rw.add("Reduce", node.name, [x], [target], fn=fn, axes=axes)
    if not keepdims:
        view(rw, node, target, rw.values[out].shape, out)


define("Reduce", lower=reduce, layout=Layout.FOLLOW, axis_attrs={"axes": AxisAttr.AXES})
for _op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"):
    define(_op, canonical=canonical_reduce)
