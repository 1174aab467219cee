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

Inference names the unknown sizes it passes along (unk__N), one name for sizes it knows equal: a Range
of a length fed at run time and every elementwise step after it share one. A size found for a name is
that name's on every tensor, which reaches tensors no chain of the rules above links to the output (a
window's expanded body adds two cosines of the same Range, each one alone ambiguous).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from aot.errors import ModelError

# Ops whose first output has exactly the shape of their first input (the other inputs, if any, being
# parameters: CastLike's target type, Clip's bounds, Dropout's ratio, PRelu's slope broadcast to it).
_SHAPE_KEEPING = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast", "CastLike", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Hardmax",
    "Identity", "IsInf", "IsNaN", "LeakyRelu", "Log", "LogSoftmax", "Mish", "Neg", "Not", "PRelu", "Reciprocal",
    "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt",
    "Tan", "Tanh", "ThresholdedRelu",
})

# Ops whose output is their operands broadcast together (numpy rules), every input an operand.
_BROADCASTING = frozenset({
    "Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "Sub", "Sum",
    "Where", "Xor",
})

Dim = int | str | None      # a size; a name ONNX inference gives an unknown size (unk__N: equal names, equal
                            # sizes, as in an exporter's dim_param); or unknown
Dims = list[int | None]     # a shape as far as sizes are known; a tensor of unknown rank has none


def shapes_from_outputs(proto: onnx.ModelProto, label: str) -> onnx.ModelProto | None:
    """The model with the shapes that known tensors imply for their producers' inputs added to its
    value_info, repeated until nothing more follows; None if nothing does. A size implied for a named
    dimension is that name's everywhere (a window's Range and every elementwise step after it share
    inference's one name for its length)."""
    g = proto.graph
    infos = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)
             if vi.type.HasField("tensor_type")}
    given: dict[str, list[Dim]] = {name: _dims(vi.type.tensor_type) for name, vi in infos.items()
                                   if vi.type.tensor_type.HasField("shape")}
    given.update({t.name: list(t.dims) for t in g.initializer})
    current = {name: list(dims) for name, dims in given.items()}
    sizes: dict[str, int] = {}      # a dimension's name -> the size it was found to have

    def shape_of(name: str) -> list[Dim] | None:     # the sizes found for names in, the other names kept
        return [sizes.get(d, d) if isinstance(d, str) else d for d in current[name]] if name in current else None

    changed = True
    while changed:
        changed = False
        for node in reversed(g.node):
            for name, implied in _implied(node, shape_of):
                if name not in infos or not infos[name].type.tensor_type.elem_type:
                    continue        # untyped: inference failed before it, and reports that
                changed |= _merge(current, sizes, name, implied, node, label)
    interface = {vi.name for vi in list(g.input) + list(g.output)}      # declared, not learned
    learned = {name: _sized(dims, sizes) for name, dims in current.items()
               if name in infos and name not in interface and _sized(dims, sizes) != _sized(given.get(name), {})}
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


def _dims(ttype) -> list[Dim]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in ttype.shape.dim]


def _sized(dims: list[Dim] | None, sizes: dict[str, int]) -> Dims | None:
    """The dimensions with the sizes found for their names; a name still without one is unknown."""
    if dims is None:
        return None
    return [sizes.get(d) if isinstance(d, str) else d for d in dims]


def _implied(node: onnx.NodeProto, shape_of: Callable[[str], list[Dim] | None]) -> list[tuple[str, Dims]]:
    """(input, the shape its node's known output implies for it) for each input something follows for."""
    out = shape_of(node.output[0]) if node.domain in ("", "ai.onnx") and node.output else None
    if out is None:
        return []
    if node.op_type in _SHAPE_KEEPING and node.input and node.input[0]:
        return [(node.input[0], [d if isinstance(d, int) else None for d in out])]
    if node.op_type not in _BROADCASTING:
        return []
    operands = [name for name in node.input if name]
    implied = []
    for name in operands:
        others = [shape_of(other) for other in operands if other != name]
        if any(other is None for other in others):
            continue        # an operand of unknown rank may supply any axis: nothing follows
        dims = _broadcast_operand(out, others, shape_of(name))
        if dims is not None:
            implied.append((name, dims))
    return implied


def _broadcast_operand(out: list[Dim], others: list[list[Dim]], own: list[Dim] | None) -> Dims | None:
    """What the output of a broadcast implies for one operand, given the others: on an axis where
    every other operand is absent, 1 or of the same named size as this one, this operand's size is the
    output's (1 included: a 1 there is this operand's own, or the axis is absent, which only its rank
    tells). Its rank is its own if known; otherwise the output's if the leading axis comes from this
    operand alone (not 1)."""
    rank = len(out)

    def alone(axis: int, mine: Dim) -> bool:       # axis counted from the left of the output
        return all(len(o) < rank - axis or o[axis - rank + len(o)] == 1
                   or (isinstance(mine, str) and o[axis - rank + len(o)] == mine) for o in others)

    def size(axis: int, mine: Dim) -> int | None:
        return out[axis] if isinstance(out[axis], int) and alone(axis, mine) else None

    if own is not None:
        if len(own) > rank:
            return None      # forward inference reports that broadcast
        return [size(rank - len(own) + k, dim) for k, dim in enumerate(own)]
    if rank and out[0] == 1:
        return None          # this operand may lack the leading axes: its rank is unknown
    dims = [size(axis, None) for axis in range(rank)]
    return None if None in dims else dims


def _merge(current: dict[str, list[Dim]], sizes: dict[str, int], name: str, implied: Dims, node: onnx.NodeProto,
           label: str) -> bool:
    """Complete `name`'s shape in `current` (or the sizes of its named dimensions) by `implied`; whether
    anything was learned. A contradiction is the model's error."""
    known = current.get(name)
    if known is None:
        current[name] = list(implied)
        return True
    if len(known) != len(implied) or any(a is not None and b is not None and a != b
                                         for a, b in zip(_sized(known, sizes), implied)):
        what = f"node '{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"
        raise ModelError(f"{label}: tensor '{name}' has shape {_text(_sized(known, sizes))}, but the output of "
                         f"{what}, which it feeds, implies {_text(implied)}")
    learned = False
    for axis, (dim, size) in enumerate(zip(known, implied)):
        if size is None or isinstance(dim, int) or (isinstance(dim, str) and dim in sizes):
            continue
        if isinstance(dim, str):
            sizes[dim] = size
        else:
            known[axis] = size
        learned = True
    return learned


def _text(dims: Dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
