"""Checks on a parsed ONNX model before anything reads it, for what the ONNX checker misses or meets
with an exception rather than a verdict. Each problem is one ModelError naming the model and the
node, tensor or field at fault.

- text: every protobuf string is UTF-8 (protobuf hands an undecodable one to Python as bytes, which
  would travel on as a name), and every string attribute aot reads is UTF-8.
- opsets: each domain imported once, at a version this onnx knows; every node's op defined at its
  domain's imported version, with inputs, outputs and attributes as that version declares. ONNX
  domains take their schemas from onnx, the onnxruntime contrib ops aot compiles (com.microsoft's
  quantized ops) from CONTRIB_SCHEMAS; a node of any other domain is left to the op registry, which
  refuses what aot does not know.
- tensors: every tensor's data matches its dims and element type (the checker reports data that is
  too short, not data that is too long).
- external data: files are named relatively, stay inside the model's directory (symbolic links
  included), exist, and hold the bytes the offset and length say.

Walks are iterative: a model's nesting (subgraphs of subgraphs) never meets Python's recursion limit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import AttributeProto, TensorProto

from aot.errors import ModelError, UnsupportedOpError

_ONNX_DOMAINS = frozenset(s.domain for s in onnx.defs.get_all_schemas_with_history()) | {"ai.onnx"}
_NEWEST = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": max(row[3] for row in onnx.helper.VERSION_TABLE)}


def check_text(proto: Message, label: str) -> None:
    """Every string field, in every nested message, is UTF-8."""
    stack: list[tuple[Message, str]] = [(proto, "")]
    while stack:
        message, path = stack.pop()
        for fd, value in message.ListFields():
            where = f"{path}.{fd.name}" if path else fd.name
            repeated = _repeated(fd)
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                items = list(enumerate(value)) if repeated else [(None, value)]
                stack.extend((item, where if i is None else f"{where}[{i}]{_what(item)}") for i, item in items)
            elif fd.type == FieldDescriptor.TYPE_STRING:
                for item in value if repeated else [value]:
                    if isinstance(item, bytes):
                        raise ModelError(f"{label}: {where} is not UTF-8 text ({_shown(item)}); protobuf strings "
                                         f"must be (is the file damaged?)")


def _repeated(fd: FieldDescriptor) -> bool:
    """protobuf 7 dropped `label` for `is_repeated`; older releases have only `label`."""
    return fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == FieldDescriptor.LABEL_REPEATED


def _what(message: Message) -> str:
    """A node's op and name, to say which node a field path is in."""
    if isinstance(message, onnx.NodeProto) and isinstance(message.op_type, str) and isinstance(message.name, str):
        return f" ({message.op_type} '{message.name}')"
    return ""


def _shown(data: bytes) -> str:
    return repr(data[:40]) + ("..." if len(data) > 40 else "")


# --------------------------------------------------------------------------- opsets and nodes


def check_opsets(proto: onnx.ModelProto, label: str) -> dict[str, int]:
    """The imported version of each domain ("ai.onnx" spelled ""); refuse a domain imported twice or
    at a version no onnx release defines."""
    versions: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain == "ai.onnx" else entry.domain
        shown = f"domain '{entry.domain}'" if entry.domain else "the default domain"
        if domain in versions:
            raise ModelError(f"{label}: imports {shown} twice (opsets {versions[domain]} and {entry.version})")
        if entry.version < 1:
            raise ModelError(f"{label}: imports {shown} at opset {entry.version}; opsets start at 1")
        if entry.version > _NEWEST.get(domain, entry.version):
            raise ModelError(f"{label}: imports {shown} at opset {entry.version}, newer than the newest that onnx "
                             f"{onnx.__version__} defines ({_NEWEST[domain]})")
        versions[domain] = entry.version
    return versions


def check_nodes(proto: onnx.ModelProto, label: str, versions: dict[str, int]) -> None:
    """Every node, in the graph and its subgraphs, matches its op's schema at the imported opset."""
    for node, where in _nodes(proto.graph, "graph"):
        _check_attribute_text(node, where, label)
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in versions:
            raise ModelError(f"{label}: {where} is in domain '{node.domain}', which the model does not import")
        schema = _schema(node.op_type, domain, versions[domain], label, where)
        if schema is not None:
            _check_against(node, schema, label, where)


def _nodes(graph: onnx.GraphProto, path: str) -> Iterator[tuple[onnx.NodeProto, str]]:
    """Every node of the graph and of the graphs in its attributes, with a description for messages."""
    stack = [(graph, path)]
    while stack:
        g, where = stack.pop()
        for node in g.node:
            described = f"node '{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"
            yield node, described + (f" in {where}" if where != "graph" else "")
            for attr in node.attribute:
                inner = f"attribute '{attr.name}' of {described}"
                if attr.type == AttributeProto.GRAPH:
                    stack.append((attr.g, inner))
                stack.extend((sub, f"{inner}[{i}]") for i, sub in enumerate(attr.graphs))


def _check_attribute_text(node: onnx.NodeProto, where: str, label: str) -> None:
    """aot reads string attributes as text."""
    for attr in node.attribute:
        for value in [attr.s] + list(attr.strings):
            try:
                value.decode()
            except UnicodeDecodeError:
                raise ModelError(f"{label}: {where}: attribute '{attr.name}' is not UTF-8 text "
                                 f"({_shown(value)})") from None


def _schema(op: str, domain: str, version: int, label: str, where: str):
    """The op's schema at `version` of its domain; None for a domain neither onnx nor aot's contrib
    table (CONTRIB_SCHEMAS) knows."""
    if domain in _ONNX_DOMAINS:
        try:
            return onnx.defs.get_schema(op, max_inclusive_version=version, domain=domain)
        except onnx.defs.SchemaError:
            pass
        if onnx.defs.has(op, domain):
            since = min(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                        if s.name == op and s.domain == domain)
            raise ModelError(f"{label}: {where}: {_domain_text(domain)} defines {op} from opset {since}, but the "
                             f"model imports opset {version}") from None
        raise ModelError(f"{label}: {where}: {_domain_text(domain)} has no op '{op}'") from None
    if domain not in {d for d, _ in CONTRIB_SCHEMAS}:
        return None
    schema = CONTRIB_SCHEMAS.get((domain, op))
    if schema is None:
        known = ", ".join(sorted(o for d, o in CONTRIB_SCHEMAS if d == domain))
        raise UnsupportedOpError(f"{label}: {where}: op '{op}' of domain '{domain}' is not one aot compiles "
                                 f"(of that domain it compiles {known})")
    if schema.since_version > version:
        raise ModelError(f"{label}: {where}: domain '{domain}' defines {op} from opset {schema.since_version}, but "
                         f"the model imports opset {version}")
    return schema


def _domain_text(domain: str) -> str:
    return f"domain '{domain}'" if domain else "ONNX"


@dataclass(frozen=True)
class ContribAttribute:
    type: int               # an AttributeProto.AttributeType
    required: bool = False


@dataclass(frozen=True)
class ContribSchema:
    """The part of an onnxruntime op schema that _check_against reads."""

    since_version: int
    min_input: int
    max_input: int
    min_output: int = 1
    max_output: int = 1
    attributes: dict[str, ContribAttribute] = field(default_factory=dict)


_INT, _INTS, _FLOAT, _STRING = (ContribAttribute(k) for k in (AttributeProto.INT, AttributeProto.INTS,
                                                              AttributeProto.FLOAT, AttributeProto.STRING))

# The schemas of the onnxruntime contrib ops aot compiles, as onnxruntime 1.32 declares them. They are
# written down here rather than asked of onnxruntime: importing onnxruntime writes a device id under the
# user's home (~/.cache/Microsoft), and a build writes nothing outside its output directory.
# tests/test_hostile.py compares this table with onnxruntime's schemas.
CONTRIB_SCHEMAS: dict[tuple[str, str], ContribSchema] = {
    ("com.microsoft", "QGemm"): ContribSchema(1, 6, 9, attributes={"alpha": _FLOAT, "transA": _INT, "transB": _INT}),
    ("com.microsoft", "QLinearAdd"): ContribSchema(1, 7, 8),
    ("com.microsoft", "QLinearMul"): ContribSchema(1, 7, 8),
    ("com.microsoft", "QLinearAveragePool"): ContribSchema(1, 4, 5, attributes={
        "auto_pad": _STRING, "ceil_mode": _INT, "channels_last": _INT, "count_include_pad": _INT,
        "kernel_shape": ContribAttribute(AttributeProto.INTS, required=True), "pads": _INTS, "strides": _INTS}),
    ("com.microsoft", "QLinearGlobalAveragePool"): ContribSchema(1, 5, 5, attributes={"channels_last": _INT}),
    ("com.microsoft", "QLinearSigmoid"): ContribSchema(1, 4, 5),
    ("com.microsoft", "QLinearLeakyRelu"): ContribSchema(1, 4, 5, attributes={"alpha": _FLOAT}),
    ("com.microsoft", "QLinearSoftmax"): ContribSchema(1, 5, 5, attributes={
        "axis": _INT, "opset": ContribAttribute(AttributeProto.INT, required=True)}),
    ("com.microsoft", "QLinearConcat"): ContribSchema(1, 3, 2**31 - 1, attributes={
        "axis": ContribAttribute(AttributeProto.INT, required=True)}),
}


def _check_against(node: onnx.NodeProto, schema, label: str, where: str) -> None:
    """Input and output counts and attribute names and types, as the ONNX checker's OpSchema::Verify
    has them: attributes named `__...` are not checked, an attribute whose type is set but whose
    value field is absent reads as that type's default."""
    for kind, count, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                   ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= count <= high:
            wanted = f"{low}" if low == high else (f"at least {low}" if high >= 2**31 - 1 else f"{low} to {high}")
            raise ModelError(f"{label}: {where} has {count} {kind}; {node.op_type} takes {wanted}")
    declared = schema.attributes
    given = set()
    for attr in node.attribute:
        if attr.name in given:
            raise ModelError(f"{label}: {where}: attribute '{attr.name}' is given twice")
        given.add(attr.name)
        if attr.name.startswith("__") or attr.ref_attr_name:
            continue
        if attr.name not in declared:
            raise ModelError(f"{label}: {where}: {node.op_type} has no attribute '{attr.name}'")
        want = int(declared[attr.name].type)
        if attr.type != want:
            raise ModelError(f"{label}: {where}: attribute '{attr.name}' is {_attr_type(attr.type)}, but "
                             f"{node.op_type} takes {_attr_type(want)}")
    for name, attr in declared.items():
        if attr.required and name not in given:
            raise ModelError(f"{label}: {where}: the required attribute '{name}' is missing")


def _attr_type(kind: int) -> str:
    return AttributeProto.AttributeType.Name(kind) if kind in AttributeProto.AttributeType.values() else str(kind)


def check_value_types(proto: onnx.ModelProto, label: str) -> None:
    """Every declared tensor type (graph inputs, outputs, value_info) names an element type ONNX defines."""
    graphs = [(proto.graph, "")]
    while graphs:
        graph, where = graphs.pop()
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else TensorProto.FLOAT
            if elem not in TensorProto.DataType.values():
                raise ModelError(f"{label}: tensor '{vi.name}'{where} declares element type {elem}, which ONNX "
                                 f"does not define")
        for node in graph.node:
            for attr in node.attribute:
                inside = f" in attribute '{attr.name}' of node '{node.name}' ({node.op_type})"
                if attr.HasField("g"):
                    graphs.append((attr.g, inside))
                graphs.extend((g, inside) for g in attr.graphs)


# --------------------------------------------------------------------------- tensors


_PACKED_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4,
                TensorProto.INT2: 2, TensorProto.UINT2: 2}


def tensors(proto: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every tensor in the model (initializers and attribute values, subgraphs and functions included)."""
    graphs = [(proto.graph, "")]
    while graphs:
        graph, where = graphs.pop()
        for t in graph.initializer:
            yield t, f"initializer '{t.name}'{where}"
        for sparse in graph.sparse_initializer:
            yield sparse.values, f"sparse initializer '{sparse.values.name}'{where}"
            yield sparse.indices, f"the indices of sparse initializer '{sparse.values.name}'{where}"
        for node in graph.node:
            inside = f" of node '{node.name}' ({node.op_type}){where}"
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t, f"attribute '{attr.name}'{inside}"
                for i, t in enumerate(attr.tensors):
                    yield t, f"attribute '{attr.name}'[{i}]{inside}"
                if attr.HasField("g"):
                    graphs.append((attr.g, f" in attribute '{attr.name}'{inside}"))
                graphs.extend((g, f" in attribute '{attr.name}'[{i}]{inside}") for i, g in enumerate(attr.graphs))
    for function in proto.functions:
        for node in function.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t, f"attribute '{attr.name}' of a {node.op_type} node in function '{function.name}'"


def check_tensors(proto: onnx.ModelProto, label: str) -> None:
    """Each tensor's data (raw or typed, after external data is read) has exactly the element count
    its dims give, for its element type."""
    for t, where in tensors(proto):
        problem = _tensor_problem(t)
        if problem:
            raise ModelError(f"{label}: {where}: {problem}")


def _tensor_problem(t: TensorProto) -> str | None:
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        return f"dims {dims} include a negative size"
    if t.data_location == TensorProto.EXTERNAL:
        return "its data is in an external file, which is only read beside a model file given by path"
    if t.data_type not in TensorProto.DataType.values() or t.data_type == TensorProto.UNDEFINED:
        return f"its element type ({t.data_type}) is not an ONNX type"
    dtype = TensorProto.DataType.Name(t.data_type)
    count = math.prod(dims)
    typed_field = onnx.helper.tensor_dtype_to_field(t.data_type)
    holding = [f for f in ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
               if len(getattr(t, f))]
    if t.HasField("raw_data"):
        holding.append("raw_data")
    if len(holding) > 1:
        return f"holds data in both {holding[0]} and {holding[1]}"
    if not holding:
        return None if count == 0 else f"has no data for its {count} elements"
    field = holding[0]
    if field == "raw_data":
        if t.data_type == TensorProto.STRING:
            return "a string tensor cannot hold raw_data"
        bits = _PACKED_BITS.get(t.data_type)
        if bits is None and t.data_type in (TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2):
            return None             # packing not checked: aot computes with neither
        want = (count * bits + 7) // 8 if bits else count * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        got = len(t.raw_data)
        return None if got == want else (f"raw_data has {got} bytes, but dims {dims} of {dtype} take {want}")
    if field != typed_field:
        return f"holds its data in {field}, which a {dtype} tensor does not use ({typed_field})"
    if t.data_type in _PACKED_BITS:
        return None
    want = count * (2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1)
    got = len(getattr(t, field))
    return None if got == want else f"{field} has {got} values, but dims {dims} of {dtype} take {want}"


# --------------------------------------------------------------------------- external data


_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


def check_external_data(proto: onnx.ModelProto, directory: str, label: str) -> None:
    """Every tensor stored outside the model names a file inside the model's directory (after
    symbolic links) and a byte range within that file."""
    base = os.path.realpath(directory)
    for t, where in tensors(proto):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        unknown = sorted(set(info) - _EXTERNAL_KEYS)
        if unknown:
            raise ModelError(f"{label}: {where}: unknown external weight data key '{unknown[0]}' (known: "
                             f"{', '.join(sorted(_EXTERNAL_KEYS))})")
        location = info.get("location", "")
        fail = f"{label}: {where}: its external weight data file '{location}'"
        if not location or "\0" in location:
            raise ModelError(f"{label}: {where}: its external weight data names no file" if not location
                             else f"{fail} has a NUL character in its name")
        if os.path.isabs(location) or os.path.normpath(location).split(os.sep)[0] == "..":
            raise ModelError(f"{fail} is outside the model's directory; external data must be beside the model")
        path = os.path.realpath(os.path.join(base, location))
        if os.path.commonpath([path, base]) != base:
            raise ModelError(f"{fail} leads outside the model's directory (through a symbolic link)")
        if not os.path.isfile(path):
            raise ModelError(f"{fail} does not exist" if not os.path.exists(path) else f"{fail} is not a file")
        size = os.path.getsize(path)
        offset, length = (_count(info, key, fail) for key in ("offset", "length"))
        start = offset or 0
        if start > size or (length is not None and start + length > size):
            span = f"bytes {start} to {start + length}" if length is not None else f"offset {start}"
            raise ModelError(f"{fail} has {size} bytes; its tensor is said to be at {span}")


def _count(info: dict[str, str], key: str, fail: str) -> int | None:
    if key not in info:
        return None
    text = info[key]
    if not (text.isascii() and text.isdigit()):
        raise ModelError(f"{fail}: its {key} '{text}' is not a byte count")
    return int(text)


# --------------------------------------------------------------------------- attribute values


# The largest size, stride, pad or count an attribute may give: a tensor dimension fits in 2^31 - 1
# (MAX_TENSOR_BYTES in onnx.py bounds tensors by bytes), and onnx's C++ shape inference reads some
# attributes as 32-bit integers, so a larger value means different things to different readers.
_MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class NodeFacts:
    """A node as the attribute rules see it: its attributes by name, and the shapes and constant
    values of its inputs as far as they are known (shapes may hold None for an unknown dimension)."""

    node: onnx.NodeProto
    attrs: dict
    shapes: dict[str, tuple[int | None, ...]]
    constants: dict[str, np.ndarray]

    @property
    def op(self) -> str:
        return self.node.op_type

    def input(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def shape(self, i: int) -> tuple[int | None, ...] | None:
        name = self.input(i)
        if name in self.constants:
            return tuple(self.constants[name].shape)
        return self.shapes.get(name) if name else None

    def rank(self, i: int) -> int | None:
        shape = self.shape(i)
        return None if shape is None else len(shape)

    def value(self, i: int) -> np.ndarray | None:
        return self.constants.get(self.input(i))

    def ints(self, name: str, input_index: int | None = None) -> list[int] | None:
        """An integer list given as attribute `name`, or as the constant input at `input_index`."""
        if name in self.attrs:
            value = self.attrs[name]
            return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]
        if input_index is not None:
            value = self.value(input_index)
            if value is not None and value.dtype.kind in "iu":
                return [int(v) for v in value.reshape(-1)]
        return None


Rule = Callable[[NodeFacts], "str | None"]      # a problem, naming the attribute or input at fault, or None


def _count_text(values: list, want: int, what: str) -> str:
    return f"has {len(values)} values ({values}); {what} takes {want}"


def _ranged(name: str, values: list[int] | None, low: int, high: int = _MAX_INT, what: str = "attribute"
            ) -> str | None:
    """Each value within [low, high]."""
    for v in values or ():
        if not low <= v <= high:
            bound = f"at least {low}" if high == _MAX_INT else f"from {low} to {high}"
            return f"{what} '{name}' holds {v}; each value must be {bound}"
    return None


def _spatial_rank(n: NodeFacts, weight: int | None) -> int | None:
    """The number of spatial axes: kernel_shape's length, else the weight's rank - 2, else the input's."""
    if "kernel_shape" in n.attrs:
        return len(n.attrs["kernel_shape"])
    for i in (weight, 0):
        rank = n.rank(i) if i is not None else None
        if rank is not None:
            return rank - 2
    return None


# The weight input of each op with spatial attributes (None: a pool, without one).
_SPATIAL_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "ConvTranspose": 1, "DeformConv": 1,
                   "MaxPool": None, "AveragePool": None, "LpPool": None, "QLinearAveragePool": None,
                   "MaxUnpool": None}


def spatial(n: NodeFacts) -> str | None:
    """kernel_shape, strides, dilations, pads, output_padding and output_shape agree with each other
    and with the input's rank: one value per spatial axis (pads two), sizes and strides positive,
    pads non-negative."""
    k = _spatial_rank(n, _SPATIAL_WEIGHT[n.op])
    if k is None:
        return None
    kernel = n.ints("kernel_shape")
    x = n.shape(0)
    if k < 1 or (x is not None and len(x) != k + 2):
        given = f"kernel_shape {kernel}" if kernel is not None else f"its input rank {len(x) if x else '?'}"
        got = f"input '{n.input(0)}' has rank {len(x)}" if x is not None else "it has no spatial axis"
        return f"{got}, but {given} makes it a {k}-D {n.op}, which takes rank {k + 2}"
    per_axis = {"kernel_shape": (k, 1), "strides": (k, 1), "dilations": (k, 1), "pads": (2 * k, 0),
                "output_padding": (k, 0), "output_shape": (k, 1)}
    for name, (count, low) in per_axis.items():
        values = n.ints(name)
        if values is None:
            continue
        if len(values) != count:
            return f"attribute '{name}' " + _count_text(values, count, f"a {k}-D {n.op}")
        problem = _ranged(name, values, low)
        if problem:
            return problem
    padding = n.ints("output_padding")
    if padding is not None:
        strides, dilations = n.ints("strides") or [1] * k, n.ints("dilations") or [1] * k
        for axis, (p, s, d) in enumerate(zip(padding, strides, dilations)):
            if p >= max(s, d):
                return (f"attribute 'output_padding' is {p} on spatial axis {axis}; it must be less than the "
                        f"stride ({s}) or the dilation ({d})")
    return _ranged("group", n.ints("group"), 1)


def conv_weight(n: NodeFacts) -> str | None:
    """A convolution's weight (M, C/group, k...) agrees with kernel_shape, group, the input's channels
    and the bias; ConvTranspose's (C, M/group, k...) likewise."""
    w_index = _SPATIAL_WEIGHT[n.op]
    w, x = n.shape(w_index), n.shape(0)
    if w is None or None in w:
        return None
    group = (n.ints("group") or [1])[0]
    kernel = n.ints("kernel_shape")
    weight = f"weight '{n.input(w_index)}' {list(w)}"
    if len(w) < 3:
        return f"{weight} has rank {len(w)}; a {n.op} weight has rank 3 or more (out, in, kernel...)"
    if kernel is not None and list(w[2:]) != kernel:
        return f"{weight} does not have the kernel_shape {kernel}"
    transposed = n.op == "ConvTranspose"
    split = w[0]
    if split % group:
        return f"{weight}: its first dimension ({split}) is not a multiple of group {group}"
    channels = x[1] if x is not None and len(x) > 1 else None
    takes = w[0] if transposed else w[1] * group
    if channels is not None and channels != takes:
        how = f"{w[0]}" if transposed else f"{w[1]} x group {group}"
        return f"input '{n.input(0)}' has {channels} channels, but {weight} takes {how} = {takes}"
    bias_index = 8 if n.op == "QLinearConv" else 2
    bias, outputs = n.shape(bias_index), (w[1] * group if transposed else w[0])
    if bias is not None and n.op != "ConvInteger" and list(bias) != [outputs]:
        return f"bias '{n.input(bias_index)}' has shape {list(bias)}; {weight} with group {group} makes {outputs} " \
               f"output channels"
    return None


def flags(n: NodeFacts) -> str | None:
    """Integer flags and counts read as 32-bit integers fit in one (onnx's inference and aot would
    otherwise read two different values)."""
    for name, value in n.attrs.items():
        if isinstance(value, int) and not -_MAX_INT - 1 <= value <= _MAX_INT and name not in _WIDE_INTS:
            return f"attribute '{name}' is {value}, outside the 32-bit range an attribute of {n.op} is read in"
    return None


_WIDE_INTS = frozenset({"start", "end", "starts", "ends", "seed", "value_int"})     # may be INT64_MAX by convention


def perm(n: NodeFacts) -> str | None:
    """Transpose's perm is a permutation of the input's axes."""
    values, rank = n.ints("perm"), n.rank(0)
    if values is None:
        return None
    if rank is not None and len(values) != rank:
        return "attribute 'perm' " + _count_text(values, rank, f"input '{n.input(0)}' of rank {rank}")
    if sorted(values) != list(range(len(values))):
        return f"attribute 'perm' ({values}) is not a permutation of 0..{len(values) - 1}"
    return None


# Where each op takes its axes: attribute "axes" (older opsets), or the constant input at this index
# (None: only the attribute). They index the input's axes; Unsqueeze's, the output's.
_AXES_INPUT = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceL1": 1,
               "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1, "ReduceSumSquare": 1, "Squeeze": 1,
               "Unsqueeze": 1, "Slice": 3, "Pad": 3, "Resize": None, "LayerNormalization": None,
               "MeanVarianceNormalization": None}


def axes(n: NodeFacts) -> str | None:
    """Axes are unique and each names an axis of the tensor they index."""
    values = n.ints("axes", _AXES_INPUT.get(n.op))
    rank = n.rank(0)
    if values is None or rank is None:
        return None
    if n.op == "Unsqueeze":
        rank += len(values)
    where = "attribute 'axes'" if "axes" in n.attrs else f"axes '{n.input(_AXES_INPUT[n.op])}'"
    for v in values:
        if not -rank <= v < rank:
            return f"{where} holds axis {v}, outside the {rank} axes of the tensor it indexes"
    if len({v % rank for v in values}) != len(values):
        return f"{where} ({values}) names an axis twice"
    return None


# Ops with one "axis" attribute: (the input whose rank it indexes, whether rank itself is allowed).
_AXIS = {"Softmax": (0, False), "LogSoftmax": (0, False), "Hardmax": (0, False), "Concat": (0, False),
         "Gather": (0, False), "GatherElements": (0, False), "ScatterElements": (0, False), "Split": (0, False),
         "Flatten": (0, True), "ArgMax": (0, False), "ArgMin": (0, False), "TopK": (0, False),
         "LayerNormalization": (0, False), "Compress": (0, False), "LpNormalization": (0, False),
         "QLinearSoftmax": (0, False), "QLinearConcat": (2, False)}


def axis(n: NodeFacts) -> str | None:
    """An axis attribute names an axis of its input (Flatten's may also be the rank)."""
    if "axis" not in n.attrs:
        return None
    index, inclusive = _AXIS[n.op]
    rank, value = n.rank(index), int(n.attrs["axis"])
    if rank is None:
        return None
    high = rank if inclusive else rank - 1
    if not -rank <= value <= high:
        return f"attribute 'axis' is {value}; input '{n.input(index)}' of rank {rank} takes -{rank} to {high}"
    return None


def slice_steps(n: NodeFacts) -> str | None:
    """Slice's starts, ends, axes and steps have one value each per sliced axis; no step is 0."""
    lists = {name: n.ints(name, i) for i, name in enumerate(("starts", "ends", "axes", "steps"), start=1)}
    given = {name: v for name, v in lists.items() if v is not None}
    counts = {len(v) for v in given.values()}
    if len(counts) > 1:
        return "starts, ends, axes and steps differ in length: " + ", ".join(f"{k} {v}" for k, v in given.items())
    if 0 in (lists["steps"] or ()):
        return f"steps '{n.input(4)}' ({lists['steps']}) holds 0; a Slice step is never 0"
    return None


def split_sizes(n: NodeFacts) -> str | None:
    """Split's sizes are non-negative, one per output, and add up to the length of the split axis."""
    sizes = n.ints("split", 1)
    x = n.shape(0)
    if "num_outputs" in n.attrs and not 1 <= int(n.attrs["num_outputs"]) <= _MAX_INT:
        return f"attribute 'num_outputs' is {n.attrs['num_outputs']}; a Split makes at least 1 output"
    if sizes is None:
        return None
    where = "attribute 'split'" if "split" in n.attrs else f"split '{n.input(1)}'"
    if any(s < 0 for s in sizes):
        return f"{where} ({sizes}) holds a negative size"
    if len(sizes) != len(n.node.output):
        return f"{where} gives {len(sizes)} sizes ({sizes}) for {len(n.node.output)} outputs"
    axis_ = int(n.attrs.get("axis", 0))
    if x is not None and -len(x) <= axis_ < len(x) and x[axis_] is not None and sum(sizes) != x[axis_]:
        return f"{where} ({sizes}) adds up to {sum(sizes)}, but axis {axis_} of input '{n.input(0)}' has {x[axis_]}"
    return None


def reshape(n: NodeFacts) -> str | None:
    """Reshape's shape holds at most one -1, no other negative, a 0 only where it copies an input
    dimension, and as many elements as the input."""
    shape, x = n.ints("shape", 1), n.shape(0)
    if shape is None or n.op != "Reshape":
        return None
    where = f"shape '{n.input(1)}' ({shape})"
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        return f"{where} may hold one -1 and no other negative size"
    if x is None or None in x:
        return None
    zero_copies = not n.attrs.get("allowzero", 0)
    if zero_copies and any(d == 0 and i >= len(x) for i, d in enumerate(shape)):
        return f"{where} has a 0 past the input's rank {len(x)}, where there is no dimension to copy"
    dims = [x[i] if d == 0 and zero_copies else d for i, d in enumerate(shape)]
    known = math.prod(d for d in dims if d != -1)
    size = math.prod(x)
    if (-1 in dims and (known == 0 or size % known)) or (-1 not in dims and known != size):
        return f"{where} cannot hold the {size} elements of input '{n.input(0)}' {list(x)}"
    return None


def gemm(n: NodeFacts) -> str | None:
    """Gemm's A and B are matrices whose inner dimensions agree once transA/transB are applied."""
    b_index = 3 if n.op == "QGemm" else 1       # QGemm: A, its scale and zero point, then B
    a, b = n.shape(0), n.shape(b_index)
    if a is None or b is None:
        return None
    for name, i, s in (("A", 0, a), ("B", b_index, b)):
        if len(s) != 2:
            return f"input {name} ('{n.input(i)}') has shape {list(s)}; {n.op} takes matrices"
    k_a = a[0] if n.attrs.get("transA", 0) else a[1]
    k_b = b[1] if n.attrs.get("transB", 0) else b[0]
    if None not in (k_a, k_b) and k_a != k_b:
        return (f"A {list(a)} (transA={n.attrs.get('transA', 0)}) and B {list(b)} (transB="
                f"{n.attrs.get('transB', 0)}) disagree on the inner dimension ({k_a} vs {k_b})")
    out = (a[1] if n.attrs.get("transA", 0) else a[0], b[0] if n.attrs.get("transB", 0) else b[1])
    c_index = 6 if n.op == "QGemm" else 2
    c = n.shape(c_index)
    if c is not None and (len(c) > 2 or any(d not in (1, o) for d, o in zip(c[::-1], out[::-1]) if None not in (d, o))):
        return f"C '{n.input(c_index)}' {list(c)} does not broadcast to the product's shape {list(out)}"
    return None


def cumsum(n: NodeFacts) -> str | None:
    """CumSum's axis: one value naming an axis of the input."""
    value, rank = n.ints("axis", 1), n.rank(0)
    if value is None:
        return None
    if len(value) != 1:
        return f"axis '{n.input(1)}' holds {len(value)} values; CumSum takes one"
    if rank is not None and not -rank <= value[0] < rank:
        return f"axis '{n.input(1)}' is {value[0]}; input '{n.input(0)}' of rank {rank} takes -{rank} to {rank - 1}"
    return None


def pads_input(n: NodeFacts) -> str | None:
    """Pad's pads give a begin and an end for each padded axis; mode is one ONNX defines."""
    mode = n.attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        return f"attribute 'mode' is '{mode}'; Pad takes constant, reflect, edge or wrap"
    pads, rank = n.ints("pads", 1), n.rank(0)
    padded = n.ints("axes", 3)
    count = len(padded) if padded is not None else rank
    if pads is None or count is None:
        return None
    if len(pads) != 2 * count:
        return f"pads '{n.input(1) or 'pads'}' " + _count_text(pads, 2 * count, f"a Pad of {count} axes")
    return None


def indices(n: NodeFacts) -> str | None:
    """The indices (and updates) of the gather and scatter ops have the ranks and shapes their data
    asks for."""
    data, idx = n.shape(0), n.shape(1)
    if data is None or idx is None:
        return None
    name = f"indices '{n.input(1)}' {list(idx)}"
    if n.op in ("GatherElements", "ScatterElements", "Scatter") and len(idx) != len(data):
        return f"{name} must have the rank of data '{n.input(0)}' {list(data)}"
    if n.op in ("GatherND", "ScatterND"):
        batch = int(n.attrs.get("batch_dims", 0))
        if len(idx) < 1 or idx[-1] is None:
            return None if len(idx) else f"{name} must have rank 1 or more"
        if not 0 <= batch < min(len(data), len(idx)) or idx[-1] > len(data) - batch:
            return f"{name} with batch_dims {batch} index more axes than data '{n.input(0)}' {list(data)} has"
    updates = n.shape(2)
    if n.op == "ScatterND" and updates is not None and len(idx) >= 1 and idx[-1] is not None:
        want = list(idx[:-1]) + list(data[idx[-1]:])
        if list(updates) != want:
            return f"updates '{n.input(2)}' {list(updates)} must have shape {want} for {name}"
    if n.op in ("ScatterElements", "Scatter") and updates is not None and list(updates) != list(idx):
        return f"updates '{n.input(2)}' {list(updates)} must have the shape of {name}"
    return None


def resize(n: NodeFacts) -> str | None:
    """Resize's scales and sizes have one value per resized axis (scales positive, sizes non-negative);
    its modes are ones ONNX defines."""
    for name, allowed in _RESIZE_MODES.items():
        value = n.attrs.get(name)
        value = value.decode() if isinstance(value, bytes) else value
        if value is not None and value not in allowed:
            return f"attribute '{name}' is '{value}'; {n.op} takes {', '.join(allowed)}"
    rank = n.rank(0)
    count = len(n.attrs["axes"]) if "axes" in n.attrs else rank
    scales_index, sizes_index = (1, None) if n.op == "Upsample" else (2, 3)
    scales = n.value(scales_index) if "scales" not in n.attrs else np.asarray(n.attrs["scales"])
    sizes = n.ints("sizes", sizes_index) if sizes_index is not None else None
    if scales is not None and scales.size:
        if count is not None and scales.size != count:
            return "scales " + _count_text(scales.reshape(-1).tolist(), count, f"a {n.op} of {count} axes")
        if scales.dtype.kind != "f" or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            return f"scales ({scales.reshape(-1).tolist()}) must be positive, finite floats"
    if sizes:
        if count is not None and len(sizes) != count:
            return f"sizes '{n.input(3)}' " + _count_text(sizes, count, f"a {n.op} of {count} axes")
        return _ranged(n.input(3), sizes, 0, what="sizes")
    return None


_RESIZE_MODES = {"mode": ("nearest", "linear", "cubic", "bilinear", "trilinear"),
                 "coordinate_transformation_mode": ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                    "align_corners", "asymmetric", "tf_crop_and_resize"),
                 "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
                 "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller")}


def blocks(n: NodeFacts) -> str | None:
    """DepthToSpace/SpaceToDepth: a positive blocksize that divides the channels (DepthToSpace, by its
    square) or the height and width (SpaceToDepth) of a 4-D input."""
    size = int(n.attrs.get("blocksize", 1))
    problem = _ranged("blocksize", [size], 1)
    x = n.shape(0)
    if problem or x is None or None in x:
        return problem
    if len(x) != 4:
        return f"input '{n.input(0)}' {list(x)} has rank {len(x)}; {n.op} takes rank 4"
    if n.op == "DepthToSpace" and x[1] % (size * size):
        return f"input '{n.input(0)}' has {x[1]} channels, not a multiple of blocksize {size} squared"
    if n.op == "SpaceToDepth" and (x[2] % size or x[3] % size):
        return f"input '{n.input(0)}' {list(x)}: height and width must be multiples of blocksize {size}"
    return None


def tile(n: NodeFacts) -> str | None:
    """Tile's repeats: one non-negative count per input axis."""
    repeats, rank = n.ints("repeats", 1), n.rank(0)
    if repeats is None:
        return None
    if rank is not None and len(repeats) != rank:
        return f"repeats '{n.input(1)}' " + _count_text(repeats, rank, f"an input of rank {rank}")
    return _ranged(n.input(1), repeats, 0, what="repeats")


def topk(n: NodeFacts) -> str | None:
    """TopK's k: one value, from 0 to the length of the axis; largest and sorted 0 or 1 (onnxruntime
    reads any other value as 0, aot as 1)."""
    for flag in ("largest", "sorted"):
        if n.attrs.get(flag, 1) not in (0, 1):
            return f"attribute '{flag}' is {n.attrs[flag]}; TopK takes 0 or 1"
    k, x = n.ints("k", 1), n.shape(0)
    if k is None:
        return None
    if len(k) != 1:
        return f"k '{n.input(1)}' holds {len(k)} values; TopK takes one"
    axis_ = int(n.attrs.get("axis", -1))
    length = x[axis_] if x is not None and -len(x) <= axis_ < len(x) else None
    if k[0] < 0 or (length is not None and k[0] > length):
        return f"k is {k[0]}; axis {axis_} of input '{n.input(0)}' has {length} elements"
    return None


def channel_params(n: NodeFacts) -> str | None:
    """BatchNormalization's scale, bias, mean and variance (InstanceNormalization's scale and bias)
    have one value per channel."""
    x = n.shape(0)
    if x is None or len(x) < 2 or x[1] is None or n.attrs.get("spatial", 1) == 0:   # opset < 9: per element
        return None
    for i in range(1, 5 if n.op == "BatchNormalization" else 3):
        shape = n.shape(i)
        if shape is not None and list(shape) != [x[1]]:
            return f"input '{n.input(i)}' has shape {list(shape)}; input '{n.input(0)}' has {x[1]} channels"
    return None


# The scale inputs of the quantizing ops (QLinearConcat: its y_scale, then each input's scale).
_SCALES = {"QuantizeLinear": (1,), "DequantizeLinear": (1,), "QLinearConv": (1, 4, 6), "QLinearMatMul": (1, 4, 6),
           "QGemm": (1, 4, 7), "QLinearAdd": (1, 4, 6), "QLinearMul": (1, 4, 6), "QLinearAveragePool": (1, 3),
           "QLinearGlobalAveragePool": (1, 3), "QLinearSigmoid": (1, 3), "QLinearLeakyRelu": (1, 3),
           "QLinearSoftmax": (1, 3)}


def scales(n: NodeFacts) -> str | None:
    """A constant quantization scale is float, finite and not zero (aot divides by it)."""
    positions = _SCALES.get(n.op) or (0, *range(3, len(n.node.input), 3))
    for i in positions:
        value = n.value(i)
        if value is None:
            continue
        # (bfloat16 and the float8 types come out of numpy_helper as neither kind: not checked)
        if value.dtype.kind in "iub" or (value.dtype.kind == "f" and not np.all(np.isfinite(value) & (value != 0))):
            shown = value.reshape(-1)[:8].tolist()
            return f"scale '{n.input(i)}' ({value.dtype} {shown}) must be finite floats other than 0"
    return None


def _table() -> dict[str, tuple[Rule, ...]]:
    """Each op's attribute rules (every op also gets `flags`)."""
    table: dict[str, list[Rule]] = {}

    def add(rule: Rule, ops) -> None:
        for op in ops:
            table.setdefault(op, []).append(rule)

    add(spatial, _SPATIAL_WEIGHT)
    add(conv_weight, ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose"))
    add(perm, ("Transpose",))
    add(axes, _AXES_INPUT)
    add(axis, _AXIS)
    add(slice_steps, ("Slice",))
    add(split_sizes, ("Split",))
    add(reshape, ("Reshape",))
    add(gemm, ("Gemm", "QGemm"))
    add(cumsum, ("CumSum",))
    add(pads_input, ("Pad",))
    add(indices, ("GatherElements", "ScatterElements", "Scatter", "GatherND", "ScatterND"))
    add(resize, ("Resize", "Upsample"))
    add(blocks, ("DepthToSpace", "SpaceToDepth"))
    add(tile, ("Tile",))
    add(topk, ("TopK",))
    add(channel_params, ("BatchNormalization", "InstanceNormalization"))
    add(scales, (*_SCALES, "QLinearConcat"))
    return {op: tuple(rules) for op, rules in table.items()}


ATTRIBUTE_RULES = _table()


def check_attributes(proto: onnx.ModelProto, label: str, inferred: bool = False) -> None:
    """Every node's attribute values (and the constant inputs that act as attributes: Slice steps,
    Reshape shapes, Split sizes, ...) agree with each other and with the shapes of the tensors they
    describe, as far as those are known: before inference the initializers' and the graph inputs',
    after it (`inferred`) every tensor's. Run before anything computes with them."""
    shapes, constants = _known_tensors(proto, inferred)
    for node, where in _nodes(proto.graph, "graph"):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
                 if a.type in (AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT,
                               AttributeProto.FLOATS, AttributeProto.STRING)}
        facts = NodeFacts(node, attrs, shapes, constants)
        # Attribute types are checked (check_nodes) only in the domains whose schemas aot has.
        checked = node.domain in ("", "ai.onnx") or (node.domain, node.op_type) in CONTRIB_SCHEMAS
        for rule in (flags, *(ATTRIBUTE_RULES.get(node.op_type, ()) if checked else ())):
            problem = rule(facts)
            if problem:
                raise ModelError(f"{label}: {where}: {problem}")


def _known_tensors(proto: onnx.ModelProto, inferred: bool
                   ) -> tuple[dict[str, tuple[int | None, ...]], dict[str, np.ndarray]]:
    """Shapes (None for an unknown dimension) and constant values by tensor name, over the graph and
    its subgraphs: initializers, Constant nodes, graph inputs, and once `inferred`, every typed tensor."""
    shapes: dict[str, tuple[int | None, ...]] = {}
    constants: dict[str, np.ndarray] = {}
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        infos = list(graph.input) + (list(graph.value_info) + list(graph.output) if inferred else [])
        for vi in infos:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                shapes.setdefault(vi.name, tuple(d.dim_value if d.HasField("dim_value") else None
                                                 for d in vi.type.tensor_type.shape.dim))
        for t in graph.initializer:
            shapes.setdefault(t.name, tuple(t.dims))
            if math.prod(t.dims) <= _SMALL:
                constants.setdefault(t.name, _array(t))
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None and math.prod(value.dims) <= _SMALL:
                    constants.setdefault(node.output[0], _array(value))
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.HasField("g") else [])
                graphs.extend(attr.graphs)
    return shapes, {name: array for name, array in constants.items() if array is not None}


_SMALL = 4096       # constants read by value: shapes, axes, sizes, scales (weights are read by shape)


def _array(t: TensorProto) -> np.ndarray | None:
    """A tensor's value; None for one aot does not read (check_tensors has refused a malformed one)."""
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception:   # noqa: BLE001 - an element type numpy cannot hold: no rule reads it
        return None
