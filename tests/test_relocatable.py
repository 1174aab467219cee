"""Joining two relocatable objects into one (aot/codegen/relocatable.py), as a build does with the objects
of its two parts: every section and symbol of both, relocations renumbered, what cannot be joined refused."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from onnx import helper
from oracle import make_model

import aot
from aot.codegen import llvm as codegen
from aot.codegen.elf import functions, undefined_symbols
from aot.codegen.relocatable import CannotJoin, join


def tiny(op: str):
    return make_model([helper.make_node(op, ["x"], ["y"])], {"x": (1, 64)}, {"y": (1, 64)})


def conv():
    w = np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 4, 6, 6)},
                      {"y": (1, 8, 6, 6)}, {"w": w})


def relocations(obj: bytes, tmp_path) -> list[tuple[str, str]]:
    """(type, symbol) of every relocation, as binutils reads them."""
    path = tmp_path / "joined.o"
    path.write_bytes(obj)
    text = subprocess.run(["readelf", "-r", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    return sorted(re.findall(r"^[0-9a-f]+\s+[0-9a-f]+\s+(\S+)\s+[0-9a-f]+\s+(\S+)", text, re.M))


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_a_joined_object_holds_both_objects_functions_and_relocations(target, tmp_path):
    first = aot.build(conv(), target=target, out_dir=tmp_path / "a", name="a").object.read_bytes()
    second = aot.build(tiny("Tanh"), target=target, out_dir=tmp_path / "b", name="b").object.read_bytes()
    joined = join(first, second)
    names = set(functions(joined))
    assert names == set(functions(first)) | set(functions(second)), names
    assert undefined_symbols(joined) == sorted(set(undefined_symbols(first)) | set(undefined_symbols(second)))
    assert relocations(joined, tmp_path) == sorted(relocations(first, tmp_path) + relocations(second, tmp_path))
    assert join(first, second) == joined


def test_a_joined_object_passes_the_linker(tmp_path):
    ld = shutil.which("ld")
    if ld is None:
        pytest.skip("no host linker")
    first = aot.build(conv(), out_dir=tmp_path / "a", name="a").object.read_bytes()
    second = aot.build(tiny("Exp"), out_dir=tmp_path / "b", name="b").object.read_bytes()
    (tmp_path / "j.o").write_bytes(join(first, second))
    proc = subprocess.run([ld, "-r", str(tmp_path / "j.o"), "-o", str(tmp_path / "r.o")], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_objects_that_cannot_be_joined_are_refused(tmp_path):
    host = aot.build(tiny("Tanh"), out_dir=tmp_path / "h", name="a").object.read_bytes()
    arm = aot.build(tiny("Tanh"), target="cortex-m4", out_dir=tmp_path / "m", name="b").object.read_bytes()
    with pytest.raises(CannotJoin, match="ELF classes|different machines"):
        join(host, arm)
    with pytest.raises(CannotJoin, match="both objects define a_k0_unary"):
        join(host, host)
    with pytest.raises(CannotJoin, match="not an ELF file"):
        join(b"not an object", host)


def test_a_build_whose_parts_cannot_be_joined_is_compiled_whole(tmp_path, monkeypatch):
    from test_targets import _varied_kernels_model

    model = _varied_kernels_model()
    joined = aot.build(model, out_dir=tmp_path / "j").object.read_bytes()

    def refuse(first, second, localize=frozenset(), chunked=False):     # the parts' objects; the weights still join
        if not localize:
            raise CannotJoin("refused here")
        return join(first, second, localize, chunked)
    monkeypatch.setattr(codegen, "join", refuse)
    whole = aot.build(model, out_dir=tmp_path / "w")
    assert whole.object.read_bytes() != joined
    assert set(functions(whole.object.read_bytes())) == set(functions(joined))
    result = aot.check(whole, inputs={"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)})
    assert result.ok, result


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_large_weights_are_joined_as_data_local_to_the_object(target, tmp_path):
    """Weights of DATA_WEIGHTS bytes or more are not in the LLVM module (only declared there): a data
    object holds them, joined to the code; in the object they are local, defined, in their sections."""
    w = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)      # 18 KB
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                       {"y": (1, 32, 6, 6)}, {"w": w})
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b", name="net", emit="llvm")
    assert undefined_symbols(artifact.object.read_bytes()) == []
    ir_text = (tmp_path / "b" / "net.ll").read_text()
    obj = tmp_path / "b" / "net.o"
    symbols = subprocess.run(["readelf", "-s", "-W", str(obj)], capture_output=True, text=True, check=True).stdout
    sections = subprocess.run(["readelf", "-S", "-W", str(obj)], capture_output=True, text=True, check=True).stdout
    weights = [line.split()[-1] for line in symbols.splitlines() if re.search(r"\bOBJECT\b", line)]
    assert weights, symbols
    for name in weights:
        assert re.search(rf"{name}\s*$", symbols, re.M)
        assert re.search(rf"LOCAL\s+DEFAULT\s+\d+\s+{name}$", symbols, re.M), symbols
        assert f".rodata.aot.{name}" in sections
    big = [name for name in weights if f'@"{name}" = external dso_local constant' in ir_text]
    assert big, ir_text[:2000]
    assert aot.check(model, target=target).ok


def test_weights_stay_in_the_module_where_the_object_would_hold_too_many_sections(tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "SECTIONS_JOINED", 0)
    w = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)      # 18 KB
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                       {"y": (1, 32, 6, 6)}, {"w": w})
    artifact = aot.build(model, out_dir=tmp_path / "b", name="net", emit="llvm")
    assert "external dso_local" not in (tmp_path / "b" / "net.ll").read_text()
    assert undefined_symbols(artifact.object.read_bytes()) == []
    assert aot.check(artifact, inputs={"x": np.ones((1, 16, 6, 6), np.float32)}).ok


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_an_object_in_chunks_is_its_bytes_and_keeps_the_weights_in_place(target, tmp_path):
    """emit_object(chunked=True) gives the very bytes emit_object gives, in chunks, the weights' chunks
    views of the kernels' own arrays (no copy of the weights); the ELF readers read the chunks as they read
    the bytes; the build writes them as the object and inside NAME.a."""
    from aot.codegen.elf import defined_globals, sections
    from aot.target import get_target

    w = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)      # 18 KB
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                       {"y": (1, 32, 6, 6)}, {"w": w})
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b", name="net")

    def module():
        knobs = artifact.metadata["knobs"]
        mb = codegen.ModuleBuilder("net", get_target(target), vectorize=knobs["simd"], opt_level=knobs["opt_level"],
                                   share=knobs["share_bodies"], float_lsr_limit=knobs["float_lsr_limit"])
        for call in artifact.program.calls:
            mb.add_kernel(call.kernel)
        return mb
    whole, chunks = module().emit_object(), module().emit_object(chunked=True)
    assert isinstance(whole, bytes) and isinstance(chunks, list)
    assert b"".join(chunks) == whole == artifact.object.read_bytes()
    assert any(isinstance(c, memoryview) and c.nbytes >= w.nbytes for c in chunks)
    for read in (sections, undefined_symbols, functions, defined_globals):
        assert read(chunks) == read(whole), read.__name__
    if (tmp_path / "b" / "net.a").exists():
        assert whole in (tmp_path / "b" / "net.a").read_bytes()
