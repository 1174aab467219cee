"""Quantized models → integer ops.

Both ONNX quantization formats end up in one form: QOperator ops (QLinearConv, QLinearMatMul, QGemm,
QLinearAdd, ...; aot/ops/qoperator.py) are first expanded into DequantizeLinear → float op →
QuantizeLinear, which is the QDQ format. Then each DequantizeLinear → op [→ Relu/Clip] → QuantizeLinear
chain whose op has an integer form (its registered QuantForm) becomes that op on the integer tensors,
with a `quant` attribute (graph/quant.py). What does not match keeps running in float between
Dequantize and Quantize kernels: correct, and listed by the report.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.quant import RANGES, Quant, clamp_for
from aot.ops.registry import QuantForm, op_def


def lower_quantized(graph: Graph) -> Graph:
    if not any(op_def(n.op).expand_qdq or n.op in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes):
        return graph
    return _fuse(_expand(graph))


# --- QOperator → QDQ -----------------------------------------------------------------------------

def _expand(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        expand = op_def(node.op).expand_qdq
        if expand is None:
            rw.keep(node)
        else:
            expand(rw, node)
    return rw.finish()


# --- QDQ chains → integer ops ----------------------------------------------------------------------

class _Chains:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.users = graph.consumers()

    def const(self, name: str):
        return self.graph.constants.get(name) if name else None

    def dequantized(self, name: str) -> tuple[str, float, int] | None:
        """(integer tensor, scale, zero point) if `name` is a per-tensor DequantizeLinear of a computed tensor."""
        node = self.producers.get(name)
        if node is None or node.op != "DequantizeLinear" or node.inputs[0] in self.graph.constants:
            return None
        scale, zp = self.const(node.inputs[1]), self.const(node.inputs[2] if len(node.inputs) > 2 else "")
        if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
            return None
        return node.inputs[0], float(scale), int(zp) if zp is not None else 0

    def weight(self, name: str, channel_axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(integer weights, per-channel scale, per-channel zero point) of a DequantizeLinear of a constant."""
        node = self.producers.get(name)
        if node is None or node.op != "DequantizeLinear" or node.inputs[0] not in self.graph.constants:
            return None
        w = self.graph.constants[node.inputs[0]]
        scale = self.const(node.inputs[1])
        zp = self.const(node.inputs[2] if len(node.inputs) > 2 else "")
        if scale is None:
            return None
        channels = w.shape[channel_axis]
        if scale.size not in (1, channels) or (scale.size > 1 and int(node.attrs.get("axis", 1)) % w.ndim
                                               != channel_axis % w.ndim):
            return None
        zp = np.zeros(1, np.int64) if zp is None else zp.astype(np.int64)
        return w, np.broadcast_to(scale.astype(np.float64).reshape(-1), (channels,)), \
            np.broadcast_to(zp.reshape(-1), (channels,))

    def quantized_output(self, name: str) -> tuple[list[Node], list[tuple[float, float]], Node, float, int, str] \
            | None:
        """Follow `name` through single-use clamps (Relu, Clip) to a per-tensor QuantizeLinear: (the clamp
        nodes, their bounds, the QuantizeLinear, its scale, zero point, output dtype)."""
        nodes: list[Node] = []
        acts: list[tuple[float, float]] = []
        while True:
            users = self.users.get(name, [])
            if len(users) != 1 or name in self.graph.outputs:
                return None
            user = users[0]
            if user.op == "QuantizeLinear":
                scale = self.const(user.inputs[1])
                zp = self.const(user.inputs[2] if len(user.inputs) > 2 else "")
                if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
                    return None
                dtype = str(zp.dtype) if zp is not None else "uint8"
                if dtype not in ("int8", "uint8"):
                    return None
                return nodes, acts, user, float(scale), int(zp) if zp is not None else 0, dtype
            clamp = op_def(user.op).clamp
            bounds = clamp(self.graph, user) if clamp else None
            if bounds is None:
                return None
            nodes.append(user)
            acts.append(bounds)
            name = user.outputs[0]
            return None


def _fuse(graph: Graph) -> Graph:
    chains = _Chains(graph)
    rw = Rewriter(graph)
    absorbed: set[str] = set()
    replacement: dict[str, Node] = {}
    for node in graph.nodes:
        fused = _match(chains, rw, node)
        if fused is not None:
            new, swallowed = fused
            replacement[node.name] = new
            absorbed.update(n.name for n in swallowed)
    for node in graph.nodes:
        if node.name in replacement:
            rw.keep(replacement[node.name])
        elif node.name not in absorbed:
            rw.keep(node)
    return rw.finish()


def _match(chains: _Chains, rw: Rewriter, node: Node) -> tuple[Node, list[Node]] | None:
    definition = op_def(node.op)
    form = definition.quant
    if form is QuantForm.NONE:
        return None
    out = chains.quantized_output(node.outputs[0])
    if out is None:
        return None
    clamps, bounds, q, y_scale, y_zp, y_dtype = out
    if clamps and not definition.quant_acts:
        return None
    qmin, qmax = clamp_for(tuple(("clip", b) for b in bounds), y_scale, y_zp, y_dtype)
    swallowed = clamps + [q]
    y = q.outputs[0]
    if form is QuantForm.MATRIX:
        return _match_matrix(chains, rw, node, y, y_scale, y_zp, y_dtype, qmin, qmax, swallowed)
    if form is QuantForm.BINARY:
        a, b = chains.dequantized(node.inputs[0]), chains.dequantized(node.inputs[1])
        if a is None or b is None:
            return None
        quant = Quant(a[1], a[2], y_scale, y_zp, y_dtype, qmin, qmax, b_scale=b[1], b_zp=b[2])
        return node.with_(inputs=(a[0], b[0]), outputs=(y,), attrs={**node.attrs, "quant": quant}), swallowed
    if form is QuantForm.CONCAT:
        parts = [chains.dequantized(i) for i in node.inputs]
        if any(p is None for p in parts):
            return None
        scales = tuple((p[1], p[2]) for p in parts)
        quant = Quant(parts[0][1], parts[0][2], y_scale, y_zp, y_dtype, *RANGES[y_dtype])
        return node.with_(inputs=tuple(p[0] for p in parts), outputs=(y,),
                          attrs={**node.attrs, "quant": quant, "input_quant": scales}), swallowed
    x = chains.dequantized(node.inputs[0])
    if x is None:
        return None
    quant = Quant(x[1], x[2], y_scale, y_zp, y_dtype, qmin, qmax)
    if form is QuantForm.RESCALE:
        return node.with_(inputs=(x[0],), outputs=(y,), attrs={**node.attrs, "quant": quant}), swallowed
    # QuantForm.MOVE: values move without arithmetic, so integer only when nothing is rescaled.
    if (x[1], x[2]) != (y_scale, y_zp) or rw.values[x[0]].dtype != y_dtype:
        return None
    return node.with_(inputs=(x[0],) + node.inputs[1:], outputs=(y,)), swallowed


def _match_matrix(chains: _Chains, rw: Rewriter, node: Node, y: str, y_scale: float, y_zp: int, y_dtype: str,
                  qmin: int, qmax: int, swallowed: list[Node]) -> tuple[Node, list[Node]] | None:
    x = chains.dequantized(node.inputs[0])
    if x is None:
        return None
    xq, x_scale, x_zp = x
    if node.op == "Conv":
        w = chains.weight(node.inputs[1], 0)
        channel_axis = 0
    elif node.op == "Gemm":
        if node.attrs.get("transA", 0):
            return None
        channel_axis = 0 if node.attrs.get("transB", 0) else 1
        w = chains.weight(node.inputs[1], channel_axis)
    else:       # MatMul by a constant (K, N) matrix
        w = chains.weight(node.inputs[1], -1)
        channel_axis = 1
        if w is not None and w[0].ndim != 2:
            return None
    if w is None:
        return None
    weights, w_scale, w_zp = w
    if node.op == "Gemm":
        alpha = float(node.attrs.get("alpha", 1.0))
        w_scale = w_scale * alpha
    if node.op in ("Gemm", "MatMul") and channel_axis == 0:
        weights, channel_axis = weights.T, 1       # (K, N): output channels last
    bias = _bias(chains, rw, node, x_scale, w_scale)
    if bias is False:
        return None
    quant = Quant(x_scale, x_zp, y_scale, y_zp, y_dtype, qmin, qmax, w_scale=np.asarray(w_scale, np.float64),
                  w_zp=np.asarray(w_zp, np.int64))
    w_name = rw.constant(node.name + "_wq", np.ascontiguousarray(weights))
    b_name = rw.constant(node.name + "_bq", bias) if bias is not None else ""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("alpha", "beta", "transA", "transB")}
    op = "Conv" if node.op == "Conv" else "Gemm"
    if op == "Gemm" and len(rw.values[xq].shape) != 2:
        return None
    return Node(op, node.name, (xq, w_name, b_name), (y,), {**attrs, "quant": quant}), swallowed


def _bias(chains: _Chains, rw: Rewriter, node: Node, x_scale: float, w_scale: np.ndarray):
    """The bias: int32 in units of x_scale * w_scale when the model quantized it, float32 when the model
    keeps it in float (added in float by the kernel, as onnxruntime does); None if absent, False if
    not usable."""
    name = node.inputs[2] if len(node.inputs) > 2 else ""
    if not name:
        return None
    if node.op == "Gemm" and float(node.attrs.get("beta", 1.0)) != 1.0:
        return False
    producer = chains.producers.get(name)
    if producer is not None and producer.op == "DequantizeLinear" and producer.inputs[0] in chains.graph.constants:
        q = chains.const(producer.inputs[0]).astype(np.float64)
        s = chains.const(producer.inputs[1]).astype(np.float64)
        real = (q - (chains.const(producer.inputs[2]) if len(producer.inputs) > 2 and producer.inputs[2] else 0)) * s
    elif name in chains.graph.constants:
        return np.ascontiguousarray(np.broadcast_to(chains.graph.constants[name].reshape(-1), w_scale.shape),
                                    dtype=np.float32)
    else:
        return False
    real = np.broadcast_to(real.reshape(-1), w_scale.shape)
    return np.clip(np.round(real / (x_scale * w_scale)), -(2**31), 2**31 - 1).astype(np.int32)
