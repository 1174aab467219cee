"""Boards are data: `<name>.toml` says how to reach a device over SSH and which target it is. aot ships
a few (boards/); users add or replace them from their own directories (`--board-dir DIR`,
$AOT_BOARD_PATH), or name a file by its path.

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
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.data import SHIPPED, SearchDir, config_files, describe_search, search_dirs
from aot.errors import OptionError
from aot.target import Region, read_regions

if TYPE_CHECKING:
    from importlib.abc import Traversable

    from aot.device.board import DeviceBoard

BOARD_PATH = "AOT_BOARD_PATH"        # os.pathsep-separated directories of user boards, searched after --board-dir
BoardDirs = Sequence[str | os.PathLike]


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


def _search(dirs: BoardDirs) -> list[SearchDir]:
    return search_dirs(dirs, BOARD_PATH, "--board-dir")


def _find(name_or_path: str, dirs: BoardDirs) -> tuple[Path | Traversable, str]:
    """A board's file and origin."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".toml" and path.is_file():
        return path, str(path.resolve().parent)
    configs = config_files("boards", _search(dirs))
    for cfg in configs:
        if cfg.name == name_or_path:
            return cfg.file, cfg.origin
    known = ", ".join(sorted(c.name for c in configs)) or "none"
    raise OptionError(f"unknown board '{name_or_path}' (known boards: {known}; searched "
                      f"{describe_search('boards', _search(dirs))}; or give a path to a .toml file)")


def load_board(name_or_path: str, dirs: BoardDirs = ()) -> Board | DeviceBoard:
    """A board by name, searched in `dirs`, then $AOT_BOARD_PATH, then the shipped boards; or a .toml
    file by its path."""
    return _read(*_find(name_or_path, dirs))


def board_text(name_or_path: str, dirs: BoardDirs = ()) -> str:
    """The TOML text of a board's file, as `aot boards NAME` shows it."""
    return _find(name_or_path, dirs)[0].read_text()


def _read(path: Path | Traversable, origin: str) -> Board | DeviceBoard:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise OptionError(f"{path}: cannot read board file: {err}") from None
    if "password" in data:
        raise OptionError(f"{path}: passwords are not accepted in board files; use identity_file (a key)")
    if "loader" in data:                # a microcontroller board (aot/device/board.py builds on this module)
        from aot.device.board import read_device_board

        try:
            return read_device_board(data, Path(str(path)), origin)
        except (TypeError, ValueError) as err:
            raise OptionError(f"{path}: bad board file: {err}") from None
    base = Path(str(path)).parent
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


def all_boards(dirs: BoardDirs = ()) -> list[Board | DeviceBoard]:
    """Every board, from `dirs`, then $AOT_BOARD_PATH, then the shipped ones; a user file shadows a
    shipped one of the same name."""
    return sorted((_read(cfg.file, cfg.origin) for cfg in config_files("boards", _search(dirs))),
                  key=lambda b: b.name)
