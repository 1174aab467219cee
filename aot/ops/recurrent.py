"""Recurrent layers: ONNX LSTM, GRU and RNN as one `Recurrent` kernel per node.

The canonical rule checks the ONNX attributes, folds the two biases together, transposes the
constant weights to (input, gates) so that a gate's hidden units are contiguous, and turns the
optional outputs into workspace values: the hidden and cell state live in Y_h and Y_c (created when
the model does not ask for them) and the gate pre-activations in a `scratch` output, so the memory
planner places all of them and the kernel needs no other memory.

The kernel loops over directions (two copies of the code for a bidirectional layer, whose
activations may differ), batch rows, then time steps: the time loop is a run-time loop, never
unrolled. Each step computes gates = W·x_t + R·h_{t-1} + b as matrix-vector products vectorized
along the gate axis (weights packed per block of output columns, read once in order, FMA per input
element), then the activations and the cell/hidden update along the hidden axis.

Weights computed at run time (W, R, B, P graph inputs rather than initializers) take a general path
with the same step code: a Transpose node lays W and R out as (input, gates) per direction, and the
matrix-vector loop reads them from that buffer, a row of gate columns contiguous and loaded as vectors,
instead of from panels packed at compile time; a computed B is folded (Wb + Rb, as `_bias` does) into
the rows after the gate scratch once per run, before the first step; P is read as given.

sequence_lens, constant or computed, gives each batch row its own trip count: steps past a row's
length write zeros to Y, the reverse direction starts at the row's last valid step, and a row of
length 0 ends with zero states (onnxruntime's behaviour).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.quant import QuantParams
from aot.kernel import math as kmath
from aot.kernel.ir import Buffer, Builder, Cast, Expr, Kernel, binop, const, fma, maximum, minimum, select
from aot.ops import LowerContext
from aot.ops.conv.blocks import channel_blocks
from aot.ops.epilogue import activation
from aot.ops.quantized import widen
from aot.ops.rewrite import refuse
from aot.registry import FLOAT, define


@dataclass(frozen=True)
class Cell:
    """What distinguishes the three ONNX recurrent ops."""

    gates: int                     # gate blocks of hidden_size rows in W and R (ONNX order)
    default_acts: tuple[str, ...]  # activations per direction
    state_c: bool                  # has a cell state (LSTM)


CELLS = {"LSTM": Cell(4, ("Sigmoid", "Tanh", "Tanh"), True),     # gates i o f c
         "GRU": Cell(3, ("Sigmoid", "Tanh"), False),             # gates z r h
         "RNN": Cell(1, ("Tanh",), False)}

# ONNX activation name (lower case) -> (uses alpha, uses beta, default alpha, default beta), as
# onnxruntime reads activation_alpha/activation_beta: each activation that takes a parameter consumes
# the next entry of the list, or takes the default.
_ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "sigmoid": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "relu": (False, False, 0.0, 0.0),
    "affine": (True, True, 0.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 0.0, 0.0), "scaledtanh": (True, True, 0.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0), "softplus": (False, False, 0.0, 0.0),
}

Act = tuple[str, float, float]     # (lower-case ONNX name, alpha, beta)

_EPILOGUE: dict[str, Callable[[float, float], tuple[str, tuple[float, ...]]]] = {
    "sigmoid": lambda a, b: ("sigmoid", ()), "tanh": lambda a, b: ("tanh", ()), "relu": lambda a, b: ("relu", ()),
    "leakyrelu": lambda a, b: ("leaky_relu", (a,)), "thresholdedrelu": lambda a, b: ("thresholded_relu", (a,)),
    "hardsigmoid": lambda a, b: ("hard_sigmoid", (a, b)), "elu": lambda a, b: ("elu", (a,)),
    "softsign": lambda a, b: ("softsign", ()), "softplus": lambda a, b: ("softplus", ()),
}


def apply_act(act: Act, x: Expr) -> Expr:
    """One ONNX recurrent activation; Affine and ScaledTanh have no ONNX op of their own."""
    name, alpha, beta = act
    if name == "affine":
        return x * alpha + beta
    if name == "scaledtanh":
        return kmath.tanh(x * beta) * alpha
    fn, params = _EPILOGUE[name](alpha, beta)
    return activation(fn, params, x)


# --- ONNX LSTM / GRU / RNN -> Recurrent ---------------------------------------------------------

def _activations(node: Node, cell: Cell, directions: int) -> tuple[tuple[Act, ...], ...]:
    """The activations of each direction with their alpha and beta."""
    names = node.attrs.get("activations") or cell.default_acts * directions
    per_dir = len(cell.default_acts)
    if len(names) != per_dir * directions:
        raise refuse(node, f"activations lists {len(names)} functions, expected {per_dir * directions} "
                           f"({per_dir} per direction)")
    alphas, betas = list(node.attrs.get("activation_alpha", ())), list(node.attrs.get("activation_beta", ()))
    acts = []
    for name in names:
        key = str(name).lower()
        if key not in _ACTIVATIONS:
            raise refuse(node, f"activation '{name}' is not supported (supported: "
                               f"{', '.join(sorted(_ACTIVATIONS))})")
        uses_a, uses_b, alpha, beta = _ACTIVATIONS[key]
        if uses_a and alphas:
            alpha = float(alphas.pop(0))
        if uses_b and betas:
            beta = float(betas.pop(0))
        acts.append((key, float(alpha), float(beta)))
    return tuple(tuple(acts[d * per_dir:(d + 1) * per_dir]) for d in range(directions))


def _bias(node: Node, cell: Cell, b: np.ndarray | None, directions: int, hidden: int, lbr: bool) -> np.ndarray:
    """Per direction, the bias of each scratch row: Wb + Rb, except GRU with linear_before_reset,
    whose candidate gate adds Rbh inside the reset product (kept apart, after Wbh)."""
    g = cell.gates * hidden
    if b is None:
        b = np.zeros((directions, 2 * g), np.float32)
    b = b.astype(np.float32).reshape(directions, 2 * g)
    wb, rb = b[:, :g], b[:, g:]
    if node.op != "GRU":
        return wb + rb
    if lbr:
        return np.concatenate([wb[:, :2 * hidden] + rb[:, :2 * hidden], wb[:, 2 * hidden:], rb[:, 2 * hidden:]], 1)
    return np.concatenate([wb + rb, np.zeros((directions, hidden), np.float32)], 1)


def _sequence_lens(rw: Rewriter, node: Node, seq: int) -> str:
    """The sequence_lens input to keep: '' when absent or every row is full length."""
    name = node.inputs[4] if len(node.inputs) > 4 else ""
    if not name:
        return ""
    if name not in rw.constants:
        if rw.values[name].dtype != "int32":
            raise refuse(node, f"sequence_lens is {rw.values[name].dtype}, not int32")
        return name                       # read at run time (clamped to [0, seq_length] by the kernel)
    lens = rw.constants[name]
    if np.any(lens < 0) or np.any(lens > seq):
        raise refuse(node, f"sequence_lens {lens.tolist()} has values outside [0, {seq}]")
    return "" if np.all(lens == seq) else rw.constant(name + "_i32", lens.astype(np.int32))


def _check_float(rw: Rewriter, node: Node, indices: tuple[int, ...]) -> None:
    """X, initial_h and initial_c are float32 (the op's dtypes admit int32 for sequence_lens only)."""
    for index in indices:
        name = node.inputs[index] if len(node.inputs) > index else ""
        if name and rw.values[name].dtype != "float32":
            raise refuse(node, f"input '{name}' is {rw.values[name].dtype}; only float32 is supported")


def _outputs(rw: Rewriter, node: Node, cell: Cell, state: tuple[int, ...], scratch: int) -> tuple[list, list]:
    """The Recurrent node's outputs and their roles: Y when the model keeps it, Y_h and Y_c always (the
    state lives there; a fresh workspace value when the model drops them), then the gate scratch."""
    roles, outputs = [], []
    for index, role in enumerate(("y", "h", "c")):
        name = node.outputs[index] if len(node.outputs) > index else ""
        if role == "c" and not cell.state_c:
            continue
        if not name and role != "y":
            name = rw.value(f"{node.name}_{role}_state", state)
        if name:
            roles.append(role)
            outputs.append(name)
    return roles + ["scratch"], outputs + [rw.value(node.name + "_scratch", (scratch,))]


def _weight(rw: Rewriter, node: Node, index: int, what: str) -> str:
    """W or R as (directions, columns, gates), a gate row contiguous: transposed now if constant, by a
    Transpose node at run time if computed."""
    name = node.inputs[index] if len(node.inputs) > index else ""
    if not name:
        raise refuse(node, "W and R are required")
    if name in rw.constants and rw.values[name].quant is not None:     # codes (lower_quantized), kept so
        codes = rw.constants[name]
        return rw.constant(f"{node.name}_{what}", codes.transpose(0, 2, 1).copy(), rw.values[name].quant)
    if name in rw.constants:
        return rw.constant(f"{node.name}_{what}", rw.constants[name].astype(np.float32).transpose(0, 2, 1))
    _check_float(rw, node, (index,))
    dirs, gates, columns = rw.values[name].shape
    out = rw.like(f"{node.name}_{what}", name, (dirs, columns, gates))
    rw.add("Transpose", f"{node.name}_{what}", [name], [out], perm=(0, 2, 1))
    return out


def _bias_input(rw: Rewriter, node: Node, cell: Cell, directions: int, hidden: int, lbr: bool) -> tuple[str, bool]:
    """The Recurrent node's bias and whether it is ONNX's B as given (computed, folded by the kernel)
    rather than folded now."""
    name = node.inputs[3] if len(node.inputs) > 3 else ""
    if name and name not in rw.constants:
        _check_float(rw, node, (3,))
        return name, True
    b = rw.constants[name] if name else None
    return rw.constant(node.name + "_bias", _bias(node, cell, b, directions, hidden, lbr)), False


def _peepholes(rw: Rewriter, node: Node, directions: int, hidden: int) -> str:
    """P as (directions, 3*hidden), the layout ONNX gives it: a constant copy, or the computed input."""
    name = node.inputs[7] if node.op == "LSTM" and len(node.inputs) > 7 else ""
    if not name:
        return ""
    if name not in rw.constants:
        _check_float(rw, node, (7,))
        return name
    return rw.constant(node.name + "_p", rw.constants[name].astype(np.float32).reshape(directions, 3 * hidden))


def canonical_recurrent(rw: Rewriter, node: Node) -> None:
    cell = CELLS[node.op]
    layout = int(node.attrs.get("layout", 0))
    if layout not in (0, 1):
        raise refuse(node, f"layout {layout} is not 0 or 1")
    direction = node.attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise refuse(node, f"direction '{direction}' is not forward, reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    _check_float(rw, node, (0, 5, 6))
    if len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2]:
        raise refuse(node, "W and R are required")
    hidden = rw.values[node.inputs[2]].shape[-1]
    if int(node.attrs.get("hidden_size", hidden)) != hidden:
        raise refuse(node, f"hidden_size {node.attrs['hidden_size']} differs from R's {hidden} columns")
    clip = node.attrs.get("clip")
    if clip is not None and not float(clip) > 0:
        raise refuse(node, f"clip {clip} is not positive")
    x_shape = rw.values[node.inputs[0]].shape
    seq, batch = (x_shape[1], x_shape[0]) if layout else x_shape[:2]
    lbr = bool(node.attrs.get("linear_before_reset", 0))

    def optional(index: int) -> str:
        return node.inputs[index] if len(node.inputs) > index else ""

    bias, raw_bias = _bias_input(rw, node, cell, directions, hidden, lbr)
    rows = _scratch_rows(node.op, cell.gates * hidden, hidden)
    inputs = [node.inputs[0], _weight(rw, node, 1, "wx"), _weight(rw, node, 2, "wh"), bias,
              _sequence_lens(rw, node, seq), optional(5), optional(6) if cell.state_c else "",
              _peepholes(rw, node, directions, hidden)]
    state = (batch, directions, hidden) if layout else (directions, batch, hidden)
    # a computed B is folded into the scratch after the gate rows, one block of rows per direction
    roles, outputs = _outputs(rw, node, cell, state, rows * (1 + directions if raw_bias else 1))
    rw.add("Recurrent", node.name, inputs, outputs, cell=node.op, hidden=hidden, gates=cell.gates * hidden,
           direction=direction, layout=layout, activations=_activations(node, cell, directions),
           clip=float(clip) if clip is not None else None, input_forget=bool(node.attrs.get("input_forget", 0)),
           # TFLite's LSTM (set by its frontend): the cell state clipped, the input gate 1 - the forget gate
           cell_clip=node.attrs.get("cell_clip"), cifg=bool(node.attrs.get("cifg", False)),
           linear_before_reset=lbr, raw_bias=raw_bias, roles=tuple(roles))


def _scratch_rows(op: str, gates: int, hidden: int) -> int:
    """Rows of gate scratch (and of folded bias) per step: the gates, and for GRU a fourth block (the
    recurrent candidate term, or r * h_{t-1})."""
    return gates + hidden if op == "GRU" else gates


# --- the kernel ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Panel:
    """Columns [j0, j1) of a (K, N) weight matrix as the matrix-vector loop reads them, in blocks of
    columns (channel_blocks). Packed at compile time (`stride` 0): per block, K rows of the block's
    width, read in order. Read at run time from the (K, N) matrix itself (`stride` N): a block's row is
    contiguous, the next row `stride` further; `base` is the matrix's offset plus j0."""

    buf: Buffer
    k: int
    blocks: tuple
    offsets: tuple[int, ...]
    stride: int = 0
    base: int = 0
    codes: QuantParams | None = None    # integer codes, dequantized as loaded: (code - zero point) * scale

    def block_start(self, index: int, blk, jb: Expr) -> Expr:
        """Where row 0 of block `jb` of the index-th run of blocks starts."""
        if self.stride:
            return jb * blk.width + (self.base + blk.start)
        return jb * (self.k * blk.width) + self.offsets[index]

    def row_step(self, blk) -> int:
        return self.stride or blk.width


def pack_panel(ctx: LowerContext, matrix: np.ndarray, j0: int, j1: int, codes: QuantParams | None = None) -> Panel:
    k = matrix.shape[0]
    blocks = tuple(channel_blocks(j1 - j0, ctx.target.lanes, max(1, ctx.knobs.nr)))
    parts, offsets, offset = [], [], 0
    for blk in blocks:
        offsets.append(offset)
        for jb in range(blk.count):
            lo = j0 + blk.start + jb * blk.width
            parts.append(matrix[:, lo:lo + blk.width].reshape(-1))
            offset += k * blk.width
    return Panel(ctx.const(np.concatenate(parts), "rnn_w"), k, blocks, tuple(offsets), codes=codes)


def buffer_panel(ctx: LowerContext, buf: Buffer, k: int, n: int, offset: int, j0: int, j1: int) -> Panel:
    """Columns [j0, j1) of the (k, n) matrix at `offset` in a run-time buffer, in the same blocks as
    pack_panel gives (the terms of one matvec share their blocks)."""
    blocks = tuple(channel_blocks(j1 - j0, ctx.target.lanes, max(1, ctx.knobs.nr)))
    return Panel(buf, k, blocks, (0,) * len(blocks), stride=n, base=offset + j0)


def matvec(b: Builder, dst: Buffer, dst_off: Expr | int, bias: Buffer, bias_off: int,
           terms: list[tuple[Buffer, Expr, Panel]]) -> None:
    """dst[j] = bias[j] + sum over terms (src, offset, panel) of sum_k src[offset + k] * panel[k, j]:
    the accumulators of one block of columns stay in registers across every term's k loop."""
    first = terms[0][2]
    for index, blk in enumerate(first.blocks):
        with b.loop("jb", 0, blk.count) as jb:
            col = b.let("col", jb * blk.width + blk.start)
            accs = [b.local("acc", bias.vec(col + (bias_off + r * blk.lanes), blk.lanes)) for r in range(blk.nr)]
            for src, src_off, panel in terms:
                base = b.let("wp", panel.block_start(index, blk, jb))
                with b.loop("k", 0, panel.k) as kk:
                    s = b.let("s", src[src_off + kk])
                    if panel.codes is not None:     # the codes' scale, on the input rather than on each weight
                        s = b.let("s", s * np.float32(panel.codes.scale))
                    for r, acc in enumerate(accs):
                        w = panel.buf.vec(base + kk * panel.row_step(blk) + r * blk.lanes, blk.lanes)
                        if panel.codes is not None:
                            w = Cast(widen(w) - panel.codes.zero_point, "f32")
                        b.assign(acc, fma(s, w, acc))
            for r, acc in enumerate(accs):
                b.store(dst, dst_off + col + r * blk.lanes, acc)


@dataclass(frozen=True)
class Step:
    """What one time step of one direction and batch row reads and writes."""

    b: Builder
    lanes: int
    hidden: int
    attrs: dict              # the Recurrent node's attributes
    x: Buffer
    x_off: Expr              # x_t of this row
    h: Buffer                # hidden state (Y_h), updated in place
    c: Buffer | None         # cell state (Y_c, LSTM)
    state_off: Expr
    y: Buffer | None         # every step's hidden state, when the model keeps Y
    y_off: Expr | None
    g: Buffer                # gate scratch
    bias: Buffer
    bias_off: int
    peep: Buffer | None
    peep_off: int
    acts: tuple[Act, ...]    # this direction's activations
    panels: dict[str, Panel]

    def ld(self, buf: Buffer, off: Expr | int, m: Expr, width: int) -> Expr:
        return buf.vec(m + off, width) if width > 1 else buf[m + off]

    def pre(self, value: Expr) -> Expr:
        """A gate's pre-activation, clipped to [-clip, clip] when the node asks."""
        clip = self.attrs["clip"]
        return value if clip is None else minimum(maximum(value, -clip), clip)

    def store_h(self, m: Expr, value: Expr) -> None:
        """The new hidden state, into the state and into Y."""
        h = self.b.let("h", value)
        self.b.store(self.h, self.state_off + m, h)
        if self.y is not None:
            self.b.store(self.y, self.y_off + m, h)


def _lstm_step(s: Step) -> None:
    b, hn = s.b, s.hidden
    matvec(b, s.g, 0, s.bias, s.bias_off, [(s.x, s.x_off, s.panels["x"]), (s.h, s.state_off, s.panels["h"])])
    f_act, g_act, h_act = s.acts

    def update(m: Expr, width: int) -> None:
        c_prev = b.let("c_prev", s.ld(s.c, s.state_off, m, width))

        def gate(row: int, peep_row: int, c: Expr) -> Expr:     # gates i o f c; P is (i, o, f)
            value = s.ld(s.g, row * hn, m, width)
            if s.peep is not None:
                value = fma(c, s.ld(s.peep, s.peep_off + peep_row * hn, m, width), value)
            return apply_act(f_act, s.pre(value))

        if s.attrs.get("cifg"):
            f = b.let("f", gate(2, 2, c_prev))
            i = b.let("i", 1.0 - f)
        else:
            i = b.let("i", gate(0, 0, c_prev))
            f = b.let("f", 1.0 - i if s.attrs["input_forget"] else gate(2, 2, c_prev))
        cand = apply_act(g_act, s.pre(s.ld(s.g, 3 * hn, m, width)))
        c_new = fma(f, c_prev, i * cand)
        clip = s.attrs.get("cell_clip")
        c_new = b.let("c", minimum(maximum(c_new, -clip), clip) if clip else c_new)
        b.store(s.c, s.state_off + m, c_new)
        s.store_h(m, gate(1, 1, c_new) * apply_act(h_act, c_new))
    b.chunks("m", hn, s.lanes, update)


def _gru_step(s: Step) -> None:
    b, hn = s.b, s.hidden
    f_act, g_act = s.acts
    lbr = s.attrs["linear_before_reset"]
    x, h = (s.x, s.x_off), (s.h, s.state_off)
    matvec(b, s.g, 0, s.bias, s.bias_off, [(*x, s.panels["x_zr"]), (*h, s.panels["h_zr"])])
    if lbr:     # scratch rows: z, r, W_h x + Wbh, R_h h + Rbh
        matvec(b, s.g, 2 * hn, s.bias, s.bias_off + 2 * hn, [(*x, s.panels["x_h"])])
        matvec(b, s.g, 3 * hn, s.bias, s.bias_off + 3 * hn, [(*h, s.panels["h_h"])])
    else:       # scratch rows: z, r, candidate, r * h (the candidate's recurrent operand)
        def reset(m: Expr, width: int) -> None:
            r = apply_act(f_act, s.pre(s.ld(s.g, hn, m, width)))
            b.store(s.g, 3 * hn + m, r * s.ld(s.h, s.state_off, m, width))
        b.chunks("m", hn, s.lanes, reset)
        matvec(b, s.g, 2 * hn, s.bias, s.bias_off + 2 * hn,
               [(*x, s.panels["x_h"]), (s.g, const(3 * hn), s.panels["h_h"])])

    def update(m: Expr, width: int) -> None:
        z = b.let("z", apply_act(f_act, s.pre(s.ld(s.g, 0, m, width))))
        cand = s.ld(s.g, 2 * hn, m, width)
        if lbr:
            r = apply_act(f_act, s.pre(s.ld(s.g, hn, m, width)))
            cand = fma(r, s.ld(s.g, 3 * hn, m, width), cand)
        hh = b.let("hh", apply_act(g_act, s.pre(cand)))
        s.store_h(m, fma(z, s.ld(s.h, s.state_off, m, width) - hh, hh))     # (1 - z) * hh + z * h_prev
    b.chunks("m", hn, s.lanes, update)


def _rnn_step(s: Step) -> None:
    matvec(s.b, s.g, 0, s.bias, s.bias_off, [(s.x, s.x_off, s.panels["x"]), (s.h, s.state_off, s.panels["h"])])
    s.b.chunks("m", s.hidden, s.lanes,
                  lambda m, w: s.store_h(m, apply_act(s.acts[0], s.pre(s.ld(s.g, 0, m, w)))))


_STEPS: dict[str, Callable[[Step], None]] = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}


def _panels(ctx: LowerContext, node: Node, d: int, wx_buf: Buffer, wh_buf: Buffer) -> dict[str, Panel]:
    """Direction d's weights, per group of gate rows the step computes together: packed now when
    constant, read from their (directions, columns, gates) buffer when computed."""
    hn, g = node.attrs["hidden"], node.attrs["gates"]

    def panel(index: int, buf: Buffer, j0: int, j1: int) -> Panel:
        name = node.inputs[index]
        if name in ctx.graph.constants:
            matrix, codes = ctx.graph.constants[name][d], ctx.graph.values[name].quant
            if codes is not None and not ctx.knobs.weight_codes:     # dequantized now, as DequantizeLinear does
                matrix, codes = (matrix.astype(np.int32) - codes.zero_point).astype(np.float32) \
                    * np.float32(codes.scale), None
            return pack_panel(ctx, matrix, j0, j1, codes)
        _, k, n = ctx.graph.shape(name)
        return buffer_panel(ctx, buf, k, n, d * k * n, j0, j1)

    if node.attrs["cell"] != "GRU":
        return {"x": panel(1, wx_buf, 0, g), "h": panel(2, wh_buf, 0, g)}
    return {"x_zr": panel(1, wx_buf, 0, 2 * hn), "h_zr": panel(2, wh_buf, 0, 2 * hn),
            "x_h": panel(1, wx_buf, 2 * hn, 3 * hn), "h_h": panel(2, wh_buf, 2 * hn, 3 * hn)}


def _bias_segments(cell: str, gates: int, hidden: int, lbr: bool) -> list[tuple[int, int, tuple[int, ...]]]:
    """How ONNX's B (Wb then Rb, `gates` each per direction) folds into the scratch's bias rows, as
    `_bias` does at compile time: (first row, rows, offsets into the direction's B summed; none: 0)."""
    if cell != "GRU":
        return [(0, gates, (0, gates))]
    if lbr:     # z, r: Wb + Rb; candidate: Wbh; its recurrent term: Rbh
        return [(0, 2 * hidden, (0, gates)), (2 * hidden, hidden, (2 * hidden,)),
                (3 * hidden, hidden, (gates + 2 * hidden,))]
    return [(0, gates, (0, gates)), (gates, hidden, ())]


def _fold_bias(b: Builder, lanes: int, node: Node, raw: Buffer, scratch: Buffer, rows: int,
               directions: int) -> None:
    """The computed B folded into scratch rows [rows * (1 + d), rows * (2 + d)) for each direction d."""
    gates, hn = node.attrs["gates"], node.attrs["hidden"]
    for d in range(directions):
        for first, count, sources in _bias_segments(node.attrs["cell"], gates, hn, node.attrs["linear_before_reset"]):
            def fold(m: Expr, width: int, first=first, sources=sources) -> None:
                value: Expr = const(0.0, "f32", width)
                for k, offset in enumerate(sources):
                    at = m + (d * 2 * gates + offset)
                    term = raw.vec(at, width) if width > 1 else raw[at]
                    value = term if k == 0 else value + term
                b.store(scratch, m + (rows * (1 + d) + first), value)
            b.chunks("m", count, lanes, fold)


def recurrent(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """for each direction (code copied), batch row, time step (a run-time loop): one cell step."""
    ins, outs, params = ctx.io(node)
    x, wx_buf, wh_buf, bias, lens, h0, c0, peep = ins
    out = dict(zip(node.attrs["roles"], outs))
    layout, hn = node.attrs["layout"], node.attrs["hidden"]
    x_shape = ctx.graph.shape(node.inputs[0])
    seq, batch, width = (x_shape[1], x_shape[0], x_shape[2]) if layout else x_shape
    directions = 2 if node.attrs["direction"] == "bidirectional" else 1
    lanes = ctx.target.lanes
    y = out.get("y")
    b = Builder()
    rows = _scratch_rows(node.attrs["cell"], node.attrs["gates"], hn)
    bias_at = [(bias, d * rows) for d in range(directions)]
    if node.attrs.get("raw_bias"):      # fold ONNX's B into the scratch's rows after the gates, once
        _fold_bias(b, lanes, node, bias, out["scratch"], rows, directions)
        bias_at = [(out["scratch"], rows * (1 + d)) for d in range(directions)]

    def y_at(d: int, row: Expr, t: Expr) -> Expr:
        return ((row * seq + t) * directions + d) * hn if layout else ((t * directions + d) * batch + row) * hn

    for d in range(directions):
        reverse = node.attrs["direction"] == "reverse" or d == 1
        panels = _panels(ctx, node, d, wx_buf, wh_buf)
        with b.loop("row", 0, batch) as row:
            length = const(seq)
            if lens is not None:      # the row's own length, kept within the buffers
                length = b.let("len", minimum(maximum(Cast(lens[row], "idx"), 0), seq))
            state = b.let("st", (row * directions + d) * hn if layout else (row + d * batch) * hn)
            for buf, init in ((out["h"], h0), (out.get("c"), c0)):
                if buf is not None:
                    _initial_state(b, lanes, hn, buf, init, state, length if lens is not None else None)
            with b.loop("t", 0, length) as step:
                t = b.let("tt", length - 1 - step) if reverse else step
                x_off = b.let("xo", (row * seq + t) * width if layout else (t * batch + row) * width)
                _STEPS[node.attrs["cell"]](Step(
                    b, lanes, hn, node.attrs, x, x_off, out["h"], out.get("c"), state,
                    y, b.let("yo", y_at(d, row, t)) if y is not None else None, out["scratch"],
                    *bias_at[d], peep, d * 3 * hn, node.attrs["activations"][d], panels))
            if y is not None and lens is not None:      # steps past the row's length are zeros
                with b.loop("t", length, seq) as t:
                    y_off = b.let("yo", y_at(d, row, t))
                    b.chunks("m", hn, lanes, lambda m, w: b.store(y, y_off + m, const(0.0, "f32", w)))
    return Kernel(name, params, b.block())


def _initial_state(b: Builder, lanes: int, hn: int, state: Buffer, init: Buffer | None, off: Expr,
                   length: Expr | None) -> None:
    """The state starts as the given initial value or zeros; a row of length 0 ends with zeros."""
    def fill(m: Expr, width: int) -> None:
        value = const(0.0, "f32", width)
        if init is not None:
            value = init.vec(off + m, width) if width > 1 else init[off + m]
            if length is not None:
                value = select(binop("gt", length, 0), value, 0.0)
        b.store(state, off + m, value)
    b.chunks("m", hn, lanes, fill)


def _macs(graph: Graph, node: Node) -> int:
    x = graph.shape(node.inputs[0])
    wx, wh = graph.shape(node.inputs[1]), graph.shape(node.inputs[2])
    steps = x[0] * x[1]
    return int(steps * (np.prod(wx) + np.prod(wh)))


def _check(graph: Graph, node: Node) -> str | None:
    """Y_h (and Y_c, Y) have the shapes the attributes give."""
    x = graph.shape(node.inputs[0])
    layout, hn = node.attrs["layout"], node.attrs["hidden"]
    directions = 2 if node.attrs["direction"] == "bidirectional" else 1
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    want = {"h": (batch, directions, hn) if layout else (directions, batch, hn),
            "y": (batch, seq, directions, hn) if layout else (seq, directions, batch, hn)}
    want["c"] = want["h"]
    for role, out in zip(node.attrs["roles"], node.outputs):
        if role in want and graph.shape(out) != want[role]:
            return f"output {role} has shape {list(graph.shape(out))}, expected {list(want[role])}"
    return None


define("Recurrent", lower=recurrent, macs=_macs, check=_check)
for _op in CELLS:
    define(_op, canonical=canonical_recurrent, dtypes=FLOAT | frozenset({"int32"}))
