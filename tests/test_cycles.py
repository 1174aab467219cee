"""The cycle estimate of runs under qemu (aot/run/cycles.py): the core models against the timings Arm's
manuals state for short sequences, then a whole run priced."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantize import quantize_model

import aot
from aot import reference
from aot.errors import RunError
from aot.run.count import count_instructions
from aot.run.cycles import assembler_lines, block_cycles, estimate_cycles
from aot.target import get_target

pytestmark = pytest.mark.skipif(shutil.which("llvm-mca-19") is None, reason="needs llvm-mca-19 (Debian's llvm-19)")


def cycles(cpu: str, *lines: str) -> float:
    """Steady-state cycles per run of one block of instructions on the core of target `cpu`."""
    costs, missing = block_cycles([list(lines)], get_target(cpu))
    assert missing == [0], lines
    return costs[0]


@pytest.mark.parametrize("lines, expected", [
    # Cortex-M4 Technical Reference Manual, instruction timing (zero wait states)
    (("ldr r0, [r1]", "add r2, r2, #1"), 3),                       # LDR 2 cycles, ADD 1
    (("ldr r0, [r1]", "add r2, r0, #1"), 3),                       # the result is ready for the next one
    (("ldr r0, [r1]", "cmp r0, #1"), 3),
    (("ldr r0, [r1]", "ldr r2, [r1, #4]", "ldr r3, [r1, #8]", "add r4, r4, #1"), 5),   # N loads: N + 1
    (("smlad r0, r1, r2, r0", "smlad r0, r3, r4, r0", "smlad r0, r5, r6, r0", "smlad r0, r7, r8, r0"), 4),
    (("vfma.f32 s0, s1, s2", "vfma.f32 s0, s3, s4", "vfma.f32 s0, s5, s6"), 9),         # VFMA 3 cycles
    (("vfma.f32 s0, s1, s2", "vfma.f32 s9, s3, s4", "vfma.f32 s10, s5, s6"), 9),        # the FPU is busy for them
    (("vldr s1, [r0]", "vadd.f32 s0, s0, s2"), 3),                 # VLDR 2, VADD 1
    (("ldr r0, [r1, r2]", "str r0, [r3, #20]"), 3),                # a store pipelines after a load
    (("str r0, [r1]", "ldr r2, [r3]", "add r4, r4, #1"), 4),       # nothing pipelines after a store
    (("ldrd r0, r2, [r1]", "ldr r3, [r1, #8]", "add r4, r4, #1"), 6),   # LDRD 3, not pipelined either side
    (("ldm r0, {r1, r2, r3}", "add r4, r4, #1"), 5),               # LDM 1 + N
    (("push {r4, r5, r6, lr}",), 5),
    (("add r1, r1, #4", "ldr r0, [r1]", "add r4, r4, #1"), 5),     # an address computed just before: a stall
    (("add r2, r2, #4", "ldr r0, [r1]", "add r4, r4, #1"), 4),
])
def test_cortex_m4_blocks_take_the_cycles_the_manual_gives(lines, expected):
    assert cycles("cortex-m4", *lines) == pytest.approx(expected, abs=0.1)


def test_cortex_m55_overlaps_a_load_and_a_multiply_but_not_two_multiplies():
    """Helium runs a 128-bit instruction in two beats; a load and a multiply-accumulate (different pipes)
    overlap, two multiply-accumulates do not (Cortex-M55 Technical Reference Manual)."""
    load, mac = "vldrw.u32 q0, [r0]", "vmla.i32 q1, q3, r2"
    assert cycles("cortex-m55", load) == pytest.approx(2, abs=0.1)
    assert cycles("cortex-m55", mac) == pytest.approx(2, abs=0.1)
    assert cycles("cortex-m55", load, mac) == pytest.approx(2, abs=0.1)
    assert cycles("cortex-m55", mac, "vmla.i32 q2, q3, r2") == pytest.approx(4, abs=0.1)


def test_cortex_m7_issues_two_instructions_a_cycle():
    assert cycles("cortex-m7", "add r0, r0, #1", "add r1, r1, #1", "add r2, r2, #1", "add r3, r3, #1") \
        == pytest.approx(2, abs=0.1)
    assert cycles("cortex-m4", "add r0, r0, #1", "add r1, r1, #1", "add r2, r2, #1", "add r3, r3, #1") \
        == pytest.approx(4, abs=0.1)


def test_branch_targets_become_labels_llvm_mca_assembles():
    """A disassembled branch names an address outside the block; it becomes a local label beside it (the
    loop end before it, as LE only branches back)."""
    assert assembler_lines("blo\t0x233c <m_k5_conv+0x20c>") == ["blo\t9f", "9:"]
    assert assembler_lines("le\tlr, 0x6000055c <k0+0x3c>") == ["9:", "le\tlr, 9b"]
    assert assembler_lines("adds\tr0, #1") == ["adds\tr0, #1"]
    assert cycles("cortex-m4", "bne.w\t0x100 <f>", "cbz\tr0, 0x100 <f>") == pytest.approx(2, abs=0.1)


def _conv_model(channels: int = 8) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, channels, 3, 3)).astype(np.float32) * 0.3
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], [numpy_helper.from_array(w, "w")])
    return quantize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7", "cortex-m55", "cortex-m0plus"])
def test_a_run_is_priced_from_every_instruction_it_executed(target, tmp_path):
    """The profiled run executes the instructions the plain count gives and computes what onnxruntime
    does; each kernel's share adds up to the whole; the loops' branches add refills (mispredicted exits on
    the M7)."""
    model = _conv_model()
    artifact = aot.build(model, target=target, out_dir=tmp_path)
    feeds = reference.random_inputs(model, 0)
    outputs, estimate = estimate_cycles(artifact, feeds)
    _, instructions = count_instructions(artifact, feeds)
    assert estimate.instructions == instructions
    assert sum(estimate.per_kernel.values()) == pytest.approx(estimate.cycles, abs=len(estimate.per_kernel))
    assert 0.4 * instructions < estimate.cycles < 3 * instructions
    expected = reference.reference_outputs(model, feeds)
    for name, value in expected.items():
        assert np.abs(outputs[name].astype(np.int32) - value.astype(np.int32)).max() <= 1
    assert 0 < estimate.refill < 0.2 * estimate.cycles


@pytest.mark.qemu
def test_misaligned_words_cost_the_cortex_m4_their_extra_transfers(tmp_path):
    """A first layer on 2 channels reads each window row as words at any byte offset (lower_row_windows):
    the profile counts the transfers the bus splits them into, and the estimate adds a cycle for each; a
    layer on 8 channels reads whole aligned words, and so does one on 3 (padded to 4 by a Pad kernel, whose
    byte copies LLVM may merge into misaligned halfwords: pad_channels)."""
    from aot.run.count import profile_instructions
    from aot.run.cycles import price

    first = _conv_model(channels=2)
    artifact = aot.build(first, target="cortex-m4", out_dir=tmp_path / "first")
    _, profile = profile_instructions(artifact, reference.random_inputs(first, 0))
    split = sum(profile.split.values())
    assert split > 0
    aligned = dataclasses.replace(profile, split={})
    assert price(profile, artifact.target).cycles == price(aligned, artifact.target).cycles + split
    for channels in (8, 3):
        model = _conv_model(channels)
        artifact = aot.build(model, target="cortex-m4", out_dir=tmp_path / f"aligned{channels}")
        _, profile = profile_instructions(artifact, reference.random_inputs(model, 0))
        lo, size = next(span for name, span in profile.kernels.items() if "_conv" in name)
        assert not [pc for pc in profile.split if lo <= pc < lo + size], channels


@pytest.mark.parametrize("lines, expected", [
    # Cortex-M0+ Technical Reference Manual, instruction summary (zero wait states, fast multiplier); a taken
    # branch's second cycle is the refill REFILL adds
    (("ldr r0, [r1]", "adds r2, r0, #1", "muls r2, r3, r2"), 4),
    (("push {r4, r5, r6, lr}", "pop {r4, r5, r6, pc}"), 5 + 6),
    (("bl 0x100 <f>", "bx lr"), 2 + 1),
    (("ldm r0!, {r1, r2, r3}", "stm r4!, {r1, r2, r3}"), 8),
])
def test_cortex_m0plus_instructions_take_the_cycles_of_its_manual(lines, expected):
    assert cycles("cortex-m0plus", *lines) == expected


def test_a_target_without_a_cycle_model_is_refused(tmp_path):
    artifact = aot.build(_conv_model(), target="aarch64", out_dir=tmp_path)
    with pytest.raises(RunError, match="no cycle model for aarch64"):
        estimate_cycles(artifact, reference.random_inputs(_conv_model(), 0))
