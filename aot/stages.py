"""`aot build --emit`: the compilation's stages as readable files beside the build's artifacts.

Each file is a function of the build's inputs only (no addresses, ids or times), so two builds of the
same model give the same bytes, and metadata.json hashes them like the other files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aot.codegen.llvm import Compiled
from aot.errors import OptionError
from aot.kernel.ir import dump as dump_kernel
from aot.program import Call, Program

NEEDS_MODULE = frozenset({"llvm", "asm"})    # stages whose text comes from compiling the LLVM module


def parse(emit: str | Iterable[str] | None) -> frozenset[str]:
    """The stages asked for, as names ("graph,kir" or ["graph", "kir"]); an unknown one is an OptionError."""
    if emit is None:
        return frozenset()
    names = [n.strip() for n in emit.split(",")] if isinstance(emit, str) else list(emit)
    for n in names:
        if n not in STAGES:
            raise OptionError(f"unknown stage to emit {n!r} (the stages: {', '.join(STAGES)})")
    return frozenset(names)


def render(stages: frozenset[str], program: Program, compiled: Compiled | None, banner: str) -> dict[str, bytes]:
    """The files of `stages` (file name -> bytes), each starting with the banner as a comment;
    `compiled` is needed for llvm and asm."""
    if stages & NEEDS_MODULE and compiled is None:
        raise ValueError("the llvm and asm stages need the compiled module")
    line = _one_line(banner)
    return {f: _ending_newline(text).encode() for stage, write in STAGES.items() if stage in stages
            for f, text in write(program, compiled, line).items()}


def _graph(program: Program, compiled: Compiled | None, banner: str) -> dict[str, str]:
    return {f"{program.name}.graph.txt": f"# {banner}\n{program.graph.dump()}"}


def _kir(program: Program, compiled: Compiled | None, banner: str) -> dict[str, str]:
    kernels = "".join(f"\n{_kernel(i, call)}\n" for i, call in enumerate(program.calls))
    return {f"{program.name}.kir.txt": f"# {banner}\n{kernels}"}


def _llvm(program: Program, compiled: Compiled, banner: str) -> dict[str, str]:
    return {f"{program.name}.ll": f"; {banner}\n{compiled.ir}",
            f"{program.name}.opt.ll": f"; {banner}\n{compiled.optimized_ir}"}


def _asm(program: Program, compiled: Compiled, banner: str) -> dict[str, str]:
    # `/* */` is a comment for every target's assembler (GNU as and LLVM's), unlike `#`, `@` or `//`
    return {f"{program.name}.s": f"/* {banner.replace('*/', '* /')} */\n{compiled.assembly}"}


# in the order the compilation passes through them; each writes NAME.<what> files
STAGES: dict[str, Callable[[Program, Compiled | None, str], dict[str, str]]] = {
    "graph": _graph,    # NAME.graph.txt: the optimized graph the kernels compute (Graph.dump)
    "kir": _kir,        # NAME.kir.txt: every kernel's loop IR in call order, headed by step, node, op, schedule
    "llvm": _llvm,      # NAME.ll, NAME.opt.ll: the LLVM IR module before and after optimization
    "asm": _asm,        # NAME.s: the target assembly of the object's code
}


def _kernel(step: int, call: Call) -> str:
    chosen = call.kernel.schedule
    head = f"# step {step}: node {_one_line(call.node.name)} ({call.node.op}), kernel {call.kernel.name}"
    if chosen is None:
        schedule = "# schedule: none (not a templated kernel)"
    else:
        fields = ", ".join(f"{k} {v}" for k, v in chosen.schedule.describe().items())
        schedule = f"# schedule: {fields}; workload {chosen.workload!r} ({chosen.source})"
    return f"{head}\n{schedule}\n{dump_kernel(call.kernel)}"


def _one_line(text: str) -> str:
    """`text` for a comment line: control characters escaped (\\n), so that a name cannot end it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _ending_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"

