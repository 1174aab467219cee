"""report.txt: what each node costs and where the bytes go."""

from __future__ import annotations

import llvmlite.binding as llvm

from aot import ops
from aot.program import Program


def object_sections(obj: bytes, weights_prefix: str) -> tuple[int, int]:
    """(code bytes, weight bytes) measured from the object file's sections."""
    code = weights = 0
    for section in llvm.ObjectFileRef.from_data(obj).sections():
        name = (section.name() or b"").decode()
        if section.is_text():
            code += section.size()
        elif name.startswith(weights_prefix) or name.startswith(".rodata"):
            weights += section.size()
    return code, weights


def render(program: Program, obj: bytes, weights_prefix: str, header: str) -> str:
    graph = program.graph
    rows = [("#", "op", "node", "inputs -> output", "MACs", "out bytes", "where")]
    total_macs = 0
    for i, call in enumerate(program.calls):
        node = call.node
        macs = ops.macs(graph, node)
        total_macs += macs
        ins = ", ".join("x".join(map(str, graph.shape(v))) for v in node.inputs if v and v not in graph.constants)
        out = node.outputs[0]
        loc = program.locations[out]
        where = f"ws+{loc.index}" if loc.kind == "workspace" else f"{loc.kind}[{loc.index}]"
        rows.append((str(i), node.op + _epilogue(node), node.name, f"{ins} -> {'x'.join(map(str, graph.shape(out)))}",
                     f"{macs:,}", f"{graph.values[out].nbytes:,}", where))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [header, ""]
    for r in rows:
        lines.append("  ".join(cell.rjust(w) if c in (0, 4, 5) else cell.ljust(w)
                               for c, (cell, w) in enumerate(zip(r, widths))).rstrip())
    code, weights = object_sections(obj, weights_prefix)
    plan = program.plan
    ratio = plan.size / plan.lower_bound if plan.lower_bound else 1.0
    lines += ["", "Totals",
              f"  MACs              {total_macs:,}",
              f"  weights (rodata)  {weights:,} bytes",
              f"  code (text)       {code:,} bytes",
              f"  workspace         {plan.size:,} bytes ({plan.strategy}); lower bound {plan.lower_bound:,} "
              f"bytes; {ratio:.3f}x the bound",
              f"  inputs/outputs    {sum(graph.values[v].nbytes for v in graph.inputs):,} / "
              f"{sum(graph.values[v].nbytes for v in graph.outputs):,} bytes (caller's buffers)"]
    lines += ["", *plan_picture(program)]
    return "\n".join(lines) + "\n"


def plan_picture(program: Program, columns: int = 64) -> list[str]:
    """The memory plan as text: one row per step, the workspace left to right; each live buffer is
    drawn with its own letter where it sits."""
    plan = program.plan
    if not program.buffers or plan.size == 0:
        return ["Memory plan: no workspace buffers"]
    scale = plan.size / columns
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    order = sorted(program.buffers, key=lambda b: (b.first, b.name))
    symbol = {b.name: letters[i % len(letters)] for i, b in enumerate(order)}
    out = [f"Memory plan: step x workspace offset (each column {scale:,.0f} bytes)",
           f"  {'step':>4} |{'0':<{columns // 2}}{plan.size:>{columns - columns // 2},}|"]
    for step in range(len(program.calls)):
        row = [" "] * columns
        for b in program.buffers:
            if b.first <= step <= b.last:
                lo = int(plan.offsets[b.name] / scale)
                hi = max(lo + 1, int((plan.offsets[b.name] + b.size) / scale + 0.5))
                for c in range(lo, min(hi, columns)):
                    row[c] = symbol[b.name]
        out.append(f"  {step:>4} |{''.join(row)}|")
    out.append("  " + ", ".join(f"{symbol[b.name]}={b.name}" for b in order))
    return out


def _epilogue(node) -> str:
    parts = []
    if node.op in ("Conv", "Gemm") and node.inputs[2]:
        parts.append("bias")
    if len(node.inputs) > 3 and node.op in ("Conv", "Gemm"):
        parts.append("add")
    parts += [fn for fn, _ in node.attrs.get("acts", ())]
    return "+" + "+".join(parts) if parts else ""
