"""Training losses against onnxruntime: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss with
run-time int64 labels, class weights, ignore_index and each reduction."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot


def _model(op: str, shape: tuple[int, ...], weights: bool, outputs: int = 1, **attrs):
    n, c, rest = shape[0], shape[1], list(shape[2:])
    reduced = [n, *rest] if attrs.get("reduction") == "none" else []
    ins = ["x", "t"] + (["w"] if weights else [])
    outs = ["loss", "log_prob"][:outputs]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
              helper.make_tensor_value_info("t", TensorProto.INT64, [n, *rest])]
    if weights:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [c]))
    out_infos = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, reduced),
                 helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, list(shape))][:outputs]
    graph = helper.make_graph([helper.make_node(op, ins, outs, name="loss", **attrs)], "g", inputs, out_infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(shape, weights: bool, seed: int = 0, ignore: int | None = None):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "t": rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)}
    if ignore is not None:
        feeds["t"].reshape(-1)[::3] = ignore
    if weights:
        feeds["w"] = rng.uniform(0.5, 2.0, shape[1]).astype(np.float32)
    return feeds


OPS = ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]
REDUCTIONS = ["none", "sum", "mean"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights, ignore", [(False, None), (True, None), (True, 1), (False, -1)])
def test_losses(op, reduction, weights, ignore, target="host"):
    shape = (3, 5, 2, 3)
    attrs = {"reduction": reduction} | ({"ignore_index": ignore} if ignore is not None else {})
    model = _model(op, shape, weights, **attrs)
    result = aot.check(model, inputs=_feeds(shape, weights, ignore=ignore), target=target)
    assert result.ok, result.comparisons


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_losses_under_emulation(op, reduction, target):
    test_losses(op, reduction, True, 1, target)


def test_softmax_cross_entropy_returns_the_log_probabilities():
    shape = (4, 7)
    result = aot.check(_model("SoftmaxCrossEntropyLoss", shape, False, outputs=2, reduction="mean"),
                       inputs=_feeds(shape, False))
    assert result.ok and set(result.outputs) == {"loss", "log_prob"}, result.comparisons


def test_labels_outside_the_classes_never_read_outside_the_input():
    """ONNX leaves out-of-range labels undefined; aot clamps the class for the access: a finite result."""
    shape = (2, 4, 3)
    feeds = _feeds(shape, True)
    feeds["t"][0, 0], feeds["t"][1, 2] = 1000, -1000
    outputs = aot.run(_model("NegativeLogLikelihoodLoss", shape, True, reduction="none"), feeds)
    assert np.all(np.isfinite(outputs["loss"]))
    assert outputs["loss"][0, 0] == -feeds["x"][0, 3, 0] * feeds["w"][3]


def test_unknown_reduction_is_refused():
    with pytest.raises(aot.AotError, match="node 'loss' .*reduction 'avg'"):
        aot.build(_model("NegativeLogLikelihoodLoss", (2, 3), False, reduction="avg"), out_dir=None)
