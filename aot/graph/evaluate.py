"""Evaluate one ONNX node on numpy arrays with the reference implementation, at a given opset.

Used to fold constants. The node is wrapped in a one-node model so that the model's opset picks
the op's version (a bare NodeProto would get the newest semantics). Ops the reference implementation
computes wrongly are replaced by the corrected ones below wherever aot evaluates ONNX with it.
"""

from __future__ import annotations

import math

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


class Erf(OpRun):
    """The error function in the input's precision. onnx.reference (1.23) computes it in float32 whatever
    the input (np.vectorize with otypes "f"): a float64 evaluation of Gelu was off by 7e-8 of its value."""
    op_domain = ""

    def _run(self, x):
        return (np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype),)


class Gelu(OpRun):
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate "tanh" 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
    in the input's precision. onnx.reference (1.23) runs the op's function body, whose constants are
    float32: a float64 evaluation was off by 4e-8 of its value."""
    op_domain = ""

    def _run(self, x, approximate=None):
        approximate = self.approximate if approximate is None else approximate
        with np.errstate(all="ignore"):
            if approximate == "tanh":
                y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
            else:
                y = 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))
        return (y.astype(x.dtype),)


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


class MeanVarianceNormalization(OpRun):
    """(x - mean) / (std + 1e-9) over `axes`, the variance the mean of (x - mean)^2 as the spec defines it.
    onnx.reference (1.23) runs the op's function body, which takes E[x^2] - E[x]^2: for a group of equal
    values that is a rounding error, negative about one time in forty in float64, and its square root
    NaN where the definition gives 0 / (0 + 1e-9) = 0."""
    op_domain = ""

    def _run(self, x, axes=None):
        axes = tuple(self.axes if axes is None else axes)
        centred = x - x.mean(axis=axes, keepdims=True)
        std = np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True))
        return ((centred / (std + x.dtype.type(1e-9))).astype(x.dtype),)


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


CORRECTED_OPS = [Erf, GatherElements, Gelu, GlobalMaxPool, LpNormalization, LRN, MeanVarianceNormalization, Range]


class CorrectedEvaluator(ReferenceEvaluator):
    """onnx.reference's evaluator with the corrected ops, in the function bodies and subgraphs it runs too:
    it makes the evaluators of those with its own class, and each is given the corrections again."""

    def __init__(self, proto, *args, new_ops=None, **kwargs):
        ops = {(op.op_domain, op.__name__): op for op in [*CORRECTED_OPS, *(new_ops or [])]}
        super().__init__(proto, *args, new_ops=list(ops.values()), **kwargs)


def reference_evaluator(proto: onnx.ModelProto | onnx.NodeProto) -> ReferenceEvaluator:
    """onnx.reference's evaluator with the corrected ops."""
    return CorrectedEvaluator(proto)


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
