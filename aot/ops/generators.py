"""Tensors generated from sizes and scalar bounds: ConstantOfShape, Range and the cosine-sum windows of
ONNX (HannWindow, HammingWindow, BlackmanWindow, opset 17).

Their shape is decided by values (ConstantOfShape's shape; Range's start, limit and delta; a window's
size) that a model may feed at run time; the output's static (declared) shape already gives it, as with
Resize's scales, so the shape is taken from there and a value contradicting it is the model's error.
All-constant inputs fold before these rules, by ONNX's reference.

ConstantOfShape's values are its `value` attribute (float32 0 by default): a constant of the build, its
shape input never read.

A window's values depend on its length and attributes alone: a constant of the build, its size never
read. ONNX defines w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n < size, with N = size
(periodic=1, the default) or size - 1 (periodic=0), computed here in float64 and cast to the output's
type (output_datatype) as ONNX's reference and onnxruntime cast. A symmetric window of length 1 divides
0 by 0: NaN, as both give.

Range's values depend on start and delta, read at run time (limit only decides the length, so it is not
read). onnxruntime computes them by repeated addition in the output's type (y[0] = start, y[i] =
y[i-1] + delta), as ONNX's function body does with a Loop; ONNX's reference computes start + i * delta
in float64 (numpy's arange). For float32 the two differ in the last bits after a few steps; aot follows
onnxruntime: a CumSum of [start, delta, ..., delta], which adds in order from 0, in float32 (one
difference: a start of -0.0 comes out +0.0). Integer sums wrap, as onnxruntime's do in practice.
"""

from __future__ import annotations

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Node, Rewriter
from aot.ops.rewrite import view
from aot.registry import ALL_DTYPES, define

# (a0, a1, a2) of each window, as ONNX's function bodies define them.
_COEFFICIENTS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def cosine_window(op: str, length: int, periodic: bool) -> np.ndarray:
    """The window `op` of `length` values, in float64."""
    a0, a1, a2 = _COEFFICIENTS[op]
    n = np.arange(length, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        angle = 2 * np.pi * n / (length if periodic else length - 1)
    return a0 - a1 * np.cos(angle) + a2 * np.cos(2 * angle)


def canonical_window(rw: Rewriter, node: Node) -> None:
    out = rw.values[node.outputs[0]]
    window = cosine_window(node.op, out.shape[0], bool(node.attrs.get("periodic", 1)))
    with np.errstate(invalid="ignore"):     # NaN (a window of length 1) to an integer type, as numpy casts
        rw.constants[out.name] = window.astype(out.dtype)


def canonical_constant_of_shape(rw: Rewriter, node: Node) -> None:
    out = rw.values[node.outputs[0]]
    value = node.attrs.get("value")
    fill = np.asarray(value).reshape(-1)[0] if value is not None else 0.0
    rw.constants[out.name] = np.full(out.shape, fill, out.dtype)


def canonical_range(rw: Rewriter, node: Node) -> None:
    start, _, delta = node.inputs[:3]
    out = rw.values[node.outputs[0]]
    for name in (start, delta):
        if rw.values[name].size != 1:
            raise ModelError(f"node '{node.name}' (Range): '{name}' has shape {list(rw.values[name].shape)}, "
                             f"not a scalar")
    length = out.shape[0]
    if length == 0:
        rw.constants[out.name] = np.zeros(0, out.dtype)
        return
    first = view(rw, node, start, (1,))
    if length == 1:
        view(rw, node, first, (1,), out.name)
        return
    steps = rw.like(delta + "_steps", delta, (length - 1,))
    rw.add("Repeat", node.name + "_steps", [view(rw, node, delta, (1,))], [steps], repeats=(length - 1,))
    terms = rw.like(node.outputs[0] + "_terms", start, (length,))
    rw.add("Concat", node.name + "_terms", [first, steps], [terms], axis=0)
    rw.add("CumSum", node.name, [terms], [out.name], axis=0, exclusive=0, reverse=0)


for _op in _COEFFICIENTS:
    define(_op, canonical=canonical_window, dtypes=ALL_DTYPES)
define("ConstantOfShape", canonical=canonical_constant_of_shape, dtypes=ALL_DTYPES)
define("Range", canonical=canonical_range, dtypes=frozenset({"float32", "int32", "int64"}))
