"""Accuracy of the elementwise math in aot/kernel/math.py (and the activations built on it).

Each function is applied elementwise by a tiny kernel built with the kernel-IR Builder (8-lane vector
main loop plus a scalar tail), compiled with the LLVM backend for the host, linked into a shared library
with gcc and called through ctypes; a subset is also cross-compiled and run under qemu. Results are
compared with numpy / math in float64 (float32 for the exact rounding functions), in ulp of the result
or in absolute error, over wide ranges, around 0, at ties and at the IEEE special values.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest

from aot.codegen.elf import undefined_symbols
from aot.codegen.llvm import ModuleBuilder
from aot.kernel import ir as k
from aot.kernel import math as kmath
from aot.ops.epilogue import activation
from aot.target import get_target

LANES = 8
POINTS = 100_003        # a multiple of LANES plus 3: the scalar tail runs too
F32_MAX = float(np.finfo(np.float32).max)


def _act(name: str, *params: float):
    return lambda x: activation(name, params, x)


# kernel name -> the expression it applies (one argument, or two for pow)
UNARY = {name: getattr(kmath, name) for name in (
    "exp", "log", "sigmoid", "tanh", "erf", "floor", "ceil", "round", "trunc", "sign", "sqrt", "sqrt_newton",
    "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "softplus", "softsign", "mish", "silu", "expm1", "log1p")}
UNARY |= {
    "elu": _act("elu"), "elu_half": _act("elu", 0.5), "selu": _act("selu"), "celu": _act("celu"),
    "celu_2": _act("celu", 2.0), "swish_2": _act("swish", 2.0), "thresholded_relu": _act("thresholded_relu"),
    "shrink": _act("shrink"), "shrink_1": _act("shrink", 1.5, 1.0),
    "pow_2": _act("pow", 2.0), "pow_3": _act("pow", 3.0), "pow_m1": _act("pow", -1.0), "pow_half": _act("pow", 0.5),
    "pow_0": _act("pow", 0.0), "pow_1_7": _act("pow", 1.7),
}
BINARY = {"pow": kmath.pow}
FUNCTIONS = tuple(UNARY) + tuple(BINARY)


def _selu(x):
    return 1.05070102214813232421875 * np.where(x > 0, x, 1.67326319217681884765625 * np.expm1(x))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


with np.errstate(all="ignore"):
    REFERENCE = {
        "exp": np.exp, "log": np.log, "sigmoid": _sigmoid, "tanh": np.tanh, "erf": np.vectorize(math.erf),
        "sqrt": np.sqrt, "sqrt_newton": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
        "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
        "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
        "softplus": lambda x: np.logaddexp(0.0, x), "softsign": lambda x: x / (1.0 + np.abs(x)),
        "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)), "silu": lambda x: x * _sigmoid(x),
        "expm1": np.expm1, "log1p": np.log1p,
        "elu": lambda x: np.where(x < 0, np.expm1(x), x), "elu_half": lambda x: np.where(x < 0, 0.5 * np.expm1(x), x),
        "selu": _selu, "celu": lambda x: np.where(x < 0, np.expm1(x), x),
        "celu_2": lambda x: np.where(x < 0, 2.0 * np.expm1(x / 2.0), x), "swish_2": lambda x: x * _sigmoid(2.0 * x),
        "thresholded_relu": lambda x: np.where(x > 1.0, x, 0.0),
        "shrink": lambda x: np.where(x < -0.5, x, np.where(x > 0.5, x, 0.0)),
        "shrink_1": lambda x: np.where(x < -1.0, x + 1.5, np.where(x > 1.0, x - 1.5, 0.0)),
        "pow_2": lambda x: x ** 2, "pow_3": lambda x: x ** 3, "pow_m1": lambda x: 1.0 / x,
        "pow_half": np.sqrt, "pow_0": lambda x: np.ones_like(x),
        "pow_1_7": lambda x: np.power(x, float(np.float32(1.7))),      # the exponent as the kernel has it
        "pow": np.power, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "sign": np.sign,
    }


def _kernel(name: str) -> k.Kernel:
    """kernel(n: i32[1], x: f32[] (, w: f32[]), y: f32[]): y[i] = fn(x[i] (, w[i])) for i < n;
    8 lanes at a time, then a scalar tail."""
    fn = UNARY.get(name) or BINARY[name]
    count = k.Buffer("n", "i32", 1)
    ins = [k.Buffer(v, "f32", POINTS) for v in ("x", "w")[: 1 if name in UNARY else 2]]
    y = k.Buffer("y", "f32", POINTS)
    b = k.Builder()
    n = b.let("count", k.Cast(count[0], "idx"))
    main = b.let("main", k.binop("div", n, LANES) * LANES)
    with b.loop("i", 0, main, LANES) as i:
        b.store(y, i, fn(*(buf.vec(i, LANES) for buf in ins)))
    with b.loop("j", main, n) as j:
        b.store(y, j, fn(*(buf[j] for buf in ins)))
    return k.Kernel(f"apply_{name}", (count, *ins, y), b.block())


def _shared_library(target, names, work, stem):
    mb = ModuleBuilder("mathtest", target)
    for name in names:
        mb.add_kernel(_kernel(name))
    compiled = mb.compile()
    obj, ir_text = compiled.object, compiled.optimized_ir
    obj_path, lib_path = work / f"{stem}.o", work / f"lib{stem}.so"
    obj_path.write_bytes(obj)
    subprocess.run(["gcc", "-shared", "-o", str(lib_path), str(obj_path)], check=True, capture_output=True)
    lib = ctypes.CDLL(str(lib_path))
    for name in names:
        fn = getattr(lib, f"apply_{name}")
        fn.argtypes = [ctypes.c_void_p] * (3 if name in UNARY else 4)
        fn.restype = None
    return {"lib": lib, "obj": obj_path, "ir": ir_text}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("gcc and nm are needed to link and inspect the object")
    return _shared_library(get_target("host"), FUNCTIONS, tmp_path_factory.mktemp("kmath"), "math")


@pytest.fixture(scope="module")
def unfused(tmp_path_factory):
    """The portable sqrt as a soft-float target computes it: SSE2 without FMA (fma = false: fmuladd)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to link the object")
    target = get_target("x86-64")
    assert not target.fma
    return _shared_library(target, ("sqrt_newton",), tmp_path_factory.mktemp("kmath_nofma"), "nofma")


def evaluate(compiled, fn_name: str, x: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    args = [np.ascontiguousarray(a, dtype=np.float32) for a in ((x,) if w is None else (x, w))]
    assert 0 < args[0].size <= POINTS
    y = np.full(args[0].size, np.nan, dtype=np.float32)
    n = np.array([args[0].size], dtype=np.int32)
    getattr(compiled["lib"], f"apply_{fn_name}")(n.ctypes.data, *(a.ctypes.data for a in args), y.ctypes.data)
    return y


def ulp_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (at least the smallest denormal); where the
    reference is not finite (or beyond float32), 0 if got is the same special value, else inf."""
    got, ref = got.astype(np.float64), np.asarray(ref, np.float64)
    with np.errstate(all="ignore"):
        ref32 = ref.astype(np.float32)
        spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), 2.0 ** -149)
        err = np.abs(got - ref) / spacing
    special = ~np.isfinite(ref32) | ~np.isfinite(got)
    same = (got == ref32.astype(np.float64)) | (np.isnan(got) & np.isnan(ref32))
    return np.where(special, np.where(same, 0.0, np.inf), err)


def measure(compiled, fn_name: str, x, w=None) -> tuple[float, float]:
    """(max ulp error, the x where it is)."""
    x = np.asarray(x, np.float32)
    args = (x,) if w is None else (x, np.asarray(w, np.float32))
    got = evaluate(compiled, fn_name, *args)
    with np.errstate(all="ignore"):
        ref = REFERENCE[fn_name](*(a.astype(np.float64) for a in args))
    err = ulp_errors(got, ref)
    worst = int(np.argmax(err))
    return float(err[worst]), float(x[worst])


def tiny_values() -> np.ndarray:
    mags = np.logspace(-30, -1, 2000)
    return np.concatenate([mags, -mags, [0.0]])


def spread(lo: float, hi: float, count: int = POINTS) -> np.ndarray:
    """Points from lo to hi (lo > 0): evenly in log scale, so every binade is covered."""
    return np.geomspace(lo, hi, count).astype(np.float32)


def full_range(fn_name: str) -> np.ndarray:
    lo, hi = (-87.0, 88.0) if fn_name == "exp" else (-20.0, 20.0)
    points = np.linspace(lo, hi, POINTS)
    if fn_name != "exp":
        points = np.concatenate([points[: POINTS - tiny_values().size], tiny_values()])
    return points


def symmetric(lo: float, hi: float) -> np.ndarray:
    half = spread(lo, hi, POINTS // 2)
    return np.concatenate([half, -half, [0.0]])


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, F32_MAX, -F32_MAX], np.float32)


# --------------------------------------------------------------------------- the object itself


def test_object_has_no_undefined_symbols(compiled):
    """The functions are polynomials and bit tricks (and the FPU's square root): nothing from libm is needed."""
    out = subprocess.run(["nm", "-u", str(compiled["obj"])], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "", f"undefined symbols in the object:\n{out}"
    assert "call " not in "\n".join(line for line in compiled["ir"].splitlines() if "@llvm." not in line)
    assert "@llvm.sqrt.v8f32" in compiled["ir"]          # the hardware instruction, where there is one


def test_kernel_uses_eight_lanes(compiled):
    assert "<8 x float>" in compiled["ir"]


def test_soft_float_object_needs_only_libgcc_helpers():
    """Cortex-M0+ has no FPU: llvm.sqrt (or llvm.floor) would be a call to libm; ours need only __aeabi_*."""
    mb = ModuleBuilder("m0", get_target("cortex-m0plus"))
    for name in ("sqrt", "floor", "round", "exp", "log", "sin", "atan", "pow", "selu"):
        mb.add_kernel(_kernel(name))
    obj = mb.emit_object()
    missing = set(undefined_symbols(obj))
    assert missing and all(s.startswith("__aeabi_") for s in missing), sorted(missing)


# --------------------------------------------------------------------------- exact functions

ROUNDING = ("floor", "ceil", "round", "trunc", "sign")
NUMPY32 = {"floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "sign": np.sign}


def rounding_inputs() -> np.ndarray:
    ints = np.arange(-2000, 2001, dtype=np.float32)
    near = np.array([2.0 ** 22, 2.0 ** 23, 2.0 ** 24, 2.0 ** 31, 2.0 ** 32, 3e9, 1e20, F32_MAX], np.float32)
    near = np.concatenate([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(np.inf))])
    steps = np.concatenate([ints + 0.5, ints + 0.25, ints - 0.25, ints + 1e-3, ints, np.float32(2.0 ** 22) + ints
                            + np.float32(0.5), np.nextafter(ints + np.float32(0.5), np.float32(0))])
    wide = symmetric(1e-30, 3e38)
    values = np.concatenate([steps, -steps, near, -near, wide, tiny_values(), SPECIALS]).astype(np.float32)
    return values[:POINTS]


@pytest.mark.parametrize("fn_name", ROUNDING)
def test_rounding_is_exact(compiled, fn_name):
    """Equal to numpy's float32 result bit for bit: ties to even, |x| >= 2**23, -0.0, inf and NaN."""
    x = rounding_inputs()
    got, want = evaluate(compiled, fn_name, x), NUMPY32[fn_name](x)
    np.testing.assert_array_equal(got, want)
    same_sign = np.signbit(got) == np.signbit(want)
    assert same_sign[~np.isnan(want)].all(), f"{fn_name}: sign of zero differs at {x[~same_sign][:5]}"


# --------------------------------------------------------------------------- square root


def sqrt_inputs(rng) -> np.ndarray:
    """Positive floats uniform over bit patterns (every binade, denormals too), squares, specials."""
    bits = rng.integers(1, 0x7F800000, POINTS - 3000, dtype=np.int64).astype(np.int32).view(np.float32)
    squares = np.square(np.arange(1, 1001, dtype=np.float32))
    return np.concatenate([bits, squares, np.nextafter(squares, np.float32(0)), np.nextafter(squares, np.float32(1e9))])


@pytest.mark.parametrize("fn_name", ["sqrt", "sqrt_newton", "pow_half"])
def test_sqrt_is_correctly_rounded(compiled, fn_name):
    x = sqrt_inputs(np.random.default_rng(7))
    np.testing.assert_array_equal(evaluate(compiled, fn_name, x), np.sqrt(x))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-45, 1e-45], np.float32)
    got = evaluate(compiled, fn_name, specials)
    np.testing.assert_array_equal(got, np.sqrt(specials))
    assert np.signbit(got[1]), "sqrt(-0) = -0"


def test_sqrt_without_fma_is_within_one_ulp(unfused):
    x = sqrt_inputs(np.random.default_rng(8))
    got = evaluate(unfused, "sqrt_newton", x)
    err = ulp_errors(got, np.sqrt(x.astype(np.float64)))
    assert err.max() <= 1.0, f"max {err.max():.3g} ulp at x = {x[np.argmax(err)]!r}"
    np.testing.assert_array_equal(evaluate(unfused, "sqrt_newton", SPECIALS), np.sqrt(SPECIALS))


# --------------------------------------------------------------------------- ulp bounds over wide ranges

with np.errstate(all="ignore"):
    ULP_CASES = {   # function: (inputs, max ulp)
        "exp": (np.concatenate([np.linspace(-103.9, 88.72, POINTS - 2000), symmetric(1e-30, 1.0)[:2000]]), 2.0),
        "log": (np.concatenate([spread(1e-45, 3e38, POINTS - 2000), np.linspace(0.5, 2.0, 2000)]), 2.0),
        "expm1": (symmetric(1e-30, 88.0), 3.0),
        "log1p": (np.concatenate([spread(1e-30, 1e30, POINTS // 2), -spread(1e-30, 0.999, POINTS // 2)]), 2.5),
        "rsqrt": (spread(1e-45, 3e38), 1.5),
        "tanh": (symmetric(1e-30, 20.0), 4.0),
        "sinh": (symmetric(1e-30, 89.4), 3.0),
        "cosh": (symmetric(1e-30, 89.4), 3.0),
        "asinh": (symmetric(1e-30, 3e38), 3.0),
        "acosh": (spread(1.0, 3e38), 3.0),
        "atanh": (symmetric(1e-30, 1.0), 3.0),
        "asin": (symmetric(1e-30, 1.0), 3.0),
        "acos": (symmetric(1e-30, 1.0), 3.0),
        "atan": (symmetric(1e-30, 3e38), 3.0),
        "tan": (symmetric(1e-30, 0.78), 3.0),
        "sin": (symmetric(1e-30, 0.78), 2.0),
        "cos": (symmetric(1e-30, 0.78), 2.0),
        "softplus": (symmetric(1e-30, 1e4), 3.0),
        "softsign": (symmetric(1e-30, 3e38), 2.0),
        "mish": (np.concatenate([-spread(1e-30, 85.0, POINTS // 2), spread(1e-30, 1e4, POINTS // 2)]), 5.0),
        "silu": (symmetric(1e-30, 80.0), 4.0),
        "elu": (symmetric(1e-30, 100.0), 3.0),
        "elu_half": (symmetric(1e-30, 100.0), 3.0),
        "selu": (symmetric(1e-30, 100.0), 3.0),
        "celu_2": (symmetric(1e-30, 100.0), 3.0),
        "pow_1_7": (spread(1e-20, 1e20), 3.0),
        "pow_2": (symmetric(1e-19, 1e19), 1.0),
        "pow_3": (symmetric(1e-12, 1e12), 1.5),
        "pow_m1": (symmetric(1e-37, 1e37), 0.5),
    }


@pytest.mark.parametrize("fn_name", ULP_CASES)
def test_ulp_error(compiled, fn_name):
    x, bound = ULP_CASES[fn_name]
    worst, at = measure(compiled, fn_name, x)
    assert worst <= bound, f"{fn_name}: max error {worst:.3g} ulp at x = {at!r}"


# NaN in, NaN out; inf, -inf, +-0 and the extremes as numpy gives them (within the functions' ulp bounds).
SPECIAL_CASES = ("exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                 "acosh", "atanh", "tanh", "sigmoid", "erf", "softplus", "mish", "elu", "selu", "celu",
                 "expm1", "log1p", "rsqrt", "pow_2", "pow_m1", "pow_0", "thresholded_relu", "shrink")


@pytest.mark.parametrize("fn_name", SPECIAL_CASES)
def test_special_values(compiled, fn_name):
    """Within 3 ulp, or 1e-40 where the result is a denormal (e.g. sigmoid(-100) comes out as 0)."""
    x = np.concatenate([SPECIALS, [1.0, -1.0, 2.0, -2.0, 89.0, 88.7, -88.0, -100.0, -104.0, 1e4, -1e4]])
    if fn_name in ("sin", "cos", "tan"):
        x = x[np.abs(x) != F32_MAX]       # beyond the range reduction's reach (see aot/kernel/math.py)
    x = x.astype(np.float32)
    got = evaluate(compiled, fn_name, x)
    with np.errstate(all="ignore"):
        ref = REFERENCE[fn_name](x.astype(np.float64))
    bad = (ulp_errors(got, ref) > 3.0) & ~(np.abs(got - ref) <= 1e-40)
    assert not bad.any(), list(zip(x[bad], got[bad], ref[bad]))


# --------------------------------------------------------------------------- absolute error bounds

ABS_CASES = {   # function: (inputs, max absolute error)
    "sigmoid": (full_range("sigmoid"), 2e-7),
    "tanh": (full_range("tanh"), 2e-7),
    "erf": (full_range("erf"), 2e-7),
    "sin": (np.linspace(-1e6, 1e6, POINTS), 1.2e-7),
    "cos": (np.linspace(-1e4, 1e4, POINTS), 1.2e-7),
    "swish_2": (np.linspace(-100, 100, POINTS), 2e-6),
    "celu": (np.linspace(-100, 100, POINTS), 2e-7),
}


@pytest.mark.parametrize("fn_name", ABS_CASES)
def test_absolute_error(compiled, fn_name):
    x, bound = ABS_CASES[fn_name]
    x = np.asarray(x, np.float32)
    got = evaluate(compiled, fn_name, x).astype(np.float64)
    abs_err = np.abs(got - REFERENCE[fn_name](x.astype(np.float64)))
    worst = int(np.argmax(abs_err))
    assert abs_err.max() <= bound, f"{fn_name}: max absolute error {abs_err.max():.3g} at x = {x[worst]!r}"


def test_tan_relative_error_over_periods(compiled):
    """tan away from its poles (where its condition number explodes) and up to |x| = 1e4."""
    x = np.linspace(-1e4, 1e4, POINTS).astype(np.float32)
    got = evaluate(compiled, "tan", x).astype(np.float64)
    ref = np.tan(x.astype(np.float64))
    keep = np.abs(np.cos(x.astype(np.float64))) > 0.1
    rel = np.abs(got - ref)[keep] / np.maximum(np.abs(ref[keep]), 1.0)
    assert rel.max() <= 5e-7, f"tan: max relative error {rel.max():.3g}"


def test_exp_exact_points(compiled):
    x = np.array([0.0, 1.0, -1.0, 10.0, -10.0, 88.0, -87.0], np.float32)
    got = evaluate(compiled, "exp", x).astype(np.float64)
    assert got[0] == 1.0
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)), rtol=5e-7)


@pytest.mark.parametrize("fn_name", ["tanh", "erf"])
def test_relative_error_near_zero(compiled, fn_name):
    mags = np.logspace(-6, 0, POINTS // 2)
    x = np.concatenate([mags, -mags]).astype(np.float32)
    got = evaluate(compiled, fn_name, x).astype(np.float64)
    ref = REFERENCE[fn_name](x.astype(np.float64))
    rel = np.abs(got - ref) / np.abs(ref)
    worst = int(np.argmax(rel))
    assert rel.max() <= 1e-6, f"{fn_name}: max relative error {rel.max():.3g} at x = {x[worst]!r}"


def test_sigmoid_tiny_inputs_are_one_half(compiled):
    mags = np.logspace(-30, -7, 1000)
    got = evaluate(compiled, "sigmoid", np.concatenate([mags, -mags, [0.0]]))
    np.testing.assert_allclose(got, 0.5, atol=1e-7)


def test_saturation(compiled):
    """Far from 0 the bounded functions reach their limits exactly (no NaN from exp overflow)."""
    x = np.array([-200.0, -20.0, -15.0, 15.0, 20.0, 200.0, np.inf, -np.inf], np.float32)
    sign = np.sign(x)
    np.testing.assert_array_equal(evaluate(compiled, "tanh", x), sign)
    np.testing.assert_array_equal(evaluate(compiled, "erf", x), sign)
    np.testing.assert_allclose(evaluate(compiled, "sigmoid", x), (sign + 1) / 2, atol=1e-6)


def test_piecewise_activations_are_exact(compiled):
    x = np.concatenate([np.linspace(-3, 3, 6001), [-1.0, 1.0, -0.5, 0.5, -np.inf, np.inf]]).astype(np.float32)
    for name in ("thresholded_relu", "shrink", "shrink_1"):
        np.testing.assert_array_equal(evaluate(compiled, name, x), REFERENCE[name](x).astype(np.float32), name)


# --------------------------------------------------------------------------- pow


def test_pow_small_bases_and_exponents(compiled):
    """What ONNX Pow tests feed: positive bases, small exponents (integers among them)."""
    rng = np.random.default_rng(11)
    x = rng.uniform(0.01, 10.0, POINTS)
    y = np.where(rng.random(POINTS) < 0.3, rng.integers(-4, 5, POINTS), rng.uniform(-4.0, 4.0, POINTS))
    worst, at = measure(compiled, "pow", x, y)
    assert worst <= 8.0, f"pow: {worst:.3g} ulp at x = {at!r}"


def test_pow_signs_zeros_and_specials(compiled):
    """C99 / numpy pow at negative bases (integral exponents only), zeros, ones, infinities and NaN."""
    base = np.array([-2.0, -2.0, -2.0, -2.0, -0.5, 0.0, -0.0, 0.0, -0.0, -0.0, 0.0, 1.0, np.nan, 2.0, np.nan,
                     np.inf, np.inf, -np.inf, -np.inf, 3.0, -3.0, 1.0], np.float32)
    expo = np.array([3.0, 2.0, 0.5, -1.0, 5.0, 2.0, 3.0, -1.0, -1.0, 2.0, 0.0, np.nan, 0.0, np.nan, 1.0,
                     2.0, -2.0, 3.0, 2.0, -np.inf, 4e10, 1e30], np.float32)
    got = evaluate(compiled, "pow", base, expo)
    with np.errstate(all="ignore"):
        want = np.power(base.astype(np.float64), expo.astype(np.float64)).astype(np.float32)
    err = ulp_errors(got, want)
    assert err.max() <= 2.0, list(zip(base[err > 2], expo[err > 2], got[err > 2], want[err > 2]))
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("fn_name", ["tanh", "erf", "sin", "tan", "asin", "atan", "sinh", "asinh", "atanh"])
def test_odd_functions_are_exactly_odd(compiled, fn_name):
    x = np.linspace(0.0, 1.0 if fn_name in ("asin", "atanh") else 20.0, 20_001).astype(np.float32)
    np.testing.assert_array_equal(evaluate(compiled, fn_name, -x), -evaluate(compiled, fn_name, x))


@pytest.mark.parametrize("fn_name", ["exp", "log", "sqrt", "floor", "sin", "atan", "acosh", "selu", "mish", "pow"])
@pytest.mark.parametrize("count", [1, 5, 8, 13, 67])
def test_scalar_tail_matches_vector_lanes(compiled, fn_name, count):
    """Counts that are not a multiple of 8 go through the scalar loop: same values as the vector loop."""
    rng = np.random.default_rng(count)
    values = [rng.uniform(0.5 if fn_name in ("log", "sqrt", "acosh", "pow") else -10.0, 10.0, count)]
    if fn_name in BINARY:
        values.append(rng.uniform(-3.0, 3.0, count))
    vector = evaluate(compiled, fn_name, *(np.resize(v, 8 * count) for v in values))[:count]
    tail = evaluate(compiled, fn_name, *values)
    np.testing.assert_array_equal(tail, vector)


# --------------------------------------------------------------------------- under emulation

# function: max ulp (sin: absolute error); sqrt is correctly rounded with an FPU or FMA, <= 1 ulp without
QEMU_BOUNDS = {"exp": 2.0, "log": 2.0, "sqrt": 0.5, "floor": 0.0, "round": 0.0, "ceil": 0.0, "sin": 1.2e-7,
               "atan": 3.0, "asinh": 3.0, "selu": 3.0, "mish": 5.0, "pow": 4.0}
QEMU_POINTS = 4096

QEMU_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#define N %(n)d
static float x[N], w[N], y[N];
%(decls)s
static int io(const char *path, void *data, int write)
{
    FILE *f = fopen(path, write ? "wb" : "rb");
    size_t done;
    if (f == NULL)
        return -1;
    done = write ? fwrite(data, sizeof(float), N, f) : fread(data, sizeof(float), N, f);
    return fclose(f) == 0 && done == N ? 0 : -1;
}

int main(void)
{
    int32_t n = N;
    if (io("x.bin", x, 0) != 0 || io("w.bin", w, 0) != 0)
        return 2;
%(calls)s    return 0;
}
"""


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4", "cortex-m0plus"])
def test_under_emulation(target, tmp_path):
    """A representative subset, cross-compiled (NEON; FPv4 without vrint; soft float without FMA or a
    square root) and run under qemu, meets the same bounds as on the host."""
    from aot.run import local

    tgt = get_target(target)
    if shutil.which(tgt.cc) is None or shutil.which(tgt.run_command[0]) is None:
        pytest.skip(f"{tgt.cc} or {tgt.run_command[0]} not installed")
    mb = ModuleBuilder("mathq", tgt)
    for name in QEMU_BOUNDS:
        mb.add_kernel(_kernel(name))
    (tmp_path / "math.o").write_bytes(mb.emit_object())
    decls = "\n".join(f"void apply_{n}(int32_t *, float *, {'float *, ' if n in BINARY else ''}float *);"
                      for n in QEMU_BOUNDS)
    calls = "".join(f"    apply_{n}(&n, x, {'w, ' if n in BINARY else ''}y);\n"
                    f"    if (io(\"y_{n}.bin\", y, 1) != 0)\n        return 2;\n" for n in QEMU_BOUNDS)
    (tmp_path / "main.c").write_text(QEMU_MAIN % {"n": QEMU_POINTS, "decls": decls, "calls": calls})
    rng = np.random.default_rng(5)
    x = np.concatenate([rounding_inputs()[::23][: QEMU_POINTS // 2], rng.uniform(-20, 20, QEMU_POINTS)])
    x = x[:QEMU_POINTS].astype(np.float32)
    w = rng.uniform(-3.0, 3.0, QEMU_POINTS).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    w.tofile(tmp_path / "w.bin")
    exe = tmp_path / "prog.elf"
    local.link(tgt, [tmp_path / "main.c"], [tmp_path / "math.o"], tmp_path, exe, "the math test")
    local.execute(tgt, exe, tmp_path, 300, "math")
    for name, bound in QEMU_BOUNDS.items():
        got = np.fromfile(tmp_path / f"y_{name}.bin", dtype=np.float32)
        with np.errstate(all="ignore"):
            ref = REFERENCE[name](*(v.astype(np.float64) for v in ((x, w) if name in BINARY else (x,))))
        if name == "sin":       # absolute error, within the range reduction's reach
            keep = np.abs(x) <= 1e6
            err = np.abs(got[keep] - ref[keep])
        else:            # ulp, but results below FLT_MIN only to 1e-40 (mish(-104) comes out as -0)
            keep = np.ones_like(x, bool)
            err = np.where(np.abs(ref) < 1.2e-38, np.abs(got - ref) * 1e40, ulp_errors(got, ref))
        if not tgt.fma and name == "sqrt":
            bound = 1.0
        worst = int(np.argmax(err))
        assert err[worst] <= bound, f"{target} {name}: error {err[worst]:.3g} at x = {x[keep][worst]!r}"
