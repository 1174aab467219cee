"""Control flow whose decisions are known at compile time, made into plain nodes of the main graph.

aot compiles one straight sequence of kernels, so an `If` must have a constant condition (often
only after constant folding or `--freeze`), a `Loop` a constant trip count and a `Scan` a sequence of
static length. Such nodes are replaced by their subgraph's nodes: the taken branch, or the body once
per iteration. Names the
subgraph defines are renamed `<node>/<name>` (made unique against every name of the model, so the
result is deterministic); names it reads from the outer scope stay. Anything else is refused with
a message naming the node and, where the decision depends on a graph input, the `--freeze` to give.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from aot.errors import UnsupportedOpError

CONTROL_FLOW = ("If", "Loop", "Scan")
MAX_UNROLL = 1024       # iterations; past this an unrolled Loop is no longer a sensible kernel sequence


def has_control_flow(proto: onnx.ModelProto) -> bool:
    return any(_is_control_flow(n) for n in proto.graph.node)


def _is_control_flow(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in CONTROL_FLOW


def inline_constant_control_flow(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """Replace every If with a constant condition by its taken branch and every Loop with a constant
    trip count by its unrolled body; None if there was none. Nested control flow comes up into the
    main graph and is handled on a later call, once its own condition has been folded."""
    g = proto.graph
    constants = {t.name: t for t in g.initializer}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    taken = all_names(g)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    changed = False
    for index, node in enumerate(g.node):
        prefix = node.name or f"{node.op_type}_{index}"
        if _is_control_flow(node) and node.op_type == "If" and node.input[0] in constants:
            cond = bool(numpy_helper.to_array(constants[node.input[0]]).reshape(-1)[0])
            branch = _subgraph(node, "then_branch" if cond else "else_branch")
            new_nodes, new_inits, outs = inline_subgraph(branch, {}, f"{prefix}/", taken)
            nodes += new_nodes + _identities(outs, node.output, prefix, taken)
            initializers += new_inits
            changed = True
        elif _is_control_flow(node) and node.op_type == "Loop" and isinstance(
                count := _loop_iterations(node, g, constants), int):
            new_nodes, new_inits = _unroll(node, count, prefix, taken, opset)
            nodes += new_nodes
            initializers += new_inits
            changed = True
        elif _is_control_flow(node) and node.op_type == "Scan" and _scan_problem(node, g, opset) is None:
            new_nodes, new_inits = _unroll_scan(node, _scan_length(node, g), prefix, taken, opset)
            nodes += new_nodes
            initializers += new_inits
            changed = True
        else:
            nodes.append(node)
    return with_nodes(proto, nodes, initializers) if changed else None


def select_between_branches(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """Replace every If whose condition is computed at run time, and whose branches give outputs of the
    same static shapes and types, by both branches and a Where per output choosing between them (both
    run: correct, since branches have no side effects, at the cost of the branch not taken). None if
    there was no such If. Shapes come from inference, which types the branches' outputs."""
    g = proto.graph
    constants = {t.name for t in g.initializer}
    taken = all_names(g)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    changed = False
    for index, node in enumerate(g.node):
        if not (_is_control_flow(node) and node.op_type == "If" and node.input[0] not in constants
                and _same_branch_types(node)):
            nodes.append(node)
            continue
        prefix = node.name or f"If_{index}"
        then_nodes, then_inits, then_outs = inline_subgraph(_subgraph(node, "then_branch"), {}, f"{prefix}/then/",
                                                            taken)
        else_nodes, else_inits, else_outs = inline_subgraph(_subgraph(node, "else_branch"), {}, f"{prefix}/else/",
                                                            taken)
        scalar_shape = fresh_name(f"{prefix}/scalar_shape", taken)
        cond = fresh_name(f"{prefix}/condition", taken)
        initializers += then_inits + else_inits + [numpy_helper.from_array(np.zeros(0, np.int64), scalar_shape)]
        nodes += then_nodes + else_nodes
        nodes.append(onnx.helper.make_node("Reshape", [node.input[0], scalar_shape], [cond], name=cond))
        for i, (a, b, out) in enumerate(zip(then_outs, else_outs, node.output)):
            if out:
                nodes.append(onnx.helper.make_node("Where", [cond, a, b], [out], name=fresh_name(f"{prefix}/select_{i}",
                                                                                              taken)))
        changed = True
    return with_nodes(proto, nodes, initializers) if changed else None


def with_nodes(proto: onnx.ModelProto, nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto]
               ) -> onnx.ModelProto:
    """The model with these nodes and more initializers; value_info is inferred again from the nodes."""
    result = onnx.ModelProto()
    result.CopyFrom(proto)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(initializers)
    del result.graph.value_info[:]
    return result


def _same_branch_types(node: onnx.NodeProto) -> bool:
    """Both branches' outputs have static shapes, equal pairwise, and equal element types."""
    outs = [_subgraph(node, branch).output for branch in ("then_branch", "else_branch")]
    if len(outs[0]) != len(outs[1]):
        return False
    for a, b in zip(*outs):
        ta, tb = a.type.tensor_type, b.type.tensor_type
        shapes = [tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim) if t.HasField("shape")
                  else None for t in (ta, tb)]
        if ta.elem_type != tb.elem_type or shapes[0] is None or shapes[0] != shapes[1] or -1 in shapes[0]:
            return False
    return True


def _subgraph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def all_names(g: onnx.GraphProto) -> set[str]:
    """Every tensor and node name used anywhere in the graph, subgraphs included (the nodes inlining makes
    are named fresh against both, so that a second round of inlining cannot repeat a node's name)."""
    names = {v.name for v in list(g.input) + list(g.output) + list(g.value_info)}
    names |= {t.name for t in g.initializer}
    for node in g.node:
        names |= set(node.input) | set(node.output) | {node.name}
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= all_names(sub)
    return names


def fresh_name(name: str, taken: set[str]) -> str:
    """`name`, or the first of name_1, name_2, ... not in `taken` (which then holds it)."""
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def inline_subgraph(sub: onnx.GraphProto, bindings: dict[str, str], prefix: str, taken: set[str]
                    ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]:
    """A subgraph's nodes and initializers with the names it defines renamed `<prefix><name>`;
    `bindings` maps its formal inputs to tensors of the main graph. Also returns what its outputs
    are called after renaming (a renamed local, a binding, or an outer-scope name)."""
    rename = dict(bindings)
    for name in [t.name for t in sub.initializer] + [o for n in sub.node for o in n.output if o]:
        if name not in rename:
            rename[name] = fresh_name(prefix + name, taken)
    inits = []
    for t in sub.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename[t.name]
        inits.append(copy)
    nodes = []
    for n in sub.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        _rename_node(copy, rename)
        if copy.name:
            copy.name = prefix + copy.name
        nodes.append(copy)
    return nodes, inits, [rename.get(o.name, o.name) for o in sub.output]


def _rename_node(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Rename a node's inputs and outputs, and the outer-scope names its own subgraphs read (ONNX
    names are unique across scopes, so a renamed name is never one a nested graph defines)."""
    node.input[:] = [rename.get(i, i) for i in node.input]
    node.output[:] = [rename.get(o, o) for o in node.output]
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            for inner in sub.node:
                _rename_node(inner, rename)
            for out in sub.output:
                out.name = rename.get(out.name, out.name)


def _identities(sources: Iterable[str], targets: Iterable[str], prefix: str, taken: set[str]
                ) -> list[onnx.NodeProto]:
    """Identity nodes giving a subgraph's outputs the names the control-flow node's outputs had."""
    return [onnx.helper.make_node("Identity", [src], [dst], name=fresh_name(f"{prefix}/output_{i}", taken))
            for i, (src, dst) in enumerate(zip(sources, targets)) if dst]


def _scalar(constants: dict[str, onnx.TensorProto], name: str) -> np.ndarray | None:
    if name not in constants:
        return None
    array = numpy_helper.to_array(constants[name])
    return array.reshape(-1)[0] if array.size == 1 else None


def _loop_iterations(node: onnx.NodeProto, g: onnx.GraphProto, constants: dict[str, onnx.TensorProto]) -> int | str:
    """How many times a Loop runs, or why that is not known at compile time. A constant trip count and
    start condition say it. Where either is computed at run time, a scan output's static (declared)
    length says it, as the model's interface: a run-time value that contradicts it is the model's error,
    and is not read (ONNX's Range body counts its steps so). Either way the body's condition output must
    be its condition input (or an Identity of it) or true: a body that may stop early is refused."""
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if not trip:
        return "has no trip count (it runs until a condition computed at run time turns false)"
    count, start = _scalar(constants, trip), _scalar(constants, cond) if cond else np.array(True)
    if count is None or start is None:
        count = _scan_output_length(node, g)
        if count is None:
            return (f"its trip count '{trip}' is computed at run time" if _scalar(constants, trip) is None
                    else f"its start condition '{cond}' is computed at run time")
    elif not bool(start):
        return 0    # unrolled to Identity of the initial values (if no scan outputs)
    body = _subgraph(node, "body")
    cond_out = body.output[0].name
    if not _passes_condition_on(body, cond_out) and not _body_constant_true(body, cond_out):
        return f"its body computes the condition '{cond_out}' at run time (it may stop early)"
    if int(count) > MAX_UNROLL:
        return f"its trip count {int(count)} is more than the {MAX_UNROLL} iterations aot unrolls"
    if int(count) <= 0 and len(body.output) > len(node.input) - 1:
        return "it runs zero times but has scan outputs (empty tensors)"
    return max(int(count), 0)


def _scan_output_length(node: onnx.NodeProto, g: onnx.GraphProto) -> int | None:
    """The length of the Loop's first scan output whose shape is known (each is one value per iteration)."""
    infos = {vi.name: vi for vi in list(g.value_info) + list(g.output) if vi.type.HasField("tensor_type")}
    for out in node.output[len(node.input) - 2:]:
        dims = infos[out].type.tensor_type.shape.dim if out in infos else ()
        if dims and dims[0].HasField("dim_value"):
            return dims[0].dim_value
    return None


def _passes_condition_on(body: onnx.GraphProto, name: str) -> bool:
    """The body's condition output is its condition input, directly or through an Identity."""
    cond_in = body.input[1].name
    return name == cond_in or any(n.op_type == "Identity" and list(n.output) == [name] and list(n.input) == [cond_in]
                                  for n in body.node)


def _body_constant_true(body: onnx.GraphProto, name: str) -> bool:
    for t in body.initializer:
        if t.name == name:
            return bool(numpy_helper.to_array(t).all())
    for n in body.node:
        if n.op_type == "Constant" and list(n.output) == [name]:
            value = next((a for a in n.attribute if a.name == "value"), None)
            return value is not None and bool(numpy_helper.to_array(value.t).all())
    return False


def _unroll(node: onnx.NodeProto, count: int, prefix: str, taken: set[str], opset: int
            ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The Loop's body `count` times: each iteration's carried values feed the next, and each scan
    output is the per-iteration values stacked along a new first axis (Unsqueeze + Concat)."""
    body = _subgraph(node, "body")
    carried = list(node.input[2:])
    n_carried = len(carried)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    scans: list[list[str]] = [[] for _ in body.output[1 + n_carried:]]
    true = fresh_name(f"{prefix}/true", taken)
    inits.append(numpy_helper.from_array(np.array(True), true))
    for i in range(count):
        iteration = fresh_name(f"{prefix}/{i}/iteration", taken)
        inits.append(numpy_helper.from_array(np.array(i, np.int64), iteration))
        bindings = {body.input[0].name: iteration, body.input[1].name: true}
        bindings.update({formal.name: actual for formal, actual in zip(body.input[2:], carried)})
        new_nodes, new_inits, outs = inline_subgraph(body, bindings, f"{prefix}/{i}/", taken)
        nodes += new_nodes
        inits += new_inits
        carried = outs[1:1 + n_carried]
        for j, name in enumerate(outs[1 + n_carried:]):
            scans[j].append(name)
    nodes += _identities(carried, node.output[:n_carried], prefix, taken)
    if scans and any(node.output[n_carried:]):
        axes = fresh_name(f"{prefix}/axes", taken)
        inits.append(numpy_helper.from_array(np.array([0], np.int64), axes))
    for j, (values, out) in enumerate(zip(scans, node.output[n_carried:])):
        if not out:
            continue
        stacked = []
        for i, value in enumerate(values):
            name = fresh_name(f"{prefix}/scan_{j}/{i}", taken)
            stacked.append(name)
            nodes.append(onnx.helper.make_node("Unsqueeze", [value, axes], [name], name=name) if opset >= 13
                         else onnx.helper.make_node("Unsqueeze", [value], [name], name=name, axes=[0]))
        nodes.append(onnx.helper.make_node("Concat", stacked, [out], name=fresh_name(f"{prefix}/scan_{j}", taken),
                                           axis=0))
    return nodes, inits


def _scan_length(node: onnx.NodeProto, g: onnx.GraphProto) -> int | None:
    """The number of iterations: the first scan input's size along its scan axis, if inference knows it."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    first = node.input[len(node.input) - attrs["num_scan_inputs"]]
    infos = {vi.name: vi for vi in list(g.value_info) + list(g.input)}
    if first not in infos or not infos[first].type.tensor_type.HasField("shape"):
        return None
    dims = infos[first].type.tensor_type.shape.dim
    axis = (list(attrs.get("scan_input_axes", [])) or [0])[0] % len(dims)
    return dims[axis].dim_value if dims[axis].HasField("dim_value") else None


def _scan_problem(node: onnx.NodeProto, g: onnx.GraphProto, opset: int) -> str | None:
    """Why a Scan cannot be unrolled yet (None if it can)."""
    if opset < 9:
        return "is a Scan of opset 8 (with a batch axis), which aot does not unroll"
    length = _scan_length(node, g)
    if length is None:
        return "scans a tensor whose length is not known at compile time"
    if length > MAX_UNROLL:
        return f"scans {length} steps, more than the {MAX_UNROLL} iterations aot unrolls"
    return None


def _unroll_scan(node: onnx.NodeProto, length: int, prefix: str, taken: set[str], opset: int
                 ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The Scan's body once per step: step t reads slice t of each scan input (from the end where its
    direction is 1), carries the states to the next step, and each scan output stacks the steps'
    values along its axis (in reverse where its direction is 1)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    body = attrs["body"]
    m = attrs["num_scan_inputs"]
    n_states = len(node.input) - m
    in_axes = list(attrs.get("scan_input_axes", [])) or [0] * m
    in_dirs = list(attrs.get("scan_input_directions", [])) or [0] * m
    k = len(body.output) - n_states
    out_axes = list(attrs.get("scan_output_axes", [])) or [0] * k
    out_dirs = list(attrs.get("scan_output_directions", [])) or [0] * k
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(hint: str, value) -> str:
        name = fresh_name(f"{prefix}/{hint}", taken)
        inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    states = list(node.input[:n_states])
    steps: list[list[str]] = [[] for _ in range(k)]
    for t in range(length):
        bindings = {formal.name: actual for formal, actual in zip(body.input[:n_states], states)}
        for j, (source, axis, direction) in enumerate(zip(node.input[n_states:], in_axes, in_dirs)):
            index = length - 1 - t if direction else t
            part, item = fresh_name(f"{prefix}/{t}/slice_{j}", taken), fresh_name(f"{prefix}/{t}/item_{j}", taken)
            if opset >= 10:
                nodes.append(onnx.helper.make_node("Slice", [source, const("start", [index]), const("end", [index + 1]),
                                                             const("axis", [axis])], [part], name=part))
            else:
                nodes.append(onnx.helper.make_node("Slice", [source], [part], name=part, starts=[index],
                                                   ends=[index + 1], axes=[axis]))
            nodes.append(axes_node("Squeeze", part, item, axis, opset, const))
            bindings[body.input[n_states + j].name] = item
        new_nodes, new_inits, outs = inline_subgraph(body, bindings, f"{prefix}/{t}/", taken)
        nodes += new_nodes
        inits += new_inits
        states = outs[:n_states]
        for j, name in enumerate(outs[n_states:]):
            steps[j].append(name)
    nodes += _identities(states, node.output[:n_states], prefix, taken)
    for j, (values, out) in enumerate(zip(steps, node.output[n_states:])):
        if not out:
            continue
        axis = out_axes[j]
        stacked = []
        for value in reversed(values) if out_dirs[j] else values:
            name = fresh_name(f"{prefix}/scan_{j}/step", taken)
            nodes.append(axes_node("Unsqueeze", value, name, axis, opset, const))
            stacked.append(name)
        nodes.append(onnx.helper.make_node("Concat", stacked, [out], name=fresh_name(f"{prefix}/scan_{j}", taken),
                                           axis=axis))
    return nodes, inits


def axes_node(op: str, source: str, out: str, axis: int, opset: int, const) -> onnx.NodeProto:
    """Squeeze or Unsqueeze of one axis, in the form of the model's opset (an input from 13 on)."""
    if opset >= 13:
        return onnx.helper.make_node(op, [source, const("axes", [axis])], [out], name=out)
    return onnx.helper.make_node(op, [source], [out], name=out, axes=[axis])


def refuse_control_flow(proto: onnx.ModelProto, label: str) -> None:
    """After folding, any If, Loop or Scan left decides at run time: say which node, why, and which
    input to freeze when the decision depends on graph inputs."""
    g = proto.graph
    constants = {t.name: t for t in g.initializer}
    for index, node in enumerate(g.node):
        if not _is_control_flow(node):
            continue
        name = node.name or f"{node.op_type}_{index}"
        if node.op_type == "If":
            why, depends = (f"chooses its branch at run time (its condition '{node.input[0]}' is not a constant) "
                            "between branches whose outputs differ in shape or type"), [node.input[0]]
        elif node.op_type == "Loop":
            why, depends = _loop_iterations(node, g, constants), [i for i in node.input[:2] if i]
        else:
            why = _scan_problem(node, g, next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                                              17)) or "cannot be unrolled"
            depends = []
        raise UnsupportedOpError(f"{label}: node '{name}' ({node.op_type}) {why}; aot compiles straight-line "
                                 f"code only{freeze_hint(g, depends)}")


def freeze_hint(g: onnx.GraphProto, names: list[str]) -> str:
    inputs = _input_ancestors(g, names)
    if not inputs:
        return ""
    options = " ".join(f"--freeze {i}=VALUE" for i in inputs)
    which = "input " + ", ".join(f"'{i}'" for i in inputs)
    return (f"; the decision depends on {which}: fix it at compile time with {options} "
            f"(freeze={{'{inputs[0]}': VALUE}} in the Python API)")


def _input_ancestors(g: onnx.GraphProto, names: list[str]) -> list[str]:
    """The graph inputs (not initializers) that the named tensors are computed from, in graph order."""
    producers = {o: n for n in g.node for o in n.output}
    initializers = {t.name for t in g.initializer}
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in seen or name in initializers:
            continue
        seen.add(name)
        if name in producers:
            stack.extend(i for i in producers[name].input if i)
    return [vi.name for vi in g.input if vi.name in seen and vi.name not in initializers]
