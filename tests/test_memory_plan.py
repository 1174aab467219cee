"""The static memory planner (aot/plan/memory.py): lower bound, heuristics, verification, and plan.json."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import helper

import aot
from aot.errors import PlanError
from aot.kernel.ir import Reuse
from aot.plan import memory
from aot.plan.memory import Buffer

try:
    from oracle import make_model
except ImportError:  # tests/ imported as a package
    from tests.oracle import make_model


# --------------------------------------------------------------------------- helpers


def bufs(*specs: tuple[str, int, int, int]) -> list[Buffer]:
    """Buffers from (name, size, first, last)."""
    return [Buffer(name, size, first, last) for name, size, first, last in specs]


def steps_for(buffers: list[Buffer]) -> list[tuple[list[str], list[str]]]:
    """A call sequence with exactly these live ranges: written at `first`, read at `last`."""
    if not buffers:
        return []
    steps: list[tuple[list[str], list[str]]] = [([], []) for _ in range(max(b.last for b in buffers) + 1)]
    for b in buffers:
        steps[b.first][1].append(b.name)
        if b.last > b.first:
            steps[b.last][0].append(b.name)
    return steps


def sizes_of(buffers: list[Buffer]) -> dict[str, int]:
    return {b.name: b.size for b in buffers}


def extent(buffers: list[Buffer], offsets: dict[str, int]) -> int:
    return max((offsets[b.name] + b.size for b in buffers), default=0)


def assert_no_overlap(buffers: list[Buffer], offsets: dict[str, int]) -> None:
    """Brute force, independent of memory.verify: buffers live at a common step are disjoint in memory."""
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                a_lo, b_lo = offsets[a.name], offsets[b.name]
                assert a_lo + a.size <= b_lo or b_lo + b.size <= a_lo, (
                    f"{a} at {a_lo} and {b} at {b_lo} are live together and overlap")


def verify(buffers: list[Buffer], offsets: dict[str, int], workspace: int, alignment: int) -> None:
    memory.verify(steps_for(buffers), offsets, sizes_of(buffers), workspace, alignment)


# Hand-made buffer sets with their lower bound (most bytes live at one step; ranges are inclusive).
HAND_MADE = {
    # nothing to place
    "empty": ([], 0),
    # one buffer: its size
    "single": (bufs(("a", 64, 0, 0)), 64),
    # a chain a->b->c: step 1 holds a+b = 64+128, step 2 holds b+c = 128+64, so 192
    "chain": (bufs(("a", 64, 0, 1), ("b", 128, 1, 2), ("c", 64, 2, 3)), 192),
    # never live together: the largest one, 512
    "disjoint": (bufs(("a", 256, 0, 0), ("b", 512, 1, 1), ("c", 128, 2, 2)), 512),
    # all live at step 5: 64 + 64 + 128 = 256
    "all-at-once": (bufs(("a", 64, 5, 5), ("b", 64, 5, 5), ("c", 128, 5, 5)), 256),
    # last is inclusive: a (0..2) and b (2..4) share step 2, so 64 + 64 = 128
    "touching": (bufs(("a", 64, 0, 2), ("b", 64, 2, 4)), 128),
    # a ends at step 1, b starts at step 2: never together, so 64
    "adjacent": (bufs(("a", 64, 0, 1), ("b", 64, 2, 3)), 64),
    # a long-lived 32 under a sequence of 96s: step 1: 32+96, step 2: 32+96+96 (b and c overlap at 2), so 224
    "long-lived": (bufs(("a", 32, 0, 4), ("b", 96, 1, 2), ("c", 96, 2, 3), ("d", 96, 4, 4)), 224),
    # a residual block: x (0..3) skips over y (1..2) and z (2..3); step 2 holds x+y+z = 128+64+64 = 256,
    # step 3 holds x+z+out = 128+64+128 = 320
    "residual": (bufs(("x", 128, 0, 3), ("y", 64, 1, 2), ("z", 64, 2, 3), ("out", 128, 3, 4)), 320),
}


# --------------------------------------------------------------------------- lower bound


@pytest.mark.parametrize("case", HAND_MADE)
def test_lower_bound_hand_made(case):
    buffers, expected = HAND_MADE[case]
    assert memory.lower_bound(buffers) == expected


def test_lower_bound_ignores_order():
    buffers, expected = HAND_MADE["residual"]
    assert memory.lower_bound(list(reversed(buffers))) == expected


def test_align_up():
    assert [memory.align_up(n, 64) for n in (0, 1, 63, 64, 65, 128)] == [0, 64, 64, 64, 128, 128]
    assert memory.align_up(12, 16) == 16


# --------------------------------------------------------------------------- heuristics and plan()


@pytest.mark.parametrize("heuristic", memory.HEURISTICS)
@pytest.mark.parametrize("case", HAND_MADE)
def test_every_heuristic_verifies(case, heuristic):
    buffers, bound = HAND_MADE[case]
    offsets = memory.HEURISTICS[heuristic](buffers, {})
    assert set(offsets) == {b.name for b in buffers}
    size = extent(buffers, offsets)
    assert size >= bound
    verify(buffers, offsets, size, 32)
    assert_no_overlap(buffers, offsets)


@pytest.mark.parametrize("case", HAND_MADE)
def test_naive_placement_verifies(case):
    buffers, _ = HAND_MADE[case]
    offsets = memory.naive(buffers)
    total = sum(b.size for b in buffers)
    assert extent(buffers, offsets) == total
    verify(buffers, offsets, total, 32)


@pytest.mark.parametrize("case", HAND_MADE)
def test_plan_between_bound_and_naive(case):
    buffers, bound = HAND_MADE[case]
    p = memory.plan(buffers, 32)
    assert p.lower_bound == bound
    assert bound <= p.size <= sum(b.size for b in buffers)
    assert p.size == extent(buffers, p.offsets)
    assert p.alignment == 32
    assert p.strategy in memory.HEURISTICS
    verify(buffers, p.offsets, p.size, 32)
    assert_no_overlap(buffers, p.offsets)


@pytest.mark.parametrize("case", ["single", "chain", "disjoint", "all-at-once", "touching", "adjacent", "residual"])
def test_plan_reaches_bound_on_easy_cases(case):
    """Cases small enough that the optimum (= the lower bound) is obvious; the planner should find it."""
    buffers, bound = HAND_MADE[case]
    assert memory.plan(buffers, 32).size == bound


def test_plan_reuses_memory_of_dead_buffers():
    buffers = bufs(("a", 256, 0, 1), ("b", 256, 1, 2), ("c", 256, 2, 3))
    p = memory.plan(buffers, 64)
    assert p.size == 512
    assert p.offsets["a"] == p.offsets["c"]


def test_plan_is_deterministic():
    buffers, _ = HAND_MADE["long-lived"]
    assert memory.plan(buffers, 32) == memory.plan(list(buffers), 32)


# --------------------------------------------------------------------------- verify rejects bad placements


def test_verify_rejects_overlap():
    buffers = bufs(("a", 64, 0, 2), ("b", 64, 1, 3))
    with pytest.raises(PlanError, match="overlap"):
        verify(buffers, {"a": 0, "b": 0}, 128, 64)
    with pytest.raises(PlanError, match="overlap"):       # partial overlap, not just equal offsets
        verify(bufs(("a", 128, 0, 2), ("b", 128, 1, 3)), {"a": 0, "b": 64}, 256, 64)
    # the same offsets are fine once the live ranges no longer meet
    verify(bufs(("a", 64, 0, 1), ("b", 64, 2, 3)), {"a": 0, "b": 0}, 64, 64)


def test_verify_overlap_is_an_aot_error():
    with pytest.raises(aot.AotError):
        verify(bufs(("a", 64, 0, 2), ("b", 64, 1, 3)), {"a": 0, "b": 32}, 128, 32)


def test_verify_rejects_misaligned_offset():
    buffers = bufs(("a", 64, 0, 1), ("b", 64, 1, 2))
    verify(buffers, {"a": 0, "b": 64}, 128, 64)
    with pytest.raises(PlanError, match="misaligned"):
        verify(buffers, {"a": 0, "b": 96}, 160, 64)
    with pytest.raises(PlanError, match="misaligned"):
        verify(buffers, {"a": 0, "b": 65}, 160, 1 << 6)


def test_verify_rejects_outside_workspace():
    buffers = bufs(("a", 64, 0, 1), ("b", 64, 1, 2))
    with pytest.raises(PlanError, match="workspace"):
        verify(buffers, {"a": 0, "b": 64}, 96, 32)
    with pytest.raises(PlanError):
        verify(buffers, {"a": -64, "b": 0}, 128, 32)


def test_verify_rejects_read_before_write():
    steps = [(["a"], []), ([], ["a"])]
    with pytest.raises(PlanError, match="before anything writes"):
        memory.verify(steps, {"a": 0}, {"a": 64}, 64, 64)


def test_verify_derives_liveness_from_steps_not_from_plan():
    """A read later than the planner thought extends the live range, and verify notices the clash."""
    buffers = bufs(("a", 64, 0, 1), ("b", 64, 2, 3))
    offsets = {"a": 0, "b": 0}
    verify(buffers, offsets, 64, 64)
    steps = steps_for(buffers)
    steps[3][0].append("a")          # a is also read at step 3, while b lives
    with pytest.raises(PlanError, match="overlap"):
        memory.verify(steps, offsets, sizes_of(buffers), 64, 64)


# --------------------------------------------------------------------------- random buffer sets


def random_buffers(seed: int) -> tuple[list[Buffer], int]:
    rng = np.random.default_rng(seed)
    alignment = int(rng.choice([16, 32, 64]))
    count = int(rng.integers(1, 40))
    steps = int(rng.integers(1, 30))
    buffers = []
    for i in range(count):
        first = int(rng.integers(0, steps))
        last = first + int(rng.geometric(0.35)) - 1          # mostly short lives, a few long
        units = int(rng.choice([1, 1, 2, 3, 4, 8, 16, 64]) * rng.integers(1, 5))
        buffers.append(Buffer(f"t{i}", units * alignment, first, last))
    return buffers, alignment


@pytest.mark.parametrize("seed", range(200))
def test_random_buffer_sets(seed):
    buffers, alignment = random_buffers(seed)
    bound = memory.lower_bound(buffers)
    total = sum(b.size for b in buffers)

    p = memory.plan(buffers, alignment)
    assert p.lower_bound == bound
    assert bound <= p.size <= total
    assert all(off % alignment == 0 for off in p.offsets.values())
    verify(buffers, p.offsets, p.size, alignment)
    assert_no_overlap(buffers, p.offsets)

    sizes = []
    for name, heuristic in memory.HEURISTICS.items():
        offsets = heuristic(buffers, {})
        size = extent(buffers, offsets)
        assert size >= bound, name
        verify(buffers, offsets, size, alignment)
        assert_no_overlap(buffers, offsets)
        sizes.append(size)
    assert p.size == min(sizes)          # plan() keeps the best heuristic (stopping early only at the bound)

    # corrupt the plan: move one of two buffers that live together onto the other; verify must object
    pair = next(((a, b) for i, a in enumerate(buffers) for b in buffers[i + 1:]
                 if a.overlaps_in_time(b)), None)
    if pair is not None:
        a, b = pair
        bad = {**p.offsets, b.name: p.offsets[a.name]}
        with pytest.raises(PlanError):
            verify(buffers, bad, max(p.size, extent(buffers, bad)), alignment)


def test_random_sets_are_not_degenerate():
    """The generator above makes sets where reuse is possible and that have buffers live together."""
    reuse = clashes = 0
    for seed in range(200):
        buffers, alignment = random_buffers(seed)
        reuse += memory.plan(buffers, alignment).size < sum(b.size for b in buffers)
        clashes += any(a.overlaps_in_time(b) for i, a in enumerate(buffers) for b in buffers[i + 1:])
    assert reuse > 100
    assert clashes > 150


# --------------------------------------------------------------------------- plan.json of a real build


def small_cnn():
    rng = np.random.default_rng(0)
    f = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3", kernel_shape=[1, 1]),
        n("Add", ["c3", "p1"], ["res"], name="residual"),
        n("Relu", ["res"], ["r3"], name="relu3"),
        n("Conv", ["r3", "w4", "b4"], ["c4"], name="conv4", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Sigmoid", ["c4"], ["s4"], name="sigmoid4"),
        n("Mul", ["c4", "s4"], ["silu"], name="silu"),
        n("GlobalAveragePool", ["silu"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["flat"], name="flatten"),
        n("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc", transB=1),
        n("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    inits = {"w1": f(8, 3, 3, 3), "b1": f(8), "w2": f(8, 8, 3, 3), "b2": f(8), "w3": f(8, 8, 1, 1), "b3": f(8),
             "w4": f(16, 8, 3, 3), "b4": f(16), "wf": f(10, 16), "bf": f(10)}
    return make_model(nodes, {"x": (1, 3, 16, 16)}, {"probs": None}, inits)


@pytest.fixture(scope="module")
def built_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("cnn") / "build"
    artifact = aot.build(small_cnn(), out_dir=out, name="cnn")
    plan = json.loads((out / "plan.json").read_text())
    metadata = json.loads((out / "metadata.json").read_text())
    return artifact, plan, metadata


def test_plan_json_buffers_never_overlap_when_live(built_plan):
    _, plan, _ = built_plan
    buffers = plan["buffers"]
    assert len(buffers) >= 4
    for key in ("tensor", "first_use", "last_use", "size", "offset"):
        assert all(key in b for b in buffers), key
    workspace, alignment = plan["workspace_size"], plan["alignment"]
    for b in buffers:
        assert b["first_use"] <= b["last_use"]
        assert b["size"] > 0 and b["size"] % alignment == 0
        assert b["offset"] % alignment == 0
        assert 0 <= b["offset"] and b["offset"] + b["size"] <= workspace
    declared = {(d["source"], d["result"]): d for d in plan["shared"]}
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a["first_use"] <= b["last_use"] and b["first_use"] <= a["last_use"]:
                if a["offset"] + a["size"] <= b["offset"] or b["offset"] + b["size"] <= a["offset"]:
                    continue
                d = declared.get((a["tensor"], b["tensor"])) or declared.get((b["tensor"], a["tensor"]))
                assert d is not None and d["used"], f"{a['tensor']} and {b['tensor']} are live together and overlap"
                by_name = {a["tensor"]: a, b["tensor"]: b}
                delta = by_name[d["source"]]["offset"] - by_name[d["result"]]["offset"]
                assert (delta == 0 if d["exact"] else -delta >= d["shift"] if d["backward"] else delta >= d["shift"]), d


def test_plan_json_workspace_against_lower_bound(built_plan):
    artifact, plan, metadata = built_plan
    buffers = plan["buffers"]
    # the lower bound recomputed from the JSON alone: most bytes live at one step
    steps = max(b["last_use"] for b in buffers) + 1
    live = [sum(b["size"] for b in buffers if b["first_use"] <= s <= b["last_use"]) for s in range(steps)]
    assert plan["lower_bound"] == max(live)
    if not any(d["used"] for d in plan["shared"]):
        assert plan["workspace_size"] >= plan["lower_bound"]
    assert plan["workspace_size"] <= sum(b["size"] for b in buffers)
    assert metadata["workspace"]["size"] == plan["workspace_size"]
    assert artifact.plan == plan


def test_plan_json_live_ranges_match_steps(built_plan):
    """first_use/last_use agree with the reads and writes of the listed steps (views resolved to their root)."""
    _, plan, _ = built_plan
    root = {}
    for entry in plan["buffers"] + plan["external"]:
        root[entry["tensor"]] = entry["tensor"]
        for view in entry["views"]:
            root[view] = entry["tensor"]
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step in plan["steps"]:
        for name in step["reads"] + step["writes"]:
            assert name in root, f"step {step['step']} uses {name!r}, which plan.json does not place"
            r = root[name]
            first.setdefault(r, step["step"])
            last[r] = step["step"]
        for name in step["reads"]:     # nothing is read before it is written (external inputs aside)
            r = root[name]
            assert r in {e["tensor"] for e in plan["external"]} or first[r] < step["step"], name
    for b in plan["buffers"]:
        assert (first[b["tensor"]], last[b["tensor"]]) == (b["first_use"], b["last_use"]), b["tensor"]


def test_plan_json_is_verified_by_memory_verify(built_plan):
    """Feed plan.json back through memory.verify: it must accept it, and reject it once two live buffers collide."""
    _, plan, _ = built_plan
    root = {}
    for entry in plan["buffers"]:
        root[entry["tensor"]] = entry["tensor"]
        for view in entry["views"]:
            root[view] = entry["tensor"]
    steps = [([root[v] for v in s["reads"] if v in root], [root[v] for v in s["writes"] if v in root])
             for s in plan["steps"]]
    offsets = {b["tensor"]: b["offset"] for b in plan["buffers"]}
    sizes = {b["tensor"]: b["size"] for b in plan["buffers"]}
    shared = [(d["step"], d["source"], d["result"],
               Reuse(0, exact=d["exact"], backward=d["backward"],
                     progress=((0, d["shift"]) if d["backward"] else (d["shift"], 0),)))
              for d in plan["shared"]]
    memory.verify(steps, offsets, sizes, plan["workspace_size"], plan["alignment"], shared)
    a, b = next((a, b) for i, a in enumerate(plan["buffers"]) for b in plan["buffers"][i + 1:]
                if a["first_use"] <= b["last_use"] and b["first_use"] <= a["last_use"])
    with pytest.raises(PlanError):
        memory.verify(steps, {**offsets, b["tensor"]: a["offset"]}, sizes,
                      max(plan["workspace_size"], a["offset"] + b["size"]), plan["alignment"])


def test_small_cnn_still_correct():
    result = aot.check(small_cnn())
    assert result.comparisons and result.ok, result.comparisons


# --------------------------------------------------------------------------- sharing bytes with a dying input


def random_chain(seed: int) -> tuple[list[Buffer], list[tuple[int, str, str, Reuse]], int]:
    """Buffers handed from step to step (each read once, by the next step) with random Reuse declarations,
    and a few long-lived ones beside them."""
    rng = np.random.default_rng(seed)
    alignment = int(rng.choice([16, 32]))
    buffers, shared = [], []
    steps = int(rng.integers(2, 12))
    for i in range(steps):
        buffers.append(Buffer(f"t{i}", int(rng.integers(1, 8)) * alignment, i, i + 1))
        if i and rng.random() < 0.8:
            kind = rng.choice(["exact", "forward", "backward"])
            if kind == "exact":
                buffers[-1] = Buffer(f"t{i}", buffers[-2].size, i, i + 1)
                reuse = Reuse(0, exact=True)
            else:
                shift = int(rng.integers(-2, 6)) * alignment // 2
                progress = ((0, shift),) if kind == "backward" else ((shift, 0),)
                reuse = Reuse(0, progress=progress, backward=kind == "backward")
            shared.append((i, f"t{i - 1}", f"t{i}", reuse))
    for j in range(int(rng.integers(0, 3))):
        first = int(rng.integers(0, steps))
        buffers.append(Buffer(f"long{j}", int(rng.integers(1, 4)) * alignment, first, first + 3))
    return buffers, shared, alignment


@pytest.mark.parametrize("seed", range(200))
def test_sharing_plans_verify_and_never_beat_what_is_declared(seed):
    buffers, shared, alignment = random_chain(seed)
    overlaps = [memory.Overlap(s, r, step, reuse.shift, reuse.exact, reuse.backward) for step, s, r, reuse in shared]
    p = memory.plan(buffers, alignment, overlaps)
    memory.verify(steps_for(buffers), p.offsets, sizes_of(buffers), p.size, alignment, shared)
    declared = {(s, r): reuse for _, s, r, reuse in shared}
    for i, a in enumerate(buffers):         # brute force, apart from verify
        for b in buffers[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                a_lo, b_lo = p.offsets[a.name], p.offsets[b.name]
                if a_lo + a.size <= b_lo or b_lo + b.size <= a_lo:
                    continue
                reuse = declared.get((a.name, b.name))
                assert reuse is not None and reuse.allows(a_lo, b_lo), (a, b, p.offsets)


def test_in_place_chain_takes_one_buffer():
    buffers = bufs(("a", 64, 0, 1), ("b", 64, 1, 2), ("c", 64, 2, 3))
    shared = [(1, "a", "b", Reuse(0, exact=True)), (2, "b", "c", Reuse(0, exact=True))]
    p = memory.plan(buffers, 16, [memory.Overlap(s, r, t, 0, True) for t, s, r, _ in shared])
    assert p.size == 64 and p.lower_bound == 128
    memory.verify(steps_for(buffers), p.offsets, sizes_of(buffers), p.size, 16, shared)


def test_overlap_alternates_direction_along_a_chain():
    """Forward then backward: three 256-byte tensors in 256 + 64 bytes."""
    buffers = bufs(("a", 256, 0, 1), ("b", 256, 1, 2), ("c", 256, 2, 3))
    shared = [(1, "a", "b", Reuse(0, progress=((64, 0),))), (2, "b", "c", Reuse(0, progress=((0, 64),), backward=True))]
    p = memory.plan(buffers, 16, [memory.Overlap(s, r, t, reuse.shift, False, reuse.backward)
                                  for t, s, r, reuse in shared])
    assert p.size == 256 + 64
    memory.verify(steps_for(buffers), p.offsets, sizes_of(buffers), p.size, 16, shared)


@pytest.mark.parametrize("offsets, shared, why", [
    ({"a": 64, "b": 0}, [], "undeclared"),
    ({"a": 32, "b": 0}, [(1, "a", "b", Reuse(0, progress=((64, 0),)))], "shift too small"),
    ({"a": 0, "b": 64}, [(1, "a", "b", Reuse(0, progress=((64, 0),)))], "wrong direction"),
    ({"a": 0, "b": 16}, [(1, "a", "b", Reuse(0, exact=True))], "in place but not at the same offset"),
    ({"a": 64, "b": 0}, [(2, "a", "b", Reuse(0, progress=((64, 0),)))], "declared at another step"),
])
def test_verify_rejects_sharing_the_kernel_did_not_allow(offsets, shared, why):
    buffers = bufs(("a", 128, 0, 1), ("b", 128, 1, 2))
    with pytest.raises(PlanError, match="overlap"):
        memory.verify(steps_for(buffers), offsets, sizes_of(buffers), 256, 16, shared)


def test_verify_rejects_sharing_with_an_input_read_twice():
    buffers = bufs(("a", 128, 0, 1), ("b", 128, 1, 2))
    steps = steps_for(buffers)
    steps[1][0].append("a")          # the kernel reads a through two operands
    shared = [(1, "a", "b", Reuse(0, exact=True))]
    with pytest.raises(PlanError, match="overlap"):
        memory.verify(steps, {"a": 0, "b": 0}, sizes_of(buffers), 128, 16, shared)


def conv_chain() -> onnx.ModelProto:
    """Convolutions in a chain (dense, depthwise, pointwise, strided) and a residual add, the shapes of a
    small keyword spotter."""
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4"], ["c4"], pads=[1, 1, 1, 1], group=16),     # rows backward
             helper.make_node("Add", ["c4", "r2"], ["s"]),          # a residual that dies here
             helper.make_node("GlobalAveragePool", ["s"], ["y"])]
    inits = {"w1": f(16, 1, 3, 3), "b1": f(16), "w2": f(16, 1, 3, 3), "w3": f(16, 16, 1, 1), "b3": f(16),
             "w4": f(16, 1, 3, 3)}
    return make_model(nodes, {"x": (1, 1, 26, 12)}, {"y": None}, inits)


@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def test_shared_plan_is_smaller_and_still_correct(target, tmp_path):
    model = conv_chain()
    plain = aot.build(model, target=target, out_dir=None, knobs={"share_memory": False})
    shared = aot.build(model, target=target, out_dir=tmp_path / "b")
    assert shared.program.plan.size < plain.program.plan.size
    assert any(d["used"] and d["exact"] for d in shared.plan["shared"]), shared.plan["shared"]
    result = aot.check(model, target=target)
    assert result.ok, result.comparisons


# --------------------------------------------------------------------------- declarations against kernels


def mobile_stem(size: int = 16) -> onnx.ModelProto:
    """MobileNetV1's first layers, small: a strided convolution, a depthwise one, a pointwise one doubling
    the channels (its result the largest tensor), then a strided depthwise one."""
    rng = np.random.default_rng(1)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8), n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2", "w3", "b3"], ["c3"]), n("Relu", ["c3"], ["r3"]),
             n("Conv", ["r3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
             n("Relu", ["c4"], ["r4"]), n("GlobalAveragePool", ["r4"], ["y"])]
    inits = {"w1": f(8, 3, 3, 3), "b1": f(8), "w2": f(8, 1, 3, 3), "b2": f(8), "w3": f(16, 8, 1, 1), "b3": f(16),
             "w4": f(16, 1, 3, 3), "b4": f(16)}
    return make_model(nodes, {"x": (1, 3, size, size)}, {"y": None}, inits)


def int8(model: onnx.ModelProto) -> onnx.ModelProto:
    from quantize import quantize_model
    return quantize_model(model, "QDQ", True, "QInt8")


def conv_kernels(model: onnx.ModelProto, target: str) -> list:
    program = aot.build(model, target=target, out_dir=None).program
    return [call.kernel for call in program.calls if call.node.op == "Conv"]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("target", ["host", "cortex-m7", "cortex-m4"])
@pytest.mark.parametrize("model", [mobile_stem, conv_chain])
def test_convolutions_declare_only_what_their_loops_allow(model, target, precision):
    """Each convolution kernel's Reuse, checked against its own loops replayed (kernel_trace), apart
    from the formulas that declared it."""
    from kernel_trace import Trace
    m = model() if precision == "fp32" else int8(model())
    kernels = conv_kernels(m, target)
    assert any(reuse.progress for kernel in kernels for reuse in kernel.reuse)
    for kernel in kernels:
        trace = Trace(kernel)
        for reuse in kernel.reuse:
            trace.check(reuse)


# One convolution each: (input NCHW, weight OIHW, attributes).
EDGE_CONVS = {
    "pointwise-doubling": ((1, 8, 5, 7), (16, 8, 1, 1), {}),
    "pointwise-halving": ((1, 16, 4, 6), (8, 16, 1, 1), {}),
    "depthwise": ((1, 8, 9, 9), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8)),
    "depthwise-strided": ((1, 16, 9, 10), (16, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=16)),
    "dense-strided": ((1, 3, 11, 11), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "dense-dilated": ((1, 4, 9, 9), (8, 4, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    "one-column": ((1, 8, 6, 1), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8)),
    "strides-past-the-window": ((1, 4, 10, 10), (8, 4, 2, 2), dict(strides=[3, 3])),
    "batch": ((2, 8, 4, 4), (16, 8, 1, 1), {}),
}


def edge_conv(case: str) -> onnx.ModelProto:
    x, w, attrs = EDGE_CONVS[case]
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])]
    inits = {"w": rng.standard_normal(w).astype(np.float32) * 0.3,
             "b": rng.standard_normal(w[0]).astype(np.float32) * 0.1}
    return make_model(nodes, {"x": x}, {"y": None}, inits)


# An x86-64 target without AMX, not the host: an AMX host lowers int8 convolutions to tiles on the stack,
# which declare no overlap (lowered here, not run: any x86-64 machine builds for it).
X86 = "x86-64-avx512-vnni"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("target", [X86, "cortex-m7", "cortex-m4"])
@pytest.mark.parametrize("case", list(EDGE_CONVS))
def test_every_loop_order_declares_only_what_it_allows(case, target, precision):
    """Each convolution lowered front to back and back to front, free to compute its first pixels whole,
    at edge shapes: its Reuse checked against its loops replayed. A pointwise convolution doubling the
    channels, back to front, may start at its input's first byte."""
    from kernel_trace import Trace

    from aot.knobs import resolve
    from aot.ops import LowerContext, lower
    from aot.target import get_target
    model = edge_conv(case) if precision == "fp32" else int8(edge_conv(case))
    graph = aot.build(model, target=target, out_dir=None).program.graph
    tgt = get_target(target)
    node = next(n for n in graph.nodes if n.op == "Conv")
    for backward in (False, True):
        ctx = LowerContext(graph, tgt, "edge", resolve(tgt), frozenset({node.name} if backward else ()),
                           frozenset({node.name}))
        kernel = lower(ctx, node, "edge_conv")
        trace = Trace(kernel)
        for reuse in kernel.reuse:
            trace.check(reuse)
        if case == "pointwise-doubling" and backward:
            assert kernel.reuse[0].shift <= 0


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("case", ["dense-strided", "dense-dilated", "strides-past-the-window", "batch"])
def test_border_tiles_declare_only_what_they_allow(case, precision):
    """Dense convolutions with their border columns in whole tiles (conv.Columns, border "tiles"), front
    to back and back to front, with and without leave to compute first pixels whole (which keeps the
    clipped borders): their Reuse checked against their loops replayed."""

    from kernel_trace import Trace

    from aot.knobs import resolve
    from aot.ops import LowerContext, lower
    from aot.ops.conv.geometry import geometry
    from aot.ops.conv.tiling import Columns
    from aot.target import get_target
    model = edge_conv(case) if precision == "fp32" else int8(edge_conv(case))
    graph = aot.build(model, target=X86, out_dir=None).program.graph
    tgt = get_target(X86)
    node = next(n for n in graph.nodes if n.op == "Conv")
    for backward in (False, True):
        for whole in (frozenset(), frozenset({node.name})):
            ctx = LowerContext(graph, tgt, "edge", resolve(tgt, {"mr": 4, "border_tiles": True}),
                               frozenset({node.name} if backward else ()), whole)
            kernel = lower(ctx, node, "edge_conv")
            trace = Trace(kernel)
            for reuse in kernel.reuse:
                trace.check(reuse)
            if not whole:       # the pixels come out in the order of the tiles declarations.progress replays
                g = geometry(graph, node)
                cols = Columns.of(g, 4, "tiles")
                rows = [(n, oh) for n in range(g.n) for oh in range(g.oh)]
                expected = [(n * g.oh + oh) * g.ow + ow + i for n, oh in (rows[::-1] if backward else rows)
                            for ow, width, _ in cols.tiles(0, False) for i in range(width)]
                pixel_bytes = next(p for p in kernel.params if p.name == "out0").nbytes // (g.n * g.oh * g.ow)
                stored = list(dict.fromkeys(lo // pixel_bytes for _, lo, _ in trace.writes["out0"]))
                assert stored == expected


def test_an_optimistic_declaration_is_caught_by_the_replay():
    """Claiming one input pixel more than the pointwise kernel's loops allow is caught."""
    from kernel_trace import Trace
    pointwise = conv_kernels(int8(mobile_stem()), "cortex-m7")[2]
    reuse = pointwise.reuse[0]
    trace = Trace(pointwise)
    trace.check(reuse)
    bolder = dataclasses.replace(reuse, progress=tuple((written, needed + (-8 if reuse.backward else 8))
                                                       for written, needed in reuse.progress))
    assert bolder.shift == reuse.shift - 8
    with pytest.raises(AssertionError, match="breaks its reads"):
        trace.check(bolder)


# x86-64-avx2, not the host: where the host has AMX, its int8 convolutions stage pixels on the stack
# and declare no overlap.
@pytest.mark.parametrize("target", ["x86-64-avx2", pytest.param("cortex-m7", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_pointwise_result_starts_where_its_input_does(target, precision):
    """The pointwise convolution doubling the channels writes its result from its input's first byte
    on (its first pixels computed whole, each read before any of its channels is stored), and the
    strided depthwise one after it writes over it from its first byte too: the workspace is the
    pointwise result alone. The verifier checks every shared byte; the results match onnxruntime."""
    model = mobile_stem() if precision == "fp32" else int8(mobile_stem())
    program = aot.build(model, target=target, out_dir=None).program
    convs = [(step, call) for step, call in enumerate(program.calls) if call.node.op == "Conv"]
    sizes = {b.name: b.size for b in program.buffers}
    for step, call in convs[2:]:
        source, result = (program.roots[call.node.inputs[0]], program.roots[call.node.outputs[0]])
        assert (step, source, result) in {(s, a, b) for s, a, b, _ in program.shared}
        assert program.plan.offsets[source] == program.plan.offsets[result], call.node.name
    pointwise = program.roots[convs[2][1].node.outputs[0]]
    assert program.plan.size == sizes[pointwise]
    result = aot.check(model, target=target)
    assert result.ok, result.comparisons


def test_verify_rejects_a_pointwise_result_below_its_input():
    """One alignment unit further down than the pointwise kernel declared is refused."""
    program = aot.build(int8(mobile_stem()), target="cortex-m7", out_dir=None).program
    call = [c for c in program.calls if c.node.op == "Conv"][2]
    source, result = program.roots[call.node.inputs[0]], program.roots[call.node.outputs[0]]
    steps = [([program.roots[v] for v in c.args[:len(c.args) - len(c.node.outputs)]],
              [program.roots[v] for v in c.node.outputs]) for c in program.calls]
    sizes = {b.name: b.size for b in program.buffers}
    offsets = dict(program.plan.offsets)
    align = program.plan.alignment
    memory.verify(steps, offsets, sizes, program.plan.size, align, program.shared)
    assert offsets[source] == offsets[result]
    offsets = {name: off + align for name, off in offsets.items()}       # room below
    offsets[result] -= align
    with pytest.raises(PlanError, match="overlap"):
        memory.verify(steps, offsets, sizes, program.plan.size + align, align, program.shared)


def test_whole_pixels_only_where_they_shrink_the_workspace():
    """Pixels computed whole cost code: of the stem's four convolutions, only the two that write over their
    input from its first byte keep them; the others are the kernels lowered without."""
    from aot.knobs import resolve
    from aot.ops import LowerContext, lower
    from aot.program import _alternate_rows
    from aot.target import get_target
    program = aot.build(int8(mobile_stem()), target="cortex-m7", out_dir=None).program
    tgt = get_target("cortex-m7")
    lean = LowerContext(program.graph, tgt, "lean", resolve(tgt), _alternate_rows(program.graph))
    convs = [call for call in program.calls if call.node.op == "Conv"]
    whole = [call.node.name for call in convs if lower(lean, call.node, call.kernel.name).reuse != call.kernel.reuse]
    assert whole == [convs[2].node.name, convs[3].node.name]
