"""DFT (a Gemm by a constant transform matrix) against onnxruntime: real and complex signals, onesided,
inverse (complex and one-sided real), zero-padding and truncation, signal axis."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot


def _dft(shape: tuple[int, ...], out_shape: tuple[int, ...], dft_length: int | None = None, axis: int = 1,
         **attrs):
    inits = []
    inputs = ["x", ""]
    if dft_length is not None:
        inits.append(helper.make_tensor("n", TensorProto.INT64, [], [dft_length]))
        inputs[1] = "n"
    node = helper.make_node("DFT", inputs, ["y"], name="dft", axis=axis, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {
    "real": ((2, 16, 1), (2, 16, 2), {}),
    "complex": ((3, 12, 2), (3, 12, 2), {}),
    "onesided": ((2, 15, 1), (2, 8, 2), {"onesided": 1}),
    "inverse": ((2, 10, 2), (2, 10, 2), {"inverse": 1}),
    "padded": ((1, 6, 1), (1, 9, 2), {"dft_length": 9}),
    "truncated": ((1, 12, 2), (1, 8, 2), {"dft_length": 8}),
    "middle_axis": ((2, 5, 7, 1), (2, 5, 7, 2), {"axis": 2}),
    "first_signal_axis": ((2, 5, 7, 2), (2, 5, 7, 2), {"axis": 1}),
}


def _check(name: str, target: str) -> None:
    shape, out_shape, attrs = CASES[name]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    result = aot.check(_dft(shape, out_shape, **attrs), inputs={"x": x}, target=target)
    assert result.ok, result.comparisons


@pytest.mark.parametrize("name", sorted(CASES))
def test_dft(name):
    _check(name, "host")


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_dft_under_emulation(target):
    _check("onesided", target)


def test_inverse_of_a_one_sided_spectrum_is_numpy_irfft():
    """onnxruntime has no one-sided inverse at opset 17: numpy's irfft is the reference."""
    spectrum = np.random.default_rng(2).standard_normal((2, 9, 2)).astype(np.float32)
    model = _dft((2, 9, 2), (2, 16, 1), dft_length=16, inverse=1, onesided=1)
    got = aot.run(model, {"x": spectrum})["y"]
    want = np.fft.irfft(spectrum[..., 0] + 1j * spectrum[..., 1], n=16, axis=1)[..., None]
    np.testing.assert_allclose(got, want, atol=1e-5)


def _stft(length: int, components: int, step: int, frame: int, onesided: int, window: bool):
    frames = (length - frame) // step + 1
    bins = frame // 2 + 1 if onesided else frame
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [step]),
             helper.make_tensor("frame", TensorProto.INT64, [], [frame])]
    if window:
        inits.append(helper.make_tensor("window", TensorProto.FLOAT, [frame], np.hanning(frame).astype(np.float32)))
    node = helper.make_node("STFT", ["x", "step", "window" if window else "", "frame"], ["y"], name="stft",
                            onesided=onesided)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, length, components])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, frames, bins, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("components, onesided", [(1, 1), (1, 0), (2, 0)])
@pytest.mark.parametrize("window", [True, False])
def test_stft(components, onesided, window):
    x = np.random.default_rng(5).standard_normal((2, 40, components)).astype(np.float32)
    result = aot.check(_stft(40, components, 6, 16, onesided, window), inputs={"x": x})
    assert result.ok, result.comparisons

