"""Graph passes, one at a time: the structure before and after each pass, and unchanged numerics.

Every model here is tiny. Structure is checked on the graphs the pass sees in the real pipeline order
(aot.graph.passes.PIPELINE up to the pass under test); numerics by compiling and running the whole
model with aot.check, which compares with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import aot
from aot.frontend.onnx import load, to_graph
from aot.graph.ir import Graph, Node, Value
from aot.graph.passes import (
    PIPELINE,
    canonicalize,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constant_views,
    fold_constants,
    fold_transposes,
    fuse_epilogues,
    optimize,
    recognize_activations,
    to_nhwc,
)
from aot.graph.passes.fuse_epilogues import MAX_EPILOGUE
from aot.graph.passes.to_nhwc import TO_NHWC

try:
    from oracle import assert_matches_onnxruntime, make_model
except ImportError:  # tests/ imported as a package
    from tests.oracle import assert_matches_onnxruntime, make_model


# --------------------------------------------------------------------------- helpers


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=name or f"{op}_{outputs[0]}", **attrs)


def randn(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


def bn_params(rng, prefix, c):
    return {f"{prefix}_scale": randn(rng, c, scale=1.0), f"{prefix}_bias": randn(rng, c),
            f"{prefix}_mean": randn(rng, c), f"{prefix}_var": rng.uniform(0.5, 2.0, c).astype(np.float32)}


def bn_node(prefix, x, y, **attrs):
    return node("BatchNormalization", [x, f"{prefix}_scale", f"{prefix}_bias", f"{prefix}_mean", f"{prefix}_var"],
                [y], name=prefix, **attrs)


def bn_affine(inits, prefix, eps=1e-5):
    """BN as y = x * a + b (float64)."""
    gamma, beta, mean, var = (inits[f"{prefix}_{k}"].astype(np.float64) for k in ("scale", "bias", "mean", "var"))
    a = gamma / np.sqrt(var + eps)
    return a, beta - mean * a


def imported(model) -> Graph:
    return to_graph(load(model))


def around(model, the_pass) -> tuple[Graph, Graph]:
    """The graphs just before and just after the first run of `the_pass` in the default pipeline."""
    graph = imported(model)
    for p in PIPELINE:
        before, graph = graph, p(graph)
        if p is the_pass:
            return before, graph
    raise AssertionError(f"{the_pass.__name__} is not in the pipeline")


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def nodes_of(graph: Graph, op: str):
    return [n for n in graph.nodes if n.op == op]


def producer(graph: Graph, value: str):
    return graph.producers()[value]


def assert_well_formed(graph: Graph) -> None:
    """Every input is defined before use, every value is produced once, every graph output is produced."""
    defined = set(graph.inputs) | set(graph.constants)
    for n in graph.nodes:
        for name in n.inputs:
            assert not name or name in defined, f"node {n.name} ({n.op}) reads {name!r} before it is defined"
            assert not name or name in graph.values, f"node {n.name} reads {name!r}, which has no Value"
        for name in n.outputs:
            assert name not in defined, f"{name!r} is produced twice (again by {n.name})"
            assert name in graph.values, f"node {n.name} writes {name!r}, which has no Value"
            defined.add(name)
    for name in graph.outputs:
        assert name in defined and name not in graph.inputs and name not in graph.constants, (
            f"graph output {name!r} is not computed by any node")


def assert_numerics(model) -> None:
    result = aot.check(model)
    assert result.comparisons, "no outputs compared"
    assert result.ok, result.comparisons


# --------------------------------------------------------------------------- fold_constants


def shape_chain_model():
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) @ Transpose(W): all of it constant but x."""
    rng = np.random.default_rng(1)
    nodes = [
        node("Shape", ["x"], ["s"], name="shape"),
        node("Gather", ["s", "idx0"], ["d0"], name="gather", axis=0),
        node("Unsqueeze", ["d0", "axes0"], ["d0u"], name="unsqueeze"),
        node("Concat", ["d0u", "minus1"], ["shp"], name="concat", axis=0),
        node("Reshape", ["x", "shp"], ["flat"], name="reshape"),
        node("Transpose", ["W"], ["Wt"], name="transpose_w", perm=[1, 0]),
        node("MatMul", ["flat", "Wt"], ["mm"], name="matmul"),
        node("Relu", ["mm"], ["y"], name="relu"),
    ]
    inits = {"idx0": i64(0), "axes0": i64([0]), "minus1": i64([-1]), "W": randn(rng, 5, 12)}
    return make_model(nodes, {"x": (2, 3, 4)}, {"y": None}, inits), inits


def test_fold_constants_shape_chain_and_weight_transpose():
    model, inits = shape_chain_model()
    before = imported(model)
    assert ops(before) == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Transpose", "MatMul", "Relu"]

    after = fold_constants(before)
    assert_well_formed(after)
    assert ops(after) == ["Reshape", "MatMul", "Relu"]
    np.testing.assert_array_equal(after.constants["shp"], [2, -1])
    assert after.constants["shp"].dtype == np.int64
    np.testing.assert_array_equal(after.constants["Wt"], inits["W"].T)
    assert producer(after, "flat").inputs == ("x", "shp")
    assert producer(after, "mm").inputs == ("flat", "Wt")
    # intermediate results of the chain are gone entirely; the input graph is untouched
    assert not {"s", "d0", "d0u"} & (set(after.values) | set(after.constants))
    assert len(before.nodes) == 8 and "shp" not in before.constants

    # downstream, the folded shape becomes a plain view and the folded weight a Gemm operand
    canon = canonicalize(after)
    assert ops(canon) == ["Reshape", "Gemm", "Unary"]
    assert canon.nodes[0].attrs["shape"] == (2, 12)
    assert_numerics(model)


def test_fold_constants_leaves_computed_nodes_alone():
    rng = np.random.default_rng(2)
    model = make_model(
        [node("Mul", ["a", "b"], ["ab"], name="const_mul"),
         node("Add", ["x", "ab"], ["y"], name="add")],
        {"x": (3, 4)}, {"y": None}, {"a": randn(rng, 3, 4), "b": randn(rng, 4)})
    before = imported(model)
    after = fold_constants(before)
    assert ops(after) == ["Add"]
    np.testing.assert_allclose(after.constants["ab"], before.constants["a"] * before.constants["b"])
    assert after.nodes[0] == before.nodes[1]
    assert_numerics(model)


# --------------------------------------------------------------------------- canonicalize


def test_canonicalize_gemm_folds_transB_and_alpha():
    rng = np.random.default_rng(3)
    W, b = randn(rng, 6, 8), randn(rng, 6)
    model = make_model([node("Gemm", ["x", "W", "b"], ["y"], name="fc", transB=1, alpha=0.5, beta=2.0)],
                       {"x": (3, 8)}, {"y": None}, {"W": W, "b": b})
    before, after = around(model, canonicalize)
    assert ops(before) == ["Gemm"] and before.nodes[0].attrs == {"transB": 1, "alpha": 0.5, "beta": 2.0}
    assert_well_formed(after)
    assert ops(after) == ["Gemm"], after.dump()     # no Transpose or Mul left over for transB / alpha
    gemm = after.nodes[0]
    assert gemm.attrs == {}
    x, w, bias = gemm.inputs
    assert x == "x" and gemm.outputs == ("y",)
    assert after.constants[w].shape == (8, 6)        # (K, N)
    np.testing.assert_allclose(after.constants[w], 0.5 * W.T, rtol=1e-6)
    np.testing.assert_allclose(after.constants[bias], 2.0 * b, rtol=1e-6)
    assert "W" not in after.constants                # the (N, K) original is not kept
    assert_numerics(model)


def test_canonicalize_views():
    rng = np.random.default_rng(4)
    nodes = [
        node("Relu", ["x"], ["xr"], name="relu"),
        node("Flatten", ["xr"], ["flat"], name="flatten", axis=1),
        node("Squeeze", ["q", "axes"], ["qs"], name="squeeze"),
        node("Sigmoid", ["qs"], ["qsig"], name="sigmoid"),
        node("Unsqueeze", ["qsig", "axes"], ["qu"], name="unsqueeze"),
        node("Identity", ["qu"], ["qi"], name="identity"),
        node("Neg", ["qi"], ["y2"], name="neg"),
        node("Gemm", ["flat", "W"], ["y1"], name="fc"),
    ]
    model = make_model(nodes, {"x": (2, 3, 1, 2), "q": (1, 4, 1)}, {"y1": None, "y2": None},
                       {"axes": i64([0]), "W": randn(rng, 6, 5)})
    before, after = around(model, canonicalize)
    assert {"Flatten", "Squeeze", "Unsqueeze", "Identity"} <= set(ops(before))
    assert_well_formed(after)
    assert not {"Flatten", "Squeeze", "Unsqueeze", "Identity"} & set(ops(after))
    expected = {"flat": ("xr", (2, 6)), "qs": ("q", (4, 1)), "qu": ("qsig", (1, 4, 1)), "qi": ("qu", (1, 4, 1))}
    for out, (src, shape) in expected.items():
        view = producer(after, out)
        assert view.op == "Reshape" and view.inputs == (src,) and view.attrs == {"shape": shape}, view
        assert after.shape(out) == shape
    assert_numerics(model)


def castlike_scalar_model(op="Mul"):
    """`Constant(0.5) -> CastLike(c, x) -> op(c, x)`: the scalar an inlined function's body reads (LeakyRelu's
    alpha in its expanded form); its Reshape view of the constant was once read as 0."""
    nodes = [
        helper.make_node("Constant", [], ["c"], value_float=0.5),
        node("CastLike", ["c", "x"], ["cc"], name="castlike"),
        node("Reshape", ["cc", "one"], ["cr"], name="reshape"),
        node(op, ["cr", "x"], ["y"], name="op"),
    ]
    return make_model(nodes, {"x": (3, 4)}, {"y": (3, 4)}, {"one": i64([1])})


@pytest.mark.parametrize("op", ["Mul", "Add", "Div", "Max"])
def test_views_of_constants_are_constants(op):
    model = castlike_scalar_model(op)
    graph = optimize(imported(model))
    assert [n.op for n in graph.nodes if n.op == "Reshape"] == [], graph.dump()
    assert_matches_onnxruntime(model, {"x": np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)})


def test_fold_constant_views_folds_views_of_views():
    g = Graph("g", (Node("Reshape", "a", ("c",), ("v1",), {"shape": (2, 3)}),
                    Node("Reshape", "b", ("v1",), ("v2",), {"shape": (6,)}),
                    Node("Relu", "r", ("x",), ("y",))),
              {"c": Value("c", (3, 2)), "v1": Value("v1", (2, 3)), "v2": Value("v2", (6,)),
               "x": Value("x", (6,)), "y": Value("y", (6,))},
              {"c": np.arange(6, dtype=np.float32).reshape(3, 2)}, ("x",), ("y", "v2"))
    folded = fold_constant_views(g)
    assert [n.name for n in folded.nodes] == ["r"]
    np.testing.assert_array_equal(folded.constants["v2"], np.arange(6, dtype=np.float32))


def test_canonicalize_unsupported_op_names_node_and_op(tmp_path):
    model = make_model([node("Relu", ["x"], ["r"], name="relu"), node("Einsum", ["r"], ["y"], name="my_einsum",
                                                                         equation="ij->ji")],
                       {"x": (3, 3)}, {"y": None})
    graph = fold_constants(imported(model))
    with pytest.raises(aot.UnsupportedOpError) as err:
        canonicalize(graph)
    assert "my_einsum" in str(err.value) and "Einsum" in str(err.value)
    assert isinstance(err.value, aot.AotError)
    with pytest.raises(aot.UnsupportedOpError, match="my_einsum.*Einsum"):
        aot.build(model, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()           # a failed build leaves nothing behind


def test_canonicalize_computed_conv_transpose_weight_takes_the_direct_kernel():
    """A weight fed at run time is laid out by a Gather (constant indices into the weight padded with a
    zero) for ConvDirect; the values are checked against onnxruntime in test_ops_resample.py."""
    model = make_model([node("ConvTranspose", ["x", "w"], ["y"], name="dyn_conv", kernel_shape=[1, 1])],
                       {"x": (1, 2, 3, 3), "w": (2, 4, 1, 1)}, {"y": None})
    after = canonicalize(fold_constants(imported(model)))
    assert_well_formed(after)
    assert {"Pad", "Gather", "ConvDirect", "PhaseInterleave"} <= set(ops(after)), ops(after)
    gather = nodes_of(after, "Gather")[0]
    assert after.constants[gather.inputs[1]].shape == (2, 4)     # (kh*kw*C/g, outputs)


# --------------------------------------------------------------------------- fold_batchnorm


def test_fold_batchnorm_into_conv():
    rng = np.random.default_rng(5)
    inits = {"w": randn(rng, 4, 3, 3, 3), "cb": randn(rng, 4), **bn_params(rng, "bn", 4)}
    model = make_model([node("Conv", ["x", "w", "cb"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        bn_node("bn", "c", "y", epsilon=1e-3)],
                       {"x": (1, 3, 6, 6)}, {"y": None}, inits)
    before, after = around(model, fold_batchnorm)
    assert ops(before) == ["Conv", "BatchNormalization"]
    assert_well_formed(after)
    assert ops(after) == ["Conv"]
    conv = after.nodes[0]
    assert conv.outputs == ("y",) and conv.inputs[0] == "x"
    a, b = bn_affine(inits, "bn", eps=1e-3)
    np.testing.assert_allclose(after.constants[conv.inputs[1]], inits["w"] * a.reshape(-1, 1, 1, 1), rtol=1e-5)
    np.testing.assert_allclose(after.constants[conv.inputs[2]], inits["cb"] * a + b, rtol=1e-5, atol=1e-6)
    assert not any(k.startswith("bn_") for k in after.constants)     # BN parameters dropped
    assert_numerics(model)


def test_fold_batchnorm_into_conv_without_bias():
    rng = np.random.default_rng(6)
    inits = {"w": randn(rng, 4, 2, 1, 1), **bn_params(rng, "bn", 4)}
    model = make_model([node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]), bn_node("bn", "c", "y")],
                       {"x": (1, 2, 5, 5)}, {"y": None}, inits)
    _, after = around(model, fold_batchnorm)
    assert ops(after) == ["Conv"]
    _, b = bn_affine(inits, "bn")
    np.testing.assert_allclose(after.constants[after.nodes[0].inputs[2]], b, rtol=1e-5, atol=1e-6)
    assert_numerics(model)


def test_fold_batchnorm_into_gemm():
    rng = np.random.default_rng(7)
    inits = {"W": randn(rng, 8, 6), "gb": randn(rng, 6), **bn_params(rng, "bn", 6)}
    model = make_model([node("Gemm", ["x", "W", "gb"], ["g"], name="fc"), bn_node("bn", "g", "y")],
                       {"x": (3, 8)}, {"y": None}, inits)
    _, after = around(model, fold_batchnorm)
    assert ops(after) == ["Gemm"]
    a, _ = bn_affine(inits, "bn")
    np.testing.assert_allclose(after.constants[after.nodes[0].inputs[1]], inits["W"] * a.reshape(1, -1), rtol=1e-5)
    assert_numerics(model)


def test_lone_batchnorm_becomes_mul_add():
    rng = np.random.default_rng(8)
    inits = bn_params(rng, "bn", 4)
    model = make_model([node("Relu", ["x"], ["r"], name="relu"), bn_node("bn", "r", "y")],
                       {"x": (1, 4, 3, 3)}, {"y": None}, inits)
    before, after = around(model, fold_batchnorm)
    assert ops(before) == ["Unary", "BatchNormalization"]
    assert_well_formed(after)
    assert ops(after) == ["Unary", "Mul", "Add"]
    mul, add = after.nodes[1:]
    assert mul.inputs[0] == "r" and add.inputs[0] == mul.outputs[0] and add.outputs == ("y",)
    a, b = bn_affine(inits, "bn")
    np.testing.assert_allclose(after.constants[mul.inputs[1]], a.reshape(4, 1, 1), rtol=1e-6)
    np.testing.assert_allclose(after.constants[add.inputs[1]], b.reshape(4, 1, 1), rtol=1e-5, atol=1e-6)
    assert_numerics(model)


def test_batchnorm_after_shared_conv_is_not_folded():
    """The Conv's output is also used elsewhere, so its weights must stay: BN becomes Mul + Add."""
    rng = np.random.default_rng(9)
    inits = {"w": randn(rng, 4, 3, 1, 1), "cb": randn(rng, 4), **bn_params(rng, "bn", 4)}
    model = make_model([node("Conv", ["x", "w", "cb"], ["c"], name="conv", kernel_shape=[1, 1]),
                        bn_node("bn", "c", "b"),
                        node("Add", ["b", "c"], ["y"], name="add")],
                       {"x": (1, 3, 4, 4)}, {"y": None}, inits)
    _, after = around(model, fold_batchnorm)
    assert ops(after) == ["Conv", "Mul", "Add", "Add"]
    conv = after.nodes[0]
    assert conv.inputs[1:] == ("w", "cb") and conv.outputs == ("c",)
    assert_numerics(model)


# --------------------------------------------------------------------------- to_nhwc


def cnn_to_vector_model():
    """Conv -> Relu -> Conv -> GlobalAveragePool -> Flatten -> Gemm: only the input needs converting."""
    rng = np.random.default_rng(10)
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"], name="relu1"),
        node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3], strides=[2, 2]),
        node("GlobalAveragePool", ["c2"], ["gap"], name="gap"),
        node("Flatten", ["gap"], ["flat"], name="flatten"),
        node("Gemm", ["flat", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits = {"w1": randn(rng, 4, 3, 3, 3), "b1": randn(rng, 4), "w2": randn(rng, 6, 4, 3, 3), "b2": randn(rng, 6),
             "wf": randn(rng, 5, 6), "bf": randn(rng, 5)}
    return make_model(nodes, {"x": (1, 3, 9, 9)}, {"y": None}, inits)


def test_to_nhwc_convs_and_minimal_transposes():
    model = cnn_to_vector_model()
    before, after = around(model, to_nhwc)
    assert_well_formed(after)
    assert "Transpose" not in ops(before)
    convs = nodes_of(after, "Conv")
    assert len(convs) == 2
    for conv, old in zip(convs, nodes_of(before, "Conv")):
        assert conv.attrs["layout"] == "NHWC"
        x = conv.inputs[0]
        assert len(after.shape(x)) == 4
        assert after.shape(x) == tuple(before.shape(old.inputs[0])[p] for p in TO_NHWC)
        assert after.shape(conv.outputs[0]) == tuple(before.shape(old.outputs[0])[p] for p in TO_NHWC)
        assert conv.inputs[1:] == old.inputs[1:]      # weights untouched: the kernel reads them as they are
    assert nodes_of(after, "GlobalAveragePool")[0].attrs["layout"] == "NHWC"
    # one real transpose: the graph input into NHWC. Relu follows the NHWC layout (no round trip)
    transposes = nodes_of(after, "Transpose")
    assert [(t.inputs, t.attrs["perm"]) for t in transposes] == [(("x",), TO_NHWC)]
    assert after.shape(nodes_of(after, "Unary")[0].inputs[0]) == (1, 9, 9, 4)
    # back to NCHW for Flatten: (1,1,1,C) -> (1,C,1,1) moves no data, so it is a view
    gap_out = nodes_of(after, "GlobalAveragePool")[0].outputs[0]
    (to_nchw,) = [n for n in after.nodes if n.inputs == (gap_out,)]
    assert to_nchw.op == "Reshape" and after.values[to_nchw.outputs[0]].size == 6
    assert after.shape(gap_out) == (1, 1, 1, 6)
    # graph inputs and outputs keep the model's layout
    assert after.shape("x") == (1, 3, 9, 9) and after.shape("y") == (1, 5)
    assert_numerics(model)


def test_to_nhwc_converts_4d_graph_output_back():
    rng = np.random.default_rng(11)
    model = make_model([node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        node("Add", ["c", "shift"], ["y"], name="shift_add")],
                       {"x": (1, 2, 5, 4)}, {"y": None},
                       {"w": randn(rng, 3, 2, 3, 3), "b": randn(rng, 3), "shift": randn(rng, 3, 1, 1)})
    _, after = around(model, to_nhwc)
    assert_well_formed(after)
    transposes = nodes_of(after, "Transpose")
    assert [t.attrs["perm"] for t in transposes] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    assert transposes[-1].outputs == ("y",) and after.shape("y") == (1, 3, 5, 4)
    add = nodes_of(after, "Add")[0]                  # the Add runs in NHWC with its constant permuted
    assert after.shape(add.outputs[0]) == (1, 5, 4, 3)
    assert after.constants[add.inputs[1]].shape == (1, 1, 1, 3)
    assert_numerics(model)


def test_to_nhwc_transpose_of_1c11_is_a_view():
    model = make_model([node("Transpose", ["x"], ["t"], name="tr", perm=[0, 2, 3, 1]),
                        node("Relu", ["t"], ["y"], name="relu")],
                       {"x": (1, 7, 1, 1)}, {"y": None})
    before, after = around(model, to_nhwc)
    assert ops(before) == ["Transpose", "Unary"]
    assert_well_formed(after)
    assert ops(after) == ["Reshape", "Unary"]
    view = after.nodes[0]
    assert view.inputs == ("x",) and view.outputs == ("t",) and view.attrs == {"shape": (1, 1, 1, 7)}
    assert_numerics(model)


def test_to_nhwc_keeps_real_transposes():
    model = make_model([node("Transpose", ["x"], ["t"], name="tr", perm=[0, 2, 3, 1]),
                        node("Relu", ["t"], ["y"], name="relu")],
                       {"x": (1, 3, 2, 1)}, {"y": None})
    _, after = around(model, to_nhwc)
    assert ops(after) == ["Transpose", "Unary"]
    assert_numerics(model)


def test_to_nhwc_graph_output_also_read_in_nchw():
    rng = np.random.default_rng(12)
    model = make_model([node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        node("Flatten", ["y"], ["z"], name="flatten")],
                       {"x": (1, 3, 4, 4)}, {"y": None, "z": None},
                       {"w": randn(rng, 4, 3, 3, 3), "b": randn(rng, 4)})
    _, after = around(model, to_nhwc)
    assert_well_formed(after)
    assert_numerics(model)


def test_to_nhwc_conversion_back_has_nchw_shape():
    _, after = around(cnn_to_vector_model(), to_nhwc)
    gap_out = nodes_of(after, "GlobalAveragePool")[0].outputs[0]
    (to_nchw,) = [n for n in after.nodes if n.inputs == (gap_out,)]
    assert after.shape(to_nchw.outputs[0]) == (1, 6, 1, 1)
    assert to_nchw.attrs["shape"] == (1, 6, 1, 1)


def test_to_nhwc_conv_output_into_batched_matmul():
    rng = np.random.default_rng(19)
    model = make_model([node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[1, 1]),
                        node("MatMul", ["c", "d"], ["y"], name="bmm")],
                       {"x": (1, 3, 3, 4), "d": (1, 2, 4, 3)}, {"y": None},
                       {"w": randn(rng, 2, 3, 1, 1), "b": randn(rng, 2)})
    assert_numerics(model)
    before, after = around(model, to_nhwc)
    matmul = nodes_of(after, "MatMul")[0]
    assert after.shape(matmul.inputs[0]) == before.shape("c") == (1, 2, 3, 4)


# --------------------------------------------------------------------------- recognize_activations


def _conv_then(rng, activation_nodes, extra_outputs=()):
    """Conv (with BatchNormalization) -> the nodes given, which read "c" and write "y"."""
    inits = {"w": randn(rng, 8, 3, 3, 3), **bn_params(rng, "bn", 8), "three": np.float32(3.0),
             "six": np.float32(6.0), "zero": np.float32(0.0), "sixth": np.float32(1 / 6)}
    nodes = [node("Conv", ["x", "w"], ["cv"], name="conv", pads=[1, 1, 1, 1]), bn_node("bn", "cv", "c"),
             *activation_nodes]
    outputs = {"y": None, **{name: None for name in extra_outputs}}
    return make_model(nodes, {"x": (1, 3, 7, 6)}, outputs, inits)


def computing(graph: Graph) -> list[str]:
    """The ops of the graph but the layout changes at its edges."""
    return [op for op in ops(graph) if op != "Transpose"]


HARD_SWISH_FORMS = {
    "clip-div": [node("Add", ["c", "three"], ["a"]), node("Clip", ["a", "zero", "six"], ["q"]),
                 node("Mul", ["c", "q"], ["m"]), node("Div", ["m", "six"], ["y"])],
    "clip-mul-sixth": [node("Add", ["three", "c"], ["a"]), node("Clip", ["a", "zero", "six"], ["q"]),
                       node("Mul", ["q", "c"], ["m"]), node("Mul", ["sixth", "m"], ["y"])],
    "hard-sigmoid": [node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5), node("Mul", ["h", "c"], ["y"])],
}


@pytest.mark.parametrize("form", list(HARD_SWISH_FORMS))
def test_spelled_out_hard_swish_is_one_activation_in_the_convolution(form):
    """HardSwish as Paddle and older PyTorch exports spell it (x * Clip(x + 3, 0, 6) / 6, or * 1/6, or
    x * HardSigmoid(x)) becomes one Unary hard_swish, which the Conv takes as its epilogue: one kernel."""
    model = _conv_then(np.random.default_rng(11), HARD_SWISH_FORMS[form])
    before, after = around(model, recognize_activations)
    unary = nodes_of(after, "Unary")
    assert ops(after) == ["Conv", "Unary"] and unary[0].attrs["fn"] == "hard_swish" and unary[0].outputs == ("y",)
    assert_well_formed(after)
    assert computing(optimize(imported(model))) == ["Conv"]
    assert_numerics(model)


def test_spelled_out_silu_is_one_activation_in_a_pass_of_its_own():
    """x * Sigmoid(x) becomes one Unary silu, which runs after the Conv, not in its epilogue (OWN_PASS)."""
    model = _conv_then(np.random.default_rng(12), [node("Sigmoid", ["c"], ["s"]), node("Mul", ["c", "s"], ["y"])])
    _, after = around(model, recognize_activations)
    assert ops(after) == ["Conv", "Unary"] and nodes_of(after, "Unary")[0].attrs["fn"] == "silu"
    optimized = optimize(imported(model))
    assert computing(optimized) == ["Conv", "Unary"] and not nodes_of(optimized, "Conv")[0].attrs.get("acts")
    assert_numerics(model)


@pytest.mark.parametrize("case", ["inner-value-read-elsewhere", "other-operand", "other-constant"])
def test_activations_spelled_otherwise_are_left_as_they_are(case):
    """Not taken: a pattern whose inner value something else reads (the Sigmoid's result is an output
    too), a product of the Sigmoid of one tensor with another, a Clip form adding 2 instead of 3."""
    nodes, extra = {
        "inner-value-read-elsewhere": ([node("Sigmoid", ["c"], ["s"]), node("Mul", ["c", "s"], ["y"])], ["s"]),
        "other-operand": ([node("Relu", ["c"], ["r"]), node("Sigmoid", ["c"], ["s"]), node("Mul", ["r", "s"], ["y"])],
                          []),
        "other-constant": ([node("Add", ["c", "six"], ["a"]), node("Clip", ["a", "zero", "six"], ["q"]),
                            node("Mul", ["c", "q"], ["m"]), node("Div", ["m", "six"], ["y"])], []),
    }[case]
    model = _conv_then(np.random.default_rng(13), nodes, extra)
    before, after = around(model, recognize_activations)
    assert ops(after) == ops(before)
    assert_numerics(model)


# --------------------------------------------------------------------------- fuse_epilogues


def test_fuse_conv_bias_add_relu():
    rng = np.random.default_rng(13)
    inits = {"w": randn(rng, 4, 3, 3, 3), "cb": randn(rng, 4), "shift": randn(rng, 4, 1, 1)}
    model = make_model([node("Conv", ["x", "w", "cb"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        node("Add", ["c", "shift"], ["a"], name="bias_add"),
                        node("Relu", ["a"], ["r"], name="relu"),
                        node("GlobalAveragePool", ["r"], ["y"], name="gap")],
                       {"x": (1, 3, 6, 6)}, {"y": None}, inits)
    before, after = around(model, fuse_epilogues)
    assert ops(before) == ["Transpose", "Conv", "Add", "Unary", "GlobalAveragePool", "Reshape"]
    assert_well_formed(after)
    assert ops(after) == ["Transpose", "Conv", "GlobalAveragePool", "Reshape"]
    conv = nodes_of(after, "Conv")[0]
    assert conv.attrs["acts"] == (("relu", ()),)
    assert len(conv.inputs) == 3
    np.testing.assert_allclose(after.constants[conv.inputs[2]], inits["cb"] + inits["shift"].reshape(-1), rtol=1e-6)
    assert conv.outputs[0] == nodes_of(after, "GlobalAveragePool")[0].inputs[0]
    assert_numerics(model)


def test_fuse_residual_add_as_fourth_input():
    rng = np.random.default_rng(14)
    inits = {"w1": randn(rng, 4, 4, 3, 3), "b1": randn(rng, 4), "w2": randn(rng, 4, 4, 1, 1), "b2": randn(rng, 4)}
    model = make_model([node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        node("Relu", ["c1"], ["r1"], name="relu1"),
                        node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
                        node("Add", ["r1", "c2"], ["res"], name="residual"),
                        node("Relu", ["res"], ["y"], name="relu2")],
                       {"x": (1, 4, 5, 5)}, {"y": None}, inits)
    before, after = around(model, fuse_epilogues)
    assert ops(before) == ["Transpose", "Conv", "Unary", "Conv", "Add", "Unary", "Transpose"]
    assert_well_formed(after)
    assert ops(after) == ["Transpose", "Conv", "Conv", "Transpose"]
    conv1, conv2 = nodes_of(after, "Conv")
    assert conv1.attrs["acts"] == (("relu", ()),)
    assert len(conv2.inputs) == 4
    assert conv2.inputs[0] == conv1.outputs[0] and conv2.inputs[3] == conv1.outputs[0]   # residual = r1
    assert conv2.attrs["acts"] == (("relu", ()),)                                         # applied after the add
    assert after.shape(conv2.inputs[3]) == after.shape(conv2.outputs[0])
    assert_numerics(model)


def test_fuse_gemm_bias_and_activation():
    rng = np.random.default_rng(15)
    model = make_model([node("MatMul", ["x", "W"], ["m"], name="mm"),
                        node("Add", ["m", "bias"], ["a"], name="bias_add"),
                        node("Tanh", ["a"], ["t"], name="tanh"),
                        node("Mul", ["t", "t"], ["y"], name="square")],
                       {"x": (3, 8)}, {"y": None}, {"W": randn(rng, 8, 5), "bias": randn(rng, 5)})
    before, after = around(model, fuse_epilogues)
    assert ops(before) == ["Gemm", "Add", "Unary", "Mul"]
    assert ops(after) == ["Gemm", "Mul"]
    gemm = after.nodes[0]
    assert gemm.attrs["acts"] == (("tanh", ()),) and gemm.inputs[2]
    assert_numerics(model)


def test_fuse_per_channel_mul_scales_conv_weights():
    rng = np.random.default_rng(20)
    inits = {"w": randn(rng, 3, 2, 3, 3), "cb": randn(rng, 3),
             "scale": randn(rng, 3, 1, 1), "shift": randn(rng, 3, 1, 1)}
    model = make_model([node("Conv", ["x", "w", "cb"], ["c"], name="conv", kernel_shape=[3, 3]),
                        node("Mul", ["c", "scale"], ["m"], name="scale_mul"),
                        node("Add", ["m", "shift"], ["a"], name="shift_add"),
                        node("Relu", ["a"], ["r"], name="relu"),
                        node("GlobalMaxPool", ["r"], ["y"], name="gmp")],
                       {"x": (1, 2, 6, 5)}, {"y": None}, inits)
    before, after = around(model, fuse_epilogues)
    assert ops(before) == ["Transpose", "Conv", "Mul", "Add", "Unary", "GlobalMaxPool", "Reshape"]
    assert_well_formed(after)
    assert ops(after) == ["Transpose", "Conv", "GlobalMaxPool", "Reshape"]
    conv = nodes_of(after, "Conv")[0]
    s = inits["scale"].reshape(-1)
    np.testing.assert_allclose(after.constants[conv.inputs[1]], inits["w"] * s.reshape(-1, 1, 1, 1), rtol=1e-6)
    np.testing.assert_allclose(after.constants[conv.inputs[2]], inits["cb"] * s + inits["shift"].reshape(-1),
                               rtol=1e-5, atol=1e-6)
    assert conv.attrs["acts"] == (("relu", ()),)
    assert_numerics(model)


def test_batchnorm_after_biased_matmul_becomes_one_gemm():
    """MatMul + bias Add + BN + Relu: BN is a lone Mul + Add, and all of it fuses into the Gemm."""
    rng = np.random.default_rng(21)
    inits = {"W": randn(rng, 8, 6), "mb": randn(rng, 6), **bn_params(rng, "bn", 6)}
    model = make_model([node("MatMul", ["x", "W"], ["m"], name="mm"),
                        node("Add", ["m", "mb"], ["a"], name="bias_add"),
                        bn_node("bn", "a", "n"),
                        node("Relu", ["n"], ["y"], name="relu")],
                       {"x": (4, 8)}, {"y": None}, inits)
    _, folded = around(model, fold_batchnorm)
    assert ops(folded) == ["Gemm", "Add", "Mul", "Add", "Unary"]
    _, after = around(model, fuse_epilogues)
    assert_well_formed(after)
    assert ops(after) == ["Gemm"]
    gemm = after.nodes[0]
    a, b = bn_affine(inits, "bn")
    np.testing.assert_allclose(after.constants[gemm.inputs[1]], inits["W"] * a.reshape(1, -1), rtol=1e-5)
    np.testing.assert_allclose(after.constants[gemm.inputs[2]], inits["mb"] * a + b, rtol=1e-5, atol=1e-6)
    assert gemm.attrs["acts"] == (("relu", ()),)
    assert_numerics(model)


def test_fuse_mul_not_after_activation_or_residual():
    """x*s after a Relu or after a residual add cannot move into the weights."""
    rng = np.random.default_rng(22)
    model = make_model([node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[1, 1]),
                        node("Relu", ["c"], ["r"], name="relu"),
                        node("Mul", ["r", "s"], ["m"], name="scale_after_relu"),
                        node("Conv", ["m", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
                        node("Add", ["c2", "m"], ["res"], name="residual"),
                        node("Mul", ["res", "s"], ["y"], name="scale_after_residual")],
                       {"x": (1, 3, 4, 4)}, {"y": None},
                       {"w": randn(rng, 3, 3, 1, 1), "b": randn(rng, 3), "s": randn(rng, 3, 1, 1),
                        "w2": randn(rng, 3, 3, 1, 1), "b2": randn(rng, 3)})
    _, after = around(model, fuse_epilogues)
    assert_well_formed(after)
    assert ops(after).count("Mul") == 2
    assert_numerics(model)


def test_fuse_stops_at_shared_values():
    """An anchor whose output has a second user must keep writing it: nothing is fused."""
    rng = np.random.default_rng(16)
    model = make_model([node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[1, 1]),
                        node("Relu", ["c"], ["r"], name="relu"),
                        node("Add", ["r", "c"], ["y"], name="add")],
                       {"x": (1, 2, 3, 3)}, {"y": None}, {"w": randn(rng, 2, 2, 1, 1), "b": randn(rng, 2)})
    before, after = around(model, fuse_epilogues)
    assert ops(after) == ops(before)
    assert "acts" not in nodes_of(after, "Conv")[0].attrs
    assert_numerics(model)


def test_fuse_long_chain_in_bounded_epilogues():
    """A chain of activations fuses in one walk, into kernels of at most MAX_EPILOGUE activations
    after the anchor, each node's position that of the last node it absorbed."""
    count = 2 * MAX_EPILOGUE + 5
    fns = ["Relu", "Tanh", "Sigmoid", "Neg"]
    model = make_model([node(fns[i % 4], [f"t{i}" if i else "x"], [f"t{i + 1}" if i < count - 1 else "y"],
                             name=f"n{i}") for i in range(count)], {"x": (1, 8)}, {"y": None}, {})
    _, after = around(model, fuse_epilogues)
    assert_well_formed(after)
    assert [len(n.attrs.get("acts", ())) for n in after.nodes] == [MAX_EPILOGUE, MAX_EPILOGUE, 2]
    assert [n.outputs[0] for n in after.nodes] == [f"t{MAX_EPILOGUE + 1}", f"t{2 * MAX_EPILOGUE + 2}", "y"]
    assert_numerics(model)


# --------------------------------------------------------------------------- eliminate_dead_code


def test_eliminate_dead_code_drops_unused_branch(tmp_path):
    rng = np.random.default_rng(17)
    model = make_model([node("Relu", ["x"], ["y"], name="live_relu"),
                        node("Sigmoid", ["x"], ["s"], name="dead_sigmoid"),
                        node("Mul", ["s", "dead_w"], ["dead"], name="dead_mul"),
                        node("Tanh", ["dead"], ["dead2"], name="dead_tanh")],
                       {"x": (2, 5)}, {"y": None}, {"dead_w": randn(rng, 5)})
    before = canonicalize(fold_constants(imported(model)))
    assert len(before.nodes) == 4 and "dead_w" in before.constants
    after = eliminate_dead_code(before)
    assert_well_formed(after)
    assert [n.name for n in after.nodes] == [before.nodes[0].name]
    assert after.nodes[0].attrs["fn"] == "relu"
    assert "dead_w" not in after.constants
    assert not {"s", "dead", "dead2"} & set(after.values)
    assert eliminate_dead_code(after) == after          # idempotent
    # the real build emits no kernel for the dead branch
    artifact = aot.build(model, out_dir=tmp_path / "out")
    assert [c.node.op for c in artifact.program.calls] == ["Unary"]
    assert_numerics(model)


def test_eliminate_dead_code_keeps_multi_output_prefix():
    """A node is live if any output is; everything feeding a live node stays."""
    rng = np.random.default_rng(18)
    model = make_model([node("Add", ["x", "c"], ["a"], name="add"),
                        node("Relu", ["a"], ["r"], name="relu"),
                        node("Neg", ["a"], ["unused"], name="neg"),
                        node("Mul", ["r", "a"], ["y"], name="mul")],
                       {"x": (2, 3)}, {"y": None}, {"c": randn(rng, 3)})
    before = canonicalize(fold_constants(imported(model)))
    after = eliminate_dead_code(before)
    assert ops(after) == ["Add", "Unary", "Mul"]
    assert "c" in after.constants
    assert_numerics(model)


# --------------------------------------------------------------------------- the pipeline as a whole


def test_every_pass_keeps_the_graph_well_formed():
    seen = []

    def on_pass(name, graph):
        seen.append(name)
        assert_well_formed(graph)

    from aot.graph.passes import optimize

    optimize(imported(cnn_to_vector_model()), on_pass)
    assert seen == [p.__name__ for p in PIPELINE]


def test_transpose_after_an_elementwise_kernel_is_written_by_it():
    """Sigmoid of the model's input runs in NCHW; the layout change to the Conv's NHWC folds into it."""
    rng = np.random.default_rng(15)
    model = make_model([node("Sigmoid", ["x"], ["s"], name="sig"),
                        node("Conv", ["s", "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                       {"x": (1, 3, 6, 5)}, {"y": None}, {"w": randn(rng, 4, 3, 3, 3)})
    before, after = around(model, fold_transposes)
    assert ops(before)[:2] == ["Unary", "Transpose"]
    assert ops(after)[:2] == ["Unary", "Conv"]
    assert nodes_of(after, "Unary")[0].attrs["perm"] == (0, 2, 3, 1)
    assert_numerics(model)
