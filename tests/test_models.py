"""Whole models (MLPerf Tiny architectures, MobileNetV2, ResNet-18) with random weights and BatchNorm,
compiled for the host and compared with onnxruntime through the C entry point."""

import pytest
import zoo
from oracle import assert_matches_onnxruntime

SMALL = ["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"]
LARGE = ["mobilenet_v2", "resnet18"]


CROSS = ["aarch64", "aarch64-dotprod", "armv7-neon", "cortex-m4", "cortex-m7", "cortex-m55", "cortex-m0plus"]


@pytest.mark.parametrize("name", SMALL)
def test_mlperf_tiny(name):
    assert_matches_onnxruntime(zoo.ZOO[name]())


@pytest.mark.qemu
@pytest.mark.parametrize("target", CROSS + ["x86-64-avx2", "x86-64"])
@pytest.mark.parametrize("name", SMALL)
def test_mlperf_tiny_on_every_target(name, target):
    assert_matches_onnxruntime(zoo.ZOO[name](), target=target)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["host", pytest.param("aarch64", marks=pytest.mark.qemu),
                                    pytest.param("armv7-neon", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("name", LARGE)
def test_large_cnn(name, target):
    assert_matches_onnxruntime(zoo.ZOO[name](), target=target)


def test_reduced_mobilenet_v2_at_odd_resolution():
    """Spatial sizes that are not multiples of any tile: 97x97 input, width 0.35."""
    assert_matches_onnxruntime(zoo.mobilenet_v2(seed=3, width=0.35, resolution=97, classes=10))
