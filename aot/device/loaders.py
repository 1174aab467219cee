"""Putting a firmware image on a microcontroller and starting it, with the tools firmware engineers
already use, each driven by its own command line:

    pyocd     pyocd load -W -t TARGET [-u UID] [-f FREQUENCY] --format elf IMAGE.elf   (resets after)
    openocd   openocd -f CONFIG... [-c COMMAND...] -c "program IMAGE.elf verify reset exit"
    probe-rs  probe-rs download --chip CHIP [--probe P] IMAGE.elf, then probe-rs reset --chip CHIP
    st-flash  st-flash [--serial S] --reset write IMAGE.bin FLASH_ORIGIN
    command   the board's own argv, with {elf}, {bin} and {hex} replaced by the image's paths
    qemu      qemu-system-arm -M MACHINE -icount shift=0 ..., its UART0 a TCP socket on 127.0.0.1

A flashing tool that fails is run once more, then its own last words are the error. With the board's
`ssh` host the same commands run there (the image is uploaded to a private directory removed after),
and the console, a network URL as seen from that host (ser2net's rfc2217://localhost:PORT, or qemu's
socket), is reached through the SSH connection.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from aot.device.board import DeviceBoard
from aot.errors import RunError

LOAD_TIMEOUT_S = 180.0
INSTALL_HINTS = {"pyocd": "pip install pyocd", "openocd": "apt install openocd", "probe-rs": "see probe.rs",
                 "st-flash": "apt install stlink-tools", "qemu-system-arm": "apt install qemu-system-arm"}


class Running:
    """A started program: where its console is, and (qemu) the emulator to wait for."""

    def __init__(self, url: str, finish=None):
        self.url = url
        self._finish = finish

    def finish(self, timeout: float) -> str:
        """After `exit%`: wait for the emulator to end and return what it printed on stderr ("" on a board)."""
        return self._finish(timeout) if self._finish else ""


def flash_commands(board: DeviceBoard, elf: str, binary: str, ihex: str) -> list[list[str]]:
    """The argv lists that put the image on the board and reset it (every tool but qemu)."""
    opt, tool = board.loader.options, board.loader.tool
    if tool == "pyocd":
        cmd = ["pyocd", "load", "-W", "-t", opt["target"]]
        cmd += ["-u", opt["uid"]] if opt.get("uid") else []
        cmd += ["-f", str(opt["frequency"])] if opt.get("frequency") else []
        return [cmd + ["--format", "elf", elf]]
    if tool == "openocd":
        cmd = ["openocd"] + [a for cfg in opt["config"] for a in ("-f", cfg)]
        cmd += [a for c in opt.get("commands", []) for a in ("-c", c)]
        return [cmd + ["-c", f"program {{{elf}}} verify reset exit"]]
    if tool == "probe-rs":
        probe = ["--probe", opt["probe"]] if opt.get("probe") else []
        return [["probe-rs", "download", "--chip", opt["chip"], *probe, elf],
                ["probe-rs", "reset", "--chip", opt["chip"], *probe]]
    if tool == "st-flash":
        serial = ["--serial", opt["serial"]] if opt.get("serial") else []
        return [["st-flash", *serial, "--reset", "write", binary, f"{board.flash.origin:#x}"]]
    if tool == "command":
        return [[a.replace("{elf}", elf).replace("{bin}", binary).replace("{hex}", ihex) for a in opt["command"]]]
    raise ValueError(f"{tool} is not a flashing tool")


def qemu_command(board: DeviceBoard, elf: str, port: int, plugin: tuple[str, ...] = ()) -> list[str]:
    """qemu-system-arm running `elf` on the board's machine, its UART0 a socket server on 127.0.0.1:port that
    holds the guest until the host connects; one instruction is one virtual nanosecond (-icount shift=0)."""
    return ["qemu-system-arm", "-M", board.loader.options["machine"], "-nographic", "-monitor", "none",
            "-icount", "shift=0", "-semihosting-config", "enable=on,target=native",
            "-chardev", f"socket,id=console,host=127.0.0.1,port={port},server=on,wait=on",
            "-serial", "chardev:console", *board.loader.options.get("extra", []), *plugin, "-kernel", elf]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _images(board: DeviceBoard, elf: Path) -> tuple[Path, Path]:
    """The .bin (from the flash origin) and .hex beside the .elf, for the tools that take them."""
    objcopy = "arm-none-eabi-objcopy"
    binary, ihex = elf.with_suffix(".bin"), elf.with_suffix(".hex")
    if board.loader.tool in ("st-flash", "command"):
        for fmt, out in (("binary", binary), ("ihex", ihex)):
            proc = subprocess.run([objcopy, "-O", fmt, str(elf), str(out)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RunError(f"board {board.name}: {objcopy} -O {fmt} failed: {proc.stderr.strip()}")
    return binary, ihex


def _last_words(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) if lines else "it printed nothing"


def _flash(board: DeviceBoard, commands: list[list[str]], run) -> None:
    """Run the loader's commands through `run(argv) -> (rc, output)`; a failure is retried once."""
    for attempt in (1, 2):
        for argv in commands:
            rc, output = run(argv)
            if rc != 0:
                break
        else:
            return
        if attempt == 2:
            raise RunError(f"board {board.name}: loading the firmware with {board.loader.tool} failed twice "
                           f"({shlex.join(argv)} exited with status {rc}): {_last_words(output)}")


def _run_local(argv: list[str]) -> tuple[int, str]:
    if shutil.which(argv[0]) is None:
        hint = INSTALL_HINTS.get(argv[0])
        raise RunError(f"the loader '{argv[0]}' is not installed" + (f" ({hint})" if hint else ""))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not finish within {LOAD_TIMEOUT_S:g} s"
    return proc.returncode, proc.stdout + proc.stderr


@contextlib.contextmanager
def started(board: DeviceBoard, elf: Path, plugin: tuple[str, ...] = (),
            accept_new_host_key: bool = False) -> Iterator[Running]:
    """Load `elf` onto the board and start it; yields its console; whatever was started is stopped after."""
    if board.ssh is not None:
        with _started_over_ssh(board, elf, accept_new_host_key) as running:
            yield running
        return
    if board.loader.tool != "qemu":
        binary, ihex = _images(board, elf)
        _flash(board, flash_commands(board, str(elf), str(binary), str(ihex)), _run_local)
        yield Running(board.console.url)
        return
    if shutil.which("qemu-system-arm") is None:
        raise RunError(f"board {board.name}: qemu-system-arm is not installed ({INSTALL_HINTS['qemu-system-arm']})")
    for attempt in (1, 2):
        port = _free_port()
        log = elf.with_suffix(f".qemu{attempt}.log")
        with open(log, "w") as err:
            proc = subprocess.Popen(qemu_command(board, str(elf), port, plugin), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err)
        if _listening(proc, log):
            break
        proc.kill()
        proc.wait()
        if attempt == 2:    # a port taken between choosing and binding it, or a bad machine option
            raise RunError(f"board {board.name}: qemu-system-arm failed to start twice: {_last_words(log.read_text())}")

    def finish(timeout: float) -> str:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RunError(f"board {board.name}: qemu did not exit within {timeout:g} s after the run") from None
        return log.read_text()

    try:
        yield Running(f"socket://127.0.0.1:{port}", finish)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _listening(proc: subprocess.Popen, log: Path, timeout: float = 20.0) -> bool:
    """Whether qemu got as far as waiting for the console's connection (it says so on stderr)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "waiting for connection" in log.read_text():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def ssh_session(board: DeviceBoard, accept_new_host_key: bool):
    """An SSH session to the machine the board's probe is plugged into (aot.remote.ssh's rules)."""
    from aot.remote.ssh import Session

    return Session(board.ssh, accept_new_host_key)


@contextlib.contextmanager
def _started_over_ssh(board: DeviceBoard, elf: Path, accept_new_host_key: bool) -> Iterator[Running]:
    ssh = board.ssh
    with ssh_session(board, accept_new_host_key) as session:
        remote = session.make_remote_dir()
        binary, ihex = _images(board, elf)
        session.upload([p for p in (elf, binary, ihex) if p.exists()])
        paths = [f"{remote}/{p.name}" for p in (elf, binary, ihex)]
        if board.loader.tool == "qemu":
            port = _remote_free_port(session)
            command = shlex.join(qemu_command(board, paths[0], port))
            channel = session.client.get_transport().open_session()
            channel.exec_command(f"cd {shlex.quote(remote)} && echo $$ && exec {command}")
            pid = _first_line(channel, board).strip()
            try:
                with _Tunnel(session, "127.0.0.1", port) as local_port:
                    yield Running(f"socket://127.0.0.1:{local_port}")
            finally:
                if pid.isdigit():
                    session.run(f"kill {pid} 2>/dev/null; true", 30)
                channel.close()
            return

        def run(argv: list[str]) -> tuple[int, str]:
            rc, out, err = session.run(f"cd {shlex.quote(remote)} && {shlex.join(argv)}", LOAD_TIMEOUT_S)
            if rc == 127:
                hint = INSTALL_HINTS.get(argv[0])
                raise RunError(f"board {board.name}: the loader '{argv[0]}' is not installed on {ssh.host}"
                               + (f" ({hint})" if hint else ""))
            return rc, out + err

        _flash(board, flash_commands(board, *paths), run)
        url = urlsplit(board.console.url)
        if url.scheme not in ("rfc2217", "socket") or not url.port:
            raise RunError(f"board {board.name}: over ssh the console must be a network URL as seen from "
                           f"{ssh.host} (ser2net's rfc2217://localhost:PORT), not {board.console.url}")
        with _Tunnel(session, url.hostname or "127.0.0.1", url.port) as local_port:
            yield Running(f"{url.scheme}://127.0.0.1:{local_port}{'?' + url.query if url.query else ''}")


def _remote_free_port(session) -> int:
    rc, out, _ = session.run("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                             "print(s.getsockname()[1])'", 30)
    if rc != 0 or not out.strip().isdigit():
        raise RunError(f"{session.where}: cannot pick a free port there (python3 is needed for the qemu loader)")
    return int(out.strip())


def _first_line(channel, board: DeviceBoard) -> str:
    data, deadline = b"", time.monotonic() + 30
    while b"\n" not in data and time.monotonic() < deadline:
        if channel.recv_ready():
            data += channel.recv(64)
        elif channel.exit_status_ready():
            break
        else:
            time.sleep(0.02)
    if b"\n" not in data:
        raise RunError(f"board {board.name}: the loader did not start on the ssh host")
    return data.split(b"\n", 1)[0].decode()


class _Tunnel:
    """A local port forwarded through the SSH connection to host:port as the remote machine sees it."""

    def __init__(self, session, host: str, port: int):
        self.transport = session.client.get_transport()
        self.target = (host, port)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.closed = False

    def __enter__(self) -> int:
        threading.Thread(target=self._serve, daemon=True).start()
        return self.server.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.closed = True
        self.server.close()

    def _serve(self) -> None:
        import select

        while not self.closed:
            try:
                client, peer = self.server.accept()
            except OSError:
                return
            channel = None
            for _ in range(100):         # qemu listens a moment after it starts
                try:
                    channel = self.transport.open_channel("direct-tcpip", self.target, peer)
                    break
                except Exception:
                    time.sleep(0.1)
            if channel is None:
                client.close()
                continue
            with client, channel:
                while not self.closed:
                    ready, _, _ = select.select([client, channel], [], [], 0.2)
                    if client in ready:
                        data = client.recv(4096)
                        if not data:
                            break
                        channel.sendall(data)
                    if channel in ready:
                        data = channel.recv(4096)
                        if not data:
                            break
                        client.sendall(data)
