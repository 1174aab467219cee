"""Static memory planning: place every intermediate tensor at an offset in one workspace.

Buffers live from the step that writes them to the last step that reads them (inclusive). Several
deterministic placement heuristics run and the smallest workspace wins; `lower_bound` is the most
bytes live at any one step, which no placement can beat. `verify` re-derives liveness from the
call sequence itself and fails if two buffers live at the same step overlap in memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

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
    """Put each buffer, in order, into the lowest (first fit) or tightest (best fit) free gap among
    the buffers placed before it that live at the same time. Vectorized (numpy) over those buffers,
    which a wide graph has thousands of; `_gap` says what the vector code computes."""
    count = len(order)
    by_first = sorted(range(count), key=lambda i: order[i].first)
    firsts = [order[i].first for i in by_first]
    lasts = np.array([order[i].last for i in by_first], dtype=np.int64)
    sizes = np.array([order[i].size for i in by_first], dtype=np.int64)
    slot = np.empty(count, dtype=np.int64)        # position in `order` -> position in `by_first`
    slot[by_first] = np.arange(count)
    offsets = np.full(count, -1, dtype=np.int64)  # by position in `by_first`; -1 until placed
    for i, buf in enumerate(order):
        started = bisect.bisect_right(firsts, buf.last)     # those that start by buf's last step ...
        live = np.flatnonzero((lasts[:started] >= buf.first) & (offsets[:started] >= 0))  # ... end after its first
        offsets[slot[i]] = _gap(offsets[live], offsets[live] + sizes[live], buf.size, best_fit)
    return {buf.name: int(offsets[slot[i]]) for i, buf in enumerate(order)}


def _gap(starts: np.ndarray, ends: np.ndarray, size: int, best_fit: bool) -> int:
    """The offset for `size` bytes beside busy spans [start, end) (which may overlap each other). As a
    loop over the spans sorted by (start, end):
        cursor = 0
        for start, end in spans:
            gap = start - cursor        # free bytes before this span
            if gap >= size: the first such gap (first fit), or the first smallest one (best fit)
            cursor = max(cursor, end)
        no gap fits: cursor, after every span."""
    if not len(starts):
        return 0
    by_start = np.lexsort((ends, starts))
    starts, ends = starts[by_start], ends[by_start]
    reach = np.maximum.accumulate(ends)
    cursor = np.concatenate(([0], reach[:-1]))      # the cursor as each span is reached
    gaps = starts - cursor
    fits = np.flatnonzero(gaps >= size)
    if not len(fits):
        return int(reach[-1])
    return int(cursor[fits[np.argmin(gaps[fits])]] if best_fit else cursor[fits[0]])


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
    _check_disjoint(first, last, offsets, sizes)


def _check_disjoint(first: dict[str, int], last: dict[str, int], offsets: dict[str, int],
                    sizes: dict[str, int]) -> None:
    """Sweep the steps keeping the live buffers sorted by offset: they are disjoint in memory as long as
    each buffer that starts living is disjoint from its neighbours in that order."""
    live: list[tuple[int, int, str]] = []       # (offset, end, name), sorted
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for name in first:
        if sizes[name]:                         # an empty buffer occupies no bytes
            starts.setdefault(first[name], []).append(name)
            ends.setdefault(last[name], []).append(name)
    for step in sorted(starts.keys() | ends.keys()):
        for name in sorted(starts.get(step, ())):
            entry = (offsets[name], offsets[name] + sizes[name], name)
            at = bisect.bisect(live, entry)
            for other in live[max(at - 1, 0):at + 1]:
                if other[0] < entry[1] and entry[0] < other[1]:
                    a, b = sorted((name, other[2]))
                    raise PlanError(f"memory plan: '{a}' and '{b}' are live at the same time but overlap in memory")
            live.insert(at, entry)
        for name in ends.get(step, ()):
            live.remove((offsets[name], offsets[name] + sizes[name], name))
