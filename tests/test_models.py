"""Whole models (MLPerf Tiny architectures, MobileNetV2, ResNet-18) with random weights and BatchNorm,
compiled for the host and compared with onnxruntime through the C entry point."""

import pytest
import zoo
from oracle import assert_matches_onnxruntime

SMALL = ["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"]
LARGE = ["mobilenet_v2", "resnet18"]


@pytest.mark.parametrize("name", SMALL)
def test_mlperf_tiny(name):
    assert_matches_onnxruntime(zoo.ZOO[name]())


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_large_cnn(name):
    assert_matches_onnxruntime(zoo.ZOO[name]())


def test_reduced_mobilenet_v2_at_odd_resolution():
    """Spatial sizes that are not multiples of any tile: 97x97 input, width 0.35."""
    assert_matches_onnxruntime(zoo.mobilenet_v2(seed=3, width=0.35, resolution=97, classes=10))
