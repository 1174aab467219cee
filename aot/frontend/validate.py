"""Checks on a parsed ONNX model before anything reads it, for what the ONNX checker misses or meets
with an exception rather than a verdict. Each problem is one ModelError naming the model and the
node, tensor or field at fault.

- text: every protobuf string is UTF-8 (protobuf hands an undecodable one to Python as bytes, which
  would travel on as a name), and every string attribute aot reads is UTF-8.
- opsets: each domain imported once, at a version this onnx knows; every node's op defined at its
  domain's imported version, with inputs, outputs and attributes as that version declares. ONNX
  domains take their schemas from onnx, onnxruntime's contrib domains (com.microsoft, whose
  quantized ops aot compiles) from onnxruntime; a node of any other domain is left to the op
  registry, which refuses what aot does not know.
- tensors: every tensor's data matches its dims and element type (the checker reports data that is
  too short, not data that is too long).
- external data: files are named relatively, stay inside the model's directory (symbolic links
  included), exist, and hold the bytes the offset and length say.

Walks are iterative: a model's nesting (subgraphs of subgraphs) never meets Python's recursion limit.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import AttributeProto, TensorProto

from aot.errors import ModelError

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
    """The op's schema at `version` of its domain; None for a domain neither onnx nor onnxruntime knows."""
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
    known = _contrib_schemas()
    if domain not in {d for d, _ in known}:
        return None
    versions = [s for s in known.get((domain, op), ()) if s.since_version <= version]
    if not versions:
        defined = known.get((domain, op))
        why = (f"defines {op} from opset {defined[0].since_version}, but the model imports opset {version}"
               if defined else f"has no op '{op}'")
        raise ModelError(f"{label}: {where}: domain '{domain}' {why}")
    return versions[-1]


def _domain_text(domain: str) -> str:
    return f"domain '{domain}'" if domain else "ONNX"


@functools.cache
def _contrib_schemas() -> dict[tuple[str, str], list]:
    """onnxruntime's schemas of the domains it adds (com.microsoft, ...), by (domain, op), oldest first."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort

    schemas: dict[tuple[str, str], list] = {}
    for schema in ort.get_all_operator_schema():
        if schema.domain not in _ONNX_DOMAINS:
            schemas.setdefault((schema.domain, schema.name), []).append(schema)
    return {key: sorted(found, key=lambda s: s.since_version) for key, found in schemas.items()}


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
