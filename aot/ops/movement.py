"""Data movement: Transpose, Concat, Pad, Slice, Copy; Reshape and its kin are views with no kernel.

Slice and Pad whose parameters are fed at run time (the output's shape declared) are rewritten as small
graphs of existing ops instead: the positions each output element reads are computed at run time with
integer ops, then a gather per axis (rewrite.gather_along) takes them, clamped into the input."""

from __future__ import annotations

import math

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import Quant, node_quant
from aot.graph.quant import QuantParams
from aot.kernel.ir import Buffer, Builder, Expr, Kernel, Reuse, binop, const, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.quantized import dequantize, quantize
from aot.ops.rewrite import as_int64, const_input, crop, emit, fed_input, fused_acts, gather_along, refuse, view
from aot.registry import ALL_DTYPES, AxisAttr, Layout, QuantForm, define, same_size


def _strides(shape) -> list[int]:
    """Row-major element strides."""
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


def copy_loops(b: Builder, lanes: int, dims: list[int], src: Buffer, src_strides: list[int], src_off: Expr | int,
               dst: Buffer, dst_strides: list[int], dst_off: Expr | int, convert=lambda v: v) -> None:
    """dst[...] = convert(src[...]) over `dims`; the innermost axis is vectorized where both sides are
    contiguous."""
    def body(depth: int, s_off, d_off) -> None:
        if depth < len(dims) - 1:
            with b.loop("i", 0, dims[depth]) as i:
                body(depth + 1, s_off + i * src_strides[depth], d_off + i * dst_strides[depth])
            return
        inner = dims[-1] if dims else 1
        contiguous = not dims or (src_strides[-1] == 1 and dst_strides[-1] == 1)
        width = lanes if contiguous and inner >= lanes else 1
        main = inner - inner % width
        s_step = src_strides[-1] if dims else 0
        d_step = dst_strides[-1] if dims else 0
        if main:
            with b.loop("j", 0, main, width) as j:
                b.store(dst, d_off + j * d_step, convert(src.vec(s_off + j * s_step, width)))
        if inner > main:
            with b.loop("j", main, inner) as j:
                b.store(dst, d_off + j * d_step, convert(src[s_off + j * s_step]))
    body(0, src_off, dst_off)


def transpose(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    in_shape = ctx.graph.shape(node.inputs[0])
    perm = node.attrs["perm"]
    in_strides = _strides(in_shape)
    # Merge output axes that are also consecutive in the input.
    dims: list[int] = []
    src: list[int] = []
    for axis, p in enumerate(perm):
        if dims and perm[axis - 1] == p - 1:
            dims[-1] *= in_shape[p]
            src[-1] = in_strides[p]
        else:
            dims.append(in_shape[p])
            src.append(in_strides[p])
    dst = _strides(dims)
    b = Builder()
    copy_loops(b, ctx.target.lanes, dims, ins[0], src, 0, outs[0], dst, 0)
    return Kernel(name, params, b.block())


def concat(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    axis = node.attrs["axis"]
    out_shape = ctx.graph.shape(node.outputs[0])
    outer = int(np.prod(out_shape[:axis], dtype=np.int64))
    out_inner = int(np.prod(out_shape[axis:], dtype=np.int64))
    quant = node_quant(ctx.graph.values, node)
    b = Builder()
    offset = 0
    for buf, value in zip(ins, node.inputs):
        inner = int(np.prod(ctx.graph.shape(value)[axis:], dtype=np.int64))
        convert = _requantize(quant, ctx.graph.values[value].quant) if quant else (lambda v: v)
        if inner:
            copy_loops(b, ctx.target.lanes, [outer, inner], buf, [inner, 1], 0, outs[0], [out_inner, 1], offset,
                       convert)
        offset += inner
    return Kernel(name, params, b.block())


def _requantize(quant: Quant, encoding: QuantParams):
    """Convert an input with its own encoding to the output's."""
    scale, zero_point = encoding.scale, encoding.zero_point
    if (scale, zero_point) == (quant.y_scale, quant.y_zp):
        return lambda v: v
    return lambda v: quantize(dequantize(v, zero_point, scale / quant.y_scale), quant.y_zp, quant.qmin, quant.qmax,
                              quant.y_dtype)


def pad(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    in_shape = list(ctx.graph.shape(node.inputs[0]))
    out_shape = list(ctx.graph.shape(node.outputs[0]))
    rank = len(in_shape)
    begins = node.attrs["pads"][:rank]
    mode = node.attrs["mode"]
    b = Builder()
    lanes = ctx.target.lanes
    if mode == "constant":
        dtype = outs[0].dtype       # f32; or bytes, where pad_channels pads a quantized input with its zero point
        value = node.attrs["value"] if dtype == "f32" else int(node.attrs["value"])
        fill = const(value, dtype)
        ends = node.attrs["pads"][rank:]
        if not any(begins) and not any(ends[:-1]) and in_shape[-1] <= ROW_READ_WHOLE and 0 not in in_shape:
            reuse = _pad_rows(b, ins[0], outs[0], in_shape, out_shape, fill)
            return Kernel(name, params, b.block(), (reuse,))
        total = int(np.prod(out_shape, dtype=np.int64))
        main = total - total % lanes
        if main:
            with b.loop("i", 0, main, lanes) as i:
                b.store(outs[0], i, const(value, dtype, lanes))
        if total > main:
            with b.loop("i", main, total) as i:
                b.store(outs[0], i, fill)
        out_off = sum(p * s for p, s in zip(begins, _strides(out_shape)))
        copy_loops(b, lanes, in_shape, ins[0], _strides(in_shape), 0, outs[0], _strides(out_shape), out_off)
        return Kernel(name, params, b.block())
    # edge / reflect: each output coordinate maps to one input coordinate per axis.
    in_strides, out_strides = _strides(in_shape), _strides(out_shape)

    def source(o: Expr, axis: int) -> Expr:
        i = o - begins[axis]
        size = in_shape[axis]
        if mode == "edge":
            return minimum(maximum(i, 0), size - 1)
        i = select(binop("lt", i, 0), 0 - i, i)
        return select(binop("ge", i, size), (2 * (size - 1)) - i, i)

    def body(depth: int, s_off, d_off) -> None:
        with b.loop("o", 0, out_shape[depth]) as o:
            s = s_off + source(o, depth) * in_strides[depth]
            d = d_off + o * out_strides[depth]
            if depth == rank - 1:
                b.store(outs[0], d, ins[0][s])
            else:
                body(depth + 1, s, d)
    body(0, 0, 0)
    return Kernel(name, params, b.block())


ROW_READ_WHOLE = 16     # the longest row _pad_rows reads whole before writing its padded copy


def _pad_rows(b: Builder, x: Buffer, out: Buffer, in_shape: list[int], out_shape: list[int], fill: Expr) -> Reuse:
    """A constant Pad that only lengthens the rows (the last axis, at its end): the rows copied from the last
    to the first, each read whole before its padded copy is written, so that the result may start where the
    input does and cover it (pad_channels' words: no second copy of a first layer's input in the workspace)."""
    rows = int(np.prod(in_shape[:-1], dtype=np.int64))
    width, padded = in_shape[-1], out_shape[-1]
    with b.loop("r", 0, rows) as r:
        row = b.let("row", (rows - 1) - r)
        values = [b.let("v", x[row * width + c]) for c in range(width)]
        for c in range(padded):
            b.store(out, row * padded + c, values[c] if c < width else fill)
    size = out.nbytes // out.size
    # Per row, from the last: its reads (input below the row's end), then its writes (output from the row's
    # start). At each checkpoint needed - written is r * (width - padded) bytes for some row r <= rows, so
    # the first (r = rows) and the last (r = 0, the largest) say all the planner needs (Reuse.shift).
    first, last = rows * padded * size, rows * width * size
    return Reuse(0, progress=((first, last), (0, 0)), backward=True)


def copy(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    size = int(np.prod(ctx.graph.shape(node.outputs[0]), dtype=np.int64))
    b = Builder()
    copy_loops(b, ctx.target.lanes, [size], ins[0], [1], 0, outs[0], [1], 0)
    return Kernel(name, params, b.block())


def slice_(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """out[i] = in[starts + i * steps] per axis (steps may be negative)."""
    ins, outs, params = ctx.io(node)
    in_strides = _strides(ctx.graph.shape(node.inputs[0]))
    out_shape = list(ctx.graph.shape(node.outputs[0]))
    starts, steps = node.attrs["starts"], node.attrs["steps"]
    src = [s * step for s, step in zip(in_strides, steps)]
    offset = sum(b * s for b, s in zip(starts, in_strides))
    b = Builder()
    if all(out_shape):
        copy_loops(b, ctx.target.lanes, out_shape, ins[0], src, offset, outs[0], _strides(out_shape), 0)
    return Kernel(name, params, b.block())


# --- ONNX ops -> views, Transpose, Concat, Pad, Slice ---------------------------------------------------

def canonical_view(rw: Rewriter, node: Node) -> None:
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        raise refuse(node, "the mask output is not supported")
    if node.op == "Reshape" and len(node.inputs) > 1 and node.inputs[1] in rw.constants:
        _check_reshape(rw, node)
    view(rw, node, node.inputs[0], rw.values[node.outputs[0]].shape, node.outputs[0])


def _check_reshape(rw: Rewriter, node: Node) -> None:
    """The shape input, read as ONNX does (0 copies the input's dimension unless allowzero, -1 takes
    what is left), gives the output's shape: shape inference can leave a declared output shape that
    the shape input contradicts."""
    x = rw.values[node.inputs[0]].shape
    out = rw.values[node.outputs[0]].shape
    asked = [int(d) for d in np.asarray(rw.constants[node.inputs[1]]).reshape(-1)]
    want = [x[i] if d == 0 and not node.attrs.get("allowzero", 0) and i < len(x) else d for i, d in enumerate(asked)]
    known = math.prod(d for d in want if d != -1)
    if want.count(-1) == 1 and known > 0 and math.prod(x) % known == 0:
        want[want.index(-1)] = math.prod(x) // known
    if tuple(want) != out:
        raise ModelError(f"node '{node.name}' (Reshape): the shape input {asked} makes {want} of the input's "
                         f"{list(x)}, not the output's {list(out)}")


def canonical_transpose(rw: Rewriter, node: Node) -> None:
    rank = len(rw.values[node.inputs[0]].shape)
    perm = tuple(node.attrs.get("perm", tuple(reversed(range(rank)))))
    rw.add("Transpose", node.name, node.inputs, node.outputs, perm=perm)


def canonical_concat(rw: Rewriter, node: Node) -> None:
    rank = len(rw.values[node.outputs[0]].shape)
    rw.add("Concat", node.name, node.inputs, node.outputs, axis=int(node.attrs["axis"]) % rank, **fused_acts(node))


def canonical_pad(rw: Rewriter, node: Node) -> None:
    x = node.inputs[0]
    rank = len(rw.values[x].shape)
    mode = node.attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise refuse(node, f"mode '{mode}' is not supported (constant, reflect, edge)")
    if rw.values[x].dtype in ("int32", "int64"):       # the op's dtypes admit them for pads and axes
        raise refuse(node, f"input '{x}' is {rw.values[x].dtype}; Pad takes float32 tensors")
    pads, value = _constant_pads(rw, node, rank), _pad_value(rw, node)
    if pads is None or isinstance(value, str):
        _pad_fed(rw, node, mode, pads, value)
        return
    if any(p < 0 for p in pads):        # negative pads crop: a Slice first, then the positive pads
        x = crop(rw, node, x, pads)
        pads = tuple(max(p, 0) for p in pads)
    rw.add("Pad", node.name, [x], node.outputs, pads=pads, mode=mode, value=value)


def _constant_pads(rw: Rewriter, node: Node, rank: int) -> tuple[int, ...] | None:
    """Begin pads then end pads for every axis, when pads and axes are constants (or attributes); None
    when either is fed at run time."""
    if fed_input(rw, node, 1) or fed_input(rw, node, 3):
        return None
    pads = const_input(rw, node, 1, "pads")
    pads = tuple(int(p) for p in (pads if pads is not None else node.attrs.get("pads", (0,) * 2 * rank)))
    axes = const_input(rw, node, 3, "axes")
    if axes is None:
        return pads
    full = [0] * (2 * rank)
    for i, axis in enumerate(int(a) % rank for a in axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    return tuple(full)


def _pad_value(rw: Rewriter, node: Node) -> float | str:
    """The constant value: a float, or the one-element value fed at run time."""
    name = node.inputs[2] if len(node.inputs) > 2 else ""
    if not name:
        return float(node.attrs.get("value", 0.0))
    size = rw.values[name].size
    if size != 1:
        raise refuse(node, f"the constant value has {size} elements; Pad takes one")
    return float(rw.constants[name].reshape(-1)[0]) if name in rw.constants else name


def _pad_fed(rw: Rewriter, node: Node, mode: str, known: tuple[int, ...] | None, value: float | str) -> None:
    """Pads, axes or the value fed at run time (`known`: the pads when constant): the output's shape is
    static, but the begin pads place the input in it. Per axis, output position o reads input position
    o - begin: constant mode takes the value where that is outside [0, n), edge clamps it into [0, n),
    reflect mirrors it at both ends (periodically, as numpy's pad does where a pad exceeds the axis)."""
    x, y = node.inputs[0], node.outputs[0]
    shape, out = rw.values[x].shape, rw.values[y].shape
    rank = len(shape)
    if 0 in shape:      # nothing to read: every output element is the value
        if mode != "constant" or not isinstance(value, float):
            raise refuse(node, f"an empty input padded in mode '{mode}', or with a value fed at run time, is not "
                               "supported")
        rw.add("Pad", node.name, [x], [y], mode=mode, value=value,
               pads=tuple(o - i for o, i in zip(out, shape)) + (0,) * rank)
        return
    if known is not None:
        begins = _constant(rw, node, "begins", known[:rank])
        padded = [a for a in range(rank) if known[a] or known[rank + a]]
    else:
        begins = _fed_begins(rw, node, rank)
        padded = _constant_axes(rw, node, 3, rank, range(rank))
    if isinstance(value, float):
        value = rw.constant(f"{node.name}_value", np.array(value, np.float32))
    for axis in padded:
        if mode == "constant" or (shape[axis], out[axis]) != (1, 1):     # else the one element stays
            x = _pad_axis(rw, node, x, axis, _element(rw, node, begins, axis), out[axis], mode, value)
    if rw.values[x].shape != out:
        raise ModelError(f"node '{node.name}' (Pad): the output's shape {list(out)} pads axes of the input's "
                         f"{list(shape)} that the axes input does not name")
    view(rw, node, x, out, y)


def _fed_begins(rw: Rewriter, node: Node, rank: int) -> str:
    """The begin pad of every axis, from pads (and axes) of which one is fed at run time."""
    pads = _int64_input(rw, node, 1, "pads") or _constant(rw, node, "pads", node.attrs.get("pads", [0] * 2 * rank))
    count = _lengths(rw, node, {"axes": 3}).get("axes", rank)
    if rw.values[pads].shape[0] != 2 * count or count > rank:
        raise ModelError(f"node '{node.name}' (Pad): {rw.values[pads].shape[0]} pads for {count} axes of a "
                         f"rank-{rank} input")
    begins = emit(rw, node, "Slice", [pads], "begins", shape=(count,), starts=(0,), steps=(1,))
    axes = _int64_input(rw, node, 3, "axes")
    return _per_axis(rw, node, begins, axes, rank, 0) if axes else begins


def _pad_axis(rw: Rewriter, node: Node, x: str, axis: int, begin: str, length: int, mode: str, value: str) -> str:
    """`x` padded along `axis` to `length`, `begin` (a one-element int64 vector) read at run time."""
    n = rw.values[x].shape[axis]

    def i64(op: str, inputs: list[str], hint: str, **attrs) -> str:
        return emit(rw, node, op, inputs, hint, dtype="int64", **attrs)

    def test(op: str, a: str, b: str, hint: str) -> str:
        return emit(rw, node, op, [a, b], hint, dtype="bool")

    zero, size = _constant(rw, node, "zero", 0), _constant(rw, node, "n", n)
    # Clamped into [-n, length], a begin pad places the input as before (wholly outside the output past
    # either end) and o - begin cannot overflow.
    begin = i64("Min", [i64("Max", [begin, _constant(rw, node, "minus_n", -n)], "begin_low"),
                        _constant(rw, node, "length", length)], "begin")
    source = i64("Sub", [_constant(rw, node, "positions", np.arange(length)), begin], "source")
    if mode == "reflect" and n > 1:      # one element reflects as edge repeats it (the clamp below)
        period = _constant(rw, node, "period", 2 * (n - 1))
        folded = i64("Mod", [source, period], "folded", fmod=0)
        source = i64("Where", [test("GreaterOrEqual", folded, size, "beyond"), i64("Sub", [period, folded], "mirror"),
                               folded], "reflected")
    gathered = gather_along(rw, node, x, axis, source)
    if mode != "constant":
        return gathered
    inside = test("And", test("GreaterOrEqual", source, zero, "after"), test("Less", source, size, "before"), "inside")
    along = tuple(length if a == axis else 1 for a in range(len(rw.values[x].shape)))
    return emit(rw, node, "Where", [view(rw, node, inside, along), gathered, value], "padded", dtype="float32")


def canonical_slice(rw: Rewriter, node: Node) -> None:
    x = node.inputs[0]
    shape = rw.values[x].shape
    if any(fed_input(rw, node, i) for i in range(1, 5)):
        _slice_fed(rw, node)
        return
    starts, ends = const_input(rw, node, 1, "starts"), const_input(rw, node, 2, "ends")
    if starts is None:      # before opset 10 they are attributes
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes, steps = node.attrs.get("axes"), None
    else:
        axes, steps = const_input(rw, node, 3, "axes"), const_input(rw, node, 4, "steps")
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    begin, step = [0] * len(shape), [1] * len(shape)
    for axis, b, e, s in zip(axes, starts, ends, steps):
        axis = int(axis) % len(shape)
        begin[axis], _, step[axis] = slice(int(b), int(e), int(s)).indices(shape[axis])
    rw.add("Slice", node.name, [x], node.outputs[:1], starts=tuple(begin), steps=tuple(step))


def _slice_fed(rw: Rewriter, node: Node) -> None:
    """Starts, ends, axes or steps fed at run time: the output's shape is static (ends decide only it), but
    the starts and steps pick the elements. They are made per axis as ONNX does (a negative start counts
    from the end, then clamps into [0, n] for a positive step, [0, n - 1] for a negative one), and each
    sliced axis is a gather at start + i * step."""
    x, y = node.inputs[0], node.outputs[0]
    shape, out = rw.values[x].shape, rw.values[y].shape
    rank = len(shape)
    if 0 in out:        # nothing to take
        rw.add("Slice", node.name, [x], [y], starts=(0,) * rank, steps=(1,) * rank)
        return
    lengths = _lengths(rw, node, {"starts": 1, "ends": 2, "axes": 3, "steps": 4})
    if len(set(lengths.values())) != 1 or lengths["starts"] > rank:
        raise ModelError(f"node '{node.name}' (Slice): the lengths {lengths} differ, or exceed the input's rank "
                         f"{rank}")
    starts, axes, steps = (_int64_input(rw, node, i, what) for i, what in ((1, "starts"), (3, "axes"), (4, "steps")))
    if axes:
        starts = _per_axis(rw, node, starts, axes, rank, 0)
        steps = _per_axis(rw, node, steps, axes, rank, 1) if steps else ""
    count = rw.values[starts].shape[0]          # the leading axes the vectors cover
    steps = steps or _constant(rw, node, "ones", [1] * count)
    dims = shape[:count]

    def i64(op: str, inputs: list[str], hint: str) -> str:
        return emit(rw, node, op, inputs, hint, dtype="int64")

    def less(a: str, b: str, hint: str) -> str:
        return emit(rw, node, "Less", [a, b], hint, dtype="bool")

    zeros, sizes = _constant(rw, node, "zeros", [0] * count), _constant(rw, node, "dims", dims)
    # A step clamped into [-n, n] takes the same positions (an output of at most n elements uses them)
    # and keeps i * step from overflowing.
    steps = i64("Min", [i64("Max", [steps, _constant(rw, node, "minus_dims", [-d for d in dims])], "step_low"),
                        sizes], "step")
    starts = i64("Where", [less(starts, zeros, "from_end"), i64("Add", [starts, sizes], "wrapped"), starts],
                 "start_in")
    top = i64("Where", [less(steps, zeros, "backward"), _constant(rw, node, "last", [d - 1 for d in dims]), sizes],
              "top")
    starts = i64("Min", [i64("Max", [starts, zeros], "start_low"), top], "start")
    for axis in _constant_axes(rw, node, 3, rank, range(count)):
        if axis < count and shape[axis] > 1:
            counts = rw.constant(f"{node.name}_counts", np.arange(out[axis], dtype=np.int64))
            offsets = i64("Mul", [counts, _element(rw, node, steps, axis)], "offsets")
            x = gather_along(rw, node, x, axis, i64("Add", [_element(rw, node, starts, axis), offsets], "positions"))
    if rw.values[x].shape != out:
        raise ModelError(f"node '{node.name}' (Slice): the output's shape {list(out)} slices axes of the input's "
                         f"{list(shape)} that the axes input does not name")
    view(rw, node, x, out, y)


def _int64_input(rw: Rewriter, node: Node, index: int, what: str) -> str:
    """Input `index` (a vector of integers, fed or constant) as an int64 value; '' when absent."""
    name = node.inputs[index] if index < len(node.inputs) else ""
    if not name:
        return ""
    if name in rw.constants:
        return rw.constant(f"{node.name}_{what}", np.asarray(rw.constants[name], np.int64).reshape(-1))
    flat = name if len(rw.values[name].shape) == 1 else view(rw, node, name, (rw.values[name].size,))
    return as_int64(rw, node, flat)


def _lengths(rw: Rewriter, node: Node, inputs: dict[str, int]) -> dict[str, int]:
    """How many elements each of the named inputs (by position) has, those present."""
    return {what: rw.values[node.inputs[i]].size for what, i in inputs.items()
            if i < len(node.inputs) and node.inputs[i]}


def _constant(rw: Rewriter, node: Node, hint: str, values) -> str:
    return rw.constant(f"{node.name}_{hint}", np.array(values, np.int64))


def _per_axis(rw: Rewriter, node: Node, values: str, axes: str, rank: int, default: int) -> str:
    """A vector with one entry per axis of a rank-`rank` tensor: `values[i]` at axis `axes[i]` (negative
    from the end), `default` at the axes not named. (ScatterElements clamps an axis out of range.)"""
    full = _constant(rw, node, f"default_{default}", [default] * rank)
    return emit(rw, node, "ScatterElements", [full, axes, values], "per_axis", shape=(rank,), axis=0,
                reduction="none")


def _constant_axes(rw: Rewriter, node: Node, index: int, rank: int, default) -> list[int]:
    """The axes input `index` as axis numbers when it is a constant, `default` when absent, every axis
    when fed at run time (any may be named)."""
    name = node.inputs[index] if index < len(node.inputs) else ""
    if not name:
        return list(default)
    if name not in rw.constants:
        return list(range(rank))
    axes = [int(a) for a in np.asarray(rw.constants[name]).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise ModelError(f"node '{node.name}' ({node.op}): axes {axes} are out of range for rank {rank}")
    return sorted({a % rank for a in axes})


def _element(rw: Rewriter, node: Node, vector: str, i: int) -> str:
    """Entry `i` of a computed vector, as a one-element vector."""
    return emit(rw, node, "Gather", [vector, rw.constant(f"{node.name}_at{i}", np.array([i], np.int64))], f"at{i}",
                shape=(1,), axis=0)


def canonical_split(rw: Rewriter, node: Node) -> None:
    """Split becomes one Slice per output."""
    shape = rw.values[node.inputs[0]].shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    start = 0
    for i, out in enumerate(node.outputs):
        size = rw.values[out].shape[axis]
        begin = tuple(start if a == axis else 0 for a in range(len(shape)))
        rw.add("Slice", f"{node.name}_{i}", [node.inputs[0]], [out], starts=begin, steps=(1,) * len(shape))
        start += size


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
    define(_op, canonical=canonical_view, view=_op == "Reshape", moves_values=True, dtypes=ALL_DTYPES,
           quant=QuantForm.MOVE, check=same_size)
define("Transpose", canonical=canonical_transpose, lower=transpose, layout=Layout.TRANSPOSE, moves_values=True,
       dtypes=ALL_DTYPES, quant=QuantForm.MOVE)
define("Concat", canonical=canonical_concat, lower=concat, layout=Layout.FOLLOW, axis_attrs={"axis": AxisAttr.AXIS},
       moves_values=True, dtypes=ALL_DTYPES, quant=QuantForm.CONCAT)
# Pad's computed inputs: float32 data (checked by its rule), int32 or int64 pads and axes fed at run time.
define("Pad", canonical=canonical_pad, lower=pad, layout=Layout.FOLLOW, axis_attrs={"pads": AxisAttr.PADS},
       dtypes=frozenset({"float32", "int32", "int64"}))
define("Slice", canonical=canonical_slice, lower=slice_, layout=Layout.FOLLOW, moves_values=True, dtypes=ALL_DTYPES,
       axis_attrs={"starts": AxisAttr.PER_AXIS, "steps": AxisAttr.PER_AXIS}, quant=QuantForm.MOVE)
define("Split", canonical=canonical_split, dtypes=ALL_DTYPES, quant=QuantForm.MOVE)
# Copy is aot's own (no ONNX model has it): fold_constants makes one to compute a constant at run time
# that onnx.reference cannot evaluate, and canonicalize keeps it.
define("Copy", canonical=lambda rw, node: rw.keep(node), lower=copy, moves_values=True, dtypes=ALL_DTYPES,
       check=same_size)


def _row_bytes(graph: Graph, value: str) -> int:
    v = graph.values[value]
    return v.nbytes // v.shape[1]


# Row bands (aot/graph/passes/row_bands.py): rows [start, start + rows) of an NHWC batch-1 tensor are
# contiguous bytes, so a band reads them through a view and writes its rows in place into the whole.
define("RowSlice", view=True, view_offset=lambda graph, node: node.attrs["start"] * _row_bytes(graph, node.inputs[0]),
       moves_values=True, dtypes=ALL_DTYPES)
define("ConcatInPlace", assembled=True, moves_values=True, dtypes=ALL_DTYPES)
