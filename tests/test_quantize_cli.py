"""`aot quantize`: a float model to int8 QDQ through onnxruntime's quantizer on the user's calibration data,
with a report of the error at the outputs; bad options are one line and leave nothing behind."""

import json
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import make_model

import aot
from aot.errors import OptionError
from aot.quantize import quantize


def small_cnn():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc", transB=1)]
    return make_model(nodes, {"x": (1, 3, 8, 8)}, {"y": None},
                      {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
                       "b": rng.standard_normal(8).astype(np.float32),
                       "wg": (rng.standard_normal((4, 8)) * 0.5).astype(np.float32),
                       "bg": rng.standard_normal(4).astype(np.float32)})


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(small_cnn(), path)
    return path


def aot_cli(*args):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True)


def test_npz_calibration_gives_a_qdq_model_aot_compiles_and_a_report(model_file, tmp_path):
    """Samples on the first axis of an .npz; the result is int8 QDQ that aot compiles to integer kernels and
    runs within one step of onnxruntime; the report's figures are those of the two models on the samples."""
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "calib.npz", x=rng.random((12, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "q" / "net_int8.onnx"
    proc = aot_cli("quantize", model_file, "--calibration", tmp_path / "calib.npz", "-o", out)
    assert proc.returncode == 0, proc.stderr
    quantized = onnx.load(out)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    weights = [t for t in quantized.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 4]
    assert weights, "the convolution's weights are not int8"
    report = json.loads((tmp_path / "q" / "net_int8.quantize_report.json").read_text())
    assert report["samples"] == 12 and not report["random_calibration"]
    (y,) = report["outputs"]
    assert y["output"] == "y" and y["sqnr_db"] > 20 and y["cosine"] > 0.99, y
    tensors = report["tensors"]     # inside the model, worst first, each named with the node computing it
    assert [t["sqnr_db"] for t in tensors] == sorted(t["sqnr_db"] for t in tensors)
    named = {(t["tensor"], t["node"], t["op"]) for t in tensors}
    assert named >= {("r", "relu", "Relu"), ("p", "pool", "GlobalAveragePool")}, named
    assert all(t["sqnr_db"] > 15 for t in tensors), tensors
    text = (tmp_path / "q" / "net_int8.quantize_report.txt").read_text()
    assert "SQNR dB" in text
    assert any(line.split()[:2] == [tensors[0]["tensor"], tensors[0]["node"]] for line in text.splitlines())
    header = next(line for line in text.splitlines() if line.split()[:3] == ["tensor", "node", "op"])
    rows = text.splitlines()[text.splitlines().index(header) + 1:][:len(tensors[:5])]
    assert all(line.rindex(" ") < len(header) and len(line) == len(header) for line in rows), "columns misaligned"
    weights = {w["weight"]: w for w in report["weights"]}      # the classifier's int8 codes against its floats
    codes = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in quantized.graph.initializer}
    wg = onnx.numpy_helper.to_array(next(t for t in small_cnn().graph.initializer if t.name == "wg"))
    real = codes["wg_quantized"] * codes["wg_scale"][:, None]
    expected = 10 * np.log10(np.sum(wg.astype(np.float64) ** 2) / np.sum((wg - real) ** 2))
    assert weights["wg"]["node"] == "fc" and weights["wg"]["sqnr_db"] == pytest.approx(expected), weights
    built = aot.build(out, out_dir=tmp_path / "b")
    assert any(" i8 " in s["workload"] for s in built.metadata["schedules"]), "no integer kernel"
    result = aot.check(out)
    for c in result.comparisons:
        assert c.max_abs <= c.step * 1.001, c


def test_a_directory_of_samples_and_excluded_ops(model_file, tmp_path):
    """One .npy per sample; --exclude Gemm keeps the classifier in float (no int8 weights for it)."""
    rng = np.random.default_rng(5)
    (tmp_path / "calib").mkdir()
    for i in range(5):
        np.save(tmp_path / "calib" / f"s{i}.npy", rng.random((1, 3, 8, 8)).astype(np.float32))
    report = quantize(model_file, tmp_path / "out.onnx", tmp_path / "calib", exclude=("Gemm",), method="entropy")
    assert report.samples == 5 and report.excluded == ("Gemm",) and report.method == "entropy"
    quantized = onnx.load(tmp_path / "out.onnx")
    fc = next(n for n in quantized.graph.node if n.op_type == "Gemm")
    assert fc.input[1] == "wg", "the excluded Gemm's weights went through a DequantizeLinear"


def test_a16w8_keeps_int16_activations_that_aot_runs_on_integers_with_less_error(model_file, tmp_path):
    """--scheme a16w8: symmetric int16 activations (zero point 0) and int8 weights; the output error is lower
    than int8's on the same data, and aot compiles the result to integer kernels on int16 tensors."""
    rng = np.random.default_rng(6)
    np.savez(tmp_path / "calib.npz", x=rng.random((12, 3, 8, 8)).astype(np.float32))
    reports = {scheme: quantize(model_file, tmp_path / f"{scheme}.onnx", tmp_path / "calib.npz", scheme=scheme)
               for scheme in ("int8", "a16w8")}
    wide = onnx.load(tmp_path / "a16w8.onnx")
    zero_points = [t for t in wide.graph.initializer if t.name.endswith("zero_point") and not t.dims]
    assert zero_points and all(t.data_type == onnx.TensorProto.INT16 for t in zero_points)
    assert all(not onnx.numpy_helper.to_array(t) for t in zero_points)
    assert reports["a16w8"].outputs[0].sqnr_db > reports["int8"].outputs[0].sqnr_db + 5, reports
    assert "a16w8 QDQ, int16 activations" in (tmp_path / "a16w8.quantize_report.txt").read_text()
    program = aot.build(tmp_path / "a16w8.onnx", out_dir=None).program
    wide_ops = {call.node.op for call in program.calls if program.graph.values[call.node.inputs[0]].dtype == "int16"}
    assert {"Conv", "Gemm"} <= wide_ops, wide_ops
    assert aot.check(tmp_path / "a16w8.onnx").ok


def test_random_calibration_only_when_asked_and_then_said(model_file, tmp_path):
    with pytest.raises(OptionError, match="--calibration DATA"):
        quantize(model_file, tmp_path / "a" / "out.onnx")
    assert not (tmp_path / "a").exists()
    report = quantize(model_file, tmp_path / "out.onnx", allow_random=True)
    assert report.random_calibration
    assert "WARNING: calibrated on random data" in (tmp_path / "out.quantize_report.txt").read_text()


@pytest.mark.parametrize("make,message", [
    (lambda d: np.savez(d / "c.npz", image=np.zeros((2, 3, 8, 8), np.float32)), "no array for input\\(s\\) x"),
    (lambda d: np.savez(d / "c.npz", x=np.zeros((2, 3, 4, 4), np.float32)), "input 'x' takes 1 sample\\(s\\) of 3x8x8"),
    (lambda d: (d / "c.npz").write_text("not numpy"), "cannot read it"),
])
def test_bad_calibration_data_is_one_line_naming_it(model_file, tmp_path, make, message):
    make(tmp_path)
    proc = aot_cli("quantize", model_file, "--calibration", tmp_path / "c.npz", "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_symbolic_input_dimension_is_refused_naming_the_input_until_input_shape_fixes_it(tmp_path):
    model = small_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, tmp_path / "dyn.onnx")
    proc = aot_cli("quantize", tmp_path / "dyn.onnx", "--allow-random", "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "input 'x' has a symbolic dimension (Nx3x8x8)" in proc.stderr, proc.stderr
    assert "--input-shape x=DIMS" in proc.stderr and not (tmp_path / "o").exists()
    proc = aot_cli("quantize", tmp_path / "dyn.onnx", "--allow-random", "-o", tmp_path / "o" / "q.onnx",
                   "--input-shape", "image=1x3x8x8")
    assert proc.returncode == 1 and "--input-shape image: dyn.onnx has no input of that name" in proc.stderr
    report = quantize(tmp_path / "dyn.onnx", tmp_path / "q.onnx", allow_random=True, input_shapes={"x": (1, 3, 8, 8)})
    assert report.input_shapes == {"x": (1, 3, 8, 8)}
    dims = onnx.load(tmp_path / "q.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 3, 8, 8]
    assert aot.check(tmp_path / "q.onnx").ok


def test_onnx_test_sets_as_calibration(model_file, tmp_path):
    """test_data_set_*/input_0.pb, as the ONNX model zoo ships a model's inputs."""
    rng = np.random.default_rng(7)
    for i in range(3):
        (tmp_path / "data" / f"test_data_set_{i}").mkdir(parents=True)
        tensor = onnx.numpy_helper.from_array(rng.random((1, 3, 8, 8)).astype(np.float32), "x")
        onnx.save_tensor(tensor, tmp_path / "data" / f"test_data_set_{i}" / "input_0.pb")
    report = quantize(model_file, tmp_path / "q.onnx", tmp_path / "data")
    assert report.samples == 3 and report.compared == 3


def test_held_out_samples_with_labels_give_top1_agreement_and_accuracy(tmp_path):
    """--eval DATA: the report's figures are over those samples; class scores get the share of samples whose
    top class agrees, and --labels the accuracy of both models, each computed here from onnxruntime's outputs."""
    import onnxruntime as ort

    onnx.save(small_cnn(), tmp_path / "net.onnx")
    rng = np.random.default_rng(8)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    held_out = rng.random((20, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "eval.npz", x=held_out)
    labels = rng.integers(0, 4, 20)
    np.save(tmp_path / "labels.npy", labels)
    report = quantize(tmp_path / "net.onnx", tmp_path / "q.onnx", tmp_path / "calib.npz",
                      evaluation=tmp_path / "eval.npz", labels=tmp_path / "labels.npy")
    (y,) = report.outputs
    assert report.held_out and report.compared == 20

    def top1(path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return np.array([session.run(None, {"x": x[None]})[0].argmax() for x in held_out])

    f, q = top1(tmp_path / "net.onnx"), top1(tmp_path / "q.onnx")
    assert y.top1_agreement == pytest.approx(np.mean(f == q))
    assert y.float_accuracy == pytest.approx(np.mean(f == labels))
    assert y.quantized_accuracy == pytest.approx(np.mean(q == labels))
    assert "accuracy against the labels: float" in (tmp_path / "q.quantize_report.txt").read_text()
    with pytest.raises(OptionError, match="--labels .* the --eval data has 20 sample"):
        np.save(tmp_path / "short.npy", labels[:5])
        quantize(tmp_path / "net.onnx", tmp_path / "q2.onnx", tmp_path / "calib.npz",
                 evaluation=tmp_path / "eval.npz", labels=tmp_path / "short.npy")
    with pytest.raises(OptionError, match="give --eval DATA too"):
        quantize(tmp_path / "net.onnx", tmp_path / "q2.onnx", tmp_path / "calib.npz", labels=tmp_path / "labels.npy")


def test_int16_promotes_chosen_nodes_in_an_int8_model_that_aot_compiles(model_file, tmp_path):
    """--int16 conv: the convolution's activations in int16 (symmetric), the rest int8, with the conversions
    onnxruntime inserts; its Relu stays (a signed range would not clamp it); aot runs it within a step."""
    rng = np.random.default_rng(9)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    report = quantize(model_file, tmp_path / "q.onnx", tmp_path / "calib.npz", int16=("conv",), target="cortex-m4")
    assert report.int16 == ("conv",)
    model = onnx.load(tmp_path / "q.onnx")
    types = {n.output[0]: onnx.helper.tensor_dtype_to_np_dtype(
        next(t for t in model.graph.initializer if t.name == n.input[2]).data_type)
        for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    assert np.int16 in types.values() and np.int8 in types.values(), types
    assert any(n.op_type == "Relu" for n in model.graph.node)
    assert report.footprint.target == "cortex-m4" and report.footprint.flash > 0 and report.footprint.ram > 0
    result = aot.check(tmp_path / "q.onnx")
    assert result.ok and all(c.max_abs <= c.step * 1.001 for c in result.comparisons), result.comparisons
    program = aot.build(tmp_path / "q.onnx", out_dir=None).program     # int16 <-> int8 without float between
    ops = [call.node.op for call in program.calls]
    assert "Requantize" in ops and ops.count("Dequantize") == 1, ops
    with pytest.raises(OptionError, match="with --scheme a16w8 every activation is int16 already"):
        quantize(model_file, tmp_path / "q2.onnx", tmp_path / "calib.npz", int16=("conv",), scheme="a16w8")
    with pytest.raises(OptionError, match="--int16 nope: no node or op of that name"):
        quantize(model_file, tmp_path / "q2.onnx", tmp_path / "calib.npz", int16=("nope",))


@pytest.mark.parametrize("scheme,scale,zero_point", [("int8", 1 / 256, -128), ("a16w8", 1 / 32768, 0)])
def test_softmax_output_has_the_encoding_tflite_micro_expects(scheme, scale, zero_point, tmp_path):
    model = small_cnn()
    model.graph.node.append(helper.make_node("Softmax", ["y"], ["prob"], name="softmax", axis=-1))
    model.graph.output[0].name = "prob"
    onnx.save(model, tmp_path / "net.onnx")
    quantize(tmp_path / "net.onnx", tmp_path / "q.onnx", allow_random=True, scheme=scheme)
    model = onnx.load(tmp_path / "q.onnx")
    (q,) = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "prob_QuantizeLinear_Input"]
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert values[q.input[1]] == np.float32(scale) and values[q.input[2]] == zero_point


def test_a_model_onnxruntime_cannot_load_is_one_line(tmp_path):
    """onnxruntime calibrates on the float model: one it cannot load is refused before any work, not with
    onnxruntime's traceback."""
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="weird")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bad.onnx")
    proc = aot_cli("quantize", tmp_path / "bad.onnx", "--allow-random", "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("aot: error: ") and "onnxruntime cannot load it" in proc.stderr
    assert "NoSuchOp" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_build_quantize_goes_from_the_float_model_to_an_integer_build(model_file, tmp_path):
    """aot build --quantize DATA: quantized, then built under the float model's name; the quantized model and
    its report land in the build directory; the report says each layer's integer type."""
    rng = np.random.default_rng(10)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "b"
    proc = aot_cli("build", model_file, "--quantize", tmp_path / "calib.npz", "--scheme", "a16w8",
                   "--target", "cortex-m4", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "quantized net.onnx (a16w8): output y SQNR" in proc.stdout
    made = {p.name for p in out.iterdir()}
    assert {"net.o", "net.h", "net.quantized.onnx", "net.quantized.quantize_report.txt"} <= made, made
    report = (out / "report.txt").read_text()
    assert "Conv int16" in report and "Gemm int16" in report, report
    assert aot.check(out / "net.quantized.onnx", target="host").ok
    proc = aot_cli("build", model_file, "--scheme", "a16w8", "-o", tmp_path / "c")
    assert proc.returncode == 1 and "give --quantize DATA too" in proc.stderr and not (tmp_path / "c").exists()


def test_auto_precision_promotes_layers_to_int16_until_the_outputs_reach_the_target(model_file, tmp_path):
    """--auto-precision DB: int8, then the layers that lose the most in int16, until the output's SQNR reaches
    DB; a target out of reach stops after a bounded number of rounds and the report says it was not reached."""
    from aot.quantize import AUTO_ROUNDS, quantize_to

    rng = np.random.default_rng(11)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    int8 = quantize(model_file, tmp_path / "int8.onnx", tmp_path / "calib.npz").outputs[0].sqnr_db
    report = quantize_to(model_file, tmp_path / "auto.onnx", int8 + 3, calibration=tmp_path / "calib.npz")
    assert report.auto_precision["reached"] and report.int16 and report.outputs[0].sqnr_db >= int8 + 3
    assert "reached after" in (tmp_path / "auto.quantize_report.txt").read_text()
    assert aot.check(tmp_path / "auto.onnx").ok
    far = quantize_to(model_file, tmp_path / "far.onnx", 300.0, calibration=tmp_path / "calib.npz")
    assert not far.auto_precision["reached"] and far.auto_precision["rounds"] <= AUTO_ROUNDS
    assert "NOT reached" in (tmp_path / "far.quantize_report.txt").read_text()
    proc = aot_cli("quantize", model_file, "--allow-random", "--auto-precision", "40", "--scheme", "a16w8",
                   "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "drop --scheme a16w8" in proc.stderr and not (tmp_path / "o").exists()


def test_a_folder_of_images_with_the_preprocessing_spelled_out(model_file, tmp_path):
    """Images resize to the input, scale to [0, 1], less the mean and over the std per channel, NCHW; each is
    checked against the same arithmetic on its pixels here. Without --preprocess: one line asking for it."""
    from PIL import Image

    from aot.calibration import load_calibration

    rng = np.random.default_rng(12)
    (tmp_path / "images").mkdir()
    pixels = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(4)]
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(tmp_path / "images" / f"img{i}.png")
    spec = "mean=0.4,0.5,0.6,std=0.2,0.25,0.3,layout=nchw,size=8x8"
    samples = load_calibration(tmp_path / "images", {"x": (1, 3, 8, 8)}, "--calibration", spec)
    for sample, p in zip(samples, pixels):
        expected = ((p / 255 - np.array([0.4, 0.5, 0.6])) / np.array([0.2, 0.25, 0.3])).transpose(2, 0, 1)[None]
        np.testing.assert_allclose(sample["x"], expected, rtol=1e-5, atol=1e-5)
    report = quantize(model_file, tmp_path / "q.onnx", tmp_path / "images", preprocess=spec)
    assert report.samples == 4
    proc = aot_cli("quantize", model_file, "--calibration", tmp_path / "images", "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "images need --preprocess" in proc.stderr and not (tmp_path / "o").exists()
    proc = aot_cli("quantize", model_file, "--calibration", tmp_path / "images", "--preprocess", "size=4x4",
                   "-o", tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "size 4x4, the model's input is 8x8" in proc.stderr, proc.stderr


def test_freeze_binds_an_input_before_quantizing(tmp_path):
    """--freeze gain=VALUE: a model with a second input (a gain multiplied in) quantized with that input a
    constant; the quantized model has one input and its output is that of the float model at that gain."""
    import onnxruntime as ort

    model = small_cnn()
    model.graph.node[0].input[0] = "scaled"
    model.graph.node.insert(0, helper.make_node("Mul", ["x", "gain"], ["scaled"], name="gain_mul"))
    model.graph.input.append(helper.make_tensor_value_info("gain", onnx.TensorProto.FLOAT, [1]))
    onnx.save(model, tmp_path / "net.onnx")
    rng = np.random.default_rng(13)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    report = quantize(tmp_path / "net.onnx", tmp_path / "q.onnx", tmp_path / "calib.npz", freeze={"gain": "0.5"})
    assert report.outputs[0].sqnr_db > 20
    quantized = onnx.load(tmp_path / "q.onnx")
    assert [i.name for i in quantized.graph.input] == ["x"]
    x = rng.random((1, 3, 8, 8)).astype(np.float32)
    run = lambda m, feeds: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    want, got = run(model, {"x": x, "gain": np.array([0.5], np.float32)}), run(quantized, {"x": x})
    assert np.abs(want - got).max() < 0.1 * np.abs(want).max()
    proc = aot_cli("quantize", tmp_path / "net.onnx", "--allow-random", "--freeze", "volume=1", "-o",
                   tmp_path / "o" / "q.onnx")
    assert proc.returncode == 1 and "--freeze names 'volume'" in proc.stderr and not (tmp_path / "o").exists()


def test_a_model_with_its_weights_in_a_file_beside_it(tmp_path):
    """The dynamo exporter's layout (FILE.onnx + FILE.onnx.data): onnxruntime's pre-processing, which copies
    the model elsewhere, gets it whole, and the result compiles."""
    path = tmp_path / "net.onnx"
    onnx.save(small_cnn(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="net.onnx.data", size_threshold=0)
    assert (tmp_path / "net.onnx.data").exists()
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "calib.npz", x=rng.random((8, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "q" / "net_int8.onnx"
    proc = aot_cli("quantize", path, "--calibration", tmp_path / "calib.npz", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert aot.check(str(out)).ok


def test_files_aot_quantize_did_not_write_are_never_replaced(model_file, tmp_path):
    """A file of the user's at -o, or where a report goes, or the model itself as -o: refused in one line
    before any work, the file untouched; an earlier run's outputs are replaced."""
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "calib.npz", x=rng.random((4, 3, 8, 8)).astype(np.float32))
    calibration = ("--calibration", tmp_path / "calib.npz")
    mine = tmp_path / "mine.onnx"
    mine.write_text("my notes")
    report = tmp_path / "other.quantize_report.txt"
    report.write_text("my report")
    for out, kept in ((mine, mine), (tmp_path / "other.onnx", report), (model_file, model_file)):
        before = kept.read_bytes()
        proc = aot_cli("quantize", model_file, *calibration, "-o", out)
        assert proc.returncode != 0 and "was not written by aot quantize" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and kept.read_bytes() == before
    out = tmp_path / "q.onnx"
    for _ in range(2):
        proc = aot_cli("quantize", model_file, *calibration, "-o", out)
        assert proc.returncode == 0, proc.stderr
    assert aot.check(str(out)).ok
