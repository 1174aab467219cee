"""Kernels that differ only in their weights (a network's repeated blocks) share one compiled body: the
object holds it once, each kernel calls it with its own weights, the outputs stay onnxruntime's, and
instructions and cycles measured per kernel still belong to the kernel that ran them."""

import numpy as np
import pytest
from onnx import helper
from oracle import assert_matches_onnxruntime, make_model, random_inputs

import aot
from aot.codegen.elf import functions
from aot.run.count import count_instructions, count_kernel_instructions
from aot.target import get_target


def repeated_blocks(odd_one_out: bool = True):
    """Three 3x3 convolutions of one shape with weights of their own, then (optionally) a fourth of
    another shape, which has code of its own."""
    rng = np.random.default_rng(3)
    nodes, inits, x = [], {}, "x"
    for i in range(3):
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        inits[f"w{i}"] = (rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32)
        inits[f"b{i}"] = rng.standard_normal(8).astype(np.float32)
        x = f"r{i}"
    if odd_one_out:
        nodes.append(helper.make_node("Conv", [x, "w3"], ["y"], name="conv3", strides=[2, 2]))
        inits["w3"] = (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
        out = {"y": (1, 4, 5, 5)}
    else:
        nodes.append(helper.make_node("Identity", [x], ["y"]))
        out = {"y": (1, 8, 10, 10)}
    return make_model(nodes, {"x": (1, 8, 10, 10)}, out, inits)


def kernel_functions(artifact) -> dict[str, int]:
    """The object's functions of the model's kernels and shared bodies, with their sizes."""
    return {name: size for name, (_, size) in functions(artifact.object.read_bytes()).items()
            if name.startswith(f"{artifact.name}_k")}


def callers(artifact) -> list[str]:
    """The convolution kernels whose function is a call of a shared body (a jump, and little more)."""
    funcs = kernel_functions(artifact)
    assert any(name.endswith(".shared") for name in funcs), funcs
    return [name for name, size in funcs.items() if "_conv" in name and not name.endswith(".shared") and size <= 32]


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_repeated_blocks_share_one_body(target, tmp_path):
    artifact = aot.build(repeated_blocks(), target=target, out_dir=tmp_path / "b", name="net",
                         knobs={"simd": True})
    funcs = kernel_functions(artifact)
    shared = [name for name in funcs if name.endswith(".shared")]
    assert len(shared) == 1, funcs
    convs = [call.kernel.name for call in artifact.program.calls if call.node.name.startswith("conv")]
    assert len(convs) == 4, convs
    # Those alike call the body (a jump, and little more; the planner may give one of them other code,
    # running in place over its input); the odd one out has a body of its own.
    callers = [name for name in convs[:3] if funcs[name] <= 32]
    assert len(callers) >= 2 and funcs[shared[0]] > 32, funcs
    assert funcs[convs[3]] > 32, funcs


def test_shared_bodies_compute_each_kernels_own_weights():
    for target in ("host", "cortex-m4"):
        assert_matches_onnxruntime(repeated_blocks(), target=target)


def test_kernels_of_different_shapes_share_nothing(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "w1"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    inits = {f"w{i}": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) for i in range(2)}
    artifact = aot.build(make_model(nodes, {"x": (1, 8, 10, 10)}, {"y": (1, 8, 5, 5)}, inits), target="host",
                         out_dir=tmp_path / "b", name="net")
    assert not [name for name in kernel_functions(artifact) if name.endswith(".shared")]


def test_a_build_with_shared_bodies_is_byte_identical(tmp_path):
    first = aot.build(repeated_blocks(), target="cortex-m4", out_dir=tmp_path / "a", name="net")
    second = aot.build(repeated_blocks(), target="cortex-m4", out_dir=tmp_path / "b", name="net")
    assert first.object.read_bytes() == second.object.read_bytes()


@pytest.mark.qemu
def test_instructions_of_a_shared_body_count_for_the_kernel_that_ran_them(tmp_path):
    model = repeated_blocks(odd_one_out=False)
    feeds = random_inputs(model, 0)
    artifact = aot.build(model, target="cortex-m4", out_dir=tmp_path / "b", name="net")
    outputs, per_kernel = count_kernel_instructions(artifact, feeds)
    _, total = count_instructions(artifact, feeds)
    assert not [name for name in per_kernel if name.endswith(".shared")]
    assert sum(per_kernel.values()) == total
    # The kernels that call the shared body run the same code over the same shapes: the same count, all
    # of it (the body's 100,000s of instructions, not the few of the call).
    counts = [per_kernel[name] for name in callers(artifact)]
    assert len(counts) >= 2 and len(set(counts)) == 1 and counts[0] > 10_000, per_kernel


@pytest.mark.qemu
def test_estimated_cycles_of_a_shared_body_go_to_its_callers(tmp_path):
    from aot.run import cycles

    if not cycles.available(get_target("cortex-m4")):
        pytest.skip("llvm-19's llvm-mca and llvm-objdump are not installed")
    model = repeated_blocks(odd_one_out=False)
    artifact = aot.build(model, target="cortex-m4", out_dir=tmp_path / "b", name="net")
    _, estimate = cycles.estimate_cycles(artifact, random_inputs(model, 0))
    assert not [name for name in estimate.per_kernel if name.endswith(".shared")]
    convs = [estimate.per_kernel[name] for name in callers(artifact)]
    assert len(convs) >= 2 and len(set(convs)) == 1 and convs[0] > 10_000, estimate.per_kernel
    assert abs(sum(estimate.per_kernel.values()) - estimate.cycles) <= len(estimate.per_kernel)


def test_a_module_without_kernels_alike_is_llvmlites_text(tmp_path):
    """The module text written with shared bodies is, where nothing is shared, the text llvmlite prints."""
    from aot.codegen.llvm import ModuleBuilder

    artifact = aot.build(repeated_blocks(), target="host", out_dir=tmp_path / "b", name="net")
    kernels = [call.kernel for call in artifact.program.calls]
    distinct = [kernels[0], kernels[-1]]
    mb = ModuleBuilder("net", artifact.target)
    for kernel in distinct:
        mb._function(kernel)
    assert mb._text(distinct, {}) == str(mb.module)


def test_a_kernels_structure_is_all_its_code_reads_but_names_and_weights():
    from aot.kernel import ir as k

    def kernel(name: str, added: float, weights: np.ndarray, out_name: str = "out0") -> k.Kernel:
        x, y = k.Buffer("in0", "f32", 8), k.Buffer(out_name, "f32", 8)
        w = k.Buffer(f"{name}_w", "f32", len(weights), weights)
        b = k.Builder()
        with b.loop("i", 0, 8) as i:
            b.store(y, i, x[i] * w[i] + k.const(added, "f32"))
        return k.Kernel(name, (x, y), b.block())

    ones, twos = np.ones(8, np.float32), np.full(8, 2, np.float32)
    same = k.structure(kernel("a", 0.0, ones))
    assert same is not None and k.structure(kernel("b", 0.0, twos)) == same      # other name, other weights
    assert k.structure(kernel("c", -0.0, ones)) != same                         # -0.0 is not 0.0
    assert k.structure(kernel("d", 0.5, ones)) != same
    assert k.structure(kernel("e", 0.0, ones, out_name="out1")) != same
    assert k.structure(kernel("f", 0.0, ones[:4])) != same                      # weights of another size


def test_a_build_without_shared_bodies_gives_each_kernel_its_own(tmp_path):
    artifact = aot.build(repeated_blocks(), target="cortex-m4", out_dir=tmp_path / "b", name="net",
                         knobs={"share_bodies": False})
    funcs = kernel_functions(artifact)
    assert not [name for name in funcs if name.endswith(".shared")]
    assert all(size > 32 for name, size in funcs.items() if "_conv" in name), funcs
    assert aot.check(repeated_blocks(), target="cortex-m4", knobs={"share_bodies": False}).ok
