"""HannWindow, HammingWindow, BlackmanWindow: the cosine-sum windows of ONNX (opset 17).

A window's values depend on its length and attributes alone, so it is a constant of the build. A size
fed at run time decides only the length, which the output's static (declared) shape already gives, as
with Resize's scales: the window is computed at build time from that length and the size is never read
(a size contradicting the declared length is the model's error). A constant size folds before this
rule, by ONNX's reference.

ONNX defines w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n < size, with N = size
(periodic=1, the default) or size - 1 (periodic=0), computed here in float64 and cast to the output's
type (output_datatype) as ONNX's reference and onnxruntime cast. A symmetric window of length 1 divides
0 by 0: NaN, as ONNX's reference gives.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.ops.registry import ALL_DTYPES, define

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


for _op in _COEFFICIENTS:
    define(_op, canonical=canonical_window, dtypes=ALL_DTYPES)
