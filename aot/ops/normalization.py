"""Normalizations.

One kernel, Normalize, serves LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization and MeanVarianceNormalization. The input is seen as `outer` blocks of `block`
contiguous elements (the reduced axes, innermost in NCHW order); per block it computes the mean, then
the mean of squared deviations from it (two passes: accurate when the mean is large against the
spread), and writes y = (x - mean) * inv_std * scale + bias in a third pass, each pass vectorized
along the block. Scale and bias (constants or run-time tensors) are indexed by `param_index`.

BatchNormalization with constant statistics folds into the Conv or Gemm before it, or becomes a
per-channel Mul and Add (graph/passes/fold_batchnorm.py); with statistics computed at run time it
becomes a few small elementwise ops on the C-vectors and one Mul and Add over x.
LpNormalization and LRN have kernels of their own below.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Node, Rewriter
from aot.kernel import math as kmath
from aot.kernel.ir import Buffer, Builder, Expr, Kernel, Reduce, Var, binop, const, fma, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.rewrite import const_input, refuse, view
from aot.registry import AxisAttr, Layout, define, same_shape

# --- the Normalize kernel ------------------------------------------------------------------------------


def _load(buf: Buffer, index: Expr, width: int) -> Expr:
    return buf.vec(index, width) if width > 1 else buf[index]


def _block_sums(b: Builder, n: int, lanes: int, count: int, terms: Callable[[Var, int], tuple[Expr, ...]]) -> list[Var]:
    """The `count` sums of terms(j) over [0, n): `lanes` partial sums in vectors, reduced across lanes once."""
    width = lanes if lanes > 1 and n >= lanes else 1
    scalars = [b.local("ssum", const(0.0, "f32")) for _ in range(count)]
    vectors = [b.local("vsum", const(0.0, "f32", width)) for _ in range(count)] if width > 1 else []

    def accumulate(j: Var, w: int) -> None:
        for acc, term in zip(vectors if w > 1 else scalars, terms(j, w)):
            b.assign(acc, acc + term)
    b.chunks("j", n, lanes, accumulate)
    if vectors:
        return [b.let("sum", s + Reduce("add", v)) for s, v in zip(scalars, vectors)]
    return [b.let("sum", s) for s in scalars]


def normalize(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Per block: mean (if `center`), variance (or mean square), then the scaled, shifted result.

    attrs: block (elements per normalized block), center, epsilon, eps_outside (1 / (std + eps), as
    MeanVarianceNormalization defines it, instead of 1 / sqrt(var + eps)), stats (which of "mean",
    "inv_std" follow y as outputs, one value per block), and the parameter layout: blocks come in
    runs of `period` (the parameters' outer index, e.g. the channel of InstanceNormalization), and
    each block holds `cb` parameter positions of `block / cb` elements each.
    """
    ins, outs, params = ctx.io(node)
    x, scale, bias = (list(ins) + [None, None])[:3]
    a = node.attrs
    block, period, cb = a["block"], a["period"], a["cb"]
    if scale is None and bias is None:
        cb = 1
    stats = dict(zip(a["stats"], outs[1:]))
    count = ctx.graph.values[node.inputs[0]].size // (block * period)
    lanes = ctx.target.lanes
    b = Builder()
    with b.loop("a", 0, count) as i, b.loop("p", 0, period) as p:
        o = b.let("o", i * period + p)
        base = b.let("base", o * block)
        mean = None
        if a["center"]:
            (total,) = _block_sums(b, block, lanes, 1, lambda j, w: (_load(x, base + j, w),))
            mean = b.let("mean", total * (1.0 / block))

            def deviations(j: Var, w: int) -> tuple[Expr, ...]:
                d = b.let("d", _load(x, base + j, w) - mean)
                return d, d * d
            # Corrected two-pass (Chan, Golub, LeVeque): the sum of deviations, zero but for the first
            # mean's rounding, corrects both the mean and the variance.
            shift, squares = _block_sums(b, block, lanes, 2, deviations)
            correction = b.let("correction", shift * (1.0 / block))
            mean = b.let("mean", mean + correction)
            var = b.let("var", maximum(squares * (1.0 / block) - correction * correction, 0.0))
        else:
            (squares,) = _block_sums(b, block, lanes, 1, lambda j, w: (_load(x, base + j, w) * _load(x, base + j, w),))
            var = b.let("var", squares * (1.0 / block))
        if a["eps_outside"]:
            inv = b.let("inv", 1.0 / (kmath.sqrt(var) + a["epsilon"]))
        else:
            inv = b.let("inv", kmath.rsqrt(var + a["epsilon"]))
        for stat, buf in stats.items():
            b.store(buf, o, mean if stat == "mean" else inv)
        _scale_block(b, x, outs[0], scale, bias, base, p * cb, block, cb, mean, inv, lanes)
    return Kernel(name, params, b.block())


def _scale_block(b: Builder, x: Buffer, y: Buffer, scale: Buffer | None, bias: Buffer | None, base: Var,
                 first: Expr, block: int, cb: int, mean: Expr | None, inv: Expr, lanes: int) -> None:
    """y = (x - mean) * inv * scale + bias over one block, parameters from index `first` on."""
    def affine(xv: Expr, s: Expr | None, t: Expr | None) -> Expr:
        d = xv - mean if mean is not None else xv
        factor = inv * s if s is not None else inv
        return fma(d, factor, t) if t is not None else d * factor

    run = block // cb
    if run == 1:        # a parameter per element (LayerNorm): vector loads of scale and bias
        b.chunks("j", block, lanes, lambda j, w: b.store(y, base + j, affine(
            _load(x, base + j, w), _load(scale, first + j, w) if scale else None,
            _load(bias, first + j, w) if bias else None)))
        return
    with b.loop("c", 0, cb) as c:    # a parameter per run of elements (a channel): scalars, splat
        s = b.let("s", scale[first + c]) if scale else None
        t = b.let("t", bias[first + c]) if bias else None
        start = b.let("start", base + c * run)
        b.chunks("j", run, lanes, lambda j, w: b.store(y, start + j, affine(_load(x, start + j, w), s, t)))


def _check_normalize(graph, node: Node) -> str | None:
    problem = same_shape(graph, node)
    size, block, period = graph.values[node.inputs[0]].size, node.attrs["block"], node.attrs["period"]
    if problem is None and size % (block * period):
        problem = f"{size} elements are not whole runs of {period} blocks of {block}"
    return problem


# --- ONNX ops -> Normalize -------------------------------------------------------------------------------

def _axis(node: Node, rank: int, default: int) -> int:
    axis = int(node.attrs.get("axis", default))
    if not -rank <= axis < rank:
        raise refuse(node, f"axis {axis} is out of range for a rank-{rank} input")
    return axis % rank


def _stash_type(node: Node) -> None:
    if int(node.attrs.get("stash_type", 1)) != 1:
        raise refuse(node, f"stash_type {node.attrs['stash_type']} is not supported (only 1, float32)")


def _param(rw: Rewriter, node: Node, index: int, shape: tuple[int, ...], what: str) -> str:
    """Input `index` (scale or bias) as a flat tensor of prod(shape) elements, "" if absent.

    The kernel reads it as a flat array: a constant is broadcast to `shape` at compile time, a computed
    one that does not already hold `shape`'s elements (axes of 1 aside) at run time."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return ""
    name = node.inputs[index]
    if name in rw.constants:
        array = rw.constants[name].astype(np.float32)
        while array.ndim > len(shape) and array.shape[0] == 1:
            array = array[0]
        if not _broadcasts(array.shape, shape):
            raise refuse(node, f"{what} of shape {list(rw.constants[name].shape)} does not broadcast to "
                               f"{list(shape)}")
        full = np.broadcast_to(array, shape)
        return rw.constant(f"{node.name}_{what}", np.ascontiguousarray(full).reshape(-1))
    got = rw.values[name].shape
    if tuple(d for d in got if d != 1) == tuple(d for d in shape if d != 1):
        return name
    trailing = got[len(got) - len(shape):] if len(got) > len(shape) else got
    if any(d != 1 for d in got[:len(got) - len(trailing)]) or not _broadcasts(trailing, shape):
        raise refuse(node, f"{what} of shape {list(got)} does not broadcast to {list(shape)}")
    # Broadcast it at run time: an Add of zeros is a broadcasting copy.
    full = rw.value(f"{node.name}_{what}", shape)
    rw.add("Add", f"{node.name}_{what}", [name, rw.constant(f"{node.name}_zeros", np.zeros(shape, np.float32))],
           [full])
    return full


def _broadcasts(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(small, shape) == tuple(shape)
    except ValueError:
        return False


def _add_normalize(rw: Rewriter, node: Node, inputs: list[str], outputs: list[str], *, block: int,
                   center: bool = True, period: int = 1, cb: int = 1, stats: tuple[str, ...] = (),
                   eps_outside: bool = False, epsilon: float | None = None) -> None:
    eps = float(node.attrs.get("epsilon", 1e-5)) if epsilon is None else epsilon
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    rw.add("Normalize", node.name, inputs, outputs, block=block, center=center, epsilon=eps,
           eps_outside=eps_outside, period=period, cb=cb, stats=stats)


def canonical_layernorm(rw: Rewriter, node: Node) -> None:
    """LayerNormalization (and RMSNormalization, without the mean) over the axes from `axis` on."""
    shape = rw.values[node.inputs[0]].shape
    axis = _axis(node, len(shape), -1)
    _stash_type(node)
    inner = shape[axis:]
    block = int(np.prod(inner, dtype=np.int64))
    rms = node.op == "RMSNormalization"
    inputs = [node.inputs[0], _param(rw, node, 1, inner, "scale")]
    if not rms:
        inputs.append(_param(rw, node, 2, inner, "bias"))
    outputs = [node.outputs[0]]
    stats: list[str] = []
    for index, stat in ((1, "mean"), (2, "inv_std")):
        if len(node.outputs) > index and node.outputs[index]:
            outputs.append(node.outputs[index])
            stats.append(stat)
    _add_normalize(rw, node, inputs, outputs, block=block, center=not rms, cb=block, stats=tuple(stats))


def canonical_instancenorm(rw: Rewriter, node: Node) -> None:
    """InstanceNormalization: each (n, c) plane normalized, then scaled and shifted per channel."""
    shape = rw.values[node.inputs[0]].shape
    if len(shape) < 3:
        raise refuse(node, f"the input must have rank 3 or more, not {len(shape)}")
    c = shape[1]
    inputs = [node.inputs[0], _param(rw, node, 1, (c,), "scale"), _param(rw, node, 2, (c,), "bias")]
    _add_normalize(rw, node, inputs, [node.outputs[0]], block=int(np.prod(shape[2:], dtype=np.int64)), period=c)


def canonical_groupnorm(rw: Rewriter, node: Node) -> None:
    """GroupNormalization: the channels in `num_groups` groups, each group of each sample normalized.
    Scale and bias are per group at opset 18 (the definition opset 21 replaced) and per channel from 21."""
    shape = rw.values[node.inputs[0]].shape
    _stash_type(node)
    if len(shape) < 3 or "num_groups" not in node.attrs:
        raise refuse(node, "needs an input of rank 3 or more and the num_groups attribute")
    c, groups = shape[1], int(node.attrs["num_groups"])
    if groups <= 0 or c % groups:
        raise refuse(node, f"{c} channels do not split into num_groups={groups} groups")
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    block = c // groups * spatial
    if rw.graph.opset >= 21:
        inputs = [node.inputs[0], _param(rw, node, 1, (c,), "scale"), _param(rw, node, 2, (c,), "bias")]
        _add_normalize(rw, node, inputs, [node.outputs[0]], block=block, period=groups, cb=c // groups)
    else:
        inputs = [node.inputs[0], _param(rw, node, 1, (groups,), "scale"), _param(rw, node, 2, (groups,), "bias")]
        _add_normalize(rw, node, inputs, [node.outputs[0]], block=block, period=groups, cb=1)


def canonical_mvn(rw: Rewriter, node: Node) -> None:
    """MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default N, H, W). Reduced
    axes that are not the innermost ones are moved there by a Transpose, and back after."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    rank = len(shape)
    axes = sorted({int(a) % rank for a in node.attrs.get("axes", (0, 2, 3))})
    if any(not -rank <= int(a) < rank for a in node.attrs.get("axes", (0, 2, 3))):
        raise refuse(node, f"axes {list(node.attrs.get('axes'))} are out of range for a rank-{rank} input")
    kept = [d for d in range(rank) if d not in axes]
    block = int(np.prod([shape[d] for d in axes], dtype=np.int64))
    big_kept = [d for d in kept if shape[d] > 1]
    big_axes = [d for d in axes if shape[d] > 1]
    if not big_kept or not big_axes or max(big_kept) < min(big_axes):      # already contiguous
        _add_normalize(rw, node, [x], [out], block=block, eps_outside=True, epsilon=1e-9)
        return
    perm = tuple(kept + axes)
    moved_shape = tuple(shape[d] for d in perm)
    moved = rw.like(x + "_moved", x, moved_shape)
    rw.add("Transpose", node.name + "_in", [x], [moved], perm=perm)
    normalized = rw.like(out + "_moved", out, moved_shape)
    _add_normalize(rw, node, [moved], [normalized], block=block, eps_outside=True, epsilon=1e-9)
    rw.add("Transpose", node.name + "_out", [normalized], [out], perm=tuple(int(i) for i in np.argsort(perm)))


define("Normalize", lower=normalize, check=_check_normalize)
define("LayerNormalization", canonical=canonical_layernorm)
define("RMSNormalization", canonical=canonical_layernorm)
define("InstanceNormalization", canonical=canonical_instancenorm)
define("GroupNormalization", canonical=canonical_groupnorm)
define("MeanVarianceNormalization", canonical=canonical_mvn)


# --- BatchNormalization ----------------------------------------------------------------------------------

def _per_activation_batchnorm(rw: Rewriter, node: Node, eps: float) -> None:
    """BatchNormalization with spatial=0 (before opset 9): scale, bias, mean and variance have the shape
    C x D1 x ... x Dn of one sample, one value per activation; y = x * a + b broadcast over the batch."""
    x, out = node.inputs[0], node.outputs[0]
    sample = rw.values[x].shape[1:]
    stats = [const_input(rw, node, i, what) for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1)]
    for name, value in zip(node.inputs[1:5], stats):
        if tuple(value.shape) != sample:
            raise ModelError(f"node '{node.name}' (BatchNormalization): with spatial=0 '{name}' must have the shape "
                             f"of one sample, {list(sample)} (one value per activation), not {list(value.shape)}")
    gamma, beta, mean, var = (value.astype(np.float64) for value in stats)
    a = gamma / np.sqrt(var + eps)
    scaled = rw.like(out + "_scaled", x)
    rw.add("Mul", node.name + "_mul", [x, rw.constant(node.name + "_scale", a.astype(np.float32))], [scaled])
    rw.add("Add", node.name + "_add", [scaled, rw.constant(node.name + "_shift", (beta - mean * a).astype(np.float32))],
           [out])


def canonical_batchnorm(rw: Rewriter, node: Node) -> None:
    """Inference-mode BatchNormalization. With constant statistics the node stays for fold_batchnorm;
    with any computed, y = x * a + b with a = scale / sqrt(var + eps) and b = bias - mean * a,
    computed on the C-vectors (constant parts folded here) and broadcast over x."""
    if len(node.outputs) > 1 and any(node.outputs[1:]) or node.attrs.get("training_mode", 0):
        _training_batchnorm(rw, node)
        return
    eps = float(node.attrs.get("epsilon", 1e-5))
    if not node.attrs.get("spatial", 1):       # opsets 7 and 8: statistics per activation
        _per_activation_batchnorm(rw, node, eps)
        return
    if all(name in rw.constants for name in node.inputs[1:5]):
        for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1):
            const_input(rw, node, i, what)
        rw.keep(node.with_(outputs=node.outputs[:1], attrs={"epsilon": eps}))
        return
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    if len(shape) < 2:
        raise refuse(node, f"the input must have rank 2 or more, not {len(shape)}")
    scale, bias, mean, var = node.inputs[1:5]
    ops = _VectorOps(rw, node, shape[1])
    a = ops.binary("Mul", ops.rsqrt(ops.binary("Add", var, ops.scalar(eps))), scale)
    b = ops.binary("Sub", bias, ops.binary("Mul", mean, a))
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    scaled = rw.like(out + "_scaled", x)
    rw.add("Mul", node.name + "_mul", [x, ops.as_shape(a, channel)], [scaled])
    rw.add("Add", node.name + "_add", [scaled, ops.as_shape(b, channel)], [out])


def _training_batchnorm(rw: Rewriter, node: Node) -> None:
    """Training mode: normalize with the batch's own statistics (mean and population variance over every
    axis but the channels) and give the updated running statistics:
    running = input * momentum + current * (1 - momentum)."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    if len(shape) < 2:
        raise refuse(node, f"the input must have rank 2 or more, not {len(shape)}")
    eps, momentum = float(node.attrs.get("epsilon", 1e-5)), float(node.attrs.get("momentum", 0.9))
    axes = tuple(a for a in range(len(shape)) if a != 1)
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
    mean4 = rw.value(node.name + "_batch_mean", kept)
    rw.add("Reduce", node.name + "_mean", [x], [mean4], fn="mean", axes=axes)
    centered = rw.like(node.name + "_centered", x)
    rw.add("Sub", node.name + "_center", [x, mean4], [centered])
    var4 = rw.value(node.name + "_batch_var", kept)
    rw.add("Reduce", node.name + "_var", [centered], [var4], fn="sum_square", axes=axes)
    ops = _VectorOps(rw, node, shape[1])
    mean = view(rw, node, mean4, (shape[1],))
    var = ops.binary("Mul", view(rw, node, var4, (shape[1],)),
                     ops.scalar(1.0 / int(np.prod([shape[a] for a in axes], dtype=np.int64))))
    scale, bias, input_mean, input_var = node.inputs[1:5]
    a = ops.binary("Mul", ops.rsqrt(ops.binary("Add", var, ops.scalar(eps))), scale)
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    scaled = rw.like(out + "_scaled", x)
    rw.add("Mul", node.name + "_mul", [centered, ops.as_shape(a, channel)], [scaled])
    rw.add("Add", node.name + "_add", [scaled, ops.as_shape(bias, channel)], [out])
    for current, running, target in ((mean, input_mean, 1), (var, input_var, 2)):
        if len(node.outputs) > target and node.outputs[target]:
            blend = ops.binary("Add", ops.binary("Mul", running, ops.scalar(momentum)),
                               ops.binary("Mul", current, ops.scalar(1.0 - momentum)))
            view(rw, node, blend, rw.values[node.outputs[target]].shape, node.outputs[target])


class _VectorOps:
    """Elementwise ops on per-channel vectors: numpy when every operand is constant, nodes otherwise."""

    def __init__(self, rw: Rewriter, node: Node, channels: int):
        self.rw, self.node, self.c = rw, node, channels

    def _vector(self, name: str) -> str:
        shape = self.rw.values[name].shape
        if int(np.prod(shape, dtype=np.int64)) not in (1, self.c) or len(shape) > 1:
            raise refuse(self.node, f"'{name}' of shape {list(shape)} is not a vector of {self.c} channels")
        return name

    def scalar(self, value: float) -> str:
        return self.rw.constant(f"{self.node.name}_eps", np.float32(value).reshape(1))

    def binary(self, op: str, a: str, b: str) -> str:
        a, b = self._vector(a), self._vector(b)
        if a in self.rw.constants and b in self.rw.constants:
            fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
            result = fn(self.rw.constants[a].astype(np.float32), self.rw.constants[b].astype(np.float32))
            return self.rw.constant(f"{self.node.name}_{op.lower()}", np.broadcast_to(result, (self.c,)).copy())
        out = self.rw.value(f"{self.node.name}_{op.lower()}", (self.c,))
        self.rw.add(op, f"{self.node.name}_{op.lower()}", [a, b], [out])
        return out

    def rsqrt(self, a: str) -> str:
        if a in self.rw.constants:
            with np.errstate(all="ignore"):     # a negative variance gives NaN, as in onnxruntime
                value = 1.0 / np.sqrt(self.rw.constants[a].astype(np.float64))
            return self.rw.constant(f"{self.node.name}_rsqrt", value.astype(np.float32))
        out = self.rw.like(f"{self.node.name}_rsqrt", a)
        self.rw.add("Unary", f"{self.node.name}_rsqrt", [a], [out], fn="rsqrt", params=())
        return out

    def as_shape(self, name: str, shape: tuple[int, ...]) -> str:
        if name in self.rw.constants:
            return self.rw.constant(name + "_c", self.rw.constants[name].reshape(shape))
        return view(self.rw, self.node, name, shape)


define("BatchNormalization", canonical=canonical_batchnorm)


# --- LpNormalization --------------------------------------------------------------------------------------

def lp_normalize(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """y = x / ||x||_p along `axis` (p = 1 or 2); a zero norm gives zeros, as onnxruntime does.
    Vectorized along the axis when it is innermost, else along the contiguous axes after it."""
    ins, outs, params = ctx.io(node)
    shape = ctx.graph.shape(node.inputs[0])
    axis, p = node.attrs["axis"], node.attrs["p"]
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    n, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
    x, y = ins[0], outs[0]
    lanes = ctx.target.lanes

    def term(v: Expr) -> Expr:
        return v * v if p == 2 else kmath.fabs(v)

    def norm_of(total: Expr) -> Expr:
        return kmath.sqrt(total) if p == 2 else total

    def divided(v: Expr, norm: Expr) -> Expr:
        """x / norm, one rounding as onnxruntime divides (x * (1 / norm) is a step off at times: a row of
        one element came out 1 - 2^-24, not 1; fuzzer seed 31, graph 9099); a zero norm gives 0."""
        positive = binop("gt", norm, 0.0)
        return select(positive, v / select(positive, norm, 1.0), 0.0)

    b = Builder()
    with b.loop("o", 0, outer) as o:
        base = b.let("base", o * (n * inner))
        if inner == 1:
            (total,) = _block_sums(b, n, lanes, 1, lambda j, w: (term(_load(x, base + j, w)),))
            norm = b.let("norm", norm_of(total))
            b.chunks("j", n, lanes, lambda j, w: b.store(y, base + j, divided(_load(x, base + j, w), norm)))
        else:
            def columns(i: Var, w: int) -> None:
                acc = b.local("acc", const(0.0, "f32", w))
                with b.loop("k", 0, n) as k:
                    b.assign(acc, acc + term(_load(x, base + k * inner + i, w)))
                norm = b.let("norm", norm_of(acc))
                with b.loop("k", 0, n) as k:
                    b.store(y, base + k * inner + i, divided(_load(x, base + k * inner + i, w), norm))
            b.chunks("j", inner, lanes, columns)
    return Kernel(name, params, b.block())


def canonical_lp(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    p = int(node.attrs.get("p", 2))
    if p not in (1, 2):
        raise refuse(node, f"p={p} is not supported (1 or 2)")
    rw.add("LpNorm", node.name, node.inputs[:1], node.outputs, axis=_axis(node, len(shape), -1), p=p)


define("LpNorm", lower=lp_normalize, layout=Layout.FOLLOW, axis_attrs={"axis": AxisAttr.AXIS}, check=same_shape)
define("LpNormalization", canonical=canonical_lp)


# --- LRN ---------------------------------------------------------------------------------------------------

def lrn(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Local response normalization across channels: y = x * (bias + alpha / size * sum of x**2 over
    the `size` channels around)**-beta. Vectorized along the pixels of a channel (NCHW); the window
    is clamped to the channels that exist."""
    ins, outs, params = ctx.io(node)
    shape = ctx.graph.shape(node.inputs[0])
    a = node.attrs
    channels, pixels = shape[1], int(np.prod(shape[2:], dtype=np.int64))
    before, after = (a["size"] - 1) // 2, a["size"] // 2        # floor and ceil of (size - 1) / 2
    x, y = ins[0], outs[0]
    b = Builder()
    with b.loop("n", 0, shape[0]) as n, b.loop("c", 0, channels) as c:
        base = b.let("base", (n * channels + c) * pixels)
        lo = b.let("lo", maximum(c - before, 0))
        hi = b.let("hi", minimum(c + (after + 1), channels))

        def pixel(j: Var, w: int) -> None:
            acc = b.local("acc", const(0.0, "f32", w))
            with b.loop("k", lo, hi) as k:
                v = b.let("v", _load(x, (n * channels + k) * pixels + j, w))
                b.assign(acc, fma(v, v, acc))
            d = fma(acc, const(a["alpha"] / a["size"], "f32", w), const(a["bias"], "f32", w))
            b.store(y, base + j, _load(x, base + j, w) * kmath.pow_const(d, -a["beta"]))
        b.chunks("j", pixels, ctx.target.lanes, pixel)
    return Kernel(name, params, b.block())


def canonical_lrn(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    size = int(node.attrs.get("size", 0))
    if len(shape) < 3 or size < 1:
        raise refuse(node, "needs an input of rank 3 or more and a size attribute of at least 1")
    attrs = {key: float(node.attrs.get(key, default)) for key, default in (("alpha", 1e-4), ("beta", 0.75),
                                                                              ("bias", 1.0))}
    rw.add("LRN", node.name, node.inputs[:1], node.outputs, size=size, **attrs)


define("LRN", canonical=canonical_lrn, lower=lrn, check=same_shape)
