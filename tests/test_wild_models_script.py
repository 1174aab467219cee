"""benchmarks/wild_models.py on small models made here: finding models in wheels, the per-model settings,
the op analysis and the table rows (nothing is downloaded)."""

from __future__ import annotations

import zipfile

import numpy as np
import onnx
import wild_models
from onnx import TensorProto, helper, numpy_helper

from aot.registry import op_def

# a float -> float op of the same shape that aot does not compile: its result is random
UNKNOWN_OP = "Bernoulli"


def _unknown_op() -> str:
    assert op_def(UNKNOWN_OP).canonical is None, f"aot compiles {UNKNOWN_OP} now: pick another unknown op"
    return UNKNOWN_OP


def relu_model(batch: str | int = "batch") -> onnx.ModelProto:
    """y = Relu(x) * 2 with a dynamic batch dimension, plus a shape computation that folds:
    Reshape(x, Concat(Gather(Shape(x), 0), [4]))."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "four"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["a"]),
             helper.make_node("Mul", ["a", "two"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([4], np.int64), "four"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    graph = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def unknown_model(op: str) -> onnx.ModelProto:
    nodes = [helper.make_node(op, ["x"], ["u"]), helper.make_node("Relu", ["u"], ["y"])]
    graph = helper.make_graph(nodes, "unknown", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_analyse_ops_separates_folded_from_run_time():
    every, runtime = wild_models.analyse_ops(relu_model())
    assert every == {"Shape", "Gather", "Concat", "Reshape", "Relu", "Mul"}
    assert runtime == {"Reshape", "Relu", "Mul"}           # the shape arithmetic folds


def test_analyse_ops_frozen_input_decides_an_if():
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                            helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array(16000, np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert wild_models.analyse_ops(model)[1] == {"Equal", "If", "Neg", "Abs"}
    assert wild_models.analyse_ops(model, {"sr"})[1] == {"Neg", "Abs"}


def test_settings_longest_suffix_wins():
    config = {"silero_vad.onnx": {"a": 1}, "models/silero_vad.onnx": {"a": 2}, "other.onnx": {"a": 3}}
    model = wild_models.Model(None, "", "pkg/resources/models/silero_vad.onnx", 0, "")
    assert wild_models.settings_for(config, model) == {"a": 2}
    model = wild_models.Model(None, "", "pkg/data/silero_vad.onnx", 0, "")
    assert wild_models.settings_for(config, model) == {"a": 1}
    model = wild_models.Model(None, "", "pkg/data/my_silero_vad.onnx", 0, "")
    assert wild_models.settings_for(config, model) == {}


def test_table_rows_for_a_wheel_and_loose_files(tmp_path):
    op = _unknown_op()
    wheel = tmp_path / "in" / "tinypkg-1.2.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tinypkg/models/relu.onnx", relu_model().SerializeToString())
        z.writestr("tinypkg/__init__.py", "")
    loose = tmp_path / "in" / "other-0.1" / "data"
    loose.mkdir(parents=True)
    onnx.save(unknown_model(op), loose / "unknown.onnx")
    onnx.save(relu_model(), loose / "copy.onnx")                  # the same bytes as the wheel's model
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    models, notes = wild_models.collect([tmp_path / "in"], scratch)
    assert notes == []
    assert [(m.package, m.member) for m in models] == [("other 0.1", "data/copy.onnx"),
                                                       ("other 0.1", "data/unknown.onnx"),
                                                       ("tinypkg 1.2.0", "tinypkg/models/relu.onnx")]
    config = {"relu.onnx": {"input_shapes": {"x": [3, 4]}}, "copy.onnx": {"input_shapes": {"x": [3, 4]}}}
    results = wild_models.run_all(models, config, jobs=1, timeout=300, progress=False)
    copy, unknown, relu = results
    assert (copy.status, copy.ops, copy.unknown) == ("ok", 6, ["Shape"]), copy.message     # Shape folds
    assert copy.runtime_unknown == []
    assert (relu.status, relu.message) == ("duplicate", "same bytes as other 0.1 data/copy.onnx")
    assert unknown.status == "refused" and op in unknown.message
    assert (unknown.ops, unknown.unknown, unknown.runtime_unknown) == (2, [op], [op])

    rows = wild_models.table_rows(results)
    assert rows[0] == ("package", "model", "MB", "ops", "status", "first error", "unknown ops", "unknown at run time")
    assert rows[1][:5] == ("other 0.1", "data/copy.onnx", "0.0", "6", "ok")
    assert rows[2][4:5] + rows[2][6:] == ("refused", op, op)
    assert rows[3][4] == "duplicate"
    assert wild_models.missing_ranked(results) == [(op, 1, 1), ("Shape", 0, 1)]
    assert wild_models.summary(results) == "1 ok, 1 refused, 1 duplicate of 3 model files"


def test_a_missing_input_shape_is_refused_not_a_crash(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model(), path)
    model = wild_models.Model(path, "", "relu.onnx", path.stat().st_size, "")
    result = wild_models.try_model(model, {})
    assert result.status == "refused" and "batch" in result.message


def test_oversized_models_are_passed_over(tmp_path):
    onnx.save(relu_model(), tmp_path / "big.onnx")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    models, notes = wild_models.collect([tmp_path / "big.onnx"], scratch, max_bytes=10)
    assert models == [] and "over the size limit" in notes[0]
