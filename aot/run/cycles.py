"""Estimated cycles of a model's run on a Cortex-M core, priced from a run under qemu.

qemu executes instructions without timing them. A profiled run (aot/run/count.py) says how often each
instruction of the model's kernels executed and how often each transferred control. This module prices
that run with a pipeline model of the core:

- **Blocks.** The executed instructions split into straight-line blocks: consecutive instructions executed
  equally often, ending where control leaves. LLVM's scheduling model of the core prices each block, through
  llvm-mca (Debian's llvm-19: LLVM's CortexM4Model, CortexM7Model and CortexM55Model). The block runs
  repeated in steady state, so its cycles per run include the stalls inside it: load-use latencies,
  the M4's pipelined loads, the M7's dual issue, the M55's beats across its pipes.
- **Corrections on the Cortex-M4**, where LLVM's model is lighter than Arm's manual (checked by the tests on
  sequences whose timing the manual states):
  - a load (LDR, VLDR) takes two cycles unless it follows a single load, whose phases it pipelines with
    (nothing pipelines after a store, LDRD or LDM). LLVM charges the second cycle only as a stall before an
    instruction using the result, so a load neither pipelined nor used at once gets one cycle more;
  - LDM, STM, PUSH, POP take 1 + N cycles for N words, LDRD and STRD 3: LLVM's model issues each in one;
  - a load or store whose address the instruction right before it computed waits a cycle (the M4 forms
    addresses early, with no forwarding path to them);
  - a misaligned access takes a cycle for each bus transfer beyond the aligned one (a halfword-aligned word
    one, a byte-aligned word two). The profiled run counts them per instruction from the addresses it
    accessed (MISALIGNED);
  - the FPU is busy three cycles for each multiply-accumulate (VFMA, VMLA and kin), one for other arithmetic,
    however independent they are (GCC's Cortex-M4 model reserves it so). A block takes at least that long.
- **The Cortex-M0+**, which LLVM has no model of, is priced instruction by instruction from the table of its
  manual (`_m0plus`): a two-stage pipeline without load-use stalls makes that exact up to memory.
- **Control transfers.** llvm-mca prices a branch as one instruction issued, not the pipeline refill after it.
  The refill comes from REFILL, per core:
  - Cortex-M0+: 1 cycle per transfer (its manual's taken branch is 2 cycles, BL 3, BX 2, POP with PC 3 + N);
  - Cortex-M4: 2 cycles per taken branch, call or return. LLVM's model says "best case branch taken cost";
    Arm's manual gives 1 to 3 by alignment and width.
  - Cortex-M7: a branch predictor hides taken branches. Each misprediction costs 4, LLVM's own figure,
    which it notes fits better than the 6 of a forward branch. Mispredictions per conditional branch are
    taken as the rarer outcome (a loop's exit, a forward branch's jump).
  - Cortex-M55: no branch predictor, 2 cycles per transfer, as the M4. Low-overhead loop ends (LE, LETP)
    add none: the loop cache replays them.

Blind spots, said wherever a figure is printed (ESTIMATE):
- Memory is taken as zero-wait-state SRAM/TCM, as on the qemu boards (mps2/mps3 run from SSRAM). Flash wait
  states, caches and bus contention are not modelled.
- Misaligned accesses are priced on the Cortex-M4 only; the M7 and M55 handle them in hardware at costs
  their manuals do not state (the M0+ faults on them).
- Effects across block boundaries are not counted: a load at a block's end feeding the next block's first
  instruction, and steady-state overlap of a block with itself that real runs lack when it runs once.
- LLVM's models are incomplete (CompleteModel = 0): an instruction they lack is priced at one cycle and
  counted in `unpriced`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.build import Artifact
from aot.errors import RunError
from aot.run.count import LLVM_OBJDUMP, Profile, profile_instructions

LLVM_MCA = "llvm-mca-19"
ITERATIONS = 64         # steady-state repetitions llvm-mca runs each block for
ESTIMATE = ("LLVM's pipeline model of the core priced over the instructions qemu executed, plus branch refills; "
            "zero-wait-state memory, no caches or flash wait states")


@dataclass(frozen=True)
class Refill:
    """What a control transfer adds to its instruction's own issue cycle."""

    taken: int = 0              # every taken branch, call or return
    mispredicted: int = 0       # each misprediction (a predicting core: the rarer outcome of a conditional branch)
    free: tuple[str, ...] = ()  # mnemonics that add nothing (low-overhead loop ends)


REFILL = {
    "cortex-m0plus": Refill(taken=1),
    "cortex-m4": Refill(taken=2),
    "cortex-m7": Refill(mispredicted=4),
    "cortex-m55": Refill(taken=2, free=("le", "letp")),
}


def _m0plus(text: str) -> int:
    """Cycles of an instruction on the Cortex-M0+, from its Technical Reference Manual's instruction summary
    (zero wait states, the single-cycle multiplier), less the one-cycle refill a transfer adds (REFILL):
    loads and stores 2, LDM/STM/PUSH/POP 1 + N (POP with PC 3 + N), BL 3, BX/BLX 2, barriers and MRS/MSR 3,
    everything else 1."""
    mnemonic = text.split()[0].split(".")[0]
    registers = re.search(r"\{([^}]*)\}", text)
    count = len(registers.group(1).split(",")) if registers else 0
    if mnemonic in ("push", "pop", "ldm", "ldmia", "stm", "stmia"):
        return 1 + count + (1 if mnemonic == "pop" and "pc" in registers.group(1) else 0)
    if re.match(r"^(ldr|str)", mnemonic):
        return 2
    if mnemonic == "bl":
        return 2
    if mnemonic in ("dmb", "dsb", "isb", "mrs", "msr"):
        return 3
    return 1


# Cycles per bus transfer a misaligned access takes beyond an aligned one: on the Cortex-M4 a halfword-aligned
# word costs one more, a byte-aligned word two (its manual's load/store timings). Not modelled elsewhere.
MISALIGNED = {"cortex-m4": 1}

# Cores LLVM has no scheduling model for, priced by a table from their manual instead.
TABLES = {"cortex-m0plus": _m0plus}


@dataclass(frozen=True)
class Estimate:
    """A run's estimated cycles: `cycles` in all, `per_kernel` by kernel function, the share of it that is
    branch refill, and how many executed instructions llvm-mca could not price (one cycle each)."""

    cycles: int
    instructions: int
    per_kernel: dict[str, int]
    refill: int
    unpriced: int


def available(target) -> bool:
    """Whether runs on `target` can be priced here: a model of its core, and LLVM's tools installed."""
    return target.cpu in REFILL and (target.cpu in TABLES or shutil.which(LLVM_MCA) is not None) \
        and shutil.which(LLVM_OBJDUMP) is not None


def core_of(artifact: Artifact) -> str:
    """The core whose model prices `artifact`'s runs; refuses a target without one."""
    cpu = artifact.target.cpu
    if cpu not in REFILL:
        raise RunError(f"no cycle model for {artifact.target.name} (cpu {cpu}); there is one for "
                       f"{', '.join(sorted(REFILL))}")
    return cpu


def estimate_cycles(artifact: Artifact, inputs: dict[str, np.ndarray], timeout: float = 600.0
                    ) -> tuple[dict[str, np.ndarray], Estimate]:
    """Run the model once under qemu and price the run on its core: its outputs and the estimate."""
    core_of(artifact)
    outputs, profile = profile_instructions(artifact, inputs, timeout)
    return outputs, price(profile, artifact.target)


def price(profile: Profile, target) -> Estimate:
    """The cycles of a profiled run on `target`'s core (see the module docstring)."""
    refill_model = REFILL[target.cpu]
    blocks = split_blocks(profile)
    costs, unpriced_per_block = block_cycles([[profile.disassembly[pc] for pc in block] for block in blocks], target)
    owner = _owners(profile)
    per_kernel: dict[str, float] = {}
    own: dict[str, int] = {}
    total = refill = 0.0
    instructions = unpriced = 0
    for block, cost, missing in zip(blocks, costs, unpriced_per_block):
        runs = profile.counts[block[0]]
        last = block[-1]
        extra = 0.0
        taken = profile.taken.get(last, 0)
        mnemonic = profile.disassembly[last].split()[0] if profile.disassembly.get(last) else ""
        if taken and mnemonic not in refill_model.free:
            extra += refill_model.taken * taken
            if _conditional(mnemonic):
                extra += refill_model.mispredicted * min(taken, runs - taken)
        misaligned = MISALIGNED.get(target.cpu, 0) * sum(profile.split.get(pc, 0) for pc in block)
        extra += misaligned
        cycles = runs * cost + extra
        total += cycles
        refill += extra - misaligned
        instructions += runs * len(block)
        unpriced += runs * missing
        name = owner.get(block[0], "")
        per_kernel[name] = per_kernel.get(name, 0.0) + cycles
        own[name] = own.get(name, 0) + runs * len(block)
    _divide_shared(per_kernel, own, profile)
    return Estimate(round(total), instructions, {k: round(v) for k, v in per_kernel.items()}, round(refill),
                    unpriced)


def _divide_shared(per_kernel: dict[str, float], own: dict[str, int], profile: Profile) -> None:
    """Give the cycles of each body kernels share (aot/codegen/llvm.py) to the kernels that called it, in
    proportion to the instructions each ran in it: exact where the body takes the same path on every
    call (as a convolution's does), an average where its branches depend on the data."""
    for body in [name for name in per_kernel if name.endswith(".shared")]:
        ran = {kernel: profile.instructions[kernel] - own.get(kernel, 0)
               for kernel, called in profile.calls.items() if called == body}
        total = sum(ran.values())
        if total <= 0:
            raise RunError(f"{body}: its cycles belong to no kernel (the run names none that called it)")
        cycles = per_kernel.pop(body)
        for kernel, n in ran.items():
            per_kernel[kernel] = per_kernel.get(kernel, 0.0) + cycles * n / total


def split_blocks(profile: Profile) -> list[list[int]]:
    """The executed instructions in straight-line blocks: a block ends where the next instruction in memory
    did not follow it as often (control left, or another path joined) or where control was transferred."""
    blocks: list[list[int]] = []
    addresses = sorted(profile.disassembly)
    following = dict(zip(addresses, addresses[1:]))
    current: list[int] = []
    for pc in addresses:
        if pc not in profile.counts:
            continue
        if current and (following.get(current[-1]) != pc or profile.counts[current[-1]] != profile.counts[pc]
                        or current[-1] in profile.taken):
            blocks.append(current)
            current = []
        current.append(pc)
    if current:
        blocks.append(current)
    return blocks


_TARGET = re.compile(r"0x([0-9a-f]+)\s*<[^>]*>")


def _conditional(mnemonic: str) -> bool:
    return mnemonic.split(".")[0] in ("cbz", "cbnz", "wls", "wlstp") or (
        mnemonic.startswith("b") and mnemonic.split(".")[0][1:] in ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl",
                                                                    "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le"))


def assembler_lines(text: str) -> list[str]:
    """A disassembled instruction as llvm-mca reads it. A branch's target becomes a local label right after
    it (right before it for the loop ends, which only branch back): where it goes does not change its timing,
    and a target outside the block would not assemble."""
    match = _TARGET.search(text)
    if match is None:
        return [text]
    backward = text.split()[0] in ("le", "letp")
    line = text[:match.start()] + ("9b" if backward else "9f") + text[match.end():]
    return ["9:", line] if backward else [line, "9:"]


def block_cycles(blocks: list[list[str]], target) -> tuple[list[float], list[int]]:
    """Cycles per run of each block of instruction texts on `target`'s core by llvm-mca, one code region
    per block, in steady state (or by the core's table, TABLES); and per block the instructions llvm-mca
    could not price."""
    if target.cpu in TABLES:
        return [float(sum(TABLES[target.cpu](text) for text in block)) for block in blocks], [0] * len(blocks)
    tool = shutil.which(LLVM_MCA)
    if tool is None:
        raise RunError(f"estimating cycles needs {LLVM_MCA} (Debian's llvm-19 package)")
    if not blocks:
        return [], []
    lines = []
    for i, block in enumerate(blocks):
        lines.append(f"# LLVM-MCA-BEGIN b{i}")
        lines += [line for text in block for line in assembler_lines(text)]
        lines.append(f"# LLVM-MCA-END b{i}")
    with tempfile.TemporaryDirectory(prefix="aot-mca-") as tmp:
        source = Path(tmp) / "blocks.s"
        source.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([tool, f"-mtriple={target.triple}", f"-mcpu={target.cpu}", f"-mattr={target.features}",
                               f"-iterations={ITERATIONS}", "-skip-unsupported-instructions=any", "-json",
                               str(source)], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RunError(f"{LLVM_MCA} failed for {target.cpu}: {proc.stderr.strip()[-300:]}")
    regions = {r["Name"]: r["SummaryView"] for r in json.loads(proc.stdout)["CodeRegions"]}
    costs, missing = [], []
    for i, block in enumerate(blocks):
        view = regions.get(f"b{i}")
        priced = view["Instructions"] // max(view["Iterations"], 1) if view else 0
        cycles = view["TotalCycles"] / max(view["Iterations"], 1) if view and priced else 0.0
        cycles += len(block) - priced
        if target.cpu == "cortex-m4":
            cycles = max(cycles + _unpipelined_loads(block) + _multiple_transfers(block) + _address_stalls(block),
                         _fpu_busy(block))
        costs.append(cycles)
        missing.append(len(block) - priced)
    return costs, missing


_LOAD = re.compile(r"^v?ldr(b|h|sb|sh)?(\.[nw])?$|^vldr\.")
_MEMORY = re.compile(r"^(v?(ldr|str|ldm|stm)|push|pop|vpush|vpop)")
_MULTIPLE = re.compile(r"^(ldm|stm|push|pop|vldm|vstm|vpush|vpop)")
_DOUBLE = re.compile(r"^(ldrd|strd)(\.w)?$")
_NOT_WRITING = re.compile(r"^(cmp|cmn|tst|teq|b|bl|bx|blx|cbz|cbnz|it\w*|nop|v?str|v?push|v?stm|vcmpe?)(\.|$)")
_REGISTER = re.compile(r"\b(r\d+|sb|sl|fp|ip|sp|lr)\b")
_STORE = re.compile(r"^v?str")
_COMPARE = re.compile(r"^(cmp|cmn|tst|teq)(\.[nw])?$")
_FP_MAC = re.compile(r"^v(fma|fms|fnma|fnms|mla|mls|nmla|nmls)\.f")
_FP_ARITH = re.compile(r"^v(add|sub|mul|nmul|div|sqrt|abs|neg|cvt|cvtr|maxnm|minnm|cmp|cmpe|sel\w*)\.")


def _operands(text: str) -> list[str]:
    parts = text.split(None, 1)
    return [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []


def _unpipelined_loads(block: list[str]) -> int:
    """Cortex-M4 loads owed their second cycle: not right after a single load (whose phases they pipeline
    with; nothing pipelines after a store, LDRD or LDM), and not read by the next instruction (LLVM's model
    already stalls that one)."""
    extra = 0
    for i, text in enumerate(block):
        mnemonic = text.split()[0]
        if not _LOAD.match(mnemonic):
            continue
        if i > 0 and _LOAD.match(block[i - 1].split()[0]):
            continue
        loaded = _operands(text)[0] if _operands(text) else ""
        if loaded and re.search(rf"\b{loaded}\b", ",".join(_read(block[i + 1]) if i + 1 < len(block) else [])):
            continue
        extra += 1
    return extra


def _multiple_transfers(block: list[str]) -> int:
    """Cortex-M4: LDM, STM, PUSH, POP (and their FPU forms) take 1 + N cycles for N words, LDRD and STRD 3;
    LLVM's model issues each in one."""
    extra = 0
    for text in block:
        mnemonic = text.split()[0]
        if _DOUBLE.match(mnemonic):
            extra += 2
        elif _MULTIPLE.match(mnemonic) and (registers := re.search(r"\{([^}]*)\}", text)):
            words = [2 if r.strip().startswith("d") else 1 for r in registers.group(1).split(",")]
            extra += sum(words)
    return extra


def _address_stalls(block: list[str]) -> int:
    """Cortex-M4: a load or store whose address uses a register the instruction right before it computed
    waits a cycle for the register bank (the M4 generates addresses early and has no forwarding path for
    them)."""
    extra = 0
    for before, text in zip(block, block[1:]):
        if not _MEMORY.match(text.split()[0]) or "[" not in text:
            continue
        previous = before.split()[0]
        if _MEMORY.match(previous) or _NOT_WRITING.match(previous):
            continue
        written = _operands(before)[0] if _operands(before) else ""
        address = text[text.index("["):]
        if written and written in _REGISTER.findall(address):
            extra += 1
    return extra


def _read(text: str) -> list[str]:
    """The operands an instruction reads: all but a written first one (stores and compares read theirs)."""
    operands = _operands(text)
    mnemonic = text.split()[0]
    return operands if _STORE.match(mnemonic) or _COMPARE.match(mnemonic) else operands[1:]


def _fpu_busy(block: list[str]) -> int:
    """The cycles the Cortex-M4 FPU is occupied by a block's arithmetic: 3 per multiply-accumulate, 1 else."""
    mnemonics = [text.split()[0] for text in block]
    return 3 * sum(bool(_FP_MAC.match(m)) for m in mnemonics) + sum(bool(_FP_ARITH.match(m)) for m in mnemonics)


def _owners(profile: Profile) -> dict[int, str]:
    """The kernel each executed address belongs to."""
    spans = sorted((addr, addr + size, name) for name, (addr, size) in profile.kernels.items())
    found = {}
    for pc in profile.counts:
        for lo, hi, name in spans:
            if lo <= pc < hi:
                found[pc] = name
                break
    return found
