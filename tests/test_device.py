"""Microcontroller boards, through the path a user's board takes: the firmware linked for the board, started
by its loader (qemu standing in for a probe), its console opened with pyserial, the line protocol end to
end, the outputs checked against onnxruntime. Nothing here ran on hardware."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import zoo
from onnx import helper
from oracle import make_model
from quantize import quantize_model

import aot
from aot.bench import bench
from aot.boards import load_board
from aot.build import build
from aot.cli import main
from aot.device.console import Console
from aot.device.loaders import flash_commands
from aot.device.run import run_on_board
from aot.run.count import count_instructions

pytestmark = pytest.mark.qemu


def tiny_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    return make_model(nodes, {"x": (1, 3, 8, 8)}, {"y": None},
                      {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)})


@pytest.fixture(scope="module")
def ds_cnn_int8(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "ds_cnn_int8.onnx"
    onnx.save(quantize_model(zoo.ds_cnn()), path)
    return path


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """Temporary files of the run (firmware, qemu's log) under tmp_path, to find what was left running."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def running_under(path: Path) -> list[str]:
    """Command lines of processes that mention `path` (a qemu left behind would)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline and "pytest" not in cmdline:
            found.append(cmdline)
    return found


def device_board(tmp_path: Path, name: str = "test-m4", *, sources: str = '["cmsdk_uart.c"]',
                 loader: str = 'tool = "qemu"\nmachine = "mps2-an386"', console: str = "",
                 flash: str = "4MiB", extra: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'''name = "{name}"
target = "cortex-m4"
clock_hz = 25_000_000
timer = "dwt"
{extra}
[flash]
origin = 0x0
size = "{flash}"
[ram]
origin = 0x21000000
size = "16MiB"
[loader]
{loader}
[console]
{console}
sources = {sources}
defines = {{ AOT_UART_BASE = "0x40004000" }}
''')
    return path


# ---- end to end under qemu -------------------------------------------------------------------------

@pytest.mark.parametrize("board,target", [("qemu-m4-uart", "cortex-m4"), ("qemu-m7-uart", "cortex-m7"),
                                          ("qemu-m55-uart", "cortex-m55")])
def test_bench_ds_cnn_int8_on_the_qemu_boards(ds_cnn_int8, board, target, own_tmp):
    result = bench(str(ds_cnn_int8), board=board, repeat=3, warmup=1)
    assert result.target == target and result.emulated and result.reference == "onnxruntime"
    assert result.comparisons and result.ok
    figures = result.device
    assert figures.unit == "instructions (emulated)" and result.times_ms == []
    # qemu has no DWT or PMU: the harness fell back to SysTick and said so
    assert figures.timer == "systick" and "did not count" in figures.timer_note
    # SysTick ticks at the board's clock, one instruction per virtual ns: each tick is 1e9/clock instructions,
    # and the timed span is the whole run call, so it covers the kernels' instructions and a little more
    per_tick = 1e9 / load_board(board).clock_hz
    for n in figures.per_run:
        assert figures.kernel_instructions - per_tick <= n <= figures.kernel_instructions * 1.01 + 2 * per_tick
    # beside them, the kernels' cycles estimated on the core (aot/run/cycles.py)
    assert 0.5 * figures.kernel_instructions < figures.estimated_cycles < 3 * figures.kernel_instructions
    assert not running_under(own_tmp)


def test_the_kernel_count_equals_what_aot_run_counts(own_tmp):
    board = load_board("qemu-m4-uart")
    artifact = build(tiny_model(), target="cortex-m4", out_dir=own_tmp / "build", memory=board.memory_limits)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    on_board = run_on_board(artifact, board, {"x": x}, warmup=2, laps=2, count=True)
    outputs, counted = count_instructions(artifact, {"x": x})
    assert on_board.kernel_instructions == counted
    np.testing.assert_array_equal(on_board.outputs["y"], outputs["y"])
    assert len(on_board.laps) == 2 and on_board.timer.hz == 25_000_000


def test_cli_bench_on_a_microcontroller_prints_instructions_and_writes_json(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    out = tmp_path / "bench.json"
    assert main(["bench", str(model), "--board", "qemu-m4-uart", "--repeat", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "median insns" in text and "qemu-m4-uart" in text and " ok" in text and "est. kernel cycles" in text
    assert "ms" not in text.split("\n")[0] and "emulated" in text
    result = json.loads(out.read_text())["results"][0]
    assert result["stats_ms"] is None and result["device"]["unit"] == "instructions (emulated)"
    assert len(result["device"]["per_run"]) == 2 and result["device"]["kernel_instructions"] > 0
    assert result["device"]["estimated_kernel_cycles"] > 0


def test_cli_bench_profile_on_a_qemu_board_prices_each_kernel(tmp_path, capsys):
    """Under qemu, --profile gives each kernel call's estimated cycles; they add up to the run's estimate."""
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    out = tmp_path / "bench.json"
    assert main(["bench", str(model), "--board", "qemu-m4-uart", "--repeat", "1", "--profile", "--json",
                 str(out), "--build-dir", str(tmp_path / "build")]) == 0
    assert "estimated cycles per run" in capsys.readouterr().out
    result = json.loads(out.read_text())["results"][0]
    steps = result["estimated_cycles_profile"]
    assert steps and all(s["cycles"] > 0 for s in steps)
    assert abs(sum(s["cycles"] for s in steps) - result["device"]["estimated_kernel_cycles"]) <= len(steps)
    assert "Estimated cycles per kernel on cortex-m4" in (tmp_path / "build" / "report.txt").read_text()
    # the amended report is still aot's: metadata.json has its new hash, so a build there replaces it
    import hashlib
    meta = json.loads((tmp_path / "build" / "metadata.json").read_text())
    assert meta["files"]["report.txt"] == hashlib.sha256((tmp_path / "build" / "report.txt").read_bytes()).hexdigest()
    assert main(["build", str(model), "--target", "cortex-m4", "-o", str(tmp_path / "build")]) == 0


# ---- what goes wrong, said in one line ----------------------------------------------------------------

SILENT = """#include "aot_device.h"
void aot_board_init(void) {}
void aot_console_putc(int c) { (void)c; }
int aot_console_getc(void) { for (;;) ; }
"""


def test_a_silent_console_is_a_clear_error_and_nothing_is_left_running(tmp_path, own_tmp):
    (tmp_path / "silent.c").write_text(SILENT)
    board = device_board(tmp_path, sources='["silent.c"]')
    with pytest.raises(aot.RunError, match=r"did not answer within 3 s .*received nothing"):
        bench(tiny_model(), board=str(board), repeat=1, timeout=3)
    assert not running_under(own_tmp)


def test_a_console_that_sends_garbage_is_quoted(tmp_path, own_tmp):
    # the real driver, but every 'm' goes out as '#': no protocol line ever arrives
    source = (tmp_path / "garbled.c")
    source.write_text('#define aot_console_putc real_putc\n#include "cmsdk_uart.c"\n#undef aot_console_putc\n'
                      'void aot_console_putc(int c) { real_putc(c == \'m\' ? \'#\' : c); }\n')
    board = device_board(tmp_path, sources='["garbled.c"]', extra="")
    with pytest.raises(aot.RunError, match=r"did not answer .*received '.*#-ready-"):
        bench(tiny_model(), board=str(board), repeat=1, timeout=3)
    assert not running_under(own_tmp)


def test_a_loader_that_fails_is_retried_once_then_its_message_is_the_error(tmp_path, own_tmp):
    log = tmp_path / "attempts"
    board = device_board(tmp_path, loader=f'tool = "command"\ncommand = ["sh", "-c", "echo x >> {log}; echo '
                         f'No probe found, is it plugged in? >&2; exit 3", "{{elf}}"]',
                         console='url = "socket://127.0.0.1:9"')
    with pytest.raises(aot.RunError, match=r"failed twice .*exited with status 3\): No probe found"):
        bench(tiny_model(), board=str(board), repeat=1)
    assert log.read_text() == "x\nx\n"


def test_a_model_too_big_for_the_boards_flash_is_refused_by_name(tmp_path):
    board = device_board(tmp_path, name="small-flash", flash="16KiB")
    big = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": (1, 256)}, {"y": None},
                     {"w": np.ones((256, 64), np.float32)})
    with pytest.raises(aot.PlanError, match=r"on board small-flash .*FLASH.*the limit is 16,384"):
        bench(big, board=str(board), repeat=1)
    # aot's own estimate leaves out the harness and the C library: then the linker says it, and aot names the board
    board = device_board(tmp_path, name="tight-flash", flash="37KiB")
    fits_alone = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": (1, 64)}, {"y": None},
                            {"w": np.ones((64, 140), np.float32)})
    with pytest.raises(aot.RunError, match=r"on board tight-flash: the firmware does not fit the board's flash of "
                       r"37,888 bytes: it is [0-9,]+ bytes over"):
        bench(fits_alone, board=str(board), repeat=1)


def test_a_model_too_big_for_the_boards_ram_is_refused_by_name(tmp_path):
    path = device_board(tmp_path, name="small-ram")
    path.write_text(path.read_text().replace('size = "16MiB"', 'size = "20KiB"'))
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], {"x": (1, 4096)}, {"y": None}, {})
    with pytest.raises(aot.PlanError, match=r"on board small-ram .*needs 32,768 bytes of RAM.* over ram=4,096"
                       r".*the inputs and outputs alone are over"):
        bench(model, board=str(path), repeat=1)


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace('clock_hz = 25_000_000\n', ''), "missing 'clock_hz'"),
    (lambda t: t.replace('timer = "dwt"', 'timer = "dwtt"'),
     "timer: 'dwtt' is not one of 'dwt', 'pmu', 'systick'; did you mean 'dwt'"),
    (lambda t: t.replace('clock_hz', 'clock_mhz'),
     "clock_mhz: not a key of the file's top level; did you mean 'clock_hz'\\?"),
    (lambda t: t.replace('machine = "mps2-an386"', 'machin = "mps2-an386"'),
     "loader.machin: not a key of \\[loader\\]; did you mean 'machine'"),
    (lambda t: t.replace('tool = "qemu"', 'tool = "jlink"'), "loader.tool: 'jlink' is not one of"),
    (lambda t: t.replace('sources = ["cmsdk_uart.c"]', 'sources = ["nowhere.c"]'), "'nowhere.c' is neither"),
    (lambda t: t.replace('[ram]\norigin = 0x21000000\nsize = "16MiB"\n', ''), "needs \\[flash\\] and \\[ram\\]"),
])
def test_a_bad_board_file_names_the_key_at_fault(tmp_path, edit, message):
    path = device_board(tmp_path)
    path.write_text(edit(path.read_text()))
    with pytest.raises(aot.OptionError, match=f"{path.name}: .*{message}"):
        load_board(str(path))


# ---- the protocol, against a scripted console ---------------------------------------------------------

class ScriptedPort:
    """Stands in for a pyserial port: hands out `script` in small pieces, records what is written."""

    def __init__(self, script: bytes):
        self.script, self.written = script, b""

    def read(self, n: int) -> bytes:
        piece, self.script = self.script[:7], self.script[7:]
        return piece

    def write(self, data: bytes) -> None:
        self.written += data

    def flush(self) -> None:
        pass


def reply(outputs: bytes, crc: str | None = None) -> bytes:
    import zlib

    crc = crc or f"{zlib.crc32(outputs):08x}"
    return (b"noise at reset\nm-ready-net\nm-timer-dwt-dwt-120000000\nm-lap-0-1000\nm-lap-1-1002\n"
            + f"m-output-0-{len(outputs)}\nm-hex-{outputs.hex()}\nm-crc-0-{crc}\nm-done\n".encode())


def test_the_protocol_reads_laps_and_outputs_and_checks_the_crc():
    port = ScriptedPort(reply(b"\x01\x02\x03\x04"))
    console = Console(port, "net on board b", timeout=2)
    timer = console.handshake("net", 2)
    assert (timer.used, timer.asked, timer.hz) == ("dwt", "dwt", 120_000_000)
    got = console.run(1, 2, 1)
    assert got.laps == [1000, 1002] and got.outputs == {0: b"\x01\x02\x03\x04"}
    assert port.written == b"ready%run 1 2%"


def test_a_corrupt_output_is_refused():
    console = Console(ScriptedPort(reply(b"\x01\x02\x03\x04", crc="deadbeef")), "net on board b", timeout=2)
    console.handshake("net", 2)
    with pytest.raises(aot.RunError, match="output 0 arrived corrupt"):
        console.run(1, 2, 1)


def test_inputs_are_loaded_a_line_at_a_time_each_answered():
    data = bytes(range(150))
    answers = b"m-ready-net\nm-timer-dwt-dwt-120000000\nm-loaded-64\nm-loaded-128\nm-loaded-150\n"
    port = ScriptedPort(answers)
    console = Console(port, "net on board b", timeout=2)
    console.handshake("net", 2)
    console.load(1, data)
    sent = port.written.decode().split("%")
    loads = [c for c in sent if c.startswith("load")]
    assert loads == [f"load 1 {o} {data[o:o + 64].hex()}" for o in (0, 64, 128)]
    refused = Console(ScriptedPort(b"m-ready-net\nm-timer-dwt-dwt-1\nm-error-load\n"), "net on board b", timeout=2)
    refused.handshake("net", 2)
    with pytest.raises(aot.RunError, match="loading input 0 at byte 0: the device answered 'm-error-load'"):
        refused.load(0, data)


def test_another_program_on_the_device_is_named():
    console = Console(ScriptedPort(b"m-ready-other\n"), "net on board b", timeout=1)
    with pytest.raises(aot.RunError, match="runs another program \\(m-ready-other"):
        console.handshake("net", 1)


def test_each_loader_is_its_tools_own_command_line(tmp_path):
    def commands(loader: str, console: str = 'url = "/dev/ttyACM0"') -> list[list[str]]:
        return flash_commands(load_board(str(device_board(tmp_path, loader=loader, console=console))),
                              "fw.elf", "fw.bin", "fw.hex")

    assert commands('tool = "pyocd"\ntarget = "stm32l4r5zitx"\nuid = "0669FF"') == [
        ["pyocd", "load", "-W", "-t", "stm32l4r5zitx", "-u", "0669FF", "--format", "elf", "fw.elf"]]
    assert commands('tool = "openocd"\nconfig = ["board/st_nucleo_l4.cfg"]') == [
        ["openocd", "-f", "board/st_nucleo_l4.cfg", "-c", "program {fw.elf} verify reset exit"]]
    assert commands('tool = "probe-rs"\nchip = "STM32L4R5ZITx"') == [
        ["probe-rs", "download", "--chip", "STM32L4R5ZITx", "fw.elf"], ["probe-rs", "reset", "--chip", "STM32L4R5ZITx"]]
    assert commands('tool = "st-flash"') == [["st-flash", "--reset", "write", "fw.bin", "0x0"]]
    assert commands('tool = "command"\ncommand = ["flash.sh", "--image={hex}"]') == [["flash.sh", "--image=fw.hex"]]


# ---- the probe on another machine ----------------------------------------------------------------------

def ssh_table(sshd, work_dir: Path) -> str:
    """A board file's [ssh] table for the test sshd."""
    return f'''
[ssh]
host = "127.0.0.1"
port = {sshd.port}
user = "root"
identity_file = "{sshd.dir / 'user'}"
known_hosts = "{sshd.dir / 'known_hosts'}"
work_dir = "{work_dir}"'''


@pytest.mark.ssh
def test_a_board_behind_an_ssh_host_runs_there_and_cleans_up(sshd, tmp_path, own_tmp):
    remote = tmp_path / "remote-work"
    remote.mkdir()
    board = device_board(tmp_path, name="m4-behind-ssh", extra=ssh_table(sshd, remote))
    result = bench(tiny_model(), board=str(board), repeat=2)
    assert result.ok and result.comparisons and result.where == "m4-behind-ssh"
    assert result.device.unit == "instructions (emulated)" and len(result.device.per_run) == 2
    assert result.device.kernel_instructions is None        # the plugin count is taken on this machine only
    assert list(remote.iterdir()) == []                     # the remote directory is removed
    assert not running_under(remote)                        # and the remote qemu stopped


@pytest.mark.ssh
def test_over_ssh_a_console_on_a_local_port_of_that_host_is_refused(sshd, tmp_path):
    board = device_board(tmp_path, name="tty-behind-ssh", loader='tool = "command"\ncommand = ["true", "{elf}"]',
                         console='url = "/dev/ttyACM0"', extra=ssh_table(sshd, tmp_path))
    with pytest.raises(aot.RunError, match="over ssh the console must be a network URL .*ser2net"):
        bench(tiny_model(), board=str(board), repeat=1)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("aot.")]


# ---- run and load on a board --------------------------------------------------------------------------

def test_aot_run_on_a_board_checks_against_onnxruntime(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    assert main(["run", str(model), "--board", "qemu-m55-uart"]) == 0
    assert "tiny.onnx on board qemu-m55-uart (cortex-m55) vs onnxruntime" in capsys.readouterr().out
    assert main(["run", str(model), "--board", "rpi4"]) == 1
    assert "is a Linux board reached over SSH" in capsys.readouterr().err


def test_a_module_on_a_board_runs_and_counts_there():
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with aot.compile(tiny_model(), board="qemu-m4-uart") as module:
        (y,) = module(x)
        np.testing.assert_array_equal(y, aot.run(tiny_model(), {"x": x}, target="cortex-m4")["y"])
        result = module.benchmark(repeat=2)
    assert result.where == "qemu-m4-uart" and result.device.unit == "instructions (emulated)"
    assert len(result.device.per_run) == 2 and result.times_ms == []


def test_tuning_on_a_farm_of_two_boards_spreads_the_candidates(tmp_path):
    from aot.tune import tune

    second = load_board(str(device_board(tmp_path, name="second-m4")))
    log = tmp_path / "records.json"
    results = tune(tiny_model(), board=["qemu-m4-uart", second], records=log, budget_s=120, trials=4)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(r["unit"] == "instructions" and r["error"] is None and r["cost"] > 0 for r in records)
    assert {r["where"] for r in records} == {"board qemu-m4-uart", "board second-m4"}
    # under qemu a board counts the kernel's instructions exactly: the same as counting it with the emulator
    counted = tune(tiny_model(), target="cortex-m4", records=tmp_path / "counted.json", budget_s=120, trials=1,
                   unit="instructions")
    assert results[0].default_cost == counted[0].default_cost


def test_a_farm_of_boards_of_two_targets_is_refused():
    from aot.tune import tune

    with pytest.raises(aot.OptionError, match="must share a target: qemu-m4-uart is cortex-m4, qemu-m55-uart is"):
        tune(tiny_model(), board=["qemu-m4-uart", "qemu-m55-uart"], budget_s=10)


@pytest.mark.parametrize("target,machine,ram,timer", [("cortex-m7", "mps2-an500", "0x60000000", "dwt"),
                                                      ("cortex-m0plus", "mps2-an385", "0x21000000", "systick")])
def test_the_device_harness_builds_warning_free_and_runs_on_the_other_cores(tmp_path, target, machine, ram, timer):
    path = device_board(tmp_path, name=f"qemu-{target}", loader=f'tool = "qemu"\nmachine = "{machine}"')
    path.write_text(path.read_text().replace('target = "cortex-m4"', f'target = "{target}"')
                    .replace('timer = "dwt"', f'timer = "{timer}"').replace("0x21000000", ram))
    result = bench(tiny_model(), board=str(path), repeat=2)
    assert result.ok and result.target == target and result.device.timer == "systick"
    assert bool(result.device.timer_note) == (timer != "systick")


def test_every_real_board_links_a_firmware_image_where_its_memory_is(tmp_path):
    """The real boards are not run here: their images are linked, and the vector table checked at reset's address."""
    import subprocess

    from aot.boards import all_boards
    from aot.device.board import DeviceBoard
    from aot.device.firmware import build_firmware

    boards = [b for b in all_boards() if isinstance(b, DeviceBoard) and not b.emulated]
    assert len(boards) >= 5
    x = np.zeros((1, 3, 8, 8), np.float32)
    for board in boards:
        work = tmp_path / board.name
        work.mkdir()
        artifact = build(tiny_model(), target=board.target, out_dir=work / "build", memory=board.memory_limits)
        elf = build_firmware(artifact, board, {"x": x}, work)
        symbols = dict(line.split()[::-2] for line in subprocess.run(
            ["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout.splitlines()
            if len(line.split()) == 3)
        assert int(symbols["aot_vectors"], 16) == board.flash.origin, board.name
        assert int(symbols["__stack_top"], 16) == board.ram.origin + board.ram.size, board.name


def test_a_board_flashed_by_a_tool_and_reached_on_its_console_url(tmp_path):
    """The path of a real board: a flashing tool that returns once the device runs (here a script starting
    qemu in the background, its UART listening on a fixed port without waiting for anyone, as a board's
    firmware starts at reset), then the console URL from the board file. The device said m-ready before
    the host connected: the host asks again (`ready%`)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pidfile = tmp_path / "qemu.pid"
    script = tmp_path / "flash.sh"
    script.write_text(f"""#!/bin/sh
qemu-system-arm -M mps2-an386 -nographic -monitor none -icount shift=0 -semihosting-config enable=on,target=native \\
  -chardev socket,id=c,host=127.0.0.1,port={port},server=on,wait=off -serial chardev:c -kernel "$1" \\
  </dev/null >/dev/null 2>&1 &
echo $! > {pidfile}
sleep 0.5
""")
    script.chmod(0o755)
    board = device_board(tmp_path, name="flashed-m4", loader=f'tool = "command"\ncommand = ["{script}", "{{elf}}"]',
                         console=f'url = "socket://127.0.0.1:{port}"')
    try:
        result = bench(tiny_model(), board=str(board), repeat=2)
    finally:
        pid = int(pidfile.read_text())
        os.kill(pid, 9)
        time.sleep(0.1)
    assert result.ok and result.comparisons
    # a flashed board is not known to be qemu: its figures are cycles at the board's clock, as a real one's
    assert result.device.unit == "cycles" and len(result.times_ms) == 2
    assert result.device.timer == "systick" and "held by the debugger" in result.device.timer_note


def test_options_that_do_not_apply_to_a_microcontroller_are_refused():
    with pytest.raises(aot.OptionError, match="--number and --min-repeat-ms do not apply"):
        bench(tiny_model(), board="qemu-m4-uart", number=5)
    with pytest.raises(aot.OptionError, match="--profile is not available on microcontroller hardware"):
        bench(tiny_model(), board="nucleo-l4r5zi", profile=True)


@pytest.mark.parametrize("target, hint", [("cortex-m7", "--board qemu-m7-uart under qemu, or a real one"),
                                          ("cortex-m0plus", "--board with a real one")])
def test_bench_on_a_bare_metal_target_names_the_board_that_stands_in_for_it(target, hint):
    with pytest.raises(aot.RunError, match=f"target {target}: the semihosting harness under qemu has no clock; "
                                           f"time it on a microcontroller board \\({hint}\\)"):
        bench(tiny_model(), target=target)
