"""The reference `aot run` and aot.check compare with (--reference onnxruntime|onnx|none), the fallback to
onnx.reference when onnxruntime cannot run a model, and the float64 arbitration of a disagreement:
where onnxruntime is the inaccurate side the run passes and says so; where aot is made wrong on purpose
(aot.ops.PERTURB) it fails, naming aot as the wrong side."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import make_model
from test_bisect import perturbed

import aot
from aot import reference as checks
from aot.arbitrate import lines
from aot.cli import main
from aot.errors import OptionError, RunError


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True, cwd=cwd)




def dilated_same() -> onnx.ModelProto:
    """A Conv with dilations and auto_pad SAME_UPPER, valid ONNX that onnxruntime refuses to run
    ("Dilation not supported for AutoPadType::SAME_UPPER")."""
    w = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", dilations=[2, 2], auto_pad="SAME_UPPER")
    return make_model([node], {"x": (1, 1, 6, 6)}, {"y": (1, 2, 6, 6)}, {"w": w})


def exact_dilated_same(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The Conv above in float64: the dilated 3x3 window spans 5, so 2 pads on every side."""
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    padded = np.pad(x.astype(np.float64)[0, 0], 2)
    y = np.zeros((1, 2, 6, 6))
    for o in range(2):
        for i in range(3):
            for j in range(3):
                y[0, o] += w[o, 0, i, j] * padded[2 * i:2 * i + 6, 2 * j:2 * j + 6]
    return y


def tiny_logits(pool: bool = False) -> onnx.ModelProto:
    """A text detector's head in small: a 1x1 Conv whose logits are -13.6..-17.5, then Sigmoid (y), and
    with `pool` a MaxPool of it (p) and a Mul by 1e3 (z) after it."""
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((2, 3, 1, 1)) * 0.8).astype(np.float32),
             "b": np.array([-16.0, -15.0], np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    outputs = {"y": (1, 2, 8, 8)}
    if pool:
        nodes += [helper.make_node("MaxPool", ["y"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("Mul", ["p", "k"], ["z"], name="scale")]
        inits["k"] = np.array([1e3], np.float32)
        outputs["z"] = (1, 2, 4, 4)
    return make_model(nodes, {"x": (1, 3, 8, 8)}, outputs, inits)


def exact_sigmoid(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w, b = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer[:2])
    logits = np.einsum("oi,nihw->nohw", w[:, :, 0, 0], x.astype(np.float64)) + b[None, :, None, None]
    return 1.0 / (1.0 + np.exp(-logits))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for name, model in (("dilated", dilated_same()), ("logits", tiny_logits()), ("logits_pool", tiny_logits(True))):
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


# --- the fallback to onnx.reference ----------------------------------------------------------------

def test_onnxruntime_refuses_the_dilated_same_conv(files):
    proto = onnx.load(files["dilated"])
    with pytest.raises(RunError, match=r"the reference, onnxruntime, cannot run it: .*Dilation not supported"):
        checks.reference_outputs(proto, checks.random_inputs(proto))


def test_fallback_to_onnx_reference(files):
    result = aot.check(files["dilated"])
    assert result.ok and result.reference_used == "onnx" and "Dilation not supported" in result.fallback_reason
    exact = exact_dilated_same(onnx.load(files["dilated"]), result.inputs["x"])
    np.testing.assert_allclose(result.outputs["y"], exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.reference["y"], exact, rtol=1e-5, atol=1e-5)


def test_cli_fallback_says_so(files):
    proc = cli("run", files["dilated"])
    assert proc.returncode == 0, proc.stderr
    assert "note: onnxruntime cannot run the model ([ONNXRuntimeError]" in proc.stdout
    assert "the reference is onnx.reference instead" in proc.stdout
    assert "vs onnx.reference:" in proc.stdout and "y: max abs error" in proc.stdout and ": ok" in proc.stdout
    assert proc.stderr == ""        # onnxruntime's own warnings are not printed


def test_cli_fallback_under_bisect(files, capsys):
    assert main(["run", str(files["dilated"]), "--bisect"]) == 0
    out = capsys.readouterr().out
    assert "the reference is onnx.reference instead" in out and "vs onnx.reference, node by node" in out


def test_neither_reference_runs_it():
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="example.unknown")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.unknown", 1)])
    with pytest.raises(RunError) as err:
        checks.run_reference(model, {"x": np.zeros(2, np.float32)}, "frob.onnx")
    message = str(err.value)
    assert message.startswith("frob.onnx: neither reference can run it: onnxruntime: [ONNXRuntimeError]")
    assert "; onnx.reference: Node type 'Frobnicate' from domain 'example.unknown' is unknown" in message
    assert "\n" not in message


# --- arbitration in float64 -------------------------------------------------------------------------

def test_onnxruntime_sigmoid_is_the_inaccurate_side(files):
    """The premise of the next tests: onnxruntime's Sigmoid of logits below -12 is off the exact value by
    far more than the tolerance, aot's and onnx.reference's are not."""
    proto = onnx.load(files["logits"])
    feeds = checks.random_inputs(proto)
    exact = exact_sigmoid(proto, feeds["x"])
    tolerance = checks.TOLERANCE * np.max(exact)
    ort = checks.reference_outputs(proto, feeds)["y"]
    assert np.max(np.abs(ort - exact)) > 100 * tolerance
    assert np.max(np.abs(aot.run(proto, feeds)["y"] - exact)) < tolerance / 100
    assert np.max(np.abs(checks.onnx_reference_outputs(proto, feeds)["y"] - exact)) < tolerance / 100


def test_aot_closer_passes(files):
    result = aot.check(files["logits"])
    assert [c.ok for c in result.comparisons] == [False]        # onnxruntime's error is past the tolerance
    assert result.ok and result.arbitration is not None and result.arbitration.ok
    (verdict,) = result.arbitration.verdicts
    assert (verdict.node, verdict.op, verdict.tensor, verdict.fused) == ("sig", "Sigmoid", "y", ("conv",))
    assert verdict.aot_wins and verdict.aot_error < verdict.reference_error / 1000
    exact = exact_sigmoid(onnx.load(files["logits"]), result.inputs["x"])
    assert verdict.reference_error == pytest.approx(np.max(np.abs(result.reference["y"] - exact)), rel=1e-3)


def test_cli_arbitration_message(files):
    proc = cli("run", files["logits"])
    assert proc.returncode == 0, proc.stderr
    assert "y: max abs error" in proc.stdout and "MISMATCH: arbitrated below" in proc.stdout
    line = next(line for line in proc.stdout.splitlines() if "output 'y'" in line)
    assert line.strip().startswith("output 'y': aot differs from onnxruntime by 1.")
    assert "at node 'sig' (Sigmoid) evaluated in float64 aot is" in line and line.endswith("x closer: passes")


def test_onnx_reference_needs_no_arbitration(files):
    result = aot.check(files["logits"], reference="onnx")
    assert result.ok and all(c.ok for c in result.comparisons) and result.arbitration is None
    assert result.reference_used == "onnx" and not result.fallback_reason


def test_aot_made_wrong_fails_naming_aot(files, capsys):
    with perturbed("conv", 1e-6):       # the Conv kernel, whose epilogue is the Sigmoid
        result = aot.check(files["logits"])
        assert main(["run", str(files["logits"])]) == 1
    assert not result.ok
    (verdict,) = result.arbitration.verdicts
    assert verdict.node == "sig" and not verdict.aot_wins
    assert verdict.aot_error == pytest.approx(1e-6, rel=1e-3) and verdict.reference_error < verdict.aot_error
    captured = capsys.readouterr()
    assert "at node 'sig' (Sigmoid) onnxruntime is closer to the float64 value: aot is wrong there" in captured.err
    assert "aot is wrong: fails" in captured.out


def test_later_node_arbitrated_after_the_first(files):
    """Sigmoid arbitrated in aot's favour, onnxruntime is run on from the float64 value: the MaxPool after
    it agrees then, and the Mul too; made wrong on purpose, the MaxPool is where aot is wrong."""
    result = aot.check(files["logits_pool"])
    assert result.ok and [v.node for v in result.arbitration.verdicts] == ["sig"]
    assert {c.output for c in result.mismatches} == {"y", "z"}
    with perturbed("pool", 1e-8):
        result = aot.check(files["logits_pool"])
    assert not result.ok
    assert [(v.node, v.aot_wins) for v in result.arbitration.verdicts] == [("sig", True), ("pool", False)]
    text = lines(result.arbitration)
    assert any(t.startswith("output 'y'") and t.endswith(": passes") for t in text), text
    assert any(t.startswith("output 'z'") and "at node 'pool' (MaxPool)" in t and t.endswith("fails")
               for t in text), text


def reciprocal_of_difference() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """d = x - t (an output too, so aot holds it), y = 1 / d: where d is near 0, y amplifies any difference
    in d (one of 1e-5, within d's tolerance, makes y differ by 10 at d = 1e-3)."""
    nodes = [helper.make_node("Sub", ["x", "t"], ["d"], name="sub"),
             helper.make_node("Reciprocal", ["d"], ["y"], name="recip")]
    model = make_model(nodes, {"x": (8,)}, {"d": (8,), "y": (8,)}, {"t": np.full(8, 0.5, np.float32)})
    x = np.array([0.501, 1.5, -2.5, 3.0, 0.25, -0.75, 2.0, 1.0], np.float32)
    return model, {"x": x}


def test_a_node_amplifying_its_inputs_difference_passes():
    """aot's d made 1e-5 off (within its tolerance): y then differs past the tolerance, but from aot's own
    d its reciprocal is right; the difference is its input's, which the node grows."""
    model, feeds = reciprocal_of_difference()
    with perturbed("sub", 1e-5):
        result = aot.check(model, feeds)
    assert [c.output for c in result.mismatches] == ["y"] and result.ok
    (verdict,) = result.arbitration.verdicts
    assert verdict.node == "recip" and verdict.amplified and not verdict.aot_wins
    assert verdict.own_error <= verdict.tolerance < verdict.aot_error
    text = "\n".join(lines(result.arbitration))
    assert "the node amplifies its inputs' difference" in text and "amplifies: passes" in text


def test_a_wrong_node_that_amplifies_is_still_wrong():
    model, feeds = reciprocal_of_difference()
    with perturbed("recip", 1.0):
        result = aot.check(model, feeds)
    assert not result.ok
    (verdict,) = result.arbitration.verdicts
    assert verdict.node == "recip" and not verdict.amplified and verdict.own_error == pytest.approx(1.0, rel=1e-3)


def test_quantized_node_arbitrated_in_codes(tmp_path):
    """An int8 QDQ model below opset 19 (onnx.reference then needs it converted): aot's integer kernel made
    5 steps wrong is found the wrong side, in steps, with the float nodes of its group evaluated with it."""
    from quantize import quantize_model
    from test_bisect import small_cnn

    path = tmp_path / "int8.onnx"
    onnx.save(quantize_model(small_cnn(), "QDQ", per_channel=True), path)
    assert aot.check(path, reference="onnx").ok
    with perturbed("conv2", 5):
        result = aot.check(path)
    wrong = result.arbitration.wrong
    assert not result.ok and wrong is not None and wrong.op == "QuantizeLinear"
    assert "conv2" in wrong.fused and wrong.tolerance == pytest.approx(1.001)
    assert wrong.aot_error >= 4 and wrong.reference_error <= 1


def test_no_arbitration_when_asked_not_to(files):
    result = aot.check(files["logits"], arbitrate=False)
    assert not result.ok and result.arbitration is None


# --- no reference -----------------------------------------------------------------------------------

def test_reference_none_writes_outputs_and_compares_nothing(files, tmp_path):
    out = tmp_path / "out" / "y.npz"
    with perturbed("conv", 1.0):        # wrong on purpose: nothing says so, as nothing is compared
        assert main(["run", str(files["logits"]), "--reference", "none", "--outputs", str(out)]) == 0
        wrong = aot.run(files["logits"])["y"]
    np.testing.assert_array_equal(np.load(out)["y"], wrong)
    result = aot.check(files["logits"], reference="none")
    assert result.ok and not result.compared and result.comparisons == [] and result.reference == {}


def test_cli_reference_none_default_file(files, tmp_path):
    proc = cli("run", files["logits"], "--reference", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "run, not compared (--reference none); outputs written to logits.outputs.npz" in proc.stdout
    assert "max abs error" not in proc.stdout and "ok" not in proc.stdout.split()
    assert np.load(tmp_path / "logits.outputs.npz")["y"].shape == (1, 2, 8, 8)


def test_bisect_needs_a_reference(files):
    proc = cli("run", files["logits"], "--bisect", "--reference", "none")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "aot: error: --bisect compares with a reference: give --reference onnxruntime or onnx"]


@pytest.mark.parametrize("command", ["run", "bench"])
def test_bad_reference_is_one_line(files, command):
    proc = cli(command, files["dilated"], "--reference", "tvm")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "aot: error: reference 'tvm' is not one of onnxruntime, onnx, litert, tflite-micro, none"]


def test_bad_reference_in_the_api_before_building(tmp_path):
    with pytest.raises(OptionError,
                       match="reference 'ORT' is not one of onnxruntime, onnx, litert, tflite-micro, none"):
        aot.check(tmp_path / "no-such-model.onnx", reference="ORT")


def test_bench_compares_with_the_fallback(files):
    from aot.bench import bench

    result = bench(files["dilated"], repeat=2)
    assert result.ok and result.reference == "onnx" and "Dilation not supported" in result.fallback_reason
    assert [c.output for c in result.comparisons] == ["y"]
    none = bench(files["dilated"], repeat=2, reference="none")
    assert none.reference == "none" and none.comparisons == []


def test_bisect_arbitrates_its_first_divergence(files, capsys, tmp_path):
    table = tmp_path / "bisect.json"
    assert main(["run", str(files["logits"]), "--bisect", "--json", str(table)]) == 0
    data = json.loads(table.read_text())
    assert data["first_divergence"]["node"] == "sig" and data["arbitration"]["ok"] is True
    (verdict,) = data["arbitration"]["verdicts"]
    assert verdict["node"] == "sig" and verdict["aot_wins"] and verdict["aot_error"] < verdict["reference_error"]
    out = capsys.readouterr().out
    assert "DIVERGES  <- first divergence" in out          # the table shows onnxruntime's disagreement
    assert "at node 'sig' (Sigmoid; with conv before it in aot's kernel) evaluated in float64 aot is" in out
    with perturbed("conv", 1e-6):
        assert main(["run", str(files["logits"]), "--bisect"]) == 1
    err = capsys.readouterr().err
    assert "in float64 onnxruntime is closer at node 'sig': aot is wrong there" in err


def test_nothing_arbitrated_is_no_pass():
    """Outputs that differed while no node's result did (onnxruntime computing otherwise once its
    intermediate values are outputs) are not passed by an arbitration that judged nothing."""
    from aot.arbitrate import Arbitration

    differs = checks.Comparison("y", max_abs=1.0, max_rel=1.0, scale=1.0)
    agrees = checks.Comparison("y", max_abs=0.0, max_rel=0.0, scale=1.0)
    assert not differs.ok and agrees.ok
    arbitration = Arbitration("onnxruntime", (), [agrees], [differs], bisect=None)
    assert not arbitration.ok
    assert lines(arbitration)[-1] == "output 'y': aot differs from onnxruntime by 1 beyond tolerance: fails"


def test_a_built_artifact_is_not_arbitrated(files, tmp_path):
    artifact = aot.build(files["logits"], out_dir=tmp_path / "build")
    result = aot.check(artifact)
    assert not result.ok and result.arbitration is None
    assert "given a built artifact" in result.not_arbitrated


@pytest.mark.qemu
def test_arbitration_on_an_emulated_target(files):
    import shutil

    from aot.target import get_target

    target = get_target("cortex-m4")
    if shutil.which(target.cc) is None or shutil.which(target.run_command[0]) is None:
        pytest.skip("no toolchain or emulator for cortex-m4")
    result = aot.check(files["logits_pool"], target="cortex-m4")
    assert result.ok and [v.node for v in result.arbitration.verdicts] == ["sig"]
    with perturbed("pool", 1e-8):
        result = aot.check(files["logits_pool"], target="cortex-m4")
    assert not result.ok and result.arbitration.wrong.node == "pool"
