"""`aot tune`: workloads measured alone (timed on the host, counted under qemu), one JSON record per
measurement, resumable, and the records give a build whose outputs still match onnxruntime."""

import json
import statistics
import subprocess
import sys

import numpy as np
import onnx
import pytest
from test_dsp_kernels import qdq_conv
from test_schedules import matches, two_convs

import aot
from aot.errors import OptionError
from aot.schedule import best_records
from aot.tune import CONFIRM_LEADERS, parse_budget, same_outputs, tune

FIELDS = {"workload", "target", "schedule", "cost", "unit", "error", "where", "measured_at", "aot", "target_sha256"}


def aot_cli(*args):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_host_tuning_logs_records_resumes_and_builds_from_them(tmp_path):
    log = tmp_path / "records.json"
    results = tune(two_convs(), "x86-64-avx2", records=log, budget_s=120, trials=4)
    assert {r.key.split()[0] for r in results} == {"dense", "depthwise"}
    first = lines(log)
    assert all(set(r) == FIELDS and r["unit"] == "ms" and r["where"] == "host" for r in first)
    assert all(r["error"] is None for r in first), [r["error"] for r in first if r["error"]]
    for r in results:      # a schedule's cost is the median of its measurements; the best has the lowest
        mine = [x for x in first if x["workload"] == r.key]
        by_schedule = {}
        for x in mine:
            by_schedule.setdefault(json.dumps(x["schedule"], sort_keys=True), []).append(x["cost"])
        assert mine[0]["schedule"] == r.best.describe() or r.best_cost < statistics.median(
            by_schedule[json.dumps(mine[0]["schedule"], sort_keys=True)])      # the default is measured first
        assert r.best_cost == min(statistics.median(c) for c in by_schedule.values())
        assert r.default_cost == statistics.median(by_schedule[json.dumps(mine[0]["schedule"], sort_keys=True)])
        assert len(by_schedule) <= 4        # the default and at most three candidates
        assert all(len(c) >= 2 for c in by_schedule.values()) or len(by_schedule) == 1     # timed again
    tune(two_convs(), "x86-64-avx2", records=log, budget_s=120, trials=2)
    second = lines(log)[len(first):]

    def schedules_of(rows):
        return {(r["workload"], json.dumps(r["schedule"], sort_keys=True)) for r in rows}
    assert schedules_of(second) - schedules_of(first)       # the search went on where it stopped
    again = schedules_of(second) & schedules_of(first)      # only the default and leaders are timed again
    for key in {w for w, _ in again}:
        assert len([s for w, s in again if w == key]) <= 1 + CONFIRM_LEADERS
    built = aot.build(two_convs(), target="x86-64-avx2", out_dir=tmp_path / "b", records=log)
    assert all(s["source"] == "records" for s in built.metadata["schedules"])
    matches(two_convs(), target="x86-64-avx2", records=log)


def test_emulated_tuning_ranks_by_estimated_cycles_or_by_instructions(tmp_path):
    """Under qemu a Cortex-M4 kernel is priced in cycles estimated for the core (aot/run/cycles.py);
    `unit="instructions"` counts instructions instead. Costs in one unit never rank against the other's:
    a second run in the other unit measures again, and a build takes the unit of the latest records."""
    model, _ = qdq_conv(8, 16, 3, 1, 1, (6, 9))
    log = tmp_path / "m4.json"
    results = tune(model, "cortex-m4", records=log, budget_s=240, trials=4)
    first = lines(log)
    assert first and all(r["unit"] == "estimated cycles" and "qemu" in r["where"] for r in first)
    ok = [r for r in first if r["error"] is None]
    assert ok and all(float(r["cost"]).is_integer() and r["cost"] > 0 for r in ok)
    assert results[0].best_cost <= results[0].default_cost
    tune(model, "cortex-m4", records=log, budget_s=240, trials=4, unit="instructions")
    second = lines(log)[len(first):]
    assert len(second) == len(first) and all(r["unit"] == "instructions" for r in second)
    key = first[0]["workload"]
    ranked = best_records(lines(log), "cortex-m4")[key]
    instructions = {json.dumps(r["schedule"], sort_keys=True): r["cost"] for r in second if r["error"] is None}
    assert instructions[json.dumps(ranked[0], sort_keys=True)] == min(instructions.values())


def test_a_wrong_result_is_caught_against_the_default_schedule():
    want = {"y": np.linspace(-1, 1, 50, dtype=np.float32)}
    assert same_outputs({"y": want["y"] + 1e-7}, want) is None
    assert "differs" in same_outputs({"y": want["y"] + 1e-3}, want)
    ints = {"y": np.arange(10, dtype=np.int8)}
    assert same_outputs({"y": ints["y"].copy()}, ints) is None
    assert "1 elements" in same_outputs({"y": ints["y"] + np.eye(1, 10, 3, dtype=np.int8)[0]}, ints)
    assert "missing" in same_outputs({}, ints)


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("1.5m", 90)])
def test_budgets(text, seconds):
    assert parse_budget(text) == seconds


def test_bad_tune_options_are_one_line(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(two_convs(), model)
    for args, needle in ((["--budget", "soon"], "give a duration"), (["--trials", "0"], "--trials must be"),
                         (["--target", "nowhere"], "nowhere")):
        proc = aot_cli("tune", model, *args, "-o", tmp_path / "r.json")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    with pytest.raises(OptionError, match="no kernel with a schedule"):
        relu = onnx.helper.make_node("Relu", ["x"], ["y"])
        from oracle import make_model
        tune(make_model([relu], {"x": (1, 4)}, {"y": None}), "x86-64-avx2", records=tmp_path / "r.json")
