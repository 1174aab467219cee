"""The arithmetic forms of a convolution's micro-kernel: float, integer (int32 sums, 64-bit where they
could overflow, lanes), dot products on raw or widened bytes, matrix multiplies and byte pairs; how a
pixel's sums are finished and stored; and which form a node takes on a target (dot_style, _arith)."""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node
from aot.graph.node_quant import Quant, node_quant
from aot.graph.quant import RANGES, fixed_point, real_multiplier, tflite_multiplier
from aot.isa import DotStyle
from aot.kernel.ir import (
    Broadcast,
    Buffer,
    Builder,
    BytePairs,
    Cast,
    Dot,
    Expr,
    Lanes,
    Load,
    MatrixDot,
    Reinterpret,
    Shuffle,
    WideningDot,
    binop,
    const,
    fma,
    maximum,
    minimum,
)
from aot.ops import LowerContext
from aot.ops.conv.blocks import ChannelBlock
from aot.ops.epilogue import apply
from aot.ops.quantized import (
    add_quantized,
    add_tflite,
    multiply_real,
    multiply_reduced,
    multiply_twice_rounded,
    multiply_wide,
    narrows_by_halves,
    quantize,
    quantized_function,
    requantize_fixed,
    saturate,
    widen,
)
from aot.registry import op_def, operand


def store_pixel(b: Builder, out: Buffer, arith: Arith, blk: ChannelBlock, accs: list[Expr], ch0: Expr,
                base: Expr, gather: int = 1) -> None:
    """One pixel's accumulators for a block of channels, finished and stored at `base`: where integers
    narrow in halving steps (see quantize), up to 16 lanes side by side at a time, so they narrow to bytes
    together; scalar integer accumulators (one channel each: Helium's VMLADAV) `gather` at a time as one
    vector, so they requantize together; otherwise vector by vector."""
    together = max(1, 16 // blk.lanes) if isinstance(arith, IntArith) and arith.halving and blk.lanes > 1 else 1
    if isinstance(arith, IntArith) and blk.lanes == 1:
        together = max(together, gather)
    j = 0
    while j < len(accs):
        n = 1 << (min(together, len(accs) - j).bit_length() - 1)     # a power of two of vectors
        acc = Lanes(tuple(accs[j: j + n])) if n > 1 else accs[j]
        at = base + j * blk.lanes
        b.store(out, at, arith.result(acc, ch0 + j * blk.lanes, at, n * blk.lanes))
        j += n


class FloatArith:
    """fp32: FMA into fp32 accumulators; the epilogue adds the residual and applies the activations.

    On AArch64 a pixel's 4 input channels load as one vector and each step multiplies by one of its lanes
    (FMLA by element): a load per 4 steps, not per step."""

    acc_dtype = "f32"
    group = 1           # input channels per multiply-accumulate step
    scalar = False      # accumulators one channel wide whatever the vector width
    window = None       # see DotArith
    SPAN = 4

    def __init__(self, ctx: LowerContext, bias: np.ndarray | None, acts, residual: Buffer | None, channels: int = 1):
        self.bias = ctx.const(bias.astype(np.float32), "b") if bias is not None else None
        self.acts, self.residual = acts, residual
        self.span = self.SPAN if ctx.target.aarch64_neon and ctx.knobs.simd and channels % self.SPAN == 0 else 1

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """A span keeps each pixel's 4 channels in a register besides its accumulators: 7 x 3 in 32."""
        return (min(mr, 7), nr) if self.span > 1 else (mr, nr)

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.astype(np.float32)

    def init(self, ch: Expr, lanes: int) -> Expr:
        return self.bias.vec(ch, lanes) if self.bias is not None else const(0.0, "f32", lanes)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        """The input value(s) multiplied at one step (FMA splats a scalar across the lanes)."""
        return self.load_x(x[index])

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        """The operands of each step of a span, loaded at once and bound by `bind`."""
        if self.span == 1:
            return [bind(self.operand(x, index, lanes))]
        quad = bind(x.vec(index, self.span))
        return [Shuffle(quad, (k,) * lanes) if lanes > 1 else Shuffle(quad, (k,)) for k in range(self.span)]

    def load_x(self, value: Expr) -> Expr:
        return value

    def load_w(self, value: Expr) -> Expr:
        return value

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return fma(a, w, acc)

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        if self.residual is not None:
            acc = acc + self.residual.vec(idx, lanes)
        return apply(self.acts, acc)


class IntArith:
    """int8: (x - x_zp) * (w - w_zp) summed in int32 (weight zero points subtracted at compile time),
    int32 bias. The epilogue requantizes each channel: with an FPU as onnxruntime does (float32 scale,
    round to nearest even), which keeps deep networks within a step of it; without one by a fixed-point
    multiplier and shift (TFLite's way)."""

    acc_dtype = "i32"
    group = 1
    scalar = False
    window = None
    narrowing = 0

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, residual: Buffer | None = None):
        self.q = quant
        self.residual = residual if quant.residual is not None else None
        # TFLite's rules are its fixed-point multipliers, on every target
        self.fixed = not ctx.target.fpu or quant.rules == "tflite"
        self.halving = narrows_by_halves(ctx.target)
        self.float_bias = None
        if bias is not None and bias.dtype == np.float32:
            if self.fixed:      # no FPU: fold the float bias into the integer accumulator
                bias = np.round(bias / (quant.x_scale * quant.w_scale)).astype(np.int32)
            else:               # added after scaling, in units of the output scale
                self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")
                bias = None
        # the sums reach the epilogue divided by it (LongArith), but for TFLite's, which take the sum whole
        gain = 1.0 if quant.rules == "tflite" else 2.0 ** self.narrowing
        if self.fixed and quant.rounding == "real":
            high, low, shift = real_multiplier(quant.x_scale * quant.w_scale * gain / quant.y_scale)
            self.high, self.low = ctx.const(high.astype(np.int32), "mh"), ctx.const(low, "ml")
            self.shift = ctx.const(shift.astype(np.int32), "s")
        elif self.fixed:
            convert = tflite_multiplier if quant.rules == "tflite" else fixed_point
            m0, shift = convert(quant.x_scale * quant.w_scale * gain / quant.y_scale)
            self.m0 = ctx.const(m0.astype(np.int32), "m")
            self.shift = ctx.const(shift.astype(np.int32), "s")
        else:
            scale = np.float32(quant.x_scale) * quant.w_scale.astype(np.float32) / np.float32(quant.y_scale)
            self.scale = ctx.const((scale * np.float32(gain)).astype(np.float32), "s")
        # int32, or TFLite's int64 bias of 16x8 layers (LongArith)
        wide_bias = bias is not None and bias.dtype == np.int64 and self.acc_dtype == "i64"
        self.bias = ctx.const(bias.astype(np.int64 if wide_bias else np.int32), "b") if bias is not None else None
        # vectors of 8 or 16 int32 lanes the target multiplies as 16-bit pairs (x86's VPMADDWD; see mac)
        # (int16 activations less a zero point other than 0 may not fit 16 bits)
        pairs = any(d.group == 2 and not d.scalar and not d.raw_bytes for d in ctx.target.int_simd.dots)
        narrow = quant.x_dtype != "int16" or quant.x_zp == 0
        self.pair_lanes = {8, 16} if pairs and narrow and ctx.target.lanes >= 8 else set()

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.astype(np.int8 if packed.min() >= -128 and packed.max() <= 127 else np.int16)

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """The default register tile (pixels, vectors of channels) within what the form's registers allow."""
        return mr, nr

    def init(self, ch: Expr, lanes: int) -> Expr:
        return self.bias.vec(ch, lanes) if self.bias is not None else const(0, "i32", lanes)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return self.load_x(x[index])

    @property
    def span(self) -> int:
        """Input channels per activation load: one step unless the form says otherwise (DotArith)."""
        return self.group

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        return [bind(self.operand(x, index, lanes))]

    def load_x(self, value: Expr) -> Expr:
        return widen(value) - self.q.x_zp

    def load_w(self, value: Expr) -> Expr:
        return widen(value)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        """acc + a * w. Both fit in 16 bits (8-bit values less their zero points): where the target has a
        16-bit pairs multiply, a's lanes as pairs (a, its sign) times (w, 0) is a * w in one VPMADDWD,
        where the 32-bit multiply (VPMULLD) is two micro-ops of twice the latency."""
        if acc.lanes in self.pair_lanes:
            a, w = (Broadcast(v, acc.lanes) if v.lanes == 1 else v for v in (a, w))
            pairs = 2 * acc.lanes
            return Dot(acc, Reinterpret(a, "i16", pairs), Reinterpret(binop("and", w, 0xFFFF), "i16", pairs), False)
        return acc + a * w

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        """The output: the requantized sum, then the fused residual Add and activation."""
        y = self.requantize(acc, ch, lanes)
        q = self.q
        if self.residual is not None:
            s = q.residual      # the fused Add, on this result as the Add kernel would have read it
            add = add_tflite if q.rules == "tflite" else add_quantized
            y = add(y, q.y_scale, q.y_zp, self.residual.vec(idx, lanes), s.r_scale, s.r_zp,
                    s.y_scale, s.y_zp, s.qmin, s.qmax, s.y_dtype)
        f = q.function          # the fused activation, as its own kernel (elementwise.unary) computes it
        if f is not None:
            y = quantized_function(y, f.fn, f.params, f.x_scale, f.x_zp, f.y_scale, f.y_zp, f.qmin, f.qmax, f.y_dtype)
        return y

    def requantize(self, acc: Expr, ch: Expr, lanes: int) -> Expr:
        """The int32 sum in the output's encoding, saturated to its range."""
        q = self.q
        if self.fixed and q.rounding == "real":
            y = multiply_real(acc, self.high.vec(ch, lanes), self.low.vec(ch, lanes), self.shift.vec(ch, lanes))
            return saturate(y + q.y_zp, q.qmin, q.qmax, q.y_dtype)
        if self.fixed and q.rounding == "double":
            y = multiply_twice_rounded(acc, self.m0.vec(ch, lanes), self.shift.vec(ch, lanes))
            return saturate(y + q.y_zp, q.qmin, q.qmax, q.y_dtype)
        if self.fixed:
            return requantize_fixed(acc, self.m0.vec(ch, lanes), self.shift.vec(ch, lanes), q.y_zp, q.qmin, q.qmax,
                                    q.y_dtype)
        value = Cast(acc, "f32") * self.scale.vec(ch, lanes)
        if self.float_bias is not None:
            value = value + self.float_bias.vec(ch, lanes)
        return quantize(value, q.y_zp, q.qmin, q.qmax, q.y_dtype, self.halving)


class LongArith(IntArith):
    """IntArith summing in int64, for a layer whose int32 sum could overflow (`accumulator_shift`): int16
    activations times int8 weights over a long window (a 3x3 convolution on 256 channels and more; CMSIS-NN's
    s16 convolution switches to 64-bit sums at 512 taps). Each product is widened to 64 bits (SMLAL on
    Arm) and the sum is brought back to int32 by a rounding shift right of `narrowing` bits before the usual
    epilogue, whose scale is that much larger: 2**-31 of the sum's range, far below float32's precision."""

    acc_dtype = "i64"

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, residual: Buffer | None,
                 narrowing: int):
        self.narrowing = narrowing
        super().__init__(ctx, quant, bias, residual)
        self.pair_lanes = set()

    def init(self, ch: Expr, lanes: int) -> Expr:
        return Cast(self.bias.vec(ch, lanes), "i64") if self.bias is not None else const(0, "i64", lanes)

    def load_x(self, value: Expr) -> Expr:
        return Cast(widen(value) - self.q.x_zp, "i64")

    def load_w(self, value: Expr) -> Expr:
        return Cast(widen(value), "i64")

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return acc + a * w

    def requantize(self, acc: Expr, ch: Expr, lanes: int) -> Expr:
        q = self.q
        if q.rules == "tflite":     # TFLite's 16x8 kernels requantize the int64 sum itself
            # (FULLY_CONNECTED's by the whole multiplier, the convolutions' by it rounded to 15 bits)
            multiply = multiply_wide if q.rounding == "single" else multiply_reduced
            y = multiply(acc, self.m0.vec(ch, lanes), self.shift.vec(ch, lanes))
            return saturate(y + q.y_zp, q.qmin, q.qmax, q.y_dtype)
        half = const(1 << (self.narrowing - 1), "i64", lanes)
        narrowed = Cast(binop("shr", acc + half, const(self.narrowing, "i64", lanes)), "i32")
        return super().requantize(narrowed, ch, lanes)


def accumulator_shift(weight: np.ndarray, quant: Quant, bias: np.ndarray | None) -> int:
    """0 when each output channel's sum of (x - x_zp) (w - w_zp), plus its integer bias, fits int32 for every
    input the activation type holds; else the bits by which it may pass int32 (LongArith). weight: output
    channels first, zero points not yet subtracted. TFLite sums 8-bit activations in int32 whatever the
    window, so its models do too."""
    if quant.rules == "tflite":     # 8-bit activations sum in int32, 16-bit ones in int64 (LongArith)
        return 0 if quant.x_dtype != "int16" else 1
    lo, hi = RANGES[quant.x_dtype]
    x_max = max(abs(lo - quant.x_zp), abs(hi - quant.x_zp))
    w = weight.astype(np.int64).reshape(weight.shape[0], -1)
    bound = np.abs(w - np.asarray(quant.w_zp, np.int64).reshape(-1, 1)).sum(axis=1) * x_max
    if bias is not None and bias.dtype == np.int32:
        bound = bound + np.abs(bias.astype(np.int64))
    return max(0, int(bound.max(initial=0)).bit_length() - 31)


class LaneArith(IntArith):
    """int8 on AArch64 NEON without a dot product usable here: a step takes `group` (8) input channels of
    a pixel as one vector of 16-bit x - x_zp, and per input channel k multiplies the weights of the
    vector's output channels (consecutive: see _pack_dense's channels_inner; int8 in flash, widened 8 at a
    time) by lane k of it, widening into the int32 accumulators: SMLAL/SMLAL2 by element, 4
    multiply-accumulates an instruction, the activations loaded and widened once per 8 channels, not each."""

    group = 8

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """2 vectors of channels: 2 x MR accumulators, 8 widened weight registers."""
        return mr, min(nr, 2)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Cast(x.vec(index, self.group), "i16") - const(self.q.x_zp, "i16", self.group)

    def load_w(self, value: Expr) -> list[Expr]:
        """The step's weights widened to 16 bits 8 at a time (one SSHLL of a half register each), as
        vectors of 8 lanes that hold 8 // lanes input channels' weights."""
        return [Cast(Shuffle(value, tuple(range(i, i + 8))), "i16") if value.dtype == "i8"
                else Shuffle(value, tuple(range(i, i + 8))) for i in range(0, value.lanes, 8)]

    def mac(self, acc: Expr, a: Expr, w: list[Expr]) -> Expr:
        lanes = acc.lanes
        per_chunk = 8 // lanes
        for k in range(self.group):
            chunk, at = divmod(k, per_chunk)
            weights = Shuffle(w[chunk], tuple(range(at * lanes, (at + 1) * lanes))) if lanes < 8 else w[chunk]
            activation = Shuffle(a, (k,) * lanes) if lanes > 1 else Shuffle(a, (k,))
            acc = acc + Cast(weights, "i32") * Cast(activation, "i32")
        return acc


def lane_arith_applies(ctx: LowerContext, cg: int, quant: Quant | None) -> bool:
    """LaneArith's conditions: AArch64 NEON, a quantized Conv/Gemm with whole groups of 8 input channels,
    an activation zero point that keeps x - x_zp in 16 bits (any int8 or uint8 one does)."""
    return (quant is not None and ctx.target.aarch64_neon and cg % LaneArith.group == 0 and ctx.knobs.simd
            and (quant.x_dtype != "int16" or quant.x_zp == 0))


class DotArith(IntArith):
    """int8 on a dot-product instruction (see DotStyle): each step multiplies `group` input channels of
    one pixel, repeated across the lanes, with `group` weights per output channel, summed into the
    channel's int32 lane.

    With raw bytes, x - x_zp is never formed: the zero point (and the +-128 that turns int8 into the
    unsigned bytes VNNI wants, or uint8 into the signed ones of sdot) comes off once, through the bias:
    sum (x' - z') w = sum x' w - z' sum w. With padding, a window clipped at the border skips the taps
    over it, so its z' sum w is over the taps it keeps: init_window reads it from `window`, a table of
    z' sum w over the window's leading [0, a) x [0, b) taps, by inclusion-exclusion of four corners.

    Without a dot-product instruction (style.widening: AArch64 NEON) a step takes 8 input channels, each
    output channel owns two i32 lanes that k.WideningDot fills (the int bias and window sums in the first),
    and the result adds them.
    """

    window: Buffer | None = None    # padded: (kh + 1) x (kw + 1) x channels of prefix sums (see above)
    spread = 1                      # i32 lanes per output channel
    SPAN = 16                       # sdot: a pixel's 16 channels in one load, each step by element

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, residual: Buffer | None = None, padded: bool = False):
        self.style, self.group, self.scalar = style, style.group, style.scalar
        self.spread = 2 if style.widening else 1
        # NEON's sdot takes its 4 activation bytes by element from a vector: 16 channels load as one (the
        # broadcast form reloads each word, and AArch64's broadcasting load has no offset to fold)
        by_element = style.raw_bytes and not style.a_unsigned and style.group == 4 and not style.widening
        self.by_element = by_element and not style.scalar and weight.shape[1] % self.SPAN == 0
        x_int8 = x_dtype == "i8"
        self.flip = style.raw_bytes and (x_int8 == style.a_unsigned)      # flip x's top bit
        if style.raw_bytes:
            z = quant.x_zp + ((128 if x_int8 else -128) if self.flip else 0)
            self.raw_zero_point = z         # the zero point as the dot product sees the bytes
            taps = weight.astype(np.int64).sum(axis=1)                     # (out channels, kh, kw)
            int_bias = bias.astype(np.int64) if bias is not None and bias.dtype == np.int32 else 0
            if padded:
                prefix = np.zeros((taps.shape[1] + 1, taps.shape[2] + 1, taps.shape[0]), np.int64)
                prefix[1:, 1:] = (z * taps).transpose(1, 2, 0).cumsum(axis=0).cumsum(axis=1)
                self.window = ctx.const(self._spread(prefix).astype(np.int32), "zw")  # dot_style: it fits
                self.taps = taps.shape[1:]
                int_bias = int_bias + np.zeros(taps.shape[0], np.int64)
            else:
                int_bias = int_bias - z * taps.reshape(taps.shape[0], -1).sum(axis=1)
            int_bias = self._spread(np.clip(int_bias, -(2**31), 2**31 - 1))
            super().__init__(ctx, quant, int_bias.astype(np.int32), residual)
            if bias is not None and bias.dtype == np.float32:
                self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")
        else:
            super().__init__(ctx, quant, bias, residual)

    def _spread(self, per_channel: np.ndarray) -> np.ndarray:
        """Values per output channel (last axis) laid out as the accumulators hold them: with two lanes
        per channel, each followed by a zero."""
        if self.spread == 1:
            return per_channel
        return np.stack([per_channel, np.zeros_like(per_channel)], axis=-1).reshape(*per_channel.shape[:-1], -1)

    def init(self, ch: Expr, lanes: int) -> Expr:
        return super().init(ch * self.spread, lanes * self.spread)

    def init_window(self, ch: Expr, lanes: int, kh_lo: Expr, kh_hi: Expr, kw_lo: Expr, kw_hi: Expr) -> Expr:
        """The accumulator's start for a window clipped to taps [kh_lo, kh_hi) x [kw_lo, kw_hi); a window
        wholly over the padding may come as hi < lo (no taps): it keeps none."""
        kh, kw = self.taps
        channels = self.window.size // ((kh + 1) * (kw + 1))
        kh_lo, kw_lo = minimum(kh_lo, kh), minimum(kw_lo, kw)         # padding wider than the kernel
        kh_hi, kw_hi = maximum(kh_hi, kh_lo), maximum(kw_hi, kw_lo)

        def corner(a: Expr, b: Expr) -> Expr:
            return self.window.vec((a * (kw + 1) + b) * channels + ch * self.spread, lanes * self.spread)

        kept = corner(kh_hi, kw_hi) - corner(kh_lo, kw_hi) - corner(kh_hi, kw_lo) + corner(kh_lo, kw_lo)
        return self.init(ch, lanes) - kept

    def weights(self, packed: np.ndarray) -> np.ndarray:
        """int8 in flash whenever the values fit (16-bit pairs are widened as they are loaded). Widening:
        each vector's 4 channels x 8 input channels as k.WideningDot pairs them, channels (0, 1) then (2, 3),
        each pair's first 4 input channels then its last 4."""
        fits = self.style.raw_bytes or (packed.min() >= -128 and packed.max() <= 127)
        if self.style.widening:     # (pair, channel, half, 4) -> (pair, half, channel, 4)
            packed = packed.reshape(-1, 2, 2, 2, 4).transpose(0, 1, 3, 2, 4).reshape(-1)
        return packed.astype(np.int8 if fits else np.int16)

    @property
    def span(self) -> int:
        return self.SPAN if self.by_element else self.group

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """Widening: 2 accumulators per vector of channels and per pixel, 2 weight registers per vector.
        A span by element keeps each pixel's 16 bytes in a register besides its accumulators."""
        if self.style.widening:
            return min(mr, 4), min(nr, 2)
        return (min(mr, 8), min(nr, 2)) if self.span > self.group else (mr, nr)

    def raw_words(self, x: Buffer, index: Expr, count: int) -> Expr:
        """`count` bytes of a pixel's channels as 32-bit words, each byte's top bit flipped if it must be."""
        words = Reinterpret(x.vec(index, count), "i32", count // 4)
        return binop("xor", words, const(-0x7F7F7F80, "i32", count // 4)) if self.flip else words   # +-128 a byte

    def operands(self, x: Buffer, index: Expr, lanes: int, bind) -> list[Expr]:
        if self.span == self.group:
            return [bind(self.operand(x, index, lanes))]
        words = bind(self.raw_words(x, index, self.span))
        return [Reinterpret(Shuffle(words, (k,) * lanes), "i8", lanes * 4) for k in range(self.span // 4)]

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        if self.style.widening:     # 8 channels as words (0, 0, 1, 1): each channel pair's two halves
            words = self.raw_words(x, index, self.group)
            return Reinterpret(Shuffle(words, (0, 0, 1, 1) * (lanes // 2)), "i8", lanes * 8)
        if self.style.raw_bytes:
            word = self.raw_words(x, index, self.group)
        else:
            pair = Cast(widen(x.vec(index, self.group)) - self.q.x_zp, "i16")
            if lanes == 1:
                return pair
            word = Reinterpret(pair, "i32", 1)
        element = "i8" if self.style.raw_bytes else "i16"
        return Reinterpret(Broadcast(word, lanes) if lanes > 1 else word, element, lanes * self.group)

    def load_w(self, value: Expr) -> Expr:
        return Cast(value, "i16") if not self.style.raw_bytes and value.dtype == "i8" else value

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        if self.style.widening:
            return WideningDot(acc, a, w)
        return Dot(acc, a, w, self.style.a_unsigned)

    def result(self, acc: Expr, ch: Expr, idx: Expr, lanes: int) -> Expr:
        if self.spread == 2:        # each channel's two lanes: ADDP
            acc = Shuffle(acc, tuple(range(0, 2 * lanes, 2))) + Shuffle(acc, tuple(range(1, 2 * lanes, 2)))
        return super().result(acc, ch, idx, lanes)


class MatrixArith(DotArith):
    """int8 on Armv8.6's matrix multiply (SMMLA; DotStyle.matrix): an accumulator holds two pixels x a vector
    of 4 output channels as two 2 x 2 blocks, lanes (p0 c0, p0 c1, p1 c0, p1 c1, p0 c2, p0 c3, p1 c2, p1 c3);
    a step multiplies the two pixels' 8 input channels, one 16-byte vector, by the vector's 32 weight
    bytes, each channel's 8 in a row (the dot-product packing with groups of 8). A pixel on its own (an odd
    tile, a tap that reaches only one of the two) pairs with zeros."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, residual: Buffer | None = None, padded: bool = False):
        super().__init__(ctx, style, quant, bias, weight, x_dtype, residual, padded)
        # 16 channels of a pixel in one load, its halves paired with the neighbour's (ZIP1, ZIP2): 4
        # instructions per two steps of two pixels, where 8 bytes at a time take 6
        self.wide = weight.shape[1] % 16 == 0

    @property
    def span(self) -> int:
        return 16 if self.wide else 8

    def tile(self, mr: int, nr: int) -> tuple[int, int]:
        """4 pixels x 4 vectors of channels by default: 16 accumulator registers, 4 for the row pairs and 8
        for the weights; of 8 x 2, 6 x 3 and 4 x 4 it executed the fewest instructions over the int8 zoo."""
        return min(mr, 4), 4

    def join(self, starts: list[Expr]) -> Expr:
        """Two pixels' accumulator starts (4 channels each) as one accumulator; a lone pixel's twice."""
        first, second = starts[0], starts[-1]
        return Shuffle(Lanes((first, second)), (0, 1, 4, 5, 2, 3, 6, 7))

    def part(self, acc: Expr, k: int) -> Expr:
        """Pixel k's 4 channels of an accumulator."""
        return Shuffle(acc, (0, 1, 4, 5) if k == 0 else (2, 3, 6, 7))

    def pair_operands(self, x: Buffer, indexes: list[Expr | None], bind) -> list[Expr]:
        """Each step's row pair: two pixels' 8 channels, the pixels' span of channels at `indexes`; a pixel
        given as None (or missing: a lone pixel) is zeros."""
        words = self.span // 4
        rows = [bind(self.raw_words(x, i, self.span)) if i is not None else const(0, "i32", words) for i in indexes]
        rows += [const(0, "i32", words)] * (2 - len(rows))
        return [Reinterpret(Shuffle(Lanes(tuple(rows)), (k, k + 1, words + k, words + k + 1)), "i8", 16)
                for k in range(0, words, 2)]

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        return MatrixDot(acc, a, w)


class WideArith(DotArith):
    """int8 depthwise convolution on AArch64 NEON (see lower_depthwise): raw activation bytes widened to
    16 bits (sign- or zero-extended as their type is) times 16-bit weights w - w_zp, the activation zero
    point through the bias and, where padding clips windows, DotArith's window table."""

    dw_nr = 4       # vectors of channels per tile by default: 16 channels, one 16-byte load

    def __init__(self, ctx: LowerContext, quant: Quant, bias: np.ndarray | None, weight: np.ndarray, x_dtype: str,
                 residual: Buffer | None, padded: bool):
        super().__init__(ctx, DotStyle(1, True, a_unsigned=x_dtype == "u8"), quant, bias, weight, x_dtype,
                         residual, padded)
        # int8 activations and weights in [-127, 127]: two taps' products add in 16 bits
        self.pairs = x_dtype == "i8" and (weight.size == 0 or (weight.min() >= -127 and weight.max() <= 127))


class BytePairArith(IntArith):
    """int8 on the Arm DSP (see DotStyle.byte_pairs): one 32-bit load brings 4 input channels of a pixel,
    and one 4 weights of an output channel; each word widens into two 16-bit pairs, bytes (0, 2) and
    (1, 3) (sxtb16, and through a folded rotate), so activation and weight pairs match and two SMLADs
    take the 4 products. LLVM shares each pixel's and each channel's widening across the register tile.
    With the knob wide_weights the weights are stored widened (see weights) and only the activations widen.

    The activation zero point comes off in the widening (sxtab16 with the pair (-x_zp, -x_zp)) where the
    window may be clipped by padding; without padding it comes off once, through the bias:
    sum (x - z) w = sum x w - z sum w, and the widening is a plain sxtb16."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 weight: np.ndarray, x_dtype: str, padded: bool, residual: Buffer | None = None):
        self.group, self.scalar = style.group, True
        self.unsigned = x_dtype == "u8"
        self.wide = ctx.knobs.wide_weights
        self.fresh = False      # activation words loaded anew at each use (k.Load.fresh; see lower_dense)
        self.zero_pair = None
        if padded or not quant.x_zp:
            super().__init__(ctx, quant, bias, residual)
            if quant.x_zp:
                half = -quant.x_zp & 0xFFFF
                self.zero_pair = const(np.int32(np.uint32(half * 0x10001)).item(), "i32")
            return
        sums = _minus_zero_point(weight, quant, axis=0).reshape(weight.shape[0], -1).astype(np.int64).sum(axis=1)
        int_bias = (bias.astype(np.int64) if bias is not None and bias.dtype == np.int32 else 0) - quant.x_zp * sums
        super().__init__(ctx, quant, np.clip(int_bias, -(2**31), 2**31 - 1).astype(np.int32), residual)
        if bias is not None and bias.dtype == np.float32:
            self.float_bias = ctx.const((bias / np.float32(quant.y_scale)).astype(np.float32), "fb")

    def weights(self, packed: np.ndarray) -> np.ndarray:
        """int8 (dot_style checked that they fit); with the knob wide_weights each word of 4 stored as the
        16-bit pairs its widening would make, (w0, w2) then (w1, w3): twice the flash, no sxtb16 per load."""
        if self.wide:
            return packed.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(-1).astype(np.int16)
        return packed.astype(np.int8)

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Reinterpret(Load(x, index, self.group, self.fresh), "i32", 1)

    def load_w(self, value: Expr) -> Expr:
        return Reinterpret(value, "i32", 2 if self.wide else 1)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        for odd in (False, True):
            xa = BytePairs(a, odd, self.zero_pair, self.unsigned)
            wa = Shuffle(w, (int(odd),)) if self.wide else BytePairs(w, odd)
            acc = Dot(acc, Reinterpret(xa, "i16", 2), Reinterpret(wa, "i16", 2), False)
        return acc


class HalfPairArith(IntArith):
    """int16 activations (zero point 0) times int8 weights on the Arm DSP (DotStyle.byte_pairs): a pixel's 4
    input channels load as two words, the pairs (c0, c1) and (c2, c3) as they lie in memory; an output
    channel's 4 weights as one word, stored (w0, w2, w1, w3) so that sxtb16 widens it into the matching
    pairs (w0, w1) and (w2, w3) (bytes 0, 2, and 1, 3 through a folded rotate). Two SMLADs take the 4
    products, and the weights stay int8 in flash."""

    def __init__(self, ctx: LowerContext, style: DotStyle, quant: Quant, bias: np.ndarray | None,
                 residual: Buffer | None = None):
        super().__init__(ctx, quant, bias, residual)
        self.group, self.scalar = style.group, True

    def weights(self, packed: np.ndarray) -> np.ndarray:
        return packed.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(-1).astype(np.int8)     # dot_style: they fit

    def operand(self, x: Buffer, index: Expr, lanes: int) -> Expr:
        return Reinterpret(x.vec(index, 4), "i32", 2)

    def load_w(self, value: Expr) -> Expr:
        return Reinterpret(value, "i32", 1)

    def mac(self, acc: Expr, a: Expr, w: Expr) -> Expr:
        for odd in (0, 1):
            acc = Dot(acc, Reinterpret(Shuffle(a, (odd,)), "i16", 2), Reinterpret(BytePairs(w, bool(odd)), "i16", 2),
                      False)
        return acc


Arith = FloatArith | IntArith


def arith_form(arith: Arith) -> str:
    """What a workload key says of the arithmetic: integer, dot products or byte pairs (nothing: float)."""
    if isinstance(arith, BytePairArith):
        return "pairs"
    if isinstance(arith, HalfPairArith):
        return "halfpairs"
    if isinstance(arith, WideArith):
        return "wide16"
    if isinstance(arith, MatrixArith):
        return f"matrix{arith.group}"
    if isinstance(arith, DotArith):
        if arith.style.widening:
            return f"widening{arith.group}"
        return f"dot{arith.group}" + ("raw" if arith.style.raw_bytes else "")
    if isinstance(arith, LaneArith):
        return f"lane{arith.group}"
    if isinstance(arith, LongArith):
        return "int64"
    return "int" if isinstance(arith, IntArith) else ""


_BYTES = ("int8", "uint8")     # activations a 32-bit load takes 4 of


def _dot_operands(quant: Quant) -> bool:
    """Activations a dot product takes: bytes, or int16 ones whose zero point is 0 (so that x - x_zp, which
    the 16-bit pair forms multiply, stays within 16 bits)."""
    return quant.x_dtype in _BYTES or (quant.x_dtype == "int16" and quant.x_zp == 0)


def dot_style(ctx: LowerContext, node: Node, groups: int, cg: int) -> DotStyle | None:
    """The best dot-product form this quantized Conv/Gemm can use on the target, if any."""
    quant = node_quant(ctx.graph.values, node)
    if quant is None or groups != 1 or not _dot_operands(quant):
        return None
    halves = quant.x_dtype == "int16"
    weight = ctx.graph.constants[node.inputs[1]]
    out_channels = weight.shape[0 if weight.ndim == 4 else 1]
    for style in ctx.target.int_simd.dots:
        if cg % style.group or (halves and style.raw_bytes):
            continue
        # Widening: vectors of 4 whole channels, int16 pair sums; AArch64 only (32-bit NEON's 16 vector
        # registers take the row kernels, rows.py).
        if style.widening and (not ctx.target.aarch64_neon or out_channels % 4
                               or weight.size and weight.min() < -127):
            continue
        if style.matrix and out_channels % 4:
            continue
        if style.raw_bytes and (weight.dtype != np.int8 or np.any(quant.w_zp) or (
                any(node.attrs.get("pads", (0,))) and not _window_sums_fit(weight))):
            continue
        if style.byte_pairs and not _fits_int8(_minus_zero_point(weight, quant, axis=0 if weight.ndim == 4 else 1)):
            continue
        return style
    return None


def _long_arith(ctx: LowerContext, node: Node, ins, weight: np.ndarray) -> LongArith | None:
    """A LongArith for a quantized node whose int32 sums could overflow, else None. weight: OIHW."""
    quant = node_quant(ctx.graph.values, node)
    if quant is None:
        return None
    bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
    narrowing = accumulator_shift(weight, quant, bias)
    return LongArith(ctx, quant, bias, _residual(node, ins), narrowing) if narrowing else None


def _arith(ctx: LowerContext, node: Node, ins, style: DotStyle | None, weight: np.ndarray,
           depthwise: bool = False) -> Arith:
    """weight: OIHW (output channel first)."""
    bias = ctx.graph.constants[operand(node, "bias")] if operand(node, "bias") else None
    quant = node_quant(ctx.graph.values, node)
    residual = _residual(node, ins)
    if style is not None and style.byte_pairs and quant.x_dtype == "int16":
        return HalfPairArith(ctx, style, quant, bias, residual)
    if style is not None and style.byte_pairs:
        return BytePairArith(ctx, style, quant, bias, weight, ins[0].dtype, any(node.attrs.get("pads", (0,))),
                             residual)
    if style is not None:
        return (MatrixArith if style.matrix else DotArith)(ctx, style, quant, bias, weight, ins[0].dtype, residual,
                                                           padded=style.raw_bytes and any(node.attrs.get("pads", (0,))))
    # AArch64 only: elsewhere the window table (16 int32 per channel of a padded 3x3 layer) costs more flash
    # than the speed it buys is worth (x86: 12 % on MobileNetV2's depthwise layers, int8 flash +35 %)
    if quant is not None and depthwise and quant.x_dtype in _BYTES and lane_arith_applies(ctx, LaneArith.group,
                                                                                          quant):
        wide = _minus_zero_point(weight, quant, axis=0)
        if _window_sums_fit(wide):
            return WideArith(ctx, quant, bias, wide, ins[0].dtype, residual, any(node.attrs.get("pads", (0,))))
    if quant is not None and lane_arith_applies(ctx, weight.shape[1], quant):
        return LaneArith(ctx, quant, bias, residual)
    if quant is not None:
        return IntArith(ctx, quant, bias, residual)
    return FloatArith(ctx, bias, node.attrs.get("acts", ()), residual, weight.shape[1])


def _residual(node: Node, ins: list[Buffer]) -> Buffer | None:
    """The buffer of a fused residual Add's other operand, if the node has one."""
    index = op_def(node.op).index("residual")
    return ins[index] if len(ins) > index else None


def _window_sums_fit(weight: np.ndarray) -> bool:
    """Whether DotArith's table of z' sum w over a padded window's taps fits int32 (|z'| <= 256)."""
    per_channel = np.abs(weight.astype(np.int64)).reshape(weight.shape[0], -1).sum(axis=1)
    return per_channel.size == 0 or int(per_channel.max()) * 256 < 2**31


def _fits_int8(values: np.ndarray) -> bool:
    return values.size == 0 or (values.min() >= -128 and values.max() <= 127)


def _minus_zero_point(weight: np.ndarray, quant: Quant, axis: int) -> np.ndarray:
    """Integer weights with their per-channel zero point subtracted (int16, narrowed when packed)."""
    shape = [1] * weight.ndim
    shape[axis] = -1
    return weight.astype(np.int16) - quant.w_zp.reshape(shape).astype(np.int16)
