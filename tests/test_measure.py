"""Measuring a build: per-node profiling hooks (absent from a default build) and exact instruction
counts under emulation, each taken on a run whose outputs are checked against onnxruntime."""

import subprocess

import numpy as np
import pytest
from onnx import helper
from oracle import make_model, make_typed_model, onnxruntime_outputs, random_inputs

import aot
from aot.bench import bench
from aot.codegen.elf import functions, undefined_symbols
from aot.reference import compare
from aot.run.count import count_instructions, kernel_range


def small_net():
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", group=16, pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc")]
    inits = {"w1": rng.standard_normal((16, 3, 3, 3)).astype(np.float32),
             "b1": rng.standard_normal(16).astype(np.float32),
             "w2": rng.standard_normal((16, 1, 3, 3)).astype(np.float32),
             "fc": rng.standard_normal((16, 10)).astype(np.float32)}
    return make_model(nodes, {"x": (1, 3, 12, 12)}, {"y": (1, 10)}, inits)


def test_profile_times_every_kernel_call():
    result = bench(small_net(), target="host", repeat=3, min_repeat_ms=5, profile=True)
    assert result.ok
    ops = [s.op for s in result.profile]
    assert "Conv+bias+relu" in ops and "Gemm" in ops, ops
    assert [s.step for s in result.profile] == list(range(len(result.profile)))
    assert all(s.ms > 0 for s in result.profile)
    assert sum(s.ms for s in result.profile) <= max(result.times_ms) * 1.5
    assert sum(s.macs for s in result.profile) == result.macs > 0


def test_default_build_has_no_profiling_hooks(tmp_path):
    artifact = aot.build(small_net(), target="host", out_dir=tmp_path / "b", name="net")
    header, source = artifact.header.read_text(), artifact.source.read_text()
    assert "#define NET_STEPS " in header
    steps = int(header.split("#define NET_STEPS ")[1].split()[0])
    assert steps == len(artifact.program.calls) == source.count("PROFILE_BEGIN(") - 2   # minus the #defines

    def compiled(*flags):
        obj = tmp_path / "net_c.o"
        subprocess.run(["gcc", "-c", "-std=c99", "-Wall", "-Wextra", "-Werror", *flags, f"-I{artifact.dir}",
                        str(artifact.source), "-o", str(obj)], check=True)
        return undefined_symbols(obj.read_bytes())

    assert "net_profile" not in compiled()
    assert "net_profile" in compiled("-DNET_PROFILE")


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m55"])
def test_simd_builds_execute_fewer_instructions(target, tmp_path):
    model = small_net()
    feeds = random_inputs(model, 0)
    expected = onnxruntime_outputs(model, feeds)
    counts = {}
    for simd in (True, False):
        artifact = aot.build(model, target=target, out_dir=tmp_path / str(simd), knobs={"simd": simd})
        outputs, counts[simd] = count_instructions(artifact, feeds)
        assert all(c.ok for c in compare(outputs, expected, {})), simd
    assert 0 < counts[True] * 2 < counts[False], counts


@pytest.mark.qemu
def test_counts_are_exact_and_cover_only_the_kernels(tmp_path):
    model = small_net()
    feeds = random_inputs(model, 0)
    artifact = aot.build(model, target="cortex-m4", out_dir=tmp_path / "b")
    first = count_instructions(artifact, feeds)[1]
    assert count_instructions(artifact, feeds)[1] == first
    # A bigger input runs the same kernels over more pixels: more instructions, about in proportion.
    model_big = small_net()
    model_big.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 24
    model_big.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 24
    big = aot.build(model_big, target="cortex-m4", out_dir=tmp_path / "big")
    more = count_instructions(big, random_inputs(model_big, 0))[1]
    assert 3 * first < more < 5 * first


@pytest.mark.qemu
def test_kernel_range_of_a_linked_program(tmp_path):
    from aot.run import local

    artifact = aot.build(small_net(), target="aarch64", out_dir=tmp_path / "b", name="net")
    exe = local.compile_harness(artifact, tmp_path, static=True)
    lo, hi = kernel_range(exe, "net")
    funcs = functions(exe.read_bytes())
    assert funcs["net_run"][0] not in range(lo, hi)
    assert all(lo <= addr < hi for name, (addr, _) in funcs.items() if name.startswith("net_k"))


def test_counting_needs_an_emulated_target(tmp_path):
    artifact = aot.build(small_net(), target="host", out_dir=tmp_path / "b")
    with pytest.raises(aot.RunError, match="runs natively"):
        count_instructions(artifact, random_inputs(small_net(), 0))


def test_cli_bench_profile(tmp_path):
    import json
    import sys

    import onnx

    model, report = tmp_path / "net.onnx", tmp_path / "bench.json"
    onnx.save(small_net(), model)
    proc = subprocess.run([sys.executable, "-m", "aot", "bench", str(model), "--target", "host", "--repeat", "2",
                           "--profile", "--json", str(report)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "per kernel call" in proc.stdout and "conv1" in proc.stdout and "fc" in proc.stdout
    steps = json.loads(report.read_text())["results"][0]["profile"]
    assert [s["node"] for s in steps if s["op"].startswith("Conv")] == ["conv1", "conv2"]
    assert all(s["ms"] > 0 for s in steps)


def test_bench_times_and_checks_the_inputs_given(tmp_path):
    """Indices into a 2-row table: random inputs (integers in [0, 4)) are out of range for onnxruntime, the
    given ones are in range and checked; a missing input is one line and a non-zero exit."""
    import json
    import sys

    import onnx

    from aot.errors import OptionError

    nodes = [helper.make_node("Gather", ["table", "idx"], ["y"], name="gather")]
    model = make_typed_model(nodes, [("idx", onnx.TensorProto.INT64, [4])], [("y", onnx.TensorProto.FLOAT, [4, 3])],
                             inits=[("table", np.arange(6, dtype=np.float32).reshape(2, 3))])
    with pytest.raises(aot.RunError, match="indices"):
        bench(model, target="host", repeat=2)
    result = bench(model, target="host", repeat=2, inputs={"idx": np.array([0, 1, 1, 0], np.int64)})
    assert result.ok and result.comparisons
    with pytest.raises(OptionError, match="no value given for input 'idx'"):
        bench(model, target="host", repeat=2, inputs={"x": np.zeros(4, np.int64)})
    path, feeds, report = tmp_path / "gather.onnx", tmp_path / "idx.npz", tmp_path / "bench.json"
    onnx.save(model, path)
    np.savez(feeds, idx=np.array([1, 1, 0, 0], np.int64))
    proc = subprocess.run([sys.executable, "-m", "aot", "bench", str(path), "--repeat", "2", "--inputs", str(feeds),
                           "--json", str(report)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (check,) = json.loads(report.read_text())["results"][0]["check"]
    assert check["ok"] and check["output"] == "y"
    np.savez(feeds, other=np.zeros(4, np.int64))
    proc = subprocess.run([sys.executable, "-m", "aot", "bench", str(path), "--repeat", "2", "--inputs", str(feeds)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "no value given for input 'idx'" in proc.stderr
    assert "Traceback" not in proc.stderr
