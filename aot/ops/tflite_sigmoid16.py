"""TFLite's int16 sigmoid and tanh (the int16 LOGISTIC and TANH operators, and the integer LSTM's gates): a
256-entry table of sigmoid(i / 24) in unsigned 0.16 fixed point, read at the magnitude of the rescaled input
and interpolated linearly, mirrored for negative inputs; tanh(x) = 2 sigmoid(2x) - 1 reads the same table at
twice the step.

The input is first rescaled to the table's step: times an integer multiplier, then a rounding (half up)
shift right. For an input scale of 2**-12 (Q3.12) sigmoid's multiplier is 3 (the table spans [-10.7, 10.7]
where Q3.12 spans [-8, 8]); any other scale gets a 15-bit multiplier of s_in * 4096 * 3 and a shift.

The table is TFLite's own (its reference kernels' sigmoid_table_uint16), carried here as data: 44 of its
entries are one step above sigmoid(i / 24) rounded, a tuning that no formula reproduces, and outputs are
bit-exact only with those entries. It is kept offset by -32768 so that it fits int16 (512 bytes).
"""

from __future__ import annotations

import numpy as np

from aot.graph.quant import checked_log2
from aot.kernel.ir import Buffer, Cast, Expr, binop, const, minimum, select

SIGMOID_TABLE = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
)


def table_codes() -> np.ndarray:
    """The table as the kernels hold it: each entry less 32768, as int16."""
    return (np.array(SIGMOID_TABLE, np.int32) - 32768).astype(np.int16)


def input_rescale(scale: float, fn: str) -> tuple[int, int]:
    """(multiplier, shift) that bring an int16 input of `scale` to the table's step, as TFLite's LOGISTIC and
    TANH Prepare make them: a power-of-two scale of 2**-12 (or 2**-11 for tanh) by 3 << k, any other by
    the largest multiplier below 2**15 of s_in * 4096 * 3 and the shift it takes."""
    exponent, exact = checked_log2(scale)
    left = 12 + exponent
    if exact and (left == 0 or (fn == "tanh" and left == 1)):
        return 3 << left, 0
    multiplier, shift = float(np.float32(scale)) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def _rescaled(x: Expr, multiplier: int, shift: int) -> Expr:
    v = x * const(multiplier, "i32")
    return binop("shr", v + const(1 << (shift - 1), "i32"), const(shift, "i32")) if shift else v


def _interpolated(table: Buffer, magnitude: Expr, step_bits: int, top: int) -> Expr:
    """The table at magnitude / 2**step_bits, interpolated by its low step_bits bits (the entries' own
    scale times 2**step_bits); `top` past the table's end."""
    at = binop("shr", magnitude, const(step_bits, "i32"))
    index = Cast(minimum(at, const(254, "i32")), "idx")
    low = Cast(table[index], "i32") + 32768
    high = Cast(table[index + 1], "i32") + 32768
    fraction = binop("and", magnitude, const((1 << step_bits) - 1, "i32"))
    inside = binop("shl", low, const(step_bits, "i32")) + fraction * (high - low)
    return select(binop("lt", at, const(255, "i32")), inside, const(top, "i32"))


def sigmoid(table: Buffer, x: Expr, multiplier: int, shift: int) -> Expr:
    """sigmoid of int16 x (as int32) to Q0.15 (int32 in [0, 32767])."""
    v = _rescaled(x, multiplier, shift)
    magnitude = select(binop("ge", v, const(0, "i32")), v, const(0, "i32") - v)
    r = _interpolated(table, magnitude, 9, 0x7FFF << 10)
    r = select(binop("ge", v, const(0, "i32")), r + (1 << 9), const((1 << 25) + (1 << 9) - 1, "i32") - r)
    return binop("shr", r, const(10, "i32"))


def tanh(table: Buffer, x: Expr, multiplier: int, shift: int) -> Expr:
    """tanh of int16 x (as int32) to Q0.15 (int32 in [-32768, 32767])."""
    v = _rescaled(x, multiplier, shift)
    magnitude = select(binop("ge", v, const(0, "i32")), v, const(0, "i32") - v)
    r = _interpolated(table, magnitude, 8, 0xFFFF << 8)
    r = select(binop("ge", v, const(0, "i32")), r - ((1 << 23) - (1 << 7)),
               const((1 << 23) + (1 << 7) - 1, "i32") - r)
    return binop("shr", r, const(8, "i32"))
