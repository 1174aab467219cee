"""ONNX → Graph: load, check, fix input shapes, infer shapes, map nodes one to one.

Nodes keep their ONNX op type and attributes here; passes turn them into the ops aot lowers.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from aot.errors import ModelError, OptionError, ShapeError, UnsupportedOpError
from aot.graph.evaluate import evaluate
from aot.graph.ir import Graph, Node, Value


@dataclass(frozen=True)
class LoadedModel:
    """The checked ONNX model (input shapes fixed) and where it came from."""

    proto: onnx.ModelProto      # the user's model with input shapes fixed: what a reference runs
    inferred: onnx.ModelProto   # the same with every tensor's shape inferred (for to_graph)
    label: str                  # file name for messages, e.g. "mobilenet.onnx"
    sha256: str


def load(model: str | os.PathLike | onnx.ModelProto,
         input_shapes: dict[str, tuple[int, ...]] | None = None) -> LoadedModel:
    if isinstance(model, onnx.ModelProto):
        proto, label = model, (model.graph.name or "model")
        data = model.SerializeToString()
    else:
        label = os.path.basename(os.fspath(model))
        try:
            with open(model, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ModelError(f"{model}: no such file") from None
        except IsADirectoryError:
            raise ModelError(f"{model}: is a directory, not an ONNX model") from None
        except OSError as err:
            raise ModelError(f"{model}: cannot read: {err.strerror}") from None
        try:
            proto = onnx.load_from_string(data)
        except Exception:
            raise ModelError(f"{label}: not an ONNX model (cannot parse it as an ONNX protobuf)") from None
        try:     # weights saved beside the model (model.onnx.data), as large PyTorch exports do
            onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(os.fspath(model)) or ".")
        except (OSError, onnx.checker.ValidationError) as err:
            first = str(err).strip().splitlines()[0]
            raise ModelError(f"{label}: cannot read its external weight data: {first}") from None
        if not proto.graph.node and not proto.graph.output:
            raise ModelError(f"{label}: not an ONNX model (no graph)")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:
        first = str(err).strip().splitlines()[0]
        raise ModelError(f"{label}: fails the ONNX checker: {first}") from None
    proto = _fix_input_shapes(proto, input_shapes or {}, label)
    return LoadedModel(proto, _infer_static_shapes(proto, label), label, hashlib.sha256(data).hexdigest())


def _infer(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
    except Exception as err:
        first = str(err).strip().splitlines()[0]
        raise ModelError(f"{label}: ONNX shape inference failed: {first}") from None


def _infer_static_shapes(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """ONNX shape inference, helped where it stops short: exporters compute shapes and pads with
    chains of small ops (Shape, Gather, Concat, Slice, ...) that inference does not always follow.
    While some tensor's shape is unknown, fold the nodes computable from constants and infer again."""
    inferred = _infer(proto, label)
    for _ in range(16):
        if not _unknown_shapes(inferred):
            break
        helped = _fold_constant_nodes(inferred) or _contrib_shapes(inferred)
        if helped is None:
            break
        inferred = _infer(helped, label)
    return inferred


def _contrib_shapes(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """Output types of onnxruntime's quantized contrib ops (com.microsoft), which ONNX inference does not
    know, from their inputs' shapes; None if no new shape could be given."""
    g = proto.graph
    types = {vi.name: vi.type.tensor_type for vi in list(g.value_info) + list(g.input) + list(g.output)}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)).tensor_type
                  for t in g.initializer})
    known = {name: _static_shape(t) for name, t in types.items()}
    added = []
    for node in g.node:
        if node.domain != "com.microsoft" or not node.output or known.get(node.output[0]):
            continue
        shape = _contrib_shape(node, known)
        if shape is None:
            continue
        index = _Y_ZERO_POINT.get(node.op_type, 4)
        zp = node.input[index] if index < len(node.input) else ""       # QGemm without it outputs float
        elem = types[zp].elem_type if zp in types else onnx.TensorProto.FLOAT
        added.append(onnx.helper.make_tensor_value_info(node.output[0], elem, list(shape)))
        known[node.output[0]] = shape
    if not added:
        return None
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    result.graph.value_info.extend(added)
    return result


_Y_ZERO_POINT = {"QLinearAdd": 7, "QLinearMul": 7, "QLinearConcat": 1, "QGemm": 8}   # others: (x, xs, xz, ys, yz)


def _contrib_shape(node: onnx.NodeProto, known: dict) -> tuple[int, ...] | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    x = known.get(node.input[0]) if node.input else None
    op = node.op_type
    if op in ("QLinearAdd", "QLinearMul"):
        b = known.get(node.input[3])
        return tuple(np.broadcast_shapes(x, b)) if x is not None and b is not None else None
    if op in ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax"):
        return x
    if x is None and op != "QLinearConcat":
        return None
    if op == "QLinearGlobalAveragePool":
        return (x[0], x[-1]) + (1,) * (len(x) - 2) if attrs.get("channels_last") else x[:2] + (1,) * (len(x) - 2)
    if op == "QLinearAveragePool":
        kernel, rank = attrs["kernel_shape"], len(attrs["kernel_shape"])
        strides = attrs.get("strides", [1] * rank)
        pads = attrs.get("pads", [0] * 2 * rank)
        rounding = np.ceil if attrs.get("ceil_mode", 0) else np.floor
        spatial = [int(rounding((x[2 + i] + pads[i] + pads[rank + i] - kernel[i]) / strides[i])) + 1
                   for i in range(rank)]
        return tuple(x[:2]) + tuple(spatial)
    if op == "QGemm":
        b = known.get(node.input[3])
        if b is None:
            return None
        m = x[1] if attrs.get("transA", 0) else x[0]
        n = b[0] if attrs.get("transB", 0) else b[1]
        return (m, n)
    if op == "QLinearConcat":
        parts = [known.get(node.input[i]) for i in range(2, len(node.input), 3)]
        if any(p is None for p in parts):
            return None
        axis = attrs["axis"] % len(parts[0])
        return tuple(sum(p[axis] for p in parts) if i == axis else d for i, d in enumerate(parts[0]))
    return None


def _unknown_shapes(proto: onnx.ModelProto) -> bool:
    known = {vi.name for vi in list(proto.graph.value_info) + list(proto.graph.output)
             if vi.type.tensor_type.HasField("shape")
             and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    known |= {t.name for t in proto.graph.initializer}
    return any(out and out not in known for node in proto.graph.node for out in node.output)


def _fold_constant_nodes(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """Replace nodes whose inputs are all constants (and Shape/Size of static tensors) by initializers."""
    g = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {vi.name: vi.type.tensor_type for vi in list(g.value_info) + list(g.input)}
    kept, folded = [], False
    for node in g.node:
        static = node.op_type in ("Shape", "Size") and _static_shape(shapes.get(node.input[0]))
        if node.domain in ("", "ai.onnx") and (static or all(i in constants for i in node.input if i)) \
                and not node.op_type.startswith("Random"):
            feeds = {i: constants[i] if i in constants else
                     np.zeros(_static_shape(shapes[i]), onnx.helper.tensor_dtype_to_np_dtype(shapes[i].elem_type))
                     for i in node.input if i}
            try:
                results = evaluate(node, feeds, opset)
            except Exception:
                kept.append(node)
                continue
            for name, value in zip(node.output, results):
                constants[name] = np.asarray(value)
                g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
            folded = True
        else:
            kept.append(node)
    if not folded:
        return None
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    del result.graph.node[:]
    result.graph.node.extend(kept)
    del result.graph.value_info[:]
    return result


def _static_shape(ttype) -> tuple[int, ...] | None:
    if ttype is None or not ttype.HasField("shape"):
        return None
    dims = ttype.shape.dim
    return tuple(d.dim_value for d in dims) if all(d.HasField("dim_value") for d in dims) else None


def _graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in initializers]


def _fix_input_shapes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], label: str) -> onnx.ModelProto:
    inputs = _graph_inputs(proto)
    names = [v.name for v in inputs]
    for name in shapes:
        if name not in names:
            raise OptionError(f"{label}: --input-shape names '{name}', but the model's inputs are: {', '.join(names)}")
    proto = onnx.ModelProto.FromString(proto.SerializeToString()) if shapes else proto
    for vi in _graph_inputs(proto):
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            want = shapes[vi.name]
            if len(dims) and len(dims) != len(want):
                raise OptionError(f"{label}: --input-shape {vi.name} has rank {len(want)}, "
                                  f"the model's input has rank {len(dims)}")
            for dim, size in zip(dims, want):
                if dim.HasField("dim_value") and dim.dim_value != size:
                    raise OptionError(f"{label}: --input-shape {vi.name}={'x'.join(map(str, want))} contradicts the "
                                      f"model's static shape {_dims_text(dims)}")
            del dims[:]
            for size in want:
                dims.add().dim_value = size
            continue
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                symbol = dim.dim_param or "?"
                raise ShapeError(f"{label}: input '{vi.name}' has a dynamic dimension ({symbol}) at axis {axis}: "
                                 f"give its shape with --input-shape {vi.name}=" + "x".join(
                                     str(d.dim_value) if d.HasField("dim_value") else "N" for d in dims))
    return proto


def _dims_text(dims) -> str:
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
           onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool",
           onnx.TensorProto.DOUBLE: "float64", onnx.TensorProto.FLOAT16: "float16"}


def _attr_value(attr: onnx.AttributeProto):
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
    return value


def to_graph(model: LoadedModel) -> Graph:
    """Map the checked, shape-inferred model to a Graph; every non-constant value needs a static shape."""
    g = model.inferred.graph
    label = model.label
    opset = next((o.version for o in model.inferred.opset_import if o.domain in ("", "ai.onnx")), 17)
    constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    infos = {vi.name: vi for vi in list(g.value_info) + list(g.input) + list(g.output)}
    values: dict[str, Value] = {}

    def declare(name: str, where: str) -> None:
        if name in values or not name:
            return
        if name in constants:
            array = constants[name]
            values[name] = Value(name, tuple(array.shape), str(array.dtype))
            return
        vi = infos.get(name)
        ttype = vi.type.tensor_type if vi is not None and vi.type.HasField("tensor_type") else None
        if ttype is None or not ttype.HasField("shape"):
            raise ShapeError(f"{label}: cannot infer the shape of tensor '{name}' ({where})")
        dims = []
        for dim in ttype.shape.dim:
            if not dim.HasField("dim_value"):
                # Inputs are static by now, so only a data-dependent op can leave a dimension unknown.
                raise UnsupportedOpError(f"{label}: tensor '{name}' ({where}) has a data-dependent shape "
                                         f"(dimension {dim.dim_param or '?'}); aot needs static shapes")
            dims.append(dim.dim_value)
        dtype = _DTYPES.get(ttype.elem_type)
        if dtype is None:
            raise ModelError(f"{label}: tensor '{name}' ({where}) has an unsupported element type "
                             f"{onnx.TensorProto.DataType.Name(ttype.elem_type)}")
        values[name] = Value(name, tuple(dims), dtype)

    for name in constants:
        declare(name, "an initializer")
    inputs = tuple(vi.name for vi in _graph_inputs(model.inferred))
    for name in inputs:
        declare(name, "a graph input")
    nodes = []
    for index, node in enumerate(g.node):
        node_name = node.name or f"{node.op_type}_{index}"
        where = f"output of node '{node_name}' ({node.op_type})"
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        if node.domain not in ("", "ai.onnx"):
            attrs["domain"] = node.domain
        if node.op_type == "Constant" and not attrs.get("domain"):
            constants[node.output[0]] = _constant_value(attrs, label, node_name)
            declare(node.output[0], where)
            continue
        for name in node.input:
            if name and name not in values:
                raise ModelError(f"{label}: node '{node_name}' reads '{name}', which nothing produces")
        for name in node.output:
            declare(name, where)
        nodes.append(Node(node.op_type, node_name, tuple(node.input), tuple(node.output), attrs))
    outputs = tuple(vi.name for vi in g.output)
    for name in outputs:
        declare(name, "a graph output")
    name = os.path.splitext(label)[0]
    return Graph(name, tuple(nodes), values, constants, inputs, outputs, opset)


def _constant_value(attrs: dict, label: str, node_name: str) -> np.ndarray:
    for key, cast in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                      ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=cast) if cast else np.asarray(attrs[key])
    raise ModelError(f"{label}: Constant node '{node_name}' has no supported value attribute")
