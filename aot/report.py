"""report.txt: what each node costs and where the bytes go."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot import ops
from aot.codegen import elf
from aot.errors import PlanError
from aot.graph.ir import Graph, Node
from aot.graph.node_quant import node_quant
from aot.kernel.ir import constants
from aot.plan import memory
from aot.program import Program, sharing_used
from aot.registry import Fusion, op_def, operand


def object_sections(obj: elf.Blob, weights_prefix: str) -> tuple[int, int]:
    """(code bytes, weight bytes) measured from the object file's sections."""
    code = weights = 0
    for name, flags, size in elf.sections(obj):
        if flags & elf.SHF_EXECINSTR:
            code += size
        elif name.startswith(weights_prefix) or name.startswith(".rodata"):
            weights += size
    return code, weights


@dataclass(frozen=True)
class Footprint:
    """What the model needs on the device: flash for code and weights, RAM for the workspace and the
    caller's input and output buffers, and for the weights when a memory region holds them (their
    initial values still come from flash)."""

    code: int
    weights: int
    workspace: int
    io: int
    weights_in_ram: bool = False

    @property
    def flash(self) -> int:
        return self.code + self.weights

    @property
    def ram(self) -> int:
        return self.workspace + self.io + (self.weights if self.weights_in_ram else 0)


def footprint(program: Program, obj: elf.Blob, weights_prefix: str) -> Footprint:
    code, weights = object_sections(obj, weights_prefix)
    graph = program.graph
    io = sum(graph.values[v].nbytes for v in graph.inputs + graph.outputs)
    return Footprint(code, weights, program.plan.size, io, any(p.weights for p in program.regions))


def check_fits(fp: Footprint, limits: dict, model: str, target_name: str) -> None:
    """Fail the build when the model needs more flash or RAM than the limits allow."""
    for kind, need in (("flash", fp.flash), ("ram", fp.ram)):
        limit = limits.get(kind)
        if limit is not None and need > limit:
            detail = (f"code {fp.code:,} + weights {fp.weights:,}" if kind == "flash"
                      else f"workspace {fp.workspace:,} + inputs/outputs {fp.io:,}"
                      + (f" + weights {fp.weights:,}" if fp.weights_in_ram else ""))
            raise PlanError(f"{model} does not fit {target_name}: it needs {need:,} bytes of {kind.upper()} "
                            f"({detail}), the limit is {limit:,}; raise it with --memory {kind}=SIZE")


def check_weights_fit(graph, limits: dict, model: str, target_name: str) -> None:
    """Before any kernel is compiled: the optimized graph's weights alone (packing only adds to them) over
    the flash limit cannot fit; say so at once, and what would."""
    limit = limits.get("flash")
    if limit is None:
        return
    read = {v for node in graph.nodes for v in node.inputs if v}
    weights = [a for name, a in graph.constants.items() if name in read]
    total = sum(a.nbytes for a in weights)
    if total <= limit:
        return
    floats = sum(a.nbytes for a in weights if a.dtype == np.float32)
    as_int8 = total - floats * 3 // 4
    hint = (f"int8 weights (aot quantize, or aot build --quantize DATA) would take about {as_int8:,}"
            f"{'' if as_int8 <= limit else ', over it still'}; " if floats else "")
    raise PlanError(f"{model} does not fit {target_name}: its weights alone take {total:,} bytes of FLASH, the "
                    f"limit is {limit:,}; {hint}raise the limit with --memory flash=SIZE, or build for a board "
                    f"with more (--board)")


def render(program: Program, fp: Footprint, header: str, limits: dict | None = None,
           obj: elf.Blob | None = None) -> str:
    """report.txt: the calls, each with its MACs, weight bytes, code bytes (from `obj`, the object: the kernel's
    function and the body it shares with others, where it is named after it) and the workspace bytes live
    while it runs; the totals (`fp`: footprint's); the workspace plan drawn."""
    graph = program.graph
    code_sizes = {name: size for name, (_, size) in elf.functions(obj).items()} if obj is not None else {}
    rows = [("#", "op", "node", "inputs -> output", "MACs", "weights", "code", "live ws", "out bytes", "where")]
    total_macs = 0
    counted: set[str] = set()
    for i, call in enumerate(program.calls):
        node = call.node
        macs = ops.macs(graph, node)
        total_macs += macs
        ins = ", ".join("x".join(map(str, graph.shape(v))) for v in node.inputs if v and v not in graph.constants)
        out = node.outputs[0]
        loc = program.locations[out]
        where = (f"{loc.region or 'ws'}+{loc.index + loc.offset}" if loc.kind == "workspace"
                 else f"{loc.kind}[{loc.index}]" + (f"+{loc.offset}" if loc.offset else ""))
        weights = [b for b in constants(call.kernel) if b.name not in counted]     # a shared array counts once
        counted.update(b.name for b in weights)
        name = call.kernel.name
        code = code_sizes.get(name, 0) + code_sizes.get(f"{name}.shared", 0)
        live = sum(b.size for b in program.buffers if b.first <= i <= b.last)
        rows.append((str(i), describe(graph, node), node.name, f"{ins} -> {'x'.join(map(str, graph.shape(out)))}",
                     f"{macs:,}", f"{sum(b.nbytes for b in weights):,}", f"{code:,}" if code_sizes else "-",
                     f"{live:,}", f"{graph.values[out].nbytes:,}", where))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [header, "", "weights: bytes of the arrays the kernel reads (each counted once); code: its function and "
             "the body it shares, named after it; live ws: workspace bytes live while it runs (before in-place "
             "sharing)", ""]
    for r in rows:
        lines.append("  ".join(cell.rjust(w) if c in (0, 4, 5, 6, 7, 8) else cell.ljust(w)
                               for c, (cell, w) in enumerate(zip(r, widths))).rstrip())
    code, weights = fp.code, fp.weights
    plan = program.plan
    ratio = plan.size / plan.lower_bound if plan.lower_bound else 1.0
    lines += ["", "Totals",
              f"  MACs              {total_macs:,}",
              f"  weights {_where_weights(program):<9} {weights:,} bytes",
              f"  code (text)       {code:,} bytes",
              f"  workspace         {plan.size:,} bytes ({plan.strategy}); lower bound without sharing "
              f"{plan.lower_bound:,} bytes; {ratio:.3f}x the bound{_sharing(program)}",
              *_region_lines(program),
              f"  order             {_order(program)}",
              *([f"  row bands         {program.bands.describe()}"] if program.bands else []),
              f"  inputs/outputs    {sum(graph.values[v].nbytes for v in graph.inputs):,} / "
              f"{sum(graph.values[v].nbytes for v in graph.outputs):,} bytes (caller's buffers)",
              f"  flash             {fp.flash:,} bytes (code + weights){_limit(limits, 'flash')}",
              f"  RAM               {fp.ram:,} bytes (workspace + inputs/outputs"
              f"{' + weights' if fp.weights_in_ram else ''}){_limit(limits, 'ram')}"]
    quantized = [c.node for c in program.calls if node_quant(graph.values, c.node)
                 and not op_def(c.node.op).moves_values]
    if quantized or any(c.node.op in ("Quantize", "Dequantize") for c in program.calls):
        in_float = [c.node for c in program.calls if not node_quant(graph.values, c.node)
                    and not op_def(c.node.op).moves_values and c.node.op not in ("Quantize", "Dequantize")
                    and graph.values[c.node.outputs[0]].dtype == "float32"]
        lines.append(f"  quantized         {len(quantized)} integer kernels; {len(in_float)} in float between "
                     "Dequantize and Quantize" + (": " + ", ".join(f"{n.op} {n.name}" for n in in_float)
                                                  if in_float else ""))
    if program.regions:
        for p in program.regions:
            lines += ["", *plan_picture(program, p.plan, f"region {p.region.name}")]
    else:
        lines += ["", *plan_picture(program, program.plan, "workspace")]
    return "\n".join(lines) + "\n"


def _region_lines(program: Program) -> list[str]:
    lines = []
    for p in program.regions:
        weights = f" + {p.weights:,} kept for weights" if p.weights else ""
        lines.append(f"    region {p.region.name:<10} {p.plan.size:,}{weights} of {p.region.size:,} bytes (rank "
                     f"{p.region.rank}, {_count(len(p.plan.offsets), 'buffer')}, {p.plan.strategy})")
    return lines


def _where_weights(program: Program) -> str:
    held = [p.region.name for p in program.regions if p.weights]
    return f"(in {held[0]})" if held else "(rodata)"


def _sharing(program: Program) -> str:
    """How many results share bytes with the input they replace."""
    used = [reuse for _, _, _, reuse in sharing_used(program)]
    if not used:
        return ""
    exact = sum(reuse.exact for reuse in used)
    return f"; {exact} tensors in place, {len(used) - exact} overlapping the input they replace"


def _order(program: Program) -> str:
    """Whether the kernels run in the graph's order or in one searched for a smaller workspace."""
    choice = program.order
    if choice.changed:
        graph_order = [n.name for n in program.graph.nodes if not (op_def(n.op).view or op_def(n.op).assembled)]
        moved = sum(call.node.name != name for call, name in zip(program.calls, graph_order))
        return (f"searched, {moved} of {len(program.calls)} kernels moved: workspace {choice.searched:,} bytes, "
                f"{choice.graph_order:,} in the graph's order")
    if choice.searched is not None:
        return (f"the graph's: the order searched for fewer live bytes needs {choice.searched:,} bytes "
                f"of workspace, this one {choice.graph_order:,}")
    if not choice.search_ran:
        return "the graph's (knob reorder = false)"
    return "the graph's: no order found with fewer live bytes"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def plan_picture(program: Program, plan: memory.Plan, what: str, columns: int = 64) -> list[str]:
    """A memory plan (the workspace's, or a region's) as text: one row per step, `what` left to right;
    each live buffer is drawn with its own letter where it sits."""
    buffers = [b for b in program.buffers if b.name in plan.offsets]
    if not buffers or plan.size == 0:
        return [f"Memory plan of the {what}: no buffers" if program.regions else "Memory plan: no workspace buffers"]
    scale = plan.size / columns
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    order = sorted(buffers, key=lambda b: (b.first, b.name))
    symbol = {b.name: letters[i % len(letters)] for i, b in enumerate(order)}
    out = [f"Memory plan: step x {what} offset (each column {scale:,.0f} bytes)",
           f"  {'step':>4} |{'0':<{columns // 2}}{plan.size:>{columns - columns // 2},}|"]
    picture = np.full((len(program.calls), columns), ord(" "), dtype=np.uint8)
    for b in buffers:                   # a buffer drawn later covers an earlier one where they share a column
        lo = int(plan.offsets[b.name] / scale)
        hi = max(lo + 1, int((plan.offsets[b.name] + b.size) / scale + 0.5))
        picture[b.first:b.last + 1, lo:hi] = ord(symbol[b.name])
    out += [f"  {step:>4} |{row.tobytes().decode()}|" for step, row in enumerate(picture)]
    out.append("  " + ", ".join(f"{symbol[b.name]}={b.name}" for b in order))
    return out


def _limit(limits: dict | None, kind: str) -> str:
    return f" of {limits[kind]:,} available" if limits and kind in limits else ""


def describe(graph: Graph, node: Node) -> str:
    """The node's op with what is fused into it: "Conv+bias+add+Relu", "Conv int8"."""
    if node_quant(graph.values, node):
        return node.op + " " + graph.values[node.outputs[0]].dtype
    parts = []
    if op_def(node.op).fusion is Fusion.MATRIX:
        if operand(node, "bias"):
            parts.append("bias")
        if operand(node, "residual"):
            parts.append("add")
    parts += [fn for fn, _ in node.attrs.get("acts", ())]
    return "+".join([node.op, *parts])
