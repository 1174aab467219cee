"""RoiAlign against onnxruntime: average and max, adaptive and fixed sampling, both coordinate modes,
boxes partly outside the image, several images in the batch."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot

BOXES = np.array([[0.0, 0.0, 9.0, 9.0], [2.5, 1.0, 7.2, 11.0], [-3.0, -2.0, 4.0, 5.0], [6.0, 4.0, 13.0, 12.5]],
                 np.float32)


def _check(mode: str, sampling_ratio: int, transform: str, target: str = "host") -> None:
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="roi", mode=mode, output_height=3,
                            output_width=4, sampling_ratio=sampling_ratio, spatial_scale=0.8,
                            coordinate_transformation_mode=transform)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 12]),
                                            helper.make_tensor_value_info("rois", TensorProto.FLOAT, [4, 4]),
                                            helper.make_tensor_value_info("batch", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 10, 12)).astype(np.float32), "rois": BOXES,
             "batch": np.array([0, 1, 1, 0], np.int64)}
    result = aot.check(model, inputs=feeds, target=target)
    assert result.ok, result.comparisons


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align(mode, sampling_ratio, transform):
    _check(mode, sampling_ratio, transform)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_roi_align_under_emulation(target):
    _check("avg", 0, "half_pixel", target)
