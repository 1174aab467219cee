"""Import: shapes that ONNX inference alone leaves unknown, dynamic input dimensions, frozen inputs and
control flow with constant decisions, as exporters write them."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import assert_matches_onnxruntime, onnxruntime_outputs

import aot
from aot.errors import ModelError


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_pad_amounts_computed_by_a_constant_chain():
    """PyTorch's legacy exporter computes F.pad's pads with Constant -> Transpose -> Reshape."""
    pads = helper.make_tensor("p", TensorProto.INT64, [2, 4], [0, 0, 1, 1, 0, 0, 1, 2])
    nodes = [helper.make_node("Constant", [], ["p"], value=pads),
             helper.make_node("Transpose", ["p"], ["pt"], perm=[1, 0]),
             helper.make_node("Reshape", ["pt", "m1"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")]
    m1 = helper.make_tensor("m1", TensorProto.INT64, [1], [-1])
    for opset in (13, 17):
        model = _model(nodes, [("x", [1, 2, 3, 3])], [("y", ["n", "c", "h", "w"])], [m1], opset)
        got = assert_matches_onnxruntime(model)
        assert got["y"].shape == (2, 3, 4, 5)   # pads [0,0,0,0, 1,1,1,2] after the transpose


def test_reshape_to_a_shape_read_from_the_input_at_old_opsets():
    """x.view(x.size(0), -1) exported at opset 11/13: Reshape's shape comes from Shape -> Gather -> Concat."""
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    minus1 = helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 9
    for opset in (11, 13):
        # Unsqueeze takes its axes as an attribute before opset 13, as an input from then on.
        unsqueeze = (helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]) if opset < 13
                     else helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]))
        nodes = [helper.make_node("Shape", ["x"], ["s"]),
                 helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                 unsqueeze,
                 helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
                 helper.make_node("Reshape", ["x", "shape"], ["r"]),
                 helper.make_node("Relu", ["r"], ["y"])]
        inits = [zero, minus1] + ([axes] if opset >= 13 else [])
        model = _model(nodes, [("x", [2, 3, 4])], [("y", ["n", "m"])], inits, opset)
        got = assert_matches_onnxruntime(model, inputs={"x": x})
        assert got["y"].shape == (2, 12)


# --- dynamic dimensions, frozen inputs, control flow ------------------------------------------------------------

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _typed_model(nodes, inputs, outputs, initializers=(), opset=17):
    """A model whose inputs and outputs are (name, elem_type, shape); shapes may hold -1, 0, None or names."""
    def info(name, elem, shape):
        vi = helper.make_tensor_value_info(name, elem, None if shape is None else [
            d if isinstance(d, str) or d is None else 1 for d in shape])
        for dim, d in zip(vi.type.tensor_type.shape.dim, shape or ()):
            if isinstance(d, int):
                dim.Clear()
                dim.dim_value = d      # -1 and 0 too, as exporters write them
        return vi

    graph = helper.make_graph(nodes, "g", [info(*i) for i in inputs], [info(*o) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    for out, inferred, (_, _, shape) in zip(model.graph.output, onnx.shape_inference.infer_shapes(model).graph.output,
                                            outputs):
        if shape is None:      # the checker wants a shape on every output: take what inference says
            out.type.CopyFrom(inferred.type)
    return model


def _compare(model, feeds, frozen=None, **options):
    """aot.run with `options` against onnxruntime on the unchanged model fed `feeds` plus the frozen values."""
    expected = onnxruntime_outputs(model, {**feeds, **(frozen or {})})
    got = aot.run(model, inputs=feeds, freeze=frozen, **options)
    assert list(got) == [o.name for o in model.graph.output]
    for name, ref in expected.items():
        assert got[name].shape == ref.shape, name
        scale = max(1e-6, float(np.max(np.abs(ref)))) if ref.size else 1.0
        assert float(np.max(np.abs(got[name] - ref), initial=0.0)) <= 1e-4 * scale, name
    return got


def test_minus_one_unnamed_and_named_dims_are_unknown():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for dims in ([-1, 3, None, None], ["batch", 3, "h", "w"]):
        model = _typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, dims)], [("y", F32, dims)])
        with pytest.raises(aot.ShapeError, match=r"input 'x' has .*ax[ie]s.*--input-shape x=N?x?3x"):
            aot.build(model, out_dir=None)
        result = aot.check(model, inputs={"x": x}, input_shapes={"x": (2, 3, 4, 5)})
        assert result.ok and result.outputs["y"].shape == (2, 3, 4, 5)


def test_a_declared_zero_is_an_empty_dimension_that_input_shape_may_resize():
    """ONNX's 0 is an empty dimension: an input with no elements has one value and becomes a constant
    (here Reduce's empty axes list, fed at run time in the model). Some old exporters wrote 0 for a
    dynamic dimension: --input-shape gives it a size, and the reference runs with that size too."""
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)]
    model = _typed_model(nodes, [("x", F32, [2, 3]), ("axes", I64, [0])], [("y", F32, [1, 1])])
    artifact = aot.build(model, out_dir=None)
    assert [i["name"] for i in artifact.metadata["inputs"]] == ["x"]
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    _compare(model, {"x": x, "axes": np.zeros(0, np.int64)})
    model = _typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [0, 3, 4, 5])],
                         [("y", F32, [0, 3, 4, 5])])
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    result = aot.check(model, inputs={"x": x}, input_shapes={"x": (2, 3, 4, 5)})
    assert result.ok and result.outputs["y"].shape == (2, 3, 4, 5)


def test_dynamic_dim_message_names_the_axes_and_the_option():
    model = _typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["batch", 3, None, -1])],
                         [("y", F32, ["batch", 3, None, -1])])
    with pytest.raises(aot.ShapeError) as err:
        aot.build(model)
    assert str(err.value) == ("g: input 'x' has dynamic dimensions at axes 0 (named 'batch'), 2 (?), 3 (-1): give its "
                              "shape with --input-shape x=Nx3xNxN (input_shapes= in the Python API)")


def test_given_shape_must_agree_with_known_dims():
    model = _typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [-1, 3, None])], [("y", F32, None)])
    with pytest.raises(aot.OptionError, match=r"--input-shape x=1x4x8 contradicts the model's shape -1x3x\? "
                                              r"\(axis 1 is 3\)"):
        aot.build(model, input_shapes={"x": (1, 4, 8)})
    with pytest.raises(aot.OptionError, match="has rank 2, the model's input has rank 3"):
        aot.build(model, input_shapes={"x": (1, 3)})


def test_a_named_dim_takes_one_value_across_inputs():
    nodes = [helper.make_node("Add", ["x", "m"], ["y"])]
    model = _typed_model(nodes, [("x", F32, ["batch", 4]), ("m", F32, ["batch", 4])], [("y", F32, ["batch", 4])])
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32), "m": rng.standard_normal((3, 4)).astype(np.float32)}
    _compare(model, feeds, input_shapes={"x": (3, 4)})        # m gets batch = 3 from x
    with pytest.raises(aot.OptionError, match="named dimension 'batch' size 2, but --input-shape x \\(axis 0\\) "
                                              "gives it 3"):
        aot.build(model, input_shapes={"x": (3, 4), "m": (2, 4)})


def _pytorch_style_dynamic_batch(opset=13):
    """What torch.onnx.export writes for a dynamic batch: `x.view(x.size(0), -1)` as Shape -> Gather ->
    Unsqueeze -> Concat -> Reshape, a position term from Range over Shape -> Slice, a ConstantOfShape
    bias and an Expand to a computed shape."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Shape", ["c"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["view"], name="concat", axis=0),
        helper.make_node("Reshape", ["c", "view"], ["flat"], name="view"),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="fc"),
        helper.make_node("Shape", ["logits"], ["lshape"], name="lshape"),
        helper.make_node("Slice", ["lshape", "one", "two"], ["width"], name="width"),       # [5]
        helper.make_node("Squeeze", ["width", "axes0"], ["w0"], name="w0"),
        helper.make_node("Range", ["zero", "w0", "one_s"], ["pos"], name="range"),
        helper.make_node("Cast", ["pos"], ["posf"], name="cast", to=F32),
        helper.make_node("ConstantOfShape", ["lshape"], ["half"], name="half",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Add", ["logits", "posf"], ["a"], name="add_pos"),
        helper.make_node("Mul", ["a", "half"], ["b"], name="mul_half"),
        helper.make_node("Concat", ["n1", "two_s1", "width"], ["eshape"], name="eshape", axis=0),
        helper.make_node("Unsqueeze", ["b", "axes1"], ["b1"], name="b1"),
        helper.make_node("Expand", ["tiny", "eshape"], ["bias"], name="expand"),
        helper.make_node("Add", ["b1", "bias"], ["y"], name="add_bias"),
    ]
    inits = [("w", w), ("fc", fc), ("zero", np.array(0, np.int64)), ("axes0", i64(0)), ("axes1", i64(1)),
             ("minus1", i64(-1)), ("one", i64(1)), ("two", i64(2)), ("one_s", np.array(1, np.int64)),
             ("two_s1", i64(2)), ("tiny", np.float32(0.25))]
    return _typed_model(nodes, [("x", F32, ["batch", 3, 8, 8])], [("y", F32, ["batch", 2, 5])], inits, opset)


def test_pytorch_style_dynamic_batch_folds_its_shape_subgraphs():
    model = _pytorch_style_dynamic_batch()
    with pytest.raises(aot.ShapeError, match="named 'batch'"):
        aot.build(model)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = _compare(model, {"x": x}, input_shapes={"x": (2, 3, 8, 8)})
    assert got["y"].shape == (2, 2, 5)
    artifact = aot.build(model, input_shapes={"x": (2, 3, 8, 8)})
    ops = {node.op for node in artifact.program.graph.nodes}
    assert not ops & {"Shape", "Gather", "Range", "ConstantOfShape", "Slice", "Concat", "Expand"}, ops


def test_a_shape_known_only_at_run_time_names_its_node():
    nodes = [helper.make_node("Cast", ["x"], ["xi"], name="to_int", to=I64),
             helper.make_node("Reshape", ["x", "xi"], ["y"], name="data_reshape")]
    model = _typed_model(nodes, [("x", F32, [2])], [("y", F32, None)])
    with pytest.raises(aot.AotError, match="'data_reshape' \\(Reshape\\)\\) has a shape that depends on values "
                                           "computed at run time \\(axis 0"):
        aot.build(model)


def _l2_body(last: str):
    """ReduceL2's function body at opset 18 (x [3, 2, 2], axes fed at run time, keepdims 0), the last
    node `last`: onnx's inference gives the ReduceSum's output no shape."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["square"], name="square"),
             helper.make_node("ReduceSum", ["square", "axes"], ["sum"], name="sum", keepdims=0),
             helper.make_node("Cast", ["sum"], ["sum_f"], name="cast", to=F32),
             helper.make_node("Sqrt", ["sum_f"], ["root"], name="root")]
    nodes.append(helper.make_node("CastLike", ["root", "x"], ["y"], name="like") if last == "CastLike"
                 else helper.make_node("Transpose", ["root"], ["y"], name="turn", perm=[1, 0]))
    return _typed_model(nodes, [("x", F32, [3, 2, 2]), ("axes", I64, [1])],
                        [("y", F32, [3, 2] if last == "CastLike" else [2, 3])], opset=18)


def test_a_tensor_inference_leaves_unknown_takes_the_shape_its_elementwise_readers_carry():
    """The ReduceSum's output has the shape that Cast, Sqrt and CastLike carry to the declared output;
    the axes fed at run time then choose between axis 1 and axis 2."""
    model = _l2_body("CastLike")
    x = np.random.default_rng(8).standard_normal((3, 2, 2)).astype(np.float32)
    for axes in ([1], [2], [-1]):
        _compare(model, {"x": x, "axes": np.array(axes, np.int64)})


def test_a_reader_that_moves_elements_gives_no_shape_to_what_it_reads():
    """A Transpose's output shape does not say its input's: the ReduceSum's output stays unknown."""
    with pytest.raises(aot.ShapeError, match="cannot infer the shape of tensor 'sum'"):
        aot.build(_l2_body("Transpose"), out_dir=None)


def _gated_model():
    """x (float [1, 4]) plus a bool flag choosing a branch and a gain vector, both meant to be frozen."""
    then = _branch("scaled", [helper.make_node("Mul", ["x", "gain0"], ["y0"], name="mul")], "y0", [1, 4])
    other = _branch("plain", [helper.make_node("Neg", ["x"], ["y0n"], name="neg")], "y0n", [1, 4])
    nodes = [helper.make_node("If", ["flag"], ["y1"], name="gate", then_branch=then, else_branch=other),
             helper.make_node("Add", ["y1", "gain"], ["y"], name="add")]
    return _typed_model(nodes, [("x", F32, [1, 4]), ("flag", BOOL, []), ("gain", F32, [4])],
                        [("y", F32, [1, 4])], [("gain0", np.float32(3.0))])


def test_freeze_binds_inputs_of_any_dtype(tmp_path):
    model = _gated_model()
    x = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    np.save(tmp_path / "gain.npy", np.array([1, 2, 3, 4], np.float32))
    for flag in ("true", "0", True):
        for gain in ("0.5,1,-1,2", str(tmp_path / "gain.npy"), [0.5, 1, -1, 2]):
            expected_gain = np.load(tmp_path / "gain.npy") if str(gain).endswith(".npy") else \
                np.array([0.5, 1, -1, 2], np.float32)
            frozen = {"flag": np.array(flag in ("true", True)), "gain": expected_gain}
            expected = onnxruntime_outputs(model, {"x": x, **frozen})
            got = aot.run(model, inputs={"x": x}, freeze={"flag": flag, "gain": gain})
            np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-6)
    result = aot.check(model, freeze={"flag": "1", "gain": "1,2,3,4"})
    assert result.ok and list(result.inputs) == ["x"]


@pytest.mark.parametrize("freeze, message", [
    ({"nope": 1}, "--freeze names 'nope', but the model's inputs are: x, flag, gain"),
    ({"flag": "maybe"}, "--freeze flag=maybe: cannot parse 'maybe' as true/false"),
    ({"gain": "1,2,x,4"}, "--freeze gain=1,2,x,4: cannot parse '1,2,x,4' as float32"),
    ({"gain": "1,2,3"}, "--freeze gain=1,2,3: 3 values of shape [3] given, but input 'gain' has shape [4] (4 values)"),
    ({"flag": 2}, "--freeze flag=2: the input is bool, and the value does not convert to it exactly"),
    ({"gain": "missing.npy"}, "--freeze gain=missing.npy: cannot read it as a .npy file"),
])
def test_bad_freeze_values_are_one_clear_error(freeze, message):
    with pytest.raises(aot.OptionError) as err:
        aot.build(_gated_model(), freeze=freeze)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_freezing_an_input_removes_it_from_the_build_and_the_reference(tmp_path):
    artifact = aot.build(_gated_model(), out_dir=tmp_path / "b", freeze={"flag": 1, "gain": np.ones(4)})
    assert [i["name"] for i in artifact.metadata["inputs"]] == ["x"]
    assert [vi.name for vi in artifact.model.proto.graph.input] == ["x"]
    with pytest.raises(aot.OptionError, match="--input-shape names 'flag' \\(it is frozen\\)"):
        aot.build(_gated_model(), freeze={"flag": 1, "gain": np.ones(4)}, input_shapes={"flag": (1,)})


def _branch(name, nodes, out, shape, initializers=()):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F32, shape)],
                             initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])


def _vad_model():
    """A voice-activity detector's shape: the sample rate `sr` picks a 16 kHz or an 8 kHz network."""
    rng = np.random.default_rng(4)
    w16 = rng.standard_normal((512, 8)).astype(np.float32) * 0.1
    w8 = rng.standard_normal((8, 1, 64)).astype(np.float32) * 0.1
    # the branch's 'h' becomes 'by_rate/h', a name the main graph already uses: inlining must rename it
    then = _branch("sr16k", [helper.make_node("MatMul", ["x", "w16"], ["h"], name="fc"),
                             helper.make_node("Tanh", ["h"], ["out16"], name="tanh")],
                   "out16", [1, 8], [("w16", w16)])
    other = _branch("sr8k", [helper.make_node("Reshape", ["x", "s3"], ["x3"], name="as_1d"),
                             helper.make_node("Conv", ["x3", "w8"], ["c"], name="conv", strides=[64]),
                             helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[2], keepdims=0),
                             helper.make_node("Relu", ["m"], ["out8"], name="relu")],
                    "out8", [1, 8], [("w8", w8), ("s3", np.array([1, 1, 512], np.int64))])
    nodes = [helper.make_node("Equal", ["sr", "sr16000"], ["is16k"], name="is_16k"),
             helper.make_node("If", ["is16k"], ["by_rate/h"], name="by_rate", then_branch=then, else_branch=other),
             helper.make_node("Mul", ["by_rate/h", "w"], ["hw"], name="scale"),
             helper.make_node("Sigmoid", ["hw"], ["prob"], name="prob")]
    return _typed_model(nodes, [("x", F32, [1, 512]), ("sr", I64, [])], [("prob", F32, [1, 8])],
                        [("sr16000", np.array(16000, np.int64)), ("w", np.full(8, 2.0, np.float32))])


def test_vad_model_with_the_sample_rate_frozen():
    model = _vad_model()
    x = np.random.default_rng(5).standard_normal((1, 512)).astype(np.float32)
    for sr in (16000, 8000):
        _compare(model, {"x": x}, frozen={"sr": np.array(sr, np.int64)})
        assert aot.check(model, freeze={"sr": str(sr)}).ok
    artifact = aot.build(model, freeze={"sr": 8000})
    assert "Conv" in {n.op for n in artifact.program.graph.nodes}


def test_if_decided_at_run_time_runs_both_branches_and_selects():
    """Branches with outputs of one shape: both run, a Where picks, and `sr` stays an input."""
    model = _vad_model()
    x = np.random.default_rng(6).standard_normal((1, 512)).astype(np.float32)
    for sr in (16000, 8000):
        _compare(model, {"x": x, "sr": np.array(sr, np.int64)})


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_vad_model_under_emulation(target):
    """Both ways of deciding the branch, on an Arm board: frozen at build time, and selected at run time."""
    model = _vad_model()
    x = np.random.default_rng(7).standard_normal((1, 512)).astype(np.float32)
    _compare(model, {"x": x}, frozen={"sr": np.array(8000, np.int64)}, target=target)
    _compare(model, {"x": x, "sr": np.array(16000, np.int64)}, target=target)


def test_if_between_branches_of_different_shapes_suggests_freezing_its_input():
    then = _branch("wide", [helper.make_node("Relu", ["x"], ["a"])], "a", [1, 512])
    other = _branch("narrow", [helper.make_node("ReduceMean", ["x"], ["b"], axes=[1])], "b", [1, 1])
    nodes = [helper.make_node("Equal", ["sr", "sr16000"], ["is16k"], name="is_16k"),
             helper.make_node("If", ["is16k"], ["y"], name="by_rate", then_branch=then, else_branch=other)]
    model = _typed_model(nodes, [("x", F32, [1, 512]), ("sr", I64, [])], [("y", F32, None)],
                         [("sr16000", np.array(16000, np.int64))])
    with pytest.raises(aot.UnsupportedOpError) as err:
        aot.build(model)
    message = str(err.value)
    assert "node 'by_rate' (If) chooses its branch at run time" in message and "differ in shape" in message
    assert "--freeze sr=VALUE" in message and "\n" not in message


def test_nested_ifs_and_a_condition_from_a_shape_fold():
    """The outer condition is Shape(x)[1] == 4, known once the input shape is fixed; the inner one is
    constant. Inlined names may not collide with the main graph's ('t' is in both)."""
    inner = helper.make_node("If", ["true"], ["inner_out"], name="inner",
                             then_branch=_branch("a", [helper.make_node("Add", ["x", "t"], ["s"], name="add")],
                                                 "s", [None, 4], [("t", np.float32(1.0))]),
                             else_branch=_branch("b", [helper.make_node("Neg", ["x"], ["s2"])], "s2", [None, 4]))
    then = _branch("outer_then", [inner, helper.make_node("Relu", ["inner_out"], ["r"], name="relu")], "r", [None, 4])
    other = _branch("outer_else", [helper.make_node("Abs", ["x"], ["e"], name="abs")], "e", [None, 4])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["width"], axis=0),
             helper.make_node("Equal", ["width", "four"], ["c"]),
             helper.make_node("If", ["c"], ["o"], name="outer", then_branch=then, else_branch=other),
             helper.make_node("Mul", ["o", "t"], ["y"], name="mul")]
    model = _typed_model(nodes, [("x", F32, ["n", 4])], [("y", F32, ["n", 4])],
                         [("one", np.array(1, np.int64)), ("four", np.array(4, np.int64)), ("true", np.array(True)),
                          ("t", np.float32(3.0))])
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    _compare(model, {"x": x}, input_shapes={"x": (3, 4)})


def test_nested_unnamed_ifs_get_distinct_node_names():
    """Unnamed control-flow nodes are named by position: the inner If, inlined in a second round, lands
    where the outer one stood, and the Identity naming its output must not repeat the outer one's."""
    inner = helper.make_node("If", ["true"], ["inner_out"],
                             then_branch=_branch("a", [helper.make_node("Neg", ["x"], ["n"])], "n", [2, 4]),
                             else_branch=_branch("b", [helper.make_node("Abs", ["x"], ["m"])], "m", [2, 4]))
    then = _branch("outer_then", [inner], "inner_out", [2, 4])
    other = _branch("outer_else", [helper.make_node("Relu", ["x"], ["e"])], "e", [2, 4])
    nodes = [helper.make_node("If", ["true"], ["o"], then_branch=then, else_branch=other),
             helper.make_node("Sigmoid", ["o"], ["y"], name="sigmoid")]
    model = _typed_model(nodes, [("x", F32, [2, 4])], [("y", F32, [2, 4])], [("true", np.array(True))])
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    _compare(model, {"x": x})


def _loop_model(trip, length=None, start=False):
    """y = x; repeat `trip` times: y = y * 0.5 + i, collecting each y (a scan output, declared of
    `length` steps if given). With `start`, a start condition fed at run time, which the body passes on
    through an Identity (as ONNX's Range body does)."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F32),
         helper.make_node("Mul", ["y_in", "half"], ["h"]),
         helper.make_node("Add", ["h", "fi"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", BOOL, []),
                 helper.make_tensor_value_info("y_in", F32, [1, 4])],
        [helper.make_tensor_value_info("c_out", BOOL, []), helper.make_tensor_value_info("y_out", F32, [1, 4]),
         helper.make_tensor_value_info("scan", F32, [1, 4])])
    nodes = [helper.make_node("Loop", ["trip", "go" if start else "", "x"], ["y", "ys"], name="loop", body=body)]
    inputs = [("x", F32, [1, 4]), ("trip", I64, [])] + ([("go", BOOL, [])] if start else [])
    return _typed_model(nodes, inputs, [("y", F32, [1, 4]), ("ys", F32, None if length is None else [length, 1, 4])],
                        [("half", np.float32(0.5))])


def test_loop_with_a_constant_trip_count_unrolls():
    x = np.random.default_rng(7).standard_normal((1, 4)).astype(np.float32)
    got = _compare(_loop_model(3), {"x": x}, frozen={"trip": np.array(3, np.int64)})
    assert got["ys"].shape == (3, 1, 4)


@pytest.mark.parametrize("start", [False, True])
def test_loop_with_a_run_time_trip_count_runs_as_often_as_its_declared_scan_output_is_long(start):
    x = np.random.default_rng(7).standard_normal((1, 4)).astype(np.float32)
    feeds = {"x": x, "trip": np.array(3, np.int64)} | ({"go": np.array(True)} if start else {})
    got = _compare(_loop_model(3, length=3, start=start), feeds)
    assert got["ys"].shape == (3, 1, 4)


def test_a_run_time_trip_count_contradicting_the_declared_length_is_not_read():
    """The model's error: the build runs the declared 3 iterations whatever comes in."""
    x = np.random.default_rng(7).standard_normal((1, 4)).astype(np.float32)
    model = _loop_model(3, length=3, start=True)
    want = aot.run(model, inputs={"x": x, "trip": np.array(3, np.int64), "go": np.array(True)})
    for trip, go in ((0, True), (-1, True), (1 << 40, False)):
        got = aot.run(model, inputs={"x": x, "trip": np.array(trip, np.int64), "go": np.array(go)})
        assert all(np.array_equal(got[k], want[k]) for k in want)


def test_loop_with_a_run_time_trip_count_is_refused():
    with pytest.raises(aot.UnsupportedOpError, match="node 'loop' \\(Loop\\) its trip count 'trip' is computed at "
                                                     "run time.*--freeze trip=VALUE"):
        aot.build(_loop_model(3))


def _scan_model(opset: int) -> onnx.ModelProto:
    """A running sum over the rows of x (read from the end), with each step's sum times w as a scan
    output stacked along axis 1."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "row"], ["acc_next"]),
         helper.make_node("Mul", ["acc_next", "w"], ["out_row"])], "body",
        [helper.make_tensor_value_info("acc", F32, [3]), helper.make_tensor_value_info("row", F32, [3])],
        [helper.make_tensor_value_info("acc_next", F32, [3]), helper.make_tensor_value_info("out_row", F32, [3])])
    scan = helper.make_node("Scan", ["init", "x"], ["total", "steps"], name="scan", body=body, num_scan_inputs=1,
                            scan_input_directions=[1], scan_output_axes=[1])
    graph = helper.make_graph([scan], "g", [helper.make_tensor_value_info("init", F32, [3]),
                                            helper.make_tensor_value_info("x", F32, [5, 3])],
                              [helper.make_tensor_value_info("total", F32, [3]),
                               helper.make_tensor_value_info("steps", F32, [3, 5])],
                              [numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("opset", [11, 17])
def test_scan_of_a_static_length_unrolls(opset):
    rng = np.random.default_rng(8)
    feeds = {"init": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal((5, 3)).astype(np.float32)}
    got = _compare(_scan_model(opset), feeds)
    assert got["steps"].shape == (3, 5)


def test_question_mark_dims_are_anonymous():
    """Some exporters write '?' as the name of every dynamic dimension: it names none, so two '?' axes
    may take different sizes."""
    x = np.random.default_rng(9).standard_normal((1, 3, 8, 20)).astype(np.float32)
    model = _typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [1, 3, "?", "?"])],
                         [("y", F32, [1, 3, "?", "?"])])
    _compare(model, {"x": x}, input_shapes={"x": (1, 3, 8, 20)})


def test_an_unnamed_node_that_fails_inference_is_named_as_aot_names_it(tmp_path):
    """onnx's inference leaves out 'node name:' for a node without one; the fault was then missed and a
    Concat of mismatched widths reached the kernel verifier ("stores outside its 12 elements")."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "z"], ["y"], axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "concat.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelError, match=r"^concat\.onnx: node 'Concat_1' \(Concat\): .*differ"):
        aot.build(path, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _reduce_sum_then(nodes, out_shape, bias=None):
    """x [3, 4, 2] -> ReduceSum over axes fed at run time (keepdims) -> `nodes` -> y declared `out_shape`."""
    inputs = [("x", F32, [3, 4, 2]), ("axes", I64, [1])] + ([("b", F32, list(bias.shape))] if bias is not None else [])
    return _typed_model([helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1), *nodes],
                        inputs, [("y", F32, out_shape)])


def test_shapes_taken_back_from_a_declared_output_through_shape_keeping_ops():
    """ReduceL2's function body: ReduceSum with run-time axes, whose shape ONNX inference leaves unknown,
    then Cast, Sqrt and CastLike to the declared output, which gives it."""
    nodes = [helper.make_node("Cast", ["s"], ["c"], to=F32), helper.make_node("Sqrt", ["c"], ["r"]),
             helper.make_node("CastLike", ["r", "x"], ["y"])]
    x = np.random.default_rng(10).standard_normal((3, 4, 2)).astype(np.float32) ** 2
    got = _compare(_reduce_sum_then(nodes, [3, 1, 2]), {"x": x, "axes": np.array([1], np.int64)})
    assert got["y"].shape == (3, 1, 2)


@pytest.mark.parametrize("bias_shape", [(1, 1, 1), (), (1,)])
def test_shapes_taken_back_through_a_broadcast_with_a_size_one_operand(bias_shape):
    bias = np.full(bias_shape, 0.5, np.float32)
    model = _reduce_sum_then([helper.make_node("Add", ["s", "b"], ["y"])], [3, 1, 2], bias)
    x = np.random.default_rng(11).standard_normal((3, 4, 2)).astype(np.float32)
    _compare(model, {"x": x, "axes": np.array([-2], np.int64), "b": bias})


@pytest.mark.parametrize("bias_shape", [(3, 1, 2), (2,)])
def test_a_broadcast_that_leaves_an_operand_ambiguous_gives_it_no_shape(bias_shape):
    """Where the other operand is as long as the output on an axis, this one may be 1 or that length
    there: no shape follows, and the reduction is reported unknown."""
    model = _reduce_sum_then([helper.make_node("Add", ["s", "b"], ["y"])], [3, 1, 2], np.zeros(bias_shape, np.float32))
    with pytest.raises(aot.ShapeError, match=r"cannot infer the shape of tensor 's'"):
        aot.build(model, out_dir=None)


def test_a_shape_taken_back_that_contradicts_a_known_dimension_is_the_models_error():
    """Forward inference already refuses most contradictions; one left to the backward walk (a
    dimension known on the intermediate tensor, another implied by the output) names the tensor. A
    dimension left unknown is completed."""
    from aot.frontend.backward_shapes import shapes_from_outputs

    def model(r_dims):
        m = _typed_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sqrt", ["r"], ["y"])],
                         [("x", F32, [2, 4])], [("y", F32, [2, 4])])
        m.graph.value_info.append(helper.make_tensor_value_info("r", F32, r_dims))
        return m

    with pytest.raises(aot.ModelError, match=r"tensor 'r' has shape \[2, 3\], but the output of a Sqrt node, "
                                             r"which it feeds, implies \[2, 4\]"):
        shapes_from_outputs(model([2, 3]), "g")
    learned = shapes_from_outputs(model([2, None]), "g")
    assert [d.dim_value for d in learned.graph.value_info[-1].type.tensor_type.shape.dim] == [2, 4]
    assert shapes_from_outputs(model([2, 4]), "g") is None


def test_a_size_found_for_a_named_dimension_is_that_names_everywhere():
    """A Range of a length fed at run time, then two functions of it added: each operand of the Add is
    ambiguous alone, but inference names the Range's length once (unk__N) on every tensor after it, and
    the declared output gives that length (the expanded HannWindow body)."""
    nodes = [helper.make_node("Cast", ["n"], ["nf"], to=F32),
             helper.make_node("Range", ["zero", "nf", "one"], ["r"]),
             helper.make_node("Cos", ["r"], ["c"]), helper.make_node("Sin", ["r"], ["s"]),
             helper.make_node("Add", ["c", "s"], ["y"])]
    model = _typed_model(nodes, [("n", I64, [])], [("y", F32, [6])],
                         [("zero", np.float32(0.0)), ("one", np.float32(1.0))])
    _compare(model, {"n": np.array(6, np.int64)})


def test_large_initializers_reach_shape_inference_as_stubs(tmp_path):
    """Shape inference copies the model a few times: its large initializers (but int32/int64 ones, shapes
    and axes) reach it as stubs (name, type, dims), so the inferred model holds no second copy of the
    weights. The graph's constants are the model's own; inferred_with_weights (bisect) gives them back."""
    from aot.frontend.onnx import STUB_BYTES, load, to_graph

    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    shape = np.array([1, -1], np.int64)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 8, 5, 5])],
                              [helper.make_tensor_value_info("y", F32, [1, 16 * 25])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(shape, "shape")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    assert w.nbytes >= STUB_BYTES
    loaded = load(path)
    assert loaded.stubs == {"w"}
    stub = next(t for t in loaded.inferred.graph.initializer if t.name == "w")
    assert list(stub.dims) == list(w.shape) and not stub.raw_data and not stub.float_data
    assert [d.dim_value for d in loaded.inferred.graph.output[0].type.tensor_type.shape.dim] == [1, 16 * 25]
    np.testing.assert_array_equal(to_graph(loaded).constants["w"], w)
    full = {t.name: t for t in loaded.inferred_with_weights().graph.initializer}
    np.testing.assert_array_equal(numpy_helper.to_array(full["w"]), w)
    model = onnx.load(path)
    assert _compare(model, {"x": rng.standard_normal((1, 8, 5, 5)).astype(np.float32)})["y"].shape == (1, 400)


def test_shape_inference_that_folds_constants_reads_the_whole_model():
    """Where inference alone leaves shapes unknown and constants must be folded (a PyTorch-style dynamic
    batch, whose fc weights are large), it runs on the model with every initializer's data: no stubs."""
    from aot.frontend.onnx import load

    loaded = load(_pytorch_style_dynamic_batch(), {"x": (2, 3, 8, 8)})
    assert loaded.stubs == frozenset()
    assert all(t.raw_data or t.float_data or t.int64_data for t in loaded.inferred.graph.initializer)
