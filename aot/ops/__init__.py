"""Ops: each module defines its ops in the registry (registry.py): the ONNX rewrite rule, the layout,
fusion and quantization facts, and the lowering to kernel IR.

A kernel's parameters are the node's computed (non-constant) inputs in order, then its outputs;
constants become read-only data.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.ir import Graph, Node
from aot.kernel.ir import Block, Buffer, Builder, Cast, Kernel, Reuse, const, maximum, minimum
from aot.knobs import Knobs
from aot.registry import op_def
from aot.schedule import Chosen, Schedule, choose
from aot.target import Target

# Graph element types -> kernel IR element types (a bool is one byte, 0 or 1).
DTYPES = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
          "uint8": "u8", "bool": "u8"}


@dataclass
class LowerContext:
    graph: Graph
    target: Target
    prefix: str
    knobs: Knobs
    backward: frozenset[str] = frozenset()     # nodes whose kernels run their rows last to first
    whole: frozenset[str] = frozenset()        # nodes whose kernels may compute their first pixels whole
    _consts: int = 0

    def const(self, array: np.ndarray, hint: str = "w") -> Buffer:
        """A read-only array with a name unique in the model's object file."""
        array = np.ascontiguousarray(array)
        self._consts += 1
        dtype = DTYPES[str(array.dtype)]
        return Buffer(f"{self.prefix}_{hint}{self._consts}", dtype, int(array.size), array)

    def schedule(self, node: Node, workload: str, default: Schedule,
                 rules: Callable[[Schedule], Schedule] = lambda s: s) -> Chosen:
        """The schedule to emit `node`'s kernel for (see aot/schedule.py): `default` from the knobs, with
        any override for the node or its workload laid over it, and `rules` filling in the rest."""
        return choose(self.knobs.schedules, self.target, node.name, workload, default, rules)

    def io(self, node: Node) -> tuple[list[Buffer | None], list[Buffer], tuple[Buffer, ...]]:
        """Buffers for a node's inputs (constants embedded, absent inputs None) and outputs, plus the params."""
        ins: list[Buffer | None] = []
        params: list[Buffer] = []
        for i, name in enumerate(node.inputs):
            if not name:
                ins.append(None)
            elif name in self.graph.constants:
                ins.append(self.const(kernel_array(self.graph.constants[name]), "c"))
            else:
                value = self.graph.values[name]
                buf = Buffer(f"in{i}", DTYPES[value.dtype], value.size)
                ins.append(buf)
                params.append(buf)
        outs = [Buffer(f"out{j}", DTYPES[self.graph.values[name].dtype], self.graph.values[name].size)
                for j, name in enumerate(node.outputs)]
        return ins, outs, tuple(params + outs)


def lower(ctx: LowerContext, node: Node, name: str) -> Kernel:
    definition = op_def(node.op)
    if definition.lower is None:
        raise UnsupportedOpError(f"node '{node.name}': no kernel for op {node.op}")
    kernel = definition.lower(ctx, node, name)
    if node.name in PERTURB:
        kernel = _perturbed(kernel, len(node.outputs), PERTURB[node.name])
    if definition.elementwise and "perm" not in node.attrs:     # a transposed result moves elements
        out = ctx.graph.values[node.outputs[0]]
        same = tuple(Reuse(i, exact=True) for i, name in enumerate(node.inputs)
                     if name and name not in ctx.graph.constants and ctx.graph.values[name].shape == out.shape
                     and np.dtype(ctx.graph.values[name].dtype).itemsize == np.dtype(out.dtype).itemsize)
        kernel = dataclasses.replace(kernel, reuse=kernel.reuse + same)
    return kernel


# TEST ONLY: {node name: amount}. The kernel of a node named here adds `amount` to every element of its
# first output after computing it (integer outputs: `amount` steps, saturated), so that tests can check
# that `aot run --bisect` (aot/bisect.py) names the node where the results go wrong. No option or
# file sets it; tests set it with tests/test_bisect.py's `perturbed` and clear it after the build.
PERTURB: dict[str, float] = {}

_INT_RANGES = {"i8": (-128, 127), "u8": (0, 255), "i16": (-(2**15), 2**15 - 1)}


def _perturbed(kernel: Kernel, outputs: int, amount: float) -> Kernel:
    """The kernel, then a loop adding `amount` to each element of its first output (see PERTURB)."""
    out = kernel.params[len(kernel.params) - outputs]
    b = Builder()
    with b.loop("perturb", 0, out.size) as i:
        if out.dtype == "f32":
            b.store(out, i, out[i] + const(amount, "f32"))
        else:
            kind = "i64" if out.dtype == "i64" else "i32"
            wide = Cast(out[i], kind) + const(round(amount), kind)
            if out.dtype in _INT_RANGES:
                lo, hi = _INT_RANGES[out.dtype]
                wide = minimum(maximum(wide, const(lo, kind)), const(hi, kind))
            b.store(out, i, Cast(wide, out.dtype))
    return dataclasses.replace(kernel, body=Block(kernel.body.stmts + b.block().stmts))


def macs(graph: Graph, node: Node) -> int:
    fn = op_def(node.op).macs
    return int(fn(graph, node)) if fn else 0


def kernel_array(array: np.ndarray) -> np.ndarray:
    """A constant in a type kernels read: float16 as float32, bools as bytes."""
    if array.dtype.kind == "f" and array.dtype != np.float64:
        return array.astype(np.float32)
    return array.astype(np.uint8) if array.dtype == np.bool_ else array


def _import_op_modules() -> None:
    """Import every module of this package (sorted, so registration order is deterministic): each one
    fills the registry with its ops, so adding an op family is adding a module."""
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{module}")


_import_op_modules()
