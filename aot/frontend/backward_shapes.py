"""Shapes read backwards, from a tensor whose shape is known to the inputs of the node that made it.

ONNX inference runs forwards only. A tensor a value fed at run time decides (ReduceSum's axes as an
input, as every `_expanded` reduction passes them) is left unknown, though the graph output it flows
into, through ops that keep its shape, is declared: ReduceSum -> Cast -> Sqrt -> CastLike -> output.
The declared shape is the model's interface (see onnx.py), so the intermediate tensor's shape is the
one it implies; the run-time value then decides nothing a static shape does not (as Resize's scales).

Only exact implications are taken: through an op whose output has its input's shape, and through a
broadcasting op whose other operands are known and of size 1 (or absent) on an axis, where this
operand alone gives the output's size. Anything ambiguous stays unknown. A known dimension is never
replaced; one the implication contradicts is a ModelError naming the tensor.
"""

from __future__ import annotations

import onnx

from aot.errors import ModelError

# Ops whose first output has exactly the shape of their first input (the other inputs, if any, being
# parameters: CastLike's target type, Clip's bounds, Dropout's ratio).
_SHAPE_KEEPING = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast", "CastLike", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Hardmax",
    "Identity", "IsInf", "IsNaN", "LeakyRelu", "Log", "LogSoftmax", "Mish", "Neg", "Not", "Reciprocal", "Relu",
    "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan",
    "Tanh", "ThresholdedRelu",
})

# Ops whose output is their operands broadcast together (numpy rules), every input an operand.
_BROADCASTING = frozenset({
    "Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "Sub", "Sum",
    "Where", "Xor",
})

Dims = list[int | None]      # a tensor's dimensions, None where unknown; a tensor of unknown rank is absent


def shapes_from_outputs(proto: onnx.ModelProto, label: str) -> onnx.ModelProto | None:
    """The model with the shapes that known tensors imply for their producers' inputs added to its
    value_info, repeated until nothing more follows; None if nothing does."""
    g = proto.graph
    infos = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)
             if vi.type.HasField("tensor_type")}
    shapes: dict[str, Dims] = {name: _dims(vi.type.tensor_type) for name, vi in infos.items()
                               if vi.type.tensor_type.HasField("shape")}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    learned: dict[str, Dims] = {}
    changed = True
    while changed:
        changed = False
        for node in reversed(g.node):
            for name, implied in _implied(node, shapes):
                if name not in infos or not infos[name].type.tensor_type.elem_type:
                    continue        # untyped: inference failed before it, and reports that
                merged = _merge(shapes.get(name), implied, name, node, label)
                if merged != shapes.get(name):
                    shapes[name] = learned[name] = merged
                    changed = True
    if not learned:
        return None
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    kept = [vi for vi in result.graph.value_info if vi.name not in learned]
    del result.graph.value_info[:]
    result.graph.value_info.extend(kept)
    for name, dims in learned.items():
        elem = infos[name].type.tensor_type.elem_type
        result.graph.value_info.append(onnx.helper.make_tensor_value_info(name, elem, dims))
    return result


def _dims(ttype) -> Dims:
    return [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]


def _implied(node: onnx.NodeProto, shapes: dict[str, Dims]) -> list[tuple[str, Dims]]:
    """(input, the shape its node's known output implies for it) for each input something follows for."""
    if node.domain not in ("", "ai.onnx") or not node.output or node.output[0] not in shapes:
        return []
    out = shapes[node.output[0]]
    if node.op_type in _SHAPE_KEEPING and node.input and node.input[0]:
        return [(node.input[0], list(out))]
    if node.op_type not in _BROADCASTING or None in out:
        return []
    operands = [name for name in node.input if name]
    implied = []
    for name in operands:
        others = [shapes.get(other) for other in operands if other != name]
        if any(other is None or None in other for other in others):
            continue        # an unknown operand may supply any axis: nothing follows
        dims = _broadcast_operand(out, others, shapes.get(name))
        if dims is not None:
            implied.append((name, dims))
    return implied


def _broadcast_operand(out: list[int], others: list[list[int]], own: Dims | None) -> Dims | None:
    """What the output of a broadcast implies for one operand, given the others: on an axis where
    every other operand is absent or 1, this operand's size is the output's (1 included: a 1 there is
    this operand's own, or the axis is absent, which only its rank tells). Its rank is its own if
    known; otherwise the output's if the leading axis comes from this operand alone (not 1)."""
    rank = len(out)

    def alone(axis: int) -> bool:       # axis counted from the left of the output
        return all(len(o) < rank - axis or o[axis - rank + len(o)] == 1 for o in others)

    if own is not None:
        if len(own) > rank:
            return None      # forward inference reports that broadcast
        return [out[rank - len(own) + k] if alone(rank - len(own) + k) else None for k in range(len(own))]
    if rank and (out[0] == 1 or not alone(0)):
        return None          # this operand may lack the leading axes: its rank is unknown
    if not all(alone(axis) for axis in range(rank)):
        return None
    return list(out)


def _merge(known: Dims | None, implied: Dims, name: str, node: onnx.NodeProto, label: str) -> Dims:
    """`known` completed by `implied`; a contradiction is the model's error."""
    if known is None:
        return implied
    if len(known) != len(implied) or any(a is not None and b is not None and a != b for a, b in zip(known, implied)):
        what = f"node '{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"
        raise ModelError(f"{label}: tensor '{name}' has shape {_text(known)}, but the output of {what}, "
                         f"which it feeds, implies {_text(implied)}")
    return [a if a is not None else b for a, b in zip(known, implied)]


def _text(dims: Dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
