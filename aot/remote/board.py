"""A Linux board: how to reach a device over SSH and which target it is, from its board file (found and
read by aot/boards.py).

Keys: name, target, host, port, user, identity_file, known_hosts, work_dir, runner (optional command
prefix, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" to make an emulated board a real SSH target),
env (optional table of environment variables), cpus (optional CPU list to pin to with taskset), and
`[[memory.regions]]` (optional: the board's memory regions, which replace its target's; see aot/target.py).
Relative paths are relative to the board file. Keys only: there is no password field.

A board file with a `[loader]` table is a microcontroller board instead (aot/device/board.py).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from aot.data import SHIPPED
from aot.errors import OptionError
from aot.target import Region, read_regions


@dataclass(frozen=True)
class Board:
    name: str
    target: str
    host: str
    user: str
    port: int = 22
    identity_file: str = ""
    known_hosts: str = ""
    work_dir: str = "/tmp"
    runner: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    cpus: str = ""
    regions: tuple[Region, ...] = ()  # the board's memory regions, fastest first; none: its target's
    source: str = ""                 # the board file
    origin: str = SHIPPED            # the user directory it came from, or "aot" for a shipped board

    def command_prefix(self) -> list[str]:
        """What runs the program on the board: env, CPU pinning, then the runner (an emulator)."""
        prefix = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if prefix:
            prefix.insert(0, "env")
        if self.cpus:
            prefix += ["taskset", "-c", self.cpus]
        return prefix + list(self.runner)


def read_linux_board(data: dict, path: Path, origin: str) -> Board:
    """A Linux board from its board file's table (`path` for relative paths and messages)."""
    base = path.parent
    for key in ("identity_file", "known_hosts"):
        if data.get(key):
            data[key] = str((base / os.path.expanduser(data[key])).resolve())
    if "port" in data:
        data["port"] = int(data["port"])
    runner = data.pop("runner", ())
    data["runner"] = tuple(shlex.split(runner) if isinstance(runner, str) else runner)
    missing = [k for k in ("name", "target", "host", "user") if k not in data]
    if missing:
        raise OptionError(f"{path}: board file lacks {', '.join(missing)}")
    memory = data.pop("memory", {})
    try:
        if not isinstance(memory, dict) or set(memory) - {"regions"}:
            raise ValueError("a board's [memory] table holds only its regions ([[memory.regions]])")
        data["regions"] = read_regions(memory["regions"]) if memory else ()
        return Board(source=str(path), origin=origin, **data)
    except (TypeError, ValueError) as err:
        raise OptionError(f"{path}: bad board file: {err}") from None


