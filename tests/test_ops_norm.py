"""Normalization ops (LayerNormalization, RMSNormalization, InstanceNormalization, GroupNormalization,
LpNormalization, MeanVarianceNormalization, LRN, BatchNormalization with computed statistics) and a
small transformer encoder, against onnxruntime.

Sweeps run on the host; the tests that take the `target` fixture also run under qemu on AArch64 and
a Cortex-M4.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import oracle
import pytest
from onnx import helper, numpy_helper
from oracle import assert_matches_onnxruntime, make_model

import aot

QEMU = pytest.mark.qemu


@pytest.fixture(params=["host", pytest.param("aarch64", marks=QEMU), pytest.param("cortex-m4", marks=QEMU)])
def target(request, monkeypatch):
    monkeypatch.setattr(oracle, "TARGET", request.param)
    return request.param


def randn(rng, *shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def check(op, inputs, inits=None, opset=17, tol=1e-4, feeds=None, outputs=None, seed=0, **attrs):
    """One `op` node reading "x" (and the other named inputs, graph inputs or initializers)."""
    rng = np.random.default_rng(seed)
    inits = inits or {}
    names = list(inputs) + list(inits)
    node = helper.make_node(op, names, list(outputs or ["y"]), name=f"my_{op}", **attrs)
    shapes = {name: inputs["x"] if name == "y" else None for name in outputs or ["y"] if name}
    model = make_model([node], inputs, shapes, inits, opset=opset)
    if feeds is None:
        feeds = {name: randn(rng, *shape) for name, shape in inputs.items()}
    return assert_matches_onnxruntime(model, feeds, tol=tol)


def refused(model: onnx.ModelProto, *words: str) -> None:
    """aot refuses the model with one message naming the node, the op and `words`."""
    with pytest.raises(aot.UnsupportedOpError) as excinfo:
        aot.build(model)
    message = str(excinfo.value)
    for word in (model.graph.node[0].name, model.graph.node[0].op_type, *words):
        assert word in message, message


# --------------------------------------------------------------------------- LayerNormalization

# id: (input shape, axis); blocks around the vector widths (4, 8, 16 lanes) and a block of 1
LAYERNORM_CASES = {
    "last_37": ((2, 5, 37), -1),
    "last_16": ((3, 16), -1),
    "last_15": ((3, 15), 1),
    "last_17": ((2, 17), -1),
    "last_1": ((4, 1), -1),
    "axis0": ((3, 8), 0),
    "4d_axis1": ((2, 3, 4, 5), 1),
    "4d_axis_neg2": ((2, 3, 4, 5), -2),
    "4d_axis0": ((2, 3, 4, 5), -4),
}


@pytest.mark.parametrize("case", list(LAYERNORM_CASES))
def test_layernorm(case):
    shape, axis = LAYERNORM_CASES[case]
    rng = np.random.default_rng(1)
    inner = shape[axis % len(shape):]
    check("LayerNormalization", {"x": shape}, {"s": randn(rng, *inner), "b": randn(rng, *inner)}, axis=axis)


def test_layernorm_representative(target):
    """Computed scale and bias, the Mean and InvStdDev outputs, a non-default epsilon."""
    check("LayerNormalization", {"x": (3, 4, 21), "s": (21,), "b": (21,)}, outputs=["y", "mean", "inv_std"],
          epsilon=1e-3)


def test_layernorm_options():
    rng = np.random.default_rng(2)
    check("LayerNormalization", {"x": (2, 7, 19)}, {"s": randn(rng, 19)})                    # no bias
    check("LayerNormalization", {"x": (2, 6, 10)}, {"s": randn(rng, 1, 10), "b": randn(rng, 10)},  # scale (1, D)
          axis=-1)
    check("LayerNormalization", {"x": (4, 9)}, {"s": randn(rng, 9)}, outputs=["y", "", "inv_std"])


def test_layernorm_large_mean():
    """Values far from zero with a small spread: the two-pass variance keeps the relative accuracy."""
    rng = np.random.default_rng(3)
    x = randn(rng, 3, 64, scale=0.01, shift=1000.0)
    check("LayerNormalization", {"x": (3, 64)}, {"s": randn(rng, 64), "b": randn(rng, 64)}, feeds={"x": x},
          tol=2e-3)


def test_layernorm_broadcast_computed_scale():
    """A computed scale smaller than the normalized shape is broadcast (onnxruntime accepts it)."""
    check("LayerNormalization", {"x": (2, 3, 8), "s": (8,), "b": (1, 8)}, axis=1)


def test_layernorm_refusals():
    model = make_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="my_ln", stash_type=11)],
                       {"x": (2, 8)}, {"y": (2, 8)}, {"s": np.ones(8, np.float32)})
    refused(model, "stash_type")
    model = make_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="my_ln", axis=-1)],
                       {"x": (2, 8), "s": (3,)}, {"y": (2, 8)})
    refused(model, "scale of shape [3] does not broadcast to [8]")


# --------------------------------------------------------------------------- RMSNormalization (opset 23)

@pytest.mark.parametrize("shape,axis", [((2, 5, 32), -1), ((3, 17), -1), ((2, 3, 4, 5), 1), ((2, 1), -1)])
def test_rmsnorm(shape, axis):
    rng = np.random.default_rng(4)
    inner = shape[axis % len(shape):]
    check("RMSNormalization", {"x": shape}, {"s": randn(rng, *inner)}, opset=23, axis=axis)


def test_rmsnorm_representative(target):
    check("RMSNormalization", {"x": (2, 6, 24), "s": (24,)}, opset=23, epsilon=1e-6)


# --------------------------------------------------------------------------- InstanceNormalization

@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 17, 4, 4), (2, 4, 19), (1, 2, 1, 1), (1, 5, 2, 3, 4)])
def test_instancenorm(shape):
    rng = np.random.default_rng(5)
    c = shape[1]
    check("InstanceNormalization", {"x": shape}, {"s": randn(rng, c), "b": randn(rng, c)}, epsilon=1e-3)


def test_instancenorm_representative(target):
    """Computed scale and bias, after a Conv (the NHWC activation is converted back first)."""
    rng = np.random.default_rng(6)
    conv = helper.make_node("Conv", ["x", "w"], ["h"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    norm = helper.make_node("InstanceNormalization", ["h", "s", "b"], ["y"], name="in")
    model = make_model([conv, norm], {"x": (1, 3, 9, 11), "s": (6,), "b": (6,)}, {"y": (1, 6, 9, 11)},
                       {"w": randn(rng, 6, 3, 3, 3, scale=0.3)})
    assert_matches_onnxruntime(model)


# --------------------------------------------------------------------------- GroupNormalization

@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 2), ((1, 8, 3, 3), 1), ((1, 8, 3, 3), 8), ((2, 12, 9), 3),
                                          ((1, 4, 1, 1), 2)])
def test_groupnorm(shape, groups):
    """Opset 21: scale and bias per channel."""
    rng = np.random.default_rng(7)
    c = shape[1]
    check("GroupNormalization", {"x": shape}, {"s": randn(rng, c), "b": randn(rng, c)}, opset=21,
          num_groups=groups)


def test_groupnorm_representative(target):
    check("GroupNormalization", {"x": (2, 6, 4, 5), "s": (6,), "b": (6,)}, opset=21, num_groups=3, epsilon=1e-2)


def test_groupnorm_opset18(monkeypatch):
    """Opset 18: scale and bias per group. onnx's checker calls the op deprecated at 18 (aot's frontend
    refuses such a model for that reason, onnxruntime runs it): bypass the checker to reach the rule."""
    rng = np.random.default_rng(8)
    graph = helper.make_graph(
        [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)], "gn18",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6, 3, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 6, 3, 4])],
        initializer=[numpy_helper.from_array(randn(rng, 3), "s"), numpy_helper.from_array(randn(rng, 3), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    monkeypatch.setattr(onnx.checker, "check_model", lambda *args, **kwargs: None)
    assert_matches_onnxruntime(model, {"x": randn(rng, 2, 6, 3, 4)})


def test_groupnorm_refusal():
    model = make_model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="my_gn", num_groups=4)],
                       {"x": (1, 6, 2, 2)}, {"y": (1, 6, 2, 2)},
                       {"s": np.ones(6, np.float32), "b": np.zeros(6, np.float32)}, opset=21)
    refused(model, "num_groups=4")


# --------------------------------------------------------------------------- LpNormalization

@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", [((2, 37), -1), ((3, 16), 1), ((2, 6, 5, 7), 1), ((4, 3, 9), 0),
                                        ((2, 3, 17), -2)])
def test_lpnorm(shape, axis, p):
    check("LpNormalization", {"x": shape}, axis=axis, p=p)


def test_lpnorm_representative(target):
    """A zero row gives zeros (onnxruntime's choice; the formula would divide 0 by 0), along the last
    axis and along a strided one; then in NHWC after a Conv (the axis follows the layout)."""
    rng = np.random.default_rng(9)
    x = randn(rng, 3, 4, 13)
    x[1, 2, :] = 0.0
    x[2, :, 5] = 0.0
    check("LpNormalization", {"x": x.shape}, feeds={"x": x}, axis=-1, p=2)
    check("LpNormalization", {"x": x.shape}, feeds={"x": x}, axis=1, p=1)
    conv = helper.make_node("Conv", ["x", "w"], ["h"], name="conv", kernel_shape=[1, 1])
    lp = helper.make_node("LpNormalization", ["h"], ["y"], name="lp", axis=1)
    relu = helper.make_node("Relu", ["y"], ["z"], name="relu")
    conv2 = helper.make_node("Conv", ["z", "w2"], ["out"], name="conv2", kernel_shape=[1, 1])
    model = make_model([conv, lp, relu, conv2], {"x": (1, 3, 5, 6)}, {"out": (1, 4, 5, 6)},
                       {"w": randn(rng, 8, 3, 1, 1), "w2": randn(rng, 4, 8, 1, 1)})
    assert_matches_onnxruntime(model)


def test_lpnorm_refusal():
    model = make_model([helper.make_node("LpNormalization", ["x"], ["y"], name="my_lp", p=3)],
                       {"x": (2, 4)}, {"y": (2, 4)})
    refused(model, "p=3")


# --------------------------------------------------------------------------- MeanVarianceNormalization

# onnx's function body for MVN from opset 13 fails strict shape inference (a Constant with no value),
# which aot's frontend and make_model's full check use: these models import opset 11.
@pytest.mark.parametrize("shape,axes", [((1, 3, 5, 7), None), ((2, 3, 5, 7), None), ((2, 3, 4, 5), [2, 3]),
                                        ((2, 3, 4, 5), [1]), ((2, 3, 4, 5), [0, 1, 2, 3]), ((3, 6, 17), [0, 2])])
def test_mvn(shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    check("MeanVarianceNormalization", {"x": shape}, opset=11, **attrs)


def test_mvn_representative(target):
    check("MeanVarianceNormalization", {"x": (2, 4, 3, 5)}, opset=11)


# --------------------------------------------------------------------------- LRN

@pytest.mark.parametrize("shape,size", [((1, 6, 5, 7), 3), ((1, 8, 3, 9), 5), ((1, 3, 6, 6), 1), ((2, 4, 5, 5), 7)])
def test_lrn(shape, size):
    check("LRN", {"x": shape}, size=size)


def lrn_reference(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """LRN as the ONNX spec states it, in float64: channels c - floor((size-1)/2) .. c + ceil((size-1)/2).
    (onnx.reference's LRN loops over the batch axis instead of the channels.)"""
    x64 = x.astype(np.float64)
    squares = np.zeros_like(x64)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels, c + math.ceil((size - 1) / 2) + 1)
        squares[:, c] = np.sum(x64[:, lo:hi] ** 2, axis=1)
    return x64 / (bias + alpha / size * squares) ** beta


@pytest.mark.parametrize("shape,size", [((2, 5, 4, 4), 2), ((1, 6, 17), 4), ((1, 3, 2, 2, 3), 3), ((1, 6, 5, 7), 3)])
def test_lrn_numpy(shape, size):
    """Even sizes and ranks other than 4, which onnxruntime refuses: against the spec in numpy."""
    rng = np.random.default_rng(15)
    model = make_model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.1)], {"x": shape}, {"y": shape})
    x = randn(rng, *shape)
    expected = lrn_reference(x, size, alpha=0.1)
    got = aot.run(model, inputs={"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_lrn_representative(target):
    check("LRN", {"x": (1, 7, 5, 9)}, size=5, alpha=0.02, beta=0.6, bias=2.0)


# --------------------------------------------------------------------------- BatchNormalization, computed

def test_batchnorm_computed_representative(target):
    """Every statistic a run-time tensor."""
    rng = np.random.default_rng(10)
    feeds = {"x": randn(rng, 2, 6, 5, 7), "s": randn(rng, 6), "b": randn(rng, 6), "m": randn(rng, 6),
             "v": rng.uniform(0.5, 2.0, 6).astype(np.float32)}
    check("BatchNormalization", {name: a.shape for name, a in feeds.items()}, feeds=feeds, epsilon=1e-3)


@pytest.mark.parametrize("computed", ["s", "m", "v", "sb"])
@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (3, 6), (2, 6, 9)])
def test_batchnorm_computed(computed, shape):
    """Some statistics computed, the others constants (folded at compile time), ranks 2 to 4."""
    rng = np.random.default_rng(11)
    values = {"s": randn(rng, 6), "b": randn(rng, 6), "m": randn(rng, 6),
              "v": rng.uniform(0.5, 2.0, 6).astype(np.float32)}
    inputs = {"x": shape} | {name: (6,) for name in values if name in computed}
    inits = {name: a for name, a in values.items() if name not in computed}
    feeds = {"x": randn(rng, *shape)} | {name: values[name] for name in values if name in computed}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    model = make_model([node], inputs, {"y": shape}, inits)
    assert_matches_onnxruntime(model, feeds)


def test_batchnorm_constant_still_folds():
    """Constant statistics still fold into the Conv before them: no kernel of their own."""
    rng = np.random.default_rng(12)
    conv = helper.make_node("Conv", ["x", "w"], ["h"], name="conv", kernel_shape=[1, 1])
    bn = helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"], name="bn")
    inits = {"w": randn(rng, 4, 3, 1, 1), "s": randn(rng, 4), "b": randn(rng, 4), "m": randn(rng, 4),
             "v": rng.uniform(0.5, 2.0, 4).astype(np.float32)}
    model = make_model([conv, bn], {"x": (1, 3, 4, 4)}, {"y": (1, 4, 4, 4)}, inits)
    artifact = aot.build(model)
    assert "conv" in artifact.report and "Mul" not in artifact.report and "bn" not in artifact.report
    assert_matches_onnxruntime(model)


# --------------------------------------------------------------------------- a transformer encoder

SEQ, D, HEADS, HIDDEN = 16, 32, 2, 64


def encoder_model(gelu: str = "op", seed: int = 13) -> onnx.ModelProto:
    """One pre-norm encoder block: LayerNorm, 2-head self-attention, residual, LayerNorm, Gelu MLP,
    residual. Gelu is the opset-20 op, or the Erf formula exporters write at opset 17."""
    rng = np.random.default_rng(seed)
    head = D // HEADS
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def const(name: str, array: np.ndarray) -> str:
        inits[name] = np.asarray(array)
        return name

    def add(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, name: str, n_in: int, n_out: int) -> str:
        w = const(f"{name}_w", randn(rng, n_in, n_out, scale=1.0 / math.sqrt(n_in)))
        b = const(f"{name}_b", randn(rng, n_out, scale=0.1))
        return add("Add", [add("MatMul", [x, w], f"{name}_mm"), b], name)

    def layernorm(x: str, name: str) -> str:
        g, b = const(f"{name}_g", 1.0 + randn(rng, D, scale=0.1)), const(f"{name}_b", randn(rng, D, scale=0.1))
        return add("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-5)

    heads_shape = const("heads_shape", np.array([1, SEQ, HEADS, head], np.int64))
    model_shape = const("model_shape", np.array([1, SEQ, D], np.int64))

    def split_heads(x: str, name: str, perm: list[int]) -> str:
        return add("Transpose", [add("Reshape", [x, heads_shape], f"{name}_heads")], f"{name}_t", perm=perm)

    h = layernorm("x", "ln1")
    q = split_heads(linear(h, "q", D, D), "q", [0, 2, 1, 3])           # (1, H, S, d)
    kt = split_heads(linear(h, "k", D, D), "k", [0, 2, 3, 1])          # (1, H, d, S)
    v = split_heads(linear(h, "v", D, D), "v", [0, 2, 1, 3])           # (1, H, S, d)
    scores = add("Mul", [add("MatMul", [q, kt], "qk"), const("scale", np.float32(1.0 / math.sqrt(head)))],
                 "scores")
    probs = add("Softmax", [scores], "probs", axis=-1)
    ctx = add("Transpose", [add("MatMul", [probs, v], "ctx")], "ctx_t", perm=[0, 2, 1, 3])
    attn = linear(add("Reshape", [ctx, model_shape], "ctx_merged"), "proj", D, D)
    r1 = add("Add", ["x", attn], "residual1")
    up = linear(layernorm(r1, "ln2"), "up", D, HIDDEN)
    if gelu == "op":
        act = add("Gelu", [up], "gelu")
    else:
        erf = add("Erf", [add("Div", [up, const("sqrt2", np.float32(math.sqrt(2.0)))], "gelu_div")], "gelu_erf")
        x_phi = add("Mul", [up, add("Add", [erf, const("one", np.float32(1.0))], "gelu_1p")], "gelu_x")
        act = add("Mul", [x_phi, const("half", np.float32(0.5))], "gelu")
    add("Add", [r1, linear(act, "down", HIDDEN, D)], "y")
    return make_model(nodes, {"x": (1, SEQ, D)}, {"y": (1, SEQ, D)}, inits, opset=20 if gelu == "op" else 17)


def test_transformer_encoder(target):
    assert_matches_onnxruntime(encoder_model("op"), tol=1e-4)


def test_transformer_encoder_erf_gelu():
    assert_matches_onnxruntime(encoder_model("erf", seed=14), tol=1e-4)


@pytest.mark.parametrize("shape, outputs", [((2, 3, 4, 5), 3), ((4, 6), 3), ((2, 3, 7), 3), ((2, 3, 7), 1)])
def test_batchnorm_training_mode_against_the_reference(shape, outputs):
    """Batch statistics and the running-statistics update (onnxruntime's CPU build has no training mode).
    ONNX's inference rule, which onnxruntime applies too, wants the three outputs in training mode: one
    alone is the model's error."""
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(11)
    c = shape[1]
    inits = {"s": rng.uniform(0.5, 1.5, c), "b": rng.standard_normal(c), "m": rng.standard_normal(c),
             "v": rng.uniform(0.5, 2.0, c)}
    names = ["y", "running_mean", "running_var"][:outputs]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], names, training_mode=1, momentum=0.8)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape) if n == "y" else [c]) for n in names]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outs,
                              [onnx.numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    x = rng.standard_normal(shape).astype(np.float32)
    if outputs != 3:
        with pytest.raises(aot.ModelError, match=r"node 'BatchNormalization_0' .*should be 3 when Training_mode"):
            aot.build(model, out_dir=None)
        return
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = aot.run(model, {"x": x})
    for name, expected in zip(names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5)
