"""Rearranging copies: DepthToSpace, SpaceToDepth, Expand, Tile, and the phase interleave that finishes
a transposed convolution (conv_transpose.py).

Each is one or a few strided copies (movement.copy_loops): the output is walked in order, viewed with
more axes than it has (a block axis split off a spatial one, a repeat axis beside each axis), and each
of those axes has its own stride into the input. The space/depth ops and the interleave work
channels-last, so runs of channels are contiguous on both sides and the copies are vector moves.
"""

from __future__ import annotations

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Graph, Node, Rewriter
from aot.kernel.ir import Builder, Kernel
from aot.ops import LowerContext
from aot.ops.movement import copy_loops
from aot.ops.rewrite import const_input, fed_input, refuse, view
from aot.registry import ALL_DTYPES, AxisAttr, Layout, QuantForm, define


def _strides(shape) -> list[int]:
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


def _squeeze(dims: list[int], *strides: list[int]) -> tuple[list[int], ...]:
    """Drop axes of length 1 (they add loops, not data); keep at least one axis."""
    keep = [i for i, d in enumerate(dims) if d != 1] or [len(dims) - 1]
    return ([dims[i] for i in keep],) + tuple([s[i] for i in keep] for s in strides)


def strided_copy(ctx: LowerContext, node: Node, name: str, dims: list[int], src: list[int]) -> Kernel:
    """out (in order, viewed with `dims`) = in at the offsets given by `src` strides."""
    ins, outs, params = ctx.io(node)
    dims, src, dst = _squeeze(dims, src, _strides(dims))
    b = Builder()
    if all(dims):
        copy_loops(b, ctx.target.lanes, dims, ins[0], src, 0, outs[0], dst, 0)
    return Kernel(name, params, b.block())


# --- DepthToSpace / SpaceToDepth (NHWC) -------------------------------------------------------------

def depth_to_space(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[n, h*bs+i, w*bs+j, c] = in[n, h, w, channel(i, j, c)]; DCR: (i*bs + j)*C + c, CRD: c*bs*bs + i*bs + j."""
    n, h, w, cin = ctx.graph.shape(node.inputs[0])
    bs = node.attrs["blocksize"]
    c = cin // (bs * bs)
    dims = [n, h, bs, w, bs, c]
    if node.attrs["mode"] == "DCR":
        src = [h * w * cin, w * cin, bs * c, cin, c, 1]
    else:
        src = [h * w * cin, w * cin, bs, cin, 1, bs * bs]
    return strided_copy(ctx, node, name, dims, src)


def space_to_depth(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[n, h, w, channel(i, j, c)] = in[n, h*bs+i, w*bs+j, c]; DCR: (i*bs + j)*C + c, CRD: c*bs*bs + i*bs + j."""
    n, h, w, c = ctx.graph.shape(node.inputs[0])
    bs = node.attrs["blocksize"]
    if node.attrs["mode"] == "DCR":
        dims, src = [n, h // bs, w // bs, bs, bs, c], [h * w * c, bs * w * c, bs * c, w * c, c, 1]
    else:
        dims, src = [n, h // bs, w // bs, c, bs, bs], [h * w * c, bs * w * c, bs * c, 1, w * c, c]
    return strided_copy(ctx, node, name, dims, src)


def canonical_space_depth(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    if len(shape) != 4:
        raise refuse(node, f"input of rank {len(shape)} is not supported (rank 4)")
    mode = node.attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise refuse(node, f"mode '{mode}' is not supported (DCR, CRD)")
    rw.add(node.op, node.name, node.inputs[:1], node.outputs,
           blocksize=int(node.attrs["blocksize"]), mode=mode)


# --- Expand / Tile -----------------------------------------------------------------------------------

def repeat(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Output axis i is `repeats[i]` copies of the input axis: viewed as (repeat, input index) pairs,
    the repeat axis with stride 0 into the input."""
    shape = ctx.graph.shape(node.inputs[0])
    strides = _strides(shape)
    dims, src = [], []
    for size, stride, r in zip(shape, strides, node.attrs["repeats"]):
        dims += [r, size]
        src += [0, stride]
    return strided_copy(ctx, node, name, dims or [1], src or [0])


def check_repeat(graph: Graph, node: Node) -> str | None:
    if "repeats" not in node.attrs:      # the ONNX node, before canonicalize
        return None
    x, y = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    want = tuple(d * r for d, r in zip(x, node.attrs["repeats"]))
    return None if want == y and len(x) == len(y) else f"{list(x)} repeated {node.attrs['repeats']} is not {list(y)}"


def canonical_expand(rw: Rewriter, node: Node) -> None:
    """Size-1 axes repeat; a lower-rank input is first viewed with leading 1s. The output's (static) shape
    is what the shape input says, so a shape fed at run time decides nothing more."""
    x, y = node.inputs[0], node.outputs[0]
    out = rw.values[y].shape
    shape = rw.values[x].shape
    full = (1,) * (len(out) - len(shape)) + shape
    if full != shape:
        x = view(rw, node, x, full)
    repeats = tuple(o // i if i == 1 else 1 for i, o in zip(full, out))
    rw.add("Repeat", node.name, [x], [y], repeats=repeats)


def canonical_tile(rw: Rewriter, node: Node) -> None:
    """Repeats fed at run time are what the output's (static) shape says: out / in per axis."""
    if fed_input(rw, node, 1):
        repeats = _repeats_of_shapes(node, rw.values[node.inputs[0]].shape, rw.values[node.outputs[0]].shape)
    else:
        repeats = const_input(rw, node, 1, "repeats")
        if repeats is None or np.any(repeats < 0):
            raise refuse(node, "repeats must be given and not negative")
    rw.add("Repeat", node.name, node.inputs[:1], node.outputs, repeats=tuple(int(r) for r in repeats))


def _repeats_of_shapes(node: Node, shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """How many times each axis of `shape` repeats in `out`; an empty axis stays empty whatever the count."""
    if len(shape) != len(out) or any(o != 0 if i == 0 else o % i for i, o in zip(shape, out)):
        raise ModelError(f"node '{node.name}' (Tile): the output's shape {list(out)} is no whole number of "
                         f"copies of the input's {list(shape)}")
    return tuple(o // i if i else 1 for i, o in zip(shape, out))


# --- the interleave after a transposed convolution (NHWC) --------------------------------------------

def phase_interleave(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[n, y, x, g*mg + m] = in[n, qy, qx, ((g*sh + ry)*sw + rx)*mg + m] with y + oy = qy*sh + ry and
    x + ox = qx*sw + rx: one strided copy per phase (ry, rx), each writing every sh-th row and sw-th column."""
    ins, outs, params = ctx.io(node)
    n, qh, qw, cz = ctx.graph.shape(node.inputs[0])
    _, oh, ow, m = ctx.graph.shape(node.outputs[0])
    (sh, sw), (eh, ew), groups = node.attrs["strides"], node.attrs["offset"], node.attrs["groups"]
    mg = m // groups
    b = Builder()
    for ry in range(sh):
        y0 = (ry - eh) % sh
        qy, rows = (y0 + eh - ry) // sh, -(-(oh - y0) // sh)
        for rx in range(sw):
            x0 = (rx - ew) % sw
            qx, cols = (x0 + ew - rx) // sw, -(-(ow - x0) // sw)
            if rows <= 0 or cols <= 0:
                continue
            dims, src, dst = _squeeze([n, rows, cols, groups, mg], [qh * qw * cz, qw * cz, cz, sh * sw * mg, 1],
                                      [oh * ow * m, sh * ow * m, sw * m, mg, 1])
            copy_loops(b, ctx.target.lanes, dims, ins[0], src, (qy * qw + qx) * cz + (ry * sw + rx) * mg,
                       outs[0], dst, (y0 * ow + x0) * m)
    return Kernel(name, params, b.block())


define("DepthToSpace", canonical=canonical_space_depth, lower=depth_to_space, layout=Layout.NHWC, moves_values=True,
       dtypes=ALL_DTYPES, quant=QuantForm.MOVE)
define("SpaceToDepth", canonical=canonical_space_depth, lower=space_to_depth, layout=Layout.NHWC, moves_values=True,
       dtypes=ALL_DTYPES, quant=QuantForm.MOVE)
define("Expand", canonical=canonical_expand, dtypes=ALL_DTYPES)
define("Tile", canonical=canonical_tile, dtypes=ALL_DTYPES)
define("Repeat", lower=repeat, layout=Layout.FOLLOW, axis_attrs={"repeats": AxisAttr.PER_AXIS}, moves_values=True,
       dtypes=ALL_DTYPES, check=check_repeat)
define("PhaseInterleave", lower=phase_interleave, layout=Layout.NHWC, moves_values=True, dtypes=ALL_DTYPES)
