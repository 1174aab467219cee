"""`aot boards NAME --check` for a microcontroller board: is everything its runs need there? The target's
compiler, the loader's tool (here, or on the board's ssh host) and the console port; nothing is flashed."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterator

from aot.device.board import DeviceBoard
from aot.device.console import open_serial
from aot.errors import OptionError, RunError
from aot.target import Target

TOOLS = {"qemu": "qemu-system-arm", "pyocd": "pyocd", "openocd": "openocd", "probe-rs": "probe-rs",
         "st-flash": "st-flash"}


def check_board(board: DeviceBoard, tgt: Target, accept_new_host_key: bool = False) -> Iterator[str]:
    """Lines saying what was found; the first thing missing is an OptionError or RunError."""
    if tgt.os != "none":
        raise OptionError(f"board {board.name}: its target {tgt.name} is not a bare-metal target")
    if shutil.which(tgt.cc) is None:
        raise RunError(f"board {board.name}: the target's compiler {tgt.cc} is not installed")
    yield f"board {board.name}: {tgt.name} at {board.clock_hz / 1e6:g} MHz, compiler {tgt.cc} found"
    tool = TOOLS.get(board.loader.tool) or board.loader.options["command"][0]
    if board.ssh is None:
        if shutil.which(tool) is None:
            raise RunError(f"board {board.name}: its loader's tool '{tool}' is not installed here")
        yield f"  loader {board.loader.tool}: {shutil.which(tool)}"
    else:
        from aot.device.loaders import ssh_session

        with ssh_session(board, accept_new_host_key) as session:
            rc, out, _ = session.run(f"command -v {shlex.quote(tool)}", 30)
        if rc != 0:
            raise RunError(f"board {board.name}: its loader's tool '{tool}' is not installed on {board.ssh.host}")
        yield f"  loader {board.loader.tool}: {out.strip()} on {board.ssh.host}"
    if board.emulated:
        yield "  console: qemu's UART0 as a TCP socket (figures are instructions, emulated)"
    elif board.ssh is None:
        open_serial(board.console.url, board.console.baud, f"board {board.name}", connect_timeout=2).close()
        yield f"  console {board.console.url}: opened"
    else:
        yield f"  console {board.console.url} on {board.ssh.host}: reached through the SSH connection when run"
