"""The graph IR: values with static shapes, nodes that name their inputs and outputs, numpy constants.

A Graph is treated as immutable: passes are functions Graph -> Graph that build new node tuples and
dictionaries (see `Rewriter`) instead of editing in place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aot.graph.quant import QuantParams


@dataclass(frozen=True)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    quant: QuantParams | None = None    # how an integer tensor encodes reals (set by lower_quantized)
    # the model's 4-D value this one holds channels-last (set by to_nhwc: shape (N, H, W, C) of the
    # model's (N, C, H, W)); "" for a value in the model's own layout
    channels_last_of: str = ""

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Node:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class State:
    """A tensor the model keeps between runs (a TFLite variable: an LSTM's hidden and cell state). Until the
    program is built, `read` is a graph input holding its value at the start of a run and `written` a graph
    output holding the value the run leaves; both are the model's own, not the caller's. `fill` is its
    value (the code, for an integer tensor) after a reset."""

    read: str
    written: str
    fill: float = 0.0


@dataclass(frozen=True)
class Graph:
    name: str
    nodes: tuple[Node, ...]
    values: dict[str, Value]
    constants: dict[str, np.ndarray]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int = 17
    state: tuple[State, ...] = ()

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def shape(self, name: str) -> tuple[int, ...]:
        return self.values[name].shape

    def replace(self, **changes: Any) -> Graph:
        return dataclasses.replace(self, **changes)

    def dump(self) -> str:
        """A readable listing: one line per node, `outputs = op[attrs](inputs)` with shapes."""

        def fmt(name: str) -> str:
            if not name:
                return "-"
            if name in self.constants:
                return f"%{name}<const {'x'.join(map(str, self.constants[name].shape)) or 'scalar'}>"
            value = self.values[name]
            quant = f" {value.dtype} {value.quant!r}" if value.quant is not None else ""
            return f"%{name}<{'x'.join(map(str, value.shape)) or 'scalar'}{quant}>"

        lines = [f"graph {self.name}({', '.join(fmt(n) for n in self.inputs)})"]
        for node in self.nodes:
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(node.attrs.items()))
            outs = ", ".join(fmt(n) for n in node.outputs)
            ins = ", ".join(fmt(n) for n in node.inputs)
            lines.append(f"  {outs} = {node.op}[{attrs}]({ins})  # {node.name}")
        lines.append(f"  return {', '.join(fmt(n) for n in self.outputs)}")
        return "\n".join(lines)


def _fmt_attr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class Rewriter:
    """Collects the pieces of a new graph while a pass walks the old one.

    Holds fresh-name generation so a pass never reuses a name, and keeps values and constants in
    insertion order so the output is deterministic.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self.values = dict(graph.values)
        self.constants = dict(graph.constants)
        self._taken = set(graph.values)       # value names
        self._node_names: set[str] = set()    # names of the new graph's nodes
        self._suffix: dict[tuple[int, str], int] = {}   # (id of a name set, hint) -> next suffix to try

    def fresh(self, hint: str, taken: set[str] | None = None) -> str:
        """`hint`, or the first of hint_1, hint_2, ... not taken. Names are never released, so the search
        for a hint resumes where it last stopped (10,000 nodes asking for one hint stay linear)."""
        taken = self._taken if taken is None else taken
        name, i = hint, self._suffix.get((id(taken), hint), 1)
        while name in taken:
            name, i = f"{hint}_{i}", i + 1
        self._suffix[(id(taken), hint)] = i
        taken.add(name)
        return name

    def value(self, hint: str, shape: tuple[int, ...], dtype: str = "float32", quant: QuantParams | None = None) -> str:
        name = self.fresh(hint)
        self.values[name] = Value(name, tuple(int(d) for d in shape), dtype, quant)
        return name

    def like(self, hint: str, src: str, shape: tuple[int, ...] | None = None) -> str:
        """A new value with the dtype and quantization of `src` (and its shape unless given)."""
        value = self.values[src]
        return self.value(hint, value.shape if shape is None else shape, value.dtype, value.quant)

    def constant(self, hint: str, array: np.ndarray, quant: QuantParams | None = None) -> str:
        array = np.ascontiguousarray(array)
        name = self.value(hint, array.shape, str(array.dtype), quant)
        self.constants[name] = array
        return name

    def add(self, op: str, name: str, inputs: tuple[str, ...] | list[str], outputs: tuple[str, ...] | list[str],
            **attrs: Any) -> Node:
        node = Node(op, self.fresh(name, self._node_names), tuple(inputs), tuple(outputs), attrs)
        self.nodes.append(node)
        return node

    def keep(self, node: Node) -> None:
        """Add a node as it is (a rewritten node keeps its name, so reports match the model)."""
        self._node_names.add(node.name)
        self.nodes.append(node)

    def rebuild(self, replacement: dict[str, Node], dropped: set[str]) -> Graph:
        """The old graph's nodes in order, those named in `replacement` replaced, those in `dropped` left out."""
        for node in self.graph.nodes:
            if node.name in replacement:
                self.keep(replacement[node.name])
            elif node.name not in dropped:
                self.keep(node)
        return self.finish()

    def finish(self, outputs: tuple[str, ...] | None = None) -> Graph:
        used = {n for node in self.nodes for n in node.inputs + node.outputs}
        used |= set(self.graph.inputs) | set(outputs or self.graph.outputs)
        return self.graph.replace(
            nodes=tuple(self.nodes),
            values={k: v for k, v in self.values.items() if k in used},
            constants={k: v for k, v in self.constants.items() if k in used},
            outputs=outputs or self.graph.outputs,
        )
