"""Activations as kernel-IR expressions, applied to a result before it is stored."""

from __future__ import annotations

import math
from collections.abc import Callable

from aot.kernel import math as kmath
from aot.kernel.ir import Expr, binop, maximum, minimum, select

Act = tuple[str, tuple[float, ...]]


def _thresholded_relu(x: Expr, alpha: float) -> Expr:
    return select(binop("gt", x, alpha), x, 0.0)


def _shrink(x: Expr, bias: float, lambd: float) -> Expr:
    """ONNX Shrink: x + bias below -lambd, x - bias above lambd, 0 between."""
    return select(binop("lt", x, -lambd), x + bias, select(binop("gt", x, lambd), x - bias, 0.0))


# name -> (function of x and the params, the params' defaults in ONNX attribute order).
# A params tuple shorter than the defaults is completed from them.
_FUNCTIONS: dict[str, tuple[Callable[..., Expr], tuple[float, ...]]] = {
    "sigmoid": (kmath.sigmoid, ()), "tanh": (kmath.tanh, ()), "erf": (kmath.erf, ()),
    "exp": (kmath.exp, ()), "log": (kmath.log, ()), "sqrt": (kmath.sqrt, ()), "rsqrt": (kmath.rsqrt, ()),
    "floor": (kmath.floor, ()), "ceil": (kmath.ceil, ()), "round": (kmath.round, ()),
    "trunc": (kmath.trunc, ()), "sign": (kmath.sign, ()),
    "pow": (kmath.pow_const, (1.0,)),                 # x ** exponent, the exponent a constant
    "sin": (kmath.sin, ()), "cos": (kmath.cos, ()), "tan": (kmath.tan, ()),
    "asin": (kmath.asin, ()), "acos": (kmath.acos, ()), "atan": (kmath.atan, ()),
    "sinh": (kmath.sinh, ()), "cosh": (kmath.cosh, ()),
    "asinh": (kmath.asinh, ()), "acosh": (kmath.acosh, ()), "atanh": (kmath.atanh, ()),
    "softplus": (kmath.softplus, ()), "softsign": (kmath.softsign, ()), "mish": (kmath.mish, ()),
    "silu": (kmath.silu, ()), "swish": (kmath.swish, (1.0,)),                     # Swish: alpha
    "elu": (kmath.elu, (1.0,)),                                                     # Elu: alpha
    "selu": (kmath.selu, (1.67326319217681884765625, 1.05070102214813232421875)),  # Selu: alpha, gamma
    "celu": (kmath.celu, (1.0,)),                                                   # Celu: alpha
    "thresholded_relu": (_thresholded_relu, (1.0,)),                                # ThresholdedRelu: alpha
    "shrink": (_shrink, (0.0, 0.5)),                                                # Shrink: bias, lambd
}


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
    function, defaults = _FUNCTIONS[fn]
    return function(x, *(tuple(params) + defaults[len(params):]))


def apply(acts: tuple[Act, ...], x: Expr) -> Expr:
    for fn, params in acts:
        x = activation(fn, params, x)
    return x
