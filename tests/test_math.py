"""Accuracy of the polynomial transcendental functions in aot/kernel/math.py.

Each function is applied elementwise by a tiny kernel built with the kernel-IR Builder (8-lane vector
main loop plus a scalar tail), compiled with the LLVM backend for the host, linked into a shared library
with gcc and called through ctypes. Results are compared with numpy / math in float64.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest

from aot.codegen.llvm import ModuleBuilder
from aot.kernel import ir as k
from aot.kernel import math as kmath
from aot.target import get_target

LANES = 8
FUNCTIONS = ("exp", "sigmoid", "tanh", "erf")
POINTS = 100_003        # a multiple of LANES plus 3: the scalar tail runs too

_erf = np.vectorize(math.erf, otypes=[np.float64])
REFERENCE = {
    "exp": np.exp,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "erf": _erf,
}


def _kernel(fn_name: str) -> k.Kernel:
    """kernel(n: i32[1], x: f32[], y: f32[]): y[i] = fn(x[i]) for i < n; 8 lanes at a time, then a scalar tail."""
    fn = getattr(kmath, fn_name)
    count = k.Buffer("n", "i32", 1)
    x = k.Buffer("x", "f32", POINTS)
    y = k.Buffer("y", "f32", POINTS)
    b = k.Builder()
    n = b.let("count", k.Cast(count[0], "idx"))
    main = b.let("main", k.binop("div", n, LANES) * LANES)
    with b.loop("i", 0, main, LANES) as i:
        b.store(y, i, fn(x.vec(i, LANES)))
    with b.loop("j", main, n) as j:
        b.store(y, j, fn(x[j]))
    return k.Kernel(f"apply_{fn_name}", (count, x, y), b.block())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("gcc and nm are needed to link and inspect the object")
    mb = ModuleBuilder("mathtest", get_target("host"))
    for name in FUNCTIONS:
        mb.add_kernel(_kernel(name))
    obj, ir_text = mb.emit_object()
    work = tmp_path_factory.mktemp("kmath")
    obj_path, lib_path = work / "math.o", work / "libmath.so"
    obj_path.write_bytes(obj)
    subprocess.run(["gcc", "-shared", "-o", str(lib_path), str(obj_path)], check=True, capture_output=True)
    lib = ctypes.CDLL(str(lib_path))
    for name in FUNCTIONS:
        getattr(lib, f"apply_{name}").argtypes = [ctypes.c_void_p] * 3
        getattr(lib, f"apply_{name}").restype = None
    return {"lib": lib, "obj": obj_path, "ir": ir_text}


def evaluate(compiled, fn_name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert 0 < x.size <= POINTS
    y = np.full(x.size, np.nan, dtype=np.float32)
    n = np.array([x.size], dtype=np.int32)
    getattr(compiled["lib"], f"apply_{fn_name}")(n.ctypes.data, x.ctypes.data, y.ctypes.data)
    return y


def errors(compiled, fn_name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x as float32, absolute error, reference) in float64 for every point."""
    x = np.asarray(x, dtype=np.float32)
    got = evaluate(compiled, fn_name, x).astype(np.float64)
    ref = REFERENCE[fn_name](x.astype(np.float64))
    assert np.all(np.isfinite(got)), f"{fn_name}: non-finite results at x = {x[~np.isfinite(got)][:5]}"
    return x, np.abs(got - ref), ref


def tiny_values() -> np.ndarray:
    mags = np.logspace(-30, -1, 2000)
    return np.concatenate([mags, -mags, [0.0]])


def full_range(fn_name: str) -> np.ndarray:
    lo, hi = (-87.0, 88.0) if fn_name == "exp" else (-20.0, 20.0)
    points = np.linspace(lo, hi, POINTS)
    if fn_name != "exp":
        points = np.concatenate([points[: POINTS - tiny_values().size], tiny_values()])
    return points


# --------------------------------------------------------------------------- the object itself


def test_object_has_no_undefined_symbols(compiled):
    """The functions are pure polynomials and bit tricks: nothing from libm (or anything else) is needed."""
    out = subprocess.run(["nm", "-u", str(compiled["obj"])], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "", f"undefined symbols in the object:\n{out}"
    assert "call " not in "\n".join(line for line in compiled["ir"].splitlines() if "@llvm." not in line)


def test_kernel_uses_eight_lanes(compiled):
    assert "<8 x float>" in compiled["ir"]


# --------------------------------------------------------------------------- accuracy


def test_exp_relative_error(compiled):
    x, abs_err, ref = errors(compiled, "exp", full_range("exp"))
    rel = abs_err / ref
    worst = int(np.argmax(rel))
    assert rel.max() <= 5e-7, f"exp: max relative error {rel.max():.3g} at x = {x[worst]!r}"


def test_exp_exact_points(compiled):
    x = np.array([0.0, 1.0, -1.0, 10.0, -10.0, 88.0, -87.0], np.float32)
    got = evaluate(compiled, "exp", x).astype(np.float64)
    assert got[0] == 1.0
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)), rtol=5e-7)


ABS_CASES = [
    "sigmoid",
    "tanh",
    "erf",
]


@pytest.mark.parametrize("fn_name", ABS_CASES)
def test_absolute_error(compiled, fn_name):
    x, abs_err, _ = errors(compiled, fn_name, full_range(fn_name))
    worst = int(np.argmax(abs_err))
    assert abs_err.max() <= 2e-7, f"{fn_name}: max absolute error {abs_err.max():.3g} at x = {x[worst]!r}"


@pytest.mark.parametrize("fn_name", ["tanh", "erf"])
def test_relative_error_near_zero(compiled, fn_name):
    mags = np.logspace(-6, 0, POINTS // 2)
    x, abs_err, ref = errors(compiled, fn_name, np.concatenate([mags, -mags]))
    rel = abs_err / np.abs(ref)
    worst = int(np.argmax(rel))
    assert rel.max() <= 1e-6, f"{fn_name}: max relative error {rel.max():.3g} at x = {x[worst]!r}"


def test_sigmoid_tiny_inputs_are_one_half(compiled):
    mags = np.logspace(-30, -7, 1000)
    got = evaluate(compiled, "sigmoid", np.concatenate([mags, -mags, [0.0]]))
    np.testing.assert_allclose(got, 0.5, atol=1e-7)


def test_saturation(compiled):
    """Far from 0 the bounded functions reach their limits exactly (no NaN from exp overflow)."""
    x = np.array([-20.0, -15.0, 15.0, 20.0], np.float32)
    sign = np.sign(x)
    np.testing.assert_array_equal(evaluate(compiled, "tanh", x), sign)
    np.testing.assert_array_equal(evaluate(compiled, "erf", x), sign)
    np.testing.assert_allclose(evaluate(compiled, "sigmoid", x), (sign + 1) / 2, atol=1e-6)


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("fn_name", ["tanh", "erf"])
def test_odd_functions_are_exactly_odd(compiled, fn_name):
    x = np.linspace(0.0, 20.0, 20_001).astype(np.float32)
    np.testing.assert_array_equal(evaluate(compiled, fn_name, -x), -evaluate(compiled, fn_name, x))


@pytest.mark.parametrize("fn_name", FUNCTIONS)
@pytest.mark.parametrize("count", [1, 5, 8, 13, 67])
def test_scalar_tail_matches_vector_lanes(compiled, fn_name, count):
    """Counts that are not a multiple of 8 go through the scalar loop: same values as the vector loop."""
    rng = np.random.default_rng(count)
    values = rng.uniform(-10.0, 10.0, count).astype(np.float32)
    vector = evaluate(compiled, fn_name, np.resize(values, 8 * count))[:count]   # all through the vector loop
    tail = evaluate(compiled, fn_name, values)
    np.testing.assert_allclose(tail, vector, rtol=2e-7, atol=1e-30)
