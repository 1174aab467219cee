"""Comparisons, IsNaN and IsInf, boolean logic, Where, Cast and Mod: elementwise ops whose operands or results
are integers or bools.

A bool is one byte holding 0 or 1 (kernel type u8). Comparisons produce exactly 0 or 1; And/Or/Xor/Not
and Where read a bool as false when 0 and true otherwise, so any nonzero byte from the caller works.
All broadcast with numpy rules through the elementwise loops (aot/ops/elementwise.py).
"""

from __future__ import annotations

import math

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Broadcast, Builder, Cast, Expr, Kernel, binop, const, select
from aot.ops import DTYPES, LowerContext
from aot.ops.elementwise import canonical_float_mod, elementwise_loops
from aot.ops.rewrite import const_input, refuse, view
from aot.registry import ALL_DTYPES, Layout, broadcast_shape, define, same_shape

_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}
_LOGIC = {"And": "and", "Or": "or", "Xor": "xor"}
NUMERIC = frozenset({"float32", "float64", "int8", "uint8", "int32", "int64"})
INTEGER = frozenset({"int8", "uint8", "int32", "int64"})
BOOL = frozenset({"bool"})


def _lanes(*values: Expr) -> list[Expr]:
    """Operands at one width: scalars (broadcast operands) splatted to the widest one."""
    width = max(v.lanes for v in values)
    return [Broadcast(v, width) if v.lanes != width else v for v in values]


def truth(x: Expr) -> Expr:
    """An i1 that is true where a bool byte is nonzero."""
    return binop("ne", x, 0)


def as_bool(flag: Expr) -> Expr:
    """An i1 stored as a bool byte, 0 or 1."""
    return Cast(flag, "u8")


def _elementwise(ctx: LowerContext, node: Node, name: str, compute) -> Kernel:
    """out = compute(operand values) over the broadcast output shape."""
    ins, outs, params = ctx.io(node)
    operands = [(buf, ctx.graph.shape(value)) for buf, value in zip(ins, node.inputs)]
    b = Builder()
    elementwise_loops(b, ctx.target.lanes, ctx.graph.shape(node.outputs[0]), operands, outs[0], compute)
    return Kernel(name, params, b.block())


def compare(ctx: LowerContext, node: Node, name: str) -> Kernel:
    op = _COMPARE[node.op]
    return _elementwise(ctx, node, name, lambda v: as_bool(binop(op, *_lanes(v[0], v[1]))))


def nan_or_inf(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """IsNaN: x is not equal to itself (an ordered comparison, false for NaN). IsInf: x equals +inf or -inf,
    as `detect_positive` and `detect_negative` ask."""
    if node.op == "IsNaN":
        return _elementwise(ctx, node, name, lambda v: select(binop("eq", v[0], v[0]), const(0, "u8", v[0].lanes),
                                                              const(1, "u8", v[0].lanes)))
    signs = [s for s, key in ((math.inf, "detect_positive"), (-math.inf, "detect_negative"))
             if node.attrs.get(key, 1)]

    def compute(v: list[Expr]) -> Expr:
        x = v[0]
        if not signs:
            return const(0, "u8", x.lanes)
        hits = [binop("eq", x, const(sign, x.dtype, x.lanes)) for sign in signs]
        return as_bool(hits[0] if len(hits) == 1 else binop("or", *hits))
    return _elementwise(ctx, node, name, compute)


def canonical_nan_or_inf(rw: Rewriter, node: Node) -> None:
    keep = ("detect_negative", "detect_positive") if node.op == "IsInf" else ()
    rw.keep(node.with_(attrs={k: int(v) for k, v in node.attrs.items() if k in keep}))


def logic(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """And/Or/Xor on the truth of each byte; Not of one."""
    if node.op == "Not":
        return _elementwise(ctx, node, name, lambda v: as_bool(binop("eq", v[0], 0)))
    op = _LOGIC[node.op]
    return _elementwise(ctx, node, name, lambda v: as_bool(binop(op, *_lanes(truth(v[0]), truth(v[1])))))


def where(ctx: LowerContext, node: Node, name: str) -> Kernel:
    def compute(v: list[Expr]) -> Expr:
        cond, x, y = _lanes(*v)
        return select(binop("ne", cond, 0), x, y)
    return _elementwise(ctx, node, name, compute)


def cast(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Numeric conversion: float -> integer truncates toward zero and saturates at the target's range
    (ONNX leaves out-of-range values undefined), integer narrowing wraps, anything -> bool is x != 0."""
    src = ctx.graph.values[node.inputs[0]].dtype
    dst = ctx.graph.values[node.outputs[0]].dtype

    def convert(v: list[Expr]) -> Expr:
        x = v[0]
        if dst == "bool":       # x != 0, written so that NaN is true as in C
            return select(binop("eq", x, 0), const(0, "u8", x.lanes), const(1, "u8", x.lanes))
        return Cast(x, DTYPES[dst], saturate=True) if DTYPES[src] != DTYPES[dst] else x
    return _elementwise(ctx, node, name, convert)


def mod(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """Integer Mod. fmod=1: the remainder of truncated division (the dividend's sign, as C's %);
    fmod=0: the divisor's sign (as Python's %). A zero divisor gives the dividend (ONNX: undefined)."""
    python_sign = not node.attrs.get("fmod", 0)

    def compute(v: list[Expr]) -> Expr:
        a, d = _lanes(v[0], v[1])
        r = binop("rem", a, d)
        if not python_sign:
            return r
        fix = binop("and", binop("ne", r, 0), binop("ne", binop("lt", r, 0), binop("lt", d, 0)))
        return select(fix, r + d, r)
    return _elementwise(ctx, node, name, compute)


# --- ONNX ops ------------------------------------------------------------------------------------------

_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 11: "float64"}
_OTHER_TYPES = {4: "uint16", 5: "int16", 8: "string", 10: "float16", 12: "uint32", 13: "uint64",
                16: "bfloat16"}


def canonical_keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node.with_(attrs={}))


def canonical_cast(rw: Rewriter, node: Node) -> None:
    """Cast (`to` a TensorProto type) and CastLike (to the second input's type) become Cast, or a view
    when the type does not change."""
    x, out = node.inputs[0], node.outputs[0]
    dst = rw.values[out].dtype
    if node.op == "Cast" and node.attrs.get("to") not in _ONNX_TYPES:
        to = node.attrs.get("to")
        name = _OTHER_TYPES.get(to, f"TensorProto type {to}")
        raise refuse(node, f"casting '{x}' to {name} at run time is not supported (float32, float64, uint8, int8, "
                           f"int32, int64, bool)")
    if dst not in DTYPES or dst == "int16":
        raise refuse(node, f"casting to {dst} is not supported (float32, float64, uint8, int8, int32, int64, bool)")
    if rw.values[x].dtype == dst:
        view(rw, node, x, rw.values[out].shape, out)
        return
    rw.add("Cast", node.name, [x], [out])


def canonical_mod(rw: Rewriter, node: Node) -> None:
    """Integer Mod keeps its node (the kernel above); float Mod is exact arithmetic in elementwise.py."""
    if rw.values[node.inputs[0]].dtype == "float32":
        canonical_float_mod(rw, node)
        return
    rw.keep(node.with_(attrs={"fmod": int(node.attrs.get("fmod", 0))}))


def canonical_trilu(rw: Rewriter, node: Node) -> None:
    """Trilu: the input where its last two axes' column less row is at least k (upper) or at most k (lower),
    zero elsewhere, as a Where against a mask made at compile time (k must be a constant: torch.triu and
    tril export one)."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    if len(shape) < 2:
        raise refuse(node, f"its input '{x}' has rank {len(shape)}; Trilu takes a matrix or a batch of them")
    k = const_input(rw, node, 1, "its k (give it with --freeze)")
    rows, cols = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
    diagonal = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
    keep = cols - rows >= diagonal if node.attrs.get("upper", 1) else cols - rows <= diagonal
    dtype = rw.values[x].dtype
    zero = rw.constant(f"{node.name}_zero", np.zeros((), np.dtype(dtype if dtype != "bool" else np.bool_)))
    rw.add("Where", node.name, [rw.constant(f"{node.name}_mask", keep), x, zero], [out])


def _refuse_nonzero(rw: Rewriter, node: Node) -> None:
    raise refuse(node, "its output's shape depends on the input's values (how many are nonzero), and aot "
                       "compiles static shapes only")


for _op in _COMPARE:
    define(_op, canonical=canonical_keep, lower=compare, layout=Layout.FOLLOW,
           dtypes=NUMERIC | (BOOL if _op == "Equal" else frozenset()), check=broadcast_shape)
for _op in _LOGIC:
    define(_op, canonical=canonical_keep, lower=logic, layout=Layout.FOLLOW, dtypes=BOOL, check=broadcast_shape)
define("Not", canonical=canonical_keep, lower=logic, layout=Layout.FOLLOW, dtypes=BOOL, check=same_shape)
for _op in ("IsNaN", "IsInf"):
    define(_op, canonical=canonical_nan_or_inf, lower=nan_or_inf, layout=Layout.FOLLOW,
           dtypes=frozenset({"float32", "float64"}), check=same_shape)
define("Where", canonical=canonical_keep, lower=where, layout=Layout.FOLLOW, dtypes=ALL_DTYPES,
       check=broadcast_shape)
define("Cast", canonical=canonical_cast, lower=cast, layout=Layout.FOLLOW, dtypes=ALL_DTYPES, elementwise=True,
       check=same_shape)
define("CastLike", canonical=canonical_cast, dtypes=ALL_DTYPES, dtype_only=(1,))
define("Mod", canonical=canonical_mod, lower=mod, layout=Layout.FOLLOW, dtypes=INTEGER | frozenset({"float32"}),
       check=broadcast_shape)
define("NonZero", canonical=_refuse_nonzero, dtypes=ALL_DTYPES)
define("Trilu", canonical=canonical_trilu, dtypes=ALL_DTYPES)
