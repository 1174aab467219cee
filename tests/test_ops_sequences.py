"""Sequences with lengths and positions known at compile time (aot/frontend/sequences.py), against
onnxruntime: the onnx package's stored sequence models, the forms exporters write (a list appended to in
an unrolled Loop, a split whose pieces are joined again, SequenceMap), and the clear refusals."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import make_typed_model as _model

import aot
from aot.errors import ModelError, UnsupportedOpError

RNG = np.random.default_rng(5)
F, I64 = TensorProto.FLOAT, TensorProto.INT64
STORED = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "simple")


def _check(model, feeds: dict, target: str = "host", **options) -> dict:
    result = aot.check(model, inputs=feeds, target=target, **options)
    assert result.reference_used == "onnxruntime"
    assert result.ok, result.comparisons
    return result.outputs


def _f(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _stored(n: int) -> tuple[str, dict]:
    directory = os.path.join(STORED, f"test_sequence_model{n}")
    model = onnx.load(os.path.join(directory, "model.onnx"))
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {}
    for name, index in zip(names, range(len(names))):
        tensor = onnx.TensorProto()
        with open(os.path.join(directory, "test_data_set_0", f"input_{index}.pb"), "rb") as f:
            tensor.ParseFromString(f.read())
        feeds[name] = numpy_helper.to_array(tensor)
    return os.path.join(directory, "model.onnx"), feeds


# 1: SequenceEmpty and three SequenceInserts of tensors of different shapes, one at a position;
# 2, 3: SequenceConstruct, SequenceErase, SequenceInsert, SequenceAt at positive and negative positions;
# 4, 5: ConcatFromSequence, with and without a new axis; 6: SplitToSequence into ones, SequenceLength;
# 8: SplitToSequence at lengths given at run time, only its length read. (7 splits a float64 tensor.)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8])
def test_stored_sequence_models(n):
    path, feeds = _stored(n)
    outputs = _check(path, feeds, input_shapes={"X": feeds["X"].shape} if n == 8 else None)
    assert outputs


def test_a_list_appended_to_in_a_loop_and_concatenated():
    # What a scripted `out = []; for i in range(3): out.append(x * i); torch.cat(out)` exports as.
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["x", "i_f"], ["scaled"]),
         helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", F, None)])
    model = _model([helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
                    helper.make_node("Loop", ["trips", "cond", "empty"], ["list"], body=body),
                    helper.make_node("ConcatFromSequence", ["list"], ["y"], axis=0),
                    helper.make_node("SequenceLength", ["list"], ["n"])],
                   [("x", F, [2, 3])], [("y", F, [6, 3]), ("n", I64, [])],
                   inits=[("trips", np.array(3, np.int64)), ("cond", np.array(True))])
    outputs = _check(model, {"x": _f(2, 3)})
    assert int(outputs["n"]) == 3


@pytest.mark.parametrize("opset", [11, 13])
def test_split_to_sequence_in_chunks_with_a_shorter_last(opset):
    # split 2 over an axis of 5: pieces 2, 2, 1; then stacked back on a new last axis fails (shapes
    # differ), so they are joined on the split axis with a Relu between.
    model = _model([helper.make_node("SplitToSequence", ["x", "two"], ["pieces"], axis=1),
                    helper.make_node("SequenceAt", ["pieces", "last"], ["tail"]),
                    helper.make_node("ConcatFromSequence", ["pieces"], ["whole"], axis=-1)],
                   [("x", F, [3, 5])], [("tail", F, [3, 1]), ("whole", F, [3, 5])], opset=opset,
                   inits=[("two", np.array(2, np.int64)), ("last", np.array(-1, np.int64))])
    _check(model, {"x": _f(3, 5)})


def test_split_to_sequence_without_keepdims_stacked_on_a_new_axis():
    model = _model([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
                    helper.make_node("ConcatFromSequence", ["rows"], ["y"], axis=-1, new_axis=1)],
                   [("x", F, [4, 2, 3])], [("y", F, [2, 3, 4])])
    _check(model, {"x": _f(4, 2, 3)})


def test_sequence_at_a_position_given_at_run_time():
    model = _model([helper.make_node("SequenceConstruct", ["a", "b", "c"], ["seq"]),
                    helper.make_node("SequenceAt", ["seq", "pos"], ["y"])],
                   [("a", F, [2, 3]), ("b", F, [2, 3]), ("c", F, [2, 3]), ("pos", I64, [])], [("y", F, [2, 3])])
    feeds = {"a": _f(2, 3), "b": _f(2, 3), "c": _f(2, 3)}
    for pos, source in ((0, "a"), (2, "c"), (-2, "b")):
        outputs = _check(model, {**feeds, "pos": np.array(pos, np.int64)})
        np.testing.assert_array_equal(outputs["y"], feeds[source])


def test_sequence_map_runs_its_body_per_element():
    body = helper.make_graph([helper.make_node("Add", ["element", "bias"], ["sum"]),
                              helper.make_node("Relu", ["sum"], ["out"])],
                             "body", [helper.make_tensor_value_info("element", F, None),
                                      helper.make_tensor_value_info("bias", F, [3])],
                             [helper.make_tensor_value_info("out", F, None)])
    model = _model([helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),
                    helper.make_node("SequenceMap", ["parts", "bias"], ["mapped"], body=body),
                    helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)],
                   [("x", F, [5, 3]), ("bias", F, [3])], [("y", F, [5, 3])],
                   inits=[("sizes", np.array([1, 3, 1], np.int64))])
    _check(model, {"x": _f(5, 3), "bias": _f(3)})


def test_a_position_computed_at_run_time_is_refused_with_the_input_to_freeze(tmp_path):
    model = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
                    helper.make_node("SequenceInsert", ["seq", "a", "pos"], ["longer"]),
                    helper.make_node("ConcatFromSequence", ["longer"], ["y"], axis=0)],
                   [("a", F, [2]), ("b", F, [2]), ("pos", I64, [])], [("y", F, [6])])
    with pytest.raises(UnsupportedOpError, match=r"'SequenceInsert_1' \(SequenceInsert\).*'pos'.*--freeze pos="):
        aot.build(model, out_dir=tmp_path / "m")
    _check(model, {"a": _f(2), "b": _f(2)}, freeze={"pos": np.array(1, np.int64)})


def test_a_run_time_position_into_tensors_of_different_shapes_is_refused(tmp_path):
    model = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
                    helper.make_node("SequenceAt", ["seq", "pos"], ["y"])],
                   [("a", F, [2]), ("b", F, [3]), ("pos", I64, [])], [("y", F, ["d"])])
    with pytest.raises(UnsupportedOpError, match=r"'SequenceAt_1' \(SequenceAt\).*'pos'"):
        aot.build(model, out_dir=tmp_path / "m")


def test_a_constant_position_out_of_range_names_the_node(tmp_path):
    model = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
                    helper.make_node("SequenceAt", ["seq", "pos"], ["y"], name="pick")],
                   [("a", F, [2]), ("b", F, [2])], [("y", F, [2])], inits=[("pos", np.array(2, np.int64))])
    with pytest.raises(ModelError, match=r"node 'pick' \(SequenceAt\): reads position 2 of a sequence of 2"):
        aot.build(model, out_dir=tmp_path / "m")


def test_a_model_that_returns_a_sequence_is_refused(tmp_path):
    model = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["seq"])], [("a", F, [2]), ("b", F, [2])], [])
    model.graph.output.append(helper.make_tensor_sequence_value_info("seq", F, [2]))
    with pytest.raises(UnsupportedOpError, match=r"graph output 'seq' is a sequence, not a tensor"):
        aot.build(model, out_dir=tmp_path / "m")


@pytest.mark.qemu
def test_sequences_on_a_cortex_m4():
    path, feeds = _stored(3)
    _check(path, feeds, "cortex-m4")
