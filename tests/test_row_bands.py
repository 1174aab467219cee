"""A RAM budget that runs the leading layers in row bands: the banded build gives the bits of the
plain one (and matches onnxruntime), fits the budget it was asked for, says what it cost, and a
budget nothing fits is a one-line error naming the step and tensors over it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
import zoo
from quantize import quantize_model

import aot
from aot.frontend.onnx import load, to_graph
from aot.graph.passes import optimize
from aot.graph.passes.row_bands import Stage, split_into_bands, stage_problem


def small_mobilenet_v2(int8: bool) -> onnx.ModelProto:
    model = zoo.mobilenet_v2(width=0.35, resolution=48, classes=10)
    return quantize_model(model, "QDQ") if int8 else model


def ram_of(artifact) -> int:
    return artifact.metadata["memory"]["ram"]


def tight_budget(artifact) -> int:
    """The caller's buffers and 60% of the plain build's workspace."""
    return ram_of(artifact) - artifact.program.plan.size + int(artifact.program.plan.size * 0.6)


@pytest.fixture(scope="module", params=["fp32", "int8"])
def budgeted(request, tmp_path_factory):
    """(model, plain build, banded build, budget)."""
    model = small_mobilenet_v2(request.param == "int8")
    tmp = tmp_path_factory.mktemp(request.param)
    plain = aot.build(model, target="host", out_dir=tmp / "plain")
    budget = tight_budget(plain)
    banded = aot.build(model, target="host", out_dir=tmp / "banded", memory={"ram": budget})
    return model, plain, banded, budget


def test_a_budget_runs_the_leading_layers_in_bands_and_fits(budgeted):
    _, plain, banded, budget = budgeted
    assert plain.program.bands is None
    choice = banded.program.bands
    assert choice is not None and choice.stage.bands >= 2
    assert ram_of(banded) <= budget < ram_of(plain)
    assert choice.macs > choice.plain_macs          # the halo rows are computed twice
    assert "ConcatInPlace" in [n.op for n in banded.program.graph.nodes]
    assert "row bands" in banded.report and f"ram={budget:,}" in banded.report
    assert banded.plan["row_bands"]["bands"] == choice.stage.bands and plain.plan["row_bands"] is None


def test_banded_outputs_are_the_plain_builds_bits(budgeted):
    """And, in float, onnxruntime's. (The int8 MobileNetV2 differs from onnxruntime by a few steps
    with or without bands; the plain build is checked against it where it matches.)"""
    model, plain, banded, _ = budgeted
    result = aot.check(banded, inputs=None)
    if plain.program.graph.values[plain.program.graph.outputs[0]].dtype == "float32" and not any(
            n.op == "Quantize" for n in plain.program.graph.nodes):
        assert result.ok, result.comparisons
    plain_outputs = aot.run(plain, result.inputs)
    for name, value in result.outputs.items():
        np.testing.assert_array_equal(value, plain_outputs[name])


@pytest.mark.qemu
def test_banded_int8_runs_on_a_cortex_m_with_the_plain_builds_bits(tmp_path):
    model = small_mobilenet_v2(int8=True)
    plain = aot.build(model, target="cortex-m55", out_dir=tmp_path / "plain")
    banded = aot.build(model, target="cortex-m55", out_dir=tmp_path / "banded", memory={"ram": tight_budget(plain)})
    assert banded.program.bands is not None
    inputs = {"input": np.random.default_rng(1).standard_normal((1, 3, 48, 48)).astype(np.float32)}
    np.testing.assert_array_equal(aot.run(banded, inputs)["output"], aot.run(plain, inputs)["output"])


def test_banded_builds_are_byte_identical(tmp_path):
    model = small_mobilenet_v2(int8=True)
    budget = tight_budget(aot.build(model, target="cortex-m4", out_dir=tmp_path / "p"))
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        aot.build(model, target="cortex-m4", out_dir=d, memory={"ram": budget})
    for f in sorted(p.name for p in dirs[0].iterdir()):
        assert (dirs[0] / f).read_bytes() == (dirs[1] / f).read_bytes(), f


def test_a_budget_nothing_fits_names_the_step_and_tensors(tmp_path):
    model = small_mobilenet_v2(int8=True)
    with pytest.raises(aot.PlanError, match=r"over ram=1,000.*no row-band schedule.*step \d+ \(node \w+\)"):
        aot.build(model, target="host", out_dir=tmp_path / "b", memory={"ram": 1000})
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    proc = subprocess.run([sys.executable, "-m", "aot", "build", str(path), "--memory", "ram=1000", "-o",
                           str(tmp_path / "c")], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no row-band schedule" in proc.stderr
    assert not (tmp_path / "c").exists()


def _graph(model: onnx.ModelProto):
    return optimize(to_graph(load(model)))


def test_stages_refuse_what_does_not_compute_rows_from_rows():
    graph = _graph(small_mobilenet_v2(int8=False))
    names = [n.op for n in graph.nodes]
    first, gemm = names.index("Conv"), names.index("Gemm")
    assert "does not compute rows from rows" in stage_problem(graph, Stage(first, gemm, 2))
    # a stage ending inside an inverted residual block leaves a tensor read after it (the skip)
    problems = [stage_problem(graph, Stage(first, end, 2)) for end in range(first, gemm)]
    assert any(p and "is read after the stage" in p for p in problems)
    with pytest.raises(aot.PlanError, match="cannot run nodes"):
        split_into_bands(graph, Stage(first, gemm, 2))


def test_each_band_computes_its_rows_with_the_padding_it_reaches():
    graph = _graph(small_mobilenet_v2(int8=False))
    first = next(i for i, n in enumerate(graph.nodes) if n.op == "Conv")
    banded = split_into_bands(graph, Stage(first, first, 3))
    convs = [n for n in banded.nodes if n.op == "Conv" and n.name.startswith(graph.nodes[first].name + "_band")]
    assert len(convs) == 3
    pads = [n.attrs["pads"] for n in convs]
    original = graph.nodes[first].attrs["pads"]
    assert pads[0][0] == original[0] and pads[1][0] == 0 and pads[2][0] == 0    # only the first band is padded above
    rows = [banded.shape(n.outputs[0])[1] for n in convs]
    assert sum(rows) == graph.shape(graph.nodes[first].outputs[0])[1]
