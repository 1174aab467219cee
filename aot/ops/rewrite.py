"""Helpers for the canonical rules that rewrite ONNX nodes into aot's op set (see registry.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from aot.errors import ModelError, UnsupportedOpError
from aot.graph.ir import Node, Rewriter
from aot.registry import Rule


def refuse(node: Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"node '{node.name}' ({node.op}): {why}")


def axis_attr(node: Node, rank: int, default: int) -> int:
    """The node's `axis` attribute (`default` if absent) as an axis number 0..rank-1; an axis outside
    [-rank, rank) is a ModelError (onnx's inference misses some, e.g. one beyond 32 bits)."""
    axis = int(node.attrs.get("axis", default))
    if not -rank <= axis < rank:
        raise ModelError(f"node '{node.name}' ({node.op}): axis {axis} is out of range for a rank-{rank} input")
    return axis % rank


def fused_acts(node: Node) -> dict:
    """The clamps lower_quantized folded into an integer node, to carry over to its rewritten form."""
    return {"acts": node.attrs["acts"]} if "acts" in node.attrs else {}


def const_input(rw: Rewriter, node: Node, index: int, what: str) -> np.ndarray | None:
    """The constant at input `index`, None if the input is absent; refuse a computed one."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    name = node.inputs[index]
    if name not in rw.constants:
        raise refuse(node, f"{what} must be a constant (an initializer), but '{name}' is computed")
    return rw.constants[name]


def fed_input(rw: Rewriter, node: Node, index: int) -> str:
    """The node's input `index` when it is present and computed at run time (not a constant), else ''."""
    name = node.inputs[index] if index < len(node.inputs) else ""
    return name if name and name not in rw.constants else ""


def emit(rw: Rewriter, node: Node, op: str, inputs: list[str], hint: str, shape: tuple[int, ...] | None = None,
         dtype: str | None = None, **attrs) -> str:
    """One `op` node on `inputs` writing a new value (named after the node and `hint`), of the inputs'
    broadcast shape and the first one's dtype unless given; returns the value."""
    shape = tuple(np.broadcast_shapes(*(rw.values[i].shape for i in inputs))) if shape is None else shape
    out = rw.value(f"{node.name}_{hint}", shape, dtype or rw.values[inputs[0]].dtype)
    rw.add(op, f"{node.name}_{hint}", inputs, [out], **attrs)
    return out


def as_int64(rw: Rewriter, node: Node, name: str) -> str:
    """An integer value fed at run time as int64 (a Cast from int32), so index arithmetic cannot overflow."""
    return name if rw.values[name].dtype == "int64" else emit(rw, node, "Cast", [name], name + "_i64", dtype="int64")


def gather_along(rw: Rewriter, node: Node, x: str, axis: int, positions: str) -> str:
    """`x` gathered along `axis` at `positions` (an int64 vector computed at run time), each clamped into
    [0, dim) first: values fed at run time decide which elements are taken, but never read outside `x`.
    (Gather alone would wrap a negative position from the end.) The axis must not be empty."""
    dim = rw.values[x].shape[axis]
    low = emit(rw, node, "Max", [positions, rw.constant(f"{node.name}_zero", np.array(0, np.int64))], "low")
    clamped = emit(rw, node, "Min", [low, rw.constant(f"{node.name}_last", np.array(dim - 1, np.int64))], "clamped")
    shape = list(rw.values[x].shape)
    shape[axis] = rw.values[positions].shape[0]
    out = rw.like(f"{node.name}_gathered", x, tuple(shape))
    rw.add("Gather", f"{node.name}_gather", [x, clamped], [out], axis=axis)
    return out


def view(rw: Rewriter, node: Node, src: str, shape: tuple[int, ...], out: str | None = None) -> str:
    """`src` seen with another shape (a Reshape, which moves no data); returns the new value."""
    out = out or rw.like(f"{src}_view", src, shape)
    rw.add("Reshape", node.name + "_view", [src], [out], shape=tuple(shape))
    return out


def axes_from_zero(rw: Rewriter, node: Node, axes: str, rank: int) -> str:
    """Axes computed at run time, flattened to one dimension and counted from 0: a negative axis plus
    `rank`, as ONNX reads -rank..-1. An axis out of range stays out of range, naming no axis."""
    dtype, size = rw.values[axes].dtype, int(np.prod(rw.values[axes].shape, dtype=np.int64))
    flat = view(rw, node, axes, (size,))
    negative = emit(rw, node, "Less", [flat, rw.constant(f"{node.name}_zero", np.zeros(1, dtype))], "negative",
                    dtype="bool")
    shifted = emit(rw, node, "Add", [flat, rw.constant(f"{node.name}_rank", np.full(1, rank, dtype))], "plus_rank")
    return emit(rw, node, "Where", [negative, shifted, flat], "from_0", dtype=dtype)


def select_at_run_time(rw: Rewriter, node: Node, out: str, choices: Sequence[tuple[float, Callable[[str], None]]],
                       key: Callable[[], str]) -> None:
    """`out` computed each of the ways the static shapes allow, the one a value fed at run time names
    kept: each choice is (number, emit), emit(target) adding the nodes that compute `target` (a value
    like `out`) that way; a Where per choice keeps the one whose number equals the one element of
    `key()`, a value computed at run time (made only when there are two choices or more). When none
    does, the model fed a value its declared shapes contradict: the last choice, never a crash."""
    if len(choices) == 1:
        choices[0][1](out)
        return
    ones = (1,) * len(rw.values[out].shape)
    chooser = view(rw, node, key(), ones)
    picked = rw.like(f"{out}_choice", out)
    choices[-1][1](picked)
    for i in reversed(range(len(choices) - 1)):
        number, emit = choices[i]
        value = rw.like(f"{out}_choice", out)
        emit(value)
        number_value = rw.constant(f"{node.name}_choice", np.full(ones, number, rw.values[chooser].dtype))
        hit = rw.value(f"{out}_is_choice", ones, "bool")
        rw.add("Equal", node.name + "_is_choice", [chooser, number_value], [hit])
        target = out if i == 0 else rw.like(f"{out}_selected", out)
        rw.add("Where", node.name + "_select", [hit, value, picked], [target])
        picked = target


def unary_rule(fn: str, *defaults: tuple[str, float]) -> Rule:
    """An ONNX activation as a Unary node: fn(x, params), params from attributes with their defaults."""
    def rule(rw: Rewriter, node: Node) -> None:
        params = tuple(float(node.attrs.get(key, value)) for key, value in defaults)
        rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn=fn, params=params)
    return rule


def crop(rw: Rewriter, node: Node, x: str, pads: tuple[int, ...]) -> str:
    """`x` without the rows a negative pad removes at either end of each axis."""
    shape = rw.values[x].shape
    rank = len(shape)
    begin = tuple(max(-p, 0) for p in pads[:rank])
    kept = tuple(n - b - max(-e, 0) for n, b, e in zip(shape, begin, pads[rank:]))
    if any(k < 0 for k in kept):
        raise refuse(node, f"pads {list(pads)} crop more than the input's shape {list(shape)}")
    out = rw.like(f"{x}_cropped", x, kept)
    rw.add("Slice", node.name + "_crop", [x], [out], starts=begin, steps=(1,) * rank)
    return out


def spatial_attrs(rw: Rewriter, node: Node, kernel: tuple[int, ...], negative: str = "") -> dict:
    """kernel, strides, dilations and explicit pads (begins, then ends) of a Conv or pool. auto_pad SAME's
    total pad is negative where the kernel is shorter than the stride; without `negative` it is taken as
    0. Pools split it as the reference that runs them does, and the caller crops for a negative pad:
    `negative="floor"` as ONNX's reference (begin = total // 2 for SAME_UPPER: the window shifts; SAME_LOWER
    refused, where its output is not even the inferred shape), `"trunc"` as onnxruntime (C's division
    towards zero: begin = total / 2 for SAME_UPPER, (total + 1) / 2 for SAME_LOWER)."""
    rank = len(kernel)
    x = rw.values[node.inputs[0]].shape[2:]
    strides = tuple(node.attrs.get("strides", (1,) * rank))
    dilations = tuple(node.attrs.get("dilations", (1,) * rank))
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ModelError(f"node '{node.name}' ({node.op}): auto_pad '{auto_pad}' is none of NOTSET, SAME_UPPER, "
                         f"SAME_LOWER, VALID")
    for what, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != rank or any(v < 1 for v in values):
            raise ModelError(f"node '{node.name}' ({node.op}): {what} {list(values)} is not {rank} sizes of at least 1")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(x, kernel, strides, dilations):
            total = (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size
            if total < 0 and negative == "floor" and auto_pad == "SAME_LOWER":
                raise refuse(node, "auto_pad SAME_LOWER with a kernel shorter than the stride (a negative total "
                                   "pad) is not supported")
            total = total if negative else max(0, total)
            if negative == "trunc":
                begin.append(_toward_zero(total + (auto_pad == "SAME_LOWER"), 2))
            else:
                small = total // 2
                begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        pads = tuple(begin + end)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * rank)
    else:
        pads = tuple(node.attrs.get("pads", (0,) * (2 * rank)))
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads}


def _toward_zero(a: int, b: int) -> int:
    """a / b rounded towards zero, as C divides."""
    return -(-a // b) if a < 0 else a // b


def lift_1d(rw: Rewriter, node: Node, attrs: dict, weight: str | None = None) -> tuple[str, str, str | None]:
    """For 1-D ops: view x (N,C,L) as (N,C,1,L); return (x, out placeholder, weight) to use in 2-D."""
    x = node.inputs[0]
    n, c, length = rw.values[x].shape
    x2 = view(rw, node, x, (n, c, 1, length))
    on, oc, ol = rw.values[node.outputs[0]].shape
    out2 = rw.like(node.outputs[0] + "_2d", node.outputs[0], (on, oc, 1, ol))
    w2 = None
    if weight is not None:
        w = rw.constants[weight]
        w2 = rw.constant(weight + "_2d", w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), rw.values[weight].quant)
    for key in ("kernel", "strides", "dilations"):
        attrs[key] = (1,) + tuple(attrs[key])
    attrs["pads"] = (0, attrs["pads"][0], 0, attrs["pads"][1])
    return x2, out2, w2
