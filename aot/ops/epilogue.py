"""Activations as kernel-IR expressions, applied to a result before it is stored."""

from __future__ import annotations

import math

from aot.kernel import math as kmath
from aot.kernel.ir import Expr, binop, maximum, minimum, select

Act = tuple[str, tuple[float, ...]]


def activation(fn: str, params: tuple[float, ...], x: Expr) -> Expr:
    if fn == "relu":
        return maximum(x, 0.0)
    if fn == "clip":
        lo, hi = params
        if not math.isinf(lo):
            x = maximum(x, lo)
        return minimum(x, hi) if not math.isinf(hi) else x
    if fn == "leaky_relu":
        return select(binop("lt", x, 0.0), x * params[0], x)
    if fn == "hard_sigmoid":
        return minimum(maximum(x * params[0] + params[1], 0.0), 1.0)
    if fn == "hard_swish":
        return x * minimum(maximum(x * (1.0 / 6.0) + 0.5, 0.0), 1.0)
    if fn == "neg":
        return -x
    if fn == "abs":
        return select(binop("lt", x, 0.0), -x, x)
    if fn == "reciprocal":
        return 1.0 / x
    if fn == "gelu":        # x * Phi(x)
        return x * 0.5 * (kmath.erf(x * 0.7071067811865476) + 1.0)
    if fn == "gelu_tanh":
        return x * 0.5 * (kmath.tanh((x + x * x * x * 0.044715) * 0.7978845608028654) + 1.0)
    return {"sigmoid": kmath.sigmoid, "tanh": kmath.tanh, "erf": kmath.erf, "exp": kmath.exp, "log": kmath.log}[fn](x)


def apply(acts: tuple[Act, ...], x: Expr) -> Expr:
    for fn, params in acts:
        x = activation(fn, params, x)
    return x
