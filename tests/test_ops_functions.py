"""Ops ONNX defines by a function body and aot compiles through it (aot/frontend/functions.py): the opset
23 attention family large-model exporters write, and older function ops. Each case against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import make_typed_model as _model

import aot

RNG = np.random.default_rng(11)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _check(model: onnx.ModelProto, feeds: dict, target: str = "host") -> dict:
    result = aot.check(model, inputs=feeds, target=target)
    assert result.reference_used == "onnxruntime"
    assert result.ok, result.comparisons
    return result.outputs


def _f(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


ATTENTIONS = {
    "plain": ({}, (2, 4, 8), (2, 6, 8), None),
    "causal": ({"is_causal": 1}, (2, 5, 8), (2, 5, 8), None),
    "grouped query heads": ({}, (4, 3, 8), (2, 7, 8), None),
    "bool mask": ({}, (2, 4, 8), (2, 6, 8), "bool"),
    "additive mask, scale": ({"scale": 0.3}, (2, 4, 8), (2, 6, 8), "float"),
    "softcap": ({"softcap": 5.0}, (2, 4, 8), (2, 6, 8), None),
}


@pytest.mark.parametrize("case", sorted(ATTENTIONS))
def test_attention(case):
    attrs, (hq, sq, d), (hk, sk, _), mask = ATTENTIONS[case]
    inputs = [("q", F, [1, hq, sq, d]), ("k", F, [1, hk, sk, d]), ("v", F, [1, hk, sk, d])]
    feeds = {"q": _f(1, hq, sq, d), "k": _f(1, hk, sk, d), "v": _f(1, hk, sk, d)}
    names = ["q", "k", "v"]
    if mask == "bool":
        inputs.append(("m", B, [sq, sk]))
        feeds["m"] = RNG.random((sq, sk)) < 0.7
        feeds["m"][:, 0] = True             # no row masked whole
        names.append("m")
    elif mask == "float":
        inputs.append(("m", F, [1, 1, sq, sk]))
        feeds["m"] = np.where(RNG.random((1, 1, sq, sk)) < 0.3, -1e4, 0.0).astype(np.float32)
        names.append("m")
    model = _model([helper.make_node("Attention", names, ["y"], **attrs)], inputs, [("y", F, [1, hq, sq, d])], 23)
    _check(model, feeds)


def test_attention_on_three_dimensional_inputs_with_head_counts():
    """(batch, sequence, heads * head size) inputs, as exporters write them, heads given as attributes."""
    q, k, v = _f(2, 5, 16), _f(2, 7, 8), _f(2, 7, 8)
    model = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2)],
                   [("q", F, [2, 5, 16]), ("k", F, [2, 7, 8]), ("v", F, [2, 7, 8])], [("y", F, [2, 5, 16])], 23)
    _check(model, {"q": q, "k": k, "v": v})


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(interleaved):
    x, cos, sin = _f(1, 2, 4, 8), _f(16, 4), _f(16, 4)
    model = _model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=interleaved)],
                   [("x", F, [1, 2, 4, 8]), ("cos", F, [16, 4]), ("sin", F, [16, 4]), ("pos", I64, [1, 4])],
                   [("y", F, [1, 2, 4, 8])], 23)
    _check(model, {"x": x, "cos": cos, "sin": sin, "pos": np.array([[3, 0, 9, 15]], np.int64)})


@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid(align_corners):
    model = _model([helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align_corners)],
                   [("theta", F, [2, 2, 3])], [("y", F, [2, 4, 5, 2])], 20,
                   [("size", np.array([2, 3, 4, 5], np.int64))])
    _check(model, {"theta": _f(2, 2, 3)})


def test_center_crop_pad():
    """Cropped along one axis, padded along another, in one node."""
    model = _model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"])], [("x", F, [5, 7, 3])],
                   [("y", F, [4, 9, 3])], 18, [("shape", np.array([4, 9, 3], np.int64))])
    _check(model, {"x": _f(5, 7, 3)})


@pytest.mark.qemu
def test_attention_on_a_cortex_m4():
    q, k, v = _f(1, 2, 4, 8), _f(1, 2, 6, 8), _f(1, 2, 6, 8)
    model = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                   [("q", F, [1, 2, 4, 8]), ("k", F, [1, 2, 6, 8]), ("v", F, [1, 2, 6, 8])], [("y", F, [1, 2, 4, 8])],
                   23)
    _check(model, {"q": q, "k": k, "v": v}, "cortex-m4")


def test_ops_aot_compiles_itself_keep_their_nodes():
    """LayerNormalization has a function body too, but its own kernel: the frontend leaves it alone."""
    from aot.frontend.functions import expand

    model = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"])], [("x", F, [2, 8]), ("s", F, [8])],
                   [("y", F, [2, 8])], 17)
    assert expand(model, "m") is model
