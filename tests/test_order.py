"""The execution order search (aot/plan/order.py): exact against brute force on small graphs, valid and
fast on large ones, and in builds: a smaller workspace on branching graphs, still matching onnxruntime."""

from __future__ import annotations

import filecmp
import itertools
import re
import time

import numpy as np
import pytest
from onnx import helper

import aot
from aot.plan import order

try:
    from oracle import make_model
except ImportError:  # tests/ imported as a package
    from tests.oracle import make_model


# --------------------------------------------------------------------------- the search on its own


def random_dag(seed: int, count: int, skip: float = 0.3) -> tuple[list[tuple[list[str], list[str]]], dict[str, int]]:
    """`count` steps, each writing one buffer of a random size and reading the previous one most of the
    time and any earlier one with probability `skip`; the first reads the caller's input (no bytes)."""
    rng = np.random.default_rng(seed)
    steps: list[tuple[list[str], list[str]]] = []
    sizes: dict[str, int] = {}
    for i in range(count):
        reads = [f"t{j}" for j in range(i) if rng.random() < (0.6 if j == i - 1 else skip)]
        if i == 0:
            reads = ["x"]
        elif not reads:
            reads = [f"t{int(rng.integers(i))}"]
        steps.append((reads, [f"t{i}"]))
        sizes[f"t{i}"] = int(rng.choice([16, 32, 64, 128, 256, 512]))
    return steps, sizes


def topological(steps, candidate) -> bool:
    """Every buffer a step reads was written by a step before it (or by no step at all)."""
    writer = {name: i for i, (_, writes) in enumerate(steps) for name in writes}
    position = {step: k for k, step in enumerate(candidate)}
    return sorted(candidate) == list(range(len(steps))) and all(
        name not in writer or position[writer[name]] < position[i] for i, (reads, _) in enumerate(steps)
        for name in reads)


def brute_force(steps, sizes) -> int:
    return min(order.peak(steps, sizes, p) for p in itertools.permutations(range(len(steps)))
               if topological(steps, p))


@pytest.mark.parametrize("seed", range(40))
def test_search_is_exact_on_small_graphs(seed):
    steps, sizes = random_dag(seed, int(np.random.default_rng(seed).integers(2, 9)))
    found = order.search(steps, sizes)
    assert topological(steps, found)
    assert order.peak(steps, sizes, found) == brute_force(steps, sizes)


def test_random_small_graphs_leave_room_to_reorder():
    """The exactness test is not vacuous: on many of its graphs the given order is not the best."""
    worse = 0
    for seed in range(40):
        steps, sizes = random_dag(seed, int(np.random.default_rng(seed).integers(2, 9)))
        worse += order.peak(steps, sizes) > brute_force(steps, sizes)
    assert worse >= 8


def test_peak_counts_live_bytes_per_step():
    # a (100) read by b and d; b (10) read by c; the peak is step c: a + b + c
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["a", "c"], ["d"])]
    sizes = {"a": 100, "b": 10, "c": 1, "d": 1000}
    assert order.peak(steps, sizes) == 100 + 1 + 1000
    assert order.peak(steps, {**sizes, "d": 0}) == 111


def test_ties_keep_the_given_order():
    # two independent chains of equal cost: any interleaving ties, so nothing moves
    steps = [(["x"], ["a1"]), (["x"], ["b1"]), (["a1"], ["a2"]), (["b1"], ["b2"]), (["a2", "b2"], ["y"])]
    sizes = {"a1": 64, "b1": 64, "a2": 64, "b2": 64}
    assert order.search(steps, sizes) == tuple(range(len(steps)))


def test_branch_that_grows_runs_alone():
    """Two branches that each grow a large tensor and shrink it: interleaved, both large tensors are live
    at once; one branch after the other, never."""
    steps = [(["x"], ["a1"]), (["x"], ["b1"]), (["a1"], ["a2"]), (["b1"], ["b2"]), (["a2", "b2"], ["y"])]
    sizes = {"a1": 1000, "b1": 1000, "a2": 10, "b2": 10}
    found = order.search(steps, sizes)
    assert found == (0, 2, 1, 3, 4)
    assert order.peak(steps, sizes, found) == 1020 < order.peak(steps, sizes) == 2010


def test_cut_points_split_the_search():
    # a chain, then a diamond: each link of the chain and the diamond's ends stand alone
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["l"]), (["b"], ["r"]), (["l", "r"], ["y"])]
    segments = order._Flow(steps, {}).segments()
    assert segments == [[0], [1], [2, 3], [4]]


def test_a_later_write_of_a_name_waits_for_its_readers():
    """A step that writes a name again depends on the steps that touched it before (not only on what it
    reads): no order may run it ahead of them."""
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["x"], ["a"]), (["a"], ["c"])]
    preds = order._Flow(steps, {}).preds
    assert preds == [0, 0b1, 0b11, 0b101]


@pytest.mark.parametrize("count, skip", [(500, 0.01), (500, 0.05), (200, 0.2)])
def test_large_graphs_stay_fast_and_valid(count, skip):
    steps, sizes = random_dag(count, count, skip)
    start = time.perf_counter()
    found = order.search(steps, sizes)
    elapsed = time.perf_counter() - start
    assert topological(steps, found)
    assert order.peak(steps, sizes, found) <= order.peak(steps, sizes)
    assert elapsed < 10, elapsed       # about half a second alone; the margin is for a busy machine


def test_search_is_deterministic():
    steps, sizes = random_dag(7, 120, 0.1)
    assert order.search(steps, sizes) == order.search(steps, sizes)


# --------------------------------------------------------------------------- in builds


def weights(rng, *shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def two_branches():
    """Two branches from x, each widening to 32 channels and narrowing to 2, listed interleaved: the
    graph's order holds both wide tensors at once."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa1"], ["a1"], name="a1"), n("Conv", ["x", "wb1"], ["b1"], name="b1"),
             n("Conv", ["a1", "wa2"], ["a2"], name="a2"), n("Conv", ["b1", "wb2"], ["b2"], name="b2"),
             n("Concat", ["a2", "b2"], ["y"], name="cat", axis=1)]
    inits = {"wa1": weights(rng, 32, 4, 1, 1), "wb1": weights(rng, 32, 4, 1, 1),
             "wa2": weights(rng, 2, 32, 1, 1), "wb2": weights(rng, 2, 32, 1, 1)}
    return make_model(nodes, {"x": (1, 4, 16, 16)}, {"y": None}, inits)


def inception():
    """An Inception block: 1x1; 1x1 then 3x3; 1x1 then 5x5; 3x3 max pool then 1x1, joined by Concat, its
    nodes listed breadth first (each branch's wide middle tensor is live alongside the others)."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["p0"], name="b0"),
             n("Conv", ["x", "w1a"], ["p1a"], name="b1a"),
             n("Conv", ["x", "w2a"], ["p2a"], name="b2a"),
             n("MaxPool", ["x"], ["p3a"], name="b3a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("Relu", ["p1a"], ["r1a"], name="r1a"),
             n("Relu", ["p2a"], ["r2a"], name="r2a"),
             n("Conv", ["r1a", "w1b"], ["p1b"], name="b1b", pads=[1, 1, 1, 1]),
             n("Conv", ["r2a", "w2b"], ["p2b"], name="b2b", pads=[2, 2, 2, 2]),
             n("Conv", ["p3a", "w3b"], ["p3b"], name="b3b"),
             n("Concat", ["p0", "p1b", "p2b", "p3b"], ["y"], name="cat", axis=1)]
    inits = {"w0": weights(rng, 4, 16, 1, 1), "w1a": weights(rng, 24, 16, 1, 1), "w1b": weights(rng, 4, 24, 3, 3),
             "w2a": weights(rng, 24, 16, 1, 1), "w2b": weights(rng, 4, 24, 5, 5), "w3b": weights(rng, 4, 16, 1, 1)}
    return make_model(nodes, {"x": (1, 16, 12, 12)}, {"y": None}, inits)


MODELS = {"two_branches": two_branches, "inception": inception}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("share_memory", [True, False])
def test_searched_order_needs_a_smaller_workspace(model, share_memory, tmp_path):
    knobs = {"share_memory": share_memory}
    searched = aot.build(MODELS[model](), out_dir=tmp_path / "a", knobs=knobs)
    given = aot.build(MODELS[model](), out_dir=tmp_path / "b", knobs={**knobs, "reorder": False})
    assert searched.program.order.changed
    assert searched.program.plan.size == searched.program.order.searched
    # the kernels may differ between the two builds (those computing pixels whole are kept only where the
    # plan of the order that runs needs them), so the graph's order with the searched build's kernels
    # needs no less than the build made for that order
    assert searched.program.order.graph_order >= given.program.plan.size
    assert searched.program.plan.size < given.program.plan.size
    assert [c.node.name for c in given.program.calls] != [c.node.name for c in searched.program.calls]


@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
@pytest.mark.parametrize("model", MODELS)
def test_searched_order_matches_onnxruntime(model, target):
    result = aot.check(MODELS[model](), target=target)
    assert result.comparisons and result.ok, result.comparisons


@pytest.mark.parametrize("model", MODELS)
def test_plan_json_steps_are_a_topological_order(model, tmp_path):
    artifact = aot.build(MODELS[model](), out_dir=tmp_path / "b")
    plan = artifact.plan
    assert plan["order"] == {"searched": True, "graph_order_workspace": artifact.program.order.graph_order,
                             "searched_order_workspace": plan["workspace_size"]}
    external = {e["tensor"] for e in plan["external"]} | {v for e in plan["external"] for v in e["views"]}
    written = set(external)
    for step in plan["steps"]:
        assert set(step["reads"]) <= written, step
        written |= set(step["writes"])
        written |= {v for b in plan["buffers"] if b["tensor"] in step["writes"] for v in b["views"]}
    # kernel symbols name the step they run at
    assert [re.search(r"_k(\d+)_", s["kernel"]).group(1) for s in plan["steps"]] == \
        [str(i) for i in range(len(plan["steps"]))]


def test_report_says_which_order_ran(tmp_path):
    searched = aot.build(two_branches(), out_dir=tmp_path / "a").report
    given = aot.build(two_branches(), out_dir=tmp_path / "b", knobs={"reorder": False}).report
    line = next(line for line in searched.splitlines() if line.strip().startswith("order"))
    assert "searched" in line and "in the graph's order" in line
    assert "knob reorder = false" in given


def test_reordered_builds_are_byte_identical(tmp_path):
    for d in ("a", "b"):
        aot.build(inception(), out_dir=tmp_path / d, name="net")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", files, shallow=False)
    assert match == files, (mismatch, errors)


def test_a_chain_keeps_the_graph_order(tmp_path):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1"), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="c2")]
    model = make_model(nodes, {"x": (1, 4, 8, 8)}, {"y": None}, {"w1": weights(rng, 8, 4, 1, 1),
                                                                  "w2": weights(rng, 4, 8, 1, 1)})
    artifact = aot.build(model, out_dir=tmp_path / "b")
    assert not artifact.program.order.changed and artifact.program.order.searched is None
    assert artifact.plan["order"]["searched"] is False
