"""Memory regions: RAM in parts of different speed (a Cortex-M7's DTCM, its SRAM, external SDRAM), the
workspace split over them.

A target (or board) file declares them; rank 0 is the fastest:

    [[memory.regions]]
    name = "dtcm"       # a C identifier: NAME_WORKSPACE_DTCM_SIZE, the linker section .bss.aot.dtcm
    size = "64KiB"      # what the workspace may take of it
    rank = 0

`place` assigns every workspace buffer to a region, then plans each region on its own with the planner of
aot/plan/memory.py. The policy: buffers the kernels access most per byte go first, each to the fastest
region whose plan still fits its size with it; what fits no faster region goes to the slowest, which must
hold it. A pair planned in place (one buffer) moves as one; an overlap between buffers of different regions
is dropped. A region marked `weights = true` holds the model's weights too (their sections are
.data.aot.<name>.<symbol>), and its workspace only what they leave. `verify` checks the outcome
independently of how it was made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from aot.errors import PlanError
from aot.kernel.ir import Reuse
from aot.plan import memory
from aot.target import Region


@dataclass(frozen=True)
class Placement:
    """A region and the plan of the buffers in it (its offsets name them)."""

    region: Region
    plan: memory.Plan
    weights: int = 0        # bytes kept for the model's weights, when the region holds them (an upper bound)

    @property
    def room(self) -> int:
        """The bytes the workspace may take in the region."""
        return self.region.size - self.weights


def place(buffers: Sequence[memory.Buffer], overlaps: Sequence[memory.Overlap], accesses: dict[str, int],
          declared: Sequence[Region], alignment: int, model: str, weights: int = 0) -> tuple[Placement, ...]:
    """Assign the buffers to the regions, fastest first, and plan each (see the module's docstring).
    `accesses`: bytes the kernels read and write of each buffer; `weights`: bytes of the weights, which
    the region marked to hold them keeps beside its workspace. Raises PlanError when the slowest region
    cannot hold what is left for it."""
    groups, members = memory.merge_in_place(buffers, overlaps)
    by_rank = tuple(sorted(declared, key=lambda r: r.rank))
    held = {r.name: weights if r.weights else 0 for r in by_rank}
    room = {r.name: r.size - held[r.name] for r in by_rank}
    for r in by_rank:
        if room[r.name] < 0:
            raise PlanError(f"{model}: the weights ({weights:,} bytes) do not fit memory region {r.name} "
                            f"({r.size:,} bytes); give it more with --memory {r.name}=SIZE")
    chosen: dict[str, list[str]] = {r.name: [] for r in by_rank}
    plans: dict[str, memory.Plan] = {}

    def heat(group: memory.Buffer) -> Fraction:
        return Fraction(sum(accesses.get(m, 0) for m in members[group.name]), max(group.size, 1))

    for group in sorted(groups, key=lambda g: (-heat(g), g.first, g.name)):
        for region in by_rank[:-1]:
            if group.size > room[region.name]:
                continue
            trial = _plan(buffers, overlaps, chosen[region.name] + members[group.name], alignment)
            if trial.size <= room[region.name]:
                chosen[region.name] += members[group.name]
                plans[region.name] = trial
                break
        else:
            chosen[by_rank[-1].name] += members[group.name]
    slowest = by_rank[-1]
    plans[slowest.name] = _plan(buffers, overlaps, chosen[slowest.name], alignment)
    placements = tuple(Placement(r, plans.get(r.name) or _plan(buffers, overlaps, [], alignment), held[r.name])
                       for r in by_rank)
    if plans[slowest.name].size > room[slowest.name]:
        raise PlanError(_too_small(placements, buffers, overlaps, alignment, model))
    return placements


def _plan(buffers: Sequence[memory.Buffer], overlaps: Sequence[memory.Overlap], names: Sequence[str],
          alignment: int) -> memory.Plan:
    """The plan of the named buffers (in the order given to `place`, for determinism) and the overlaps among them."""
    inside = set(names)
    return memory.plan([b for b in buffers if b.name in inside], alignment,
                       [o for o in overlaps if o.source in inside and o.result in inside])


def _too_small(placements: Sequence[Placement], buffers: Sequence[memory.Buffer], overlaps: Sequence[memory.Overlap],
               alignment: int, model: str) -> str:
    slowest = placements[-1]
    sizes = {b.name: b.size for b in buffers}
    regions = ", ".join(f"{p.region.name} {p.region.size:,} bytes (rank {p.region.rank}"
                        + (f", {p.weights:,} of them weights" if p.weights else "") + ")" for p in placements)
    faster = ", ".join(f"{p.region.name} {p.plan.size:,}" for p in placements[:-1])
    largest = max(slowest.plan.offsets, key=lambda b: (sizes[b], b))
    whole = memory.plan(buffers, alignment, overlaps).size
    return (f"{model}: the workspace does not fit its memory regions, {regions}: with the hottest buffers in the "
            f"faster ones ({faster or 'none'} bytes used), {slowest.region.name} needs {slowest.plan.size:,} bytes for "
            f"the other {len(slowest.plan.offsets)} buffers, {slowest.plan.size - slowest.room:,} more than it "
            f"holds (the largest, '{largest}', takes {sizes[largest]:,}; the workspace in one piece needs {whole:,}); "
            f"give a region more with --memory {slowest.region.name}=SIZE")


def verify(steps: Sequence[tuple[Sequence[str], Sequence[str]]], placements: Sequence[Placement],
           sizes: dict[str, int], alignment: int, shared: Sequence[tuple[int, str, str, Reuse]] = (),
           kept: Sequence[str] = ()) -> None:
    """Every buffer in exactly one region, each region's plan checked by memory.verify against the call
    sequence (sharing only as declared, and within the region; `kept`: the model's state, live throughout),
    and within the region's size."""
    region_of: dict[str, str] = {}
    for p in placements:
        for name in p.plan.offsets:
            if name in region_of:
                raise PlanError(f"memory plan: '{name}' is in two regions, {region_of[name]} and {p.region.name}")
            region_of[name] = p.region.name
        if p.plan.size + p.weights > p.region.size:
            raise PlanError(f"memory plan: region {p.region.name} holds {p.region.size:,} bytes, its plan needs "
                            f"{p.plan.size:,}" + (f" beside {p.weights:,} of weights" if p.weights else ""))
        inside = [s for s in shared if s[1] in p.plan.offsets and s[2] in p.plan.offsets]
        memory.verify(steps, p.plan.offsets, sizes, p.plan.size, alignment, inside, kept)
    missing = sorted(set(sizes) - set(region_of))
    if missing:
        raise PlanError(f"memory plan: '{missing[0]}' is in no region")
