"""Target and board files checked by their schemas (aot/config_schema.py): every error names the file, the
key's path, what was expected and the closest key; a broken user file is reported and skipped by the
listings; the schemas `aot schema` publishes are valid JSON Schema that every shipped file meets; argument
errors are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from aot.config_schema import published

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def aot(*args, env=None):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True)


def one_line_error(proc) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def edited(tmp_path: Path, kind: str, name: str, new_name: str, old: str, new: str) -> Path:
    text = (ROOT / kind / f"{name}.toml").read_text()
    assert old in text
    text = text.replace(old, new).replace(f'name = "{name}"', f'name = "{new_name}"')
    path = tmp_path / f"{new_name}.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("aliases")) + "\n")
    return path


@pytest.mark.parametrize("old, new, says", [
    ("vector_bits = 32", "vector_bit = 32",
     "vector_bit: not a key of the file's top level; did you mean 'vector_bits'?"),
    ('ram = "12MiB"', 'ram = "lots"', "memory.ram: expected a size in bytes: an integer, or a string such as "
                                      "\"512KiB\", \"2MiB\", \"1.5MB\", not 'lots'"),
    ("mr = 8 ", "mr = 'eight' ", "knobs.mr: expected an integer or true or false, not 'eight'"),
    ('cc = "arm-none-eabi-gcc"', 'c = "arm-none-eabi-gcc"',
     "toolchain.c: not a key of [toolchain]; did you mean 'cc'?"),
    ("align = 16", "align = 0", "align: expected at least 1"),
    ("fma = true", "fma = 1", "fma: expected true or false (fused multiply-add in hardware), not 1"),
])
def test_a_target_file_error_names_the_file_the_key_and_what_was_expected(tmp_path, old, new, says):
    path = edited(tmp_path, "targets", "cortex-m4", "mine", old, new)
    line = one_line_error(aot("targets", path))
    line = one_line_error(aot("build", "x.onnx", "--target", path))
    assert line.startswith(f"aot: error: {path}: ") and says in line, line


def test_a_broken_user_target_is_reported_and_skipped_by_the_listing(tmp_path):
    edited(tmp_path, "targets", "cortex-m4", "broken", "vector_bits = 32", "vector_bit = 32")
    edited(tmp_path, "targets", "cortex-m4", "fine", "align = 16", "align = 16")
    proc = aot("targets", "--target-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert "fine" in names and "cortex-m4" in names and "broken" not in names
    assert proc.stderr.startswith(f"aot: warning: skipped {tmp_path / 'broken.toml'}: vector_bit: not a key")
    line = one_line_error(aot("build", "x.onnx", "--target", "broken", "--target-dir", tmp_path))
    assert "broken.toml: vector_bit: not a key" in line        # asked for by name: its error


def test_a_broken_user_board_is_reported_and_skipped_by_the_listing(tmp_path):
    edited(tmp_path, "boards", "qemu-m4-uart", "broken", 'timer = "dwt"', 'timer = "dwtt"')
    proc = aot("boards", "--board-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert "qemu-m4-uart" in names and "broken" not in names
    assert "skipped" in proc.stderr and "timer: 'dwtt' is not one of 'dwt', 'pmu', 'systick'; did you mean 'dwt'?" \
        in proc.stderr


def test_a_microcontroller_board_without_a_console_says_so(tmp_path):
    text = (ROOT / "boards" / "qemu-m4-uart.toml").read_text()
    path = tmp_path / "nocon.toml"
    path.write_text(text.split("[console]")[0])
    line = one_line_error(aot("run", "x.onnx", "--board", path))
    assert line == f"aot: error: {path}: missing 'console'"


@pytest.mark.parametrize("kind, folder", [("target", "targets"), ("board", "boards")])
def test_the_published_schemas_are_valid_and_every_shipped_file_meets_them(kind, folder):
    proc = aot("schema", kind)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == json.loads(json.dumps(published(kind)))
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    files = sorted((ROOT / folder).glob("*.toml"))
    assert files
    for path in files:
        errors = list(validator.iter_errors(tomllib.loads(path.read_text())))
        assert not errors, f"{path.name}: {errors[0].message}"
    assert list(validator.iter_errors({"name": 3})), "a schema that takes anything checks nothing"


@pytest.mark.parametrize("args, says", [
    (("build", "m.onnx", "--bogus"), "aot: error: unrecognized arguments: --bogus (see aot build --help)"),
    (("build",), "aot build: error: the following arguments are required: model (see aot build --help)"),
    (("frob",), "(see aot --help)"),
])
def test_argument_errors_are_one_line(args, says):
    proc = aot(*args)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert says in line, line
