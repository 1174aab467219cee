"""Quantized models → integer ops.

Both ONNX quantization formats end up in one form: QOperator ops (QLinearConv, QLinearMatMul, QGemm,
QLinearAdd, ...; aot/ops/qoperator.py) are first expanded into DequantizeLinear → float op →
QuantizeLinear, which is the QDQ format. Then each DequantizeLinear → op [→ Relu/Clip] → QuantizeLinear
chain whose op has an integer form (its registered QuantForm) becomes that op on the integer tensors,
each integer tensor carrying its encoding in its Value's `quant` field (graph/quant.py) and the
clamps folded into the op as fused activations. What does not match keeps running in float between
Dequantize and Quantize kernels: correct, and listed by the report.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.passes.fold_constants import folds
from aot.graph.quant import QuantParams
from aot.registry import Fusion, QuantForm, op_def, operand


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

def _per_tensor(graph: Graph, node: Node) -> QuantParams | None:
    """The parameters of a QuantizeLinear/DequantizeLinear with a constant scalar scale and zero point."""
    scale = graph.constants.get(node.inputs[1])
    zp_name = node.inputs[2] if len(node.inputs) > 2 else ""
    zp = graph.constants.get(zp_name) if zp_name else np.zeros(1, np.uint8)
    if scale is None or zp is None or scale.size != 1 or zp.size != 1:
        return None
    return QuantParams.per_tensor(float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]))


def _encodings(graph: Graph) -> dict[str, QuantParams]:
    """Each integer tensor's encoding: that of the QuantizeLinear producing it, else that of the
    DequantizeLinears reading it when they all agree (a graph input, say). A tensor read with
    another encoding than its own has none, and its readers stay in float."""
    found: dict[str, QuantParams | None] = {}
    for node in graph.nodes:
        if node.op == "QuantizeLinear":
            found[node.outputs[0]] = _per_tensor(graph, node)
    for node in graph.nodes:
        x = node.inputs[0] if node.inputs else ""
        if node.op != "DequantizeLinear" or x in graph.constants:
            continue
        params = _per_tensor(graph, node)
        if x not in found:
            found[x] = params
        elif params is None or not params.same_as(found[x]):
            found[x] = None
    return {name: params for name, params in found.items() if params is not None}


class _Chains:
    def __init__(self, graph: Graph, encodings: dict[str, QuantParams]):
        self.graph = graph
        self.encodings = encodings
        self.producers = graph.producers()
        self.users = graph.consumers()
        self._from_constants: set[str] = set()
        for node in graph.nodes:          # in topological order
            if folds(node, self.computable):
                self._from_constants.update(node.outputs)

    def computable(self, name: str) -> bool:
        """`name` is a constant or made from constants only: fold_constants will evaluate it."""
        return not name or name in self.graph.constants or name in self._from_constants

    def const(self, name: str):
        return self.graph.constants.get(name) if name else None

    def dequantized(self, name: str) -> tuple[str, QuantParams] | None:
        """(integer tensor, its encoding) if `name` is a DequantizeLinear of a computed tensor with one encoding."""
        node = self.producers.get(name)
        if node is None or node.op != "DequantizeLinear" or node.inputs[0] not in self.encodings:
            return None
        return node.inputs[0], self.encodings[node.inputs[0]]

    def constant_codes(self, rw: Rewriter, name: str) -> tuple[str, QuantParams] | None:
        """(the codes as a constant carrying their encoding, that encoding) if `name` is a DequantizeLinear
        of constant codes with one scale and zero point."""
        node = self.producers.get(name)
        if node is None or node.op != "DequantizeLinear" or node.inputs[0] not in self.graph.constants:
            return None
        params = _per_tensor(self.graph, node)
        if params is None:
            return None
        return rw.constant(f"{node.inputs[0]}_codes", self.graph.constants[node.inputs[0]], params), params

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

    def quantized_output(self, name: str) -> tuple[list[Node], list[tuple[float, float]], str] | None:
        """Follow `name` through single-use clamps (Relu, Clip) to a QuantizeLinear into int8/uint8/int16:
        (the clamp nodes, their bounds, the integer tensor it makes)."""
        nodes: list[Node] = []
        bounds: list[tuple[float, float]] = []
        while True:
            users = self.users.get(name, [])
            if len(users) != 1 or name in self.graph.outputs:
                return None
            user = users[0]
            if user.op == "QuantizeLinear":
                y = user.outputs[0]
                if y not in self.encodings or self.graph.values[y].dtype not in ("int8", "uint8", "int16"):
                    return None
                return nodes + [user], bounds, y
            clamp = op_def(user.op).clamp
            bound = clamp(self.graph, user) if clamp else None
            if bound is None:
                return None
            nodes.append(user)
            bounds.append(bound)
            name = user.outputs[0]


def _fuse(graph: Graph) -> Graph:
    encodings = _encodings(graph)
    chains = _Chains(graph, encodings)
    rw = Rewriter(graph)
    for name, params in encodings.items():
        rw.values[name] = dataclasses.replace(rw.values[name], quant=params)
    absorbed: set[str] = set()
    replacement: dict[str, Node] = {}
    for node in graph.nodes:
        fused = _match(chains, rw, node) or _requantize(chains, node) or _recurrent_codes(chains, rw, node)
        if fused is not None:
            new, swallowed = fused
            replacement[node.name] = new
            absorbed.update(n.name for n in swallowed)
    return rw.rebuild(replacement, absorbed)


def _match(chains: _Chains, rw: Rewriter, node: Node) -> tuple[Node, list[Node]] | None:
    """The integer form of `node` when its inputs are dequantized and its output quantized: the node on
    the integer tensors, with the clamps between it and the QuantizeLinear as fused activations."""
    definition = op_def(node.op)
    form = definition.quant
    if form is QuantForm.NONE:
        return None
    if folds(node, chains.computable):
        # made from constants only: fold_constants evaluates the float op with ONNX semantics. The integer
        # form would fold as the float op too, but on the codes, without the rescale between encodings.
        return None
    if form is QuantForm.MOVE and len(node.outputs) > 1:
        return _match_split(chains, rw, node)
    out = chains.quantized_output(node.outputs[0])
    if out is None:
        return None
    swallowed, bounds, y = out
    if bounds and not definition.quant_acts:
        return None
    attrs = {**node.attrs, "acts": tuple(("clip", b) for b in bounds)} if bounds else node.attrs
    if form is QuantForm.MATRIX:
        return _match_matrix(chains, rw, node.with_(attrs=attrs), y, swallowed)
    if form is QuantForm.MOVE:
        return _match_move(chains, rw, node, y, swallowed)
    parts = [chains.dequantized(i) for i in (node.inputs if form is QuantForm.CONCAT else node.inputs[:1])]
    if form is QuantForm.BINARY:
        parts.append(chains.dequantized(node.inputs[1]))
    if any(p is None for p in parts):
        return None
    inputs = tuple(p[0] for p in parts) + node.inputs[len(parts):]    # a Clip keeps its constant bounds
    return node.with_(inputs=inputs, outputs=(y,), attrs=attrs), swallowed


def _match_move(chains: _Chains, rw: Rewriter, node: Node, y: str, swallowed: list[Node]
                ) -> tuple[Node, list[Node]] | None:
    """An op that moves values without arithmetic, on the integer tensor (or the constant codes: an
    embedding table) when nothing is rescaled: its input's encoding is the output's."""
    source = chains.dequantized(node.inputs[0]) or chains.constant_codes(rw, node.inputs[0])
    if source is None:
        return None
    x, params = source
    if not params.same_as(chains.encodings[y]) or rw.values[x].dtype != rw.values[y].dtype:
        return None
    return node.with_(inputs=(x,) + node.inputs[1:], outputs=(y,)), swallowed


def _match_split(chains: _Chains, rw: Rewriter, node: Node) -> tuple[Node, list[Node]] | None:
    """A Split whose outputs are each quantized as its input is: the Split on the integer tensor."""
    swallowed: list[Node] = []
    ys: list[str] = []
    for output in node.outputs:
        out = chains.quantized_output(output)
        if out is None or out[1]:
            return None
        swallowed += out[0]
        ys.append(out[2])
    moved = _match_move(chains, rw, node.with_(outputs=(ys[0],)), ys[0], swallowed)
    if moved is None or any(not chains.encodings[y].same_as(chains.encodings[ys[0]])
                            or rw.values[y].dtype != rw.values[ys[0]].dtype for y in ys):
        return None
    return moved[0].with_(outputs=tuple(ys)), swallowed


def _requantize(chains: _Chains, node: Node) -> tuple[Node, list[Node]] | None:
    """A DequantizeLinear read only by a QuantizeLinear into another encoding (the conversions a mixed-precision
    model has between int8 and int16): one Requantize kernel from integers to integers, computing what the
    two compute, without the float tensor between them."""
    if node.op != "QuantizeLinear" or node.outputs[0] not in chains.encodings:
        return None
    source = chains.dequantized(node.inputs[0])
    if source is None or len(chains.users.get(node.inputs[0], [])) != 1 or node.inputs[0] in chains.graph.outputs:
        return None
    x, params = source
    y = chains.encodings[node.outputs[0]]
    return Node("Requantize", node.name, (x,), node.outputs, {"from_scale": params.scale, "from_zero_point":
                                                              params.zero_point, "scale": y.scale,
                                                              "zero_point": y.zero_point}), []


def _recurrent_codes(chains: _Chains, rw: Rewriter, node: Node) -> tuple[Node, list[Node]] | None:
    """An LSTM, GRU or RNN whose W or R is a DequantizeLinear of constant codes with one scale (what
    onnxruntime's QDQ quantizer makes of them): the layer runs in float as the model says, but reads the
    codes (their QuantParams on the constant) and dequantizes them as it loads them, so the weights keep
    the one or two bytes of their codes in flash instead of four."""
    if node.op not in ("LSTM", "GRU", "RNN"):
        return None
    inputs, swallowed = list(node.inputs), []
    for index in (1, 2):
        name = inputs[index] if len(inputs) > index else ""
        dq = chains.producers.get(name)
        if dq is None or dq.op != "DequantizeLinear" or dq.inputs[0] not in chains.graph.constants:
            continue
        codes = chains.graph.constants[dq.inputs[0]]
        scale, zp = chains.const(dq.inputs[1]), chains.const(dq.inputs[2] if len(dq.inputs) > 2 else "")
        if scale is None or scale.size != 1 or codes.dtype.name not in ("int8", "uint8", "int16"):
            continue
        params = QuantParams.per_tensor(float(scale.reshape(())), int(zp.reshape(())) if zp is not None else 0)
        inputs[index] = rw.constant(f"{name}_codes", codes, params)
        if len(chains.users.get(name, [])) == 1 and name not in chains.graph.outputs:
            swallowed.append(dq)
    if inputs == list(node.inputs):
        return None
    return node.with_(inputs=tuple(inputs)), swallowed


def _match_matrix(chains: _Chains, rw: Rewriter, node: Node, y: str, swallowed: list[Node]) \
        -> tuple[Node, list[Node]] | None:
    """Conv, Gemm, MatMul by a constant: integer weights with per-output-channel parameters (Gemm and
    MatMul as (K, N) with channels last) and an int32 bias (or a float one, as the model has it). A MatMul
    of a (..., M, K) tensor becomes a Gemm of that rank, which canonicalize views as (rows, K); a MatMul of two
    dequantized int8 tensors stays a MatMul, on the integers."""
    x = chains.dequantized(node.inputs[0])
    if x is None:
        return None
    xq, x_params = x
    if node.op == "Conv":
        w = chains.weight(node.inputs[1], 0)
        channel_axis = 0
    elif node.op == "Gemm":
        if node.attrs.get("transA", 0):
            return None
        channel_axis = 0 if node.attrs.get("transB", 0) else 1
        w = chains.weight(node.inputs[1], channel_axis)
    elif node.inputs[1] not in chains.graph.constants and chains.dequantized(node.inputs[1]) is not None:
        # MatMul of two computed tensors (attention's products): int32 sums of the two integer operands
        b, _ = chains.dequantized(node.inputs[1])
        if {rw.values[xq].dtype, rw.values[b].dtype} - {"int8", "uint8"}:
            return None
        return node.with_(inputs=(xq, b), outputs=(y,)), swallowed
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
    op = "Conv" if node.op == "Conv" else "Gemm"
    if node.op == "Gemm" and len(rw.values[xq].shape) != 2:
        return None
    bias = _bias(chains, node, x_params.scale, w_scale)
    if bias is False:
        return None
    w_name = rw.constant(node.name + "_wq", weights, QuantParams(w_scale, w_zp, channel_axis))
    b_name = ""
    if bias is not None:
        b_params = QuantParams(x_params.scale * w_scale, np.zeros_like(w_zp), 0) if bias.dtype == np.int32 else None
        b_name = rw.constant(node.name + "_bq", bias, b_params)
    attrs = {k: v for k, v in node.attrs.items() if k not in ("alpha", "beta", "transA", "transB")}
    return Node(op, node.name, (xq, w_name, b_name), (y,), attrs), swallowed


def _bias(chains: _Chains, node: Node, x_scale: float, w_scale: np.ndarray):
    """The bias: int32 in units of x_scale * w_scale when the model quantized it, float32 when the model
    keeps it in float (added in float by the kernel, as onnxruntime does); None if absent, False if
    not usable."""
    name = operand(node, "bias") if op_def(node.op).fusion is Fusion.MATRIX else ""     # MatMul has none
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
