"""`aot run --bisect`: intermediate tensors compared node by node with onnxruntime's, and the first
node past the tolerance named. A kernel made wrong on purpose (aot.ops.PERTURB, a test-only hook that
adds a constant to one node's output in its kernel) must be the first divergence found."""

from __future__ import annotations

import contextlib
import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import make_model
from quantize import quantize_model

from aot import ops
from aot.bisect import bisect
from aot.cli import main
from aot.target import get_target


@contextlib.contextmanager
def perturbed(node: str, amount: float):
    """Builds inside add `amount` to every element of `node`'s output (integer outputs: steps)."""
    ops.PERTURB[node] = amount
    try:
        yield
    finally:
        del ops.PERTURB[node]


def small_cnn() -> onnx.ModelProto:
    """Conv+Relu twice (8 channels on 8x8: NHWC and NCHW shapes alike), a residual Add, pools, a Gemm."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Add", ["r2", "r1"], ["s"], name="add"),
             helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5,
             "b1": rng.standard_normal(8).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2,
             "b2": rng.standard_normal(8).astype(np.float32) * 0.1,
             "wf": rng.standard_normal((4, 8)).astype(np.float32),
             "bf": rng.standard_normal(4).astype(np.float32)}
    return make_model(nodes, {"x": (1, 3, 8, 8)}, {"y": (1, 4)}, inits)


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("fp32") / "small_cnn.onnx"
    onnx.save(small_cnn(), path)
    return str(path)


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("int8") / "small_cnn_int8.onnx"
    onnx.save(quantize_model(small_cnn(), "QDQ", per_channel=True), path)
    return str(path)


def compared(result):
    return [r for r in result.rows if r.compared]


def assert_first_divergence_in(result, kernel: str):
    first = result.first
    assert first is not None, "\n".join(f"{r.node}: {r.max_abs} {r.note}" for r in result.rows)
    assert first.kernel == kernel, (first.node, first.kernel, first.max_abs)
    assert not first.ok and first.max_abs > first.tolerance
    before = [r for r in compared(result) if r.index < first.index]
    assert before and all(r.ok for r in before)
    assert sum(r.first for r in result.rows) == 1


def test_fp32_all_within_tolerance(fp32_model):
    result = bisect(fp32_model)
    assert result.ok and result.first is None
    rows = {r.node: r for r in result.rows}
    assert list(rows) == ["conv1", "relu1", "conv2", "relu2", "add", "pool", "gap", "flat", "fc"]
    # each Relu is its Conv's epilogue: the Conv has no tensor of its own, the Relu's is the Conv kernel's
    assert not rows["conv1"].compared and "relu1" in rows["conv1"].note
    assert rows["relu1"].compared and rows["relu1"].kernel == "conv1" and rows["relu1"].tensor == "r1"
    for name in ("relu1", "relu2", "add", "pool", "gap", "fc"):
        assert rows[name].compared and rows[name].ok, rows[name]
        assert rows[name].max_abs <= rows[name].tolerance


@pytest.mark.parametrize("node, row", [("conv2", "relu2"), ("add", "add"), ("pool", "pool"), ("fc", "fc")])
def test_fp32_perturbed_node_is_the_first_divergence(fp32_model, node, row):
    with perturbed(node, 0.5):
        result = bisect(fp32_model)
    assert_first_divergence_in(result, node)
    assert result.first.node == row
    assert result.first.max_abs == pytest.approx(0.5, rel=1e-3)


def test_int8_all_within_one_step(int8_model):
    result = bisect(int8_model)
    assert result.ok, "\n".join(f"{r.node}: {r.steps} {r.note}" for r in result.rows)
    rows = compared(result)
    quantized = [r for r in rows if r.steps is not None]
    assert len(quantized) >= 5
    assert all(r.steps <= 1 for r in quantized)
    # the float Conv and the DequantizeLinears before it are parts of aot's integer kernel
    conv = next(r for r in result.rows if r.node == "conv2")
    assert not conv.compared and conv.kernel == "conv2"
    dequantized = [r for r in result.rows if r.op == "DequantizeLinear" and not r.compared]
    assert dequantized and any(r.note.startswith("fused into") for r in dequantized)


@pytest.mark.parametrize("node", ["conv2", "pool"])
def test_int8_perturbed_node_is_the_first_divergence(int8_model, node):
    """conv2 is an integer kernel with the residual Add as its epilogue; pool an int8 MaxPool."""
    with perturbed(node, 5):
        result = bisect(int8_model)
    assert_first_divergence_in(result, node)
    assert result.first.steps >= 2 and result.first.op == "QuantizeLinear"


def test_cli_prints_the_table_and_writes_json(fp32_model, tmp_path, capsys):
    out = tmp_path / "bisect.json"
    assert main(["run", fp32_model, "--bisect", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "max abs err" in text and "compared tensors within tolerance" in text
    data = json.loads(out.read_text())
    assert data["first_divergence"] is None
    assert [r["node"] for r in data["rows"]][:2] == ["conv1", "relu1"]
    assert all(r["ok"] for r in data["rows"] if r["ok"] is not None)

    with perturbed("add", 1.0):
        assert main(["run", fp32_model, "--bisect", "--json", str(out)]) == 1
    captured = capsys.readouterr()
    line = next(line for line in captured.out.splitlines() if "<- first divergence" in line)
    assert line.split()[1] == "add"
    assert "from node 'add' on (its tensor is computed by aot's kernel for 'add')" in captured.err
    data = json.loads(out.read_text())
    assert data["first_divergence"]["node"] == "add" and data["first_divergence"]["kernel"] == "add"


def test_cli_json_needs_bisect(fp32_model, tmp_path, capsys):
    assert main(["run", fp32_model, "--json", str(tmp_path / "x.json")]) == 1
    assert "--bisect" in capsys.readouterr().err


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "aarch64"])
def test_int8_on_an_emulated_target(int8_model, target):
    tgt = get_target(target)
    if shutil.which(tgt.cc) is None or shutil.which(tgt.run_command[0]) is None:
        pytest.skip(f"no toolchain or emulator for {target}")
    result = bisect(int8_model, target=target)
    assert result.ok and result.target == target
    with perturbed("conv2", 5):
        result = bisect(int8_model, target=target)
    assert_first_divergence_in(result, "conv2")
