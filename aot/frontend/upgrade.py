"""Models of opsets older than 7, upgraded to opset 7 before anything else reads them.

aot's op lowerings follow the semantics of opset 7 on (multidirectional numpy broadcasting, attributes as
opset 7 names them); onnx's version converter rewrites an older model to that opset. Two legacy
semantics it does not carry over are rewritten first, at the model's own opset:

- `broadcast=1, axis=k` on Add, Sub, Mul, Div, Pow, And, Or, Xor, Equal, Greater, Less: B's shape
  lines up with A's from axis k, not from the end. B gets trailing dimensions of 1 (an Unsqueeze), so
  that numpy's alignment from the end places it at k, and the axis goes. (The converter would unsqueeze
  B by rank(A) - rank(B) dimensions whatever k is, and refuses where that does not broadcast.)
- PRelu's slope before opset 7 is per channel: a slope of shape [C] on an N x C x ... input applies
  along axis 1, where numpy broadcasting would align it with the last axis. It becomes [C, 1, ...].
"""

from __future__ import annotations

import re

import onnx
from onnx import helper, version_converter

from aot.errors import ModelError
from aot.frontend.control_flow import fresh_name

# The opset models are upgraded to: the first with numpy broadcasting, the oldest aot's ops read.
UPGRADED_OPSET = 7

_AXIS_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"})


def default_opset(proto: onnx.ModelProto) -> int | None:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def upgrade_old_opset(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """The model at opset 7 if it imports an older default opset (itself otherwise); a model the
    converter cannot upgrade is a ModelError naming the model, its opset and the converter's reason."""
    opset = default_opset(proto)
    if opset is None or opset >= UPGRADED_OPSET:
        return proto
    legacy = _numpy_broadcasting(proto, label, opset)
    try:
        upgraded = _typed_constants(version_converter.convert_version(legacy, UPGRADED_OPSET))
        onnx.checker.check_model(upgraded)
    except Exception as err:    # noqa: BLE001 - the converter raises RuntimeError, IndexError, checker errors, ...
        raise ModelError(f"{label}: imports opset {opset}; aot upgrades models older than opset {UPGRADED_OPSET} "
                         f"with onnx's version converter, which cannot upgrade this one: {_reason(err)}") from None
    return upgraded


def _typed_constants(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The converter writes Reshape's old `shape` attribute as an int64 Constant node, which Constant
    before opset 9 cannot hold (its values are float): such a node becomes an initializer (listed as a
    graph input too where the IR version asks for it)."""
    g = proto.graph
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    odd = {i for i, n in enumerate(g.node) if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
           and len(n.attribute) == 1 and n.attribute[0].name == "value" and n.attribute[0].t.data_type not in floats}
    if not odd:
        return proto
    kept = []
    for i, node in enumerate(g.node):
        if i not in odd:
            kept.append(node)
            continue
        tensor = onnx.TensorProto()
        tensor.CopyFrom(node.attribute[0].t)
        tensor.name = node.output[0]
        g.initializer.append(tensor)
        if proto.ir_version < 4:
            g.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in kept]
    del g.node[:]
    g.node.extend(nodes)
    return proto


def _reason(err: Exception) -> str:
    """The converter's message without the C++ source position and assertion text it starts with:
    "No Adapter From Version $1 for Pad" reads "no adapter for Pad from opset 1"."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = re.sub(r"^.*?Assertion `.*?` failed: ", "", text)
    adapter = re.fullmatch(r"No Adapter From Version \$(\d+) for (\w+)", text)
    if adapter:
        return f"it has no adapter for {adapter.group(2)} from opset {adapter.group(1)}"
    return text


def _numpy_broadcasting(proto: onnx.ModelProto, label: str, opset: int) -> onnx.ModelProto:
    """The model with every legacy axis broadcast and per-channel PRelu slope made a numpy broadcast."""
    ranks = _ranks(proto)
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    names = {n for node in result.graph.node for n in list(node.input) + list(node.output)}
    names |= {vi.name for vi in result.graph.input} | {t.name for t in result.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(result.graph.node):
        trailing = _trailing_ones(node, ranks, label, opset, index)
        if trailing:        # the second operand (B, PRelu's slope) gets `trailing` dimensions of 1
            b = node.input[1]
            unsqueezed = fresh_name(f"{b}_unsqueezed", names)
            nodes.append(helper.make_node("Unsqueeze", [b], [unsqueezed],
                                          name=fresh_name(f"{node.name or node.op_type}_unsqueeze", names),
                                          axes=list(range(len(ranks[b]), len(ranks[b]) + trailing))))
            node.input[1] = unsqueezed
        if node.op_type in _AXIS_BROADCAST:
            kept = [a for a in node.attribute if a.name != "axis"]
            del node.attribute[:]
            node.attribute.extend(kept)
        nodes.append(node)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    return result


def _trailing_ones(node: onnx.NodeProto, ranks: dict[str, tuple], label: str, opset: int, index: int) -> int:
    """How many dimensions of 1 the node's second operand needs after its own for numpy broadcasting
    to place it where the legacy rule does (0: none)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _AXIS_BROADCAST and attrs.get("broadcast") and "axis" in attrs:
        a, b = _rank(node, 0, ranks, label, opset, index), _rank(node, 1, ranks, label, opset, index)
        axis = attrs["axis"] + a if attrs["axis"] < 0 else attrs["axis"]
        if not 0 <= axis <= a - b:
            raise ModelError(f"{label}: {_where(node, index)}: axis {attrs['axis']} places its second input "
                             f"(rank {b}) outside the first (rank {a})")
        return a - axis - b
    if node.op_type == "PRelu":
        x, slope = _rank(node, 0, ranks, label, opset, index), ranks.get(node.input[1])
        # Per channel: a slope of one value per channel of an input with axes after the channel.
        if slope is not None and len(slope) == 1 and slope[0] != 1 and x > 2:
            return x - 2
    return 0


def _rank(node: onnx.NodeProto, i: int, ranks: dict[str, tuple], label: str, opset: int, index: int) -> int:
    shape = ranks.get(node.input[i])
    if shape is None:
        raise ModelError(f"{label}: {_where(node, index)}: the rank of its input '{node.input[i]}' is unknown, "
                         f"and opset {opset}'s broadcasting depends on it (give the model's inputs a shape)")
    return len(shape)


def _where(node: onnx.NodeProto, index: int) -> str:
    return f"node '{node.name}' ({node.op_type})" if node.name else f"node {index} ({node.op_type})"


def _ranks(proto: onnx.ModelProto) -> dict[str, tuple]:
    """Each tensor's shape as inference knows it (a dimension may be None), where its rank is known."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except onnx.shape_inference.InferenceError:
        inferred = proto
    g = inferred.graph
    shapes = {vi.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim)
              for vi in list(g.input) + list(g.value_info) + list(g.output)
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    shapes.update({t.name: tuple(t.dims) for t in g.initializer})
    return shapes
