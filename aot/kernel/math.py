"""Elementwise math as kernel-IR expressions: polynomials and bit tricks, no libm calls.

Each works on scalars or vectors of f32 and uses only add/mul/fma/min/max/select, integer bit
operations and bitcasts, so it vectorizes on every target and the object needs no libm. The one
exception is `sqrt`, which the LLVM backend lowers to the FPU's square-root instruction where the
target has one (a plain routine otherwise).

Accuracy, float32 against a float64 reference, as measured by tests/test_math.py (max ulp of the
result over wide ranges; the tests' bounds are a little looser):
  exact          floor, ceil, round (half to even), trunc, sign (bit for bit as numpy, -0.0 included)
  0.5 ulp        sqrt: correctly rounded (the FPU's instruction, or `sqrt_newton` with FMA); <= 1 ulp
                 without FMA (soft float)
  exp 1.25, log 0.73, expm1 2.05, log1p 2.13, rsqrt 1.46, tanh 1.13, sinh 1.41, cosh 1.32, asinh 1.82,
  acosh 1.81, atanh 1.09, asin 1.98, acos 1.16, atan 2.33, softplus 2.58, softsign 1.43, silu 2.51,
  mish 4.74, elu 1.97, selu 2.02, celu 2.03 (each over its whole float32 domain, or up to where it overflows)
  sin 0.57, cos 1.03, tan 0.81 ulp on [-pi/4, pi/4]; beyond, the absolute error of sin and cos stays below
                 9e-8 up to |x| = 1e6 (2.6e-7 at 4e6) and tan's relative error below 5e-7 up to 1e4 away
                 from its poles. The reduction by pi/2 (three-part Cody-Waite) stops working at
                 |x| = 2**22 * pi/2 = 6.6e6: results there are meaningless (inf or NaN at FLT_MAX).
  abs error      sigmoid 8.9e-8, tanh 7.2e-8, erf 1.3e-7
  pow(x, y)      about (2 + |y|/2) ulp: 2.7 ulp for bases in [0.01, 10] and exponents in [-4, 4];
                 pow_const: x*x 0.5, x*x*x 1.25, 1/x 0.5, x**1.7 2.0 ulp
Results that are denormals (below 1.2e-38) are only accurate to about 1e-40 in absolute terms where
they come from a product or quotient (sigmoid(-100) = 0, silu below -88 gives -0).
exp overflows to inf above 88.72 and underflows gradually to 0 below -103.97; log follows IEEE
(log 0 = -inf, log of a negative = NaN). NaN inputs give NaN, except pow(x, 0) = pow(1, y) = 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from aot.kernel.ir import Cast, Expr, Sqrt, binop, const, fma, maximum, minimum, select

_LOG2E = 1.44269504088896341
_LN2 = 0.693147180559945309
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_MAGIC = 12582912.0          # 1.5 * 2**23: adding it rounds a float below 2**22 to an integer
_MAGIC_BITS = 0x4B400000     # its bit pattern
_TWO23 = 8388608.0           # 2**23: every float at least this large is an integer
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_INF = math.inf
_PIO2 = 1.5707963267948966
_PI = 3.141592653589793
# pi/2 in three parts (Cephes DP1..DP3 doubled): n * part is exact for the first two while |n| < 2**13.
_PIO2_PARTS = (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)


def _c(value: float, like: Expr) -> Expr:
    """A float constant with as many lanes as `like`."""
    return const(value, "f32", like.lanes)


def _i(value: int, like: Expr) -> Expr:
    return const(value, "i32", like.lanes)


def _horner(x: Expr, coeffs: tuple[float, ...]) -> Expr:
    acc: Expr = _c(coeffs[0], x)
    for c in coeffs[1:]:
        acc = fma(acc, x, _c(c, x))
    return acc


def _bits(x: Expr) -> Expr:
    return Cast(x, "i32", bitcast=True)


def _float(bits: Expr) -> Expr:
    return Cast(bits, "f32", bitcast=True)


def _nan(like: Expr) -> Expr:
    return _float(_i(0x7FC00000, like))


def fabs(x: Expr) -> Expr:
    """|x| by clearing the sign bit (|-0| = +0, NaN stays NaN)."""
    return _float(binop("and", _bits(x), 0x7FFFFFFF))


def copysign(magnitude: Expr, sign: Expr) -> Expr:
    """magnitude with the sign bit of `sign`; `magnitude` must have its sign bit clear."""
    return _float(binop("or", _bits(magnitude), binop("and", _bits(sign), _i(-0x80000000, sign))))


def _signed(value: Expr, x: Expr) -> Expr:
    """value (>= 0) with x's sign: odd functions computed on |x|."""
    return _float(binop("xor", _bits(value), binop("and", _bits(x), _i(-0x80000000, x))))


# --------------------------------------------------------------------------- rounding


def round(x: Expr) -> Expr:   # noqa: A001  (the ONNX name)
    """Nearest integer, ties to even (ONNX Round), exact: |x| + 2**23 - 2**23 rounds in the FPU's
    round-to-nearest-even mode; |x| >= 2**23 (and inf, NaN) is already integral and passes through.
    The sign comes back from x, so -0.4 gives -0.0 as numpy does. No float->int cast: that overflows."""
    ax = fabs(x)
    r = (ax + _TWO23) - _TWO23
    return select(binop("lt", ax, _TWO23), copysign(r, x), x)


def floor(x: Expr) -> Expr:
    """Largest integer <= x, exact; floor(-0.0) = -0.0, floor(-0.5) = -1."""
    r = round(x)
    r = select(binop("gt", r, x), r - 1.0, r)
    return copysign(fabs(r), x)          # floor(0.3) = +0, floor(-0.0) = -0: the sign is always x's


def ceil(x: Expr) -> Expr:
    """Smallest integer >= x, exact; ceil(-0.5) = -0.0 as numpy gives."""
    r = round(x)
    r = select(binop("lt", r, x), r + 1.0, r)
    return copysign(fabs(r), x)


def trunc(x: Expr) -> Expr:
    """Integer part (toward zero), exact, with x's sign."""
    ax = fabs(x)
    r = round(ax)
    r = select(binop("gt", r, ax), r - 1.0, r)
    return copysign(r, x)


def sign(x: Expr) -> Expr:
    """-1, 0 or 1 (numpy: sign(-0.0) = +0.0, sign(NaN) = NaN)."""
    return select(binop("gt", x, 0.0), 1.0, select(binop("lt", x, 0.0), -1.0, x + 0.0))


# --------------------------------------------------------------------------- square root


def sqrt_newton(x: Expr) -> Expr:
    """sqrt by the bit-trick estimate of 1/sqrt, three Newton steps and a final residual correction
    (correctly rounded with FMA, <= 1 ulp without). x < 2**-60 is scaled by 2**126 first, so that the
    residual x - s*s stays a normal float.
    sqrt(-0) = -0, sqrt(inf) = inf, negative or NaN -> NaN."""
    tiny = binop("lt", x, 2.0 ** -60)
    xs = select(tiny, x * 2.0 ** 126, x)
    r = _float(_i(0x5F3759DF, x) - binop("shr", _bits(xs), 1))
    half = xs * 0.5
    for _ in range(3):
        r = r * fma(-half, r * r, _c(1.5, x))
    s = xs * r
    s = fma(fma(-s, s, xs), r * 0.5, s)                                     # s + (x - s*s) / (2 sqrt x)
    s = select(tiny, s * 2.0 ** -63, s)
    special = select(binop("lt", x, 0.0), _nan(x), x)                       # +-0, inf, NaN, negative
    return select(binop("gt", x, 0.0), select(binop("lt", x, _INF), s, special), special)


def sqrt(x: Expr) -> Expr:
    """Square root, correctly rounded where the target has an FPU (sqrtss, fsqrt, vsqrt.f32); on
    soft-float targets, where llvm.sqrt would become a call to libm's sqrtf, `sqrt_newton`."""
    return Sqrt(x, sqrt_newton(x))


def rsqrt(x: Expr) -> Expr:
    """1/sqrt(x) (<= 1.5 ulp), for normalizations."""
    return 1.0 / sqrt(x)


# --------------------------------------------------------------------------- exp and log


def exp(x: Expr) -> Expr:
    """e**x: x = n*ln2 + r with |r| <= ln2/2, e**r by a degree-6 polynomial, 2**n built in the exponent
    bits as two halves so that results between 2**-149 and 2**-126 come out as denormals. Overflows to
    inf above ln(FLT_MAX) = 88.72, underflows to 0 below -103.97; exp(NaN) = NaN."""
    x = minimum(89.0, maximum(-104.0, x))        # x second: NaN passes through min/max
    t = fma(x, _c(_LOG2E, x), _c(_MAGIC, x))
    n = t - _MAGIC
    r = fma(n, _c(-_LN2_HI, x), x)
    r = fma(n, _c(-_LN2_LO, x), r)
    p = _horner(r, _EXP_POLY)
    er = fma(p * r, r, r + 1.0)
    bits = _bits(t) - _MAGIC_BITS                # = n as an integer, in [-150, 129]
    half = binop("shr", bits, 1)
    scale1 = _float(binop("shl", half + 127, 23))
    scale2 = _float(binop("shl", bits - half + 127, 23))
    return er * scale1 * scale2


def expm1(x: Expr) -> Expr:
    """e**x - 1 with relative accuracy near 0: Taylor polynomial for |x| < 0.5, exp(x) - 1 elsewhere."""
    taylor = fma(x * x, _horner(x, tuple(1.0 / math.factorial(k) for k in range(9, 1, -1))), x)
    return select(binop("lt", fabs(x), 0.5), taylor, exp(x) - 1.0)


def _log_reduce(x: Expr) -> tuple[Expr, Expr, Expr]:
    """(e, f, tail) with x = 2**e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), for finite x > 0 (denormals
    scaled by 2**23 first), and ln(1 + f) = f + tail by the Cephes logf polynomial."""
    tiny = binop("lt", x, 1.17549435e-38)
    bits = _bits(select(tiny, x * 8388608.0, x))
    e = binop("shr", bits, 23) - select(tiny, _i(126 + 23, x), _i(126, x))    # exponent with m in [0.5, 1)
    m = _float(binop("or", binop("and", bits, 0x007FFFFF), 0x3F000000))
    small = binop("lt", m, 0.70710678118654752)
    e = Cast(select(small, e - 1, e), "f32")
    f = select(small, m + m, m) - 1.0
    z = f * f
    p = _horner(f, (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1))
    return e, f, fma(f * z, p, z * -0.5)


def log(x: Expr) -> Expr:
    """Natural log (Cephes logf): x = 2**e * m with m in [sqrt(1/2), sqrt(2)), log m by a polynomial,
    e * ln 2 added in two parts. IEEE specials: log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf."""
    e, f, tail = _log_reduce(x)
    y = fma(e, _c(_LN2_HI, f), f + fma(e, _c(_LN2_LO, f), tail))           # e * ln 2 in two parts
    special = select(binop("eq", x, 0.0), _c(-_INF, x), _nan(x))
    return select(binop("gt", x, 0.0), select(binop("lt", x, _INF), y, x), special)


def log1p(x: Expr) -> Expr:
    """log(1 + x) accurate for small x (Goldberg: log(w) * x / (w - 1) with w = 1 + x rounded)."""
    w = x + 1.0
    d = w - 1.0
    return select(binop("eq", d, 0.0), x, select(binop("lt", d, _INF), log(w) * (x / d), w))


def pow(x: Expr, y: Expr) -> Expr:   # noqa: A001  (the ONNX name)
    """x**y = 2**(y log2|x|) with the product split: log2|x| = e + log2 m (|log2 m| <= 1/2), y*e kept
    exactly as a float pair (y cut in two halves), its integer part taken out before 2**r, so the error grows with |y|
    rather than with |y ln x|: about (2 + |y|/2) ulp. Sign: negative for x < 0 and odd integral y;
    x < 0 with y not integral gives NaN. C99/numpy specials: x**0 = 1**y = 1 (even NaN), 0**y is 0 for
    y > 0 and inf for y < 0 (signed for odd y), |x| or |y| infinite by the limits. (-inf)**y for y not
    integral gives NaN where C gives +inf or +0."""
    ax = fabs(x)
    e, f, tail = _log_reduce(ax)
    a = y * ((f + tail) * _LOG2E)
    y_hi = _float(binop("and", _bits(y), _i(-0x1000, y)))  # y's upper 12 significand bits
    hi = y_hi * e                                         # |e| <= 150: both products exact, FMA or not
    lo = (y - y_hi) * e
    t = minimum(129.0, maximum(-151.0, hi + a))           # beyond these 2**t is inf or 0 anyway
    tt = t + _MAGIC
    n = tt - _MAGIC
    r = ((hi - n) + a) + lo                               # y log2|x| - n, |r| <= 1/2 unless clamped
    bits = _bits(tt) - _MAGIC_BITS
    half = binop("shr", bits, 1)
    scale1 = _float(binop("shl", half + 127, 23))
    scale2 = _float(binop("shl", bits - half + 127, 23))
    regular = exp(r * _LN2) * scale1 * scale2
    # |x| = 0 or inf, |y| = inf, NaN: the limits
    grows = binop("eq", binop("gt", ax, 1.0), binop("gt", y, 0.0))
    limit = select(binop("eq", ax, 1.0), _c(1.0, x), select(grows, _c(_INF, x), _c(0.0, x)))
    limit = select(binop("and", binop("eq", x, x), binop("eq", y, y)), limit, _nan(x))
    finite = binop("and", binop("and", binop("gt", ax, 0.0), binop("lt", ax, _INF)), binop("lt", fabs(y), _INF))
    r = select(finite, regular, limit)
    integral = binop("eq", round(y), y)
    half_y = y * 0.5
    odd = binop("and", integral, binop("ne", trunc(half_y), half_y))
    r = select(odd, copysign(r, x), r)                    # r >= 0 here: x's sign for odd y, also (-0)**3 = -0
    not_integral = binop("and", binop("lt", x, 0.0), binop("ne", round(y), y))
    r = select(not_integral, _nan(x), r)
    one = binop("or", binop("eq", y, 0.0), binop("eq", x, 1.0))
    return select(one, _c(1.0, x), r)


def pow_const(x: Expr, y: float) -> Expr:
    """x**y for a constant y: multiplications for small integers, sqrt for halves, else `pow`."""
    if y == 0.0:
        return _c(1.0, x)               # NaN**0 = 1 too
    if y == int(y) and abs(y) <= 4:
        n = int(abs(y))
        square = x * x
        p = {1: x, 2: square, 3: square * x, 4: square * square}[n]
        return p if y > 0 else 1.0 / p
    if y == 0.5:
        return sqrt(x)
    if y == -0.5:
        return 1.0 / sqrt(x + 0.0)      # (-0)**-0.5 = +inf, as C's pow gives (1/sqrt(-0) would be -inf)
    if y == 1.5:
        return x * sqrt(x)
    return pow(x, _c(y, x))


# --------------------------------------------------------------------------- logistic and friends


def sigmoid(x: Expr) -> Expr:
    """1 / (1 + e**-x): abs error < 2e-7; exp overflowing to inf gives exactly 0."""
    return 1.0 / (exp(-x) + 1.0)


def tanh(x: Expr) -> Expr:
    """Small |x|: odd polynomial (Cephes); otherwise 1 - 2/(e**2|x| + 1) with the sign restored."""
    ax = fabs(x)
    z = x * x
    p = _horner(z, (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1))
    small = fma(x * z, p, x)
    big = _signed(1.0 - 2.0 / (exp(ax * 2.0) + 1.0), x)
    return select(binop("lt", ax, 0.625), small, big)


def erf(x: Expr) -> Expr:
    """Taylor series through x**15 for |x| < 0.5 (relative accuracy near 0); elsewhere 1 - erfc(|x|)
    with the Numerical Recipes erfc (fractional error < 1.2e-7), the sign restored."""
    ax = fabs(x)
    z = x * x
    two_over_sqrt_pi = 1.1283791670955126
    series = x * _horner(z, tuple(two_over_sqrt_pi * c for c in (
        -1.0 / 75600.0, 1.0 / 9360.0, -1.0 / 1320.0, 1.0 / 216.0, -1.0 / 42.0, 1.0 / 10.0, -1.0 / 3.0, 1.0)))
    t = 1.0 / fma(ax, _c(0.5, ax), _c(1.0, ax))
    poly = _horner(t, (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                       0.09678418, 0.37409196, 1.00002368, -1.26551223))
    tail = _signed(1.0 - t * exp(poly - z), x)
    return select(binop("lt", ax, 0.5), series, tail)


def softplus(x: Expr) -> Expr:
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|): no overflow for large x, relative accuracy for very
    negative x (where it is e**x)."""
    return maximum(0.0, x) + log1p(exp(-fabs(x)))


def softsign(x: Expr) -> Expr:
    return x / (fabs(x) + 1.0)


def elu(x: Expr, alpha: float = 1.0) -> Expr:
    return select(binop("lt", x, 0.0), expm1(x) * alpha, x)


def selu(x: Expr, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Expr:
    return select(binop("le", x, 0.0), expm1(x) * (alpha * gamma), x * gamma)


def celu(x: Expr, alpha: float = 1.0) -> Expr:
    """max(0, x) + min(0, alpha * (e**(x/alpha) - 1))."""
    return select(binop("lt", x, 0.0), expm1(x * (1.0 / alpha)) * alpha, x)


def mish(x: Expr) -> Expr:
    """x * tanh(softplus(x)) = x * n / (n + 2) with n = u * (u + 2), u = e**x: one exp and one division,
    no cancellation for negative x; for x >= 20 the factor is exactly 1. u = h*h with h = e**(x/2), so that
    below -20, where mish is x * e**x to float precision, (x*h)*h stays accurate while e**x is a denormal."""
    h = exp(minimum(20.0, x) * 0.5)
    u = h * h
    n = u * (u + 2.0)
    return select(binop("lt", x, -20.0), (x * h) * h, x * (n / (n + 2.0)))


def silu(x: Expr) -> Expr:
    """x * sigmoid(x) (Swish with alpha = 1)."""
    return x * sigmoid(x)


def swish(x: Expr, alpha: float = 1.0) -> Expr:
    return x * sigmoid(x * alpha)


# --------------------------------------------------------------------------- trigonometric


def _quadrant(x: Expr) -> tuple[Expr, Expr]:
    """(r, n) with x = n * pi/2 + r, |r| <= pi/4 (n an i32): Cody-Waite with pi/2 in three parts."""
    t = fma(x, _c(2.0 / _PI, x), _c(_MAGIC, x))
    n = t - _MAGIC
    r = x
    for part in _PIO2_PARTS:
        r = fma(n, _c(-part, x), r)
    return r, _bits(t) - _MAGIC_BITS


def _sin_poly(r: Expr, z: Expr) -> Expr:
    """sin r for |r| <= pi/4 (Cephes sinf)."""
    return fma(_horner(z, (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)) * z, r, r)


def _cos_poly(z: Expr) -> Expr:
    """cos r for |r| <= pi/4 (Cephes cosf), z = r*r."""
    p = _horner(z, (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2))
    return fma(p * z, z, fma(z, _c(-0.5, z), _c(1.0, z)))


def _sin_quadrant(r: Expr, n: Expr) -> Expr:
    """sin(n * pi/2 + r): quadrant n & 3 picks +-sin r or +-cos r."""
    z = r * r
    s, c = _sin_poly(r, z), _cos_poly(z)
    v = select(binop("eq", binop("and", n, 1), _i(0, n)), s, c)
    flip = binop("shl", binop("and", n, 2), 30)                             # bit 1 of n -> the sign bit
    return _float(binop("xor", _bits(v), flip))


def sin(x: Expr) -> Expr:
    r, n = _quadrant(x)
    return _sin_quadrant(r, n)


def cos(x: Expr) -> Expr:
    r, n = _quadrant(x)
    return _sin_quadrant(r, n + 1)


def tan(x: Expr) -> Expr:
    """Cephes tanf on [-pi/4, pi/4]; odd quadrants give -1/tan r."""
    r, n = _quadrant(x)
    z = r * r
    t = fma(_horner(z, (9.38540185543e-3, 3.11992232697e-3, 2.44301354525e-2, 5.34112807005e-2,
                        1.33387994085e-1, 3.33331568548e-1)) * z, r, r)
    return select(binop("eq", binop("and", n, 1), _i(0, n)), t, -1.0 / t)


def _asin_parts(x: Expr) -> tuple[Expr, Expr, Expr]:
    """(p, big, ax): for |x| <= 0.5 p = asin|x|; above, p = asin(sqrt((1 - |x|)/2)) so asin|x| = pi/2 - 2p
    (Cephes asinf). |x| > 1 makes the square root NaN."""
    ax = fabs(x)
    big = binop("gt", ax, 0.5)
    z = select(big, fma(ax, _c(-0.5, x), _c(0.5, x)), x * x)
    s = select(big, sqrt(z), ax)
    p = fma(_horner(z, (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2,
                        1.6666752422e-1)) * z, s, s)
    return p, big, ax


def asin(x: Expr) -> Expr:
    p, big, _ = _asin_parts(x)
    return _signed(select(big, fma(p, _c(-2.0, p), _c(_PIO2, p)), p), x)


def acos(x: Expr) -> Expr:
    p, big, _ = _asin_parts(x)
    negative = binop("lt", x, 0.0)
    outer = select(negative, fma(p, _c(-2.0, p), _c(_PI, p)), p + p)        # acos x = 2p, or pi - 2p
    return select(big, outer, _PIO2 - _signed(p, x))


def atan(x: Expr) -> Expr:
    """Cephes atanf: |x| reduced to [0, tan(pi/8)] with pi/2 - atan(1/|x|) or pi/4 + atan((|x|-1)/(|x|+1))."""
    ax = fabs(x)
    far = binop("gt", ax, 2.414213562373095)
    mid = binop("gt", ax, 0.4142135623730950)
    a = select(far, -1.0 / ax, select(mid, (ax - 1.0) / (ax + 1.0), ax))
    base = select(far, _c(_PIO2, x), select(mid, _c(_PI / 4, x), _c(0.0, x)))
    z = a * a
    y = fma(_horner(z, (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)) * z, a, a)
    return _signed(base + y, x)


# --------------------------------------------------------------------------- hyperbolic


def _exp_pair(ax: Expr) -> tuple[Expr, Expr]:
    """(e, big): e = e**ax / 2, except for ax > 88 where e**ax overflows: then e = e**(ax/2) and the caller
    returns (0.5 * e) * e, finite up to ax = 89.4 as sinh and cosh are."""
    big = binop("gt", ax, 88.0)
    return exp(select(big, ax * 0.5, ax)), big


def sinh(x: Expr) -> Expr:
    """Cephes sinhf: an odd polynomial for |x| <= 1, (e**|x| - e**-|x|)/2 above."""
    ax = fabs(x)
    e, big = _exp_pair(ax)
    wide = select(big, (e * 0.5) * e, 0.5 * e - 0.5 / e)
    z = x * x
    small = fma(_horner(z, (2.03721912945e-4, 8.33028376239e-3, 1.66667160211e-1)) * z, ax, ax)
    return _signed(select(binop("gt", ax, 1.0), wide, small), x)


def cosh(x: Expr) -> Expr:
    e, big = _exp_pair(fabs(x))
    return select(big, (e * 0.5) * e, 0.5 * e + 0.5 / e)


def asinh(x: Expr) -> Expr:
    """Cephes asinhf: odd polynomial below 0.5, log(|x| + sqrt(x*x + 1)) up to 1e4, log|x| + ln 2 above."""
    ax = fabs(x)
    z = x * x
    small = fma(_horner(z, (2.0122003309e-2, -4.2699340972e-2, 7.4847586088e-2, -1.6666288134e-1)) * z, ax, ax)
    huge = binop("gt", ax, 1e4)
    mid = log(select(huge, ax, ax + sqrt(z + 1.0))) + select(huge, _c(_LN2, x), _c(0.0, x))
    return _signed(select(binop("lt", ax, 0.5), small, mid), x)


def acosh(x: Expr) -> Expr:
    """Cephes acoshf: sqrt(x - 1) times a polynomial just above 1, log(x + sqrt((x-1)(x+1))) up to 1e4,
    log x + ln 2 above; x < 1 gives NaN (through the square roots)."""
    z = x - 1.0
    near = _horner(z, (1.7596881071e-3, -7.5272886713e-3, 2.6454905019e-2, -1.1784741703e-1,
                       1.4142135263e0)) * sqrt(z)
    huge = binop("gt", x, 1e4)
    mid = log(select(huge, x, x + sqrt(z * (x + 1.0)))) + select(huge, _c(_LN2, x), _c(0.0, x))
    return select(binop("lt", z, 0.5), near, mid)


def atanh(x: Expr) -> Expr:
    """Cephes atanhf: odd polynomial below 0.5, log((1 + |x|)/(1 - |x|)) / 2 above (inf at 1, NaN beyond)."""
    ax = fabs(x)
    z = x * x
    small = fma(_horner(z, (1.81740078349e-1, 8.24370301058e-2, 1.46691431730e-1, 1.99782164500e-1,
                            3.33337300303e-1)) * z, ax, ax)
    wide = log((ax + 1.0) / (1.0 - ax)) * 0.5
    return _signed(select(binop("lt", ax, 0.5), small, wide), x)


# --------------------------------------------------------------------------- remainder


def fmod(x: Expr, y: Expr, fused: bool = True, bind: Callable[[Expr], Expr] | None = None) -> Expr:
    """C fmod: x - n*y with n = trunc(x/y), the sign of x, exact (the remainder is always representable).

    |x| is reduced by ys = |y| * 2**k in steps that each take out up to `bits` quotient bits (k chosen from
    the exponents so that q = trunc(r / ys) < 2**(bits+1)). q is the true quotient or one more (rounding
    cannot go below an integer), so r - q*ys lies in (-ys, ys) and is exact: with a fused multiply-add
    directly (22 bits a step, 12 steps); without one (`fused=False`) ys is split into two 12-bit halves
    so that both products are exact (11 bits a step, 23 steps). A negative remainder gets ys back.
    fmod(x, 0), fmod(inf, y) and NaNs give NaN, fmod(x, inf) = x. A denormal y (below 1.2e-38) is
    reduced with its exponent misread and gives an inexact result. `bind` (a Builder's let) names each
    step's remainder, so the expression stays shallow.
    """
    bind = bind or (lambda e: e)
    ax, ay = fabs(x), fabs(y)
    bits = 22 if fused else 11
    ey = binop("shr", _bits(ay), 23)
    r = ax
    for _ in range((253 - bits + bits - 1) // bits + 1):        # exponent fields differ by at most 253
        k = maximum(binop("shr", _bits(r), 23) - ey - bits, _i(0, r))
        ys = _float(_bits(ay) + binop("shl", k, 23))
        q = trunc(r / ys)
        if fused:
            r = fma(-q, ys, r)
        else:
            ys_hi = _float(binop("and", _bits(ys), _i(-0x1000, ys)))
            split = (r - q * ys_hi) - q * (ys - ys_hi)
            r = select(binop("le", q, 2.0), r - q * ys, split)    # q*ys exact for q <= 2 (r near ys)
        r = bind(select(binop("lt", r, 0.0), r + ys, r))
    result = copysign(r, x)
    result = select(binop("eq", ay, _INF), x, result)
    bad = binop("or", binop("eq", ay, 0.0), binop("ge", ax, _INF))
    bad = binop("or", bad, binop("or", binop("ne", x, x), binop("ne", y, y)))
    return select(bad, _nan(x), result)


def mod(x: Expr, y: Expr, fused: bool = True, bind: Callable[[Expr], Expr] | None = None) -> Expr:
    """Python's (numpy's) x % y: the sign of y; fmod plus y when the signs differ, a zero signed as y."""
    r = fmod(x, y, fused, bind)
    differs = binop("and", binop("ne", r, 0.0), binop("xor", binop("lt", r, 0.0), binop("lt", y, 0.0)))
    r = select(differs, r + y, r)
    return select(binop("eq", r, 0.0), copysign(_c(0.0, x), y), r)
