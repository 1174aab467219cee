"""Data movement ops whose integer parameters are fed at run time while the output's shape is static
(declared by the model): Tile's repeats, Expand's shape, OneHot's depth (and values), Slice's starts,
ends, axes and steps, Pad's pads, axes and constant value.

Values consistent with the declared shape are compared with onnxruntime (exactly: only elements move).
Values that contradict it, or lie outside every range, are the model's error and onnxruntime refuses
them or gives another shape; aot must still run without reading outside its buffers, and gives what its
documented clamping rule says, computed here in numpy. The constant forms keep their single-kernel
paths.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_indexing import QEMU, check, node, typed_model
from test_passes import imported, ops

import aot
from aot.errors import ModelError
from aot.graph.ir import Graph, Node, Value
from aot.graph.passes.canonicalize import canonicalize

RNG = np.random.default_rng(11)
BIG = np.iinfo(np.int64).max


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def onnx_slice(x: np.ndarray, starts, ends, axes=None, steps=None) -> np.ndarray:
    """Slice as ONNX defines it (numpy's slice clamps as ONNX does)."""
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, starts, ends, steps):
        index[int(a) % x.ndim] = slice(int(b), int(e), int(s))
    return x[tuple(index)]


def slice_model(x_shape, out_shape, count: int, dtype: str = "int64", inputs=("s", "e", "a", "st")):
    names = {"s": "starts", "e": "ends", "a": "axes", "st": "steps"}
    feeds = {n: (dtype, (count,)) for n in inputs}
    return typed_model([node("Slice", ["x", *inputs], ["y"])], {"x": ("float32", x_shape), **feeds},
                       {"y": ("float32", out_shape)}), names


# --------------------------------------------------------------------------- Slice

SLICES = {     # starts, ends, axes, steps (None: input absent)
    "plain": ([0, 0], [3, 10], [0, 1], [1, 1]),
    "negative_start_end": ([-4, 1], [-1, 1000], [1, 2], [1, 2]),
    "negative_steps": ([20, 10, 4], [0, 0, 1], [0, 1, 2], [-1, -3, -2]),
    "negative_axes": ([0, 0, 3], [20, 10, 4], [0, -2, -1], None),
    "default_axes_and_steps": ([1, 2], [7, 9], None, None),
    "start_beyond_backward": ([1000, -1000], [-1000, 1000], [2, 0], [-2, 7]),
    "extreme_values": ([-BIG - 1, BIG], [BIG, -BIG - 1], [1, 2], [3, -BIG]),
    "unordered_axes": ([1, 2], [4, -1], [2, 0], [1, 5]),
}


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("case", list(SLICES))
def test_slice_fed(case, dtype):
    starts, ends, axes, steps = SLICES[case]
    if dtype == "int32":
        clip = np.iinfo(np.int32)
        starts, ends, steps = ([int(np.clip(v, clip.min, clip.max)) for v in vs] if vs else vs
                               for vs in (starts, ends, steps))
    x = randn(20, 10, 5)
    want = onnx_slice(x, starts, ends, axes, steps)
    present = {"s": starts, "e": ends, "a": axes, "st": steps}
    names = [n for n in ("s", "e", "a", "st") if present[n] is not None]
    if "a" not in names and "st" in names:
        names.insert(2, "")
    model = typed_model([node("Slice", ["x", *names], ["y"])],
                        {"x": ("float32", x.shape), **{n: (dtype, (len(starts),)) for n in names if n}},
                        {"y": ("float32", want.shape)})
    feeds = {"x": x, **{n: np.array(present[n], dtype) for n in names if n}}
    got = check(model, feeds)["y"]
    np.testing.assert_array_equal(got, want)


def test_slice_some_inputs_constant():
    """Only the steps fed: the constant starts and axes still go through the run-time rule."""
    x = randn(6, 8)
    model = typed_model([node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                        {"x": ("float32", x.shape), "st": ("int64", (1,))}, {"y": ("float32", (6, 3))},
                        {"s": np.array([-2], np.int64), "e": np.array([0], np.int64), "a": np.array([1], np.int64)})
    check(model, {"x": x, "st": np.array([-2], np.int64)})


def test_slice_fed_empty_output_reads_nothing():
    """An empty output takes no element: a Slice that copies nothing, whatever the starts. (From an
    ONNX file the frontend reads a declared size 0 as unknown, so the graph is built directly.)"""
    values = {"x": Value("x", (4, 5)), "s": Value("s", (1,), "int64"), "e": Value("e", (1,), "int64"),
              "y": Value("y", (4, 0))}
    graph = Graph("g", (Node("Slice", "slice", ("x", "s", "e"), ("y",)),), values, {}, ("x", "s", "e"), ("y",))
    assert [(n.op, n.inputs) for n in canonicalize(graph).nodes] == [("Slice", ("x",))]


def clamped_positions(n: int, start: int, step: int, length: int) -> np.ndarray:
    """aot's rule for one axis: ONNX's start (from the end if negative, clamped), the step clamped into
    [-n, n] (the same positions in a consistent model), then each position clamped into [0, n)."""
    step = int(np.clip(step, -n, n))
    start = start + n if start < 0 else start
    start = int(np.clip(start, 0, n - 1 if step < 0 else n))
    return np.clip(start + np.arange(length) * step, 0, n - 1)


@pytest.mark.parametrize("starts, axes, steps", [
    ([7], [1], [1]),                    # a start that leaves fewer than the declared 3 elements
    ([-BIG - 1], [1], [BIG]),
    ([2], [5], [1]),                    # an axis beyond the rank: clamped to the last axis
    ([2], [-9], [-1]),                  # one below: wraps once, then clamps to the first
    ([1], [1], [0]),                    # a zero step (ONNX forbids it): the start repeated
])
def test_slice_values_against_the_declared_shape_stay_inside(starts, axes, steps):
    """Values the declared shape (4, 3) contradicts: positions by the clamping rule, never outside x."""
    x = randn(4, 9)
    model, _ = slice_model((4, 9), (4, 3), 1)
    feeds = {"x": x, "s": np.array(starts, np.int64), "e": np.array([BIG], np.int64),
             "a": np.array(axes, np.int64), "st": np.array(steps, np.int64)}
    got = aot.run(model, inputs=feeds, target="host")["y"]
    axis = min(max(axes[0] + 2 if axes[0] < 0 else axes[0], 0), 1)
    per_axis = [(0, 1), (0, 1)]
    per_axis[axis] = (starts[0], steps[0])
    rows, cols = (clamped_positions(n, b, s, length) for n, (b, s), length in zip(x.shape, per_axis, (4, 3)))
    np.testing.assert_array_equal(got, x[np.ix_(rows, cols)])


def test_slice_fed_lengths_that_differ_are_refused(tmp_path):
    """Starts and steps of different lengths would make the per-axis scatter read past the shorter one."""
    model = typed_model([node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                        {"x": ("float32", (4, 9)), "s": ("int64", (2,)), "e": ("int64", (2,)), "a": ("int64", (2,)),
                         "st": ("int64", (1,))}, {"y": ("float32", (2, 3))})
    with pytest.raises(ModelError, match="lengths"):
        aot.build(model, target="host", out_dir=tmp_path)


def test_slice_declared_shape_on_an_axis_not_named_is_refused(tmp_path):
    model = typed_model([node("Slice", ["x", "s", "e", "a"], ["y"])],
                        {"x": ("float32", (4, 9)), "s": ("int64", (1,)), "e": ("int64", (1,))},
                        {"y": ("float32", (2, 9))}, {"a": np.array([1], np.int64)})
    with pytest.raises(ModelError, match="axes input does not name"):
        aot.build(model, target="host", out_dir=tmp_path)


# --------------------------------------------------------------------------- Pad

PADS = {       # mode, input shape, pads, axes (None: absent)
    "constant": ("constant", (1, 3, 4, 5), [0, 0, 1, 3, 0, 0, 2, 4], None),
    "constant_axes": ("constant", (1, 3, 4, 5), [0, 3, 0, 4], [1, 3]),
    "constant_negative_axes": ("constant", (1, 3, 4, 5), [0, 3, 0, 4], [-3, -1]),
    "constant_crop": ("constant", (2, 6, 5), [-1, 2, -3, 1, -2, 2], None),
    "edge": ("edge", (3, 4, 5), [0, 2, 3, 1, 0, 4], None),
    "edge_crop": ("edge", (3, 4, 5), [1, -2, 3, -1, 4, -2], None),
    "reflect": ("reflect", (3, 4, 5), [2, 3, 0, 1, 2, 4], None),
    "reflect_axes": ("reflect", (3, 4, 5), [3, 1, 2, 1], [-1, 1]),
    "reflect_crop": ("reflect", (3, 4, 5), [1, -1, 2, -1, 2, 1], None),
    "size_one_axis": ("constant", (1, 4), [1, 0, -1, 2], None),
    "edge_one_element": ("edge", (1, 4), [2, 0, 3, 1], None),
}


@pytest.mark.parametrize("case", list(PADS))
def test_pad_fed(case):
    mode, shape, pads, axes = PADS[case]
    x = randn(*shape)
    out = list(shape)
    for i, axis in enumerate(range(len(shape)) if axes is None else [a % len(shape) for a in axes]):
        out[axis] += pads[i] + pads[len(pads) // 2 + i]
    inputs = ["x", "p"] + (["v"] if mode == "constant" else [""] if axes else []) + (["a"] if axes else [])
    model = typed_model([node("Pad", inputs, ["y"], mode=mode)],
                        {"x": ("float32", shape), "p": ("int64", (len(pads),)),
                         **({"v": ("float32", ())} if mode == "constant" else {}),
                         **({"a": ("int64", (len(axes),))} if axes else {})},
                        {"y": ("float32", out)}, opset=18)
    feeds = {"x": x, "p": np.array(pads, np.int64), "v": np.array(-2.5, np.float32),
             "a": np.array(axes or [], np.int64)}
    check(model, {k: v for k, v in feeds.items() if k in inputs})


def test_pad_fed_value_with_constant_pads():
    x = randn(2, 3)
    model = typed_model([node("Pad", ["x", "p", "v"], ["y"])], {"x": ("float32", x.shape), "v": ("float32", (1,))},
                        {"y": ("float32", (3, 6))}, {"p": np.array([1, 2, 0, 1], np.int64)})
    check(model, {"x": x, "v": np.array([7.0], np.float32)})


def test_pad_reflect_beyond_the_axis_as_numpy():
    """Pads longer than the axis reflect again (numpy's pad, ONNX's reference); onnxruntime refuses them."""
    x = randn(3, 4)
    pads = [5, 0, 7, 9]
    model = typed_model([node("Pad", ["x", "p"], ["y"], mode="reflect")],
                        {"x": ("float32", x.shape), "p": ("int64", (4,))}, {"y": ("float32", (15, 13))})
    got = aot.run(model, inputs={"x": x, "p": np.array(pads, np.int64)}, target="host")["y"]
    np.testing.assert_array_equal(got, np.pad(x, [(5, 7), (0, 9)], mode="reflect"))


def test_pad_reflect_one_element_repeats_it():
    """numpy (ONNX's reference) repeats the one element of an axis; onnxruntime refuses the pad."""
    x = randn(1, 3)
    model = typed_model([node("Pad", ["x", "p"], ["y"], mode="reflect")],
                        {"x": ("float32", x.shape), "p": ("int64", (4,))}, {"y": ("float32", (4, 4))})
    got = aot.run(model, inputs={"x": x, "p": np.array([2, 0, 1, 1], np.int64)}, target="host")["y"]
    np.testing.assert_array_equal(got, np.pad(x, [(2, 1), (0, 1)], mode="reflect"))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("pads", [[BIG, -BIG - 1, 0, 0], [-BIG - 1, 3, BIG, -9], [40, -40, 2, 1]])
def test_pad_values_against_the_declared_shape_stay_inside(mode, pads):
    """Begins outside every range place the input wholly outside the output (constant: the value) or
    clamp into it (edge, reflect: input elements); nothing outside x is read."""
    x = randn(3, 4)
    model = typed_model([node("Pad", ["x", "p", "v"] if mode == "constant" else ["x", "p"], ["y"], mode=mode)],
                        {"x": ("float32", x.shape), "p": ("int64", (4,)),
                         **({"v": ("float32", ())} if mode == "constant" else {})}, {"y": ("float32", (5, 6))})
    feeds = {"x": x, "p": np.array(pads, np.int64), "v": np.array(9.0, np.float32)}
    got = aot.run(model, inputs={k: v for k, v in feeds.items() if k != "v" or mode == "constant"},
                  target="host")["y"]
    allowed = set(x.ravel().tolist()) | ({9.0} if mode == "constant" else set())
    assert got.shape == (5, 6) and set(got.ravel().tolist()) <= allowed
    begin = [int(np.clip(p, -n, o)) for p, n, o in zip(pads[:2], x.shape, (5, 6))]
    if mode == "constant":      # the rule exactly: output position o takes x[o - begin] where inside
        rows, cols = np.arange(5) - begin[0], np.arange(6) - begin[1]
        inside = ((rows >= 0) & (rows < 3))[:, None] & ((cols >= 0) & (cols < 4))[None, :]
        want = np.where(inside, x[np.clip(rows, 0, 2)][:, np.clip(cols, 0, 3)], np.float32(9.0))
        np.testing.assert_array_equal(got, want)


def test_pad_fed_pads_for_another_count_of_axes_are_refused(tmp_path):
    model = typed_model([node("Pad", ["x", "p", "", "a"], ["y"])],
                        {"x": ("float32", (3, 4)), "p": ("int64", (4,)), "a": ("int64", (1,))},
                        {"y": ("float32", (5, 6))}, opset=18)
    with pytest.raises(ModelError, match="4 pads for 1 axes"):
        aot.build(model, target="host", out_dir=tmp_path)


def test_pad_empty_input_with_fed_pads_is_the_value():
    model = typed_model([node("Pad", ["x", "p"], ["y"])], {"x": ("float32", (0, 3)), "p": ("int64", (4,))},
                        {"y": ("float32", (2, 4))})
    got = aot.run(model, inputs={"x": np.zeros((0, 3), np.float32), "p": np.array([1, 0, 1, 1], np.int64)},
                  target="host")["y"]
    np.testing.assert_array_equal(got, np.zeros((2, 4), np.float32))


@pytest.mark.parametrize("target", QEMU)
def test_slice_and_pad_fed_after_a_conv(target):
    """Both read a channels-last convolution output (the gathers run in the model's layout); the slice is
    an output too, so that its shape is declared. Under qemu too: int64 index arithmetic (and reflect's
    Mod) on 32-bit cores."""
    x, w = randn(1, 3, 6, 7), randn(4, 3, 3, 3)
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             node("Slice", ["c", "s", "e", "a", "st"], ["sl"]),
             node("Pad", ["sl", "p"], ["y"], mode="reflect")]
    model = typed_model(nodes, {"x": ("float32", x.shape), **{n: ("int64", (2,)) for n in ("s", "e", "a", "st")},
                                "p": ("int64", (8,))},
                        {"sl": ("float32", (1, 2, 6, 3)), "y": ("float32", (1, 4, 8, 6))}, {"w": w})
    feeds = {"x": x, "s": np.array([-1, 1], np.int64), "e": np.array([-7, 6], np.int64),
             "a": np.array([3, 1], np.int64), "st": np.array([-2, 2], np.int64),
             "p": np.array([0, 1, 1, 1, 0, 1, 1, 2], np.int64)}
    check(model, feeds, target=target, tol=1e-4)


# --------------------------------------------------------------------------- Tile, Expand, OneHot

@pytest.mark.parametrize("shape, repeats", [((2, 3, 4), [2, 1, 3]), ((1, 3), [4, 2]), ((3,), [1])])
def test_tile_fed(shape, repeats):
    x = randn(*shape)
    out = tuple(d * r for d, r in zip(shape, repeats))
    model = typed_model([node("Tile", ["x", "r"], ["y"])], {"x": ("float32", shape), "r": ("int64", (len(shape),))},
                        {"y": ("float32", out)})
    check(model, {"x": x, "r": np.array(repeats, np.int64)})


def test_tile_fed_empty_axis():
    """An empty input axis stays empty whatever the repeats; the others still repeat. (From an ONNX file
    the frontend reads a declared size 0 as unknown, so the graph is built directly.)"""
    values = {"x": Value("x", (0, 3)), "r": Value("r", (2,), "int64"), "y": Value("y", (0, 6))}
    graph = Graph("g", (Node("Tile", "tile", ("x", "r"), ("y",)),), values, {}, ("x", "r"), ("y",))
    [repeat] = canonicalize(graph).nodes
    assert (repeat.op, repeat.inputs, repeat.attrs["repeats"]) == ("Repeat", ("x",), (1, 2))


def test_tile_fed_output_no_multiple_is_a_model_error(tmp_path):
    model = typed_model([node("Tile", ["x", "r"], ["y"])], {"x": ("float32", (2, 3)), "r": ("int64", (2,))},
                        {"y": ("float32", (4, 7))})
    with pytest.raises(ModelError, match="no whole number of copies"):
        aot.build(model, target="host", out_dir=tmp_path)


@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 6)), ((1, 4), (1, 4)), ((2, 1, 1), (2, 3, 5))])
def test_expand_fed(shape, target):
    x = randn(*shape)
    model = typed_model([node("Expand", ["x", "s"], ["y"])],
                        {"x": ("float32", shape), "s": ("int64", (len(target),))}, {"y": ("float32", target)})
    check(model, {"x": x, "s": np.array(target, np.int64)})


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot_fed_depth_and_values(axis):
    """Depth from the output's shape; indices out of range (after one wrap) give a row of `off`."""
    i = np.array([[0, 4, -1, -5], [7, -6, 2, 3]], np.int64)
    out = list(i.shape)
    out.insert(axis % 3, 5)
    model = typed_model([node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)],
                        {"i": ("int64", i.shape), "depth": ("float32", ()), "values": ("float32", (2,))},
                        {"y": ("float32", out)})
    check(model, {"i": i, "depth": np.array(5, np.float32), "values": np.array([-1.0, 3.0], np.float32)})


# --------------------------------------------------------------------------- constant parameters

@pytest.mark.parametrize("op, inputs, inits, out, kernels", [
    ("Slice", ["x", "s", "e"], {"s": [1], "e": [3]}, (2, 4), ["Slice"]),
    ("Pad", ["x", "p"], {"p": [1, 0, 0, 2]}, (5, 6), ["Pad"]),
    ("Tile", ["x", "r"], {"r": [2, 1]}, (8, 4), ["Repeat"]),
    ("Expand", ["x", "s"], {"s": [2, 4, 4]}, (2, 4, 4), ["Reshape", "Repeat"]),     # a view adds the axis
])
def test_constant_parameters_keep_one_kernel(op, inputs, inits, out, kernels):
    model = typed_model([node(op, inputs, ["y"])], {"x": ("float32", (4, 4))}, {"y": ("float32", out)},
                        {k: np.array(v, np.int64) for k, v in inits.items()})
    assert ops(canonicalize(imported(model))) == kernels
