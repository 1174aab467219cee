"""The C wrapper: `NAME.h` (the API a firmware engineer reads) and `NAME.c` (the call sequence),
rendered from jinja2 templates."""

from __future__ import annotations

import re
from dataclasses import dataclass

from aot.codegen import TEMPLATES, library
from aot.kernel.ir import uses_tiles
from aot.program import Location, Program
from aot.target import C_KEYWORDS, Target

_CTYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
           "int32": "int32_t", "int64": "int64_t", "bool": "uint8_t"}     # a bool is one byte, 0 or 1


def c_identifier(text: str) -> str:
    ident = re.sub(r"[^0-9A-Za-z_]", "_", text) or "_"
    if ident[0].isdigit():
        ident = "_" + ident
    return ident + "_" if ident in C_KEYWORDS else ident


def unique_identifiers(names: list[str]) -> list[str]:
    """C identifiers for names, made distinct (case-insensitively, since macros are upper case)."""
    out, taken = [], set()
    for name in names:
        base = ident = c_identifier(name)
        i = 1
        while ident.upper() in taken:
            ident, i = f"{base}_{i}", i + 1
        taken.add(ident.upper())
        out.append(ident)
    return out


@dataclass(frozen=True)
class Tensor:
    role: str           # "input" or "output"
    index: int
    onnx_name: str
    field: str          # struct field
    macro: str          # INPUT_<FIELD> / OUTPUT_<FIELD>
    dtype: str
    ctype: str
    shape: tuple[int, ...]
    size: int
    bytes: int
    scale: float | None = None      # quantized tensors: real = scale * (q - zero_point)
    zero_point: int | None = None

    @property
    def align(self) -> int:
        """The element size: what kernels assume when they load the tensor."""
        return {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "int64": 8, "float64": 8}.get(self.dtype, 4)


def io_tensors(program: Program) -> tuple[list[Tensor], list[Tensor]]:
    graph = program.graph
    result = []
    for role, names in (("input", graph.inputs), ("output", graph.outputs)):
        tensors = []
        for i, (onnx_name, field) in enumerate(zip(names, unique_identifiers(list(names)))):
            v = graph.values[onnx_name]
            scale, zp = _quantization(program, onnx_name) if v.dtype != "float32" else (None, None)
            tensors.append(Tensor(role, i, onnx_name, field, f"{role.upper()}_{field.upper()}", v.dtype,
                                  _CTYPES[v.dtype], v.shape, v.size, v.nbytes, scale, zp))
        result.append(tensors)
    return result[0], result[1]


@dataclass(frozen=True)
class WorkspaceBlock:
    """A memory region's block of the workspace, as the header describes it."""

    name: str           # the region's name: a field of NAME_workspaces
    macro: str          # WORKSPACE_<NAME>
    size: int           # bytes the plan uses
    capacity: int       # bytes the target gives the region
    rank: int           # 0 is the fastest
    align: int
    section: str        # where a linker script finds it
    buffers: int
    weights: int        # bytes of weights the region holds beside the block


def workspace_blocks(program: Program) -> list[WorkspaceBlock]:
    """The workspace's blocks, one per memory region, fastest first; none when the target declares no regions."""
    return [WorkspaceBlock(p.region.name, f"WORKSPACE_{p.region.name.upper()}", p.plan.size, p.region.size,
                           p.region.rank, p.plan.alignment, p.region.section, len(p.plan.offsets), p.weights)
            for p in program.regions]


def _quantization(program: Program, value: str) -> tuple[float | None, int | None]:
    """Scale and zero point of an integer graph input or output (None for a plain integer tensor)."""
    quant = program.graph.values[value].quant
    return (quant.scale, quant.zero_point) if quant is not None else (None, None)


def _arg(program: Program, value: str, writable: bool, inputs: list[Tensor], outputs: list[Tensor]) -> str:
    loc: Location = program.locations[value]
    ctype = _CTYPES[program.graph.values[value].dtype]
    if loc.kind in ("input", "output"):
        field = f"in->{inputs[loc.index].field}" if loc.kind == "input" else f"out->{outputs[loc.index].field}"
        if not loc.offset:
            return field
        qualifier = "" if writable else "const "
        return f"({qualifier}{ctype} *)(({qualifier}unsigned char *){field} + {loc.offset})"
    base = f"ws_{loc.region}" if loc.region else "ws"
    return f"({'' if writable else 'const '}{ctype} *)({base} + {loc.index + loc.offset})"


@dataclass(frozen=True)
class StateTensor:
    """A tensor the model keeps between runs, as NAME_reset sets it: `pointer` is its place in the
    workspace (a C expression), `fill` its initial value of every element (a C literal)."""

    name: str
    pointer: str
    size: int
    bytes: int
    fill: str


def state_tensors(program: Program, inputs: list[Tensor], outputs: list[Tensor]) -> list[StateTensor]:
    result = []
    for state in program.graph.state:
        v = program.graph.values[state.read]
        fill = f"{float(state.fill)!r}f" if v.dtype == "float32" else str(int(state.fill))
        result.append(StateTensor(state.read.replace("*/", "* /"), _arg(program, state.read, True, inputs, outputs),
                                  v.size, v.nbytes, fill))
    return result


def render(program: Program, banner: str, requires: list[str], target: Target) -> tuple[str, str]:
    """Return (header, source) text. `requires`: symbols the object leaves to the toolchain's runtime;
    the header checks that it is compiled for `target`'s core and float ABI (see library.guard)."""
    name = program.name
    inputs, outputs = io_tensors(program)
    calls = []
    for call in program.calls:
        n_out = len(call.node.outputs)
        params, args = [], []
        for pos, value in enumerate(call.args):
            writable = pos >= len(call.args) - n_out
            ctype = _CTYPES[program.graph.values[value].dtype]
            params.append(f"{'' if writable else 'const '}{ctype} *")
            args.append(_arg(program, value, writable, inputs, outputs))
        shapes = " ".join("x".join(map(str, program.graph.shape(v))) for v in call.args)
        calls.append({"kernel": call.kernel.name, "params": params, "args": args,
                      "comment": f"{call.node.op} \"{call.node.name}\" {shapes}".replace("*/", "* /")})
    context = dict(banner=banner.replace("*/", "* /"), name=name, NAME=name.upper(), inputs=inputs,
                   outputs=outputs, calls=calls, workspace_size=program.plan.size,
                   workspace_align=program.plan.alignment, lower_bound=program.plan.lower_bound,
                   requires=requires, steps=len(calls), regions=workspace_blocks(program),
                   tiles=any(uses_tiles(call.kernel) for call in program.calls), target=target,
                   guard=library.guard(target), flags=library.compile_flags(target),
                   state=state_tensors(program, inputs, outputs))
    header = TEMPLATES.get_template("model.h.j2").render(**context)
    source = TEMPLATES.get_template("model.c.j2").render(**context)
    return header, source
