"""The shipped microcontroller board files and their board-support C: every board file is complete, and
every support source compiles warning-free for its board's target and defines the three functions of
aot_device.h. Compile checks only: none of these boards' support code has run on hardware here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.device.board import LOADER_OPTIONS, read_device_board
from aot.target import get_target

DATA = Path(__file__).resolve().parent.parent       # the checkout, with boards/ and runtime_c/
DEVICE_C = DATA / "runtime_c" / "device"
TIMERS = {"dwt", "pmu", "systick"}
FUNCTIONS = {"aot_board_init", "aot_console_putc", "aot_console_getc"}
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def device_boards() -> list[Path]:
    """Shipped board files that describe a microcontroller (they have a [loader] table)."""
    return sorted(p for p in (DATA / "boards").glob("*.toml") if "loader" in tomllib.loads(p.read_text()))


def read(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def resolve(source: str, board_file: Path) -> Path:
    """A [console] source: beside the board file first, then shipped in runtime_c/device/."""
    for base in (board_file.parent, DEVICE_C):
        if (base / source).is_file():
            return base / source
    raise AssertionError(f"{board_file.name}: source {source} is neither beside the board file nor shipped")


def test_the_real_boards_are_shipped():
    names = {read(p)["name"] for p in device_boards()}
    assert {"nucleo-l4r5zi", "nucleo-f746zg", "nucleo-h7a3zi-q", "nrf52840-dk", "mps3-an552"} <= names


@pytest.mark.parametrize("board_file", device_boards(), ids=lambda p: p.stem)
def test_board_file_is_complete(board_file: Path):
    data = read(board_file)
    assert data["name"] == board_file.stem
    get_target(data["target"])                                  # a known aot target
    assert isinstance(data["clock_hz"], int) and data["clock_hz"] > 0
    assert data["timer"] in TIMERS
    for region in ("flash", "ram"):
        assert {"origin", "size"} <= set(data[region]), f"[{region}] needs origin and size"
    loader = data["loader"]
    assert loader["tool"] in LOADER_OPTIONS
    required, optional = LOADER_OPTIONS[loader["tool"]]
    assert set(required) <= set(loader) <= set(required) | set(optional) | {"tool"}
    assert data["console"].get("url") or loader["tool"] == "qemu"
    # The same file through aot's own reader: every key known, memory and stack consistent.
    board = read_device_board(data, board_file, "shipped")
    assert board.memory_limits["ram"] > 0


def arm_gcc() -> str:
    gcc = shutil.which("arm-none-eabi-gcc")
    if not gcc or not shutil.which("arm-none-eabi-nm"):
        pytest.skip("arm-none-eabi-gcc is not installed")
    return gcc


@pytest.mark.parametrize("board_file", [p for p in device_boards() if read(p).get("console", {}).get("sources")],
                         ids=lambda p: p.stem)
def test_support_sources_compile_and_define_the_interface(board_file: Path, tmp_path: Path):
    """Each of the board's sources compiles warning-free for its target; together they define the interface."""
    gcc = arm_gcc()
    data = read(board_file)
    defines = [f"-D{k}={v}" for k, v in data["console"].get("defines", {}).items()]
    defined: set[str] = set()
    for i, source in enumerate(data["console"]["sources"]):
        obj = tmp_path / f"board{i}.o"
        cmd = [gcc, *get_target(data["target"]).cflags, *CFLAGS, f"-DAOT_CLOCK_HZ={data['clock_hz']}", *defines,
               f"-I{DEVICE_C}", "-c", str(resolve(source, board_file)), "-o", str(obj)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        nm = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(obj)], capture_output=True, text=True,
                            timeout=60, check=True)
        defined |= {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1:2] == ["T"]}
    assert FUNCTIONS <= defined


@pytest.mark.parametrize("board_file", [p for p in device_boards() if read(p)["console"]["sources"][0].startswith(
    "boards/")], ids=lambda p: p.stem)
def test_support_source_refuses_another_clock(board_file: Path, tmp_path: Path):
    """A board's own support sets up one clock; built for a board file whose clock_hz says another, it
    must refuse rather than run the UART and every time figure at the wrong rate."""
    gcc = arm_gcc()
    data = read(board_file)
    source = resolve(data["console"]["sources"][0], board_file)
    cmd = [gcc, *get_target(data["target"]).cflags, *CFLAGS, f"-DAOT_CLOCK_HZ={data['clock_hz'] // 2}",
           f"-I{DEVICE_C}", "-c", str(source), "-o", str(tmp_path / "board.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "clock_hz must be" in done.stderr
