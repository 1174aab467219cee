"""Tables as the commands print them and the reports hold them, laid out by rich: columns as wide as their
widest cell, numbers right-aligned, a header row; on a terminal no wider than it (long cells wrap), in a file
or a pipe never wrapped, so that each row stays one line for the tools that read it."""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Sequence

_UNWRAPPED = 10_000         # characters: wide enough that no row of a file or a pipe wraps


def render(rows: Sequence[Sequence[str]], right: Sequence[int] = (), terminal: bool = False) -> str:
    """`rows[0]` the header, the rest the cells; columns in `right` right-aligned. `terminal`: as wide as the
    terminal at most."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1, 0, 1), header_style="")
    for i, head in enumerate(rows[0]):
        table.add_column(head, justify="right" if i in right else "left", no_wrap=not terminal)
    for row in rows[1:]:
        table.add_row(*row)
    width = shutil.get_terminal_size().columns if terminal else _UNWRAPPED
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False, soft_wrap=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def show(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> None:
    """Print the table on stdout, fitted to the terminal if stdout is one."""
    sys.stdout.write(render(rows, right, terminal=sys.stdout.isatty()))
