"""Indexing and selection: Gather, GatherElements, GatherND, ScatterND, ScatterElements, OneHot, and the
ops that compute indices: ArgMax/ArgMin, TopK, Hardmax, plus CumSum.

Indices read from a tensor at run time are made safe before they address memory: a negative index
counts from the end (ONNX), and one still outside [0, n) is clamped to the nearest end, so a kernel
never reads or writes outside its buffers whatever the index values. (onnxruntime reports such an index
as an error; here the result is the first or last entry, or 0 from an empty axis, which has none.)
Constant indices are checked at compile time.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.kernel.ir import Buffer, Builder, Cast, Expr, Kernel, Var, binop, const, maximum, minimum, select
from aot.ops import DTYPES, LowerContext
from aot.ops.movement import _strides, copy_loops
from aot.ops.rewrite import const_input, fed_input, refuse, view
from aot.registry import ALL_DTYPES, QuantForm, define, same_shape

NUMERIC = frozenset({"float32", "int8", "uint8", "int32", "int64"})
INDICES = frozenset({"int32", "int64"})


def _prod(dims) -> int:
    return int(np.prod(dims, dtype=np.int64))


def safe_index(raw: Expr, n: int) -> Expr:
    """An index loaded at run time as an `idx` inside [0, n): negative ones wrap once, the rest clamp."""
    wrapped = select(binop("lt", raw, 0), raw + n, raw)
    return Cast(minimum(maximum(wrapped, 0), n - 1), "idx")


def _at(buf: Buffer, index: Expr, width: int) -> Expr:
    return buf.vec(index, width) if width > 1 else buf[index]


def _loops(b: Builder, dims: list[int], body, depth: int = 0, coords: tuple[Var, ...] = ()) -> None:
    """body(coords) for every coordinate of `dims` (row-major)."""
    if depth == len(dims):
        body(coords)
        return
    with b.loop("i", 0, dims[depth]) as i:
        _loops(b, dims, body, depth + 1, coords + (i,))


def _dot(coords, strides) -> Expr:
    total: Expr | int = 0
    for c, s in zip(coords, strides):
        total = c * s + total
    return total if isinstance(total, Expr) else const(total)


def _zeros(b: Builder, lanes: int, out: Buffer, size: int) -> None:
    """out = 0: what a gather from empty data gives (any index is out of range, and there is no end
    to clamp to)."""
    b.chunks("i", size, lanes, lambda i, width: b.store(out, i, const(0, out.dtype, width)))


# --- gathers --------------------------------------------------------------------------------------------

def gather(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[o, j, t] = data[o, index[j], t], the trailing t axis copied as vectors."""
    ins, outs, params = ctx.io(node)
    data, indices = ins
    shape = ctx.graph.shape(node.inputs[0])
    axis = node.attrs["axis"]
    outer, n, inner = _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])
    count = _prod(ctx.graph.shape(node.inputs[1]))
    b = Builder()
    if not n:
        _zeros(b, ctx.target.lanes, outs[0], outer * count * inner)
    elif outer and count and inner:
        with b.loop("o", 0, outer) as o, b.loop("j", 0, count) as j:
            src = b.let("src", safe_index(indices[j], n))
            copy_loops(b, ctx.target.lanes, [inner], data, [1], (o * n + src) * inner, outs[0], [1],
                       (o * count + j) * inner)
    return Kernel(name, params, b.block())


def gather_elements(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[i] = data[i with i[axis] replaced by index[i]]."""
    ins, outs, params = ctx.io(node)
    data, indices = ins
    shape, ishape = ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.inputs[1])
    axis = node.attrs["axis"]
    strides = _strides(shape)
    b = Builder()

    def body(coords) -> None:
        pos = _dot(coords, _strides(ishape))
        src = safe_index(indices[pos], shape[axis]) * strides[axis]
        b.store(outs[0], pos, data[_dot([c for a, c in enumerate(coords) if a != axis],
                                        [s for a, s in enumerate(strides) if a != axis]) + src])
    if not shape[axis]:
        _zeros(b, ctx.target.lanes, outs[0], _prod(ishape))
    elif _prod(ishape):
        _loops(b, list(ishape), body)
    return Kernel(name, params, b.block())


def _nd_offset(b: Builder, indices: Buffer, row: Expr, dims: tuple[int, ...], strides: list[int]) -> Expr:
    """The element offset of an index tuple (indices[row * k : row * k + k]) into axes `dims`."""
    k = len(dims)
    offset: Expr = const(0)
    for u in range(k):
        offset = offset + safe_index(indices[row * k + u], dims[u]) * strides[u]
    return b.let("at", offset)


def gather_nd(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Each index tuple (the last axis of indices) picks a slice of data; batch_dims leading axes are shared."""
    ins, outs, params = ctx.io(node)
    data, indices = ins
    shape, ishape = ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.inputs[1])
    batch_dims = node.attrs["batch_dims"]
    k = ishape[-1]
    batches, rows = _prod(shape[:batch_dims]), _prod(ishape[batch_dims:-1])
    inner = _prod(shape[batch_dims + k:])
    per_batch = _prod(shape[batch_dims:])
    strides = _strides(shape[batch_dims:])[:k]
    b = Builder()
    if not _prod(shape[batch_dims:batch_dims + k]):
        _zeros(b, ctx.target.lanes, outs[0], batches * rows * inner)
    elif batches and rows and inner:
        with b.loop("n", 0, batches) as bt, b.loop("m", 0, rows) as m:
            at = _nd_offset(b, indices, bt * rows + m, shape[batch_dims:batch_dims + k], strides)
            copy_loops(b, ctx.target.lanes, [inner], data, [1], bt * per_batch + at, outs[0], [1],
                       (bt * rows + m) * inner)
    return Kernel(name, params, b.block())


# --- scatters -------------------------------------------------------------------------------------------

_COMBINE = {"none": lambda old, new: new, "add": lambda old, new: old + new, "mul": lambda old, new: old * new,
            "max": maximum, "min": minimum}


def _copy_all(b: Builder, lanes: int, src: Buffer, dst: Buffer, size: int) -> None:
    if size:
        copy_loops(b, lanes, [size], src, [1], 0, dst, [1], 0)


def scatter_nd(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out = data, then out[index tuple m] (op)= updates[m], in the order of m (duplicates: the last wins,
    or all accumulate)."""
    ins, outs, params = ctx.io(node)
    data, indices, updates = ins
    shape, ishape = ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.inputs[1])
    k = ishape[-1]
    rows, inner = _prod(ishape[:-1]), _prod(shape[k:])
    combine = _COMBINE[node.attrs["reduction"]]
    b = Builder()
    _copy_all(b, ctx.target.lanes, data, outs[0], _prod(shape))
    if rows and _prod(shape):       # empty data: no element to update, whatever the indices
        with b.loop("m", 0, rows) as m:
            at = _nd_offset(b, indices, m, shape[:k], _strides(shape)[:k])

            def update(j: Expr, width: int) -> None:
                b.store(outs[0], at + j, combine(_at(outs[0], at + j, width), _at(updates, m * inner + j, width)))
            b.chunks("j", inner, ctx.target.lanes, update)
    return Kernel(name, params, b.block())


def scatter_elements(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out = data, then out[i with i[axis] replaced by index[i]] (op)= updates[i], in row-major order."""
    ins, outs, params = ctx.io(node)
    data, indices, updates = ins
    shape, ishape = ctx.graph.shape(node.inputs[0]), ctx.graph.shape(node.inputs[1])
    axis = node.attrs["axis"]
    strides = _strides(shape)
    combine = _COMBINE[node.attrs["reduction"]]
    b = Builder()
    _copy_all(b, ctx.target.lanes, data, outs[0], _prod(shape))

    def body(coords) -> None:
        pos = _dot(coords, _strides(ishape))
        dst = b.let("dst", _dot([c for a, c in enumerate(coords) if a != axis],
                                [s for a, s in enumerate(strides) if a != axis])
                    + safe_index(indices[pos], shape[axis]) * strides[axis])
        b.store(outs[0], dst, combine(outs[0][dst], updates[pos]))
    if _prod(ishape) and _prod(shape):       # empty data: no element to update, whatever the indices
        _loops(b, list(ishape), body)
    return Kernel(name, params, b.block())


# --- selections along an axis ---------------------------------------------------------------------------

def _axis_split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])


def _arg_best(b: Builder, x: Buffer, base: Expr, n: int, stride: int, largest: bool, last: bool) -> Var:
    """The position along the axis of the largest (smallest) value: the first one, or the last with `last`."""
    best = b.local("best", x[base])
    where = b.local("arg", const(0))
    cmp = ("ge" if last else "gt") if largest else ("le" if last else "lt")
    with b.loop("r", 1, n) as r:
        v = b.let("v", x[base + r * stride])
        take = b.let("take", binop(cmp, v, best))
        b.assign(best, select(take, v, best))
        b.assign(where, select(take, r, where))
    return where


def arg_extreme(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """ArgMax/ArgMin: int64 positions along `axis` (its output keeps the axis with size 1)."""
    ins, outs, params = ctx.io(node)
    outer, n, inner = _axis_split(ctx.graph.shape(node.inputs[0]), node.attrs["axis"])
    b = Builder()
    if outer and inner and n:
        with b.loop("o", 0, outer) as o, b.loop("q", 0, inner) as q:
            arg = _arg_best(b, ins[0], o * n * inner + q, n, inner, node.op == "ArgMax",
                            node.attrs["select_last_index"])
            b.store(outs[0], o * inner + q, Cast(arg, "i64"))
    return Kernel(name, params, b.block())


def hardmax(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """1 at the first largest value along `axis`, 0 elsewhere."""
    ins, outs, params = ctx.io(node)
    outer, n, inner = _axis_split(ctx.graph.shape(node.inputs[0]), node.attrs["axis"])
    b = Builder()
    if outer and inner and n:
        with b.loop("o", 0, outer) as o, b.loop("q", 0, inner) as q:
            base = o * n * inner + q
            arg = _arg_best(b, ins[0], base, n, inner, largest=True, last=False)
            with b.loop("r", 0, n) as r:
                b.store(outs[0], base + r * inner, select(binop("eq", r, arg), 1.0, 0.0))
    return Kernel(name, params, b.block())


def topk(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """The k largest (smallest) values along `axis` and their int64 positions, best first; equal values
    keep their input order (onnxruntime's order). Each slice is an insertion into the k output slots:
    every element bubbles down the slots, swapping with each one it beats (O(n k), no scratch memory);
    a slot whose index is n is still empty."""
    ins, outs, params = ctx.io(node)
    x, values, positions = ins[0], outs[0], outs[1]
    outer, n, inner = _axis_split(ctx.graph.shape(node.inputs[0]), node.attrs["axis"])
    k = node.attrs["k"]
    beats = "gt" if node.attrs["largest"] else "lt"
    b = Builder()
    if not (outer and inner and k):
        return Kernel(name, params, b.block())
    with b.loop("o", 0, outer) as o, b.loop("q", 0, inner) as q:
        src, dst = o * n * inner + q, o * k * inner + q
        with b.loop("p", 0, k) as p:
            b.store(values, dst + p * inner, const(0, values.dtype))
            b.store(positions, dst + p * inner, const(n, "i64"))
        with b.loop("r", 0, n) as r:
            value = b.local("value", x[src + r * inner])
            index = b.local("index", Cast(r, "i64"))
            with b.loop("p", 0, k) as p:
                slot = dst + p * inner
                old_value, old_index = b.let("old", values[slot]), b.let("oldi", positions[slot])
                better = b.let("better", binop("or", binop("eq", old_index, n), binop(
                    "or", binop(beats, value, old_value),
                    binop("and", binop("eq", value, old_value), binop("lt", index, old_index)))))
                b.store(values, slot, select(better, value, old_value))
                b.store(positions, slot, select(better, index, old_index))
                b.assign(value, select(better, old_value, value))
                b.assign(index, select(better, old_index, index))
    return Kernel(name, params, b.block())


def cumsum(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Running sums along `axis` (reversed, exclusive per the attributes), vectorized across the axes after it."""
    ins, outs, params = ctx.io(node)
    outer, n, inner = _axis_split(ctx.graph.shape(node.inputs[0]), node.attrs["axis"])
    exclusive, reverse = node.attrs["exclusive"], node.attrs["reverse"]
    dtype = DTYPES[ctx.graph.values[node.inputs[0]].dtype]
    b = Builder()
    if not (outer and inner and n):
        return Kernel(name, params, b.block())
    with b.loop("o", 0, outer) as o:
        def lane(j: Expr, width: int) -> None:
            acc = b.local("acc", const(0, dtype, width))
            with b.loop("r", 0, n) as r:
                at = b.let("at", o * n * inner + ((n - 1) - r if reverse else r) * inner + j)
                if exclusive:
                    b.store(outs[0], at, acc)
                b.assign(acc, acc + _at(ins[0], at, width))
                if not exclusive:
                    b.store(outs[0], at, acc)
        b.chunks("j", inner, ctx.target.lanes, lane)
    return Kernel(name, params, b.block())


def one_hot(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[o, d, q] = on if index[o, q] (negative: + depth) == d else off; an index out of range gives
    all off. Indices are only compared, never used as addresses. (off, on) are constants, or read from
    the second input when computed."""
    ins, outs, params = ctx.io(node)
    shape = ctx.graph.shape(node.inputs[0])
    axis, depth = node.attrs["axis"], node.attrs["depth"]
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    dtype = outs[0].dtype
    b = Builder()
    if not (outer and inner and depth):
        return Kernel(name, params, b.block())
    if node.attrs["values"] is not None:
        off, on = (const(v, dtype) for v in node.attrs["values"])
    else:
        off, on = b.let("off", ins[1][0]), b.let("on", ins[1][1])
    with b.loop("o", 0, outer) as o, b.loop("q", 0, inner) as q:
        raw = ins[0][o * inner + q]
        raw = Cast(raw, "i64", saturate=True) if raw.dtype == "f32" else raw
        wanted = b.let("hot", select(binop("lt", raw, 0), raw + depth, raw))
        with b.loop("d", 0, depth) as d:
            b.store(outs[0], (o * depth + d) * inner + q, select(binop("eq", Cast(d, wanted.dtype), wanted), on, off))
    return Kernel(name, params, b.block())


# --- ONNX ops -> the ops above ------------------------------------------------------------------------------

def _axis(node: Node, rank: int, default: int = 0) -> int:
    axis = int(node.attrs.get("axis", default))
    if not -rank <= axis < max(rank, 1):
        raise refuse(node, f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _check_constant_indices(rw: Rewriter, node: Node, index: int, bound) -> None:
    """Constant indices are checked now: onnxruntime would fail on one out of range at run time."""
    array = rw.constants.get(node.inputs[index])
    if array is not None and array.size:
        limits = np.broadcast_to(np.asarray(bound), array.shape)
        bad = (array < -limits) | (array >= limits)
        if bad.any():
            raise refuse(node, f"constant index {int(array[bad].flat[0])} is out of range")


def canonical_gather(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = _axis(node, len(shape))
    _check_constant_indices(rw, node, 1, shape[axis])
    rw.add("Gather", node.name, node.inputs, node.outputs, axis=axis)


def canonical_gather_elements(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = _axis(node, len(shape))
    _check_constant_indices(rw, node, 1, shape[axis])
    rw.add(node.op, node.name, node.inputs, node.outputs, axis=axis)


def canonical_gather_nd(rw: Rewriter, node: Node) -> None:
    shape, ishape = rw.values[node.inputs[0]].shape, rw.values[node.inputs[1]].shape
    batch_dims = int(node.attrs.get("batch_dims", 0))
    k = ishape[-1]
    _check_constant_indices(rw, node, 1, shape[batch_dims:batch_dims + k])
    rw.add("GatherND", node.name, node.inputs, node.outputs, batch_dims=batch_dims)


def canonical_scatter(rw: Rewriter, node: Node) -> None:
    reduction = node.attrs.get("reduction", "none")
    if reduction not in _COMBINE:
        raise refuse(node, f"reduction '{reduction}' is not supported (none, add, mul, max, min)")
    shape = rw.values[node.inputs[0]].shape
    if node.op == "ScatterND":
        k = rw.values[node.inputs[1]].shape[-1]
        _check_constant_indices(rw, node, 1, shape[:k])
        rw.add("ScatterND", node.name, node.inputs, node.outputs, reduction=reduction)
        return
    axis = _axis(node, len(shape))
    _check_constant_indices(rw, node, 1, shape[axis])
    rw.add("ScatterElements", node.name, node.inputs, node.outputs, axis=axis, reduction=reduction)


def canonical_arg(rw: Rewriter, node: Node) -> None:
    """ArgMax/ArgMin keep the reduced axis (size 1); without keepdims a view drops it."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    axis = _axis(node, len(shape))
    kept = tuple(1 if a == axis else d for a, d in enumerate(shape))
    target = out if node.attrs.get("keepdims", 1) else rw.value(out + "_keepdims", kept, "int64")
    rw.add(node.op, node.name, [x], [target], axis=axis, select_last_index=int(node.attrs.get("select_last_index", 0)))
    if target != out:
        view(rw, node, target, rw.values[out].shape, out)


def canonical_hardmax(rw: Rewriter, node: Node) -> None:
    """Along `axis` from opset 13; before, over everything from `axis` on (the input seen as 2-D)."""
    shape = rw.values[node.inputs[0]].shape
    axis = _axis(node, len(shape), -1 if rw.graph.opset >= 13 else 1)
    if rw.graph.opset >= 13 or axis == len(shape) - 1:
        rw.add("Hardmax", node.name, node.inputs, node.outputs, axis=axis)
        return
    flat = view(rw, node, node.inputs[0], (_prod(shape[:axis]), _prod(shape[axis:])))
    out = rw.value(node.outputs[0] + "_2d", rw.values[flat].shape)
    rw.add("Hardmax", node.name, [flat], [out], axis=1)
    view(rw, node, out, shape, node.outputs[0])


def canonical_topk(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = _axis(node, len(shape), -1)
    k = const_input(rw, node, 1, "k") if len(node.inputs) > 1 else None
    k = int(np.asarray(k).reshape(-1)[0]) if k is not None else int(node.attrs["k"])    # opset < 10: attribute
    if not 0 <= k <= shape[axis]:
        raise refuse(node, f"k = {k} is outside [0, {shape[axis]}]")
    rw.add("TopK", node.name, node.inputs[:1], node.outputs, axis=axis, k=k,
           largest=int(node.attrs.get("largest", 1)))


def canonical_cumsum(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = const_input(rw, node, 1, "axis")
    axis = int(np.asarray(axis).reshape(-1)[0])
    if not -len(shape) <= axis < len(shape):
        raise refuse(node, f"axis {axis} is out of range for rank {len(shape)}")
    rw.add("CumSum", node.name, node.inputs[:1], node.outputs, axis=axis % len(shape),
           exclusive=int(node.attrs.get("exclusive", 0)), reverse=int(node.attrs.get("reverse", 0)))


def canonical_one_hot(rw: Rewriter, node: Node) -> None:
    """A depth fed at run time is the output's (static) length along `axis`; (off, on) may be computed."""
    out = rw.values[node.outputs[0]].shape
    axis = _axis(node, len(out), -1)
    if fed_input(rw, node, 1):
        depth = out[axis]
    else:
        depth = int(np.asarray(const_input(rw, node, 1, "depth")).reshape(-1)[0])
        if depth < 0:
            raise refuse(node, f"depth {depth} is negative")
    values, inputs = rw.constants.get(node.inputs[2]), node.inputs[:1]
    if values is not None:
        values = tuple(v.item() for v in np.asarray(values).reshape(-1)[:2])
    else:
        inputs = (node.inputs[0], node.inputs[2])
    rw.add("OneHot", node.name, inputs, node.outputs, axis=axis, depth=depth, values=values)


def _indices_like_data(graph: Graph, node: Node) -> str | None:
    """GatherElements and ScatterElements: output shapes are the indices' or the data's."""
    want = graph.shape(node.inputs[1] if node.op == "GatherElements" else node.inputs[0])
    got = graph.shape(node.outputs[0])
    return None if got == want else f"output shape {list(got)}, expected {list(want)}"


define("Gather", canonical=canonical_gather, lower=gather, dtypes=ALL_DTYPES, quant=QuantForm.MOVE)
define("GatherElements", canonical=canonical_gather_elements, lower=gather_elements, dtypes=ALL_DTYPES,
       check=_indices_like_data)
define("GatherND", canonical=canonical_gather_nd, lower=gather_nd, dtypes=ALL_DTYPES)
define("ScatterND", canonical=canonical_scatter, lower=scatter_nd, dtypes=ALL_DTYPES, check=same_shape)
define("ScatterElements", canonical=canonical_scatter, lower=scatter_elements, dtypes=ALL_DTYPES,
       check=_indices_like_data)
define("Scatter", canonical=canonical_scatter, dtypes=ALL_DTYPES)     # opset < 11's ScatterElements
for _op in ("ArgMax", "ArgMin"):
    define(_op, canonical=canonical_arg, lower=arg_extreme, dtypes=NUMERIC)
define("Hardmax", canonical=canonical_hardmax, lower=hardmax, check=same_shape)
define("TopK", canonical=canonical_topk, lower=topk, dtypes=NUMERIC | INDICES)
define("CumSum", canonical=canonical_cumsum, lower=cumsum, dtypes=frozenset({"float32", "int32", "int64"}),
       check=same_shape)
define("OneHot", canonical=canonical_one_hot, lower=one_hot, dtypes=NUMERIC | frozenset({"bool"}))
