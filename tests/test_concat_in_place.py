"""A Concat of contiguous blocks (only 1s before its axis) runs no kernel: each producer writes its
block of the result in place, in the workspace or in the caller's output buffer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot


def heads(axis: int = 1, relu_after: bool = True, twice: bool = False, with_input: bool = False) -> onnx.ModelProto:
    """Three branches of x (1x6x8): a MatMul (through a Reshape), a Sigmoid and a Tanh, concatenated."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    parts = ["a", "b", "b" if twice else ("x" if with_input else "c")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Tanh", ["x"], ["c"]),
             helper.make_node("Concat", parts, ["cat"], axis=axis)]
    shape = [1, 18, 8] if axis == 1 else [1, 6, 24]
    if relu_after:
        nodes.append(helper.make_node("Relu", ["cat"], ["y"]))
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])],
                              [helper.make_tensor_value_info("y" if relu_after else "cat", TensorProto.FLOAT, shape)],
                              [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def ops(artifact) -> list[str]:
    return [n.op for n in artifact.program.graph.nodes]


@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def test_the_blocks_are_written_in_place(target, tmp_path):
    artifact = aot.build(heads(), target=target, out_dir=tmp_path / "b")
    assert "ConcatInPlace" in ops(artifact) and "Concat" not in ops(artifact)
    assert artifact.program.plan.size == 18 * 8 * 4            # the result only: its parts live inside it
    wheres = sorted(loc.offset for v, loc in artifact.program.locations.items() if v in ("a", "b", "c"))
    assert wheres == [0, 6 * 8 * 4, 2 * 6 * 8 * 4]
    result = aot.check(artifact)
    assert result.ok, result.comparisons


def test_a_result_that_is_an_output_is_assembled_in_the_callers_buffer(tmp_path):
    artifact = aot.build(heads(relu_after=False), target="host", out_dir=tmp_path / "b")
    assert "ConcatInPlace" in ops(artifact) and artifact.program.plan.size == 0
    assert "(unsigned char *)out->" in artifact.source.read_text()
    result = aot.check(artifact)
    assert result.ok, result.comparisons


@pytest.mark.parametrize("case", ["inner axis", "the same part twice", "a graph input"])
def test_a_concat_that_is_not_contiguous_blocks_keeps_its_kernel(case, tmp_path):
    model = {"inner axis": heads(axis=2), "the same part twice": heads(twice=True),
             "a graph input": heads(with_input=True)}[case]
    artifact = aot.build(model, target="host", out_dir=tmp_path / "b")
    assert "Concat" in ops(artifact) and "ConcatInPlace" not in ops(artifact)
    result = aot.check(artifact)
    assert result.ok, result.comparisons


def test_a_part_that_a_graph_output_views_keeps_its_own_buffer(tmp_path):
    """The last state of an unrolled loop is both a graph output (through a Reshape) and a block of the
    stacked states: the output needs storage of its own, so the Concat keeps its kernel."""
    w = onnx.numpy_helper.from_array(np.array([4], np.int64), "shape")
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Tanh", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["stack"], axis=0),
             helper.make_node("Reshape", ["b", "shape"], ["last"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("stack", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("last", TensorProto.FLOAT, [4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    artifact = aot.build(model, target="host", out_dir=tmp_path / "b")
    assert "ConcatInPlace" not in ops(artifact)
    result = aot.check(artifact)
    assert result.ok, result.comparisons
