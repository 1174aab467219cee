"""Boards are data: `boards/<name>.toml` says how to reach a device over SSH and which target it is.

Keys: name, target, host, port, user, identity_file, known_hosts, work_dir, runner (optional command
prefix, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" to make an emulated board a real SSH target),
env (optional table of environment variables), cpus (optional CPU list to pin to with taskset).
Relative paths are relative to the board file. Keys only: there is no password field.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.errors import OptionError

BOARDS_DIR = Path(os.environ.get("AOT_BOARDS_DIR", Path(__file__).resolve().parent.parent.parent / "boards"))


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
    source: str = ""

    def command_prefix(self) -> list[str]:
        """What runs the program on the board: env, CPU pinning, then the runner (an emulator)."""
        prefix = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if prefix:
            prefix.insert(0, "env")
        if self.cpus:
            prefix += ["taskset", "-c", self.cpus]
        return prefix + list(self.runner)


def load_board(name_or_path: str) -> Board:
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        path = BOARDS_DIR / f"{name_or_path}.toml"
        if not path.exists():
            known = ", ".join(b.stem for b in sorted(BOARDS_DIR.glob("*.toml"))) or "none"
            raise OptionError(f"unknown board '{name_or_path}' (boards in {BOARDS_DIR}: {known}; "
                              "or give a path to a .toml file)")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise OptionError(f"{path}: cannot read board file: {err}") from None
    if "password" in data:
        raise OptionError(f"{path}: passwords are not accepted in board files; use identity_file (a key)")
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
    try:
        return Board(source=str(path), **data)
    except TypeError as err:
        raise OptionError(f"{path}: bad board file: {err}") from None


def all_boards() -> list[Board]:
    return [load_board(str(p)) for p in sorted(BOARDS_DIR.glob("*.toml"))]
