"""Per-op lowering from graph nodes to kernel IR, and per-op cost (MACs) for the report.

Each module registers `LOWERINGS[op] = fn(ctx, node, name) -> Kernel`. A kernel's parameters are the
node's computed (non-constant) inputs in order, then its outputs; constants become read-only data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.ir import Graph, Node
from aot.kernel.ir import Buffer, Kernel
from aot.knobs import Knobs
from aot.target import Target

DTYPES = {"float32": "f32", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8"}


@dataclass
class LowerContext:
    graph: Graph
    target: Target
    prefix: str
    knobs: Knobs
    _consts: int = 0

    def const(self, array: np.ndarray, hint: str = "w") -> Buffer:
        """A read-only array with a name unique in the model's object file."""
        array = np.ascontiguousarray(array)
        self._consts += 1
        dtype = DTYPES[str(array.dtype)]
        return Buffer(f"{self.prefix}_{hint}{self._consts}", dtype, int(array.size), array)

    def io(self, node: Node) -> tuple[list[Buffer | None], list[Buffer], tuple[Buffer, ...]]:
        """Buffers for a node's inputs (constants embedded, absent inputs None) and outputs, plus the params."""
        ins: list[Buffer | None] = []
        params: list[Buffer] = []
        for i, name in enumerate(node.inputs):
            if not name:
                ins.append(None)
            elif name in self.graph.constants:
                ins.append(self.const(self.graph.constants[name].astype(np.float32), "c"))
            else:
                value = self.graph.values[name]
                buf = Buffer(f"in{i}", DTYPES[value.dtype], value.size)
                ins.append(buf)
                params.append(buf)
        outs = [Buffer(f"out{j}", DTYPES[self.graph.values[name].dtype], self.graph.values[name].size)
                for j, name in enumerate(node.outputs)]
        return ins, outs, tuple(params + outs)


Lowering = Callable[[LowerContext, Node, str], Kernel]
LOWERINGS: dict[str, Lowering] = {}
MACS: dict[str, Callable[[Graph, Node], int]] = {}
VIEWS = {"Reshape"}     # ops that move no data: the planner aliases output to input


def register(*ops: str, macs: Callable[[Graph, Node], int] | None = None):
    def wrap(fn: Lowering) -> Lowering:
        for op in ops:
            LOWERINGS[op] = fn
            if macs is not None:
                MACS[op] = macs
        return fn
    return wrap


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    fn = LOWERINGS.get(node.op)
    if fn is None:
        raise UnsupportedOpError(f"node '{node.name}': no kernel for op {node.op}")
    return fn(ctx, node, name)


def macs(graph: Graph, node: Node) -> int:
    fn = MACS.get(node.op)
    return int(fn(graph, node)) if fn else 0


# Importing the op modules fills the tables.
from aot.ops import conv, elementwise, matmul, movement, pool, reduce, softmax  # noqa: E402,F401
