"""Rewrite ONNX ops into the small op set the later passes and kernels know, by each op's canonical
rule in the op registry (aot/registry.py).

After this pass (shapes are NCHW, semantics ONNX's):
  Conv(x, w, b?)         2-D, attrs kernel/strides/pads(t,l,b,r)/dilations/group; w constant
  Gemm(x, w, b?)         x (M,K) @ w (K,N) constant + b (N,) constant
  MatMul(a, b)           both computed, batched (batch dims broadcast)
  Add/Sub/Mul/Div/Max/Min  numpy broadcasting
  Unary(x)               attrs fn, params: relu, clip, leaky_relu, sigmoid, tanh, hard_sigmoid, ...
  BatchNormalization     left for fold_batchnorm
  MaxPool/AveragePool    2-D, attrs kernel/strides/pads(t,l,b,r)/count_include_pad
  GlobalAveragePool/GlobalMaxPool, Transpose(perm), Concat(axis>=0), Pad(pads, mode, value),
  Softmax/LogSoftmax(axis>=0), Reduce(fn, axes) keeping dims, Slice(starts, steps) per axis
  Reshape(x)             a view: same bytes, new shape (Flatten, Squeeze, Unsqueeze, Identity, Dropout)
Anything else is refused with an error naming the node and its op.
"""

from __future__ import annotations

from aot.errors import UnsupportedOpError
from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.registry import FLOAT64_NOTE, op_def

_QUANTIZED = frozenset({"int8", "uint8", "int16"})    # what a node carrying quantization parameters may read


def canonicalize(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        definition = op_def(node.op)
        domain = node.attrs.get("domain", "")
        if definition.canonical is None or domain != definition.domain:
            where = f" from domain '{domain}'" if domain else ""
            raise UnsupportedOpError(f"node '{node.name}': op {node.op}{where} is not supported "
                                     "(the README lists the supported ops)")
        _check_dtypes(rw, node, definition.dtypes | (_QUANTIZED if node_quant(rw.values, node) else frozenset()))
        definition.canonical(rw, node)
    return rw.finish()


def _check_dtypes(rw: Rewriter, node: Node, allowed: frozenset[str]) -> None:
    for name in node.inputs:
        if not name or name in rw.constants:
            continue
        dtype = rw.values[name].dtype
        if dtype not in allowed:
            note = FLOAT64_NOTE if dtype == "float64" else ""
            raise UnsupportedOpError(f"node '{node.name}' ({node.op}): input '{name}' is {dtype}; this op takes "
                                     f"{', '.join(sorted(allowed))} tensors{note}")
