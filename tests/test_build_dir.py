"""The output directory is the user's (aot/build_dir.py): a build replaces only the files an earlier build
listed in the directory's metadata.json, and every other file survives a build, a rebuild with other
--emit stages, a failing build, one in the way of a user's file, and one interrupted by Ctrl-C."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
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
from aot import build_dir
from aot.errors import OptionError


def aot_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def _model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, {"x": (1, 3, 8, 8)}, {"y": (1, 4, 8, 8)}, {"w": w})


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(_model(), path)
    return path


def firmware_folder(root: Path) -> dict[str, bytes]:
    """A firmware engineer's folder: sources, a subfolder, a read-only file, a hidden one."""
    files = {"main.c": b"int main(void){return 0;}\n", "Makefile": b"all:\n", "src/board.c": b"/* board */\n",
             "README": b"notes\n", ".gitignore": b"*.o\n", "linker.ld": b"/* flash */\n"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "linker.ld").chmod(stat.S_IRUSR | stat.S_IRGRP)
    return files


def assert_survived(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert (root / name).read_bytes() == data, f"{name} changed"
    assert not [p.name for p in root.iterdir() if p.name.endswith(build_dir._TEMPORARY)], "temporary files left"


def listed(root: Path) -> set[str]:
    return set(json.loads((root / "metadata.json").read_text())["files"])


def test_user_files_survive_a_build_and_a_rebuild_with_other_stages(model_file, tmp_path):
    fw = tmp_path / "fw"
    fw.mkdir()
    mine = firmware_folder(fw)
    proc = aot_cli("build", model_file, "-o", fw, "--emit", "graph,kir")
    assert proc.returncode == 0, proc.stderr
    assert_survived(fw, mine)
    assert {"net.graph.txt", "net.kir.txt", "net.o", "net.h"} <= listed(fw)
    proc = aot_cli("build", model_file, "-o", fw, "--emit", "llvm")
    assert proc.returncode == 0, proc.stderr
    assert_survived(fw, mine)
    assert not (fw / "net.graph.txt").exists() and (fw / "net.ll").exists()    # aot's own stale stages go
    assert {p.name for p in fw.iterdir() if p.is_file()} == listed(fw) | {"metadata.json"} | {
        n for n in mine if "/" not in n}
    for name, sha in json.loads((fw / "metadata.json").read_text())["files"].items():
        assert hashlib.sha256((fw / name).read_bytes()).hexdigest() == sha


def test_build_into_the_current_directory(model_file, tmp_path):
    mine = firmware_folder(tmp_path)
    proc = aot_cli("build", model_file, "-o", ".", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "net.o").exists() and (tmp_path / "metadata.json").exists()
    assert_survived(tmp_path, mine)


def test_a_failing_build_leaves_the_previous_one(model_file, tmp_path):
    fw = tmp_path / "fw"
    fw.mkdir()
    mine = firmware_folder(fw)
    assert aot_cli("build", model_file, "-o", fw).returncode == 0
    before = {p.name: p.read_bytes() for p in fw.iterdir() if p.is_file()}
    proc = aot_cli("build", model_file, "-o", fw, "--memory", "flash=100")        # over the flash
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in fw.iterdir() if p.is_file()} == before
    assert_survived(fw, mine)


def test_a_failing_write_leaves_the_previous_one(model_file, tmp_path, monkeypatch):
    fw = tmp_path / "fw"
    aot.build(str(model_file), out_dir=fw)
    before = {p.name: p.read_bytes() for p in fw.iterdir()}
    real = build_dir.os.fdopen
    calls = []

    def failing(fd, *args, **kwargs):      # the disk fills up at the fourth file
        calls.append(fd)
        if len(calls) == 4:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real(fd, *args, **kwargs)
    monkeypatch.setattr(build_dir.os, "fdopen", failing)
    with pytest.raises(OptionError, match="No space left on device"):
        aot.build(str(model_file), out_dir=fw, name="other")
    assert {p.name: p.read_bytes() for p in fw.iterdir()} == before


@pytest.mark.parametrize("name", ["net.c", "plan.json", "metadata.json"])
def test_a_users_file_in_the_way_stops_the_build_before_it_starts(model_file, tmp_path, name):
    fw = tmp_path / "fw"
    fw.mkdir()
    (fw / name).write_text("the user's own\n")
    proc = aot_cli("build", model_file, "-o", fw)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and str(fw / name) in line and "not written by aot" in line
    assert [p.name for p in fw.iterdir()] == [name] and (fw / name).read_text() == "the user's own\n"


def test_an_aot_file_the_user_changed_is_not_overwritten(model_file, tmp_path):
    fw = tmp_path / "fw"
    assert aot_cli("build", model_file, "-o", fw).returncode == 0
    (fw / "net.c").write_text((fw / "net.c").read_text() + "/* my change */\n")
    proc = aot_cli("build", model_file, "-o", fw)
    assert proc.returncode != 0 and "net.c was changed since aot wrote it" in proc.stderr
    assert (fw / "net.c").read_text().endswith("/* my change */\n")
    (fw / "net.c").unlink()             # deleted: aot writes it anew
    assert aot_cli("build", model_file, "-o", fw).returncode == 0


def test_a_changed_stale_file_is_left(model_file, tmp_path):
    fw = tmp_path / "fw"
    aot.build(str(model_file), out_dir=fw, emit="graph")
    (fw / "net.graph.txt").write_text("edited\n")
    aot.build(str(model_file), out_dir=fw)
    assert (fw / "net.graph.txt").read_text() == "edited\n"


def test_a_metadata_file_naming_files_elsewhere_owns_nothing_there(model_file, tmp_path):
    fw = tmp_path / "fw"
    aot.build(str(model_file), out_dir=fw)
    meta = json.loads((fw / "metadata.json").read_text())
    (tmp_path / "precious").write_text("keep")
    meta["files"]["../precious"] = hashlib.sha256(b"keep").hexdigest()
    (fw / "metadata.json").write_text(json.dumps(meta))
    aot.build(str(model_file), out_dir=fw, name="other")
    assert (tmp_path / "precious").read_text() == "keep"


def test_output_path_that_is_a_file(model_file, tmp_path):
    (tmp_path / "f").write_text("x")
    proc = aot_cli("build", model_file, "-o", tmp_path / "f")
    assert proc.returncode != 0 and "is not a directory" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "f").read_text() == "x"


def test_an_interrupted_build_leaves_the_previous_one(model_file, tmp_path):
    """Ctrl-C at moments through a build, as a user presses it: the previous build and the user's files are
    as they were (or, had it finished, the new build is whole), and no temporary file is left."""
    fw = tmp_path / "fw"
    fw.mkdir()
    mine = firmware_folder(fw)
    assert aot_cli("build", model_file, "-o", fw).returncode == 0
    before = {p.name: p.read_bytes() for p in fw.iterdir() if p.is_file()}
    for delay in (0.5, 1.0, 1.5, 2.0):
        proc = subprocess.Popen([sys.executable, "-m", "aot", "build", str(model_file), "-o", str(fw),
                                 "--name", "other", "--emit", "graph,kir,llvm,asm"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        after = {p.name: p.read_bytes() for p in fw.iterdir() if p.is_file()}
        assert_survived(fw, mine)
        if proc.returncode == 0:       # it had finished: a whole build of the new name
            assert "other.o" in after and "net.o" not in after
            return
        assert after == before, f"interrupted after {delay} s: the directory changed"


def test_ctrl_c_while_writing_the_files_leaves_the_previous_build(model_file, tmp_path, monkeypatch):
    fw = tmp_path / "fw"
    aot.build(str(model_file), out_dir=fw)
    before = {p.name: p.read_bytes() for p in fw.iterdir()}
    real = build_dir.chunks
    written = []

    def interrupted(data):
        written.append(1)
        if len(written) == 5:
            raise KeyboardInterrupt
        return real(data)
    monkeypatch.setattr(build_dir, "chunks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        aot.build(str(model_file), out_dir=fw, name="other")
    assert {p.name: p.read_bytes() for p in fw.iterdir()} == before


def test_ctrl_c_while_renaming_waits_for_a_whole_build(model_file, tmp_path, monkeypatch):
    fw = tmp_path / "fw"
    aot.build(str(model_file), out_dir=fw)
    real = build_dir.os.replace
    renamed = []

    def replace(src, dst):
        if not renamed:
            os.kill(os.getpid(), signal.SIGINT)     # Ctrl-C arrives during the first rename
        renamed.append(dst)
        return real(src, dst)
    monkeypatch.setattr(build_dir.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        aot.build(str(model_file), out_dir=fw, name="other")
    meta = json.loads((fw / "metadata.json").read_text())
    assert meta["name"] == "other" and len(renamed) == len(meta["files"]) + 1
    assert {p.name for p in fw.iterdir()} == set(meta["files"]) | {"metadata.json"}


def test_builds_into_one_directory_at_once_leave_one_whole_build(model_file, tmp_path):
    """Two builds racing into one directory (make -j, test workers) take turns: both succeed, and the
    directory holds one whole build, every file the one its metadata.json lists."""
    fw = tmp_path / "fw"
    procs = [subprocess.Popen([sys.executable, "-m", "aot", "build", str(model_file), "-o", str(fw), "--name", n],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in ("one", "two")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    meta = json.loads((fw / "metadata.json").read_text())
    assert {p.name for p in fw.iterdir()} == set(meta["files"]) | {"metadata.json"}
    for name, sha in meta["files"].items():
        assert hashlib.sha256((fw / name).read_bytes()).hexdigest() == sha
