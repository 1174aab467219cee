"""`aot validate` (aot/validate.py): a model over a data set, on the host, under an emulator and on a
microcontroller board flashed once with its inputs sent over the console; each output's figures against
the reference, and the figures themselves against their definitions."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from oracle import make_model

from aot.validate import measure, read_samples, validate


def classifier() -> onnx.ModelProto:
    """Scores of 10 classes from a 1x2x4x4 input (a Conv, a pooling and a Gemm)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "g"], ["y"])]
    return make_model(nodes, {"x": (1, 2, 4, 4)}, {"y": (1, 10)},
                      {"w": rng.standard_normal((6, 2, 3, 3)).astype(np.float32),
                       "g": rng.standard_normal((6, 10)).astype(np.float32)})


@pytest.fixture
def data(tmp_path):
    model = tmp_path / "cls.onnx"
    onnx.save(classifier(), model)
    x = np.random.default_rng(5).standard_normal((12, 1, 2, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", x=x)
    return model, tmp_path / "samples.npz", x


def _onnxruntime(model, x):
    import onnxruntime as ort
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return [session.run(None, {"x": s})[0] for s in x]


def test_measure_follows_the_definitions():
    rng = np.random.default_rng(0)
    want = [rng.standard_normal((1, 5)) for _ in range(4)]
    got = [w + rng.normal(0, 1e-3, w.shape) for w in want]
    got[2] = want[2][:, ::-1].copy()            # one sample's scores reversed: its top-1 differs
    m = measure("y", got, want)
    a, r = np.concatenate([g.ravel() for g in got]), np.concatenate([w.ravel() for w in want])
    assert m.l2r == pytest.approx(np.linalg.norm(a - r) / np.linalg.norm(r))
    assert m.cosine == pytest.approx(a @ r / np.linalg.norm(a) / np.linalg.norm(r))
    assert m.mae == pytest.approx(np.mean(np.abs(a - r))) and m.max_abs == pytest.approx(np.max(np.abs(a - r)))
    assert m.rmse == pytest.approx(np.sqrt(np.mean((a - r) ** 2)))
    assert m.top1 == 0.75 and m.samples == 4 and m.within_tolerance < 4
    image = measure("z", [np.ones((1, 2, 3, 3))], [np.ones((1, 2, 3, 3))])
    assert image.top1 is None and image.l2r == 0.0 and image.cosine == 1.0 and image.within_tolerance == 1


def test_validate_on_the_host_against_onnxruntime(data, tmp_path):
    model, path, x = data
    samples = read_samples(path, onnx.load(model), "cls.onnx")
    assert len(samples) == 12 and samples[3]["x"].shape == (1, 2, 4, 4)
    seen = []
    result = validate(str(model), samples, on_sample=seen.append)
    assert seen == list(range(12)) and result.samples == 12 and result.ok
    (m,) = result.metrics
    assert m.output == "y" and m.top1 == 1.0 and m.within_tolerance == 12 and m.l2r < 1e-5
    want = _onnxruntime(model, x)
    assert m.max_abs <= 1e-4 * max(float(np.abs(w).max()) for w in want)


def test_validate_command_prints_a_table_and_json(data, tmp_path):
    model, path, _ = data
    proc = subprocess.run([sys.executable, "-m", "aot", "validate", str(model), "--inputs", str(path), "--limit", "5",
                           "--json", str(tmp_path / "v.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("cls.onnx on x86-64") and "vs onnxruntime, 5 sample(s)" in lines[0]
    assert lines[1].split()[:4] == ["output", "samples", "l2r", "cosine"] and lines[2].split()[:2] == ["y", "5"]
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["samples"] == 5 and report["ok"] and report["outputs"][0]["within_tolerance"] == 5


def test_validate_reads_onnx_test_sets_and_refuses_bad_data(data, tmp_path):
    model, _, x = data
    for i in range(3):
        folder = tmp_path / "sets" / f"test_data_set_{i}"
        folder.mkdir(parents=True)
        (folder / "input_0.pb").write_bytes(numpy_helper.from_array(x[i], "x").SerializeToString())
    assert len(read_samples(tmp_path / "sets", onnx.load(model), "cls.onnx")) == 3
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 1, 3, 4, 4), np.float32))
    proc = subprocess.run([sys.executable, "-m", "aot", "validate", str(model), "--inputs", str(tmp_path / "bad.npz")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--inputs" in proc.stderr and "input 'x'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.qemu
def test_validate_under_an_emulator_and_on_a_board_flashed_once(data, monkeypatch):
    model, path, x = data
    samples = read_samples(path, onnx.load(model), "cls.onnx", limit=4)
    emulated = validate(str(model), samples, target="cortex-m4")
    assert emulated.ok and emulated.where == "cortex-m4"
    from aot.device import loaders
    starts = []
    real = loaders.started

    def counted(*args, **kwargs):
        starts.append(1)
        return real(*args, **kwargs)
    import aot.device.run as device_run
    monkeypatch.setattr(device_run, "started", counted)
    board = validate(str(model), samples, board="qemu-m4-uart")
    assert starts == [1], "the board was started more than once"
    assert board.ok and board.where == "board qemu-m4-uart (cortex-m4)"
    assert board.metrics[0].top1 == 1.0 and board.metrics[0].within_tolerance == 4
