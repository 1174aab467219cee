"""Sequences whose length and positions are known at compile time, made into plain tensor nodes.

An ONNX sequence is a list of tensors built and read at run time (SequenceConstruct, SequenceInsert,
SplitToSequence, SequenceAt, ConcatFromSequence, ...); exporters write them for Python lists (a
`torch.split` whose pieces are concatenated again, a list appended to in a loop). aot compiles
tensors only, but where every length and position is a constant, as after a Loop is unrolled, the
sequence is only bookkeeping: this pass follows each sequence as the list of tensor names it holds,
in node order, and replaces every read by what it reads (SequenceAt by that element, SequenceLength
by a constant, ConcatFromSequence by a Concat of the elements, SplitToSequence by a Split). A
SequenceAt at a position computed at run time becomes a Gather from the stacked elements when they
all have one shape. Whatever still reads a sequence after this (a position computed at run time, a
sequence the model takes or returns) is refused by `refuse_sequences`, naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from aot.errors import ModelError, UnsupportedOpError
from aot.frontend import control_flow
from aot.frontend.control_flow import axes_node, fresh_name

SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
                          "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap"})


def has_sequences(proto: onnx.ModelProto) -> bool:
    return any(_is_sequence_op(n) for n in proto.graph.node)


def _is_sequence_op(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in SEQUENCE_OPS


class _Lowering:
    """One pass over the graph in node order; `seqs` holds what each sequence known so far contains:
    its elements' tensor names, or only its length (a SplitToSequence at run-time split points)."""

    def __init__(self, proto: onnx.ModelProto, label: str):
        g = proto.graph
        self.label = label
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.constants = {t.name: t for t in g.initializer}
        self.types = _tensor_types(proto)
        self.taken = control_flow.all_names(g)
        self.seqs: dict[str, list[str] | int] = {}
        self.producer: dict[str, int] = {}        # sequence name -> index of the node it came from
        self.initializers: list[onnx.TensorProto] = []

    def const(self, hint: str, value) -> str:
        name = fresh_name(hint, self.taken)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    def scalar(self, name: str) -> int | None:
        """The constant integer a position input holds, None if it is computed at run time."""
        if name not in self.constants:
            return None
        return int(numpy_helper.to_array(self.constants[name]).reshape(-1)[0])

    def where(self, node: onnx.NodeProto, index: int) -> str:
        return _where(self.label, node, index)

    def lower(self, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
        """The nodes replacing `node`, or None if it stays as it is (its sequences unknown, or a
        position computed at run time)."""
        op, ins = node.op_type, list(node.input)
        if node.op_type == "Identity" and ins[0] in self.seqs:
            self._define(node.output[0], self.seqs[ins[0]], index)
            return []
        if not _is_sequence_op(node):
            return None
        elements = self.seqs.get(ins[0]) if ins else None
        prefix = node.name or f"{op}_{index}"
        if op == "SequenceEmpty":
            self._define(node.output[0], [], index)
            return []
        if op == "SequenceConstruct":
            self._define(node.output[0], ins, index)
            return []
        if op == "SplitToSequence":
            return self._split(node, index, prefix)
        if elements is None:
            return None
        if op == "SequenceLength":
            length = elements if isinstance(elements, int) else len(elements)
            self.initializers.append(numpy_helper.from_array(np.array(length, np.int64), node.output[0]))
            return []
        if isinstance(elements, int):
            return None         # only the length is known
        if op == "SequenceInsert":
            pos = self.scalar(ins[2]) if len(ins) > 2 and ins[2] else len(elements)
            if pos is None:
                return None
            if not -len(elements) <= pos <= len(elements):
                raise ModelError(f"{self.where(node, index)}: inserts at position {pos} into a sequence of "
                                 f"{len(elements)} tensors (valid: {-len(elements)} to {len(elements)})")
            pos += len(elements) if pos < 0 else 0
            self._define(node.output[0], elements[:pos] + [ins[1]] + elements[pos:], index)
            return []
        if op == "SequenceErase":
            pos = self.scalar(ins[1]) if len(ins) > 1 and ins[1] else -1
            if pos is None:
                return None
            self._check_position(node, index, pos, len(elements), "erases")
            pos += len(elements) if pos < 0 else 0
            self._define(node.output[0], elements[:pos] + elements[pos + 1:], index)
            return []
        if op == "SequenceAt":
            pos = self.scalar(ins[1])
            if pos is None:
                return self._gather(node, elements, prefix)
            self._check_position(node, index, pos, len(elements), "reads")
            return [onnx.helper.make_node("Identity", [elements[pos]], [node.output[0]],
                                          name=fresh_name(f"{prefix}/element", self.taken))]
        if op == "ConcatFromSequence":
            return self._concat(node, index, elements, prefix)
        if op == "SequenceMap":
            return self._map(node, index, prefix)
        return None

    def _define(self, name: str, elements: list[str] | int, index: int) -> None:
        self.seqs[name] = elements
        self.producer[name] = index

    def _check_position(self, node: onnx.NodeProto, index: int, pos: int, length: int, verb: str) -> None:
        if not -length <= pos < length:
            raise ModelError(f"{self.where(node, index)}: {verb} position {pos} of a sequence of {length} "
                             f"tensors" + (f" (valid: {-length} to {length - 1})" if length else ""))

    def _split(self, node: onnx.NodeProto, index: int, prefix: str) -> list[onnx.NodeProto] | None:
        ins, attrs = list(node.input), {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        shape = self.types.get(ins[0], (None, None))[1]
        split = ins[1] if len(ins) > 1 and ins[1] else ""
        if split and split not in self.constants:
            split_shape = self.types.get(split, (None, None))[1]
            if split_shape is not None and len(split_shape) == 1:      # the pieces' count is known, not their sizes
                self._define(node.output[0], split_shape[0], index)
                return []
            return None
        if shape is None:
            return None
        axis = attrs.get("axis", 0)
        if not -len(shape) <= axis < len(shape):
            raise ModelError(f"{self.where(node, index)}: axis {axis} is out of range for its "
                             f"{len(shape)}-d input '{ins[0]}'")
        axis += len(shape) if axis < 0 else 0
        size = shape[axis]
        if not split:
            sizes = [1] * size
        else:
            given = numpy_helper.to_array(self.constants[split]).astype(np.int64)
            if given.ndim == 0:
                chunk = int(given)
                if chunk <= 0:
                    raise ModelError(f"{self.where(node, index)}: split {chunk} is not a positive length")
                sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
            else:
                sizes = [int(s) for s in given]
                if sum(sizes) != size or any(s < 0 for s in sizes):
                    raise ModelError(f"{self.where(node, index)}: split lengths {sizes} do not sum to the "
                                     f"{size} of axis {axis} of '{ins[0]}'")
        pieces = [fresh_name(f"{prefix}/piece_{i}", self.taken) for i in range(len(sizes))]
        nodes = []
        if len(sizes) == 1:
            nodes.append(onnx.helper.make_node("Identity", [ins[0]], pieces, name=pieces[0]))
        elif self.opset >= 13:
            nodes.append(onnx.helper.make_node("Split", [ins[0], self.const(f"{prefix}/sizes", sizes)], pieces,
                                               name=fresh_name(f"{prefix}/split", self.taken), axis=axis))
        else:
            nodes.append(onnx.helper.make_node("Split", [ins[0]], pieces, split=sizes, axis=axis,
                                               name=fresh_name(f"{prefix}/split", self.taken)))
        if not split and attrs.get("keepdims", 1) == 0:
            squeezed = [fresh_name(f"{p}/squeezed", self.taken) for p in pieces]
            nodes += [axes_node("Squeeze", p, s, axis, self.opset, self._const_for(prefix))
                      for p, s in zip(pieces, squeezed)]
            pieces = squeezed
        self._define(node.output[0], pieces, index)
        return nodes

    def _const_for(self, prefix: str):
        return lambda hint, value: self.const(f"{prefix}/{hint}", value)

    def _gather(self, node: onnx.NodeProto, elements: list[str], prefix: str) -> list[onnx.NodeProto] | None:
        """SequenceAt at a run-time position: the elements stacked, and a Gather of the one asked for.
        Only when they share one static shape and type (else the result's shape would vary)."""
        types = {self.types.get(e) for e in elements}
        if not elements or len(types) != 1 or None in types or next(iter(types))[1] is None:
            return None
        stacked = []
        nodes = []
        for i, element in enumerate(elements):
            name = fresh_name(f"{prefix}/stacked_{i}", self.taken)
            nodes.append(axes_node("Unsqueeze", element, name, 0, self.opset, self._const_for(prefix)))
            stacked.append(name)
        table = fresh_name(f"{prefix}/elements", self.taken)
        nodes.append(onnx.helper.make_node("Concat", stacked, [table], name=table, axis=0))
        nodes.append(onnx.helper.make_node("Gather", [table, node.input[1]], [node.output[0]], axis=0,
                                           name=fresh_name(f"{prefix}/gather", self.taken)))
        return nodes

    def _concat(self, node: onnx.NodeProto, index: int, elements: list[str], prefix: str) -> list[onnx.NodeProto]:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axis, new_axis = attrs.get("axis", 0), attrs.get("new_axis", 0)
        if not elements:
            raise ModelError(f"{self.where(node, index)}: concatenates an empty sequence")
        if new_axis:
            # Unsqueeze and Concat both count a negative axis from the back of the result, as
            # ConcatFromSequence's new axis does.
            parts = [fresh_name(f"{prefix}/expanded_{i}", self.taken) for i in range(len(elements))]
            nodes = [axes_node("Unsqueeze", e, p, axis, self.opset, self._const_for(prefix))
                     for e, p in zip(elements, parts)]
        else:
            parts, nodes = elements, []
        nodes.append(onnx.helper.make_node("Concat", parts, [node.output[0]], axis=axis,
                                           name=fresh_name(f"{prefix}/concat", self.taken)))
        return nodes

    def _map(self, node: onnx.NodeProto, index: int, prefix: str) -> list[onnx.NodeProto] | None:
        """SequenceMap: its body once per element, the sequences among the other inputs read in step."""
        body = next(a.g for a in node.attribute if a.name == "body")
        ins = list(node.input)
        lengths = {len(s) for i in ins if isinstance(s := self.seqs.get(i), list)}
        if any(isinstance(self.seqs.get(i), int) or (i not in self.seqs and i not in self.types) for i in ins):
            return None     # a sequence of unknown contents, or only a length
        if len(lengths) != 1:
            raise ModelError(f"{self.where(node, index)}: maps over sequences of different lengths "
                             f"{sorted(lengths)}")
        count = lengths.pop()
        nodes, outputs = [], [[] for _ in node.output]
        for i in range(count):
            bindings = {formal.name: (self.seqs[actual][i] if actual in self.seqs else actual)
                        for formal, actual in zip(body.input, ins)}
            new_nodes, new_inits, outs = control_flow.inline_subgraph(body, bindings, f"{prefix}/{i}/", self.taken)
            nodes += new_nodes
            self.initializers += new_inits
            for k, out in enumerate(outs):
                if out in bindings.values() or out not in {o for n in new_nodes for o in n.output}:
                    copy = fresh_name(f"{prefix}/{i}/output_{k}", self.taken)   # an input passed through
                    nodes.append(onnx.helper.make_node("Identity", [out], [copy], name=copy))
                    out = copy
                outputs[k].append(out)
        for name, elements in zip(node.output, outputs):
            if name:
                self._define(name, elements, index)
        return nodes


def lower_static_sequences(proto: onnx.ModelProto, label: str) -> onnx.ModelProto | None:
    """The model with every sequence whose contents are known at compile time replaced by its tensors;
    None if nothing changed. A sequence some node left as it is still reads (or the graph returns) is
    built again from its elements where that node needs it, so the graph stays valid and the node is
    refused by name (`refuse_sequences`) if a later round cannot lower it either."""
    g = proto.graph
    if not has_sequences(proto):
        return None
    lowering = _Lowering(proto, label)
    emitted: list[list[onnx.NodeProto]] = []
    kept: list[bool] = []
    for index, node in enumerate(g.node):
        nodes = lowering.lower(node, index)
        kept.append(nodes is None)
        emitted.append([node] if nodes is None else nodes)
    # Sequences still read whole: by a node kept as it is, or as a graph output.
    wanted = {i for node, keep in zip(g.node, kept) if keep for i in node.input} | {o.name for o in g.output}
    for name in sorted(wanted & set(lowering.seqs), key=lambda n: lowering.producer[n]):
        elements, at = lowering.seqs[name], lowering.producer[name]
        original = g.node[at]
        if original.op_type in ("SequenceConstruct", "SequenceEmpty") and original.output[0] == name:
            emitted[at].append(original)
        elif isinstance(elements, int):
            emitted[at].append(original)       # a SplitToSequence at run-time split points, as it was
        elif elements:
            emitted[at].append(onnx.helper.make_node("SequenceConstruct", elements, [name],
                                                     name=fresh_name(f"{name}/rebuilt", lowering.taken)))
        else:
            emitted[at].append(onnx.helper.make_node("SequenceEmpty", [], [name],
                                                     name=fresh_name(f"{name}/rebuilt", lowering.taken)))
    nodes = [n for group in emitted for n in group]
    if [n.SerializeToString() for n in nodes] == [n.SerializeToString() for n in g.node]:
        return None
    return control_flow.with_nodes(proto, nodes, lowering.initializers)


def refuse_sequences(proto: onnx.ModelProto, label: str) -> None:
    """After lowering, any sequence left is built or read at run time: say which node or graph input or
    output, and why."""
    g = proto.graph
    for kind, values in (("input", g.input), ("output", g.output)):
        for vi in values:
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                taken_or_returned = "takes" if kind == "input" else "returns"
                raise UnsupportedOpError(
                    f"{label}: graph {kind} '{vi.name}' is a {vi.type.WhichOneof('value').replace('_type', '')}, "
                    f"not a tensor; a compiled model {taken_or_returned} tensors only")
    constants = {t.name for t in g.initializer}
    # A SequenceConstruct or SequenceEmpty is left only for a node that reads its sequence: name that first.
    builders = ("SequenceConstruct", "SequenceEmpty")
    for index, node in sorted(enumerate(g.node), key=lambda item: item[1].op_type in builders):
        if not _is_sequence_op(node):
            continue
        where = _where(label, node, index)
        at = _POSITION_INPUT.get(node.op_type)
        if at is not None and len(node.input) > at and node.input[at] and node.input[at] not in constants:
            raise UnsupportedOpError(
                f"{where} reads or changes its sequence at position '{node.input[at]}', computed at run time; "
                f"aot compiles sequences only where every length and position is known at compile time"
                f"{control_flow.freeze_hint(g, [node.input[at]])}")
        if node.op_type == "SplitToSequence" and len(node.input) > 1 and node.input[1] \
                and node.input[1] not in constants:
            raise UnsupportedOpError(
                f"{where} splits at lengths '{node.input[1]}' computed at run time; aot compiles sequences only "
                f"where every length and position is known at compile time"
                f"{control_flow.freeze_hint(g, [node.input[1]])}")
        raise UnsupportedOpError(
            f"{where} builds or reads a sequence whose contents aot cannot follow at compile time; aot compiles "
            f"sequences only where every length and position is known at compile time")


_POSITION_INPUT = {"SequenceInsert": 2, "SequenceErase": 1, "SequenceAt": 1}     # which input is the position


def _where(label: str, node: onnx.NodeProto, index: int) -> str:
    """The node as errors name it (an unnamed one as op_index)."""
    return f"{label}: node '{node.name or f'{node.op_type}_{index}'}' ({node.op_type})"


def _tensor_types(proto: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...] | None]]:
    """(element type, static shape or None) of every tensor ONNX's lenient shape inference types."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = proto
    g = inferred.graph
    types = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            t = vi.type.tensor_type
            static = t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim)
            types[vi.name] = (t.elem_type, tuple(d.dim_value for d in t.shape.dim) if static else None)
    for t in g.initializer:
        types[t.name] = (t.data_type, tuple(t.dims))
    return types
