"""Microcontroller boards are data too: a board file with a `[loader]` table describes a device that
runs aot's device harness (runtime_c/device/) instead of a Linux board reached over SSH.

    name, target, clock_hz       the aot target and the core clock the board support sets up
    timer                        dwt | pmu | systick: the cycle counter to time with (SysTick is the fallback)
    stack                        bytes at the top of RAM for the stack (default 16 KiB)
    [flash] origin, size         where the image goes; [ram] origin, size: .data, .bss, workspace, stack
    linker_script                instead of [flash] and [ram]: the user's own (it must provide what
                                 device.ld.j2 provides: .vectors first, __data_*, __bss_*, __stack_*)
    [loader] tool = ...          how a program gets onto the device (aot/device/loaders.py has the options)
    [console] url, baud, sources, defines
                                 a pyserial URL, and the C sources that define aot_board_init and
                                 aot_console_putc/getc (looked up beside the board file, then shipped)
    ssh = "user@host[:port]"     (or an [ssh] table with host, user, port, identity_file, known_hosts,
                                 work_dir) the machine the probe is plugged into: the loader runs there,
                                 the console is reached through the SSH connection
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from aot.config_schema import LOADER_OPTIONS, TIMERS
from aot.data import SHIPPED, shipped
from aot.remote.board import Board
from aot.target import parse_size

_KEYS = {"name", "target", "clock_hz", "timer", "stack", "flash", "ram", "linker_script", "loader", "console", "ssh",
         "description"}
_SSH_KEYS = {"host", "user", "port", "identity_file", "known_hosts", "work_dir"}


@dataclass(frozen=True)
class Memory:
    origin: int
    size: int


@dataclass(frozen=True)
class Loader:
    tool: str
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Console:
    url: str                        # empty for qemu: the loader makes the socket
    baud: int
    sources: tuple[str, ...]        # absolute paths, or names shipped in runtime_c/device/
    defines: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DeviceBoard:
    name: str
    target: str
    clock_hz: int
    timer: str
    loader: Loader
    console: Console
    flash: Memory | None = None
    ram: Memory | None = None
    linker_script: str = ""
    stack: int = 16 * 1024
    ssh: Board | None = None            # the machine the probe is plugged into, as a Linux board
    description: str = ""
    source: str = ""
    origin: str = SHIPPED

    @property
    def emulated(self) -> bool:
        """Under qemu the counters count instructions, not cycles."""
        return self.loader.tool == "qemu"

    @property
    def memory_limits(self) -> dict[str, int]:
        """What aot.build may use: the flash, and the RAM less the stack."""
        if self.flash is None or self.ram is None:
            return {}
        return {"flash": self.flash.size, "ram": self.ram.size - self.stack}

    def build_memory(self, given: dict[str, int] | None) -> dict[str, int]:
        """The limits a build for this board takes: the board's, with the ones the user gives (--memory) over them."""
        return {**self.memory_limits, **(given or {})}


def _misspelled(key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "") + \
        f"; known keys: {', '.join(sorted(known))}"


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ValueError(f"[{key}] must be a table")
    return value


def _memory(data: dict, key: str) -> Memory | None:
    if key not in data:
        return None
    table = _table(data, key)
    for k in table:
        if k not in ("origin", "size"):
            raise ValueError(f"[{key}]: {_misspelled(k, {'origin', 'size'})}")
    if "origin" not in table or "size" not in table:
        raise ValueError(f"[{key}] needs origin and size")
    origin, size = table["origin"], parse_size(table["size"])
    if isinstance(origin, bool) or not isinstance(origin, int) or not 0 <= origin < 2**32 or size <= 0 \
            or origin + size > 2**32:
        raise ValueError(f"[{key}]: origin {origin!r} and size {table['size']!r} are not a 32-bit address range")
    return Memory(origin, size)


def _loader(data: dict) -> Loader:
    table = dict(_table(data, "loader"))
    tool = table.pop("tool", None)
    if tool not in LOADER_OPTIONS:
        raise ValueError(f"[loader] tool must be one of {', '.join(LOADER_OPTIONS)}, not {tool!r}")
    required, optional = LOADER_OPTIONS[tool]
    for k in table:
        if k not in required + optional:
            raise ValueError(f"[loader] ({tool}): {_misspelled(k, set(required + optional) | {'tool'})}")
    missing = [k for k in required if k not in table]
    if missing:
        raise ValueError(f"[loader] ({tool}) needs {', '.join(missing)}")
    for k in ("config", "commands", "command", "extra"):
        if k in table and not (isinstance(table[k], list) and all(isinstance(s, str) for s in table[k])):
            raise ValueError(f"[loader] {k} must be a list of strings")
    return Loader(tool, table)


def _source(name: str, base: Path) -> str:
    """A support source: beside the board file first, then shipped in runtime_c/device/."""
    local = (base / name).expanduser()
    if local.is_file():
        return str(local.resolve())
    if shipped("runtime_c", "device", *name.split("/")).is_file():
        return name
    raise ValueError(f"[console] source '{name}' is neither beside the board file ({base}) nor shipped with aot")


def _console(data: dict, base: Path, emulated: bool) -> Console:
    table = _table(data, "console")
    known = {"url", "baud", "sources", "defines"}
    for k in table:
        if k not in known:
            raise ValueError(f"[console]: {_misspelled(k, known)}")
    url = table.get("url", "")
    if not isinstance(url, str) or (not url and not emulated):
        raise ValueError("[console] needs url, a pyserial URL (/dev/ttyACM0, hwgrep://VID:PID, rfc2217://host:port)")
    if url and emulated:
        raise ValueError("[console] url: under the qemu loader the console is qemu's UART socket; leave url out")
    baud = table.get("baud", 115200)
    sources = table.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise ValueError("[console] sources must list the C files that define aot_board_init and "
                         "aot_console_putc/getc (e.g. [\"cmsdk_uart.c\"])")
    defines = table.get("defines", {})
    if not isinstance(defines, dict) or not all(re.fullmatch(r"[A-Za-z_]\w*", k) for k in defines) \
            or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in defines.values()):
        raise ValueError("[console] defines must be a table of C macro names to strings or integers")
    if isinstance(baud, bool) or not isinstance(baud, int) or baud <= 0:
        raise ValueError(f"[console] baud must be a positive integer, not {baud!r}")
    return Console(url, baud, tuple(_source(s, base) for s in sources),
                   tuple(sorted((k, str(v)) for k, v in defines.items())))


def _ssh(value: object, name: str, target: str, base: Path) -> Board | None:
    if value is None:
        return None
    if isinstance(value, str):
        match = re.fullmatch(r"([^@\s]+)@([^:\s]+)(?::(\d+))?", value)
        if not match:
            raise ValueError(f"ssh = {value!r}: expected \"user@host\" or \"user@host:port\"")
        return Board(name, target, match.group(2), match.group(1), int(match.group(3) or 22))
    if not isinstance(value, dict):
        raise ValueError("ssh must be \"user@host[:port]\" or a table")
    for k in value:
        if k not in _SSH_KEYS:
            raise ValueError(f"[ssh]: {_misspelled(k, _SSH_KEYS)}")
    if "host" not in value or "user" not in value:
        raise ValueError("[ssh] needs host and user")
    keys = {k: str((base / os.path.expanduser(v)).resolve()) if k in ("identity_file", "known_hosts") else v
            for k, v in value.items()}
    return Board(name, target, **{**keys, "port": int(value.get("port", 22))})


def read_device_board(data: dict, path: Path, origin: str) -> DeviceBoard:
    """The board from a parsed board file; a ValueError names the key at fault."""
    for k in data:
        if k not in _KEYS:
            raise ValueError(_misspelled(k, _KEYS))
    missing = [k for k in ("name", "target", "clock_hz", "console") if k not in data]
    if missing:
        raise ValueError(f"a microcontroller board needs {', '.join(missing)}")
    clock = data["clock_hz"]
    if isinstance(clock, bool) or not isinstance(clock, int) or clock <= 0:
        raise ValueError(f"clock_hz must be the core clock in Hz, a positive integer, not {clock!r}")
    timer = data.get("timer", "systick")
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {', '.join(TIMERS)}, not {timer!r}")
    base = Path(str(path)).parent
    loader = _loader(data)
    flash, ram = _memory(data, "flash"), _memory(data, "ram")
    script = data.get("linker_script", "")
    if script:
        if flash or ram:
            raise ValueError("give either linker_script or [flash] and [ram], not both")
        script_path = (base / script).expanduser()
        if not script_path.is_file():
            raise ValueError(f"linker_script {script}: no such file beside the board file")
        script = str(script_path.resolve())
    elif flash is None or ram is None:
        raise ValueError("a microcontroller board needs [flash] and [ram] (origin and size), or a linker_script")
    stack = parse_size(data.get("stack", "16KiB"))
    if ram is not None and not 1024 <= stack < ram.size:
        raise ValueError(f"stack {data.get('stack')!r} must be at least 1 KiB and less than the RAM")
    ssh = _ssh(data.get("ssh"), data["name"], data["target"], base)
    return DeviceBoard(data["name"], data["target"], clock, timer, loader, _console(data, base, loader.tool == "qemu"),
                       flash, ram, script, stack, ssh, data.get("description", ""), str(path), origin)
