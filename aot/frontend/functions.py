"""Default-domain ops that aot has no kernel for but ONNX defines by a function body (Attention,
RotaryEmbedding, SwiGLU, AffineGrid, CenterCropPad, ...): each such node is replaced by its body, so the ops
the body uses compile as usual.

The body is the schema's function at the model's opset; where ONNX builds it from the node's attributes and
input types (a context-dependent function: Attention's depends on its masks and inputs), from those, the
types read off ONNX's shape inference. The node becomes a call of a model-local function holding the body,
its attributes completed with the schema's defaults, and onnx's inliner splices the body in under fresh
names. A body may itself hold such ops, so this repeats until none is left (a few rounds at most).

Ops aot compiles itself keep their nodes (LayerNormalization, GELU, HardSwish, ... have bodies too, but a
kernel of their own is faster): the registry says which.
"""

from __future__ import annotations

import onnx
import onnx.inliner
from onnx import AttributeProto, helper

from aot.errors import ModelError
from aot.frontend.control_flow import CONTROL_FLOW
from aot.frontend.sequences import SEQUENCE_OPS

DOMAIN = "aot.expanded"       # the domain of the bodies while they are inlined
_ROUNDS = 4
# folded, unrolled or followed before the registry sees them
FRONTEND_OPS = frozenset({"Constant", *CONTROL_FLOW, *SEQUENCE_OPS})


def expand(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """`proto` with every node of an op aot does not compile but ONNX defines by a function replaced by
    the function's body (the model itself if there is none)."""
    for _ in range(_ROUNDS):
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
        if opset is None or not any(_body_schema(n, opset) for n in proto.graph.node):
            return proto
        inlined = _inline_once(proto, opset, label)
        if inlined is None:
            return proto
        proto = inlined
    return proto


def _known(op: str) -> bool:
    import aot.ops  # noqa: F401 - importing the op modules fills the registry
    from aot.registry import op_def

    return op_def(op).canonical is not None


def _body_schema(node: onnx.NodeProto, opset: int) -> onnx.defs.OpSchema | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in FRONTEND_OPS or _known(node.op_type):
        return None     # SequenceMap's body is a Loop over its sequence: unrolled directly instead
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return schema if schema.has_function or schema.has_context_dependent_function else None


def _compilable(body: onnx.FunctionProto, opset: int) -> bool:
    """Whether every op of the body is one aot compiles or one ONNX defines by a body in turn: a body that
    uses an op neither is (Bernoulli's RandomUniformLike) is not inlined, so the error names the op the
    user's model has."""
    from aot.registry import op_def

    return all(n.domain not in ("", "ai.onnx") or n.op_type in FRONTEND_OPS or _known(n.op_type)
               or op_def(n.op_type).shape_only or _body_schema(n, opset) is not None for n in body.node)


def _inline_once(proto: onnx.ModelProto, opset: int, label: str) -> onnx.ModelProto | None:
    """The model with the function-bodied nodes inlined, or None if no body is one aot could compile."""
    result = onnx.ModelProto.FromString(proto.SerializeToString())
    types = _value_types(result)
    changed = False
    for index, node in enumerate(result.graph.node):
        schema = _body_schema(node, opset)
        if schema is None:
            continue
        where = f"{label}: node '{node.name or f'{node.op_type}_{index}'}' ({node.op_type})"
        completed = onnx.NodeProto()
        completed.CopyFrom(node)
        _complete_attributes(completed, schema)
        body = _body(completed, schema, opset, types, where)
        if not _compilable(body, opset):
            continue
        node.CopyFrom(completed)
        changed = True
        body.name, body.domain = f"{node.op_type}_{index}", DOMAIN
        if not any(o.domain in ("", "ai.onnx") for o in body.opset_import):
            body.opset_import.append(helper.make_opsetid("", opset))
        result.functions.append(body)
        node.op_type, node.domain = body.name, DOMAIN
    if not changed:
        return None
    result.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    try:     # a body written for an older opset is converted to the model's as it is inlined
        inlined = onnx.inliner.inline_local_functions(result, convert_version=True)
    except Exception as err:       # noqa: BLE001 - onnx's own failure, reported as one line
        raise ModelError(f"{label}: expanding the function bodies of ops aot has no kernel for failed: "
                         f"{str(err).strip().splitlines()[0]}") from None
    left = [n.op_type.rsplit("_", 1)[0] for n in inlined.graph.node if n.domain == DOMAIN]
    if left:
        raise ModelError(f"{label}: onnx could not inline the function body of {', '.join(sorted(set(left)))}")
    del inlined.opset_import[:]
    inlined.opset_import.extend(o for o in proto.opset_import)
    return inlined


def _complete_attributes(node: onnx.NodeProto, schema: onnx.defs.OpSchema) -> None:
    """The schema's default for every attribute the node leaves out: the body reads them by reference."""
    given = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in given and attr.default_value.type != AttributeProto.UNDEFINED:
            node.attribute.append(attr.default_value)


def _body(node: onnx.NodeProto, schema: onnx.defs.OpSchema, opset: int, types: dict[str, onnx.TypeProto],
          where: str) -> onnx.FunctionProto:
    if schema.has_function:
        data = schema.get_function_with_opset_version(opset) if schema.function_opset_versions else b""
        return onnx.FunctionProto.FromString(data or schema.function_body.SerializeToString())
    inputs = []
    for name in node.input:
        if name and name not in types:
            raise ModelError(f"{where}: ONNX builds this op from its inputs' types, and '{name}' has none")
        inputs.append(types[name].SerializeToString() if name else onnx.TypeProto().SerializeToString())
    try:
        data = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), inputs) \
            if schema.context_dependent_function_opset_versions else \
            schema.get_context_dependent_function(node.SerializeToString(), inputs)
    except Exception as err:       # noqa: BLE001 - onnx refuses to build the body for these inputs
        raise ModelError(f"{where}: ONNX cannot build this op's function body for it: "
                         f"{str(err).strip().splitlines()[0]}") from None
    if not data:
        raise ModelError(f"{where}: ONNX builds no function body for this op with these inputs")
    return onnx.FunctionProto.FromString(data)


def _value_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value's type that ONNX's (lenient) shape inference finds, with the graph's inputs and
    initializers."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except onnx.shape_inference.InferenceError:
        inferred = proto
    g = inferred.graph
    types = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
    for t in g.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return types
