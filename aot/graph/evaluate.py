"""Evaluate one ONNX node on numpy arrays with the reference implementation, at a given opset.

Used to fold constants. The node is wrapped in a one-node model so that the model's opset picks
the op's version (a bare NodeProto would get the newest semantics). Ops the reference implementation
computes wrongly are replaced by the corrected ones below wherever aot evaluates ONNX with it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun


class LpNormalization(OpRun):
    """x / ||x||_p along the axis. onnx.reference (1.23) sums x**p without the magnitude, so for p=1 it
    divides by the plain sum (a row summing to 0.17 with norm 4.2 came out 24x too large)."""
    op_domain = ""

    def _run(self, x, axis=None, p=None):
        axis = self.axis if axis is None else axis
        p = self.p if p is None else p
        norm = np.power(np.power(np.abs(x), p).sum(axis=axis, keepdims=True), 1.0 / p)
        with np.errstate(all="ignore"):
            return (np.where(norm == 0, 0, x / norm).astype(x.dtype),)


class GatherElements(OpRun):
    """data's elements at `indices` along `axis`; off the axis, indices may be shorter than data, as
    onnxruntime takes them (torch.gather's rule). onnx.reference (1.23) refuses those."""
    op_domain = ""

    def _run(self, data, indices, axis=None, **_):
        axis = (self.axis if axis is None else axis) % data.ndim
        window = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(indices.shape))
        positions = np.where(indices < 0, indices + data.shape[axis], indices)
        return (np.take_along_axis(data[window], positions, axis=axis),)


class GlobalMaxPool(OpRun):
    """The maximum over every spatial axis (2 on). onnx.reference (1.23) takes two axes counted from the
    number of spatial ones: right for 4-D only (a 3-D input lost its channels)."""
    op_domain = ""

    def _run(self, x, **_):
        return (x.max(axis=tuple(range(2, x.ndim)), keepdims=True),)


class LRN(OpRun):
    """x / (bias + alpha / size * (sum of x^2 over the size channels around))^beta. onnx.reference (1.23)
    loops over the batch axis instead of the channels: only channel 0 is normalized."""
    op_domain = ""

    def _run(self, x, alpha=None, beta=None, bias=None, size=None, **_):
        alpha, beta, bias, size = (getattr(self, k) if v is None else v
                                   for k, v in (("alpha", alpha), ("beta", beta), ("bias", bias), ("size", size)))
        squares = x.astype(np.float64 if x.dtype == np.float64 else np.float32) ** 2
        below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
        channels = x.shape[1]
        total = np.zeros_like(squares)
        for c in range(channels):
            total[:, c] = squares[:, max(0, c - below):min(channels, c + above + 1)].sum(axis=1)
        return ((x / (bias + (alpha / size) * total) ** beta).astype(x.dtype),)


class Range(OpRun):
    """start, start + delta, ... while below limit (above, for a negative delta), by repeated addition in
    the output's type as ONNX's function body (a Loop) and onnxruntime compute it. onnx.reference (1.23)
    takes numpy's arange, start + i * delta in float64: float32 values differ in the last bits, so a
    folded Range differed from the same Range computed at run time."""
    op_domain = ""

    def _run(self, start, limit, delta, **_):     # the evaluator may pass attributes Range has none of
        count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0) if float(delta) else 0
        steps = np.full(count, delta, dtype=start.dtype)
        if count:
            steps[0] = start
        with np.errstate(over="ignore"):
            return (np.add.accumulate(steps, dtype=start.dtype),)


CORRECTED_OPS = [GatherElements, GlobalMaxPool, LpNormalization, LRN, Range]


def reference_evaluator(proto: onnx.ModelProto | onnx.NodeProto) -> ReferenceEvaluator:
    """onnx.reference's evaluator with the corrected ops."""
    return ReferenceEvaluator(proto, new_ops=CORRECTED_OPS)


def evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_value_info(name, onnx.TypeProto()) for name in feeds],
        [onnx.helper.make_value_info(name, onnx.TypeProto()) for name in node.output if name])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        evaluator = reference_evaluator(model)
    except RuntimeError:    # no implementation registered at this opset: use the op's newest one
        evaluator = reference_evaluator(node)
    return [np.asarray(r) for r in evaluator.run(None, feeds)]
