"""3-D pooling against onnxruntime: MaxPool, AveragePool (with and without counting padding) and
LpPool over D, H, W with pads, strides, dilations and ceil_mode."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from oracle import make_model

import aot

CASES = {
    "plain": {"kernel_shape": [2, 2, 2]},
    "strided_padded": {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 0, 1, 1, 1, 0]},
    "dilated": {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2]},
    "ceil": {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2], "ceil_mode": 1},
}


def _check(op: str, case: str, target: str = "host", **extra) -> None:
    attrs = {**CASES[case], **extra}
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    model = make_model([node], {"x": (1, 3, 6, 7, 8)}, {"y": None}, opset=19)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 7, 8)).astype(np.float32)
    result = aot.check(model, inputs={"x": x}, target=target)
    assert result.ok, result.comparisons


OPS = [("MaxPool", {}), ("AveragePool", {}), ("AveragePool", {"count_include_pad": 1}), ("LpPool", {"p": 2})]


@pytest.mark.parametrize("op, extra, case", [(op, extra, case) for op, extra in OPS for case in sorted(CASES)
                                             if not (op == "LpPool" and case == "ceil")])  # LpPool has no ceil_mode
def test_volume_pool(op, extra, case):
    _check(op, case, **extra)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_volume_pool_under_emulation(target):
    _check("AveragePool", "strided_padded", target, count_include_pad=1)
