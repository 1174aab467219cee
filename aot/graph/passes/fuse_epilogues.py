"""Fuse what follows an anchor op into the anchor's epilogue, so the result is written once.

Anchors are the ops registered with a fusion role (aot/registry.py): matrix ops (Conv, Gemm),
MatMul, elementwise ops and activations. Fused, when the anchor's output has no other use:
  an activation (Unary)             -> appended to attrs["acts"] as (fn, params), but SiLU after a
                                       matrix op (OWN_PASS)
and into matrix anchors, before any activation:
  a per-channel constant Add        -> the anchor's bias
  a per-channel constant Mul        -> scaled weights and bias
  an Add of a same-shaped tensor    -> a residual input, added before the activations
and into integer matrix anchors (quantized Conv/Gemm) without activations:
  an integer Add of a same-shaped integer tensor -> a residual input (see _integer_residual)
  then an activation between integer tensors   -> attrs["function"] (see _integer_function)
The fused node takes the position of the node it absorbed, where all of its inputs exist.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant
from aot.registry import Fusion, op_def, operand, with_operands

_ANCHORS = {Fusion.MATRIX, Fusion.ANCHOR, Fusion.ACTIVATION}

# Activations one epilogue may hold. Models chain two or three; the bound keeps a kernel's expression
# (which the kernel-IR verifier and code generator walk recursively) as deep as a few activations,
# whatever the depth of the graph: a chain of 10,000 Relu nodes becomes 589 kernels, not one
# expression 10,000 deep.
MAX_EPILOGUE = 16

# Activations a matrix op does not take as an epilogue: SiLU (x * sigmoid(x), recognize_activations) in
# every stored vector of a convolution's unrolled tiles doubled YOLOv8n's host build and ran 8 % slower
# than as a pass of its own.
OWN_PASS = frozenset({"silu"})


def fuse_epilogues(graph: Graph) -> Graph:
    """One walk in node order. Each node, as fused so far, merges into its only user when it can; the
    merged node takes that user's place and is considered again there, so a chain of any length
    fuses in one walk (linear in the graph's size). A user is merged into at most once: what it
    becomes carries the anchor's op, which is never a follower (only one-input Unary ops are)."""
    users = graph.consumers()
    rw = Rewriter(graph)
    replaced: dict[int, Node] = {}      # id(user) -> the merged node that takes the user's place
    for node in graph.nodes:
        current = replaced.pop(id(node), node)
        follower = _only_user(graph, users, current)
        merged = None
        if follower is not None and id(follower) not in replaced:
            merged = _merge(rw, current, follower)
        if merged is None:
            rw.keep(current)
        else:
            replaced[id(follower)] = merged
    return rw.finish()


def _only_user(graph: Graph, users: dict[str, list[Node]], anchor: Node) -> Node | None:
    """The node `anchor` may fuse into: the one user of its one output, if the anchor takes epilogues."""
    if op_def(anchor.op).fusion not in _ANCHORS or anchor.outputs[0] in graph.outputs or len(anchor.outputs) > 1:
        return None
    next_users = users.get(anchor.outputs[0], [])
    return next_users[0] if len(next_users) == 1 else None


def _merge(rw: Rewriter, anchor: Node, follower: Node) -> Node | None:
    graph = rw.graph
    constants = rw.constants        # with the weights and biases of merges made earlier in the walk
    out = follower.outputs[0]
    if node_quant(graph.values, anchor) is not None:
        return _integer_residual(graph, anchor, follower) or _integer_function(graph, anchor, follower)
    acts = anchor.attrs.get("acts", ())
    anchor_def, follower_def = op_def(anchor.op), op_def(follower.op)
    if follower_def.fusion is Fusion.ACTIVATION:
        if len(acts) >= MAX_EPILOGUE or (anchor_def.fusion is Fusion.MATRIX and follower.attrs["fn"] in OWN_PASS):
            return None
        return anchor.with_(outputs=(out,), attrs={**anchor.attrs, "acts": acts + ((follower.attrs["fn"],
                                                                                   follower.attrs["params"]),)})
    kind = follower_def.matrix_epilogue
    if not kind or anchor_def.fusion is not Fusion.MATRIX or acts:
        return None
    other = follower.inputs[1] if follower.inputs[0] == anchor.outputs[0] else follower.inputs[0]
    shape = graph.shape(anchor.outputs[0])
    if other == anchor.outputs[0] or graph.shape(out) != shape:
        return None
    w, bias = operand(anchor, "weight"), operand(anchor, "bias")
    channels = shape[-1]
    per_channel = _per_channel(constants.get(other), channels)
    if kind == "mul":                   # scale the output channels: weights and bias
        if per_channel is None or operand(anchor, "residual"):
            return None
        weight = constants[w]
        axis_shape = [1] * weight.ndim
        axis_shape[anchor_def.weight_channel_axis] = -1
        new_w = rw.constant(w + "_scaled", weight * per_channel.reshape(axis_shape))
        new_b = rw.constant(anchor.name + "_bias", constants[bias] * per_channel) if bias else ""
        return with_operands(anchor, weight=new_w, bias=new_b).with_(outputs=(out,))
    if per_channel is not None:
        total = per_channel + constants[bias] if bias else per_channel
        new_bias = rw.constant(anchor.name + "_bias", total)
        return with_operands(anchor, bias=new_bias).with_(outputs=(out,))
    if other in constants or operand(anchor, "residual") or graph.shape(other) != shape:
        return None
    return with_operands(anchor, residual=other).with_(outputs=(out,))


def _integer_residual(graph: Graph, anchor: Node, follower: Node) -> Node | None:
    """An integer Add of an integer matrix op's result (without activations) and another integer tensor
    of its shape: the Add becomes the op's residual, its clamps the op's activations. The op keeps the
    encoding of its own result in attrs["own_result"]: the kernel rounds to it, then adds as the Add did
    (bit for bit), so the result never takes bytes of its own."""
    if (op_def(anchor.op).fusion is not Fusion.MATRIX or op_def(follower.op).matrix_epilogue != "add"
            or anchor.attrs.get("acts") or operand(anchor, "residual") or node_quant(graph.values, follower) is None):
        return None
    mine = anchor.outputs[0]
    other = follower.inputs[1] if follower.inputs[0] == mine else follower.inputs[0]
    if other == mine or other in graph.constants or {graph.shape(other), graph.shape(follower.outputs[0])} != {
            graph.shape(mine)}:
        return None
    own = graph.values[mine]
    attrs = {**anchor.attrs, "acts": follower.attrs.get("acts", ()),
             "own_result": (own.quant.scale, own.quant.zero_point, own.dtype)}
    return with_operands(anchor, residual=other).with_(outputs=follower.outputs, attrs=attrs)


def _integer_function(graph: Graph, anchor: Node, follower: Node) -> Node | None:
    """An activation between integer tensors (a quantized Unary: Relu, Sigmoid, ... that a quantizer kept
    between Dequantize and Quantize) after an integer matrix op: the op applies it to its integer result in
    its epilogue, as the activation's kernel would have (bit for bit), and its result never takes bytes of
    its own. attrs["function"] keeps the function and the encoding of its input."""
    quant = node_quant(graph.values, follower)
    if (op_def(anchor.op).fusion is not Fusion.MATRIX or follower.op != "Unary" or "function" in anchor.attrs
            or follower.attrs.get("acts") or quant is None or quant.rules == "tflite"):
        return None     # (a TFLite model's activations are tables and fixed point of their own: ops/tflite_tables.py)
    own = graph.values[anchor.outputs[0]]
    function = (follower.attrs["fn"], tuple(follower.attrs["params"]), own.quant.scale, own.quant.zero_point,
                own.dtype)
    return anchor.with_(outputs=follower.outputs, attrs={**anchor.attrs, "function": function})


def _per_channel(array: np.ndarray | None, channels: int) -> np.ndarray | None:
    """A constant that varies only along the last (channel) axis, as a (channels,) vector."""
    if array is None or array.size not in (1, channels):
        return None
    if array.size == channels and array.shape[-1:] != (channels,):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)).astype(np.float32)
