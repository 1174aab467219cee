"""Det against onnxruntime: stacks of matrices, a singular one, pivoting, 1x1."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from oracle import make_model

import aot


def _matrices(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x.reshape(-1, shape[-1], shape[-1])[0, 0] = 0.0                  # forces a row swap in the first one
    if x.reshape(-1, shape[-1], shape[-1]).shape[0] > 1 and shape[-1] > 1:
        x.reshape(-1, shape[-1], shape[-1])[1, 1] = x.reshape(-1, shape[-1], shape[-1])[1, 0]   # singular
    return x


@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 2, 3, 3), (1, 1)])
@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def test_det(shape, target):
    model = make_model([helper.make_node("Det", ["x"], ["y"])], {"x": shape}, {"y": None})
    result = aot.check(model, inputs={"x": _matrices(shape)}, target=target)
    assert result.ok, result.comparisons
