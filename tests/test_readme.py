"""The README's commands as written: the firmware example's shell block, taken from the README and run
literally (relative paths included) in a fresh directory laid out as a checkout after the quickstart;
and `aot example firmware`, which gives a wheel's user the same folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import zoo
from test_library import console_until_scores

ROOT = Path(__file__).resolve().parent.parent


def readme_block(containing: str) -> list[str]:
    """The commands of the README's ```sh block that contains `containing`, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if containing in b]
    return block.replace("\\\n", " ").strip().splitlines()


def _checkout(tmp_path: Path) -> Path:
    """A fresh directory with what the README's commands expect of a checkout: examples/, .venv, and
    models/resnet8.onnx (which the quickstart makes)."""
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "models").mkdir()
    onnx.save(zoo.resnet8(), work / "models" / "resnet8.onnx")
    return work


def _shell(line: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.qemu
def test_the_readmes_firmware_steps_run_as_written(tmp_path):
    lines = readme_block("examples/firmware/make_input.py")
    assert lines[-1].startswith("qemu-system-arm") and any("$PWD" in line for line in lines)
    work = _checkout(tmp_path)
    for line in lines[:-1]:
        done = _shell(line, work)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    out = console_until_scores(["bash", "-c", f"exec {lines[-1]}"], work)
    label = int(re.search(r"class (\d+)", out).group(1))
    scores = np.array([float(v) for v in re.search(r"scores (.*)", out).group(1).split()])
    with np.load(work / "build" / "firmware" / "input.npz") as data:
        feeds = {k: data[k] for k in data.files}
    import onnxruntime as ort
    session = ort.InferenceSession(str(work / "models" / "resnet8.onnx"), providers=["CPUExecutionProvider"])
    reference = session.run(None, feeds)[0].ravel()
    np.testing.assert_allclose(scores, reference, atol=2e-6)        # printed with 6 decimals
    assert label == int(np.argmax(reference))


def test_aot_example_copies_the_firmware_and_overwrites_nothing(tmp_path):
    aot = [sys.executable, "-m", "aot"]
    done = subprocess.run([*aot, "example", "firmware", str(tmp_path / "fw")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shipped = sorted(p.name for p in (ROOT / "examples" / "firmware").iterdir() if p.is_file())
    assert sorted(os.listdir(tmp_path / "fw")) == shipped
    for name in shipped:
        assert (tmp_path / "fw" / name).read_bytes() == (ROOT / "examples" / "firmware" / name).read_bytes()
    assert f"cmake -S {tmp_path / 'fw'}" in done.stdout
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "main.c").write_text("mine\n")
    again = subprocess.run([*aot, "example", "firmware", str(tmp_path / "mine")], capture_output=True, text=True)
    assert again.returncode == 1 and "already holds main.c" in again.stderr and "Traceback" not in again.stderr
    assert os.listdir(tmp_path / "mine") == ["main.c"] and (tmp_path / "mine" / "main.c").read_text() == "mine\n"
