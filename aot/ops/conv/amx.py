"""int8 convolutions and Gemm on x86 AMX tile registers (int_simd "amx", target x86-64-amx).

A kernel computes 32 output pixels x 32 output channels at a time, in four int32 tiles: tmm0-tmm3 are
pixels 0-15 and 16-31 by channels 0-15 and 16-31. First the 32 pixels' windows are copied into a stack
buffer, one row per pixel of kh x kw x C bytes (im2row), raised to the unsigned bytes TDPBUSD takes
(int8 activations with their top bit flipped), the padding filled with that zero point, so every window
is whole and the zero point comes off through the bias (DotArith); a row is padded with zeros to whole
64-byte steps, and rows past the last pixel repeat it (their sums are never stored). Each step loads 16
rows x 64 bytes of the buffer into tmm4 and tmm5 and a 16-channel block's weights (16 rows of 16 channels
x 4 bytes, packed so) into tmm6 and tmm7, and adds four TDPBUSD. The sums go to a second stack buffer and
requantize 16 channels at a time.

Where the target's features lack the AMX instructions (a build of this form for a host without them, to
check it runs right) the tile instructions are emulated on 1 KB of stack per tile, TDPBUSD as VPDPBUSD
row by row.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node
from aot.isa import DotStyle
from aot.kernel.ir import (
    Broadcast,
    Buffer,
    Builder,
    Dot,
    Expr,
    Kernel,
    Reinterpret,
    Select,
    Tile,
    binop,
    const,
    maximum,
    minimum,
)
from aot.ops import LowerContext
from aot.ops.conv.arith import DotArith
from aot.ops.conv.geometry import Geometry, workload
from aot.schedule import Schedule

PIXELS = 32             # output pixels per tile pair (two tiles of 16 rows)
CHANNELS = 32           # output channels per tile pair (two tiles of 16 channels x 4 bytes)
STEP = 64               # bytes of a window row per tile row
STACK_BYTES = 256 * 1024    # the im2row buffer at most (the stack a kernel may take)


def applies(ctx: LowerContext, style: DotStyle | None, g: Geometry, groups: int) -> bool:
    """Whether a quantized convolution (or Gemm) with dot-product `style` runs on tiles: raw unsigned
    bytes (VNNI's form), whole 16-channel blocks of output, 16 pixels or more (fewer leave most of a tile
    idle: VNNI does them), and windows whose im2row rows fit the stack."""
    if not (ctx.target.int_simd.tiles and ctx.knobs.simd and style is not None and style.raw_bytes
            and style.a_unsigned and groups == 1):
        return False
    return g.m % 16 == 0 and g.n * g.oh * g.ow >= 16 and PIXELS * _row_bytes(g) <= STACK_BYTES


def _row_bytes(g: Geometry) -> int:
    return -(-g.kh * g.kw * g.c // STEP) * STEP


def pack_weights(weight: np.ndarray, row: int) -> np.ndarray:
    """OIHW int8 -> per 16-channel block, per 64-byte step: 16 rows of 16 channels x 4 bytes (the B tile
    of TDPBUSD), the window in (kh, kw, c) order as im2row lays it, zeros past its end and past the last
    channel up to a whole 32."""
    m = weight.shape[0]
    flat = np.zeros((-(-m // CHANNELS) * CHANNELS, row), np.int8)
    flat[:m, : weight[0].size] = weight.transpose(0, 2, 3, 1).reshape(m, -1)
    blocks = flat.reshape(-1, 16, row // STEP, STEP // 4, 4)        # (block, n, step, kq, i)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 1, 4)).reshape(-1)


class Tiles:
    """The tile instructions of a kernel: real ones, or emulated on the stack buffer `regs` (8 tiles of
    16 rows x 16 int32) where the target lacks them. Strides are in bytes; indices in the buffer's
    elements."""

    def __init__(self, b: Builder, native: bool):
        self.b, self.native = b, native
        self.regs = None if native else Buffer("tmm", "i32", 8 * 256)

    def config(self, cfg: Buffer) -> None:
        if self.native:
            self.b.emit(Tile("config", buf=cfg))

    def release(self) -> None:
        if self.native:
            self.b.emit(Tile("release"))

    def zero(self, t: int) -> None:
        if self.native:
            self.b.emit(Tile("zero", (t,)))
            return
        with self.b.loop("row", 0, 16) as row:
            self.b.store(self.regs, t * 256 + row * 16, const(0, "i32", 16))

    def load(self, t: int, buf: Buffer, index: Expr, stride: int) -> None:
        if self.native:
            self.b.emit(Tile("load", (t,), buf, index, const(stride)))
            return
        with self.b.loop("row", 0, 16) as row:
            self.b.store(self.regs, t * 256 + row * 16, Reinterpret(buf.vec(index + row * stride, 64), "i32", 16))

    def store(self, t: int, buf: Buffer, index: Expr, stride: int) -> None:
        if self.native:
            self.b.emit(Tile("store", (t,), buf, index, const(stride)))
            return
        with self.b.loop("row", 0, 16) as row:
            self.b.store(buf, index + row * (stride // 4), self.regs.vec(t * 256 + row * 16, 16))

    def dot(self, c: int, a: int, w: int) -> None:
        """tmm[c][m] += sum over k of unsigned a[m][4k:4k+4] . signed w[k][4n:4n+4], lane n."""
        if self.native:
            self.b.emit(Tile("dot", (c, a, w)))
            return
        b, regs = self.b, self.regs
        with b.loop("m", 0, 16) as m:
            acc = b.local("acc", regs.vec(c * 256 + m * 16, 16))
            with b.loop("k", 0, 16) as k:
                word = Reinterpret(Broadcast(regs[a * 256 + m * 16 + k], 16), "i8", 64)
                b.assign(acc, Dot(acc, word, Reinterpret(regs.vec(w * 256 + k * 16, 16), "i8", 64), True))
            b.store(regs, c * 256 + m * 16, acc)


def lower_amx(ctx: LowerContext, node: Node, name: str, g: Geometry, weight: np.ndarray, arith: DotArith,
              x: Buffer, out: Buffer, params: tuple[Buffer, ...]) -> Kernel:
    """See the module's docstring. `arith` was made with padded=False: every window is whole."""
    row = _row_bytes(g)
    pixels, window = g.n * g.oh * g.ow, g.kh * g.kw * g.c
    chosen = ctx.schedule(node, workload("amx", g, 1, x, "tiles"), Schedule("amx", PIXELS, CHANNELS // 16))
    wbuf = ctx.const(pack_weights(weight, row), "w")
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1                                              # palette 1
    cfg[16:32] = np.frombuffer(np.full(8, STEP, np.uint16).tobytes(), np.uint8)   # bytes per row, tiles 0-7
    cfg[48:56] = 16                                         # rows, tiles 0-7
    cfg_buf = ctx.const(cfg, "tilecfg")
    rows = Buffer("im2row", "u8", PIXELS * row)
    sums = Buffer("sums", "i32", PIXELS * CHANNELS)
    b = Builder()
    tiles = Tiles(b, "+amx-int8" in ctx.target.features)
    zero_point = const(int(arith.raw_zero_point), "u8")
    tiles.config(cfg_buf)
    if row > window:        # the zeros past each window, never overwritten
        for r in range(PIXELS):
            _fill(b, rows, r * row + window, row - window, const(0, "u8"))
    with b.loop("p0", 0, pixels, PIXELS) as p0:
        with b.loop("r", 0, PIXELS) as r:
            _im2row(b, g, arith, x, rows, r, minimum(p0 + r, const(pixels - 1)), row, zero_point)
        with b.loop("nb", 0, -(-g.m // CHANNELS) * CHANNELS, CHANNELS) as nb:
            for t in range(4):
                tiles.zero(t)
            with b.loop("s", 0, row // STEP) as s:
                tiles.load(4, rows, s * STEP, row)
                tiles.load(5, rows, 16 * row + s * STEP, row)
                for half in (0, 1):
                    tiles.load(6 + half, wbuf, ((binop("div", nb, 16) + half) * (row // STEP) + s) * 1024, STEP)
                for t, (a, w) in enumerate(((4, 6), (4, 7), (5, 6), (5, 7))):
                    tiles.dot(t, a, w)
            for t in range(4):
                tiles.store(t, sums, const((t // 2) * 16 * CHANNELS + (t % 2) * 16), CHANNELS * 4)
            with b.loop("i", 0, minimum(const(PIXELS), const(pixels) - p0)) as i:
                with b.loop("h", 0, minimum(const(2), binop("div", const(g.m) - nb, 16))) as h:
                    ch = nb + h * 16
                    at = (p0 + i) * g.m + ch
                    acc = arith.init(ch, 16) + sums.vec(i * CHANNELS + h * 16, 16)
                    b.store(out, at, arith.result(acc, ch, at, 16))
    tiles.release()
    stack = (rows, sums) + ((tiles.regs,) if tiles.regs is not None else ())
    return Kernel(name, params, b.block(), (), chosen, stack)


def _im2row(b: Builder, g: Geometry, arith: DotArith, x: Buffer, rows: Buffer, r: Expr, p: Expr, row: int,
            zero_point: Expr) -> None:
    """Row r of the buffer: output pixel p's window, tap by tap, as unsigned bytes; taps over the padding
    are the zero point."""
    n = binop("div", p, g.oh * g.ow)
    oy, ox = binop("rem", binop("div", p, g.ow), g.oh), binop("rem", p, g.ow)
    with b.loop("kh", 0, g.kh) as kh:
        iy = oy * g.stride[0] - g.pads[0] + kh * g.dilation[0]
        with b.loop("kw", 0, g.kw) as kw:
            ix = ox * g.stride[1] - g.pads[1] + kw * g.dilation[1]
            inside = binop("and", binop("and", binop("ge", iy, 0), binop("lt", iy, g.h)),
                           binop("and", binop("ge", ix, 0), binop("lt", ix, g.w)))
            src = ((n * g.h + maximum(minimum(iy, const(g.h - 1)), const(0))) * g.w
                   + maximum(minimum(ix, const(g.w - 1)), const(0))) * g.c
            dst = r * row + (kh * g.kw + kw) * g.c
            _copy(b, x, src, rows, dst, g.c, arith, inside, zero_point)


def _copy(b: Builder, x: Buffer, src: Expr, rows: Buffer, dst: Expr, count: int, arith: DotArith, inside: Expr,
          zero_point: Expr) -> None:
    """`count` bytes of x from src to rows at dst as unsigned bytes, or the zero point where not `inside`;
    64 bytes at a time, then 16, 4 and 1."""
    def chunk(c: Expr, width: int) -> None:
        value = x.vec(src + c, width)
        value = Reinterpret(value, "u8", width) if x.dtype != "u8" else value
        if arith.flip:
            value = binop("xor", value, const(0x80, "u8", width) if width > 1 else const(0x80, "u8"))
        fill = Broadcast(zero_point, width) if width > 1 else zero_point
        b.store(rows, dst + c, Select(inside, value, fill))

    done = 0
    for width in (64, 16, 4, 1):
        whole = (count - done) // width * width
        if whole > width:
            with b.loop("c", done, done + whole, width) as c:
                chunk(c, width)
        elif whole:
            chunk(const(done), width)
        done += whole


def _fill(b: Builder, rows: Buffer, at: int, count: int, value: Expr) -> None:
    for i in range(0, count - count % 16, 16):
        b.store(rows, const(at + i), Broadcast(value, 16))
    for i in range(count - count % 16, count):
        b.store(rows, const(at + i), value)
