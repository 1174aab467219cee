"""Progress on stderr (aot/progress.py): in a log a line for each slow phase and every so often through a long
task, nothing for quick ones, nothing at all with --quiet; on a terminal rich's display, gone when done; and
the tables, laid out by rich, aligned whatever the cells (aot/text_table.py)."""

from __future__ import annotations

import io
import subprocess
import sys

import onnx
import pytest
from test_cli import tiny_cnn

from aot import progress
from aot.text_table import render


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_per_slow_phase_and_none_for_quick_ones(monkeypatch):
    log = Log()
    with progress.reporting(stream=log):
        with progress.phase("quick"):
            pass
        monkeypatch.setattr(progress, "SLOW_S", 0.0)
        monkeypatch.setattr(progress, "EVERY_S", 0.0)
        with progress.phase("compiling 3 kernels"):
            pass
        with progress.task("running 3 samples", 3) as advance:
            for _ in range(3):
                advance()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("aot: compiling 3 kernels: ") and lines[0].endswith(" s")
    assert lines[1:3] == ["aot: running 3 samples: 1/3 (0 s)", "aot: running 3 samples: 2/3 (0 s)"]
    assert lines[3].startswith("aot: running 3 samples: 3/3 in ") and len(lines) == 4


def test_quiet_and_library_calls_report_nothing(monkeypatch, capsys):
    monkeypatch.setattr(progress, "SLOW_S", 0.0)
    log = Log()
    with progress.reporting(quiet=True, stream=log):
        with progress.phase("compiling"):
            pass
    with progress.phase("outside any reporting"):
        pass
    assert log.getvalue() == "" and capsys.readouterr().err == ""


def test_a_terminal_gets_a_live_display_that_is_gone_when_done():
    screen = Terminal()
    with progress.reporting(stream=screen) as reporter:
        assert type(reporter).__name__ == "_Terminal"
        with progress.task("running 2 samples", 2) as advance:
            advance()
            assert reporter.display.live.is_started
        assert not reporter.display.live.is_started        # nothing shows between phases


def test_the_command_is_quiet_with_quiet(tmp_path, monkeypatch):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    proc = subprocess.run([sys.executable, "-m", "aot", "build", str(model), "-o", str(tmp_path / "o"), "--quiet"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("built ")


@pytest.mark.parametrize("cells", [["a", "b"], ["a-much-longer-tensor-name_with_more", "b"]])
def test_tables_stay_aligned_whatever_the_cells(cells):
    rows = [("tensor", "node", "SQNR dB"), (cells[0], "conv", "45.90"), ("x", cells[1], "7.00")]
    lines = render(rows, right=(2,)).splitlines()
    assert len(lines) == 3
    assert len({len(line) for line in lines}) == 1                 # the right-aligned column ends together
    starts = {line.index(word) for line, word in zip(lines, ["node", "conv", cells[1]])}
    assert len(starts) == 1                                        # the second column starts together
