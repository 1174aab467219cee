"""Integer-SIMD capabilities: what a target's instruction set offers int8 kernels, as registered values.

A target file names one form (`int_simd = "dsp"`); the name is checked when the file loads, so a typo
is an error rather than a silent fallback to the generic path. Kernels ask the capability which dot
products it has (`IntSimd.dots`); code generation looks up how to emit them by the same value.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.errors import TargetError


@dataclass(frozen=True)
class DotStyle:
    """How a target's integer dot-product instruction wants its operands.

    bytes: raw 8-bit values, `group` of them per 32-bit lane (AVX-512 VNNI vpdpbusd takes the
    activations unsigned, NEON sdot signed); the zero point comes off through the bias, so every tap
    of the window must be present (no padding). pairs: x - x_zp and w - w_zp as 16-bit pairs in one
    32-bit lane (x86 vpmaddwd, the Cortex-M DSP's SMLAD: two multiplies and two adds at once); any padding.
    widening: raw bytes without a dot-product instruction (AArch64 NEON): 8 input channels of a pixel, two
    output channels to a 16-byte block, products summed in 16 bits and then pairwise (k.WideningDot), two
    i32 lanes per output channel added at the end. matrix: raw signed bytes by Armv8.6's int8 matrix multiply
    (SMMLA, k.MatrixDot): two pixels' 8 input channels against two output channels' 8 weights, a 2 x 2 block
    of sums per instruction."""

    group: int
    raw_bytes: bool
    a_unsigned: bool = False
    scalar: bool = False        # one output channel per accumulator, the group summed across a vector
    byte_pairs: bool = False    # 4 bytes per 32-bit load, widened in pairs (bytes 0,2 and 1,3) in core
                                # registers with the zero point added (sxtab16), multiplied by SMLAD
    widening: bool = False      # SMULL, SMLAL2, SADALP (see above); weights in [-127, 127]
    matrix: bool = False        # SMMLA on 2 pixels x 2 output channels (see above)


@dataclass(frozen=True)
class IntSimd:
    """One integer-SIMD form: its name in target files and the dot products it offers, best first."""

    name: str
    description: str
    dots: tuple[DotStyle, ...] = ()
    row_lanes: int = 0          # int32 lanes per output's sum in the int8 row kernels (aot/ops/conv/rows.py):
                                # 1 = VMLADAVA into a core register, 4 = VPADAL into a vector; 0 = none
    predicated: bool = False    # lane masks are one VCTP and masked loads are real (no splitting into lanes)
    tiles: bool = False         # x86 AMX tile registers (k.Tile; aot/ops/conv/amx.py) besides the dots

    @property
    def matrix(self) -> bool:
        """True if the form multiplies int8 matrices (k.MatrixDot in one instruction: SMMLA)."""
        return any(d.matrix for d in self.dots)

    @property
    def byte_pairs(self) -> bool:
        """True if bytes widen in pairs in one instruction (BytePairs in kernel IR: sxtb16, sxtab16)."""
        return any(d.byte_pairs for d in self.dots)

    def __str__(self) -> str:
        return self.name


_PAIRS = DotStyle(2, False)
_FORMS = (
    IntSimd("none", "no integer SIMD: int32 multiply-accumulate"),
    IntSimd("sse2", "x86 SSE2 (no int8 dot product used)"),
    IntSimd("avx2", "x86 AVX2: vpmaddwd on 16-bit pairs, 8 lanes", (_PAIRS,)),
    IntSimd("avx512bw", "x86 AVX-512BW: vpmaddwd on 16-bit pairs, 16 lanes", (_PAIRS,)),
    IntSimd("avx512-vnni", "x86 AVX-512 VNNI: vpdpbusd on 4 bytes per lane (unsigned x signed)",
            (DotStyle(4, True, a_unsigned=True), _PAIRS)),
    IntSimd("amx", "x86 AMX: tdpbusd on 16 x 64-byte tiles of unsigned x signed bytes; AVX-512 VNNI vpdpbusd "
            "where a layer does not take tiles", (DotStyle(4, True, a_unsigned=True), _PAIRS), tiles=True),
    IntSimd("neon", "Arm NEON without dot product: widening multiply-accumulate (SMULL, SMLAL2, SADALP on AArch64)",
            (DotStyle(8, True, widening=True),), row_lanes=4),
    IntSimd("neon-dotprod", "Arm NEON with the Armv8.2 dot product: sdot on 4 signed bytes per lane",
            (DotStyle(4, True),)),
    IntSimd("neon-i8mm", "Arm NEON with the Armv8.6 int8 matrix multiply: smmla on 2 pixels x 2 channels of 8 "
            "signed bytes, sdot where a layer does not fit its blocks",
            (DotStyle(8, True, matrix=True), DotStyle(4, True))),
    IntSimd("dsp", "Arm DSP extension (Cortex-M4/M7): bytes widened in pairs (SXTB16, SXTAB16), SMLAD on "
            "16-bit pairs in a core register", (DotStyle(4, False, scalar=True, byte_pairs=True), _PAIRS)),
    IntSimd("mve", "Arm Helium (MVE): VMLAV sums 8 products into a scalar", (DotStyle(8, False, scalar=True),),
            row_lanes=1, predicated=True),
)
INT_SIMD: dict[str, IntSimd] = {form.name: form for form in _FORMS}


def int_simd(name: str | IntSimd) -> IntSimd:
    """The registered form of that name; a TargetError naming the valid ones otherwise."""
    if isinstance(name, IntSimd):
        return name
    if name not in INT_SIMD:
        raise TargetError(f"unknown int_simd '{name}' (valid: {', '.join(INT_SIMD)})")
    return INT_SIMD[name]
