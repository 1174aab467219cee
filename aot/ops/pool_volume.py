"""3-D pooling (MaxPool, AveragePool, LpPool over D, H, W) on the model's NCDHW layout: every output
element visits its window's taps (unrolled: windows are small), each tap weighed by whether it lies
inside the input, or, for averages that count padding, inside the padded input."""

from __future__ import annotations

import itertools

import numpy as np

from aot.graph.ir import Node
from aot.kernel import math as kmath
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.registry import define

_LOWEST = float("-inf")


def volume_pool(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, out = ins[0], outs[0]
    n, c, *size = ctx.graph.shape(node.inputs[0])
    out_size = ctx.graph.shape(node.outputs[0])[2:]
    kind, kernel = node.attrs["kind"], node.attrs["kernel"]
    strides, dilations, pads = node.attrs["strides"], node.attrs["dilations"], node.attrs["pads"]
    include_pad, p = bool(node.attrs.get("count_include_pad", 0)), node.attrs.get("p", 2)
    rank = len(size)
    in_strides = [int(np.prod(size[a + 1:], dtype=np.int64)) for a in range(rank)]
    out_strides = [int(np.prod(out_size[a + 1:], dtype=np.int64)) for a in range(rank)]
    b = Builder()
    with b.loop("nc", 0, n * c) as nc, b.loop("o", 0, int(np.prod(out_size, dtype=np.int64))) as o:
        coords = [b.let("oc", binop("div", o, out_strides[a]) - binop("div", o, out_strides[a] * out_size[a])
                        * out_size[a]) for a in range(rank)]
        starts = [b.let("start", coords[a] * strides[a] - pads[a]) for a in range(rank)]
        acc = b.local("acc", const(_LOWEST if kind == "MaxPool" else 0.0, "f32"))
        count = b.local("count", const(0.0, "f32"))
        for taps in itertools.product(*(range(k) for k in kernel)):
            position = [starts[a] + taps[a] * dilations[a] for a in range(rank)]
            inside = _all(binop("and", binop("ge", q, 0), binop("lt", q, size[a])) for a, q in enumerate(position))
            counted = inside if not include_pad else _all(
                binop("lt", q, size[a] + pads[rank + a]) for a, q in enumerate(position))
            at = sum((Cast(minimum(maximum(q, 0), size[a] - 1), "idx") * in_strides[a]
                      for a, q in enumerate(position)), const(0))
            value = b.let("v", x[nc * int(np.prod(size, dtype=np.int64)) + at])
            if kind == "MaxPool":
                b.assign(acc, select(inside, maximum(acc, value), acc))
            else:
                term = value if kind == "AveragePool" else kmath.pow_const(_abs(value), float(p))
                b.assign(acc, acc + select(inside, term, 0.0))
                b.assign(count, count + select(counted, 1.0, 0.0))
        result: Expr = acc
        if kind == "AveragePool":
            result = acc / count
        elif kind == "LpPool":
            result = kmath.pow_const(acc, 1.0 / p)
        b.store(out, nc * int(np.prod(out_size, dtype=np.int64)) + o, result)
    return Kernel(name, params, b.block())


def _all(conditions) -> Expr:
    result = None
    for cond in conditions:
        result = cond if result is None else binop("and", result, cond)
    return result


def _abs(x: Expr) -> Expr:
    return select(binop("lt", x, 0.0), -x, x)


define("VolumePool", lower=volume_pool)
