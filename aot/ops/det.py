"""Det: the determinant of each square matrix in a (..., M, M) tensor, by LU decomposition with partial
pivoting in a scratch copy (a second output of the node, planned in the workspace like any tensor)."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Kernel, binop, const, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import define


def canonical_det(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise refuse(node, f"the input {list(shape)} is not a stack of square matrices")
    scratch = rw.value(node.name + "_lu", (shape[-1] * shape[-1],))
    rw.add("Det", node.name, node.inputs[:1], [node.outputs[0], scratch])


def det(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, out, a = ins[0], outs[0], outs[1]
    m = ctx.graph.shape(node.inputs[0])[-1]
    count = int(np.prod(ctx.graph.shape(node.inputs[0])[:-2], dtype=np.int64))
    b = Builder()
    with b.loop("mat", 0, count) as mat:
        with b.loop("i", 0, m * m) as i:
            b.store(a, i, x[mat * (m * m) + i])
        result = b.local("det", const(1.0, "f32"))
        with b.loop("k", 0, m) as k:
            pivot_row = b.local("pivot", k)
            with b.loop("r", k + 1, m) as r:
                larger = binop("gt", _abs(a[r * m + k]), _abs(a[pivot_row * m + k]))
                b.assign(pivot_row, select(larger, r, pivot_row))
            with b.loop("j", 0, m) as j:         # swap rows k and pivot (a no-op when they are one row)
                top = b.let("top", a[k * m + j])
                b.store(a, k * m + j, a[pivot_row * m + j])
                b.store(a, pivot_row * m + j, top)
            pivot = b.let("p", a[k * m + k])
            swapped = binop("ne", pivot_row, k)
            b.assign(result, select(swapped, -result, result) * pivot)
            safe = b.let("safe", select(binop("eq", pivot, 0.0), 1.0, pivot))
            with b.loop("r", k + 1, m) as r:
                factor = b.let("f", a[r * m + k] / safe)
                with b.loop("j", k + 1, m) as j:
                    b.store(a, r * m + j, a[r * m + j] - factor * a[k * m + j])
        b.store(out, mat, result)
    return Kernel(name, params, b.block())


def _abs(v):
    return select(binop("lt", v, 0.0), -v, v)


define("Det", canonical=canonical_det, lower=det)
