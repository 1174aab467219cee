"""Per-op tests: each builds a tiny ONNX model and checks aot against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import oracle
import pytest
from onnx import helper


# Every op test runs on the host and, under emulation, on AArch64 Linux and a bare-metal Cortex-M4.
@pytest.fixture(autouse=True, params=["host", pytest.param("aarch64", marks=pytest.mark.qemu),
                                      pytest.param("cortex-m4", marks=pytest.mark.qemu)])
def target(request, monkeypatch):
    monkeypatch.setattr(oracle, "TARGET", request.param)
    return request.param

try:
    from oracle import assert_matches_onnxruntime, make_model, random_inputs
except ImportError:  # tests/ imported as a package
    from tests.oracle import assert_matches_onnxruntime, make_model, random_inputs


# --------------------------------------------------------------------------- helpers


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(
        op, list(inputs), list(outputs), name=name or f"{op}_{outputs[0]}", **attrs
    )


def randn(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def away_from_zero(rng, shape):
    """Values with |v| in [0.5, 2.5): safe denominators."""
    mag = rng.uniform(0.5, 2.5, size=shape)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


def f32(value):
    return np.asarray(value, dtype=np.float32)


def conv(name, x, y, c_in, c_out, kernel, rng, group=1, bias=True, **attrs):
    """A Conv node with random constant weights (and bias). Returns (node, initializers)."""
    kernel = tuple(kernel)
    fan_in = (c_in // group) * math.prod(kernel)
    inits = {f"{name}_w": randn(rng, (c_out, c_in // group, *kernel), 1.0 / math.sqrt(fan_in))}
    ins = [x, f"{name}_w"]
    if bias:
        inits[f"{name}_b"] = randn(rng, (c_out,))
        ins.append(f"{name}_b")
    return node("Conv", ins, [y], name=name, kernel_shape=list(kernel), group=group, **attrs), inits


def batchnorm(name, x, y, c, rng, **attrs):
    inits = {
        f"{name}_scale": randn(rng, (c,)),
        f"{name}_bias": randn(rng, (c,)),
        f"{name}_mean": randn(rng, (c,), 0.5),
        f"{name}_var": rng.uniform(0.5, 2.0, size=(c,)).astype(np.float32),
    }
    return node("BatchNormalization", [x, *inits], [y], name=name, **attrs), inits


def check(nodes, inputs, outputs, inits=None, feeds=None, opset=17, tol=1e-4, scale=1.0):
    """make_model + assert_matches_onnxruntime; random feeds are multiplied by `scale`."""
    model = make_model(nodes, inputs, outputs, inits or {}, opset=opset)
    if feeds is None:
        feeds = {
            k: (v * np.float32(scale)).astype(np.float32) for k, v in random_inputs(model).items()
        }
    return assert_matches_onnxruntime(model, feeds, tol=tol)


# --------------------------------------------------------------------------- Conv

S2 = {"strides": [2, 2]}
P1 = {"pads": [1, 1, 1, 1]}
P2 = {"pads": [2, 2, 2, 2]}

# id: (input shape, c_out, kernel, group, bias, attrs)
CONV_CASES = {
    "1x1": ((1, 3, 6, 7), 8, (1, 1), 1, True, {}),
    "1x1_s2_nobias": ((1, 17, 7, 9), 5, (1, 1), 1, False, S2),
    "1x1_c33": ((1, 33, 5, 6), 33, (1, 1), 1, True, {}),
    "3x3_p0_nobias": ((1, 8, 7, 7), 8, (3, 3), 1, False, {}),
    "3x3_p1": ((1, 3, 9, 11), 17, (3, 3), 1, True, P1),
    "3x3_s2_p1": ((1, 5, 9, 10), 33, (3, 3), 1, True, {**S2, **P1}),
    "3x3_s2_p0": ((1, 4, 8, 8), 6, (3, 3), 1, True, S2),
    "3x3_p1_c17_c33_12x13": ((1, 17, 12, 13), 33, (3, 3), 1, True, P1),
    "5x5_p2": ((1, 3, 10, 12), 8, (5, 5), 1, True, P2),
    "5x5_s2_p0": ((1, 5, 11, 11), 7, (5, 5), 1, True, S2),
    "1x7_p3": ((1, 5, 6, 12), 7, (1, 7), 1, True, {"pads": [0, 3, 0, 3]}),
    "7x1_p3_nobias": ((1, 4, 12, 5), 5, (7, 1), 1, False, {"pads": [3, 0, 3, 0]}),
    "3x3_asym_pads": ((1, 3, 7, 8), 5, (3, 3), 1, True, {"pads": [0, 1, 2, 1]}),
    "3x3_s2_asym_pads": ((1, 6, 9, 9), 4, (3, 3), 1, True, {**S2, "pads": [0, 1, 2, 1]}),
    "same_upper": ((1, 3, 7, 9), 8, (3, 3), 1, True, {"auto_pad": "SAME_UPPER"}),
    "same_upper_s2": ((1, 5, 8, 11), 6, (3, 3), 1, True, {**S2, "auto_pad": "SAME_UPPER"}),
    "same_lower_s2": ((1, 5, 8, 11), 6, (3, 3), 1, True, {**S2, "auto_pad": "SAME_LOWER"}),
    "same_lower_k2": ((1, 3, 7, 7), 4, (2, 2), 1, True, {"auto_pad": "SAME_LOWER"}),
    "valid_s2": ((1, 3, 9, 10), 5, (3, 3), 1, True, {**S2, "auto_pad": "VALID"}),
    "dil2_p2": ((1, 3, 9, 9), 8, (3, 3), 1, True, {"dilations": [2, 2], **P2}),
    "dil2_s2": ((1, 5, 11, 12), 6, (3, 3), 1, True, {"dilations": [2, 2], **S2, **P1}),
    "group2": ((1, 4, 7, 8), 6, (3, 3), 2, True, P1),
    "group2_s2_nobias": ((1, 6, 9, 9), 4, (3, 3), 2, False, {**S2, **P1}),
    "group3_1x1": ((1, 9, 5, 7), 15, (1, 1), 3, True, {}),
    "dw3x3_c17": ((1, 17, 9, 11), 17, (3, 3), 17, True, P1),
    "dw3x3_s2_c33_nobias": ((1, 33, 8, 9), 33, (3, 3), 33, False, {**S2, **P1}),
    "dw_mult2": ((1, 8, 7, 9), 16, (3, 3), 8, True, P1),
    "dw_mult2_s2_same": ((1, 5, 9, 9), 10, (3, 3), 5, True, {**S2, "auto_pad": "SAME_UPPER"}),
    "dw5x5_nobias": ((1, 5, 9, 10), 5, (5, 5), 5, False, P2),
    "batch2": ((2, 5, 7, 8), 6, (3, 3), 1, True, P1),
    "conv1d": ((1, 5, 20), 7, (3,), 1, True, {"strides": [2], "pads": [1, 1]}),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv(case):
    shape, c_out, kernel, group, bias, attrs = CONV_CASES[case]
    rng = np.random.default_rng(1)
    n, inits = conv("conv", "x", "y", shape[1], c_out, kernel, rng, group=group, bias=bias, **attrs)
    check([n], {"x": shape}, {"y": None}, inits)


# Border columns in whole tiles (conv.Columns, border="tiles"): rows of 1 to 14 columns (tiles of the
# host's mr = 6 evened out: 4 + 3, 6 + 4 + 4, ...), windows reaching past both ends of a tile, pixels some
# tap reads for and others not, strides and dilations that skip pixels, pads wider than the window.
TILED_CASES = {
    **{f"3x3_p1_w{w}": ((1, 5, 4, w), 16, (3, 3), 1, True, P1) for w in (1, 2, 3, 5, 7, 8, 9, 13, 14)},
    "5x5_p2_w3": ((1, 3, 5, 3), 9, (5, 5), 1, True, P2),
    "5x5_p2_w11": ((1, 3, 5, 11), 9, (5, 5), 1, True, P2),
    "3x3_s2_p1_w14": ((1, 4, 6, 14), 8, (3, 3), 1, True, {**S2, **P1}),
    "3x3_s3_p2_w13": ((1, 4, 7, 13), 8, (3, 3), 1, True, {"strides": [3, 3], "pads": [2, 2, 2, 2]}),
    "3x3_dil2_p3_w9": ((1, 4, 6, 9), 8, (3, 3), 1, True, {"dilations": [2, 2], "pads": [3, 3, 3, 3]}),
    "3x3_dil3_s2_p2_w15": ((1, 3, 8, 15), 8, (3, 3), 1, True,
                           {"dilations": [3, 3], "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    "3x3_p3_wider_than_window": ((1, 3, 5, 4), 8, (3, 3), 1, True, {"pads": [3, 3, 3, 3]}),
    "3x3_asym_pads_w10": ((1, 3, 5, 10), 8, (3, 3), 1, True, {"pads": [0, 2, 1, 0]}),
    "1x7_p3_w12": ((1, 5, 3, 12), 7, (1, 7), 1, True, {"pads": [0, 3, 0, 3]}),
    "7x7_s2_p3_w23": ((1, 3, 9, 23), 16, (7, 7), 1, True, {**S2, "pads": [3, 3, 3, 3]}),
    "group2_p1_w7": ((1, 4, 5, 7), 6, (3, 3), 2, True, P1),
    "batch2_p1_w7": ((2, 5, 4, 7), 24, (3, 3), 1, True, P1),
}


@pytest.mark.parametrize("tile", [None, (4, 3), (7, 1)], ids=["default", "4x3", "7x1"])
@pytest.mark.parametrize("case", list(TILED_CASES), ids=list(TILED_CASES))
def test_conv_border_tiles(case, tile, target, tmp_path):
    """Without memory sharing, so that no kernel computes a careful prefix (which keeps clipped borders)."""
    import aot
    if tile is not None and target != "host":
        pytest.skip("other tiles on the host only")
    shape, c_out, kernel, group, bias, attrs = TILED_CASES[case]
    rng = np.random.default_rng(3)
    n, inits = conv("conv", "x", "y", shape[1], c_out, kernel, rng, group=group, bias=bias, **attrs)
    model = make_model([n], {"x": shape}, {"y": None}, inits)
    knobs = {"share_memory": False, "border_tiles": True, **({"mr": tile[0], "nr": tile[1]} if tile else {})}
    artifact = aot.build(model, target=target, knobs=knobs, out_dir=tmp_path)
    assert [s["border"] for s in artifact.metadata["schedules"]] == ["tiles"]
    result = aot.check(artifact, inputs=random_inputs(model))
    assert result.ok, result.comparisons


# --------------------------------------------------------------------------- Gemm / MatMul

# id: (transA, transB, alpha, beta, bias shape or None, B constant)
GEMM_CASES = {
    "nn_bias_n": (0, 0, 1.0, 1.0, (4,), True),
    "nt_bias_1n": (0, 1, 1.0, 1.0, (1, 4), True),
    "tn_bias_scalar": (1, 0, 1.0, 1.0, (), True),
    "tt_bias_mn": (1, 1, 1.0, 1.0, (3, 4), True),
    "alpha_beta": (0, 1, 0.5, 2.0, (4,), True),
    "no_bias": (0, 0, 1.5, 1.0, None, True),
    "dynamic_b": (0, 1, 1.0, 0.25, (1, 4), False),
}


@pytest.mark.parametrize("case", list(GEMM_CASES), ids=list(GEMM_CASES))
def test_gemm(case):
    trans_a, trans_b, alpha, beta, bias_shape, b_const = GEMM_CASES[case]
    m, k, nn = 3, 5, 4
    rng = np.random.default_rng(2)
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (nn, k) if trans_b else (k, nn)
    inputs = {"a": a_shape}
    inits = {}
    if b_const:
        inits["b"] = randn(rng, b_shape)
    else:
        inputs["b"] = b_shape
    ins = ["a", "b"]
    if bias_shape is not None:
        inits["c"] = randn(rng, bias_shape)
        ins.append("c")
    g = node("Gemm", ins, ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    check([g], inputs, {"y": (m, nn)}, inits)


# id: (A shape, B shape, B constant)
MATMUL_CASES = {
    "const_b_2d": ((3, 7), (7, 5), True),
    "dynamic_2d": ((4, 6), (6, 5), False),
    "dynamic_batched_3d": ((2, 3, 5), (2, 5, 4), False),
    "dynamic_broadcast_batch": ((1, 3, 5), (2, 5, 4), False),
    "3d_a_const_b": ((2, 5, 9), (9, 6), True),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES), ids=list(MATMUL_CASES))
def test_matmul(case):
    a_shape, b_shape, b_const = MATMUL_CASES[case]
    inputs = {"a": a_shape}
    inits = {}
    if b_const:
        inits["b"] = randn(np.random.default_rng(3), b_shape)
    else:
        inputs["b"] = b_shape
    check([node("MatMul", ["a", "b"], ["y"])], inputs, {"y": None}, inits)


# --------------------------------------------------------------------------- elementwise binary

# id: (A shape, A constant, B shape, B constant)
BROADCAST_CASES = {
    "same_shape": ((2, 3, 4, 5), False, (2, 3, 4, 5), False),
    "channel_const": ((2, 3, 4, 5), False, (1, 3, 1, 1), True),
    "scalar_const": ((1, 3, 4, 5), False, (), True),
    "last_dim_const": ((1, 3, 4, 5), False, (5,), True),
    "both_dynamic_bcast": ((2, 1, 4, 5), False, (1, 3, 1, 5), False),
    "const_first": ((), True, (1, 3, 4, 5), False),
}


@pytest.mark.parametrize("case", list(BROADCAST_CASES), ids=list(BROADCAST_CASES))
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary(op, case):
    a_shape, a_const, b_shape, b_const = BROADCAST_CASES[case]
    rng = np.random.default_rng(4)
    values = {
        "a": f32(1.0) if (a_const and a_shape == ()) else randn(rng, a_shape),
        "b": away_from_zero(rng, b_shape) if op == "Div" else randn(rng, b_shape),
    }
    consts = {"a": a_const, "b": b_const}
    shapes = {"a": a_shape, "b": b_shape}
    inits = {k: v for k, v in values.items() if consts[k]}
    inputs = {k: shapes[k] for k in values if not consts[k]}
    feeds = {k: values[k] for k in inputs}
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    check([node(op, ["a", "b"], ["y"])], inputs, {"y": out_shape}, inits, feeds=feeds)


# --------------------------------------------------------------------------- activations

# id: (op, attrs, extra inputs: list of (name, value or None for an empty optional input))
ACTIVATION_CASES = {
    "relu": ("Relu", {}, []),
    "clip_min_max": ("Clip", {}, [("min", -1.5), ("max", 2.0)]),
    "clip_min_only": ("Clip", {}, [("min", 0.0)]),
    "clip_max_only": ("Clip", {}, [("", None), ("max", 6.0)]),
    "clip_none": ("Clip", {}, []),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.1}, []),
    "sigmoid": ("Sigmoid", {}, []),
    "tanh": ("Tanh", {}, []),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
    "hard_swish": ("HardSwish", {}, []),
}


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (4, 9)], ids=["4d", "2d"])
@pytest.mark.parametrize("case", list(ACTIVATION_CASES), ids=list(ACTIVATION_CASES))
def test_activation(case, shape):
    op, attrs, extra = ACTIVATION_CASES[case]
    inits = {name: f32(v) for name, v in extra if name}
    n = node(op, ["x", *(name for name, _ in extra)], ["y"], **attrs)
    # wide input range so saturating regions of Sigmoid/Tanh/HardSigmoid/Clip are hit
    check([n], {"x": shape}, {"y": shape}, inits, scale=5.0)


# --------------------------------------------------------------------------- BatchNormalization


@pytest.mark.parametrize("shape", [(2, 5, 4, 6), (3, 7)], ids=["4d", "2d"])
def test_batchnorm(shape):
    n, inits = batchnorm("bn", "x", "y", shape[1], np.random.default_rng(5), epsilon=1e-3)
    check([n], {"x": shape}, {"y": shape}, inits)


def test_conv_batchnorm():
    rng = np.random.default_rng(6)
    c, ci = conv("conv", "x", "c", 3, 8, (3, 3), rng, bias=False, pads=[1, 1, 1, 1])
    b, bi = batchnorm("bn", "c", "y", 8, rng)
    check([c, b], {"x": (1, 3, 7, 9)}, {"y": (1, 8, 7, 9)}, {**ci, **bi})


# --------------------------------------------------------------------------- pooling

K2S2 = {"kernel_shape": [2, 2], **S2}
K3S2 = {"kernel_shape": [3, 3], **S2}

# id: (op, input shape, attrs)
POOL_CASES = {
    "max_2x2_s2": ("MaxPool", (1, 3, 8, 8), K2S2),
    "max_2x2_s2_odd": ("MaxPool", (1, 5, 7, 9), K2S2),
    "max_3x3_s2_p1": ("MaxPool", (1, 5, 9, 9), {**K3S2, **P1}),
    "max_3x3_s2_ceil": ("MaxPool", (1, 3, 8, 8), {**K3S2, "ceil_mode": 1}),
    "avg_2x2_s2": ("AveragePool", (1, 4, 8, 10), K2S2),
    "avg_3x3_s2_p1_excl_pad": ("AveragePool", (1, 5, 9, 9), {**K3S2, **P1, "count_include_pad": 0}),
    "avg_3x3_s2_p1_incl_pad": ("AveragePool", (1, 5, 9, 9), {**K3S2, **P1, "count_include_pad": 1}),
    "avg_3x3_asym_pads_excl": (
        "AveragePool",
        (1, 3, 6, 7),
        {"kernel_shape": [3, 3], "pads": [0, 0, 1, 2], "count_include_pad": 0},
    ),
    "global_avg": ("GlobalAveragePool", (1, 5, 6, 7), {}),
    "global_avg_batch2": ("GlobalAveragePool", (2, 17, 3, 5), {}),
}


@pytest.mark.parametrize("case", list(POOL_CASES), ids=list(POOL_CASES))
def test_pool(case):
    op, shape, attrs = POOL_CASES[case]
    check([node(op, ["x"], ["y"], **attrs)], {"x": shape}, {"y": None})


# --------------------------------------------------------------------------- shape / layout ops

X4 = (2, 3, 4, 5)

# id: (nodes, inputs, initializers) ; single output "y" of unknown declared shape
LAYOUT_CASES = {
    "flatten_axis1": ([node("Flatten", ["x"], ["y"], axis=1)], {"x": X4}, {}),
    "flatten_axis0": ([node("Flatten", ["x"], ["y"], axis=0)], {"x": X4}, {}),
    "flatten_axis2": ([node("Flatten", ["x"], ["y"], axis=2)], {"x": X4}, {}),
    "reshape_0_m1": ([node("Reshape", ["x", "s"], ["y"])], {"x": X4}, {"s": i64([0, -1])}),
    "reshape_m1_0_10": ([node("Reshape", ["x", "s"], ["y"])], {"x": X4}, {"s": i64([-1, 0, 10])}),
    "reshape_m1": ([node("Reshape", ["x", "s"], ["y"])], {"x": X4}, {"s": i64([-1])}),
    "squeeze_0_2": (
        [node("Squeeze", ["x", "ax"], ["y"])],
        {"x": (1, 3, 1, 5)},
        {"ax": i64([0, 2])},
    ),
    "squeeze_neg": ([node("Squeeze", ["x", "ax"], ["y"])], {"x": (1, 3, 1, 5)}, {"ax": i64([-2])}),
    "squeeze_all": ([node("Squeeze", ["x"], ["y"])], {"x": (1, 3, 1, 5)}, {}),
    "unsqueeze_0": ([node("Unsqueeze", ["x", "ax"], ["y"])], {"x": (3, 5)}, {"ax": i64([0])}),
    "unsqueeze_1_neg1": (
        [node("Unsqueeze", ["x", "ax"], ["y"])],
        {"x": (3, 5)},
        {"ax": i64([1, -1])},
    ),
    "transpose_2d_default": ([node("Transpose", ["x"], ["y"])], {"x": (4, 6)}, {}),
    "transpose_021": ([node("Transpose", ["x"], ["y"], perm=[0, 2, 1])], {"x": (2, 3, 4)}, {}),
    "transpose_0231": ([node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {"x": X4}, {}),
    "transpose_0312": ([node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])], {"x": X4}, {}),
    "transpose_3102": ([node("Transpose", ["x"], ["y"], perm=[3, 1, 0, 2])], {"x": X4}, {}),
    "transpose_1023": ([node("Transpose", ["x"], ["y"], perm=[1, 0, 2, 3])], {"x": X4}, {}),
    "concat_axis0": (
        [node("Concat", ["a", "b"], ["y"], axis=0)],
        {"a": (2, 3, 4), "b": (1, 3, 4)},
        {},
    ),
    "concat_axis_neg1_const": (
        [node("Concat", ["a", "b", "c"], ["y"], axis=-1)],
        {"a": (2, 3, 4), "b": (2, 3, 2)},
        {"c": randn(np.random.default_rng(7), (2, 3, 1))},
    ),
    "concat_axis1_4d": (
        [node("Concat", ["a", "b"], ["y"], axis=1)],
        {"a": (1, 3, 4, 5), "b": (1, 5, 4, 5)},
        {},
    ),
    "pad_constant_value": (
        [node("Pad", ["x", "p", "v"], ["y"], mode="constant")],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 0, 1, 2, 0, 0, 2, 1]), "v": f32(0.5)},
    ),
    "pad_constant_channels": (
        [node("Pad", ["x", "p"], ["y"])],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 1, 0, 0, 0, 2, 0, 0])},
    ),
    "pad_reflect": (
        [node("Pad", ["x", "p"], ["y"], mode="reflect")],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 0, 2, 1, 0, 0, 1, 2])},
    ),
    "pad_edge": (
        [node("Pad", ["x", "p"], ["y"], mode="edge")],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 0, 1, 0, 0, 0, 2, 3])},
    ),
    "pad_value_shape_1": (      # a one-element constant_value, as exported attention masks carry
        [node("Pad", ["x", "p", "v"], ["y"])],
        {"x": (2, 3, 4)},
        {"p": i64([0, 0, 1, 0, 0, 2]), "v": np.array([-3.0], np.float32)},
    ),
    "pad_negative_crops": (
        [node("Pad", ["x", "p"], ["y"])],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, -1, -2, 1, 0, 0, 1, -3])},
    ),
    "pad_negative_reflect": (
        [node("Pad", ["x", "p"], ["y"], mode="reflect")],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 0, -1, 2, 0, 0, 2, -1])},
    ),
    "pad_negative_edge": (
        [node("Pad", ["x", "p"], ["y"], mode="edge")],
        {"x": (1, 3, 5, 6)},
        {"p": i64([0, 0, -2, 3, 0, 0, 1, -2])},
    ),
    "slice_empty_output": (     # C has no zero-length arrays: the harnesses must still compile
        [node("Slice", ["x", "s", "e"], ["y"])],
        {"x": (2, 3, 4)},
        {"s": i64([2]), "e": i64([2])},
    ),
    "softmax_2d_last": ([node("Softmax", ["x"], ["y"], axis=-1)], {"x": (3, 10)}, {}),
    "softmax_4d_last": ([node("Softmax", ["x"], ["y"], axis=-1)], {"x": X4}, {}),
    "softmax_4d_axis1": ([node("Softmax", ["x"], ["y"], axis=1)], {"x": X4}, {}),
    "identity": ([node("Identity", ["x"], ["y"])], {"x": X4}, {}),
    "dropout_inference": ([node("Dropout", ["x"], ["y"])], {"x": X4}, {}),
}


@pytest.mark.parametrize("case", list(LAYOUT_CASES), ids=list(LAYOUT_CASES))
def test_layout_op(case):
    nodes, inputs, inits = LAYOUT_CASES[case]
    check(nodes, inputs, {"y": None}, inits, scale=3.0)


# --------------------------------------------------------------------------- chains on Conv outputs
# Each builder returns (nodes, inputs, outputs, initializers). The ops consume Conv outputs so
# that any internal layout (e.g. NHWC) chosen for convolutions has to be converted correctly.


def _chain_conv_transpose(rng, perm):
    c, ci = conv("conv", "x", "c", 3, 8, (3, 3), rng, pads=[1, 1, 1, 1])
    t = node("Transpose", ["c"], ["y"], perm=perm)
    return [c, t], {"x": (1, 3, 6, 7)}, {"y": None}, ci


def _chain_conv_reshape(rng):
    c, ci = conv("conv", "x", "c", 3, 5, (3, 3), rng, strides=[2, 2], pads=[1, 1, 1, 1])
    r = node("Reshape", ["c", "s"], ["y"])
    return [c, r], {"x": (2, 3, 7, 9)}, {"y": None}, {**ci, "s": i64([0, -1])}


def _chain_conv_flatten_gemm(rng):
    c, ci = conv("conv", "x", "c", 3, 4, (3, 3), rng)
    f = node("Flatten", ["c"], ["f"], axis=1)
    g = node("Gemm", ["f", "gw", "gb"], ["y"], transB=1)
    inits = {**ci, "gw": randn(rng, (6, 4 * 4 * 5), 0.1), "gb": randn(rng, (6,))}
    return [c, f, g], {"x": (1, 3, 6, 7)}, {"y": (1, 6)}, inits


def _chain_conv_softmax(rng, axis):
    c, ci = conv("conv", "x", "c", 5, 7, (3, 3), rng, pads=[1, 1, 1, 1])
    s = node("Softmax", ["c"], ["y"], axis=axis)
    return [c, s], {"x": (1, 5, 5, 6)}, {"y": (1, 7, 5, 6)}, ci


def _chain_conv_concat_conv(rng):
    c1, i1 = conv("conv1", "x", "c1", 3, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    c2, i2 = conv("conv2", "x", "c2", 3, 4, (1, 1), rng)
    cat = node("Concat", ["c1", "c2"], ["cat"], axis=1)
    c3, i3 = conv("conv3", "cat", "y", 9, 6, (3, 3), rng, strides=[2, 2], pads=[1, 1, 1, 1])
    return [c1, c2, cat, c3], {"x": (1, 3, 7, 8)}, {"y": None}, {**i1, **i2, **i3}


def _chain_conv_concat_input(rng):
    c1, i1 = conv("conv1", "x", "c1", 3, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    cat = node("Concat", ["x", "c1"], ["cat"], axis=1)
    c2, i2 = conv("conv2", "cat", "y", 8, 4, (1, 1), rng)
    return [c1, cat, c2], {"x": (1, 3, 6, 5)}, {"y": None}, {**i1, **i2}


def _chain_conv_pad_conv(rng, mode):
    c1, i1 = conv("conv1", "x", "c1", 3, 6, (1, 1), rng)
    p = node("Pad", ["c1", "p"], ["pd"], mode=mode)
    c2, i2 = conv("conv2", "pd", "y", 6, 5, (3, 3), rng)
    inits = {**i1, **i2, "p": i64([0, 0, 1, 2, 0, 0, 2, 1])}
    return [c1, p, c2], {"x": (1, 3, 6, 7)}, {"y": None}, inits


def _chain_conv_bn_clip(rng):
    c, ci = conv("conv", "x", "c", 3, 8, (3, 3), rng, bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    b, bi = batchnorm("bn", "c", "b", 8, rng)
    clip = node("Clip", ["b", "lo", "hi"], ["y"])
    inits = {**ci, **bi, "lo": f32(0.0), "hi": f32(6.0)}
    return [c, b, clip], {"x": (1, 3, 9, 9)}, {"y": None}, inits


def _chain_residual(rng):
    c1, i1 = conv("conv1", "x", "c1", 5, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    r1 = node("Relu", ["c1"], ["r1"])
    c2, i2 = conv("conv2", "r1", "c2", 5, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    add = node("Add", ["c2", "x"], ["s"])
    r2 = node("Relu", ["s"], ["y"])
    return [c1, r1, c2, add, r2], {"x": (1, 5, 6, 7)}, {"y": (1, 5, 6, 7)}, {**i1, **i2}


def _chain_conv_broadcast(rng):
    c, ci = conv("conv", "x", "c", 3, 6, (3, 3), rng, pads=[1, 1, 1, 1])
    mul = node("Mul", ["c", "ch"], ["m"])
    add = node("Add", ["m", "w"], ["a"])
    sub = node("Sub", ["one", "a"], ["y"])
    inits = {**ci, "ch": randn(rng, (1, 6, 1, 1)), "w": randn(rng, (7,)), "one": f32(1.0)}
    return [c, mul, add, sub], {"x": (1, 3, 5, 7)}, {"y": (1, 6, 5, 7)}, inits


def _chain_conv_maxpool_conv(rng):
    c1, i1 = conv("conv1", "x", "c1", 3, 6, (3, 3), rng, pads=[1, 1, 1, 1])
    r = node("Relu", ["c1"], ["r"])
    mp = node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2])
    c2, i2 = conv("conv2", "mp", "y", 6, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    return [c1, r, mp, c2], {"x": (1, 3, 9, 10)}, {"y": None}, {**i1, **i2}


def _chain_classifier_head(rng):
    c, ci = conv("conv", "x", "c", 3, 8, (3, 3), rng, strides=[2, 2], pads=[1, 1, 1, 1])
    r = node("Relu", ["c"], ["r"])
    gap = node("GlobalAveragePool", ["r"], ["g"])
    sq = node("Squeeze", ["g", "ax"], ["sq"])
    gemm = node("Gemm", ["sq", "fw", "fb"], ["logits"], transB=1)
    sm = node("Softmax", ["logits"], ["y"], axis=-1)
    inits = {**ci, "ax": i64([2, 3]), "fw": randn(rng, (5, 8)), "fb": randn(rng, (5,))}
    return [c, r, gap, sq, gemm, sm], {"x": (2, 3, 9, 11)}, {"y": (2, 5)}, inits


def _chain_tokens_matmul(rng):
    c, ci = conv("conv", "x", "c", 3, 6, (3, 3), rng, strides=[2, 2], pads=[1, 1, 1, 1])
    r = node("Reshape", ["c", "s"], ["tok"])
    t = node("Transpose", ["tok"], ["tt"], perm=[0, 2, 1])
    mm = node("MatMul", ["tt", "mw"], ["y"])
    inits = {**ci, "s": i64([0, 6, -1]), "mw": randn(rng, (6, 4))}
    return [c, r, t, mm], {"x": (1, 3, 7, 8)}, {"y": None}, inits


def _chain_squeeze_excite(rng):
    dw, i1 = conv("dw", "x", "d", 8, 8, (3, 3), rng, group=8, pads=[1, 1, 1, 1])
    hs = node("HardSwish", ["d"], ["h"])
    gap = node("GlobalAveragePool", ["h"], ["g"])
    s1, i2 = conv("se1", "g", "s1", 8, 4, (1, 1), rng)
    r = node("Relu", ["s1"], ["sr"])
    s2, i3 = conv("se2", "sr", "s2", 4, 8, (1, 1), rng)
    hsig = node("HardSigmoid", ["s2"], ["gate"], alpha=1.0 / 6, beta=0.5)
    mul = node("Mul", ["h", "gate"], ["m"])
    pw, i4 = conv("pw", "m", "y", 8, 5, (1, 1), rng)
    nodes = [dw, hs, gap, s1, r, s2, hsig, mul, pw]
    return nodes, {"x": (1, 8, 7, 9)}, {"y": None}, {**i1, **i2, **i3, **i4}


def _chain_multi_output(rng):
    # an intermediate Conv result is also a graph output; outputs must come back in graph order
    c, ci = conv("conv", "x", "y1", 3, 5, (3, 3), rng, pads=[1, 1, 1, 1])
    ap = node("AveragePool", ["y1"], ["ap"], kernel_shape=[2, 2], strides=[2, 2])
    s = node("Sigmoid", ["ap"], ["y2"])
    t = node("Transpose", ["y1"], ["y0"], perm=[0, 2, 3, 1])
    return [c, ap, s, t], {"x": (1, 3, 6, 8)}, {"y2": None, "y0": None, "y1": None}, ci


CHAIN_CASES = {
    "conv_transpose_0231": lambda rng: _chain_conv_transpose(rng, [0, 2, 3, 1]),
    "conv_transpose_0132": lambda rng: _chain_conv_transpose(rng, [0, 1, 3, 2]),
    "conv_reshape": _chain_conv_reshape,
    "conv_flatten_gemm": _chain_conv_flatten_gemm,
    "conv_softmax_axis1": lambda rng: _chain_conv_softmax(rng, 1),
    "conv_softmax_axis_last": lambda rng: _chain_conv_softmax(rng, -1),
    "conv_concat_conv": _chain_conv_concat_conv,
    "conv_concat_input_conv": _chain_conv_concat_input,
    "conv_pad_constant_conv": lambda rng: _chain_conv_pad_conv(rng, "constant"),
    "conv_pad_reflect_conv": lambda rng: _chain_conv_pad_conv(rng, "reflect"),
    "conv_bn_clip": _chain_conv_bn_clip,
    "residual_add": _chain_residual,
    "conv_broadcast_ops": _chain_conv_broadcast,
    "conv_maxpool_conv": _chain_conv_maxpool_conv,
    "classifier_head": _chain_classifier_head,
    "conv_tokens_matmul": _chain_tokens_matmul,
    "squeeze_excite": _chain_squeeze_excite,
    "multi_output": _chain_multi_output,
}


@pytest.mark.parametrize("case", list(CHAIN_CASES), ids=list(CHAIN_CASES))
def test_chain(case):
    nodes, inputs, outputs, inits = CHAIN_CASES[case](np.random.default_rng(8))
    check(nodes, inputs, outputs, inits)


# --------------------------------------------------------------------------- unsupported ops


def _einsum_model():
    n = node("Einsum", ["x"], ["y"], name="my_einsum_node", equation="bij->bji")
    model = make_model([n], {"x": (2, 3, 3)}, {"y": (2, 3, 3)})
    return model, "my_einsum_node", "Einsum"


def _nms_model():
    # NonMaxSuppression followed by a float op so that the graph output is float32
    nms = node("NonMaxSuppression", ["boxes", "scores", "max_out"], ["sel"], name="my_nms_node")
    cast = node("Cast", ["sel"], ["self"], to=1)
    relu = node("Relu", ["self"], ["y"])
    model = make_model(
        [nms, cast, relu],
        {"boxes": (1, 6, 4), "scores": (1, 1, 6)},
        {"y": None},
        {"max_out": i64([2])},
    )
    return model, "my_nms_node", "NonMaxSuppression"


@pytest.mark.parametrize("build", [_einsum_model, _nms_model], ids=["Einsum", "NonMaxSuppression"])
def test_unsupported_op(build):
    import aot

    model, node_name, op_type = build()
    assert issubclass(aot.UnsupportedOpError, aot.AotError)
    with pytest.raises(aot.UnsupportedOpError) as excinfo:
        aot.run(model, inputs=random_inputs(model))
    message = str(excinfo.value)
    assert node_name in message, message
    assert op_type in message, message
