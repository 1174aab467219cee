"""Static memory planning: place every intermediate tensor at an offset in one workspace.

Buffers live from the step that writes them to the last step that reads them (inclusive). Several
deterministic placement heuristics run and the smallest workspace wins; `lower_bound` is the most
bytes live at any one step, which no placement can beat. `verify` re-derives liveness from the
call sequence itself and fails if two buffers live at the same step overlap in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aot.errors import PlanError


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int       # bytes, already rounded up to the alignment
    first: int      # step that writes it
    last: int       # last step that reads it

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Plan:
    offsets: dict[str, int]
    size: int
    lower_bound: int
    strategy: str
    alignment: int


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def lower_bound(buffers: Sequence[Buffer]) -> int:
    if not buffers:
        return 0
    last = max(b.last for b in buffers)
    live = [0] * (last + 2)
    for b in buffers:
        live[b.first] += b.size
        live[b.last + 1] -= b.size
    best = running = 0
    for delta in live:
        running += delta
        best = max(best, running)
    return best


def _place(order: Sequence[Buffer], best_fit: bool) -> dict[str, int]:
    """Put each buffer, in order, into the lowest (first fit) or tightest (best fit) free gap."""
    placed: list[tuple[Buffer, int]] = []
    offsets: dict[str, int] = {}
    for buf in order:
        busy = sorted((off, off + other.size) for other, off in placed if other.overlaps_in_time(buf))
        choice, choice_gap, cursor = None, None, 0
        for start, end in busy:
            gap = start - cursor
            if gap >= buf.size and (choice is None or (best_fit and gap < choice_gap)):
                choice, choice_gap = cursor, gap
                if not best_fit:
                    break
            cursor = max(cursor, end)
        if choice is None:
            choice = cursor
        offsets[buf.name] = choice
        placed.append((buf, choice))
    return offsets


# Each heuristic is an ordering plus a fit rule; all are deterministic (ties broken by name).
HEURISTICS: dict[str, Callable[[Sequence[Buffer]], dict[str, int]]] = {
    "largest-first best-fit": lambda bs: _place(sorted(bs, key=lambda b: (-b.size, b.first, b.name)), True),
    "time-ordered first-fit": lambda bs: _place(sorted(bs, key=lambda b: (b.first, -b.size, b.name)), False),
    "longest-lived first best-fit": lambda bs: _place(
        sorted(bs, key=lambda b: (-(b.last - b.first), -b.size, b.name)), True),
    "largest-area first best-fit": lambda bs: _place(
        sorted(bs, key=lambda b: (-b.size * (b.last - b.first + 1), b.name)), True),
}


def naive(buffers: Sequence[Buffer]) -> dict[str, int]:
    """Every buffer at its own offset: the reference placement, never reused memory."""
    offsets, cursor = {}, 0
    for b in buffers:
        offsets[b.name] = cursor
        cursor += b.size
    return offsets


def plan(buffers: Sequence[Buffer], alignment: int) -> Plan:
    bound = lower_bound(buffers)
    best: tuple[int, str, dict[str, int]] | None = None
    for name, heuristic in HEURISTICS.items():
        offsets = heuristic(buffers)
        size = max((offsets[b.name] + b.size for b in buffers), default=0)
        if best is None or size < best[0]:
            best = (size, name, offsets)
        if size == bound:
            break
    assert best is not None
    return Plan(best[2], best[0], bound, best[1], alignment)


def verify(steps: Sequence[tuple[Sequence[str], Sequence[str]]], offsets: dict[str, int], sizes: dict[str, int],
           workspace: int, alignment: int) -> None:
    """Check a placement against the call sequence (reads, writes per step) it is meant for.

    Independent of how the plan was made: liveness is recomputed from the steps. Raises PlanError.
    """
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, (reads, writes) in enumerate(steps):
        for name in writes:
            if name in offsets:
                first.setdefault(name, step)
                last[name] = max(last.get(name, step), step)
        for name in reads:
            if name in offsets:
                if name not in first:
                    raise PlanError(f"memory plan: '{name}' is read at step {step} before anything writes it")
                last[name] = step
    for name, off in offsets.items():
        if off % alignment or off < 0 or off + sizes[name] > workspace:
            raise PlanError(f"memory plan: '{name}' at offset {off} (+{sizes[name]}) is misaligned or outside "
                            f"the {workspace}-byte workspace")
    names = sorted(first, key=lambda n: (offsets[n], n))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if offsets[b] >= offsets[a] + sizes[a]:
                break
            if first[a] <= last[b] and first[b] <= last[a]:
                raise PlanError(f"memory plan: '{a}' and '{b}' are live at the same time but overlap in memory")
