"""aot.load / aot.compile: a build called in process through ctypes (host), or through the harness under
an emulator (aarch64 under qemu-user), with the GraphModule interface."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
from onnx import helper
from oracle import make_model, onnxruntime_outputs
from test_remote import board_file, leftovers

import aot


def conv_model(seed: int = 3, channels: int = 4):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["pooled"], name="gap")]
    weights = {"w": rng.standard_normal((channels, 3, 3, 3)).astype(np.float32),
               "b": rng.standard_normal(channels).astype(np.float32)}
    return make_model(nodes, {"input": (1, 3, 8, 8)}, {"r": None, "pooled": None}, weights)


def image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def assert_close(got: list[np.ndarray], expected: dict[str, np.ndarray], tol: float = 1e-4) -> None:
    assert len(got) == len(expected)
    for out, (name, ref) in zip(got, expected.items()):
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1e-6, float(np.abs(ref).max())), err_msg=name)


@pytest.fixture(scope="module")
def model():
    return conv_model()


@pytest.fixture(scope="module")
def module(model):
    with aot.compile(model, target="host") as m:
        yield m


def test_outputs_match_onnxruntime(module, model):
    x = image(0)
    assert_close(module(x), onnxruntime_outputs(model, {"input": x}))
    assert [s.name for s in module.inputs] == ["input"] and module.inputs[0].shape == (1, 3, 8, 8)
    assert [s.name for s in module.outputs] == ["r", "pooled"] and module.outputs[1].dtype == "float32"
    assert module.workspace_size == module.metadata["workspace"]["size"] and not module.emulated
    assert module.metadata["name"] == module.name


def test_set_input_run_get_output_agree_with_call(module):
    x = image(1)
    module.set_input("input", x)
    ran = module.run()
    assert all(np.array_equal(a, b) for a, b in zip(ran, module(x)))
    assert np.array_equal(module.get_output(0), ran[0]) and np.array_equal(module.get_output("pooled"), ran[1])
    by_keyword = module.run(input=image(2))
    assert np.array_equal(by_keyword[1], module(input=image(2))[1])
    assert np.array_equal(module.get_output(1), by_keyword[1])
    assert not np.array_equal(by_keyword[1], ran[1])


def test_wrong_shape_and_dtype_are_clear_option_errors(module):
    with pytest.raises(aot.OptionError, match=r"input 'input' has shape \[1, 3, 8, 9\], the model expects "
                                              r"\[1, 3, 8, 8\]"):
        module(np.zeros((1, 3, 8, 9), np.float32))
    with pytest.raises(aot.OptionError, match=r"input 'input' has dtype float64, the model expects float32"):
        module.set_input("input", np.zeros((1, 3, 8, 8)))
    with pytest.raises(aot.OptionError, match=r"no input named 'x'.*'input'"):
        module.run(x=image(0))
    with pytest.raises(aot.OptionError, match=r"no value given for input 'input'"):
        module()
    with pytest.raises(aot.OptionError, match=r"no output 5 \(the model has 2 outputs\)"):
        module.get_output(5)


def test_benchmark_returns_sensible_statistics(module):
    result = module.benchmark(repeat=4, number=0, min_repeat_ms=2)
    assert len(result.times_ms) == 4 and all(t > 0 for t in result.times_ms)
    assert result.number >= 1 and result.where == "local" and not result.emulated
    assert result.stats.min <= result.stats.median <= max(result.times_ms) and result.stats.p90 >= result.stats.min
    assert result.number * result.stats.min >= 2 * 0.5       # each measurement lasted about min_repeat_ms
    with pytest.raises(aot.OptionError, match="repeat must be an integer >= 1"):
        module.benchmark(repeat=0)


def test_a_build_directory_loads_and_two_modules_of_the_same_name_live_side_by_side(tmp_path):
    first, second = conv_model(seed=5), conv_model(seed=6, channels=5)
    aot.build(first, target="host", out_dir=tmp_path / "first")
    aot.build(second, target="host", out_dir=tmp_path / "second")
    x = image(3)
    with aot.load(tmp_path / "first") as a, aot.load(tmp_path / "second") as b:
        assert a.name == b.name          # both models are "aot_test": the same C symbols, one library each
        for _ in range(2):
            assert_close(a(x), onnxruntime_outputs(first, {"input": x}))
            assert_close(b(x), onnxruntime_outputs(second, {"input": x}))
    assert (tmp_path / "first" / "metadata.json").is_file()     # the build is the user's: left alone


def test_two_threads_running_one_module_get_their_own_results(module, model):
    inputs = [image(10 + i) for i in range(2)]
    expected = [list(onnxruntime_outputs(model, {"input": x}).values()) for x in inputs]
    failures: list[str] = []
    start = threading.Barrier(2)

    def work(i: int) -> None:
        start.wait()
        for k in range(50):
            got = module(inputs[i]) if k % 2 else module.run(input=inputs[i])
            for out, ref in zip(got, expected[i]):
                if not np.allclose(out, ref, rtol=1e-4, atol=1e-4):
                    failures.append(f"thread {i}, call {k}: max error {np.abs(out - ref).max():.3g}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_close_removes_the_modules_files_and_refuses_calls(model):
    m = aot.compile(model, target="host")
    build_dir = m.dir
    assert build_dir.is_dir()
    m.close()
    assert not build_dir.exists()
    with pytest.raises(aot.OptionError, match="is closed"):
        m(image(0))
    m.close()       # twice is fine


def test_a_missing_build_directory_is_an_option_error(tmp_path):
    with pytest.raises(aot.OptionError, match="no such build directory"):
        aot.load(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(aot.OptionError, match="not a build directory"):
        aot.load(tmp_path / "empty")


@pytest.mark.qemu
def test_an_aarch64_build_runs_under_qemu(tmp_path, model):
    if shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("the aarch64 cross compiler or qemu-aarch64 is not installed")
    aot.build(model, target="aarch64", out_dir=tmp_path / "arm")
    with aot.load(tmp_path / "arm") as m:
        assert m.target.name == "aarch64" and m.emulated
        x = image(4)
        assert_close(m(x), onnxruntime_outputs(model, {"input": x}))
        m.set_input(0, x)
        m.run()
        assert_close([m.get_output(0), m.get_output(1)], onnxruntime_outputs(model, {"input": x}))
        with pytest.raises(aot.OptionError, match="has dtype int32"):
            m(np.zeros((1, 3, 8, 8), np.int32))
        result = m.benchmark(repeat=2, number=1)
        assert result.emulated and len(result.times_ms) == 2 and result.target == "aarch64"


@pytest.mark.ssh
def test_a_module_on_a_board_runs_and_times_over_ssh(sshd, tmp_path, model):  # noqa: F811
    board = board_file(sshd, tmp_path)
    x = image(5)
    with aot.compile(model, board=str(board)) as m:
        assert m.target.name == "aarch64" and m.emulated and "over SSH" in repr(m)
        assert_close(m(x), onnxruntime_outputs(model, {"input": x}))
        result = m.benchmark(repeat=2, number=1)
        assert result.where == "emulated-aarch64" and len(result.times_ms) == 2 and result.number == 1
    assert leftovers(tmp_path / "remote-work") == []


@pytest.mark.qemu
def test_a_bare_metal_build_runs_under_qemu_system_but_is_not_timed(model):
    if shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None:
        pytest.skip("the arm-none-eabi toolchain or qemu-system-arm is not installed")
    with aot.compile(model, target="cortex-m4") as m:
        x = image(6)
        assert_close(m(x), onnxruntime_outputs(model, {"input": x}))
        with pytest.raises(aot.RunError, match="has no clock; load the build with board= a microcontroller board"):
            m.benchmark()
