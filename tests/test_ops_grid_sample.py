"""GridSample against ONNX's reference implementation (and onnxruntime where it agrees with it): every
mode, padding mode and corner alignment, with grid points inside and outside the input.

onnxruntime follows PyTorch for bicubic sampling with border padding (each tap clamped, the point not),
where the ONNX reference first clamps a point outside the borders; aot follows the reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import aot


def _model(x_shape, grid_shape, opset=16, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", **attrs)
    out = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                                            helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _check(mode, padding, align, target="host"):
    """Opset 20 names the modes linear, cubic, nearest (opset 16: bilinear, bicubic)."""
    rng = np.random.default_rng(3)
    x_shape, grid_shape = (2, 3, 5, 7), (2, 4, 6, 2)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "grid": rng.uniform(-1.4, 1.4, grid_shape).astype(np.float32)}
    model = _model(x_shape, grid_shape, opset=20, mode=mode, padding_mode=padding, align_corners=align)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = aot.run(model, feeds, target=target)["y"]
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)


def test_grid_sample_matches_onnxruntime_at_opset_16():
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((1, 2, 6, 5)).astype(np.float32),
             "grid": rng.uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(np.float32)}
    result = aot.check(_model((1, 2, 6, 5), (1, 3, 4, 2), mode="bilinear", padding_mode="reflection"), inputs=feeds)
    assert result.ok, result.comparisons


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, padding, align):
    _check(mode, padding, align)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_grid_sample_under_emulation(target):
    _check("cubic", "border", 0, target)


def test_unknown_modes_are_refused():
    with pytest.raises(aot.AotError, match="node 'sample' .*mode 'area'"):
        aot.build(_model((1, 1, 4, 4), (1, 2, 2, 2), mode="area"), out_dir=None)
