"""Activations that exporters spell out in elementwise ops, as the one Unary op they are:

  x * Sigmoid(x)                                   -> Unary silu        (PyTorch's SiLU in older exports)
  x * HardSigmoid(x), alpha 1/6, beta 1/2          -> Unary hard_swish
  x * Clip(x + 3, 0, 6) / 6   (or * 1/6)           -> Unary hard_swish  (Paddle's hard_swish)

Spelled out, the activation reads x twice, so its producer (a Conv) cannot take it as an epilogue, and
it runs as two or three kernels of its own, each a pass over the tensor. As one Unary it follows the
Conv into its epilogue (fuse_epilogues). Only float nodes whose inner values nothing else reads are
taken. The Clip form computes x * clip(x + 3, 0, 6) / 6 where hard_swish computes
x * clip(x / 6 + 1/2, 0, 1): the same function, its last bit rounded differently for some x.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.graph.node_quant import node_quant

_SIXTH = float(np.float32(1 / 6))


def recognize_activations(graph: Graph) -> Graph:
    producers, users = graph.producers(), graph.consumers()
    rw = Rewriter(graph)
    replacement: dict[str, Node] = {}
    dropped: set[str] = set()

    def inner(value: str, op: str, fn: str | None = None) -> Node | None:
        """The node computing `value` if it is an `op` (a Unary `fn`) in float that only one node reads."""
        node = producers.get(value)
        if (node is None or node.op != op or (fn is not None and node.attrs.get("fn") != fn)
                or len(users.get(value, [])) != 1 or value in graph.outputs or node_quant(graph.values, node)):
            return None
        return node

    def scalar(value: str, expected: float) -> bool:
        array = graph.constants.get(value)
        return array is not None and array.size == 1 and float(np.float32(array.reshape(-1)[0])) == expected

    for node in graph.nodes:
        if node.op not in ("Mul", "Div") or node_quant(graph.values, node) or len(node.inputs) != 2:
            continue
        found = _activation(node, inner, scalar)
        if found is None:
            continue
        x, fn, absorbed = found
        if (graph.values[x].dtype != "float32" or graph.values[x].shape != graph.values[node.outputs[0]].shape
                or node.name in dropped or any(n.name in replacement for n in absorbed)):
            continue
        replacement[node.name] = Node("Unary", node.name, (x,), node.outputs, {"fn": fn, "params": ()})
        dropped |= {n.name for n in absorbed}
    return rw.rebuild(replacement, dropped) if replacement else graph


def _activation(node: Node, inner, scalar) -> tuple[str, str, list[Node]] | None:
    """The input x of the activation `node` ends, its Unary fn and the other nodes it absorbs; or None."""
    a, b = node.inputs
    if node.op == "Mul":
        for x, other in ((a, b), (b, a)):
            sigmoid = inner(other, "Unary", "sigmoid")
            if sigmoid is not None and sigmoid.inputs[0] == x:
                return x, "silu", [sigmoid]
            hard = inner(other, "Unary", "hard_sigmoid")
            if hard is not None and hard.inputs[0] == x and _close(hard.attrs.get("params", ()), (_SIXTH, 0.5)):
                return x, "hard_swish", [hard]
    # x * Clip(x + 3, 0, 6), then / 6 or * 1/6
    for product, divisor in ((a, b),) if node.op == "Div" else ((a, b), (b, a)):
        if not scalar(divisor, 6.0 if node.op == "Div" else _SIXTH):
            continue
        mul = inner(product, "Mul")
        if mul is None:
            continue
        for x, clipped in (mul.inputs, mul.inputs[::-1]):
            clip = inner(clipped, "Unary", "clip")
            if clip is None or tuple(clip.attrs.get("params", ())) != (0.0, 6.0):
                continue
            add = inner(clip.inputs[0], "Add")
            if add is not None and any(y == x and scalar(three, 3.0) for y, three in (add.inputs, add.inputs[::-1])):
                return x, "hard_swish", [mul, clip, add]
    return None


def _close(params, expected: tuple[float, ...]) -> bool:
    return len(params) == len(expected) and all(float(np.float32(p)) == e for p, e in zip(params, expected))
