"""The files shipped with the package (targets/, boards/, runtime_c/, in a wheel under aot/data/) and the
user directories searched before them: every shipped file is declared as package data and loads as
shipped() finds it (through importlib.resources from a wheel); user targets and
boards, named by option, argument or environment variable, are listed with their origin, shadow shipped
ones of the same name, and are the ones a build uses."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import make_model

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import aot
from aot.boards import all_boards, load_board
from aot.data import runtime_files, shipped
from aot.target import all_targets, get_target, target_text

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_user_paths(monkeypatch):
    """Only what a test names: none of the caller's user directories."""
    monkeypatch.delenv("AOT_TARGET_PATH", raising=False)
    monkeypatch.delenv("AOT_BOARD_PATH", raising=False)


def aot_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def tiny_model():
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    weights = {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32)}
    return make_model(nodes, {"x": (1, 2, 6, 6)}, {"y": None}, weights)


def renamed(text: str, name: str) -> str:
    """A shipped target's TOML as a user's own target `name` (without the shipped aliases)."""
    text = re.sub(r'(?m)^aliases = .*\n', "", text)
    return re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', text, count=1)


def _package_dirs() -> dict[str, Path]:
    """Each package pyproject.toml lists, and the directory of the checkout it is built from."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = config["package-dir"]
    dirs = {}
    for package in config["packages"]:
        parent = max((p for p in mapped if package == p or package.startswith(p + ".")), key=len, default=None)
        rest = package.removeprefix(parent).strip(".").split(".") if parent else package.split(".")
        dirs[package] = ROOT.joinpath(*([mapped[parent]] if parent else []), *[r for r in rest if r])
    return dirs


def test_every_shipped_file_is_declared_as_package_data():
    """A file under targets/, boards/, runtime_c/ or a template directory that no package-data glob matches
    would be missing from the wheel (setuptools globs the patterns in each package's directory, as here)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = _package_dirs()
    declared = {p for package, globs in config["package-data"].items() for g in globs for p in dirs[package].glob(g)}
    in_tree = {p for top in ("targets", "boards", "runtime_c", "aot/codegen/templates")
               for p in (ROOT / top).rglob("*") if p.is_file()}
    assert len(in_tree) >= 40 and sorted(map(str, in_tree - declared)) == []


def test_every_python_package_is_listed_and_built_from_where_it_lies():
    """pyproject.toml lists the packages by name (the shipped files are mapped into aot/data): a package
    left off would be missing from the wheel."""
    dirs = _package_dirs()
    python = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "aot").rglob("__init__.py")}
    assert python <= set(dirs) and all(d.is_dir() for d in dirs.values()), (python - set(dirs), dirs)


def test_shipped_targets_boards_and_runtime_load_from_the_checkout_or_the_package():
    target_files = sorted(r.name for r in shipped("targets").iterdir() if r.name.endswith(".toml"))
    board_files = sorted(r.name for r in shipped("boards").iterdir() if r.name.endswith(".toml"))
    targets = all_targets()
    assert sorted(t.name + ".toml" for t in targets) == target_files        # one target per file, named as it
    assert all(t.origin == "aot" for t in targets)
    assert sorted(b.name + ".toml" for b in all_boards()) == board_files
    scripts = {t.linker_script for t in targets if t.os == "none"}
    names = ["harness.c.j2", "io.c.j2", "timing.c.j2", "workspace.c.j2", "baremetal/startup.c", "qemu/insncount.c",
             *(f"baremetal/{s}" for s in sorted(scripts))]
    with runtime_files(*names) as paths:
        assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    for t in targets:
        assert tomllib.loads(target_text(t.name))["name"] == t.name
    assert (shipped("boards") / board_files[0]).read_text() == (ROOT / "boards" / board_files[0]).read_text()


@pytest.fixture
def user_targets(tmp_path):
    """A user directory: `my-m4`, a new target, and `cortex-m4` shadowing the shipped one with 1 KiB of RAM."""
    d = tmp_path / "my targets"
    d.mkdir()
    m4 = target_text("cortex-m4")
    (d / "my-m4.toml").write_text(renamed(m4, "my-m4"))
    (d / "cortex-m4.toml").write_text(m4.replace('ram = "12MiB"', 'ram = "1KiB"'))
    return d


def test_user_targets_are_listed_with_their_origin_and_shadow_shipped_ones(user_targets, tmp_path):
    listed = {t.name: t for t in all_targets([user_targets])}
    assert listed["my-m4"].origin == str(user_targets) and listed["cortex-m4"].origin == str(user_targets)
    assert listed["cortex-m4"].memory["ram"] == 1024
    assert listed["cortex-m55"].origin == "aot"
    assert get_target("cortex-m4").memory["ram"] == 12 << 20                      # without the directory
    artifact = aot.build(tiny_model(), target=get_target("my-m4", [user_targets]), out_dir=tmp_path / "my")
    assert artifact.metadata["target"]["name"] == "my-m4" and artifact.object.stat().st_size > 0
    with pytest.raises(aot.PlanError, match="RAM"):
        aot.build(tiny_model(), target=get_target("cortex-m4", [user_targets]), out_dir=tmp_path / "shadowed")


def test_the_command_line_takes_target_dirs_and_the_environment_variable(user_targets, tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    for how in (("--target-dir", user_targets), ()):
        env = {} if how else {"AOT_TARGET_PATH": os.pathsep.join(["/no/such/dir", str(user_targets)])}
        listing = aot_cli("targets", *how, env=env)
        assert listing.returncode == 0, listing.stderr
        rows = {line.split()[0]: line for line in listing.stdout.splitlines()}
        assert str(user_targets) in rows["my-m4"] and str(user_targets) in rows["cortex-m4"]
        assert rows["cortex-m55"].split()[4] == "aot"
        built = aot_cli("build", model, "--target", "my-m4", *how, "-o", tmp_path / "b", env=env)
        assert built.returncode == 0 and "for my-m4" in built.stdout, built.stderr
        shadowed = aot_cli("build", model, "--target", "cortex-m4", *how, "-o", tmp_path / "s", env=env)
        assert shadowed.returncode == 1 and "RAM" in shadowed.stderr
    assert 'name = "my-m4"' in aot_cli("targets", "my-m4", "--target-dir", user_targets).stdout
    assert aot_cli("build", model, "--target", "cortex-m4", "-o", tmp_path / "c").returncode == 0


def test_errors_name_the_searched_directories(user_targets, tmp_path):
    proc = aot_cli("build", tmp_path / "m.onnx", "--target", "nope", "--target-dir", user_targets,
                   env={"AOT_TARGET_PATH": "/no/such/dir"})
    assert proc.returncode == 1
    assert f"{user_targets} (--target-dir)" in proc.stderr
    assert "/no/such/dir ($AOT_TARGET_PATH, no such directory)" in proc.stderr
    assert "shipped with aot" in proc.stderr and "my-m4" in proc.stderr
    proc = aot_cli("targets", "--target-dir", tmp_path / "missing")
    assert proc.returncode == 1 and "--target-dir" in proc.stderr and "no such directory" in proc.stderr
    with pytest.raises(aot.OptionError, match="unknown board 'nope'.*shipped with aot"):
        load_board("nope")


def test_a_target_file_named_by_path(user_targets, tmp_path):
    tgt = get_target(str(user_targets / "my-m4.toml"))
    assert tgt.name == "my-m4" and tgt.origin == str(user_targets)
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    proc = aot_cli("build", model, "--target", user_targets / "my-m4.toml", "-o", tmp_path / "b")
    assert proc.returncode == 0 and "for my-m4" in proc.stdout, proc.stderr
    with pytest.raises(aot.TargetError, match="no such file"):
        get_target(str(tmp_path / "nope.toml"))


@pytest.mark.qemu
def test_a_user_target_with_its_own_linker_script_runs(tmp_path):
    """The linker script beside a user's target file is the one the harness is linked with."""
    tgt = get_target("cortex-m4")
    if shutil.which(tgt.cc) is None or shutil.which(tgt.run_command[0]) is None:
        pytest.skip(f"{tgt.cc} or {tgt.run_command[0]} not installed")
    d = tmp_path / "mine"
    d.mkdir()
    with runtime_files("baremetal/mps2-an386.ld") as (script,):
        (d / "board.ld").write_text(script.read_text())
    text = renamed(target_text("cortex-m4"), "my-m4").replace('"mps2-an386.ld"', '"board.ld"')
    (d / "my-m4.toml").write_text(text)
    mine = get_target("my-m4", [d])
    assert mine.linker_script == str(d / "board.ld")
    assert aot.check(tiny_model(), target=mine, out_dir=tmp_path / "b").ok
    (d / "board.ld").write_text("this is not a linker script\n")
    with pytest.raises(aot.RunError, match="compiling the harness"):
        aot.run(tiny_model(), target=mine, out_dir=tmp_path / "c")


def test_user_boards_are_listed_and_shadow_shipped_ones(tmp_path):
    d = tmp_path / "boards"
    d.mkdir()
    (d / "rpi4.toml").write_text('name = "rpi4"\ntarget = "aarch64"\nhost = "pi.example"\nuser = "me"\n')
    (d / "lab.toml").write_text('name = "lab"\ntarget = "aarch64"\nhost = "lab.example"\nuser = "me"\n'
                                'identity_file = "keys/id"\n')
    assert load_board("rpi4").host == "raspberrypi.local"
    board = load_board("rpi4", [d])
    assert board.host == "pi.example" and board.origin == str(d)
    assert load_board("lab", [d]).identity_file == str((d / "keys" / "id").resolve())   # beside the board file
    for how, env in ((("--board-dir", d), {}), ((), {"AOT_BOARD_PATH": str(d)})):
        proc = aot_cli("boards", *how, env=env)
        assert proc.returncode == 0, proc.stderr
        rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
        assert "me@pi.example:22" in rows["rpi4"] and rows["rpi4"].endswith(str(d))
        assert "lab" in rows and rows["localhost-aarch64-qemu"].endswith(" aot")
        assert 'host = "pi.example"' in aot_cli("boards", "rpi4", *how, env=env).stdout
