"""ONNX → Graph: load, check, upgrade an opset older than 7 (upgrade.py), freeze inputs, fix input shapes,
infer shapes, map nodes one to one.

Nodes keep their ONNX op type and attributes here; passes turn them into the ops aot lowers.

Dimensions: on a graph input, a dimension with no value, a named one (`dim_param`, e.g. `batch`),
or a `dim_value` of -1 is unknown and must be fixed with `--input-shape`. A `dim_value` of 0 is an
empty dimension, as ONNX defines it (some old exporters wrote 0 for "dynamic": `--input-shape` may
give such a dimension another size). An input with no elements has one possible value, so it is
compiled as that constant and leaves the C API. Inputs that share a named dimension get the value
given for it on any of them; two different values for one name are an error.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from aot.errors import ModelError, OptionError, ShapeError, UnsupportedOpError
from aot.frontend import backward_shapes, control_flow, functions, sequences, upgrade, validate
from aot.graph.evaluate import evaluate
from aot.graph.ir import Graph, Node, Value


@dataclass(frozen=True)
class LoadedModel:
    """The checked ONNX model (input shapes fixed) and where it came from."""

    proto: onnx.ModelProto      # the user's model, inputs frozen and shapes fixed
    # the same with every tensor's shape inferred (for to_graph); the initializers named in `stubs` only
    # declared there (name, type, dims: one copy of the weights is enough), their data in `proto`
    inferred: onnx.ModelProto
    label: str                  # file name for messages, e.g. "mobilenet.onnx"
    sha256: str
    frozen: dict[str, np.ndarray] = field(default_factory=dict)    # inputs bound with --freeze
    original: onnx.ModelProto | None = None     # the model as given: no input frozen, no shape fixed
    stubs: frozenset[str] = frozenset()

    def stubbed(self) -> dict[str, onnx.TensorProto]:
        """The initializers `inferred` has as stubs, with their data, by name."""
        return {t.name: t for t in self.proto.graph.initializer if t.name in self.stubs}

    def inferred_with_weights(self) -> onnx.ModelProto:
        """`inferred` with every initializer's data (a copy, where there are stubs)."""
        if not self.stubs:
            return self.inferred
        full = self.stubbed()
        result = onnx.ModelProto()
        result.CopyFrom(self.inferred)
        for tensor in result.graph.initializer:
            if tensor.name in full:
                tensor.CopyFrom(full[tensor.name])
        return result

    def reference(self) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        """What a reference runtime runs, and the inputs to add to its feeds: the model as the user gave
        it (onnxruntime infers some models' subgraphs less well with static input shapes, and folds an
        If on an initializer less reliably than it runs one on an input), fed the frozen values; an
        input dimension declared -1 is made unknown, as aot reads it, and one declared 0 too where
        --input-shape gave it another size."""
        if self.original is None:
            return self.proto, dict(self.frozen)
        proto = onnx.ModelProto.FromString(self.original.SerializeToString())
        fixed = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in self.proto.graph.input}
        for vi in proto.graph.input:
            given = fixed.get(vi.name)
            for axis, dim in enumerate(vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()):
                overridden = dim.dim_value == 0 and given is not None and given[axis] != 0
                if dim.HasField("dim_value") and (dim.dim_value < 0 or overridden):
                    dim.Clear()
        return proto, dict(self.frozen)


FreezeValue = str | os.PathLike | int | float | bool | list | tuple | np.ndarray


def load(model: str | os.PathLike | onnx.ModelProto,
         input_shapes: dict[str, tuple[int, ...]] | None = None,
         freeze: dict[str, FreezeValue] | None = None) -> LoadedModel:
    """Load and check a model; `freeze` binds inputs to constants (see freeze_inputs), `input_shapes`
    fixes the dimensions of the others."""
    if isinstance(model, onnx.ModelProto):
        proto, label = model, "model"
        validate.check_text(proto, label)
        label = model.graph.name or label
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
        except DecodeError:
            raise ModelError(f"{label}: not an ONNX model (cannot parse it as an ONNX protobuf)") from None
        validate.check_text(proto, label)
        directory = os.path.dirname(os.fspath(model)) or "."
        validate.check_external_data(proto, directory, label)
        try:     # weights saved beside the model (model.onnx.data), as large PyTorch exports do
            onnx.external_data_helper.load_external_data_for_model(proto, directory)
        except (OSError, onnx.checker.ValidationError) as err:
            first = str(err).strip().splitlines()[0]
            raise ModelError(f"{label}: cannot read its external weight data: {first}") from None
        if not proto.graph.node and not proto.graph.output:
            raise ModelError(f"{label}: not an ONNX model (no graph)")
    validate.check_nodes(proto, label, validate.check_opsets(proto, label))
    validate.check_value_types(proto, label)
    validate.check_tensors(proto, label)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:     # one line: the checker's message spans several
        raise ModelError(f"{label}: fails the ONNX checker: {' '.join(str(err).split())}") from None
    proto = upgrade.upgrade_old_opset(proto, label)
    validate.check_attributes(proto, label)
    original = proto        # what the reference runs: ops as the model has them
    proto = functions.expand(proto, label)
    proto = _initializers_as_constants(proto)
    proto, frozen = freeze_inputs(proto, freeze or {}, label)
    proto = _fix_input_shapes(proto, input_shapes or {}, label)
    proto, empty = _freeze_empty_inputs(proto)
    frozen.update(empty)
    sha256 = hashlib.sha256(data).hexdigest()
    del data
    light, stubs = _stubbed(proto)
    try:
        inferred = _infer_static_shapes(light, label, light=bool(stubs))
    except (_NeedsWeights, ModelError):     # a refusal is the whole model's to make, never a stub's
        if not stubs:
            raise
        inferred, stubs = _infer_static_shapes(proto, label), frozenset()
    validate.check_attributes(inferred, label, inferred=True)
    return LoadedModel(proto, inferred, label, sha256, frozen, original, stubs)


STUB_BYTES = 1024   # initializers this large (but for int32/int64: shapes, axes, pads) infer from a stub


def _stubbed(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, frozenset[str]]:
    """The model with its large initializers as stubs (name, type, dims, no data), and their names:
    shape inference reads only the values of shapes, axes, pads and scales, which are small or integers,
    and its copies of the model (a serialization each) then stay small. The model itself if it has none."""
    g = proto.graph
    large = [t for t in g.initializer if t.data_type not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64)
             and _tensor_bytes(t) >= STUB_BYTES]
    if not large:
        return proto, frozenset()
    names = {t.name for t in large}
    light = onnx.ModelProto()
    _copy_fields(proto, light, skip="graph")
    _copy_fields(g, light.graph, skip="initializer")
    for t in g.initializer:
        if t.name in names:
            light.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
        else:
            light.graph.initializer.append(t)
    return light, frozenset(names)


def _copy_fields(source, dest, skip: str) -> None:
    """Every field `source` sets but `skip`, copied into the empty message `dest`."""
    for field_descriptor, value in source.ListFields():
        if field_descriptor.name == skip:
            continue
        target = getattr(dest, field_descriptor.name)
        if hasattr(target, "extend"):           # a repeated field
            target.extend(value)
        elif hasattr(target, "CopyFrom"):       # a message
            target.CopyFrom(value)
        else:
            setattr(dest, field_descriptor.name, value)


def _tensor_bytes(t: onnx.TensorProto) -> int:
    count = int(np.prod(t.dims, dtype=np.int64))
    size = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize \
        if t.data_type not in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) else 0
    return count * size


class _NeedsWeights(Exception):
    """Shape inference on a model with stubs needs to fold constants: it runs again on the whole model."""


def _initializers_as_constants(proto: onnx.ModelProto) -> onnx.ModelProto:
    """An initializer also listed as a graph input (as every initializer was before IR version 4, and as
    some exporters still write them) is, in ONNX, a default value a caller may override at run time; a
    compiled model takes it as the constant it is. Such inputs are dropped, and the IR version raised to
    4, the first that lets an initializer not be an input: under IR 3 onnx's shape inference leaves
    untyped an initializer that is no input, such as every constant aot folds."""
    initializers = {t.name for t in proto.graph.initializer}
    listed = [vi for vi in proto.graph.input if vi.name in initializers]
    if not listed and proto.ir_version >= 4:
        return proto
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    kept = [vi for vi in result.graph.input if vi.name not in initializers]
    del result.graph.input[:]
    result.graph.input.extend(kept)
    result.ir_version = max(result.ir_version, 4)
    return result


def _floor_dropped_ceil_windows(proto: onnx.ModelProto, inferred: onnx.ModelProto, label: str
                                ) -> onnx.ModelProto | None:
    """Pooling with ceil_mode=1 drops a last window that would start in the end padding (ONNX's
    reference and onnxruntime do), but onnx's shape inference counts it: one output too many. Where that
    window is dropped on every axis whose count ceil_mode changes, the pool is ceil_mode=0 (the same
    windows); where it is kept on some axis and dropped on another, no flag says so: refused. None if
    no pool changes."""
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    result, changed = onnx.ModelProto.FromString(proto.SerializeToString()), False
    for index, node in enumerate(result.graph.node):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type not in ("MaxPool", "AveragePool") or not attrs.get("ceil_mode")
                or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
            continue
        spatial = shapes.get(node.input[0], [])[2:]
        kernel = list(attrs["kernel_shape"])
        rank = len(kernel)
        if len(spatial) != rank:
            continue
        strides, dilations = attrs.get("strides", [1] * rank), attrs.get("dilations", [1] * rank)
        pads = attrs.get("pads", [0] * 2 * rank)
        dropped = []
        for n, k, s, d, begin, end in zip(spatial, kernel, strides, dilations, pads[:rank], pads[rank:]):
            span = n + begin + end - ((k - 1) * d + 1)
            if span % s:        # ceil_mode counts one window more than floor here
                dropped.append((span // s + 1) * s >= n + begin)
        if not dropped or not any(dropped):
            continue
        if not all(dropped):
            name = node.name or f"{node.op_type}_{index}"
            raise UnsupportedOpError(f"{label}: node '{name}' ({node.op_type}): with ceil_mode=1 its last window is "
                                     "dropped on one axis and kept on another, which aot does not compile")
        for a in node.attribute:
            if a.name == "ceil_mode":
                a.i = 0
        changed = True
    return result if changed else None


def _floor_dropped_ceil_windows_first(proto: onnx.ModelProto, label: str) -> onnx.ModelProto | None:
    """_floor_dropped_ceil_windows before strict inference, on the lenient mode's shapes: a node reading
    the pool (an Add with a tensor of the true shape) would fail strict inference on the extra window."""
    if not any(n.op_type in ("MaxPool", "AveragePool") and any(a.name == "ceil_mode" and a.i for a in n.attribute)
               for n in proto.graph.node):
        return None
    try:
        lenient = onnx.shape_inference.infer_shapes(_without_annotations(proto), strict_mode=False, data_prop=True)
    except onnx.shape_inference.InferenceError:
        return None
    return _floor_dropped_ceil_windows(proto, lenient, label)


def _range_bounds_as_scalars(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Range's bounds of one element as the scalars ONNX's inference rule wants. A function body may pass
    1-element tensors (AffineGrid's, once its If is inlined and its sizes fold); onnxruntime's Range kernel
    takes them at run time, and so does aot."""
    g = proto.graph
    inits = {t.name: t for t in g.initializer}
    bounds = {i for n in g.node if n.op_type == "Range" for i in n.input
              if i in inits and len(inits[i].dims) > 0 and int(np.prod(inits[i].dims)) == 1}
    if not bounds:
        return proto
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    renamed = {}
    for name in sorted(bounds):
        scalar = onnx.numpy_helper.to_array(inits[name]).reshape(())
        renamed[name] = f"{name}_scalar"
        result.graph.initializer.append(onnx.numpy_helper.from_array(scalar, renamed[name]))
    for node in result.graph.node:
        if node.op_type == "Range":
            node.input[:] = [renamed.get(i, i) for i in node.input]
    return result


def _infer(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Strict ONNX shape inference. A node that fails its own inference rule (an axis out of range, an
    output shape contradicting the declared one) is the model's fault: a ModelError. Where inference
    fails only inside a node, in the function body onnx defines it by or in a subgraph (onnx 1.23
    cannot infer MeanVarianceNormalization's body from opset 13 on), the lenient mode's shapes are
    used, and any tensor it leaves unknown is reported later by name."""
    proto = _range_bounds_as_scalars(proto)
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as err:
        fault = _node_fault(proto, str(err))
        if fault:
            raise ModelError(f"{label}: {fault}") from None
        first = str(err).strip().splitlines()[0]
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=False, data_prop=True)
    except onnx.shape_inference.InferenceError:
        raise ModelError(f"{label}: ONNX shape inference failed: {first}") from None


# How onnx reports the nodes that fail inference, one line each: "(op_type:Softmax, node name: sm): why",
# without the name for a node that has none; a failure inside the node's function body or subgraph
# nests another "(op_type:..." in `why`.
_NODE_ERROR = re.compile(r"\(op_type:([^,()]*)(?:, node name: ([^()]*))?\): (?:\[\w+\] )*(.*)")


def _node_fault(proto: onnx.ModelProto, message: str) -> str | None:
    """The first node of the main graph that inference reports failing its own rule, as a message. An
    unnamed node is called as aot calls it (op_index) when it is the only unnamed one of its op."""
    nodes = proto.graph.node
    for line in message.splitlines():
        match = _NODE_ERROR.search(line)
        if not match or "(op_type:" in match.group(3):
            continue
        op, name, why = match.group(1), match.group(2) or "", match.group(3).strip()
        if name:
            if any(n.op_type == op and n.name == name for n in nodes):
                return f"node '{name}' ({op}): {why}"
            continue
        unnamed = [f"{op}_{i}" for i, n in enumerate(nodes) if n.op_type == op and not n.name]
        if len(unnamed) == 1:
            return f"node '{unnamed[0]}' ({op}): {why}"
        if unnamed:
            return f"one of the unnamed {op} nodes ({', '.join(unnamed)}): {why}"
    return None


def _infer_static_shapes(proto: onnx.ModelProto, label: str, light: bool = False) -> onnx.ModelProto:
    """Every tensor's shape, from the nodes. The model's own annotations (intermediate value_info, the
    graph outputs' shapes) are hints, and exporters leave stale ones behind (a Reshape annotated with
    the rank it had before the graph was edited) that onnxruntime ignores; strict inference would
    call them a contradiction. So shapes are first inferred without them; only if a tensor they
    annotate is left unknown are they used, those the nodes contradict dropped. A graph output's
    declared shape is the model's interface, which the compiled model's header gives: one the nodes
    contradict is a ModelError saying both. `light`: the model has stubs (see _stubbed), and inference
    that would fold constants raises _NeedsWeights."""
    proto = _forget_unknown_dims(proto)
    floored = _floor_dropped_ceil_windows_first(proto, label)
    if floored is not None:
        return _infer_static_shapes(floored, label, light)
    g = proto.graph
    hints = {vi.name for vi in g.value_info} | {vi.name for vi in g.output if vi.type.tensor_type.HasField("shape")}
    try:
        inferred = _resolve_shapes(_without_annotations(proto), label, light)
    except ModelError:
        if not hints:
            raise
        inferred = None     # perhaps an annotation says what inference cannot find: try with them
    floored = _floor_dropped_ceil_windows(proto, inferred, label) if inferred is not None else None
    if floored is not None:     # the pools' counts corrected, inference runs again (and finds none)
        return _infer_static_shapes(floored, label, light)
    if inferred is not None and not _unknown_outputs(inferred) & hints:
        _check_declared_outputs(proto, inferred, label)
        return inferred
    return _resolve_shapes(_consistent_annotations(proto, inferred, label), label, light)


def _resolve_shapes(proto: onnx.ModelProto, label: str, light: bool = False) -> onnx.ModelProto:
    """ONNX shape inference, helped where it stops short: exporters compute shapes and pads with
    chains of small ops (Shape, Gather, Concat, Slice, Range, ConstantOfShape, ...) that inference
    does not always follow, and an If or Loop may decide on a value known only after folding. While
    some tensor's shape is unknown or control flow is left, inline control flow with constant
    decisions, fold the nodes computable from constants, take shapes back from known (declared)
    outputs (backward_shapes.py), and infer again. Every round removes a node or names a new shape,
    so this ends."""
    while (lowered := sequences.lower_static_sequences(proto, label)) is not None:
        proto = lowered     # before inference, whose sequence rules are stricter than the spec's
    inferred = _infer(proto, label)
    while _unknown_outputs(inferred) or control_flow.has_control_flow(inferred):
        if light:
            raise _NeedsWeights()
        helped = (control_flow.inline_constant_control_flow(inferred) or _fold_constant_nodes(inferred, label)
                  or sequences.lower_static_sequences(inferred, label)
                  or _contrib_shapes(inferred) or backward_shapes.shapes_from_outputs(inferred, label)
                  or control_flow.select_between_branches(inferred))
        if helped is None:
            break
        inferred = _infer(helped, label)
    return inferred


def _without_annotations(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model without intermediate value_info, its graph outputs' element types kept, shapes not."""
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    del result.graph.value_info[:]
    for vi in result.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    return result


def _computed_types(inferred: onnx.ModelProto) -> dict:
    infos = list(inferred.graph.value_info) + list(inferred.graph.output)
    return {vi.name: vi.type.tensor_type for vi in infos if vi.type.HasField("tensor_type")}


def _check_declared_outputs(proto: onnx.ModelProto, inferred: onnx.ModelProto | None, label: str) -> None:
    """Each graph output's declared type and shape agree with what the nodes compute (where known). A
    declared shape with a symbolic or unknown dimension is an exporter's sketch, not an interface, and
    stale ones abound (ddddocr's CRNN declares [1, seqlen] for a [20, 1, 8210] output, which onnxruntime
    returns): the computed shape is taken, as onnxruntime takes it."""
    computed = _computed_types(inferred) if inferred is not None else {}
    for vi in proto.graph.output:
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else ()
        if any(not d.HasField("dim_value") for d in dims) and vi.type.tensor_type.elem_type in (
                0, (computed.get(vi.name) or vi.type.tensor_type).elem_type):
            continue
        if _contradicts(vi, computed.get(vi.name)):
            producer = next((f" by node '{n.name}' ({n.op_type})" if n.name else f" by a {n.op_type} node"
                             for n in proto.graph.node if vi.name in n.output), "")
            raise ModelError(f"{label}: graph output '{vi.name}' is declared {_type_text(vi.type.tensor_type)}, "
                             f"but is computed{producer} as {_type_text(computed[vi.name])}; a graph output's "
                             f"declared shape is the compiled model's interface: correct it in the model, or "
                             f"remove it to take the computed one")


def _consistent_annotations(proto: onnx.ModelProto, inferred: onnx.ModelProto | None, label: str
                            ) -> onnx.ModelProto:
    """The model without the value_info entries that contradict `inferred` (the shapes inferred without
    annotations, None if that failed)."""
    _check_declared_outputs(proto, inferred, label)
    computed = _computed_types(inferred) if inferred is not None else {}
    kept = [vi for vi in proto.graph.value_info if not _contradicts(vi, computed.get(vi.name))]
    if len(kept) == len(proto.graph.value_info):
        return proto
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    del result.graph.value_info[:]
    result.graph.value_info.extend(kept)
    return result


def _contradicts(vi: onnx.ValueInfoProto, computed) -> bool:
    """The annotation says another element type, rank or dimension than inference computes."""
    if computed is None or not vi.type.HasField("tensor_type"):
        return False
    declared = vi.type.tensor_type
    if declared.elem_type and computed.elem_type and declared.elem_type != computed.elem_type:
        return True
    if not (declared.HasField("shape") and computed.HasField("shape")):
        return False
    a, b = declared.shape.dim, computed.shape.dim
    return len(a) != len(b) or any(x.HasField("dim_value") and y.HasField("dim_value") and x.dim_value != y.dim_value
                                   for x, y in zip(a, b))


def _type_text(ttype) -> str:
    shape = f"[{_dims_text(ttype.shape.dim).replace('x', ', ')}]" if ttype.HasField("shape") else "of unknown shape"
    return f"{_elem_type_name(ttype.elem_type).lower()} {shape}"


def _forget_unknown_dims(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Outputs and value_info as exporters write them may say -1 or 0 for a dynamic dimension; strict
    shape inference would call the inferred size a contradiction, so make those dimensions unknown."""
    g = proto.graph
    stale = [d for vi in list(g.output) + list(g.value_info) if vi.type.HasField("tensor_type")
             for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value <= 0]
    if not stale:
        return proto
    result = onnx.ModelProto()
    result.CopyFrom(proto)
    for vi in list(result.graph.output) + list(result.graph.value_info):
        for d in vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ():
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()
    return result


def _contrib_shapes(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """Output types of onnxruntime's quantized contrib ops (com.microsoft), which ONNX inference does not
    know, from their inputs' shapes. ONNX nodes after one are typed on the way by onnx's rule for the
    node, so that a chain alternating contrib and ONNX ops (QLinearConv, QLinearAdd, QLinearConv, ...)
    is typed in one walk, not in one whole-model inference round per contrib op (quadratic in the
    depth). None if no new shape could be given."""
    g = proto.graph
    types = {vi.name: vi.type for vi in list(g.value_info) + list(g.input) + list(g.output)
             if vi.type.HasField("tensor_type")}
    constants = {t.name: t for t in g.initializer}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in g.initializer})
    known = {name: _static_shape(t.tensor_type) for name, t in types.items()}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    added, contrib = [], False
    for node in g.node:
        if not node.output or known.get(node.output[0]):
            continue
        if node.domain == "com.microsoft":
            contrib = True
            shape = _contrib_shape(node, known)
            elem = _contrib_elem_type(node, types)
            new = {node.output[0]: onnx.helper.make_tensor_type_proto(elem, list(shape))} if shape and elem else {}
        elif contrib and node.domain in ("", "ai.onnx"):
            new = _infer_node(node, types, constants, opset)
        else:
            continue
        for name, ttype in new.items():
            shape = _static_shape(ttype.tensor_type)
            if shape is not None and name not in known:
                added.append(onnx.helper.make_value_info(name, ttype))
                types[name], known[name] = ttype, shape
    if not added:
        return None
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    result.graph.value_info.extend(added)
    return result


def _contrib_elem_type(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> int | None:
    """The output element type: the output zero point's; without one, float for QGemm, else the input's."""
    index = _Y_ZERO_POINT.get(node.op_type, 4)
    zp = node.input[index] if index < len(node.input) else ""
    if zp in types:
        return types[zp].tensor_type.elem_type
    if node.op_type == "QGemm":
        return onnx.TensorProto.FLOAT
    return types[node.input[0]].tensor_type.elem_type if node.input and node.input[0] in types else None


def _infer_node(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], constants: dict[str, onnx.TensorProto],
                opset: int) -> dict[str, onnx.TypeProto]:
    """onnx's inference rule for one node of the default domain, given its inputs' types ({} where it
    has none, or fails: the next whole-model round reports what is wrong)."""
    if any(i and i not in types for i in node.input) or any(a.type in (onnx.AttributeProto.GRAPH,
                                                                       onnx.AttributeProto.GRAPHS)
                                                            for a in node.attribute):
        return {}
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="")
        inputs = {i: types[i] for i in node.input if i}
        data = {i: constants[i] for i in node.input if i in constants}
        return onnx.shape_inference.infer_node_outputs(schema, node, inputs, data,
                                                       opset_imports=[onnx.helper.make_opsetid("", opset)])
    except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError):
        return {}


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
        if len(x) != rank + 2:      # validate.check_attributes names the mismatch once inference is done
            return None
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


def _unknown_outputs(proto: onnx.ModelProto) -> set[str]:
    """The node outputs whose shape is not fully known."""
    known = {vi.name for vi in list(proto.graph.value_info) + list(proto.graph.output)
             if vi.type.tensor_type.HasField("shape")
             and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    known |= {t.name for t in proto.graph.initializer}
    return {out for node in proto.graph.node for out in node.output if out and out not in known}


def _fold_constant_nodes(proto: onnx.ModelProto, label: str) -> onnx.ModelProto | None:
    """Replace nodes whose inputs are all constants (and Shape/Size of static tensors) by initializers."""
    g = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {vi.name: vi.type.tensor_type for vi in list(g.value_info) + list(g.input) + list(g.output)}
    kept, folded = [], False
    for node in g.node:
        static = node.op_type in ("Shape", "Size") and _static_shape(shapes.get(node.input[0]))
        # Control flow is inlined (control_flow.py), not evaluated: its subgraphs read outer names; a
        # sequence is not a tensor (sequences.py follows them).
        if node.domain in ("", "ai.onnx") and (static or all(i in constants for i in node.input if i)) \
                and not node.op_type.startswith("Random") and node.op_type not in control_flow.CONTROL_FLOW \
                and node.op_type not in sequences.SEQUENCE_OPS:
            _check_size(node.output, shapes, label)
            feeds = {i: constants[i] if i in constants else      # Shape and Size read only the shape
                     np.broadcast_to(np.zeros((), onnx.helper.tensor_dtype_to_np_dtype(shapes[i].elem_type)),
                                     _static_shape(shapes[i]))
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


# The largest tensor aot accepts: ONNX files are limited to 2 GiB and no target aot compiles for holds
# more; a larger one comes from a damaged or hostile model, and folding it would exhaust the memory of
# the machine that builds.
MAX_TENSOR_BYTES = 2**31


def _too_large(shape: tuple[int, ...], elem_type: int) -> bool:
    known = elem_type in onnx.TensorProto.DataType.values() and elem_type != onnx.TensorProto.UNDEFINED
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize if known else 1
    return math.prod(shape) * itemsize > MAX_TENSOR_BYTES


def _check_size(names: Iterable[str], types: dict, label: str) -> None:
    """Refuse to compute a tensor whose inferred shape is larger than MAX_TENSOR_BYTES."""
    for name in names:
        shape = _static_shape(types.get(name))
        if shape is not None and _too_large(shape, types[name].elem_type):
            raise ModelError(f"{label}: tensor '{name}' would have shape {list(shape)}, more than the "
                             f"{MAX_TENSOR_BYTES >> 30} GiB aot accepts for one tensor")


def _static_shape(ttype) -> tuple[int, ...] | None:
    if ttype is None or not ttype.HasField("shape"):
        return None
    dims = ttype.shape.dim
    return tuple(d.dim_value for d in dims) if all(d.HasField("dim_value") for d in dims) else None


def _graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in initializers]


def _named(dim) -> str:
    """The dimension's name, if it is a real one: "?" (as some exporters write) names no dimension."""
    return dim.dim_param if dim.dim_param not in ("", "?") else ""


def _known(dim) -> bool:
    """A dimension with a size, 0 included; -1 is how exporters write "dynamic" (see the module doc)."""
    return dim.HasField("dim_value") and dim.dim_value >= 0


def _freeze_empty_inputs(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Inputs with no elements (an empty axes or pads list) bound to their one value, the empty array."""
    empty = {}
    for vi in _graph_inputs(proto):
        ttype = vi.type.tensor_type
        if ttype.HasField("shape") and any(d.dim_value == 0 for d in ttype.shape.dim):
            shape = tuple(d.dim_value for d in ttype.shape.dim)
            empty[vi.name] = np.zeros(shape, onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    if not empty:
        return proto, {}
    return freeze_inputs(proto, empty, "")


def _fix_input_shapes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], label: str) -> onnx.ModelProto:
    """Give every graph input static dimensions: from `shapes`, or from a named dimension that a given
    shape fixed on another input; any dimension left unknown is a ShapeError saying what to give."""
    inputs = _graph_inputs(proto)
    names = [v.name for v in inputs]
    for name in shapes:
        if name not in names:
            frozen = " (it is frozen)" if any(t.name == name for t in proto.graph.initializer) else ""
            raise OptionError(f"{label}: --input-shape names '{name}'{frozen}, but the model's inputs are: "
                              f"{', '.join(names) or 'none'}")
    named = _named_dims(inputs, shapes, label)
    if not shapes and all(v.type.tensor_type.HasField("shape") and all(_known(d) for d in v.type.tensor_type.shape.dim)
                          for v in inputs):
        return proto
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    for vi in _graph_inputs(proto):
        ttype = vi.type.tensor_type
        if vi.name not in shapes and not ttype.HasField("shape"):
            raise ShapeError(f"{label}: input '{vi.name}' declares no shape (not even its rank): give it with "
                             f"--input-shape {vi.name}=DIMS (input_shapes= in the Python API)")
        dims = ttype.shape.dim
        want = shapes[vi.name] if vi.name in shapes else tuple(
            d.dim_value if _known(d) else named.get(_named(d), -1) for d in dims)
        unknown = [axis for axis, size in enumerate(want) if size < 0]
        if unknown:
            raise ShapeError(_dynamic_message(label, vi.name, dims, unknown))
        del dims[:]
        for size in want:
            dims.add().dim_value = size
    return proto


def _named_dims(inputs: list[onnx.ValueInfoProto], shapes: dict[str, tuple[int, ...]], label: str) -> dict[str, int]:
    """Check each given shape against its input's rank and known dimensions, and collect the sizes it
    gives to named dimensions (dim_param); one name given two sizes is an OptionError."""
    named: dict[str, tuple[int, str]] = {}
    for vi in inputs:
        if vi.name not in shapes:
            continue
        dims, want = vi.type.tensor_type.shape.dim, shapes[vi.name]
        given = f"--input-shape {vi.name}={'x'.join(map(str, want))}"
        if len(dims) and len(dims) != len(want):
            raise OptionError(f"{label}: {given} has rank {len(want)}, the model's input has rank {len(dims)} "
                              f"({_dims_text(dims)})")
        for axis, (dim, size) in enumerate(zip(dims, want)):
            if _known(dim) and dim.dim_value not in (0, size):      # a declared 0 may mean "dynamic"
                raise OptionError(f"{label}: {given} contradicts the model's shape {_dims_text(dims)} "
                                  f"(axis {axis} is {dim.dim_value})")
            if _named(dim):
                first = named.setdefault(dim.dim_param, (size, f"--input-shape {vi.name} (axis {axis})"))
                if first[0] != size:
                    raise OptionError(f"{label}: {given} gives the named dimension '{dim.dim_param}' size {size}, "
                                      f"but {first[1]} gives it {first[0]}; inputs sharing a named dimension "
                                      f"must agree")
    return {name: size for name, (size, _) in named.items()}


def _dynamic_message(label: str, name: str, dims, unknown: list[int]) -> str:
    def what(axis: int) -> str:
        d = dims[axis]
        return f"named '{d.dim_param}'" if d.dim_param else (str(d.dim_value) if d.HasField("dim_value") else "?")

    where = ", ".join(f"{axis} ({what(axis)})" for axis in unknown)
    where = f"dynamic dimensions at axes {where}" if len(unknown) > 1 else f"a dynamic dimension at axis {where}"
    example = "x".join(str(d.dim_value) if _known(d) else "N" for d in dims)
    return (f"{label}: input '{name}' has {where}: give its shape with --input-shape {name}={example} "
            f"(input_shapes= in the Python API)")


def freeze_inputs(proto: onnx.ModelProto, freeze: dict[str, FreezeValue], label: str
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Bind inputs to constants: each named input becomes an initializer of its declared dtype and
    shape and is no longer an input, so the nodes reading it fold. A value is a number, a comma list
    ("1,0,1"), a .npy path, or an array. Returns the model and the arrays bound."""
    if not freeze:
        return proto, {}
    inputs = {v.name: v for v in _graph_inputs(proto)}
    for name in freeze:
        if name not in inputs:
            raise OptionError(f"{label}: --freeze names '{name}', but the model's inputs are: "
                              f"{', '.join(inputs) or 'none'}")
    arrays = {name: _freeze_value(inputs[name], value, label) for name, value in freeze.items()}
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    result.graph.initializer.extend(numpy_helper.from_array(a, name) for name, a in arrays.items())
    if result.ir_version >= 4:     # before IR 4 every initializer must also be listed as an input
        kept = [vi for vi in result.graph.input if vi.name not in arrays]
        del result.graph.input[:]
        result.graph.input.extend(kept)
    return result, arrays


def _freeze_value(vi: onnx.ValueInfoProto, value: FreezeValue, label: str) -> np.ndarray:
    """The value in the input's declared shape: an array of a matching shape as it is, n values for an
    input of n elements (a scalar or shape [1] takes one number), any count for a 1-D dynamic input."""
    ttype = vi.type.tensor_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    shown = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value).replace("\n", "")
    where = f"{label}: --freeze {vi.name}={shown}"
    array = _freeze_array(value, dtype, where)
    if not ttype.HasField("shape"):
        return array
    dims = ttype.shape.dim
    shape = tuple(d.dim_value if _known(d) else -1 for d in dims)
    if array.ndim == len(shape) and all(s in (-1, a) for s, a in zip(shape, array.shape)):
        return array
    if -1 not in shape and array.size == int(np.prod(shape)) and array.ndim <= 1:
        return array.reshape(shape)
    if shape == (-1,) and array.ndim <= 1:
        return array.reshape(-1)
    count = "1 value" if array.size == 1 else f"{array.size} values"
    wanted = f" ({int(np.prod(shape))} values)" if -1 not in shape else ""
    raise OptionError(f"{where}: {count} of shape {list(array.shape)} given, but input '{vi.name}' has shape "
                      f"[{_dims_text(dims).replace('x', ', ')}]{wanted}")


def _freeze_array(value: FreezeValue, dtype: np.dtype, where: str) -> np.ndarray:
    """The frozen value as an array of the input's dtype: text is parsed (a number or a comma list),
    a .npy path is read; an integer or bool input refuses values that do not convert exactly."""
    if isinstance(value, (str, os.PathLike)) and os.fspath(value).endswith(".npy"):
        try:
            array = np.load(os.fspath(value), allow_pickle=False)
        except (OSError, ValueError) as err:
            raise OptionError(f"{where}: cannot read it as a .npy file: {err}") from None
    elif isinstance(value, str):
        parse = _parse_bool if dtype == np.bool_ else (float if dtype.kind == "f" else int)
        try:
            array = np.array([parse(part.strip()) for part in value.split(",")])
        except ValueError:
            kind = "true/false" if dtype == np.bool_ else str(dtype)
            raise OptionError(f"{where}: cannot parse '{value}' as {kind} (give a number, a comma list, "
                              f"or a .npy file)") from None
        if "," not in value:
            array = array.reshape(())
    else:
        array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise OptionError(f"{where}: the value is not numeric ({array.dtype})")
    cast = array.astype(dtype)
    if dtype.kind in "biu" and not np.array_equal(cast, array):
        raise OptionError(f"{where}: the input is {dtype}, and the value does not convert to it exactly")
    return cast


def _parse_bool(text: str) -> bool:
    words = {"true": True, "1": True, "false": False, "0": False}
    if text.lower() not in words:
        raise ValueError(text)
    return words[text.lower()]


def _dims_text(dims) -> str:
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
           onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool",
           onnx.TensorProto.INT16: "int16",
           onnx.TensorProto.DOUBLE: "float64", onnx.TensorProto.FLOAT16: "float16"}


def _elem_type_name(elem_type: int) -> str:
    known = onnx.TensorProto.DataType.values()
    return onnx.TensorProto.DataType.Name(elem_type) if elem_type in known else f"number {elem_type}"


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
    control_flow.refuse_control_flow(model.inferred, label)
    sequences.refuse_sequences(model.inferred, label)
    opset = next((o.version for o in model.inferred.opset_import if o.domain in ("", "ai.onnx")), 17)
    stubbed = model.stubbed()
    constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(stubbed.get(t.name, t)) for t in g.initializer}
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
        for axis, dim in enumerate(ttype.shape.dim):
            if not dim.HasField("dim_value"):
                # Inputs are static and everything computable from constants is folded by now, so
                # only a value computed at run time can leave a dimension unknown (inference names
                # it unk__N, which means nothing to a user).
                raise UnsupportedOpError(f"{label}: tensor '{name}' ({where}) has a shape that depends on "
                                         f"values computed at run time (axis {axis} is unknown with every input "
                                         f"shape fixed and constants folded); aot needs static shapes")
            dims.append(dim.dim_value)
        dtype = _DTYPES.get(ttype.elem_type)
        if dtype is None:
            raise ModelError(f"{label}: tensor '{name}' ({where}) has an unsupported element type "
                             f"{_elem_type_name(ttype.elem_type)}")
        if _too_large(tuple(dims), ttype.elem_type):
            raise ModelError(f"{label}: tensor '{name}' ({where}) has shape {dims}, more than the "
                             f"{MAX_TENSOR_BYTES >> 30} GiB aot accepts for one tensor")
        values[name] = Value(name, tuple(dims), dtype)

    for name in constants:
        declare(name, "an initializer")
    inputs = tuple(vi.name for vi in _graph_inputs(model.inferred))
    for name in inputs:
        declare(name, "a graph input")
    used = {name for node in g.node for name in node.input} | {vi.name for vi in g.output}
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
        # An op of a domain neither onnx nor _contrib_shapes knows: no shape, and no hope of a lowering.
        if node.domain not in ("", "ai.onnx", "com.microsoft") and any(out and out not in infos for out in node.output):
            raise UnsupportedOpError(f"{label}: node '{node_name}': op {node.op_type} from domain '{node.domain}' "
                                     f"is not supported (the README lists the supported ops)")
        outputs = _without_untyped_unused(node, used, infos, opset)
        try:
            for name in outputs:
                declare(name, where)
        except ShapeError as err:
            raise ShapeError(f"{err}: {_no_shape_reason(node, values, opset)}") from None
        nodes.append(Node(node.op_type, node_name, tuple(node.input), outputs, attrs))
    outputs = tuple(vi.name for vi in g.output)
    for name in outputs:
        declare(name, "a graph output")
    _check_interface_dtypes(values, inputs, outputs, label)
    name = os.path.splitext(label)[0]
    return Graph(name, tuple(nodes), values, constants, inputs, outputs, opset)


def _check_interface_dtypes(values: dict[str, Value], inputs: tuple[str, ...], outputs: tuple[str, ...],
                            label: str) -> None:
    """The C API passes tensors of the dtypes kernels compute; a float16 input or output has no kernel to
    read or write it, even where everything between folds."""
    for kind, names in (("input", inputs), ("output", outputs)):
        for name in names:
            dtype = values[name].dtype
            if dtype in _NO_KERNEL_DTYPES:
                raise UnsupportedOpError(f"{label}: graph {kind} '{name}' is {dtype}, which no kernel reads or "
                                         f"writes; a compiled model's inputs and outputs are float32, float64, "
                                         f"integer or bool tensors")


_NO_KERNEL_DTYPES = frozenset({"float16"})


def _without_untyped_unused(node: onnx.NodeProto, used: set[str], infos: dict, opset: int) -> tuple[str, ...]:
    """The node's outputs, an optional one that nothing reads and shape inference leaves untyped
    omitted (""), as ONNX spells an output not asked for: old opsets give some no inference rule
    (Dropout's mask before opset 10), and an output nobody reads needs no shape."""
    def typed(name: str) -> bool:
        vi = infos.get(name)
        return vi is not None and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")

    if node.domain not in ("", "ai.onnx") or all(not name or name in used or typed(name) for name in node.output):
        return tuple(node.output)
    try:
        formal = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="").outputs
    except onnx.defs.SchemaError:
        return tuple(node.output)
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return tuple("" if name and name not in used and not typed(name) and i < len(formal)
                 and formal[i].option == optional else name for i, name in enumerate(node.output))


def _no_shape_reason(node: onnx.NodeProto, values: dict[str, Value], opset: int) -> str:
    """Why a node's output has no shape, all its inputs having one: what onnx's inference rule for the
    node says about those inputs."""
    given = [i for i in node.input if i]
    shapes = ", ".join(f"'{i}' {'x'.join(map(str, values[i].shape)) or 'scalar'} {values[i].dtype}" for i in given)
    inputs = f"its inputs are {shapes}" if given else "it has no inputs"
    if node.domain not in ("", "ai.onnx"):
        return f"{inputs}, and onnx has no shape rule for domain '{node.domain}'"
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="")
        types = {i: onnx.helper.make_tensor_type_proto(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(values[i].dtype)),
                                                       list(values[i].shape)) for i in given}
        inferred = onnx.shape_inference.infer_node_outputs(schema, node, types,
                                                           opset_imports=[onnx.helper.make_opsetid("", opset)])
    except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{inputs}, on which onnx's {node.op_type} rule at opset {opset} fails: {first}"
    if all(o in inferred and inferred[o].tensor_type.HasField("shape") for o in node.output if o):
        return (f"{inputs}, from which onnx's {node.op_type} rule at opset {opset} gives it a shape, but shape "
                f"inference of the whole model left it unknown (an internal error: please report it)")
    return f"{inputs}, from which onnx's {node.op_type} rule at opset {opset} gives it no shape"


def _constant_value(attrs: dict, label: str, node_name: str) -> np.ndarray:
    for key, cast in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                      ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=cast) if cast else np.asarray(attrs[key])
    raise ModelError(f"{label}: Constant node '{node_name}' has no supported value attribute")
