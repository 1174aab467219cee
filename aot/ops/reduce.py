"""Reduce over any axes, keeping dims; vectorized along the last axis when it is not reduced.
(Mean and max over H and W of a 4-D tensor become global pooling instead.)

Each fn is init, a transform of each element, a combining op and a transform of the result (ReduceL2
is sqrt of the sum of squares, as onnxruntime computes it); log_sum_exp takes two passes, the max
first, so that exp never overflows: log(sum exp(x - max)) + max (an infinite max shifts by 0).

Axes computed at run time: where the static shapes allow more than one set of axes (input (3, 2, 2),
output (3, 2) without keepdims), each is reduced and the one the axes name at run time is kept."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from functools import partial

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel import math as kmath
from aot.kernel.ir import Builder, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.movement import _strides
from aot.ops.rewrite import axes_from_zero, const_input, refuse, select_at_run_time, view
from aot.registry import FLOAT, AxisAttr, Layout, define


def _same(x: Expr) -> Expr:
    return x


def _add(acc: Expr, x: Expr) -> Expr:
    return acc + x


def _mul(acc: Expr, x: Expr) -> Expr:
    return acc * x


def _square(x: Expr) -> Expr:
    return x * x


# fn -> (init, per element, combine, result); mean divides by the count in `reduce`.
_FNS: dict[str, tuple[float, Callable[[Expr], Expr], Callable[[Expr, Expr], Expr], Callable[[Expr], Expr]]] = {
    "sum": (0.0, _same, _add, _same), "mean": (0.0, _same, _add, _same),
    "max": (-np.inf, _same, maximum, _same), "min": (np.inf, _same, minimum, _same),
    "prod": (1.0, _same, _mul, _same),
    "l1": (0.0, kmath.fabs, _add, _same), "l2": (0.0, _square, _add, kmath.sqrt),
    "sum_square": (0.0, _square, _add, _same), "log_sum": (0.0, _same, _add, kmath.log),
}
# Reductions of plain arithmetic, which float64 computes too (the others call float32 math functions).
_FLOAT64_FNS = frozenset({"sum", "mean", "max", "min", "prod", "sum_square"})
_OPS = {"ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceSum": "sum", "ReduceProd": "prod",
        "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sum_square", "ReduceLogSum": "log_sum",
        "ReduceLogSumExp": "log_sum_exp"}
_FLOAT64_OPS = frozenset(op for op, fn in _OPS.items() if fn in _FLOAT64_FNS)


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

    def accumulate(src: Expr, width: int, init: float, each, combine) -> Expr:
        acc = b.local("acc", const(init, "f64" if ins[0].dtype == "f64" else "f32", width))

        def walk(depth: int, off: Expr) -> None:
            if depth == len(reduced):
                b.assign(acc, combine(acc, each(ins[0].vec(off, width) if width > 1 else ins[0][off])))
                return
            with b.loop("r", 0, shape[reduced[depth]]) as r:
                walk(depth + 1, off + r * in_strides[reduced[depth]])
        walk(0, src)
        return acc

    def reduce_at(src: Expr, dst: Expr, width: int) -> None:
        if fn == "log_sum_exp":
            top = accumulate(src, width, -np.inf, _same, maximum)
            shift = b.let("shift", select(binop("eq", kmath.fabs(top), np.inf), 0.0, top))
            total = accumulate(src, width, 0.0, lambda v: kmath.exp(v - shift), _add)
            result = kmath.log(total) + shift
        else:
            init, each, combine, finish = _FNS[fn]
            result = finish(accumulate(src, width, init, each, combine))
            if fn == "mean":
                result = result * (1.0 / count) if count else result * np.nan
        b.store(outs[0], dst, result)

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


def _axes_choices(node: Node, shape: tuple[int, ...], out: tuple[int, ...], keepdims: bool) -> list[tuple[int, ...]]:
    """The axes a reduction whose axes are computed at run time may reduce, by the static shapes, each
    without its axes of size 1 (reducing one or not gives the same values): with keepdims, the axes that
    shrink; without, each way of dropping len(shape) - len(out) axes that leaves `out` (input (3, 2, 2)
    and output (3, 2): axis 1 or axis 2)."""
    if keepdims:
        if len(out) != len(shape):
            raise refuse(node, f"output shape {list(out)} does not keep the dims of {list(shape)}")
        return [tuple(a for a, (d, o) in enumerate(zip(shape, out)) if d != o)]
    drops = {tuple(a for a in axes if shape[a] != 1)
             for axes in itertools.combinations(range(len(shape)), len(shape) - len(out))
             if tuple(d for a, d in enumerate(shape) if a not in axes) == tuple(out)}
    if not drops:
        raise refuse(node, f"output shape {list(out)} is not the input's shape {list(shape)} without some axes")
    return sorted(drops)


def _long_axes(shape: tuple[int, ...]) -> list[int]:
    return [a for a, d in enumerate(shape) if d != 1]


def _named_axes(rw: Rewriter, node: Node, axes: str, shape: tuple[int, ...]) -> str:
    """A (1, 1) float32 number for the axes longer than 1 that the run-time `axes` name: bit i set when
    they name the i-th (exact in float32 up to 24 bits). Each axis is compared with every long axis, a
    long axis is named when any comparison holds (max over the axes), and the bits add up in a Gemm by
    the powers of 2."""
    long = _long_axes(shape)
    if len(long) > 24:
        raise refuse(node, f"the axes are computed at run time and the input has {len(long)} axes longer than 1")
    counted = axes_from_zero(rw, node, axes, len(shape))
    count = rw.values[counted].shape[0]
    long_axes = rw.constant(f"{node.name}_long_axes", np.array([long], rw.values[axes].dtype))
    hits = rw.value(f"{axes}_hits", (count, len(long)), "bool")
    rw.add("Equal", node.name + "_hits", [view(rw, node, counted, (count, 1)), long_axes], [hits])
    flags = rw.value(f"{axes}_flags", (count, len(long)))
    rw.add("Cast", node.name + "_flags", [hits], [flags])
    named = rw.value(f"{axes}_named", (1, len(long)))
    rw.add("Reduce", node.name + "_named", [flags], [named], fn="max", axes=(0,))
    number = rw.value(f"{axes}_number", (1, 1))
    bits = rw.constant(f"{node.name}_bits", (2.0 ** np.arange(len(long), dtype=np.float32))[:, None])
    rw.add("Gemm", node.name + "_number", [named, bits, ""], [number])
    return number


def canonical_reduce(rw: Rewriter, node: Node) -> None:
    """Reduce keeping dims and a view that drops them. Axes computed at run time: each set of axes the
    shapes allow is reduced, and the one the axes name at run time kept (select_at_run_time). (An axes
    input of length 0 is a constant by now: the frontend folds an input that holds no elements.)"""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    fn = _OPS[node.op]
    dtype = rw.values[x].dtype
    if dtype != "float32" and not (dtype == "float64" and fn in _FLOAT64_FNS):
        also = f" (float64: {', '.join(sorted(_FLOAT64_OPS))})" if dtype == "float64" else ""
        raise refuse(node, f"only float32 data is supported, not {dtype}{also}")
    keepdims = bool(node.attrs.get("keepdims", 1))
    axes_input = node.inputs[1] if len(node.inputs) > 1 else ""
    if axes_input and axes_input not in rw.constants:
        long = _long_axes(shape)
        choices = [(sum(2 ** long.index(a) for a in axes), partial(_reduce_to, rw, node, fn, axes, keepdims))
                   for axes in _axes_choices(node, shape, rw.values[out].shape, keepdims)]
        select_at_run_time(rw, node, out, choices, partial(_named_axes, rw, node, axes_input, shape))
        return
    axes_value = const_input(rw, node, 1, "axes")
    axes = axes_value if axes_value is not None else node.attrs.get("axes")
    if axes is None or len(axes) == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            _reduce_to(rw, node, fn, (), keepdims, out)
            return
        axes = range(len(shape))
    _reduce_to(rw, node, fn, axes, keepdims, out)


def _reduce_to(rw: Rewriter, node: Node, fn: str, axes: Iterable[int], keepdims: bool, target: str) -> None:
    """`target` = fn of the node's input over `axes` (none: fn of each element)."""
    x = node.inputs[0]
    shape = rw.values[x].shape
    axes = tuple(sorted({int(a) % len(shape) for a in axes}))
    if not axes:
        _each_element(rw, node, fn, target)
        return
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    reduced = target if keepdims else rw.like(target + "_keepdims", target, kept)
    # global pooling, whose kernels are float32's
    if len(shape) == 4 and axes == (2, 3) and fn in ("mean", "max") and rw.values[x].dtype == "float32":
        rw.add("GlobalAveragePool" if fn == "mean" else "GlobalMaxPool", node.name, [x], [reduced])
    else:
        rw.add("Reduce", node.name, [x], [reduced], fn=fn, axes=axes)
    if not keepdims:
        view(rw, node, reduced, rw.values[target].shape, target)


def _each_element(rw: Rewriter, node: Node, fn: str, target: str) -> None:
    """A reduction over no axis (noop_with_empty_axes, or only axes of size 1): the input itself where
    fn transforms nothing (sum, mean, max, min, prod), else fn per element (ReduceL1 gives |x|,
    ReduceSumSquare x*x, as the ONNX reference computes)."""
    x = node.inputs[0]
    shape = rw.values[x].shape
    if fn in _FNS and _FNS[fn][1] is _same and _FNS[fn][3] is _same:
        view(rw, node, x, rw.values[target].shape, target)
        return
    each = target if rw.values[target].shape == shape else rw.like(target + "_each", x)
    rw.add("Reduce", node.name, [x], [each], fn=fn, axes=())
    if each != target:
        view(rw, node, each, rw.values[target].shape, target)


define("Reduce", lower=reduce, layout=Layout.FOLLOW, axis_attrs={"axes": AxisAttr.AXES})
for _op in _OPS:      # float32 data (float64 for some); int64 for axes computed at run time
    define(_op, canonical=canonical_reduce, dtypes=FLOAT | {"int64", "float64"})
