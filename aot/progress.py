"""Progress of the operations that take a while (a build's phases, LLVM's compile, runs on boards, calibration,
tuning, a data set's samples), so that nobody is left guessing whether aot is still at work.

On a terminal it is rich's progress display on stderr, as wide as the terminal, erased when done. Elsewhere (a
log, CI) it is a line on stderr for each phase that took two seconds or more, and for a long task one every ten
seconds. With --quiet, nothing. The command line installs one (`reporting`); called from Python, aot reports
to nobody unless the caller installs one too.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Callable, Iterator

SLOW_S = 2.0            # a phase that took this long gets its line in a log
EVERY_S = 10.0          # a long task's line in a log, this often


class Reporter:
    """Reports to nobody."""

    @contextlib.contextmanager
    def phase(self, what: str) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def task(self, what: str, total: int) -> Iterator[Callable[[], None]]:
        yield lambda: None

    def close(self) -> None:
        pass


class _Lines(Reporter):
    """A line per slow phase, and every EVERY_S through a long task, on `stream`."""

    def __init__(self, stream):
        self.stream = stream

    def _say(self, text: str) -> None:
        print(f"aot: {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def phase(self, what: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        took = time.monotonic() - start
        if took >= SLOW_S:
            self._say(f"{what}: {took:.1f} s")

    @contextlib.contextmanager
    def task(self, what: str, total: int) -> Iterator[Callable[[], None]]:
        start = last = time.monotonic()
        done = 0

        def advance() -> None:
            nonlocal done, last
            done += 1
            now = time.monotonic()
            if now - last >= EVERY_S and done < total:
                last = now
                self._say(f"{what}: {done}/{total} ({now - start:.0f} s)")
        yield advance
        took = time.monotonic() - start
        if took >= SLOW_S:
            self._say(f"{what}: {done}/{total} in {took:.1f} s")


class _Terminal(Reporter):
    """rich's live progress display on stderr: a spinner per phase, a bar per task, erased when done."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class Count(ProgressColumn):
            """done/total for a task; nothing for a phase, which has no count."""

            def render(self, task) -> Text:
                return Text(f"{task.completed:.0f}/{task.total:.0f}" if task.total is not None else "")

        # stdout is left alone: the display shows only while something is under way, and is gone before
        # a command prints its results
        self.display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), Count(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                                redirect_stdout=False, redirect_stderr=False)
        self.open = 0

    @contextlib.contextmanager
    def _shown(self, what: str, total: int | None) -> Iterator[int]:
        if not self.open:
            self.display.start()
        self.open += 1
        task = self.display.add_task(what, total=total)
        try:
            yield task
        finally:
            self.display.remove_task(task)
            self.open -= 1
            if not self.open:
                self.display.stop()

    @contextlib.contextmanager
    def phase(self, what: str) -> Iterator[None]:
        with self._shown(what, None):
            yield

    @contextlib.contextmanager
    def task(self, what: str, total: int) -> Iterator[Callable[[], None]]:
        with self._shown(what, total) as task:
            yield lambda: self.display.advance(task)


_CURRENT: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("aot_progress", default=None)
_NOBODY = Reporter()        # holds nothing: the same one serves every caller


def phase(what: str):
    """`with progress.phase("compiling 142 kernels with LLVM"):` around a step that may take a while."""
    return (_CURRENT.get() or _NOBODY).phase(what)


def task(what: str, total: int):
    """`with progress.task("validating", 100) as advance:` around a loop, `advance()` once a turn."""
    return (_CURRENT.get() or _NOBODY).task(what, total)


@contextlib.contextmanager
def reporting(quiet: bool = False, stream=None) -> Iterator[Reporter]:
    """Report progress for the block: nothing if `quiet`, rich's display if `stream` (stderr) is a terminal,
    else lines."""
    stream = stream or sys.stderr
    reporter = Reporter() if quiet else _Terminal() if stream.isatty() else _Lines(stream)
    token = _CURRENT.set(reporter)
    try:
        yield reporter
    finally:
        reporter.close()
        _CURRENT.reset(token)
