"""Old and unusual files as users have them: IR-version-3 models whose initializers are also graph
inputs, opsets before 7 (legacy broadcasting), stale shape annotations, float64 tensors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import assert_matches_onnxruntime, onnxruntime_outputs

import aot
from aot.errors import ModelError, ShapeError
from aot.frontend.onnx import load, to_graph

F32 = TensorProto.FLOAT


def _legacy_model(nodes, inputs: dict, outputs: dict, initializers: dict, opset: int, ir_version: int = 3,
                  listed: bool = True) -> onnx.ModelProto:
    """A model as old exporters wrote it: every initializer also a graph input (`listed`), as IR 3 requires."""
    declared = [helper.make_tensor_value_info(n, F32, s) for n, s in inputs.items()]
    if listed:
        declared += [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                     for n, a in initializers.items()]
    graph = helper.make_graph(nodes, "legacy", declared,
                              [helper.make_tensor_value_info(n, F32, s) for n, s in outputs.items()],
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


# --- IR 3: initializers listed as graph inputs ----------------------------------------------------------------


def _zoo_cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """The shape of the classic ONNX-zoo CNNs (IR 3, opset 9): every initializer also an input; a bias
    made by ConstantOfShape from a shape initializer (as the zoo's light models make all weights); a
    Reshape whose shape is an initializer; a Dropout whose mask nothing reads (opset 9 gives it no shape)."""
    inits = {"conv1_w_0": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "conv1_b_0__SHAPE": np.array([4], np.int64),
             "flat_shape": np.array([1, -1], np.int64),
             "fc_w_0": rng.standard_normal((10, 64)).astype(np.float32),
             "fc_b_0": rng.standard_normal(10).astype(np.float32)}
    nodes = [helper.make_node("ConstantOfShape", ["conv1_b_0__SHAPE"], ["conv1_b_0"],
                              value=numpy_helper.from_array(np.array([0.25], np.float32))),
             helper.make_node("Conv", ["data_0", "conv1_w_0", "conv1_b_0"], ["r0"], name="n0", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["r0"], ["r1"], name="n1"),
             helper.make_node("MaxPool", ["r1"], ["r2"], name="n2", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["r2", "flat_shape"], ["r3"], name="n3"),
             helper.make_node("Dropout", ["r3"], ["r4", "r4_mask"], name="n4", ratio=0.5),
             helper.make_node("Gemm", ["r4", "fc_w_0", "fc_b_0"], ["r5"], name="n5", transB=1),
             helper.make_node("Softmax", ["r5"], ["prob_1"], name="n6")]
    return _legacy_model(nodes, {"data_0": [1, 3, 8, 8]}, {"prob_1": [1, 10]}, inits, opset=9)


def test_ir3_initializers_listed_as_inputs_build_as_constants():
    model = _zoo_cnn(np.random.default_rng(0))
    assert to_graph(load(model)).inputs == ("data_0",)     # the weights are constants, not inputs of the build
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert_matches_onnxruntime(model, {"data_0": x})


def test_initializers_listed_as_inputs_at_ir_4_build_as_constants():
    """Later exporters may still list initializers as inputs (keep_initializers_as_inputs)."""
    model = _zoo_cnn(np.random.default_rng(2))
    model.ir_version = 8
    graph = to_graph(load(model))
    assert graph.inputs == ("data_0",) and "conv1_w_0" in graph.constants


def test_a_shape_nothing_infers_is_explained_by_the_nodes_inputs():
    """Dropout's mask has no inference rule before opset 10: read by a node whose output's shape does not
    give it (a Transpose; an elementwise reader's would), it cannot be built, and the message gives the
    node's input shapes and what onnx's rule made of them."""
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop"),
             helper.make_node("Transpose", ["mask"], ["m"], name="turn", perm=[1, 0])]
    model = _legacy_model(nodes, {"x": [2, 3]}, {"y": [2, 3], "m": [3, 2]}, {}, opset=9)
    with pytest.raises(ShapeError) as err:
        to_graph(load(model))
    message = str(err.value)
    assert "tensor 'mask' (output of node 'drop' (Dropout))" in message
    assert "its inputs are 'x' 2x3 float32, from which onnx's Dropout rule at opset 9 gives it no shape" in message


# --- opsets before 7: legacy broadcasting --------------------------------------------------------------------

RNG = np.random.default_rng(3)
X = RNG.standard_normal((2, 3, 4, 5))
C3, C34, C5, C45 = (RNG.standard_normal(s) for s in ((3,), (3, 4), (5,), (4, 5)))
# node, initializers, the float64 result with the legacy rule applied by hand
LEGACY = {
    "add_axis1": (helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1), {"b": C3},
                  lambda: X + C3[:, None, None]),
    "mul_axis1_rank2": (helper.make_node("Mul", ["x", "b"], ["y"], broadcast=1, axis=1), {"b": C34},
                        lambda: X * C34[:, :, None]),
    "sub_suffix": (helper.make_node("Sub", ["x", "b"], ["y"], broadcast=1), {"b": C5}, lambda: X - C5),
    "div_axis_at_suffix": (helper.make_node("Div", ["x", "b"], ["y"], broadcast=1, axis=2), {"b": C45 + 3},
                           lambda: X / (C45 + 3)),
    "sub_negative_axis": (helper.make_node("Sub", ["x", "b"], ["y"], broadcast=1, axis=-3), {"b": C3},
                          lambda: X - C3[:, None, None]),
    "prelu_per_channel": (helper.make_node("PRelu", ["x", "b"], ["y"]), {"b": C3},
                          lambda: np.where(X > 0, X, X * C3[:, None, None])),
    "prelu_shared": (helper.make_node("PRelu", ["x", "b"], ["y"]), {"b": C3[:1]},
                     lambda: np.where(X > 0, X, X * C3[0])),
}


@pytest.mark.parametrize("opset", [1, 6])
@pytest.mark.parametrize("case", sorted(LEGACY))
def test_legacy_broadcasting_against_numpy(case, opset):
    if case == "sub_negative_axis" and opset == 1:
        pytest.skip("a negative axis is not defined before opset 6")
    node, inits, expected = LEGACY[case]
    model = _legacy_model([node], {"x": list(X.shape)}, {"y": list(X.shape)},
                          {k: v.astype(np.float32) for k, v in inits.items()}, opset)
    got = aot.run(model, inputs={"x": X.astype(np.float32)}, target="host")["y"]
    np.testing.assert_allclose(got, expected(), rtol=1e-5, atol=1e-5)


def _old_cnn(rng: np.random.Generator, legacy: bool) -> onnx.ModelProto:
    """A small CNN at opset 6 as a Caffe2-era exporter wrote it (`legacy`: conv bias added with
    broadcast=1 axis=1, a per-channel PRelu slope of shape [C], Gemm with broadcast=1, BatchNormalization
    and Dropout with is_test), or the same network at opset 7 written with numpy broadcasting."""
    c = 4
    per_channel = (c,) if legacy else (c, 1, 1)
    inits = {"w": rng.standard_normal((c, 3, 3, 3)), "b": rng.standard_normal(per_channel),
             "scale": rng.uniform(0.5, 1.5, c), "shift": rng.standard_normal(c), "mean": rng.standard_normal(c),
             "var": rng.uniform(0.5, 2, c), "slope": rng.uniform(0.1, 0.3, per_channel),
             "fc_w": rng.standard_normal((c * 9, 5)), "fc_b": rng.standard_normal(5)}
    inits = {k: np.asarray(v, np.float32) for k, v in inits.items()}
    inits["shape"] = np.array([2, -1], np.int64)
    old = {"broadcast": 1} if legacy else {}
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["conv", "b"], ["biased"], **old, **({"axis": 1} if legacy else {})),
             helper.make_node("BatchNormalization", ["biased", "scale", "shift", "mean", "var"], ["bn"],
                              epsilon=1e-3, **({"is_test": 1} if legacy else {})),
             helper.make_node("PRelu", ["bn", "slope"], ["act"]),
             helper.make_node("MaxPool", ["act"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["pool", "shape"], ["flat"]),
             helper.make_node("Dropout", ["flat"], ["kept"], **({"is_test": 1} if legacy else {})),
             helper.make_node("Gemm", ["kept", "fc_w", "fc_b"], ["fc"], **old),
             helper.make_node("Softmax", ["fc"], ["y"])]
    return _legacy_model(nodes, {"x": [2, 3, 6, 6]}, {"y": [2, 5]}, inits, opset=6 if legacy else 7)


def test_opset_6_cnn_against_onnxruntime_on_its_opset_7_twin():
    legacy, modern = _old_cnn(np.random.default_rng(4), True), _old_cnn(np.random.default_rng(4), False)
    x = np.random.default_rng(5).standard_normal((2, 3, 6, 6)).astype(np.float32)
    expected = onnxruntime_outputs(modern, {"x": x})["y"]
    got = aot.run(legacy, inputs={"x": x}, target="host")["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert aot.check(legacy, inputs={"x": x}, target="host").ok     # the reference runs the upgraded model


@pytest.mark.parametrize("opset", [6, 7, 8])
def test_batchnorm_per_activation_before_opset_9(opset):
    """spatial=0: statistics of the shape of one sample, one value per activation."""
    rng = np.random.default_rng(8)
    stats = {k: (np.abs(rng.standard_normal((3, 4, 5))) + 0.5).astype(np.float32) for k in ("s", "b", "m", "v")}
    legacy = {"is_test": 1} if opset < 7 else {}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, epsilon=1e-3, **legacy)
    model = _legacy_model([node], {"x": [2, 3, 4, 5]}, {"y": [2, 3, 4, 5]}, stats, opset)
    x = rng.standard_normal((2, 3, 4, 5))
    expected = (x - stats["m"]) / np.sqrt(stats["v"].astype(np.float64) + 1e-3) * stats["s"] + stats["b"]
    got = aot.run(model, inputs={"x": x.astype(np.float32)}, target="host")["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_batchnorm_per_activation_with_per_channel_statistics_is_named(tmp_path):
    stats = {k: np.ones(3, np.float32) for k in ("s", "b", "m", "v")}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", spatial=0)
    model = _legacy_model([node], {"x": [2, 3, 4, 5]}, {"y": [2, 3, 4, 5]}, stats, 7)
    with pytest.raises(ModelError, match=r"node 'bn' \(BatchNormalization\): with spatial=0 's' must have the "
                                         r"shape of one sample, \[3, 4, 5\]"):
        aot.build(model, target="host", out_dir=tmp_path)


def test_opset_1_reshape_by_attribute_and_concat_without_axis():
    """Reshape-1 takes its shape as an attribute (the converter makes it an int64 Constant, which Constant
    cannot hold before opset 9), Concat-1 defaults to axis 1."""
    m = np.random.default_rng(9).standard_normal((24, 5))
    nodes = [helper.make_node("Concat", ["x", "x"], ["both"]),
             helper.make_node("Reshape", ["both"], ["flat"], shape=[2, -1]),
             helper.make_node("MatMul", ["flat", "m"], ["y"])]
    model = _legacy_model(nodes, {"x": [2, 3, 2, 2]}, {"y": [2, 5]}, {"m": m.astype(np.float32)}, opset=1)
    x = np.random.default_rng(10).standard_normal((2, 3, 2, 2))
    got = aot.run(model, inputs={"x": x.astype(np.float32)}, target="host")["y"]
    np.testing.assert_allclose(got, np.concatenate([x, x], axis=1).reshape(2, -1) @ m, rtol=1e-5, atol=1e-5)


def test_an_opset_the_converter_cannot_upgrade_is_named():
    node = helper.make_node("Pad", ["x"], ["y"], paddings=[0, 0, 1, 1, 0, 0, 1, 1])
    model = _legacy_model([node], {"x": [1, 2, 3, 3]}, {"y": [1, 2, 5, 5]}, {}, opset=1)
    model.graph.name = "old_pad"
    with pytest.raises(ModelError, match=r"^old_pad: imports opset 1; aot upgrades models older than opset 7 "
                                         r"with onnx's version converter, which cannot upgrade this one: it has "
                                         r"no adapter for Pad from opset 1$"):
        load(model)


def test_legacy_axis_outside_the_first_input_is_named():
    node = helper.make_node("Add", ["x", "b"], ["y"], name="add", broadcast=1, axis=3)
    model = _legacy_model([node], {"x": [2, 3, 4, 5]}, {"y": [2, 3, 4, 5]}, {"b": C34.astype(np.float32)}, 6)
    with pytest.raises(ModelError, match=r"node 'add' \(Add\): axis 3 places its second input \(rank 2\) "
                                         r"outside the first \(rank 4\)"):
        load(model)


# --- stale shape annotations ----------------------------------------------------------------------------------


def _crnn_head(annotated: list, output: list | None = None) -> onnx.ModelProto:
    """The head of a CRNN as ddddocr's common.onnx has it: features N x C x H x W reshaped to N x C*H x W,
    then time-major for the classifier, with the Reshape's output annotated `annotated` (a value_info
    that an edit of the graph left stale) and the graph output declared `output`."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 32, -1], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((32, 5)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="Conv_100", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="Reshape_101"),
             helper.make_node("Transpose", ["r"], ["t"], name="Transpose_102", perm=[2, 0, 1]),
             helper.make_node("MatMul", ["t", "fc"], ["y"], name="MatMul_103")]
    graph = helper.make_graph(nodes, "crnn", [helper.make_tensor_value_info("x", F32, [1, 1, 4, 10])],
                              [helper.make_tensor_value_info("y", F32, output or [10, 1, 5])], initializer=inits,
                              value_info=[helper.make_tensor_value_info("r", F32, annotated)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("annotated", [[32, 10], [1, 320], [1, 32, 11]], ids=["rank", "rank_same_size", "dim"])
def test_a_stale_intermediate_annotation_is_ignored(annotated):
    with pytest.raises(onnx.shape_inference.InferenceError, match="existing shape differ"):    # as onnx has it
        onnx.shape_inference.infer_shapes(_crnn_head(annotated), strict_mode=True)
    assert_matches_onnxruntime(_crnn_head(annotated))


def test_a_graph_output_declared_with_another_shape_than_computed_is_refused():
    with pytest.raises(ModelError, match=r"^crnn: graph output 'y' is declared float \[10, 5\], but is computed by "
                                         r"node 'MatMul_103' \(MatMul\) as float \[10, 1, 5\]; a graph output's "
                                         r"declared shape is the compiled model's interface"):
        load(_crnn_head([1, 32, 10], output=[10, 5]))


def test_a_graph_output_declared_with_a_symbolic_dimension_is_a_sketch():
    """ddddocr's CRNN declares its output [1, seqlen] and computes [20, 1, 8210]; onnxruntime returns the
    computed shape, and so does aot (a fully static declared shape is the interface: refused above)."""
    model = _crnn_head([1, 32, 10], output=[1, "seqlen"])
    assert_matches_onnxruntime(model)
    assert aot.run(model, {"x": np.ones((1, 1, 4, 10), np.float32)})["y"].shape == (10, 1, 5)


def test_annotations_consistent_with_the_nodes_are_kept():
    """A model whose annotations agree with its nodes builds as before, its output shape as declared."""
    model = _crnn_head([1, 32, 10], output=["time", 1, 5])
    graph = to_graph(load(model))
    assert graph.values["r"].shape == (1, 32, 10) and graph.values["y"].shape == (10, 1, 5)


# --- float64 ---------------------------------------------------------------------------------------------------

D, I64 = TensorProto.DOUBLE, TensorProto.INT64


def _typed_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    """inputs and outputs: (name, elem type, shape)."""
    graph = helper.make_graph(nodes, "f64", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_float64_shape_arithmetic_folds():
    """Sizes computed in double (x.view(int(x.size(0) * 0.5), -1) as some exporters trace it)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["sd"], to=D),
             helper.make_node("Mul", ["sd", "half"], ["sh"]),
             helper.make_node("Floor", ["sh"], ["sf"]),
             helper.make_node("Cast", ["sf"], ["si"], to=I64),
             helper.make_node("Concat", ["si", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0.5, 0.5]), "half"), numpy_helper.from_array(np.array([-1], np.int64),
                                                                                             "rest")]
    model = _typed_model(nodes, [("x", F32, [4, 6])], [("y", F32, ["a", "b", "c"])], inits)
    assert assert_matches_onnxruntime(model)["y"].shape == (2, 3, 4)


def test_float64_weights_cast_to_float32_fold():
    w = np.random.default_rng(7).standard_normal((3, 4))
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=F32), helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = _typed_model(nodes, [("x", F32, [2, 3])], [("y", F32, [2, 4])], [numpy_helper.from_array(w, "w")])
    assert_matches_onnxruntime(model)


FLOAT64_COMPUTED = {
    "cast_to_double": ([helper.make_node("Relu", ["x"], ["f"]), helper.make_node("Cast", ["f"], ["d"], to=D),
                        helper.make_node("Mul", ["d", "d"], ["m"]), helper.make_node("Cast", ["m"], ["y"], to=F32)],
                       F32, F32),
    "double_input": ([helper.make_node("Cast", ["x"], ["y"], to=F32)], D, F32),
    "double_constant_output": ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=D)],
                               F32, D),
}


@pytest.mark.parametrize("case", sorted(FLOAT64_COMPUTED))
def test_float64_at_run_time_matches_onnxruntime(case):
    nodes, x_type, y_type = FLOAT64_COMPUTED[case]
    model = _typed_model(nodes, [("x", x_type, [2, 3])], [("y", y_type, [2] if case.endswith("output") else [2, 3])])
    assert assert_matches_onnxruntime(model, tol=1e-12)["y"].dtype == (np.float64 if y_type == D else np.float32)


def test_a_float64_op_without_a_float64_kernel_is_refused_naming_it(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=D), helper.make_node("Sqrt", ["d"], ["q"], name="sqrt"),
             helper.make_node("Cast", ["q"], ["y"], to=F32)]
    model = _typed_model(nodes, [("x", F32, [2, 3])], [("y", F32, [2, 3])])
    with pytest.raises(aot.errors.UnsupportedOpError, match=r"node 'sqrt' \(Sqrt\): input 'd' is float64") as err:
        aot.build(model, target="host", out_dir=tmp_path)
    assert "float64 at run time in arithmetic" in str(err.value)


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m0plus"])
def test_float64_is_refused_on_a_target_without_double_precision(target, tmp_path):
    nodes = [helper.make_node("Add", ["x", "x"], ["y"], name="twice")]
    model = _typed_model(nodes, [("x", D, [2, 3])], [("y", D, [2, 3])])
    with pytest.raises(aot.errors.UnsupportedOpError, match=rf"node 'twice' \(Add\) computes 'y' in float64 at run "
                                                            rf"time, and target {target} has no double-precision FPU"):
        aot.build(model, target=target, out_dir=tmp_path)
