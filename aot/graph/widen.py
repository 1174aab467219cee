"""A model with every float value and constant made float64, for evaluating it exactly enough to judge
float32 programs by (aot.arbitrate, the differential fuzzer).

Making the graph's own types and constants float64 is not enough: onnx.reference runs an op it has no
implementation of (MeanVarianceNormalization, HardSwish, Mish) through the function body the op's schema
defines, and that body holds float32 constants of its own (MVN's epsilon) that meet the float64 values
and stop the evaluation. Such a node is made a call of a model-local function holding the body,
widened like the graph.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from aot.graph.evaluate import CORRECTED_OPS

# float tensor types evaluated as float64
FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
# the domain of the function bodies the widened model calls
BODIES = "aot.widened"
_CORRECTED = {op.__name__ for op in CORRECTED_OPS}


def widen_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` computing in float64 wherever it computes in a float type."""
    wide = onnx.ModelProto.FromString(model.SerializeToString())
    opset = next((o.version for o in wide.opset_import if o.domain in ("", "ai.onnx")), None)
    bodies: dict[str, onnx.FunctionProto] = {}
    _widen_graph(wide.graph, opset, bodies)
    for function in wide.functions:
        nodes = [widen_node(n, _function_opset(function, opset), bodies) for n in function.node]
        del function.node[:]
        function.node.extend(nodes)
    if bodies:
        wide.functions.extend(bodies.values())
        wide.opset_import.append(helper.make_opsetid(BODIES, 1))
    return wide


def widen_node(node: onnx.NodeProto, opset: int | None = None,
               bodies: dict[str, onnx.FunctionProto] | None = None) -> onnx.NodeProto:
    """The node with its float constants and float target types made float64; so is the precision of
    GroupNormalization's statistics (stash_type: float32 by default, in which onnx.reference's function
    for it would compute them, cancellation included, in a float64 evaluation too; its LayerNormalization
    computes in the input's type and refuses any stash_type but float). Given `bodies`, an op evaluated
    through its schema's function body calls that body, widened, kept there."""
    node = onnx.NodeProto.FromString(node.SerializeToString())
    if node.op_type == "GroupNormalization" and not node.domain:
        if not any(a.name == "stash_type" for a in node.attribute):
            node.attribute.append(helper.make_attribute("stash_type", TensorProto.DOUBLE))
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR and attr.t.data_type in FLOATS:
            attr.t.CopyFrom(numpy_helper.from_array(_f64(numpy_helper.to_array(attr.t)), attr.t.name))
        elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
            value = np.float64(attr.f) if attr.name == "value_float" else np.array(attr.floats, np.float64)
            attr.CopyFrom(helper.make_attribute("value", numpy_helper.from_array(np.asarray(value))))
        elif (attr.name in ("to", "dtype", "output_dtype", "output_datatype", "stash_type")
              and attr.type == AttributeProto.INT and attr.i in FLOATS
              and not (attr.name == "stash_type" and node.op_type == "LayerNormalization")):
            attr.i = TensorProto.DOUBLE
        elif attr.type == AttributeProto.GRAPH:
            _widen_graph(attr.g, opset, bodies)
        elif attr.type == AttributeProto.GRAPHS:
            for graph in attr.graphs:
                _widen_graph(graph, opset, bodies)
    if bodies is not None and opset is not None and not node.domain:
        _call_body(node, opset, bodies)
    return node


def _widen_graph(graph: onnx.GraphProto, opset: int | None, bodies: dict[str, onnx.FunctionProto] | None) -> None:
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.tensor_type.elem_type in FLOATS:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for t in graph.initializer:
        if t.data_type in FLOATS:
            t.CopyFrom(numpy_helper.from_array(_f64(numpy_helper.to_array(t)), t.name))
    nodes = [widen_node(n, opset, bodies) for n in graph.node]
    del graph.node[:]
    graph.node.extend(nodes)


def _call_body(node: onnx.NodeProto, opset: int, bodies: dict[str, onnx.FunctionProto]) -> None:
    """Make `node` a call of its op's schema function, widened, if onnx.reference would run that body."""
    schema = _expanded_schema(node.op_type, opset)
    if schema is None:
        return
    name = f"{node.op_type}_{schema.since_version}"
    if name not in bodies:
        body = onnx.FunctionProto.FromString(schema.function_body.SerializeToString())
        body.name, body.domain = name, BODIES
        if not body.opset_import:
            body.opset_import.append(helper.make_opsetid("", opset))
        inner = _function_opset(body, opset)
        nodes = [widen_node(n, inner, bodies) for n in body.node]
        del body.node[:]
        body.node.extend(nodes)
        bodies[name] = body
    given = {a.name for a in node.attribute}
    for attr_name, attr in schema.attributes.items():    # the body reads the schema's defaults as attributes
        if attr_name not in given and attr.default_value.type != AttributeProto.UNDEFINED:
            node.attribute.append(attr.default_value)
    node.op_type, node.domain = name, BODIES


def _expanded_schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    """The op's schema if onnx.reference evaluates the op through its schema's (fixed) function body:
    it implements the op neither itself nor by one of aot's corrections."""
    if op in _CORRECTED:
        return None
    from onnx.reference.ops import load_op
    try:
        load_op("", op, opset)
        return None
    except Exception:         # noqa: BLE001 - no implementation of its own at this opset
        pass
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None
    return schema if schema.has_function else None


def _function_opset(function: onnx.FunctionProto, default: int | None) -> int | None:
    return next((o.version for o in function.opset_import if o.domain in ("", "ai.onnx")), default)


def _f64(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.float64) if value.dtype.kind == "f" else value
