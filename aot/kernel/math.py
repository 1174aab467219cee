"""Transcendental functions as kernel-IR expressions: polynomials and bit tricks, no libm calls.

Each works on scalars or vectors of f32 and uses only add/mul/fma/min/max/select and bitcasts, so
it vectorizes on every target. Accuracy (float32, measured against numpy in tests/kernel/test_math.py):
exp ~2 ulp on [-87, 88]; tanh/sigmoid/erf abs error < 2e-7.
"""

from __future__ import annotations

from aot.kernel.ir import Cast, Expr, binop, const, fma, maximum, minimum, select

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_MAGIC = 12582912.0          # 1.5 * 2**23: adding it rounds a float below 2**22 to an integer
_MAGIC_BITS = 0x4B400000     # its bit pattern
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def _c(value: float, like: Expr) -> Expr:
    """A float constant with as many lanes as `like`."""
    return const(value, "f32", like.lanes)


def _horner(x: Expr, coeffs: tuple[float, ...]) -> Expr:
    acc: Expr = _c(coeffs[0], x)
    for c in coeffs[1:]:
        acc = fma(acc, x, _c(c, x))
    return acc


def exp(x: Expr) -> Expr:
    """e**x: x = n*ln2 + r with |r| <= ln2/2, e**r by a degree-6 polynomial, 2**n built in the exponent bits."""
    x = minimum(maximum(x, -87.33654), 88.0)
    t = fma(x, _c(_LOG2E, x), _c(_MAGIC, x))
    n = t - _MAGIC
    r = fma(n, _c(-_LN2_HI, x), x)
    r = fma(n, _c(-_LN2_LO, x), r)
    p = _horner(r, _EXP_POLY)
    er = fma(p * r, r, r + 1.0)
    bits = Cast(t, "i32", bitcast=True) - _MAGIC_BITS     # = n as an integer
    scale = Cast(binop("shl", bits + 127, 23), "f32", bitcast=True)
    return er * scale


def log(x: Expr) -> Expr:
    """Natural log (Cephes logf): x = m * 2**e with m in [sqrt(1/2), sqrt(2)), log m by a polynomial.
    x <= 0 gives a very negative number rather than NaN/-inf (the inputs aot feeds it are positive)."""
    x = maximum(x, 1.17549435e-38)
    bits = Cast(x, "i32", bitcast=True)
    e = binop("shr", bits, 23) - 126                                   # exponent with m in [0.5, 1)
    m = Cast(binop("or", binop("and", bits, 0x007FFFFF), 0x3F000000), "f32", bitcast=True)
    small = binop("lt", m, 0.70710678118654752)
    e = Cast(select(small, e - 1, e), "f32")
    m = select(small, m + m, m) - 1.0
    z = m * m
    p = _horner(m, (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1))
    y = m * z * p
    y = fma(e, _c(-2.12194440e-4, m), y)
    y = y - z * 0.5
    return fma(e, _c(0.693359375, m), m + y)


def sigmoid(x: Expr) -> Expr:
    return 1.0 / (exp(-x) + 1.0)


def tanh(x: Expr) -> Expr:
    """Small |x|: odd polynomial (Cephes); otherwise 1 - 2/(e**2|x| + 1) with the sign restored."""
    ax = select(binop("lt", x, 0.0), -x, x)
    z = x * x
    p = _horner(z, (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1))
    small = fma(x * z, p, x)
    big = 1.0 - 2.0 / (exp(ax * 2.0) + 1.0)
    big = select(binop("lt", x, 0.0), -big, big)
    return select(binop("lt", ax, 0.625), small, big)


def erf(x: Expr) -> Expr:
    """Taylor series through x**15 for |x| < 0.5 (relative accuracy near 0); elsewhere 1 - erfc(|x|)
    with the Numerical Recipes erfc (fractional error < 1.2e-7), the sign restored."""
    ax = select(binop("lt", x, 0.0), -x, x)
    z = x * x
    two_over_sqrt_pi = 1.1283791670955126
    series = x * _horner(z, tuple(two_over_sqrt_pi * c for c in (
        -1.0 / 75600.0, 1.0 / 9360.0, -1.0 / 1320.0, 1.0 / 216.0, -1.0 / 42.0, 1.0 / 10.0, -1.0 / 3.0, 1.0)))
    t = 1.0 / fma(ax, _c(0.5, ax), _c(1.0, ax))
    poly = _horner(t, (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                       0.09678418, 0.37409196, 1.00002368, -1.26551223))
    tail = 1.0 - t * exp(poly - z)
    tail = select(binop("lt", x, 0.0), -tail, tail)
    return select(binop("lt", ax, 0.5), series, tail)
