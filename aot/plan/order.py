"""Execution order: a topological order of the kernels that keeps the fewest bytes live at once.

A step reads and writes named buffers; a buffer is live from the first step that touches it to the
last, as the memory planner counts it. Which buffers are live once some steps have run depends only
on which steps ran, not on their order, so the best order is a cheapest path through the sets of
steps run so far (as in Serenity, Ahn et al. 2020): running a step costs the bytes live while it runs,
and a path costs its dearest step. The sets are searched layer by layer (k steps run), each set
reached by its cheapest path; that is exact while no layer holds more than `width` sets, and a beam
search of the `width` best sets per layer above that, which keeps wide graphs of hundreds of steps
fast.

Steps that every other step precedes or follows (a chain's links, the input and output of a
branching block) split the search: everything before such a cut point runs before it, so the steps
between two cut points are searched on their own, and the best orders of these segments put
together are a best order of the whole.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

Steps = Sequence[tuple[Sequence[str], Sequence[str]]]     # (reads, writes) per step, in the given order

STATES = 8_000       # sets a segment's search may keep in all; a layer keeps at most STATES // steps


def peak(steps: Steps, sizes: dict[str, int], order: Sequence[int] | None = None) -> int:
    """The most bytes live while one step runs, the steps taken in `order` (default: as listed).
    Names missing from `sizes` cost nothing (the caller's inputs and outputs, constants)."""
    order = range(len(steps)) if order is None else order
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for position, step in enumerate(order):
        for name in (*steps[step][0], *steps[step][1]):
            if sizes.get(name):
                first.setdefault(name, position)
                last[name] = position
    live = [0] * (len(order) + 1)
    for name in first:
        live[first[name]] += sizes[name]
        live[last[name] + 1] -= sizes[name]
    best = running = 0
    for delta in live:
        running += delta
        best = max(best, running)
    return best


def search(steps: Steps, sizes: dict[str, int]) -> tuple[int, ...]:
    """A topological order of `steps` (indices into it) with the lowest peak found; the given order
    when nothing beats it, so ties keep it. A step depends on the earlier steps that write what it
    reads, and, if it writes a name, on the earlier steps that touch that name.

    Remembered: a build plans the same steps again for each kernel variant it weighs (program.py), and
    the order depends on the steps and sizes alone."""
    return _search(tuple((tuple(reads), tuple(writes)) for reads, writes in steps), tuple(sorted(sizes.items())))


@functools.lru_cache(maxsize=4)
def _search(steps: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...], size_items: tuple[tuple[str, int], ...]
            ) -> tuple[int, ...]:
    sizes = dict(size_items)
    given = tuple(range(len(steps)))
    flow = _Flow(steps, sizes)
    order: list[int] = []
    for segment in flow.segments():
        order += segment if len(segment) == 1 else flow.best_order(segment, max(8, STATES // len(segment)))
    return tuple(order) if peak(steps, sizes, order) < peak(steps, sizes) else given


class _Flow:
    """The steps as bit masks over their indices: what each depends on, and which steps touch each
    buffer that costs bytes."""

    def __init__(self, steps: Steps, sizes: dict[str, int]) -> None:
        self.count = len(steps)
        self.preds = [0] * self.count
        writers: dict[str, int] = {}
        touchers: dict[str, int] = {}
        for i, (reads, writes) in enumerate(steps):
            for name in reads:
                self.preds[i] |= writers.get(name, 0)
            for name in writes:
                self.preds[i] |= touchers.get(name, 0)
                writers[name] = writers.get(name, 0) | 1 << i
            for name in (*reads, *writes):
                touchers[name] = touchers.get(name, 0) | 1 << i
        self.succs: list[list[int]] = [[] for _ in steps]
        for i, mask in enumerate(self.preds):
            for p in _bits(mask):
                self.succs[p].append(i)
        costly = [(touchers[name], sizes[name]) for name in touchers if sizes.get(name)]
        self.buffers = [[(mask, size) for mask, size in costly if mask >> i & 1] for i in range(self.count)]

    def segments(self) -> list[list[int]]:
        """The steps in the given order, cut before and after each step that every other step precedes
        or follows: in any order, what comes before such a step in the given order runs before it."""
        ancestors = [0] * self.count
        for i in range(self.count):
            for p in _bits(self.preds[i]):
                ancestors[i] |= ancestors[p] | 1 << p
        descendants = [0] * self.count
        for i in reversed(range(self.count)):
            for s in self.succs[i]:
                descendants[i] |= descendants[s] | 1 << s
        segments: list[list[int]] = [[]]
        for i in range(self.count):
            if (ancestors[i] | descendants[i]).bit_count() == self.count - 1:
                segments += [[i], []]
            else:
                segments[-1].append(i)
        return [s for s in segments if s]

    def run(self, done: int, step: int) -> tuple[int, int]:
        """Running `step` after the steps in `done`: the bytes it brings to life and the bytes that
        die with it (all their steps have then run)."""
        born = died = 0
        after = done | 1 << step
        for mask, size in self.buffers[step]:
            if not mask & done:
                born += size
            if not mask & ~after:
                died += size
        return born, died

    def live(self, done: int) -> int:
        """Bytes live between steps once the steps in `done` have run."""
        total = 0
        for i in _bits(done):
            for mask, size in self.buffers[i]:
                # count each buffer once, at its lowest step that has run
                if mask & ~done and (mask & done) & -(mask & done) == 1 << i:
                    total += size
        return total

    def best_order(self, segment: list[int], width: int) -> list[int]:
        """The order of `segment` (its steps in the given order, all earlier steps run before it) with
        the lowest peak: layer by layer over the sets run so far, each reached by its cheapest path
        (ties: the first found, the search trying steps in the given order); each layer cut to the
        `width` sets of lowest (peak, live bytes), and the set the given order has run, so that the
        result is never worse than the given order."""
        start = (1 << segment[0]) - 1
        given = start
        inside = set(segment)
        ready = tuple(s for s in segment if not self.preds[s] & ~start)
        layer = [(start, 0, self.live(start), ready)]
        came_from: list[dict[int, tuple[int, int]]] = []
        for next_given in segment:
            reached: dict[int, tuple[int, int, int, tuple[int, ...], int]] = {}
            for done, top, live, ready in layer:
                for step in ready:
                    born, died = self.run(done, step)
                    after, cost = done | 1 << step, max(top, live + born)
                    if after not in reached or cost < reached[after][0]:
                        reached[after] = (cost, live + born - died, done, ready, step)
            came_from.append({after: (done, step) for after, (_, _, done, _, step) in reached.items()})
            kept = sorted(reached.items(), key=lambda item: item[1][:2])[:width]
            given |= 1 << next_given
            if all(after != given for after, _ in kept):
                kept.append((given, reached[given]))
            layer = [(after, cost, live, self._ready(ready, step, after, inside))
                     for after, (cost, live, _, ready, step) in kept]
        order = []
        done = layer[0][0]
        for links in reversed(came_from):
            done, step = links[done]
            order.append(step)
        return order[::-1]

    def _ready(self, ready: tuple[int, ...], step: int, done: int, inside: set[int]) -> tuple[int, ...]:
        """The steps ready after `step` ran: the others that were, and its successors in the segment
        whose dependencies have all run."""
        new = [s for s in self.succs[step] if s in inside and not self.preds[s] & ~done]
        return tuple(sorted([s for s in ready if s != step] + new))


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
