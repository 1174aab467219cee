"""Boards over SSH, against a real sshd started on 127.0.0.1 with throwaway keys (nothing else is contacted)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import make_model

import aot
from aot.bench import Stats, bench
from aot.boards import load_board
from aot.target import Region

pytestmark = pytest.mark.ssh
AARCH64_RUNNER = "qemu-aarch64 -L /usr/aarch64-linux-gnu"


def tiny_model():
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    return make_model(nodes, {"x": (1, 3, 8, 8)}, {"y": None}, weights)


def board_file(sshd, tmp_path: Path, name: str = "emulated-aarch64", runner: str = AARCH64_RUNNER,
               known_hosts: str | None = None, identity: str = "user", work_dir: Path | None = None) -> Path:
    work = work_dir or tmp_path / "remote-work"
    work.mkdir(exist_ok=True)
    path = tmp_path / f"{name}.toml"
    known = known_hosts if known_hosts is not None else str(sshd.dir / "known_hosts")
    path.write_text(f'''name = "{name}"
target = "aarch64"
host = "127.0.0.1"
port = {sshd.port}
user = "root"
identity_file = "{sshd.dir / identity}"
known_hosts = "{known}"
work_dir = "{work}"
runner = "{runner}"
''')
    return path


def leftovers(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.startswith("aot."))


def test_bench_on_an_emulated_board_end_to_end(sshd, tmp_path):
    board = board_file(sshd, tmp_path)
    result = bench(tiny_model(), board=str(board), repeat=3, number=2, warmup=1)
    assert result.ok and result.emulated and result.where == "emulated-aarch64" and result.target == "aarch64"
    assert len(result.times_ms) == 3 and all(t > 0 for t in result.times_ms) and result.number == 2
    assert leftovers(tmp_path / "remote-work") == []


def test_a_boards_memory_regions_split_the_workspace_it_is_timed_with(sshd, tmp_path):
    import json

    board = board_file(sshd, tmp_path)
    board.write_text(board.read_text() + '\n[[memory.regions]]\nname = "ocram"\nsize = "1K"\nrank = 0\n'
                     '\n[[memory.regions]]\nname = "ddr"\nsize = "1M"\nrank = 1\n')
    assert load_board(str(board)).regions == (Region("ocram", 1024, 0), Region("ddr", 1 << 20, 1))
    result = bench(tiny_model(), board=str(board), repeat=1, build_dir=tmp_path / "build")
    assert result.ok, result.comparisons
    regions = json.loads((tmp_path / "build" / "plan.json").read_text())["regions"]
    assert [r["name"] for r in regions] == ["ocram", "ddr"] and all(r["size"] > 0 for r in regions)


def test_a_board_memory_table_holds_only_regions(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\ntarget = "aarch64"\nhost = "h"\nuser = "u"\n[memory]\nram = "1M"\n')
    with pytest.raises(aot.OptionError, match=r"memory.ram: not a key of \[memory\] \(keys: regions\)"):
        load_board(str(path))
    path.write_text('name = "b"\ntarget = "aarch64"\nhost = "h"\nuser = "u"\n[[memory.regions]]\nname = "x"\n')
    with pytest.raises(aot.OptionError, match=r"b.toml: memory.regions\[0\]: missing 'size', 'rank'"):
        load_board(str(path))


def test_cli_bench_prints_a_table_and_writes_json(sshd, tmp_path):
    import json

    board = board_file(sshd, tmp_path)
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    proc = subprocess.run([sys.executable, "-m", "aot", "bench", str(model), "--board", str(board), "--repeat", "2",
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "median ms" in proc.stdout and "emulated" in proc.stdout and "ok" in proc.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["results"][0]["board"] == "emulated-aarch64" and len(data["results"][0]["repeat_ms"]) == 2


def test_unknown_host_key_is_refused_unless_accepted(sshd, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    board = board_file(sshd, tmp_path, known_hosts=str(empty))
    with pytest.raises(aot.RunError, match="unknown host key"):
        bench(tiny_model(), board=str(board), repeat=1)
    result = bench(tiny_model(), board=str(board), repeat=1, accept_new_host_key=True)
    assert result.ok and f"[127.0.0.1]:{sshd.port}" in empty.read_text()


def test_a_key_the_board_does_not_know_is_a_clear_error(sshd, tmp_path):
    board = board_file(sshd, tmp_path, identity="stranger")
    with pytest.raises(aot.RunError, match="SSH failed: Authentication failed"):
        bench(tiny_model(), board=str(board), repeat=1)


def test_remote_failure_and_hang_are_reported_and_cleaned_up(sshd, tmp_path):
    failing = board_file(sshd, tmp_path, name="failing", runner="sh -c 'exit 3' --")
    with pytest.raises(aot.RunError, match="exited with status 3"):
        bench(tiny_model(), board=str(failing), repeat=1)
    hanging = board_file(sshd, tmp_path, name="hanging", runner="sh -c 'sleep 30' --")
    start = time.time()
    with pytest.raises(aot.RunError, match="did not finish within 3 s"):
        bench(tiny_model(), board=str(hanging), repeat=1, timeout=3)
    assert time.time() - start < 25
    assert leftovers(tmp_path / "remote-work") == []


def test_shell_metacharacters_in_names_run_nothing(sshd, tmp_path):
    work = tmp_path / "work dir; touch PWNED"
    work.mkdir()
    model = tmp_path / "my model; touch PWNED2.onnx"
    onnx.save(tiny_model(), model)
    board = board_file(sshd, tmp_path, name="odd", work_dir=work)
    assert bench(str(model), board=str(board), repeat=1).ok
    assert not list(tmp_path.rglob("PWNED*")) and not Path("PWNED").exists()
    assert leftovers(work) == []


def test_boards_check_reports_the_machine(sshd, tmp_path):
    board = board_file(sshd, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "aot", "boards", str(board), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "uname -m = x86_64" in proc.stdout and "emulated aarch64" in proc.stdout


def test_password_in_a_board_file_is_refused(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\ntarget = "aarch64"\nhost = "h"\nuser = "u"\npassword = "hunter2"\n')
    with pytest.raises(aot.OptionError, match="passwords are not accepted"):
        load_board(str(path))


@pytest.mark.parametrize("times,expected", [
    ([3.0, 1.0, 2.0], Stats(1.0, 2.0, 2.0, 2.8, 0.816496580927726, 3.0)),
    ([5.0], Stats(5.0, 5.0, 5.0, 5.0, 0.0, 5.0)),
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], Stats(1.0, 5.5, 5.5, 9.1, 2.8722813232690143, 10.0)),
])
def test_latency_statistics(times, expected):
    got = Stats.of(times)
    for field in ("min", "median", "mean", "p90", "stddev", "max"):
        assert getattr(got, field) == pytest.approx(getattr(expected, field)), field
    assert got.p90 == pytest.approx(float(np.percentile(times, 90)))


def test_timing_harness_times_only_the_run_call(tmp_path):
    from aot.bench import _render_timing

    artifact = aot.build(tiny_model(), out_dir=tmp_path / "b", name="net")
    _render_timing(artifact, tmp_path / "timing.c", profile=False)
    source = (tmp_path / "timing.c").read_text()
    import re
    spans = re.findall(r"start = now_ns\(\);(.*?)elapsed \+?= now_ns\(\) - start;", source, re.S)
    assert len(spans) == 2          # back-to-back runs, and (tuning) each run alone after cold caches
    for timed in spans:
        statements = [line.strip() for line in timed.strip().splitlines()]
        assert "net_run(&in, &out, workspace);" in statements
        assert set(statements) <= {"for (i = 0; i < number; i++)", "net_run(&in, &out, workspace);"}


def test_tune_on_a_board_times_there_and_cleans_up(sshd, tmp_path):
    from aot.tune import tune

    board = load_board(str(board_file(sshd, tmp_path)))
    log = tmp_path / "records.json"
    results = tune(tiny_model(), board=board, records=log, budget_s=120, trials=3)
    import json
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records and all(r["where"] == "board emulated-aarch64" and r["unit"] == "ms" for r in records)
    assert all(r["target"] == "aarch64" and r["error"] is None and r["cost"] > 0 for r in records)
    assert results[0].best_cost <= results[0].default_cost
    assert leftovers(tmp_path / "remote-work") == []


def test_validate_on_a_linux_board_uploads_the_harness_once(sshd, tmp_path, monkeypatch):
    """aot validate over SSH: one connection and one upload of the harness, each sample's inputs after it; the
    outputs against onnxruntime's."""
    from aot.remote import ssh
    from aot.validate import validate

    sessions, uploads = [], []
    real_init, real_upload = ssh.Session.__init__, ssh.Session.upload

    def init(self, *args, **kwargs):
        sessions.append(1)
        real_init(self, *args, **kwargs)

    def upload(self, files):
        uploads.append([f.name for f in files])
        real_upload(self, files)
    monkeypatch.setattr(ssh.Session, "__init__", init)
    monkeypatch.setattr(ssh.Session, "upload", upload)
    board = board_file(sshd, tmp_path)
    rng = np.random.default_rng(2)
    samples = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    result = validate(tiny_model(), samples, board=str(board))
    assert result.ok and result.where == "board emulated-aarch64 (aarch64)" and result.samples == 3
    assert sessions == [1] and uploads == [["prog"], ["input_0.bin"], ["input_0.bin"], ["input_0.bin"]]
    assert result.metrics[0].within_tolerance == 3 and result.metrics[0].l2r < 1e-5
    assert leftovers(tmp_path / "remote-work") == []
