"""Every target config: objects for the right CPU with its vector unit, wrappers that compile warning-free
with the target's gcc, no undefined symbols, deterministic cross builds, clean failures under emulation."""

import filecmp
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper
from oracle import make_model

import aot
from aot.codegen.elf import undefined_symbols
from aot.codegen.llvm import ModuleBuilder
from aot.isa import INT_SIMD
from aot.program import build_program
from aot.run import local
from aot.target import all_targets, get_target, target_text

TARGETS = [t.name for t in all_targets()]
CROSS = [t for t in TARGETS if not t.startswith("x86-64")]
# A vector FMA (or the scalar FPU's) that must appear in a convolution's code, per target.
VECTOR_CODE = {
    "x86-64-avx512": "vfmadd231ps\t%zmm", "x86-64-avx512-vnni": "vfmadd231ps\t%zmm", "x86-64-amx": "vfmadd231ps\t%zmm",
    "x86-64-avx2": "vfmadd231ps\t%ymm", "x86-64": "mulps\t%xmm",
    "aarch64": "fmla\tv", "aarch64-dotprod": "fmla\tv", "aarch64-i8mm": "fmla\tv", "armv7-neon": ".f32\tq",
    "cortex-m4": "vfma.f32\ts", "cortex-m7": "vfma.f32\ts", "cortex-m7-sp": "vfma.f32\ts",   # scalar FPU, fused
    "cortex-m55": "vfma.f32\tq", "cortex-m0plus": "bl\t__aeabi_fmul",       # Helium; soft float
}
SOFT_FLOAT = {"__aeabi_fadd", "__aeabi_fsub", "__aeabi_fmul", "__aeabi_fdiv", "__aeabi_fcmplt", "__aeabi_fcmpgt",
              "__aeabi_fcmpge", "__aeabi_fcmple", "__aeabi_fcmpeq", "__aeabi_f2iz", "__aeabi_i2f", "__aeabi_fcmpun"}


def small_cnn():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["r"], name="relu6"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["g"], name="fc"),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax")]
    inits = {"w": rng.standard_normal((24, 3, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(24).astype(np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32),
             "fc": rng.standard_normal((24, 5)).astype(np.float32)}
    return make_model(nodes, {"x": (1, 3, 11, 13)}, {"y": (1, 5)}, inits)


def test_targets_command_lists_every_config():
    proc = subprocess.run([sys.executable, "-m", "aot", "targets"], capture_output=True, text=True)
    for name in ("aarch64", "aarch64-dotprod", "armv7-neon", "cortex-m4", "cortex-m7", "cortex-m55", "x86-64-avx2",
                 "x86-64-avx512"):
        assert name in proc.stdout
    shown = subprocess.run([sys.executable, "-m", "aot", "targets", "cortex-m55"], capture_output=True, text=True)
    assert "thumbv8.1m.main-unknown-none-eabihf" in shown.stdout and "mps3-an547" in shown.stdout


def test_aliases_and_unknown_names():
    assert get_target("arm").name == "aarch64" and get_target("rpi4").name == "aarch64"
    with pytest.raises(aot.TargetError, match="cortex-m4.*cortex-m55|cortex-m55.*cortex-m4"):
        get_target("cortex-m99")


@pytest.mark.parametrize("target", TARGETS)
def test_kernels_use_the_vector_unit(target, tmp_path):
    tgt = get_target(target)
    artifact = aot.build(small_cnn(), target=tgt, out_dir=tmp_path / target)
    mb = ModuleBuilder("m", tgt)
    program = build_program(artifact.program.graph, tgt, "m")
    for call in program.calls:
        mb.add_kernel(call.kernel)
    assembly = mb.emit_assembly()
    assert VECTOR_CODE[target] in assembly
    if target.startswith("aarch64"):    # the Gemm's 24 channels: 4 a load, multiplied lane by lane
        assert re.search(r"fmla\tv\d+\.4s, v\d+\.4s, v\d+\.s\[3\]", assembly)


@pytest.mark.parametrize("target", TARGETS)
def test_object_and_wrapper(target, tmp_path):
    tgt = get_target(target)
    a = aot.build(small_cnn(), target=tgt, out_dir=tmp_path / "a", name="net")
    b = aot.build(small_cnn(), target=tgt, out_dir=tmp_path / "b", name="net")
    files = sorted(p.name for p in a.dir.iterdir())
    match, mismatch, errors = filecmp.cmpfiles(a.dir, b.dir, files, shallow=False)
    assert match == files, (mismatch, errors)
    missing = set(undefined_symbols(a.object.read_bytes()))
    assert missing <= (SOFT_FLOAT if tgt.float_abi == "soft" else set()), missing
    assert a.metadata["requires"] == sorted(missing)
    sections = subprocess.run(["objdump", "-h", str(a.object)], capture_output=True, text=True).stdout
    if "not recognized" not in sections:
        assert ".rodata.aot.net_" in sections
    if shutil.which(tgt.cc) is None:
        pytest.skip(f"{tgt.cc} not installed")
    compile_only = [tgt.cc, *local.STRICT_CFLAGS, *tgt.cflags, "-c", str(a.source), "-o", str(tmp_path / "net_c.o")]
    proc = subprocess.run(compile_only, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.qemu
@pytest.mark.parametrize("target", CROSS)
def test_small_cnn_runs_under_emulation(target):
    from oracle import assert_matches_onnxruntime
    assert_matches_onnxruntime(small_cnn(), target=target)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64", "cortex-m4"])
def test_faults_and_error_exits_are_reported(target, tmp_path):
    """A program that faults, returns an error or hangs ends with one clear RunError, never a hang."""
    tgt = get_target(target)
    program = tmp_path / "bad.c"
    body = "*(volatile unsigned *)0xF0000000u = 1u; return 0;" if tgt.os == "none" else "return 4;"
    program.write_text(f"int main(void) {{ {body} }}\n")
    exe = tmp_path / "bad.elf"
    local.link(tgt, [program], [], tmp_path, exe, "bad.c")
    with pytest.raises(aot.RunError, match="faulted" if tgt.os == "none" else "returned an error code"):
        local.execute(tgt, exe, tmp_path, 60, "bad")
    spin = tmp_path / "spin.c"
    spin.write_text("int main(void) { volatile int x = 1; while (x) { } return 0; }\n")
    local.link(tgt, [spin], [], tmp_path, exe, "spin.c")
    with pytest.raises(aot.RunError, match="did not finish within 2 s"):
        local.execute(tgt, exe, tmp_path, 2, "spin")


def _edited_target(tmp_path, name: str, old: str, new: str) -> str:
    text = target_text(name)
    assert old in text
    path = tmp_path / f"{name}-edited.toml"
    path.write_text(text.replace(old, new))
    return str(path)


def test_an_unknown_int_simd_is_refused_with_the_valid_forms(tmp_path):
    path = _edited_target(tmp_path, "cortex-m4", 'int_simd = "dsp"', 'int_simd = "dps"')
    with pytest.raises(aot.TargetError, match="int_simd: 'dps' is not one of .*; did you mean 'dsp'") as err:
        get_target(path)
    assert path in str(err.value)
    for form in INT_SIMD:
        assert form in str(err.value)


def test_each_target_names_a_registered_int_simd_form_and_its_fpu():
    for tgt in all_targets():
        assert INT_SIMD[tgt.int_simd.name] is tgt.int_simd
        assert "fpu = " in target_text(tgt.name)
        assert tgt.fpu == (tgt.float_abi == "hard")


def test_an_fpu_flag_that_contradicts_the_float_abi_is_refused(tmp_path):
    path = _edited_target(tmp_path, "cortex-m0plus", "fpu = false", "fpu = true")
    with pytest.raises(aot.TargetError, match="soft float means no FPU"):
        get_target(path)
    with pytest.raises(aot.TargetError, match="float_abi: 'softfp' is not one of 'hard', 'soft'; did you mean 'soft'"):
        get_target(_edited_target(tmp_path, "cortex-m4", 'float_abi = "hard"', 'float_abi = "softfp"'))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc links the kernel")
def test_matrix_dot_sums_as_smmla_does(tmp_path):
    """k.MatrixDot without the matrix multiply (here on the host) sums what SMMLA sums: lane 4q + 2i + j
    adds row i of a (8 bytes) times row j of b's block q; the extremes -128 and 127 included."""
    import ctypes

    from aot.kernel import ir as k

    acc, a, w, y = (k.Buffer("acc", "i32", 8), k.Buffer("a", "i8", 16), k.Buffer("w", "i8", 32),
                    k.Buffer("y", "i32", 8))
    b = k.Builder()
    b.store(y, k.const(0), k.MatrixDot(acc.vec(k.const(0), 8), a.vec(k.const(0), 16), w.vec(k.const(0), 32)))
    mb = ModuleBuilder("m", get_target("host"))
    mb.add_kernel(k.Kernel("matrix_dot", (acc, a, w, y), b.block()))
    (tmp_path / "m.o").write_bytes(mb.emit_object())
    subprocess.run(["gcc", "-shared", "-o", str(tmp_path / "m.so"), str(tmp_path / "m.o")], check=True)
    kernel = ctypes.CDLL(str(tmp_path / "m.so")).matrix_dot
    rng = np.random.default_rng(3)
    for _ in range(20):
        start = rng.integers(-2**20, 2**20, 8).astype(np.int32)
        rows = rng.choice(np.array([-128, 127, -1, 0, 5], np.int8), 16)
        blocks = rng.integers(-128, 128, 32).astype(np.int8)
        got = np.zeros(8, np.int32)
        kernel(*(v.ctypes.data_as(ctypes.c_void_p) for v in (start, rows, blocks, got)))
        want = start.astype(np.int64).reshape(2, 2, 2) + np.einsum(
            "ik,qjk->qij", rows.reshape(2, 8).astype(np.int64), blocks.reshape(2, 2, 8).astype(np.int64))
        assert np.array_equal(got, want.reshape(8)), (got, want.reshape(8))


def _many_kernels_model():
    """A chain of 40 small convolutions: enough kernels for a build to optimize them in two halves."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(40):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"y{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Tanh", [f"y{i}"], [f"t{i}"]))
        x = f"t{i}"
    graph = helper.make_graph(nodes, "many", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_build_compiled_in_two_processes_is_the_build_compiled_in_one(tmp_path, monkeypatch):
    """The later part of the kernels is compiled in a forked child and its object joined to the first's;
    without fork the parts are compiled one after the other: the same object either way, and
    onnxruntime's numbers."""
    import aot
    from aot.codegen import llvm as codegen
    from aot.codegen.parts import PARALLEL_KERNELS
    model = _many_kernels_model()
    monkeypatch.setattr(codegen.threading, "active_count", lambda: 1)    # fork even in a threaded test worker
    assert len(aot.build(model, out_dir=tmp_path / "p").program.calls) >= 2 * PARALLEL_KERNELS
    forked = (tmp_path / "p" / "many.o").read_bytes()
    monkeypatch.delattr(codegen.os, "fork")
    aot.build(model, out_dir=tmp_path / "s")
    assert (tmp_path / "s" / "many.o").read_bytes() == forked
    monkeypatch.undo()
    result = aot.check(model, inputs={"x": np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)})
    assert result.ok, result


def _later_part(artifact) -> list[str]:
    """The kernels of a build that the child process compiles."""
    from aot.codegen.parts import parts as split
    parts = split([call.kernel for call in artifact.program.calls], artifact.name)
    assert len(parts) == 2
    return [kernel.name for kernel in parts[1]]


def test_a_failure_in_the_child_process_is_an_internal_error_naming_it(tmp_path, monkeypatch):
    import aot
    from aot.codegen import llvm as codegen
    from aot.errors import InternalError
    real = codegen.ModuleBuilder._optimize
    later = _later_part(aot.build(_many_kernels_model(), out_dir=tmp_path / "ok"))[0]

    def failing(self, source):
        if f'@"{later}"(' in source:     # a kernel of the later part, compiled by the child
            raise RuntimeError("no memory left")
        return real(self, source)
    monkeypatch.setattr(codegen.ModuleBuilder, "_optimize", failing)
    monkeypatch.setattr(codegen.threading, "active_count", lambda: 1)    # fork even in a threaded test worker
    with pytest.raises(InternalError, match="later part of the kernels in a child process failed: "
                                            "RuntimeError: no memory left"):
        aot.build(_many_kernels_model(), out_dir=tmp_path / "f")
    assert not (tmp_path / "f").exists()


def _varied_kernels_model():
    """41 kernels of many shapes (convolutions of three kinds, activations, pooling, a Gemm): two parts of a
    build with code of their own, not one shared body."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    nodes, inits, x, channels = [], [], "x", 4
    for i in range(20):
        out, kernel = 4 + 2 * (i % 5), 1 + 2 * (i % 2)
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((out, channels, kernel, kernel)) * 0.4).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"y{i}"], pads=[kernel // 2] * 4))
        nodes.append(helper.make_node(("Tanh", "Relu", "Sigmoid")[i % 3], [f"y{i}"], [f"t{i}"]))
        x, channels = f"t{i}", out
    inits.append(numpy_helper.from_array((rng.standard_normal((10, channels)) * 0.4).astype(np.float32), "wg"))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "wg"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "varied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "aarch64", "armv7-neon"])
def test_an_object_joined_from_two_parts_links_and_runs(tmp_path, target):
    import aot
    model = _varied_kernels_model()
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b")
    assert _later_part(artifact)
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    result = aot.check(artifact, inputs={"x": x})
    assert result.ok, result


def test_large_kernels_compile_in_more_parts_that_join_and_run(tmp_path, monkeypatch):
    """Where the kernels are large (here: parts of at most 300 IR nodes), they compile in more parts than
    two, an even number, each part's kernels together with those that look alike; the object joined from
    them runs the model as onnxruntime does."""
    import aot
    from aot.codegen import parts as codegen_parts
    from aot.codegen.parts import likeness
    model = _varied_kernels_model()
    monkeypatch.setattr(codegen_parts, "PART_SIZE", 300)
    artifact = aot.build(model, out_dir=tmp_path / "b")
    kernels = [call.kernel for call in artifact.program.calls]
    split = codegen_parts.parts(kernels, artifact.name)
    assert len(split) > 2 and len(split) % 2 == 0
    assert sorted(k.name for part in split for k in part) == sorted(k.name for k in kernels)
    part_of = {likeness(k, artifact.name): i for i, part in enumerate(split) for k in part}
    assert all(part_of[likeness(k, artifact.name)] == i for i, part in enumerate(split) for k in part)
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    result = aot.check(artifact, inputs={"x": x})
    assert result.ok, result


def test_the_emitted_stages_describe_the_joined_object(tmp_path):
    import aot
    model = _varied_kernels_model()
    plain = aot.build(model, target="cortex-m4", out_dir=tmp_path / "p")
    emitted = aot.build(model, target="cortex-m4", out_dir=tmp_path / "e", emit="llvm,asm")
    assert emitted.object.read_bytes() == plain.object.read_bytes()
    assembly = (tmp_path / "e" / "varied.s").read_text()
    assert "; part 2 of " in assembly      # 2 parts, or more where the kernels are large
    for name in _later_part(plain):
        assert f"{name}:" in assembly


def test_float_kernels_of_large_models_compile_without_loop_strength_reduction(tmp_path):
    """Knob float_lsr_limit: in a model whose kernels hold more IR nodes than it says, the float kernels are
    compiled in parts of their own without LLVM's loop strength reduction; a matrix times a vector (the
    Gemm) keeps it. In smaller models, and with -1, every kernel keeps it. The object is the same from
    build to build."""
    import aot
    from aot.codegen.llvm import ModuleBuilder, _float_kernel
    from aot.codegen.parts import size
    from aot.target import get_target

    model = _varied_kernels_model()
    first = aot.build(model, target="cortex-m4", out_dir=tmp_path / "a", knobs={"float_lsr_limit": 0})
    assert first.metadata["knobs"]["float_lsr_limit"] == 0
    kernels = [call.kernel for call in first.program.calls]
    for limit in (0, size(kernels, "varied") - 1, size(kernels, "varied"), -1):
        mb = ModuleBuilder("varied", get_target("cortex-m4"), float_lsr_limit=limit)
        for kernel in kernels:
            mb.add_kernel(kernel)
        parts = mb._parts()
        assert sorted(k.name for part, _ in parts for k in part) == sorted(k.name for k in kernels)
        if limit == -1 or limit >= size(kernels, "varied"):
            assert all(lsr for _, lsr in parts)
        else:
            assert any(not lsr for _, lsr in parts) and any(lsr for _, lsr in parts)
            assert all(all(_float_kernel(k) for k in part) != lsr for part, lsr in parts)
            assert [k.name for part, lsr in parts if lsr for k in part] == [
                k.name for k in kernels if "_gemm" in k.name]
    again = aot.build(model, target="cortex-m4", out_dir=tmp_path / "b", knobs={"float_lsr_limit": 0})
    assert again.object.read_bytes() == first.object.read_bytes()
