"""Static memory planning: place every intermediate tensor at an offset in one workspace.

Buffers live from the step that writes them to the last step that reads them (inclusive). Two
buffers live at the same step get disjoint bytes, except where a kernel declares that its output
may share bytes with an input that dies with it (`Overlap`, from the kernel's `Reuse`): in place at
the same offset, or overlapping from a distance on. In-place pairs are merged into one buffer
before placement; overlaps shrink what a partner blocks. Several deterministic placement
heuristics run and the smallest workspace wins. `lower_bound` is the most bytes live at any one
step without any sharing, the bound plain placement cannot beat. `verify` re-derives liveness from
the call sequence and checks every shared byte against the kernels' declarations.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from aot.errors import PlanError
from aot.kernel.ir import Reuse


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int       # bytes, already rounded up to the alignment
    first: int      # step that writes it
    last: int       # last step that reads it

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Overlap:
    """At step `step`, where `source` is read for the last time, the kernel writing `result` may put it
    over `source`: at the same offset (`exact`), or anywhere starting `shift` bytes or more below it
    (above it if `backward`)."""

    source: str
    result: str
    step: int
    shift: int = 0
    exact: bool = False
    backward: bool = False      # the result may start `shift` or more bytes above the source instead


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


def _place(order: Sequence[Buffer], best_fit: bool, shifts: dict[tuple[str, str], tuple[int, bool]],
           room_below: bool = False) -> dict[str, int]:
    """Put each buffer, in order, into the lowest (first fit) or tightest (best fit) free gap among
    the buffers placed before it that live at the same time. A buffer that may overlap a placed partner
    from `shift` bytes on (shifts[(source, result)]) sees only the part of the partner it must not
    overlap (`_blocked`). `room_below`: a source whose result is still to place and may start below it
    is put at least that far up. Vectorized (numpy) over the live buffers, which a wide graph has
    thousands of; `_gap` says what the vector code computes."""
    count = len(order)
    by_first = sorted(range(count), key=lambda i: order[i].first)
    firsts = [order[i].first for i in by_first]
    lasts = np.array([order[i].last for i in by_first], dtype=np.int64)
    sizes = np.array([order[i].size for i in by_first], dtype=np.int64)
    slot = np.empty(count, dtype=np.int64)        # position in `order` -> position in `by_first`
    slot[by_first] = np.arange(count)
    offsets = np.full(count, -1, dtype=np.int64)  # by position in `by_first`; -1 until placed
    partners: dict[str, list[str]] = {}
    for source, result in shifts:
        partners.setdefault(source, []).append(result)
        partners.setdefault(result, []).append(source)
    position = {order[i].name: int(slot[i]) for i in range(count)}
    below = {source: shift for (source, _), (shift, backward) in shifts.items() if not backward}
    for i, buf in enumerate(order):
        started = bisect.bisect_right(firsts, buf.last)     # those that start by buf's last step ...
        live = np.flatnonzero((lasts[:started] >= buf.first) & (offsets[:started] >= 0))  # ... end after its first
        starts, ends = offsets[live], offsets[live] + sizes[live]
        for name in partners.get(buf.name, ()):
            hit = np.flatnonzero(live == position[name])
            if len(hit):
                starts[hit[0]], ends[hit[0]] = _blocked(buf, order[by_first[position[name]]],
                                                        int(offsets[position[name]]), shifts)
        keep = starts - buf.size + 1 < ends                  # spans that still block some offset
        floor = below.get(buf.name, 0) if room_below else 0
        offsets[slot[i]] = _gap(starts[keep], ends[keep], buf.size, best_fit, floor)
    return {buf.name: int(offsets[slot[i]]) for i, buf in enumerate(order)}


def _gap(starts: np.ndarray, ends: np.ndarray, size: int, best_fit: bool, floor: int = 0) -> int:
    """The offset for `size` bytes beside busy spans [start, end) (which may overlap each other). As a
    loop over the spans sorted by (start, end):
        cursor = floor
        for start, end in spans:
            gap = start - cursor        # free bytes before this span
            if gap >= size: the first such gap (first fit), or the first smallest one (best fit)
            cursor = max(cursor, end)
        no gap fits: cursor, after every span."""
    if not len(starts):
        return floor
    by_start = np.lexsort((ends, starts))
    starts, ends = starts[by_start], ends[by_start]
    reach = np.maximum.accumulate(np.maximum(ends, floor))
    cursor = np.concatenate(([floor], reach[:-1]))  # the cursor as each span is reached
    gaps = starts - cursor
    fits = np.flatnonzero(gaps >= size)
    if not len(fits):
        return int(reach[-1])
    return int(cursor[fits[np.argmin(gaps[fits])]] if best_fit else cursor[fits[0]])


def _blocked(buf: Buffer, other: Buffer, off: int, shifts: dict[tuple[str, str], tuple[int, bool]]) \
        -> tuple[int, int]:
    """What `other` (placed at `off`) blocks for `buf`, as [start, end): `buf` may not be placed at x
    with start - buf.size < x < end. Without sharing that is other's bytes; with it, less (and then
    start may pass end: the blocked offsets are fewer than buf's size)."""
    end = off + other.size
    if (other.name, buf.name) in shifts:        # buf is the result
        shift, backward = shifts[(other.name, buf.name)]
        if backward:                            # it may start `shift` or more above other
            return off, min(end, off + shift)
        return max(off, off - shift + buf.size), end    # ... or below
    if (buf.name, other.name) in shifts:        # buf is the source
        shift, backward = shifts[(buf.name, other.name)]
        if backward:                            # other may start `shift` above buf: buf that far below
            return max(off, off - shift + buf.size), end
        return off, min(end, off + shift)
    return off, end


# Each heuristic is an ordering plus a fit rule; all are deterministic (ties broken by name).
Heuristic = Callable[[Sequence[Buffer], dict[tuple[str, str], tuple[int, bool]]], dict[str, int]]
HEURISTICS: dict[str, Heuristic] = {
    "largest-first best-fit": lambda bs, sh: _place(sorted(bs, key=lambda b: (-b.size, b.first, b.name)), True, sh),
    "time-ordered first-fit": lambda bs, sh: _place(sorted(bs, key=lambda b: (b.first, -b.size, b.name)), False, sh),
    "time-ordered first-fit, room below": lambda bs, sh: _place(
        sorted(bs, key=lambda b: (b.first, -b.size, b.name)), False, sh, room_below=True),
    "longest-lived first best-fit": lambda bs, sh: _place(
        sorted(bs, key=lambda b: (-(b.last - b.first), -b.size, b.name)), True, sh),
    "largest-area first best-fit": lambda bs, sh: _place(
        sorted(bs, key=lambda b: (-b.size * (b.last - b.first + 1), b.name)), True, sh),
}


def naive(buffers: Sequence[Buffer]) -> dict[str, int]:
    """Every buffer at its own offset: the reference placement, never reused memory."""
    offsets, cursor = {}, 0
    for b in buffers:
        offsets[b.name] = cursor
        cursor += b.size
    return offsets


def plan(buffers: Sequence[Buffer], alignment: int, overlaps: Sequence[Overlap] = ()) -> Plan:
    bound = lower_bound(buffers)
    groups, members = merge_in_place(buffers, overlaps)
    group_of = {name: group.name for group in groups for name in members[group.name]}
    shifts: dict[tuple[str, str], tuple[int, bool]] = {}
    by_name = {g.name: g for g in groups}
    for o in overlaps:
        source, result = by_name[group_of[o.source]], by_name[group_of[o.result]]
        if not o.exact and source.last == o.step == result.first and (source.name, result.name) not in shifts:
            shifts[(source.name, result.name)] = (align_up(max(0, o.shift), alignment), o.backward)
    sharing_bound = lower_bound(groups) if overlaps else bound
    best: tuple[int, str, dict[str, int]] | None = None
    for name, heuristic in HEURISTICS.items():
        offsets = heuristic(groups, shifts)
        size = max((offsets[b.name] + b.size for b in groups), default=0)
        if best is None or size < best[0]:
            best = (size, name, offsets)
        if size == sharing_bound and not shifts:
            break
    assert best is not None
    offsets = {name: best[2][group_of[name]] for name in group_of}
    return Plan(offsets, best[0], bound, best[1], alignment)


def merge_in_place(buffers: Sequence[Buffer], overlaps: Sequence[Overlap]) \
        -> tuple[list[Buffer], dict[str, list[str]]]:
    """Merge each in-place pair (an exact Overlap of two equal sizes) into one buffer living from the
    source's first step to the result's last; chains merge into one. Returns the buffers to place
    (named after their first member) and each one's members."""
    by_name = {b.name: b for b in buffers}
    group = {b.name: b.name for b in buffers}
    span = {b.name: (b.first, b.last, b.size) for b in buffers}
    members = {b.name: [b.name] for b in buffers}
    for o in sorted((o for o in overlaps if o.exact), key=lambda o: o.step):
        source, result = group[o.source], o.result
        first, last, size = span[source]
        if (group[result] != result or last != o.step or by_name[result].first != o.step
                or size != by_name[result].size):
            continue
        span[source] = (first, by_name[result].last, size)
        members[source] += members.pop(result)
        for name in members[source]:
            group[name] = source
        del span[result]
    merged = [Buffer(name, size, first, last) for name, (first, last, size) in span.items()]
    return merged, members


def verify(steps: Sequence[tuple[Sequence[str], Sequence[str]]], offsets: dict[str, int], sizes: dict[str, int],
           workspace: int, alignment: int, shared: Sequence[tuple[int, str, str, Reuse]] = (),
           kept: Iterable[str] = ()) -> None:
    """Check a placement against the call sequence (reads, writes per step) it is meant for.

    Independent of how the plan was made: liveness is recomputed from the steps, and two buffers live
    at the same step may share bytes only as a kernel declared it (`shared`: step, source, result and
    the kernel's Reuse), at the one step where the source is read last and the result first written,
    the source read once there. `kept` buffers hold the model's state: they live through every step (and
    between runs). Raises PlanError.
    """
    first: dict[str, int] = {name: 0 for name in kept if name in offsets}
    last: dict[str, int] = {name: max(len(steps) - 1, 0) for name in first}
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
    declared = {(step, source, result): reuse for step, source, result, reuse in shared}
    _check_disjoint(first, last, offsets, sizes, steps, declared)


def _check_disjoint(first: dict[str, int], last: dict[str, int], offsets: dict[str, int], sizes: dict[str, int],
                    steps, declared: dict[tuple[int, str, str], Reuse]) -> None:
    """Sweep the steps keeping the live buffers sorted by offset, pairwise disjoint. A buffer that starts
    living at a step is checked against the run of live buffers it overlaps (contiguous in that order)
    and against the others born at that step: each overlap must be one the kernels declared
    (`_may_share`), with a source that dies at this very step. The buffers born at a step join the live
    ones once those dying there have left."""
    live: list[tuple[int, int, str]] = []       # (offset, end, name), sorted
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for name in first:
        if sizes[name]:                         # an empty buffer occupies no bytes
            starts.setdefault(first[name], []).append(name)
            ends.setdefault(last[name], []).append(name)
    for step in sorted(starts.keys() | ends.keys()):
        entries = [(offsets[name], offsets[name] + sizes[name], name) for name in sorted(starts.get(step, ()))]
        for i, entry in enumerate(entries):
            at = bisect.bisect(live, entry)
            clash = []
            k = at
            while k < len(live) and live[k][0] < entry[1]:
                clash.append(live[k])
                k += 1
            k = at - 1
            while k >= 0 and live[k][1] > entry[0]:
                clash.append(live[k])
                k -= 1
            clash += [other for other in entries[:i] if other[0] < entry[1] and entry[0] < other[1]]
            for other in clash:
                if not _may_share(other[2], entry[2], offsets, sizes, first, last, steps, declared):
                    a, b = sorted((entry[2], other[2]))
                    raise PlanError(f"memory plan: '{a}' and '{b}' are live at the same time but overlap in memory")
        for name in ends.get(step, ()):
            if first[name] < step:
                live.remove((offsets[name], offsets[name] + sizes[name], name))
        for entry in entries:
            if last[entry[2]] > step:
                bisect.insort(live, entry)


def _may_share(a: str, b: str, offsets: dict[str, int], sizes: dict[str, int], first: dict[str, int],
               last: dict[str, int], steps, declared: dict[tuple[int, str, str], Reuse]) -> bool:
    for source, result in ((a, b), (b, a)):
        step = last[source]
        reuse = declared.get((step, source, result))
        if reuse is None or first[result] != step or list(steps[step][0]).count(source) != 1:
            continue
        if reuse.exact and sizes[source] != sizes[result]:
            continue
        if reuse.allows(offsets[source], offsets[result]):
            return True
    return False
