"""Normalizations. BatchNormalization with constant statistics folds into the Conv or Gemm before it,
or becomes a per-channel Mul and Add (graph/passes/fold_batchnorm.py)."""

from __future__ import annotations

from aot.graph.ir import Node, Rewriter
from aot.ops.registry import define
from aot.ops.rewrite import const_input, refuse


def canonical_batchnorm(rw: Rewriter, node: Node) -> None:
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise refuse(node, "training mode (extra outputs) is not supported")
    for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1):
        const_input(rw, node, i, what)
    rw.keep(node.with_(outputs=node.outputs[:1], attrs={"epsilon": float(node.attrs.get("epsilon", 1e-5))}))


define("BatchNormalization", canonical=canonical_batchnorm)
