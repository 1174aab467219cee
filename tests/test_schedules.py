"""Schedules as data: every templated kernel records its schedule and workload, its symbol says its tile,
and a schedule can be set per node, per workload or from tuning records; whatever the schedule, the
outputs match onnxruntime; impossible or misspelled schedules get one clear line."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import assert_matches_onnxruntime, make_model

import aot
from aot.errors import OptionError


def aot_cli(*args):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True)


def two_convs():
    """Two 3x3 convolutions of the same shapes (one workload) and a depthwise one."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="first", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="second", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c2", "w3"], ["y"], name="depthwise", pads=[1, 1, 1, 1], group=16)]
    inits = {"w1": rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2,
             "b1": rng.standard_normal(16).astype(np.float32),
             "w2": rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2,
             "b2": rng.standard_normal(16).astype(np.float32),
             "w3": rng.standard_normal((16, 1, 3, 3)).astype(np.float32)}
    return make_model(nodes, {"x": (1, 16, 11, 11)}, {"y": None}, inits)


def schedules(artifact):
    return {s["node"]: s for s in artifact.metadata["schedules"]}


def matches(model, **options):
    x = np.random.default_rng(1).standard_normal((1, 16, 11, 11)).astype(np.float32)
    expected = assert_matches_onnxruntime(model, {"x": x})
    got = aot.run(model, {"x": x}, **options)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-4, atol=1e-4 * np.abs(expected["y"]).max())


def test_every_templated_kernel_records_its_schedule_and_its_symbol_says_the_tile(tmp_path):
    artifact = aot.build(two_convs(), out_dir=tmp_path)
    chosen = schedules(artifact)
    assert set(chosen) == {"first", "second", "depthwise"}
    assert chosen["first"]["workload"] == chosen["second"]["workload"]
    assert chosen["first"]["workload"].startswith("dense 1x11x11x16>16 k3x3 s1x1 d1x1 p1,1,1,1 g1 f32")
    assert chosen["depthwise"]["template"] == "depthwise"
    knobs = artifact.metadata["knobs"]
    for s in chosen.values():
        assert s["source"] == "default"
        assert s["kernel"].endswith(f"_{s['mr']}x{s['nr']}" + ("_wouter" if s.get("loop") == "weights" else "")
                                    + ("_btiles" if s.get("border") == "tiles" else ""))
    assert (chosen["first"]["mr"], chosen["first"]["nr"]) == (knobs["mr"], knobs["nr"])
    symbols = subprocess.run(["nm", str(artifact.object)], capture_output=True, text=True).stdout
    assert all(s["kernel"] in symbols for s in chosen.values())


def test_per_node_and_per_workload_overrides(tmp_path):
    model = two_convs()
    probe = schedules(aot.build(model, out_dir=tmp_path / "probe"))
    key = probe["first"]["workload"]
    knobs = {"node": {"second": {"mr": 3, "nr": 1, "loop": "weights"}}, "workload": {key: {"mr": 2}}}
    chosen = schedules(aot.build(model, out_dir=tmp_path / "b", knobs=knobs))
    assert (chosen["second"]["mr"], chosen["second"]["nr"], chosen["second"]["loop"]) == (3, 1, "weights")
    assert chosen["second"]["source"] == "node" and chosen["second"]["kernel"].endswith("_3x1_wouter_btiles")
    assert chosen["first"]["mr"] == 2 and chosen["first"]["source"] == "workload"     # the node wins over it
    assert chosen["depthwise"]["source"] == "default"
    matches(model, knobs=knobs)


def test_knobs_file_tables_on_the_command_line(tmp_path):
    model, knobs = tmp_path / "m.onnx", tmp_path / "knobs.toml"
    onnx.save(two_convs(), model)
    knobs.write_text('mr = 4\n[node.depthwise]\nmr = 2\nnr = 1\n')
    proc = aot_cli("build", model, "--knobs", knobs, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    chosen = {s["node"]: s for s in json.loads((tmp_path / "out" / "metadata.json").read_text())["schedules"]}
    assert (chosen["depthwise"]["mr"], chosen["depthwise"]["nr"]) == (2, 1) and chosen["first"]["mr"] == 4


@pytest.mark.parametrize("knobs, needle", [
    ({"node": {"nowhere": {"mr": 2}}}, "[node.nowhere]: no kernel with a schedule has that node"),
    ({"workload": {"dense 1x2x3": {"mr": 2}}}, "no kernel with a schedule has that workload"),
    ({"node": {"depthwise": {"loop": "weights"}}}, "the depthwise template has no loop"),
    ({"node": {"first": {"mr": 8, "nr": 4}}}, "the 8x4 dense tile needs 32 vector registers for accumulators"),
    ({"node": {"first": {"loop": "sideways"}}}, "loop must be one of pixels, weights"),
    ({"node": {"first": {"channels": "pairs"}}}, "the dense template has no channels"),
    ({"node": {"first": {"kc": 4}}}, "unknown schedule field 'kc'"),
    ({"node": {"first": {"mr": "4"}}}, "'mr' must be an integer"),
])
def test_bad_schedules_are_refused_naming_the_node(tmp_path, knobs, needle):
    with pytest.raises(OptionError) as err:
        aot.build(two_convs(), target="x86-64-avx2", out_dir=tmp_path / "out", knobs=knobs)
    assert needle in str(err.value)
    assert not (tmp_path / "out").exists()


def test_bad_table_in_a_knobs_file_is_one_line_naming_the_file(tmp_path):
    model, knobs = tmp_path / "m.onnx", tmp_path / "knobs.toml"
    onnx.save(two_convs(), model)
    knobs.write_text('[node.first]\nmx = 2\n')
    proc = aot_cli("build", model, "--knobs", knobs, "-o", tmp_path / "out")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(knobs) in proc.stderr and "'mx'" in proc.stderr


def record(workload, target, cost, error=None, **schedule):
    return {"workload": workload, "target": target, "schedule": {"template": "dense", **schedule},
            "cost": cost, "error": error}


def test_records_apply_the_best_measurement_per_workload(tmp_path):
    model = two_convs()
    key = schedules(aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "probe"))["first"]["workload"]
    log = tmp_path / "records.json"
    rows = [record(key, "x86-64-avx2", 2.0, mr=4, nr=1, loop="pixels"),
            record(key, "x86-64-avx2", 1.0, mr=3, nr=2, loop="pixels"),
            record(key, "x86-64-avx2", 0.5, error="mismatch", mr=5, nr=1, loop="pixels"),
            record(key, "aarch64", 0.1, mr=8, nr=3, loop="pixels")]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "a", records=log)
    chosen = schedules(first)
    for node in ("first", "second"):
        assert (chosen[node]["mr"], chosen[node]["nr"], chosen[node]["loop"], chosen[node]["source"]) == \
               (3, 2, "pixels", "records")
    assert chosen["depthwise"]["source"] == "default"
    assert first.metadata["knobs"]["records"] == {"file": "records.json", "workloads": 1}
    again = aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "b", records=log)
    for f in sorted(p.name for p in first.dir.iterdir()):
        assert (first.dir / f).read_bytes() == (again.dir / f).read_bytes(), f
    matches(model, target="x86-64-avx2", records=log)


def test_records_for_another_target_only_are_an_error(tmp_path):
    log = tmp_path / "records.json"
    log.write_text(json.dumps(record("dense 1x1", "aarch64", 1.0, mr=8, nr=3)) + "\n")
    model = tmp_path / "m.onnx"
    onnx.save(two_convs(), model)
    proc = aot_cli("build", model, "--target", "x86-64-avx2", "--records", log, "-o", tmp_path / "out")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "no successful measurement for target x86-64-avx2" in proc.stderr and "aarch64" in proc.stderr
    log.write_text("{not json\n")
    proc = aot_cli("build", model, "--records", log, "-o", tmp_path / "out")
    assert proc.returncode == 1 and f"{log}:1: not a JSON record" in proc.stderr


def chain_of_pointwise():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="a"), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="b"), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="c")]
    inits = {k: rng.standard_normal((16, 16, 1, 1)).astype(np.float32) for k in ("w1", "w2", "w3")}
    return make_model(nodes, {"x": (1, 16, 8, 8)}, {"y": None}, inits)


def test_records_that_would_grow_the_workspace_step_down_to_the_next_record(tmp_path):
    # weight panels outside read the whole input for each panel, so the result cannot overlap it
    model = chain_of_pointwise()
    untuned = aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "u")
    key = untuned.metadata["schedules"][0]["workload"]
    log = tmp_path / "records.json"
    log.write_text(json.dumps(record(key, "x86-64-avx2", 1.0, mr=4, nr=2, loop="weights")) + "\n"
                   + json.dumps(record(key, "x86-64-avx2", 2.0, mr=3, nr=2, loop="pixels")) + "\n")
    kept = aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "k", records=log)
    assert kept.plan["workspace_size"] <= untuned.plan["workspace_size"]
    stepped = kept.metadata["knobs"]["records"]["ranks"]
    assert stepped and all(rank == 1 for rank in stepped.values())
    for s in kept.metadata["schedules"]:
        assert s["source"] == "records" and s.get("loop") == ("pixels" if s["node"] in stepped else "weights")
    grown = aot.build(model, target="x86-64-avx2", out_dir=tmp_path / "g", records=log,
                      knobs={"records_keep_workspace": False})
    assert all(s["loop"] == "weights" for s in grown.metadata["schedules"])
    assert grown.plan["workspace_size"] > untuned.plan["workspace_size"]
