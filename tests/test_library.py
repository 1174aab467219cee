"""What a firmware's build system takes from a build (aot/codegen/library.py): NAME.a, CMakeLists.txt,
NAME.mk, toolchain.cmake; and the firmware example (examples/firmware) configured and built by CMake
from a build directory, run under qemu, printing what onnxruntime predicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import zoo

import aot
from aot.target import get_target

ROOT = Path(__file__).resolve().parent.parent
FIRMWARE = ROOT / "examples" / "firmware"
BOARDS = {"cortex-m4": "mps2-an386", "cortex-m55": "mps3-an547"}


@pytest.fixture(scope="module")
def resnet8(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "resnet8.onnx"
    onnx.save(zoo.resnet8(), path)
    return path


def _input(model: Path, header: Path) -> np.ndarray:
    """make_input.py's header of the model's input, and the input itself."""
    subprocess.run([sys.executable, str(FIRMWARE / "make_input.py"), str(model), str(header)], check=True,
                   capture_output=True)
    with np.load(header.with_suffix(".npz")) as data:
        return data["input"]


def _onnxruntime(model: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0].reshape(-1)


def _cmake(source: Path, build: Path, *options: str) -> subprocess.CompletedProcess:
    configure = subprocess.run(["cmake", "-S", str(source), "-B", str(build), *options], capture_output=True,
                               text=True)
    if configure.returncode != 0:
        return configure
    return subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)


def _printed_scores(text: str) -> tuple[int, np.ndarray]:
    """The class and the scores a firmware printed ("class N", "scores s0 s1 ...")."""
    lines = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith(("class ", "scores ")))
    return int(lines["class"]), np.array([float(s) for s in lines["scores"].split()], np.float32)


def _run_firmware(board: str, elf: Path) -> str:
    """The firmware's console under qemu."""
    return console_until_scores(["qemu-system-arm", "-M", board, "-nographic", "-kernel", str(elf)])


def console_until_scores(command: list[str], cwd: Path | None = None) -> str:
    """What the firmware prints under qemu (`command`): it idles once it has printed its scores, so qemu is
    stopped then (a reader quits with Ctrl-A X)."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    out = ""
    try:
        for line in proc.stdout:
            out += line
            if line.startswith("scores "):
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return out


def test_a_build_has_a_library_and_files_for_cmake_and_make(resnet8, tmp_path):
    artifact = aot.build(resnet8, target="cortex-m4", out_dir=tmp_path / "m4", name="net")
    d = artifact.dir
    members = subprocess.run(["arm-none-eabi-ar", "t", str(d / "net.a")], capture_output=True, text=True,
                             check=True).stdout.split()
    assert members == ["net.o", "net.c.o"]
    assert (d / "net.o").read_bytes() == subprocess.run(["arm-none-eabi-ar", "p", str(d / "net.a"), "net.o"],
                                                        capture_output=True, check=True).stdout
    index = subprocess.run(["arm-none-eabi-nm", "--print-armap", str(d / "net.a")], capture_output=True, text=True,
                           check=True).stdout
    assert "net_run in net.c.o" in index and "net_k1_conv" in index, index[:2000]
    flags = list(get_target("cortex-m4").cflags)
    assert artifact.metadata["library"] == {"file": "net.a", "cc": "arm-none-eabi-gcc", "cflags": flags}
    assert " ".join(flags) in (d / "net.h").read_text()      # the header says how its wrapper was compiled
    (tmp_path / "Makefile").write_text(f"include {d}/net.mk\nshow:\n\t@echo '$(NET_CC)|$(NET_CFLAGS)|$(NET_LIB)|"
                                       "$(NET_INCLUDES)|$(NET_OBJECT)|$(NET_SOURCES)'\n")
    shown = subprocess.run(["make", "-s", "-C", str(tmp_path), "show"], capture_output=True, text=True,
                           check=True).stdout.strip().split("|")
    assert shown == ["arm-none-eabi-gcc", " ".join(flags), f"{d}/net.a", f"-I{d}", f"{d}/net.o", f"{d}/net.c"]
    toolchain = (d / "toolchain.cmake").read_text()
    assert "set(CMAKE_C_COMPILER arm-none-eabi-gcc)" in toolchain and "-mfloat-abi=hard" in toolchain
    long = "a_model_named_at_length"     # member names over 15 characters: the archive's long-name table
    host = aot.build(resnet8, target="host", out_dir=tmp_path / "host", name=long)
    assert not (host.dir / "toolchain.cmake").exists()      # the native compiler needs none
    assert subprocess.run(["ar", "t", str(host.dir / f"{long}.a")], capture_output=True, text=True,
                          check=True).stdout.split() == [f"{long}.o", f"{long}.c.o"]
    (tmp_path / "main.c").write_text(f'#include "{long}.h"\nint main(void) {{ return {long}_run(0, 0, 0) == '
                                     f"{long.upper()}_ERR_NULL ? 0 : 1; }}\n")
    exe = tmp_path / "main"
    subprocess.run(["gcc", f"-I{host.dir}", str(tmp_path / "main.c"), str(host.dir / f"{long}.a"), "-o", str(exe)],
                   check=True, capture_output=True)
    assert subprocess.run([str(exe)]).returncode == 0


def test_build_system_files_are_the_same_bytes_for_the_same_build(resnet8, tmp_path):
    dirs = [aot.build(resnet8, target="cortex-m4", out_dir=tmp_path / str(i)).dir for i in range(2)]
    for name in ("resnet8.a", "CMakeLists.txt", "resnet8.mk", "toolchain.cmake"):
        assert (dirs[0] / name).read_bytes() == (dirs[1] / name).read_bytes(), name


def test_a_cmake_application_on_this_machine_prints_what_onnxruntime_predicts(resnet8, tmp_path):
    build = aot.build(resnet8, target="host", out_dir=tmp_path / "model", name="model").dir
    x = _input(resnet8, tmp_path / "input.h")
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        f"add_subdirectory({build} model)\nadd_executable(app main.c)\n"
        f"target_include_directories(app PRIVATE {tmp_path})\n"
        "target_compile_options(app PRIVATE -std=c99 -Wall -Wextra -Werror -pedantic)\n"
        "target_link_libraries(app PRIVATE model)\n")
    (app / "main.c").write_text(
        '#include <stdio.h>\n#include "model.h"\n#include "input.h"\n'
        "static unsigned char ws[MODEL_WORKSPACE_SIZE] __attribute__((aligned(MODEL_WORKSPACE_ALIGN)));\n"
        "static float scores[EXAMPLE_SCORES];\n"
        "int main(void) {\n    model_outputs out = {scores};\n    unsigned i;\n"
        "    if (model_run(&example_inputs, &out, ws) != MODEL_OK) return 1;\n"
        '    printf("scores");\n    for (i = 0; i < EXAMPLE_SCORES; i++) printf(" %.9g", scores[i]);\n'
        '    printf("\\n");\n    return 0;\n}\n')
    made = _cmake(app, tmp_path / "b")
    assert made.returncode == 0, made.stdout + made.stderr
    printed = subprocess.run([str(tmp_path / "b" / "app")], capture_output=True, text=True, check=True).stdout
    scores = np.array([float(s) for s in printed.split()[1:]], np.float32)
    np.testing.assert_allclose(scores, _onnxruntime(resnet8, x), rtol=1e-5, atol=1e-5)


@pytest.mark.qemu
@pytest.mark.parametrize("target", sorted(BOARDS))
def test_the_firmware_example_built_by_cmake_classifies_as_onnxruntime_does(target, resnet8, tmp_path):
    """examples/firmware as the README walks through it: the build's toolchain file and library target,
    the board's start-up code, linker script and UART; the image run under qemu."""
    build = aot.build(resnet8, target=target, out_dir=tmp_path / "model", name="model").dir
    x = _input(resnet8, tmp_path / "input.h")
    made = _cmake(FIRMWARE, tmp_path / "app", f"-DBOARD={BOARDS[target]}", f"-DMODEL_DIR={build}",
                  f"-DINPUT_HEADER={tmp_path / 'input.h'}", f"-DCMAKE_TOOLCHAIN_FILE={build / 'toolchain.cmake'}")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "warning" not in made.stdout + made.stderr
    label, scores = _printed_scores(_run_firmware(BOARDS[target], tmp_path / "app" / "firmware.elf"))
    reference = _onnxruntime(resnet8, x)
    np.testing.assert_allclose(scores, reference, atol=2e-6)    # printed with 6 decimals
    assert label == int(np.argmax(reference))


@pytest.mark.qemu
def test_the_library_links_with_the_target_compiler_alone_through_the_make_fragment(resnet8, tmp_path):
    """No CMake: a Makefile includes NAME.mk and links NAME.a into the firmware with arm-none-eabi-gcc."""
    build = aot.build(resnet8, target="cortex-m4", out_dir=tmp_path / "model", name="model").dir
    x = _input(resnet8, tmp_path / "input.h")
    sources = " ".join(str(FIRMWARE / f) for f in ("main.c", "board.c", "startup.c"))
    (tmp_path / "Makefile").write_text(
        f"include {build}/model.mk\n"
        f"firmware.elf: $(MODEL_LIB)\n"
        f"\t$(MODEL_CC) $(MODEL_CFLAGS) $(MODEL_INCLUDES) -I{tmp_path} -DINPUT_HEADER='\"input.h\"' "
        f"-DUART_BASE=0x40004000 -nostartfiles --specs=nano.specs -Wl,--gc-sections -Wl,-z,noexecstack "
        f"-T{FIRMWARE / 'mps2-an386.ld'} {sources} $(MODEL_LIB) -o $@\n")
    made = subprocess.run(["make", "-s", "-C", str(tmp_path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    label, scores = _printed_scores(_run_firmware("mps2-an386", tmp_path / "firmware.elf"))
    np.testing.assert_allclose(scores, _onnxruntime(resnet8, x), atol=2e-6)


def test_a_cmake_project_for_another_target_fails_at_configure_time_naming_both(resnet8, tmp_path):
    """An AArch64 build added to a Cortex-M4 firmware: configure stops, naming the build's target and
    the project's."""
    m4 = aot.build(resnet8, target="cortex-m4", out_dir=tmp_path / "m4").dir
    arm64 = aot.build(resnet8, target="aarch64", out_dir=tmp_path / "arm64").dir
    (tmp_path / "input.h").write_text("")
    made = _cmake(FIRMWARE, tmp_path / "app", f"-DMODEL_DIR={arm64}", f"-DINPUT_HEADER={tmp_path / 'input.h'}",
                  f"-DCMAKE_TOOLCHAIN_FILE={m4 / 'toolchain.cmake'}")
    assert made.returncode != 0
    message = " ".join(made.stderr.split())
    assert "built by aot for target aarch64 (aarch64-unknown-linux-gnu)" in message, message
    assert "this project compiles for cortex-m4 (Generic) with" in message and "arm-none-eabi-gcc" in message
    assert not (tmp_path / "app" / "firmware.elf").exists()


def test_the_header_refuses_a_compiler_for_another_core_or_float_abi(resnet8, tmp_path):
    d = aot.build(resnet8, target="cortex-m4", out_dir=tmp_path / "m4").dir
    for cc, flags in (("gcc", []), ("arm-none-eabi-gcc", ["-mthumb", "-mcpu=cortex-m4", "-mfloat-abi=soft"]),
                      ("arm-none-eabi-gcc", ["-mthumb", "-mcpu=cortex-m55", "-mfloat-abi=hard"])):
        proc = subprocess.run([cc, *flags, "-c", str(d / "resnet8.c"), "-o", str(tmp_path / "w.o")],
                              capture_output=True, text=True)
        assert proc.returncode != 0 and "the model was built for cortex-m4" in proc.stderr, (cc, flags)
    proc = subprocess.run(["arm-none-eabi-gcc", "-mthumb", "-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard",
                           "-c", str(d / "resnet8.c"), "-o", str(tmp_path / "w.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr     # the M7 runs Armv7E-M code with the hard-float ABI


def test_without_the_target_compiler_the_build_says_there_is_no_library(resnet8, tmp_path):
    source = get_target("cortex-m4").source
    text = Path(source).read_text().replace('name = "cortex-m4"', 'name = "m4-elsewhere"').replace(
        'aliases = ["m4"]', "aliases = []").replace('cc = "arm-none-eabi-gcc"', 'cc = "no-such-eabi-gcc"')
    (tmp_path / "m4-elsewhere.toml").write_text(text)
    artifact = aot.build(resnet8, target=get_target("m4-elsewhere", [tmp_path]), out_dir=tmp_path / "b")
    assert not (artifact.dir / "resnet8.a").exists()
    assert artifact.metadata["library"]["file"] is None
    assert artifact.metadata["library"]["missing"] == "no-such-eabi-gcc not found"
    assert "aot made no resnet8.a (no-such-eabi-gcc not found" in \
        (artifact.dir / "CMakeLists.txt").read_text()
    cli = subprocess.run([sys.executable, "-m", "aot", "build", str(resnet8), "--target-dir", str(tmp_path),
                          "--target", "m4-elsewhere", "-o", str(tmp_path / "c")], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "note: no resnet8.a (no-such-eabi-gcc not found)" in cli.stderr


def test_a_compiler_that_fails_on_the_wrapper_fails_the_build_saying_so(resnet8, tmp_path):
    source = get_target("cortex-m4").source
    text = Path(source).read_text().replace('name = "cortex-m4"', 'name = "m4-broken"').replace(
        'aliases = ["m4"]', "aliases = []").replace('cc = "arm-none-eabi-gcc"', 'cc = "false"')
    (tmp_path / "m4-broken.toml").write_text(text)
    with pytest.raises(aot.RunError, match=r"target m4-broken: compiling resnet8.c for resnet8.a failed \(.*false "):
        aot.build(resnet8, target=get_target("m4-broken", [tmp_path]), out_dir=tmp_path / "b")
    assert not (tmp_path / "b").exists()
