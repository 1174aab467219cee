"""Store 4-D activations channels-last (NHWC) around the ops that want it.

Each op's registered layout says what it does (aot/registry.py): convolutions and pools read and
write NHWC; elementwise ops, Concat, Pad, Softmax, ... follow their inputs' layout (remapping their
axis attributes, permuting constants); a Transpose composes its permutation; everything else sees
NCHW. Conversions are inserted only where a value crosses between the two, and a conversion that
moves only size-1 axes becomes a view. Graph inputs and outputs keep the model's layout.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from aot.graph.ir import Graph, Node, Rewriter
from aot.registry import AxisAttr, Layout, op_def

TO_NHWC = (0, 2, 3, 1)      # physical axis i holds canonical axis TO_NHWC[i]
TO_NCHW = (0, 3, 1, 2)


def _permute(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


class _Layouts:
    """For each original 4-D value, the names holding it in NCHW and/or NHWC.

    A value keeps its name in the layout its producer writes, except a graph output produced in
    NHWC: that one is written as `<name>_nhwc` and `<name>` itself is its NCHW copy.
    """

    def __init__(self, rw: Rewriter, graph: Graph):
        self.rw = rw
        self.graph = graph
        self.nchw: dict[str, str] = {}
        self.nhwc: dict[str, str] = {}
        self.produced_nhwc: set[str] = set()

    def is_nhwc(self, name: str) -> bool:
        return name in self.produced_nhwc

    def get_nhwc(self, name: str) -> str:
        if name not in self.nhwc:
            shape = _permute(self.rw.values[self.nchw[name]].shape, TO_NHWC)
            out = self._channels_last(self.rw.like(name + "_nhwc", self.nchw[name], shape), name)
            self.rw.add("Transpose", name + "_to_nhwc", [self.nchw[name]], [out], perm=TO_NHWC)
            self.nhwc[name] = out
        return self.nhwc[name]

    def get_nchw(self, name: str) -> str:
        if name not in self.nchw:
            if name in self.graph.outputs:
                out = name
            else:
                out = self.rw.like(name + "_nchw", self.nhwc[name], self.graph.shape(name))
            self.rw.add("Transpose", name + "_to_nchw", [self.nhwc[name]], [out], perm=TO_NCHW)
            self.nchw[name] = out
        return self.nchw[name]

    def _channels_last(self, physical: str, name: str) -> str:
        """Mark `physical` as holding the model's value `name` channels-last (for `aot run --bisect`)."""
        self.rw.values[physical] = dataclasses.replace(self.rw.values[physical], channels_last_of=name)
        return physical

    def produce_nhwc(self, name: str) -> str:
        """Name for the NHWC result of a node computing `name`."""
        shape = _permute(self.graph.shape(name), TO_NHWC)
        if name in self.graph.outputs:
            physical = self._channels_last(self.rw.like(name + "_nhwc", name, shape), name)
        else:
            physical = name
            self.rw.values[name] = dataclasses.replace(self.graph.values[name], shape=shape, channels_last_of=name)
        self.nhwc[name] = physical
        self.produced_nhwc.add(name)
        return physical


def to_nhwc(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    layouts = _Layouts(rw, graph)
    for name in graph.inputs:
        layouts.nchw[name] = name
    for node in graph.nodes:
        four_d = [n for n in node.inputs if n and n not in graph.constants and len(graph.shape(n)) == 4]
        out_4d = len(graph.shape(node.outputs[0])) == 4
        layout = op_def(node.op).layout
        if layout is Layout.NHWC:
            inputs = (layouts.get_nhwc(node.inputs[0]),) + node.inputs[1:]
            out = layouts.produce_nhwc(node.outputs[0])
            rw.keep(node.with_(inputs=inputs, outputs=(out,), attrs={**node.attrs, "layout": "NHWC"}))
        elif layout is Layout.FOLLOW and out_4d and any(layouts.is_nhwc(n) for n in four_d):
            _follow(rw, layouts, node, graph)
        elif (layout is Layout.TRANSPOSE and four_d and tuple(node.attrs["perm"]) == TO_NCHW
              and not layouts.is_nhwc(node.inputs[0])):
            # x -> NCHW: x is that value channels-last already (a TFLite model's NHWC input, say)
            layouts.nhwc[node.outputs[0]] = layouts.nchw.get(node.inputs[0], node.inputs[0])
            layouts.produced_nhwc.add(node.outputs[0])
        elif layout is Layout.TRANSPOSE and four_d and layouts.is_nhwc(node.inputs[0]):
            perm = tuple(TO_NHWC.index(q) for q in node.attrs["perm"])
            rw.keep(node.with_(inputs=(layouts.nhwc[node.inputs[0]],), attrs={"perm": perm}))
            _produce_nchw(layouts, node)
        else:
            inputs = tuple(layouts.get_nchw(n) if layouts.is_nhwc(n) else (layouts.nchw.get(n, n) if n else n)
                           for n in node.inputs)
            rw.keep(node.with_(inputs=inputs))
            _produce_nchw(layouts, node)
    for name in graph.outputs:
        if layouts.is_nhwc(name):
            layouts.get_nchw(name)
    return _transposes_to_views(rw.finish())


def _produce_nchw(layouts: _Layouts, node: Node) -> None:
    for out in node.outputs:
        if len(layouts.rw.values[out].shape) == 4:
            layouts.nchw[out] = out


def _follow(rw: Rewriter, layouts: _Layouts, node: Node, graph: Graph) -> None:
    """An op that works in either layout, run in NHWC because an input already is."""
    out_rank = 4
    inputs = []
    for name in node.inputs:
        if name in graph.constants:
            array = graph.constants[name]
            if array.ndim:
                array = array.reshape((1,) * (out_rank - array.ndim) + array.shape) if array.ndim < out_rank else array
                array = np.ascontiguousarray(array.transpose(TO_NHWC))
            inputs.append(rw.constant(name + "_nhwc", array))
        elif len(graph.shape(name)) == 4:
            inputs.append(layouts.get_nhwc(name))
        else:   # a lower-rank computed operand broadcast against a 4-D one: view it as 4-D first
            shape = graph.shape(name)
            full = (1,) * (4 - len(shape)) + shape
            canon = rw.like(name + "_4d", name, full)
            rw.add("Reshape", name + "_as_4d", [name], [canon], shape=full)
            layouts.nchw[canon] = canon
            inputs.append(layouts.get_nhwc(canon))
    attrs = dict(node.attrs)
    for key, kind in op_def(node.op).axis_attrs.items():
        if key in attrs:
            attrs[key] = _remap(attrs[key], kind)
    out = layouts.produce_nhwc(node.outputs[0])
    rw.keep(node.with_(inputs=tuple(inputs), outputs=(out,), attrs=attrs))


def _remap(value, kind: AxisAttr):
    """An axis-valued attribute of a 4-D op, from NCHW axes to NHWC ones."""
    if kind is AxisAttr.AXIS:
        return TO_NHWC.index(value)
    if kind is AxisAttr.AXES:
        return tuple(sorted(TO_NHWC.index(a) for a in value))
    if kind is AxisAttr.PER_AXIS:
        return _permute(value, TO_NHWC)
    return _permute(value[:4], TO_NHWC) + _permute(value[4:], TO_NHWC)     # PADS: begins, then ends


def fold_transposes(graph: Graph) -> Graph:
    """A Transpose of the result of a one-operand elementwise kernel that can write its result transposed
    (a Quantize of the model's input, say) folds into it: one kernel, and no second copy of the tensor.
    Runs after fuse_epilogues, so an activation that can fuse into its producer does that instead."""
    users = graph.consumers()
    producers = graph.producers()
    folded: dict[str, Node] = {}        # Transpose name -> the producer writing its output
    for node in graph.nodes:
        if op_def(node.op).layout is not Layout.TRANSPOSE or node.inputs[0] in graph.outputs:
            continue
        source = producers.get(node.inputs[0])
        if (source is not None and op_def(source.op).writes_transposed and "perm" not in source.attrs
                and len(users.get(source.outputs[0], [])) == 1
                and sum(1 for name in source.inputs if name and name not in graph.constants) == 1):
            folded[node.name] = source.with_(outputs=node.outputs, attrs={**source.attrs, "perm": node.attrs["perm"]})
    if not folded:
        return graph
    absorbed = {producers[node.inputs[0]].name for node in graph.nodes if node.name in folded}
    return Rewriter(graph).rebuild(folded, absorbed)


def _transposes_to_views(graph: Graph) -> Graph:
    """A Transpose that keeps the order of all axes longer than 1 moves no data: make it a view."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        if op_def(node.op).layout is Layout.TRANSPOSE:
            shape = graph.shape(node.inputs[0])
            order = [axis for axis in node.attrs["perm"] if shape[axis] != 1]
            if order == sorted(order):
                rw.keep(Node("Reshape", node.name, node.inputs, node.outputs,
                             {"shape": graph.shape(node.outputs[0])}))
                continue
        rw.keep(node)
    return rw.finish()
