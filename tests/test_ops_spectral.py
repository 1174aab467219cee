"""DFT (a Gemm by a constant transform matrix) against onnxruntime: real and complex signals, onesided,
inverse (complex and one-sided real), zero-padding and truncation, signal axis, constant or fed at run
time (opset 20)."""

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
    "first_axis": ((4, 5, 1), (4, 5, 2), {"axis": 0}),       # ONNX's reference and onnxruntime transform it too
    "first_axis_negative": ((4, 3, 5, 2), (4, 3, 5, 2), {"axis": -4}),
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


def _dft_fed_axis(shape: tuple[int, ...], out_shape: tuple[int, ...], **attrs):
    """Opset 20's DFT, its axis an input fed at run time."""
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], name="dft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
                                            helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


# id: (input shape, output shape, attributes, axes fed): every signal axis gives the output's shape
FED_AXIS_CASES = {
    "real": ((3, 4, 5, 1), (3, 4, 5, 2), {}, [0, 1, 2, -2, -3, -4]),
    "complex_inverse": ((3, 4, 4, 2), (3, 4, 4, 2), {"inverse": 1}, [0, 1, 2, -2, -3]),
}


@pytest.mark.parametrize("name", sorted(FED_AXIS_CASES))
def test_dft_axis_fed_at_run_time_chooses_among_the_shapes(name):
    """A DFT along each axis the shapes allow, the one the fed axis names kept (onnxruntime's answer,
    the first axis included)."""
    shape, out_shape, attrs, axes = FED_AXIS_CASES[name]
    model = _dft_fed_axis(shape, out_shape, **attrs)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for axis in axes:
        result = aot.check(model, inputs={"x": x, "axis": np.array(axis, np.int64)})
        assert result.ok, (axis, result.comparisons)


def test_dft_axis_fed_at_run_time_is_not_read_when_the_shapes_decide():
    """A one-sided (2, 6, 6) -> (2, 4, 6) transform is along axis 1 whatever is fed."""
    x = np.random.default_rng(4).standard_normal((2, 6, 6, 1)).astype(np.float32)
    model = _dft_fed_axis(x.shape, (2, 4, 6, 2), onesided=1)
    spectrum = np.fft.rfft(x[..., 0].astype(np.float64), axis=1)
    for axis in (1, -3, 2, 99):
        got = aot.run(model, {"x": x, "axis": np.array(axis, np.int64)})["y"]
        np.testing.assert_allclose(got, np.stack([spectrum.real, spectrum.imag], -1), atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 3, 4, -5, 2**63 - 1, -(2**63)])
def test_dft_axis_fed_out_of_range_gives_an_allowed_transform(axis):
    """The component axis or one beyond the rank is the model's error (onnxruntime refuses it): no crash,
    and the output is the transform along one of the axes the shapes allow."""
    x = np.random.default_rng(5).standard_normal((3, 4, 5, 1)).astype(np.float32)
    got = aot.run(_dft_fed_axis(x.shape, (3, 4, 5, 2)), {"x": x, "axis": np.array(axis, np.int64)})["y"]
    spectra = [np.fft.fft(x[..., 0].astype(np.float64), axis=a) for a in range(3)]
    assert any(np.allclose(got, np.stack([s.real, s.imag], -1), atol=1e-5) for s in spectra), got


def test_inverse_one_sided_transform_of_a_real_spectrum_is_the_models_error():
    """ONNX's shape inference and onnxruntime require a complex spectrum: a clear error, not a crash (the
    matrix's construction raised a ValueError). The node is unnamed: the error names it as aot does."""
    node = helper.make_node("DFT", ["x"], ["y"], inverse=1, onesided=1, axis=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(aot.ModelError, match=r"node 'DFT_0' \(DFT\): inverse one-sided DFT requires complex input"):
        aot.build(model, out_dir=None)
