"""Boards are data: `<name>.toml` says how to reach a device and which target it is. aot ships a few
(boards/); users add or replace them from their own directories (`--board-dir DIR`, $AOT_BOARD_PATH),
or name a file by its path. A board file with a `[loader]` table is a microcontroller board
(aot/device/board.py), any other a Linux board reached over SSH (aot/remote/board.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.config_schema import board_schema, problems
from aot.data import SHIPPED, SearchDir, config_files, describe_search, search_dirs
from aot.device.board import DeviceBoard, read_device_board
from aot.errors import OptionError
from aot.remote.board import Board, read_linux_board

if TYPE_CHECKING:
    from importlib.abc import Traversable

BOARD_PATH = "AOT_BOARD_PATH"        # os.pathsep-separated directories of user boards, searched after --board-dir
BoardDirs = Sequence[str | os.PathLike]


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
    found = problems(data, board_schema(data))
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise OptionError(f"{path}: {found[0]}{more}")
    if "loader" in data:                # a microcontroller board
        try:
            return read_device_board(data, Path(str(path)), origin)
        except (TypeError, ValueError) as err:
            raise OptionError(f"{path}: bad board file: {err}") from None
    return read_linux_board(data, Path(str(path)), origin)


def all_boards(dirs: BoardDirs = (), skipped: list[str] | None = None) -> list[Board | DeviceBoard]:
    """Every board, from `dirs`, then $AOT_BOARD_PATH, then the shipped ones; a user file shadows a
    shipped one of the same name; a user file that does not read is skipped, its error put in `skipped`."""
    boards = []
    for cfg in config_files("boards", _search(dirs)):
        try:
            boards.append(_read(cfg.file, cfg.origin))
        except OptionError as err:
            if cfg.origin == SHIPPED:
                raise
            if skipped is not None:
                skipped.append(str(err))
    return sorted(boards, key=lambda b: b.name)
