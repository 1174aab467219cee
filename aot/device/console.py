"""The host's side of the device harness's line protocol (runtime_c/device/harness.c.j2), over
a pyserial connection: a USB serial port, `hwgrep://`, `rfc2217://` (ser2net) or `socket://` (qemu's UART).

Each reply must arrive within the timeout; silence, bytes that are not protocol lines, a fault report
or an output whose CRC does not match is a RunError quoting what was received.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field

from aot.errors import RunError

HANDSHAKE_RETRY_S = 1.0        # `ready%` is sent again this often until the device answers
LOAD_CHUNK = 64                 # input bytes a `load` line carries (the harness's line holds 160 characters)
_QUOTE = 300                    # characters of received text quoted in an error


@dataclass
class Reply:
    """What the device said for one `run W N%`."""

    laps: list[int] = field(default_factory=list)         # timer ticks of each timed run
    outputs: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Timer:
    used: str          # the counter the harness times with
    asked: str         # the one the board file asked for (differs when it did not count)
    hz: int            # its ticks per second


def open_serial(url: str, baud: int, what: str, connect_timeout: float = 10.0):
    """pyserial's connection to `url`; a socket that is not listening yet is retried until `connect_timeout`."""
    import serial

    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            return serial.serial_for_url(url, baudrate=baud, timeout=0.05)
        except (serial.SerialException, ValueError, OSError) as err:
            if url.startswith(("socket://", "rfc2217://")) and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise RunError(f"{what}: cannot open the console {url}: {err}") from None


class Console:
    def __init__(self, port, what: str, timeout: float):
        self.port = port
        self.what = what
        self.timeout = timeout
        self.received = ""          # everything received, for error messages
        self._pending = b""

    def _quote(self) -> str:
        text = self.received[-_QUOTE:]
        return repr(text) if text else "nothing"

    def fail(self, problem: str) -> RunError:
        return RunError(f"{self.what}: {problem}; the console received {self._quote()}")

    def send(self, command: str) -> None:
        try:
            self.port.write(command.encode("ascii") + b"%")
            self.port.flush()
        except OSError as err:
            raise self.fail(f"cannot write to the console: {err}") from None

    def read_line(self, deadline: float, waiting_for: str) -> str | None:
        """The next complete line, or None at the deadline."""
        while b"\n" not in self._pending:
            if time.monotonic() >= deadline:
                return None
            try:
                chunk = self.port.read(4096)
            except OSError as err:
                raise self.fail(f"the console failed while waiting for {waiting_for}: {err}") from None
            self._pending += chunk
            self.received = (self.received + chunk.decode("ascii", errors="replace"))[-4 * _QUOTE:]
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode("ascii", errors="replace").strip("\r\x00 ")

    def handshake(self, name: str, timeout: float) -> Timer:
        """Wait for the device's m-ready (asking with `ready%` until it comes) and its timer line.
        Noise before the first m-ready is tolerated (a board may print at reset); none after."""
        deadline = time.monotonic() + timeout
        ready, next_ask = False, 0.0
        while True:
            now = time.monotonic()
            if not ready and now >= next_ask:
                self.send("ready")
                next_ask = now + HANDSHAKE_RETRY_S
            line = self.read_line(min(deadline, next_ask) if not ready else deadline, "m-ready")
            if line is None:
                if time.monotonic() >= deadline:
                    raise self.fail(f"the device did not answer within {timeout:g} s (no m-ready-{name}): is the "
                                    "console URL right, the firmware running, the baud rate the board's?")
                continue
            if line.startswith("m-fault-"):
                raise self.fail(f"the device faulted ({line})")
            if line.startswith("m-ready-"):
                if line != f"m-ready-{name}":
                    raise self.fail(f"the device runs another program ({line}, expected m-ready-{name})")
                ready = True
            elif ready and line.startswith("m-timer-"):
                parts = line.split("-")
                if len(parts) != 5 or not parts[4].isdigit():
                    raise self.fail(f"bad timer line {line!r}")
                return Timer(parts[2], parts[3], int(parts[4]))
            elif ready and line:
                raise self.fail(f"unexpected line {line!r} from the device")

    def load(self, index: int, data: bytes) -> None:
        """Send input `index`'s bytes to a loadable harness, a `load` line at a time, each answered."""
        for offset in range(0, len(data), LOAD_CHUNK):
            chunk = data[offset:offset + LOAD_CHUNK]
            self.send(f"load {index} {offset} {chunk.hex()}")
            want = f"m-loaded-{offset + len(chunk)}"
            while True:
                line = self.read_line(time.monotonic() + self.timeout, f"the load of input {index}")
                if line is None:
                    raise self.fail(f"the device went silent for {self.timeout:g} s while loading input {index}")
                if line == want:
                    break
                if not line or line.startswith("m-ready-") or line.startswith("m-timer-"):
                    continue
                raise self.fail(f"loading input {index} at byte {offset}: the device answered {line[:80]!r}")

    def run(self, warmup: int, laps: int, output_count: int) -> Reply:
        """Send `run W N%` and read the laps and the outputs up to m-done."""
        self.send(f"run {warmup} {laps}")
        reply, current, chunks = Reply(), None, []
        while True:
            line = self.read_line(time.monotonic() + self.timeout, "the run")
            if line is None:
                raise self.fail(f"the device went silent for {self.timeout:g} s during the run")
            if not line or line.startswith("m-ready-") or line.startswith("m-timer-"):
                continue            # an answer to a `ready%` sent just before the device got to it
            field_ = line.split("-")
            if line.startswith("m-lap-") and len(field_) == 4 and field_[2].isdigit() and field_[3].isdigit():
                reply.laps.append(int(field_[3]))
            elif line.startswith("m-output-") and len(field_) == 4 and field_[2].isdigit() and field_[3].isdigit():
                current, size, chunks = int(field_[2]), int(field_[3]), []
            elif line.startswith("m-hex-") and current is not None:
                try:
                    chunks.append(bytes.fromhex(line[6:]))
                except ValueError:
                    raise self.fail(f"corrupt output line {line[:80]!r}") from None
            elif line.startswith("m-crc-") and current is not None and len(field_) == 4:
                data = b"".join(chunks)
                if len(data) != size or f"{zlib.crc32(data):08x}" != field_[3] or int(field_[2]) != current:
                    raise self.fail(f"output {current} arrived corrupt ({len(data)} of {size} bytes, CRC "
                                    f"{zlib.crc32(data):08x} against the device's {field_[3]})")
                reply.outputs[current], current = data, None
            elif line == "m-done":
                if len(reply.laps) != laps or len(reply.outputs) != output_count:
                    raise self.fail(f"the device sent {len(reply.laps)} of {laps} laps and {len(reply.outputs)} "
                                    f"of {output_count} outputs")
                return reply
            elif line.startswith("m-error-run-"):
                raise self.fail(f"the model returned error code -{line[12:]} on the device")
            elif line.startswith("m-fault-"):
                raise self.fail(f"the device faulted during the run ({line})")
            else:
                raise self.fail(f"unexpected line {line[:80]!r} from the device")
