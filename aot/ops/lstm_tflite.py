"""TFLite's integer UNIDIRECTIONAL_SEQUENCE_LSTM as TFLite Micro's reference kernel computes it: one kernel
per node, int8 (or int16) activations, int8 weights of one scale per matrix, int16 cell state.

Each step of a batch row: every gate (TFLite's order i, f, c, o) is two fully connected products, W x_t and
R h_{t-1}, each requantized on its own to Q3.12 (the multiplier of s_x * s_w / 2**-12, the scales
multiplied in float32) and clamped to int16, then added with saturation; sigmoid (the cell gate: tanh, the
one activation TFLite Micro takes) maps the sum to Q0.15 through TFLite's int16 sigmoid table
(tflite_sigmoid16.py). The cell becomes f * c (a multiplier of 2**-15) plus i * g (of 2**-30 / s_c), each
product requantized and clamped to int16, the sum saturated and clipped to the quantized cell clip; the
hidden state is tanh(c) (the table at the step of s_c) times o, requantized to the hidden state's encoding,
and is also the step's output. Products of 8-bit values and their sums are exact in int32 (16x8: int64,
requantized by TFLite's 15-bit reduced multiplier); the input's and hidden state's zero points are folded
into the biases at compile time (sum_c w (x_c - z) = sum_c w x_c - z sum_c w, exactly). On the Arm DSP
(Cortex-M4/M7) the products go four bytes per load through SMLAD, two units at a time; elsewhere one by one.

Rows do not meet, so each batch row runs all its steps before the next, whatever the layout (time-major
input only moves where a step's input and output lie). The kernel first copies the state into its new
state outputs and updates them in place; the four gates' activations live in a scratch output.

TFLite Micro takes no peepholes, projection, layer normalization or coupled gates on the integer LSTM;
LiteRT computes the integer gates with gemmlowp's fixed-point functions instead of the table, so its
outputs differ by a few steps: TFLite Micro is the reference here.

Inputs: x, W (4 * cells, inputs), R (4 * cells, cells) and the bias (4 * cells), constants, h, c;
outputs: y, the new h and c (the frontend makes them the states' next values), the gates' scratch.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.quant import checked_log2, tflite_multiplier
from aot.kernel.ir import Builder, BytePairs, Cast, Dot, Expr, Kernel, Reinterpret, const, maximum, minimum
from aot.ops import LowerContext
from aot.ops import tflite_sigmoid16 as curve
from aot.ops.quantized import multiply_reduced, multiply_twice_rounded, saturate, widen
from aot.registry import ALL_DTYPES, define

F32 = np.float32
GATE_SCALE = 2.0**-12       # the gates' products, Q3.12
ACTIVATED_SCALE = 2.0**-15  # sigmoid and tanh outputs, Q0.15


def gate_multiplier(x_scale: float, w_scale: float) -> tuple[int, int]:
    """(m0, shift) of a gate's product s_x * s_w (formed in float32) over Q3.12's scale, in double."""
    real = float(F32(x_scale) * F32(w_scale)) / GATE_SCALE
    (m0,), (shift,) = tflite_multiplier(real)
    return int(m0), int(shift)


def product_multiplier(a_scale: float, b_scale: float, y_scale: float) -> tuple[int, int]:
    """(m0, shift) of an elementwise product's s_a * s_b / s_y, in double."""
    (m0,), (shift,) = tflite_multiplier(float(a_scale) * float(b_scale) / float(F32(y_scale)))
    return int(m0), int(shift)


def cell_tanh_rescale(cell_scale: float) -> tuple[int, int]:
    """(multiplier, shift) that bring the cell state to the sigmoid table's tanh step: from the cell scale's
    power of two p, a left shift of 12 + p folded into 3 << k, or a right shift of -(12 + p) after times 3."""
    power, _ = checked_log2(cell_scale)
    left = 12 + power
    return (3 << left, 0) if left >= 0 else (3, -left)


def folded_biases(weights: np.ndarray, recurrent: np.ndarray, bias: np.ndarray, x_zp: int, h_zp: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The input and recurrent products' biases with the zero points folded in: b - z_x sum_c W, -z_h sum_c R."""
    kind = np.int64
    into = bias.astype(kind) - x_zp * weights.astype(kind).sum(axis=1)
    back = -h_zp * recurrent.astype(kind).sum(axis=1)
    return into, back


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, weights, recurrent, _, h_in, c_in = ins
    y, h, c, gates = outs
    a = node.attrs
    steps, batch, width, cells = a["steps"], a["batch"], a["width"], a["cells"]
    x_scale, h_scale, cell_scale = a["x_scale"], a["h_scale"], a["cell_scale"]
    wide = a["wide"]                    # int16 activations (16x8)
    into, back = folded_biases(*(ctx.graph.constants[node.inputs[i]] for i in (1, 2, 3)), a["x_zp"], a["h_zp"])
    narrow = max(np.abs(into).max(), np.abs(back).max()) < 2**31
    acc = "i32" if narrow and not wide else "i64"
    bias_in, bias_rec = (ctx.const(v.astype(np.int32 if acc == "i32" else np.int64), "bias") for v in (into, back))
    requantize = multiply_reduced if wide else multiply_twice_rounded
    into_gate = [gate_multiplier(x_scale, s) for s in a["w_scales"]]
    from_hidden = [gate_multiplier(h_scale, s) for s in a["r_scales"]]
    forget_cell = product_multiplier(ACTIVATED_SCALE, cell_scale, cell_scale)
    input_cell = product_multiplier(ACTIVATED_SCALE, ACTIVATED_SCALE, cell_scale)
    hidden_out = product_multiplier(ACTIVATED_SCALE, ACTIVATED_SCALE, h_scale)
    cell_rescale = cell_tanh_rescale(cell_scale)
    clip = a["clip"]
    table = ctx.const(curve.table_codes(), "sigmoid")
    h_type = "int16" if wide else "int8"
    lo, hi = (-(2**15), 2**15 - 1) if wide else (-128, 127)

    def fixed(m: tuple[int, int]) -> tuple[Expr, Expr]:
        return const(m[0], "i32"), const(m[1], "i32")

    def clamp16(v: Expr) -> Expr:
        return minimum(maximum(v, const(-(2**15), "i32")), const(2**15 - 1, "i32"))

    pairs = acc == "i32" and ctx.target.int_simd.byte_pairs     # the Arm DSP: SMLAD on byte pairs
    b = Builder()
    with b.loop("i", 0, batch * cells) as i:        # the state, then updated in place
        b.store(h, i, h_in[i])
        b.store(c, i, c_in[i])
    with b.loop("r", 0, batch) as row:
        with b.loop("t", 0, steps) as t:
            at = t * batch + row if a["time_major"] else row * steps + t
            def units(g: int, first: Expr, count: int) -> None:
                """Gate g's activations for `count` units from `first` (two at a time: each input word is
                loaded and widened once for both)."""
                units = [g * cells + first + u for u in range(count)]
                products: list[list[Expr]] = [[] for _ in units]
                for matrix, source, offset, n, bias, m in (
                        (weights, x, at * width, width, bias_in, into_gate[g]),
                        (recurrent, h, row * cells, cells, bias_rec, from_hidden[g])):
                    totals = [b.local("acc", Cast(bias[unit], acc)) for unit in units]
                    _dots(b, totals, matrix, [unit * n for unit in units], source, offset, n, acc, pairs)
                    for u, total in enumerate(totals):
                        if acc == "i64" and not wide:       # the sum itself fits int32, as TFLite forms it
                            total = Cast(total, "i32")
                        products[u].append(clamp16(requantize(total, *fixed(m))))
                for unit, (into, back) in zip(units, products):
                    pre = clamp16(into + back)
                    activated = (curve.tanh if g == 2 else curve.sigmoid)(table, pre, 3, 0)
                    b.store(gates, unit, Cast(activated, "i16"))

            for g in range(4):
                pair = 2 if pairs else 1
                with b.loop("j", 0, cells // pair) as j:
                    units(g, j * pair, pair)
                if cells % pair:
                    units(g, const(cells - 1), 1)
            with b.loop("j", 0, cells) as j:
                input_, forget, cell, output = (widen(gates[g * cells + j]) for g in range(4))     # i, f, c, o
                state = row * cells + j
                kept = clamp16(multiply_twice_rounded(forget * widen(c[state]), *fixed(forget_cell)))
                added = clamp16(multiply_twice_rounded(input_ * cell, *fixed(input_cell)))
                new_cell = clamp16(kept + added)
                if clip:
                    new_cell = minimum(maximum(new_cell, const(-clip, "i32")), const(clip, "i32"))
                new_cell = b.let("cell", new_cell)
                b.store(c, state, Cast(new_cell, "i16"))
                squashed = curve.tanh(table, new_cell, *cell_rescale)
                hidden = b.let("hidden", saturate(multiply_twice_rounded(squashed * output, *fixed(hidden_out))
                                                  + a["h_zp"], lo, hi, h_type))
                b.store(h, state, hidden)
                b.store(y, at * cells + j, hidden)
    return Kernel(name, params, b.block())


def _dots(b: Builder, totals, matrix, rows: list[Expr], source, offset: Expr, n: int, acc: str, pairs: bool
          ) -> None:
    """totals[u] += sum over k < n of matrix[rows[u] + k] * source[offset + k], int8 codes. With `pairs` (the
    Arm DSP) four bytes of each load as one word (unaligned loads are allowed there), its bytes 0, 2 and 1, 3
    sign-extended into 16-bit pairs (sxtb16) and multiplied and added two at a time (SMLAD), the source's
    word widened once for every row; the last n % 4 one by one."""
    words = n // 4 if pairs else 0
    if words:
        with b.loop("k", 0, words) as k:
            v = b.let("v", Reinterpret(source.vec(offset + k * 4, 4), "i32", 1))
            halves = [b.let("vp", Reinterpret(BytePairs(v, odd), "i16", 2)) for odd in (False, True)]
            for total, row in zip(totals, rows):
                w = b.let("w", Reinterpret(matrix.vec(row + k * 4, 4), "i32", 1))
                step = total
                for odd in (False, True):
                    step = Dot(step, halves[odd], Reinterpret(BytePairs(w, odd), "i16", 2), False)
                b.assign(total, step)
    with b.loop("k", words * 4, n) as k:
        for total, row in zip(totals, rows):
            b.assign(total, total + Cast(matrix[row + k], acc) * Cast(source[offset + k], acc))


def _keep(rw: Rewriter, node: Node) -> None:
    rw.keep(node)


def _macs(graph: Graph, node: Node) -> int:
    a = node.attrs
    return a["steps"] * a["batch"] * 4 * a["cells"] * (a["width"] + a["cells"])


define("TfliteLstm", canonical=_keep, lower=lower, macs=_macs, dtypes=ALL_DTYPES)
