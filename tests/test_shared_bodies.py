"""Kernels that differ only in their weights (a network's repeated blocks) share one compiled body: the
object holds it once, each kernel calls it with its own weights, the outputs stay onnxruntime's, and
instructions and cycles measured per kernel still belong to the kernel that ran them."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import assert_matches_onnxruntime, make_model, onnxruntime_outputs, random_inputs

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


def quantized_blocks(blocks: int = 3) -> onnx.ModelProto:
    """int8 x -> `blocks` int8 3x3 convolutions of one shape (QDQ), each with its weights and its own
    output scale and zero point (numbers in the code, not weights) -> int8 y."""
    rng = np.random.default_rng(5)
    nodes, inits, x = [], [], "x"
    scales, zero_points = [0.05, 0.11, 0.07, 0.09], [-7, 3, 12, -2]
    for i in range(blocks):
        nodes += [helper.make_node("DequantizeLinear", [x, f"s{i}", f"z{i}"], [f"xf{i}"]),
                  helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}"], [f"wf{i}"], axis=0),
                  helper.make_node("Conv", [f"xf{i}", f"wf{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"c{i}", f"s{i + 1}", f"z{i + 1}"], [f"q{i}"])]
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(rng.uniform(0.002, 0.01, 8).astype(np.float32), f"ws{i}")]
        x = f"q{i}"
    for i in range(blocks + 1):
        inits += [numpy_helper.from_array(np.float32(scales[i]), f"s{i}"),
                  numpy_helper.from_array(np.int8(zero_points[i]), f"z{i}")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info(x, TensorProto.INT8, [1, 8, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", ["host", "cortex-m4", "cortex-m0plus"])
def test_quantized_blocks_of_other_zero_points_share_one_body_and_match_onnxruntime(target, tmp_path):
    """The three convolutions differ in their weights and in the numbers of their requantization (the
    output scale and zero point): the numbers go to a table each reads, and one body serves the three."""
    model = quantized_blocks()
    artifact = aot.build(model, target=target, out_dir=tmp_path / "b", name="net")
    funcs = kernel_functions(artifact)
    shared = [name for name in funcs if name.endswith(".shared")]
    assert len(shared) == 1, funcs
    # a call with the weights and the table (the planner may give one of them other code, running in place)
    calls = [name for name, size in funcs.items() if "_conv" in name and size < 100]
    assert len(calls) >= 2 and funcs[shared[0]] > 1000, funcs
    x = np.random.default_rng(1).integers(-128, 128, (1, 8, 10, 10)).astype(np.int8)
    expected = onnxruntime_outputs(model, {"x": x})
    got = aot.run(model, inputs={"x": x}, target=target)
    np.testing.assert_array_equal(got["q2"], expected["q2"])


def test_numbers_of_indices_bounds_and_divisors_stay_in_the_code():
    from aot.kernel import ir as k
    from aot.kernel import literals

    def kernel(name: str, offset: int, divisor: int, added: int, lanes: int = 1) -> k.Kernel:
        x, y = k.Buffer("in0", "i32", 16), k.Buffer("out0", "i32", 8)
        b = k.Builder()
        with b.loop("i", 0, 8 - offset) as i:
            b.store(y, i, k.binop("div", x[i + offset], k.const(divisor, "i32")) + k.const(added, "i32"))
        return k.Kernel(name, (x, y), b.block())

    first, second = kernel("a", 1, 3, 5), kernel("b", 1, 3, 9)
    a, b = literals.loose_structure(first), literals.loose_structure(second)
    assert a.key is not None and [c.value for c in a.numbers] == [5]      # not the offset, bound or divisor
    assert b.key == a.key
    assert literals.loose_structure(kernel("c", 2, 3, 5)).key != a.key    # another index and bound
    assert literals.loose_structure(kernel("d", 1, 4, 5)).key != a.key    # another divisor
    assert literals.differing([a, b]) == [[0]]
    tabled = [literals.with_table(first, a, [[0]]), literals.with_table(second, b, [[0]])]
    assert k.structure(tabled[0]) == k.structure(tabled[1]) is not None
    assert k.structure(first) != k.structure(second)
    assert [buf.data.tolist() for buf in k.constants(tabled[1])] == [[9]]
    assert "numbers_i32" in k.dump(tabled[1])


def test_a_number_met_at_several_places_takes_one_slot():
    from aot.kernel import ir as k
    from aot.kernel import literals

    def kernel(name: str, zero_point: int, scale: float) -> k.Kernel:
        x, y = k.Buffer("in0", "i32", 8), k.Buffer("out0", "f32", 8)
        b = k.Builder()
        with b.loop("i", 0, 4) as i:      # the zero point written twice, as two constants
            b.store(y, i, k.Cast(x[i] - k.const(zero_point, "i32"), "f32") * k.const(scale, "f32"))
            b.store(y, i + 4, k.Cast(x[i + 4] - k.const(zero_point, "i32"), "f32") * k.const(0.5, "f32"))
        return k.Kernel(name, (x, y), b.block())

    kernels = [kernel("a", 3, 0.25), kernel("b", -1, 0.75)]
    loose = [literals.loose_structure(kern) for kern in kernels]
    slots = literals.differing(loose)
    assert sorted(len(s) for s in slots) == [1, 2]          # the zero point's two places, the scale; not 0.5
    tabled = [literals.with_table(kern, lo, slots) for kern, lo in zip(kernels, loose)]
    assert {buf.name: buf.data.tolist() for buf in k.constants(tabled[1])} == {
        "b_numbers_f32": [0.75], "b_numbers_i32": [-1]}
    assert k.structure(tabled[0]) == k.structure(tabled[1])


def test_share_numbers_false_keeps_each_kernels_numbers_in_its_code(tmp_path):
    artifact = aot.build(quantized_blocks(), target="cortex-m4", out_dir=tmp_path / "b", name="net",
                         knobs={"share_numbers": False})
    funcs = kernel_functions(artifact)
    assert not [name for name in funcs if "_numbers_" in name or name.endswith(".shared")], funcs
    assert all(size > 100 for name, size in funcs.items() if "_conv" in name), funcs
    assert "share_numbers" in (tmp_path / "b" / "metadata.json").read_text()
