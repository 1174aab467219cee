"""float64 computed at run time (arithmetic, comparisons, Cast, Where, ops that move values) against
onnxruntime, on the host and on targets with a double-precision FPU; exact where float64 arithmetic is
(onnxruntime computes the same IEEE operations in the same order)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from oracle import make_typed_model as _model

import aot

D, F, I64, B = TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(64)


def _check(model, feeds, target="host"):
    result = aot.check(model, inputs=feeds, target=target)
    assert result.reference_used == "onnxruntime"
    for name, got in result.outputs.items():
        np.testing.assert_array_equal(got, result.reference[name])     # bit for bit
    return result.outputs


def _arithmetic():
    # A float64 pipeline as scikit-learn and scientific exports write it: affine maps with broadcast
    # constants, a clamp, a comparison choosing between branches, then the result narrowed to float32.
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"]),
             helper.make_node("Sub", ["scaled", "offset"], ["centred"]),
             helper.make_node("Div", ["centred", "y"], ["ratio"]),
             helper.make_node("Max", ["ratio", "floor"], ["clamped"]),
             helper.make_node("Abs", ["clamped"], ["size"]),
             helper.make_node("Neg", ["size"], ["negative"]),
             helper.make_node("Less", ["x", "y"], ["smaller"]),
             helper.make_node("Where", ["smaller", "negative", "ratio"], ["chosen"]),
             helper.make_node("Transpose", ["chosen"], ["turned"], perm=[1, 0]),
             helper.make_node("Concat", ["turned", "turned"], ["both"], axis=1),
             helper.make_node("Cast", ["both"], ["narrow"], to=F),
             helper.make_node("Cast", ["both"], ["whole"], to=I64)]
    inits = [("scale", RNG.standard_normal(5)), ("offset", RNG.standard_normal((3, 1))), ("floor", np.array(-0.75))]
    model = _model(nodes, [("x", D, [3, 5]), ("y", D, [3, 5])],
                   [("both", D, [5, 6]), ("narrow", F, [5, 6]), ("whole", I64, [5, 6])], inits=inits)
    feeds = {"x": RNG.standard_normal((3, 5)) * 1e3, "y": RNG.standard_normal((3, 5)) + 0.1}
    return model, feeds


def test_float64_arithmetic_comparisons_and_movement():
    outputs = _check(*_arithmetic())
    assert outputs["both"].dtype == np.float64


def test_float64_keeps_what_float32_would_lose():
    # 1 + 2**-40 is 1 in float32: a float32 kernel in disguise would return exactly 0 here.
    nodes = [helper.make_node("Add", ["x", "tiny"], ["sum"]), helper.make_node("Sub", ["sum", "x"], ["y"])]
    model = _model(nodes, [("x", D, [4])], [("y", D, [4])], inits=[("tiny", np.full(4, 2.0 ** -40))])
    outputs = _check(model, {"x": np.ones(4)})
    assert np.all(outputs["y"] == 2.0 ** -40)


def test_float32_cast_to_float64_and_back():
    nodes = [helper.make_node("Cast", ["x"], ["wide"], to=D), helper.make_node("Mul", ["wide", "wide"], ["sq"]),
             helper.make_node("IsInf", ["sq"], ["overflow"]), helper.make_node("Cast", ["sq"], ["y"], to=F)]
    model = _model(nodes, [("x", F, [6])], [("y", F, [6]), ("overflow", B, [6])])
    x = np.array([1e20, -3e19, 1.5, 0.0, 2e-30, 7.0], np.float32)     # squares past float32's range, and below it
    outputs = _check(model, {"x": x})
    assert not outputs["overflow"].any()


def test_float64_matrix_products_and_reductions():
    # Summation order may differ from onnxruntime's (its double GEMM blocks the sum): compared within a
    # few float64 ulps of the sums' magnitudes, far below float32's 6e-8.
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("MatMul", ["xw", "v"], ["xwv"]),
             helper.make_node("Relu", ["xwv"], ["r"]),
             helper.make_node("ReduceSum", ["r", "last"], ["total"], keepdims=0),
             helper.make_node("ReduceMean", ["xw"], ["mean"], axes=[0, 2], keepdims=1),
             helper.make_node("ReduceMax", ["x"], ["top"], axes=[1], keepdims=0)]
    # opset 13: ReduceSum's axes an input, the others' an attribute
    model = _model(nodes, [("x", D, [2, 5, 7]), ("v", D, [2, 9, 3])],
                   [("total", D, [2, 5]), ("mean", D, [1, 5, 1]), ("top", D, [2, 7])], 13,
                   inits=[("w", RNG.standard_normal((7, 9))), ("last", np.array([-1], np.int64))])
    feeds = {"x": RNG.standard_normal((2, 5, 7)), "v": RNG.standard_normal((2, 9, 3))}
    result = aot.check(model, inputs=feeds)
    assert result.ok and result.reference_used == "onnxruntime"
    for name, got in result.outputs.items():
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, result.reference[name], rtol=1e-13, atol=1e-13)


def test_float64_reductions_that_call_math_functions_are_refused(tmp_path):
    model = _model([helper.make_node("ReduceL2", ["x"], ["y"], name="norm", keepdims=0)], [("x", D, [3, 4])],
                   [("y", D, [])])
    with pytest.raises(aot.errors.UnsupportedOpError, match=r"'norm' \(ReduceL2\).*float64: ReduceMax"):
        aot.build(model, out_dir=tmp_path)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m7"])
def test_float64_on_targets_with_double_precision(target):
    _check(*_arithmetic(), target=target)
