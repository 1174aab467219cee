"""Resampling and detection-head ops against onnxruntime: Resize, Upsample, ConvTranspose,
DepthToSpace, SpaceToDepth, Expand, Tile, dilated pooling, LpPool, GlobalLpPool; and two detector-style models."""

from __future__ import annotations

import math

import numpy as np
import oracle
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

try:
    from oracle import assert_matches_onnxruntime, make_model
except ImportError:  # tests/ imported as a package
    from tests.oracle import assert_matches_onnxruntime, make_model

import aot
from aot.errors import UnsupportedOpError

QEMU = ["host", pytest.param("aarch64", marks=pytest.mark.qemu), pytest.param("cortex-m4", marks=pytest.mark.qemu)]


@pytest.fixture(autouse=True)
def target(request, monkeypatch):
    """Most cases run on the host; a representative one per op is parametrized over QEMU targets."""
    name = request.node.callspec.params.get("where", "host") if hasattr(request.node, "callspec") else "host"
    monkeypatch.setattr(oracle, "TARGET", name)
    return name


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op}_{outputs[0]}", **attrs)


def randn(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def f32(values):
    return np.asarray(values, dtype=np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


def run(nodes, inputs, outputs, inits=None, opset=19, tol=1e-4, seed=0):
    model = make_model(nodes, inputs, outputs, inits or {}, opset=opset)
    rng = np.random.default_rng(seed)
    feeds = {k: randn(rng, s) for k, s in inputs.items()}
    return assert_matches_onnxruntime(model, feeds, tol=tol)


# --------------------------------------------------------------------------- Resize

def resize(shape, scales=None, sizes=None, roi=None, opset=19, tol=1e-4, **attrs):
    inits = {"roi": f32(roi if roi is not None else [])}
    ins = ["x", "roi"]
    if scales is not None:
        inits["scales"] = f32(scales)
        ins.append("scales")
    else:
        inits["sizes"] = i64(sizes)
        ins += ["", "sizes"]
    return run([node("Resize", ins, ["y"], **attrs)], {"x": shape}, {"y": None}, inits, opset=opset, tol=tol)


NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("where", QEMU)
def test_resize_nearest_x2(where):
    resize((1, 3, 5, 6), scales=[1, 1, 2, 2], mode="nearest")


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_nearest_modes(nearest_mode, transform):
    resize((1, 2, 5, 7), sizes=[1, 2, 8, 5], mode="nearest", nearest_mode=nearest_mode,
           coordinate_transformation_mode=transform)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_linear(transform):
    resize((2, 5, 4, 6), sizes=[2, 5, 7, 13], mode="linear", coordinate_transformation_mode=transform)


@pytest.mark.parametrize("where", QEMU)
def test_resize_linear_x2_half_pixel(where):
    resize((1, 9, 5, 6), scales=[1, 1, 2, 2], mode="linear")


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic(transform, exclude_outside):
    resize((1, 3, 6, 5), sizes=[1, 3, 9, 3], mode="cubic", coordinate_transformation_mode=transform,
           exclude_outside=exclude_outside, cubic_coeff_a=-0.5)


def test_resize_downsample_linear():
    resize((1, 4, 9, 10), scales=[1, 1, 0.5, 0.6], mode="linear")


def test_resize_3d_linear_last_axis():
    """Not 4-D: the innermost (resized) axis runs scalar, NCHW."""
    resize((2, 3, 7), scales=[1, 1, 1.5], mode="linear")


def test_resize_channels_and_depth():
    """5-D trilinear, and a 4-D resize of the channel axis (which stays NCHW)."""
    resize((1, 2, 3, 4, 5), scales=[1, 1, 2, 1.5, 0.8], mode="linear")
    resize((1, 3, 4, 5), sizes=[1, 5, 4, 5], mode="nearest")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_antialias(mode, transform, exclude_outside):
    """Downsampling with antialias: the filter widened by 1 / scale (to 7 taps at 0.3); upsampling axes
    keep the plain filter."""
    resize((1, 2, 11, 9), scales=[1, 1, 0.3, 0.6], mode=mode, antialias=1, coordinate_transformation_mode=transform,
           exclude_outside=exclude_outside)
    resize((1, 2, 10, 6), sizes=[1, 2, 4, 9], mode=mode, antialias=1, coordinate_transformation_mode=transform,
           exclude_outside=exclude_outside)


@pytest.mark.parametrize("where", QEMU)
def test_resize_antialias_on_arm(where):
    resize((1, 3, 12, 12), scales=[1, 1, 0.5, 0.25], mode="linear", antialias=1)


@pytest.mark.parametrize("where", QEMU)
def test_resize_tf_crop_and_resize(where):
    for mode in ("nearest", "linear", "cubic"):
        resize((1, 2, 6, 7), sizes=[1, 2, 5, 4], roi=[0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4], mode=mode,
               coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_axes_keep_aspect_ratio(policy):
    resize((1, 3, 6, 8), sizes=[9, 10], axes=[2, 3], mode="linear", keep_aspect_ratio_policy=policy)


def test_resize_opset10_and_11():
    resize_old = node("Resize", ["x", "scales"], ["y"], mode="linear")
    run([resize_old], {"x": (1, 2, 3, 4)}, {"y": None}, {"scales": f32([1, 1, 2, 1.5])}, opset=10)
    resize((1, 2, 4, 5), scales=[1, 1, 1.5, 2], opset=11, mode="nearest")
    resize((1, 2, 4, 5), scales=[1, 1, 1.5, 2], opset=13, mode="cubic")


def test_resize_after_conv_nhwc():
    """After a convolution the resize runs channels-last; both feed a Concat and a Conv."""
    rng = np.random.default_rng(1)
    nodes = [node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             node("Resize", ["a", "", "scales"], ["up"], mode="nearest"),
             node("Concat", ["up", "x"], ["cat"], axis=1),
             node("Conv", ["cat", "w2"], ["y"], kernel_shape=[1, 1])]
    inits = {"w": randn(rng, (10, 3, 3, 3), 0.3), "scales": f32([1, 1, 2, 2]), "w2": randn(rng, (4, 13, 1, 1), 0.3)}
    run(nodes, {"x": (1, 3, 8, 10)}, {"y": None}, inits, opset=13)


def test_upsample():
    run([node("Upsample", ["x", "scales"], ["y"], mode="nearest")], {"x": (1, 2, 3, 4)}, {"y": None},
        {"scales": f32([1, 1, 2, 3])}, opset=9)
    run([node("Upsample", ["x", "scales"], ["y"], mode="linear")], {"x": (1, 2, 3, 4)}, {"y": None},
        {"scales": f32([1, 1, 2, 1.5])}, opset=9)


def test_resize_refusals():
    model = make_model([node("Resize", ["x", "", "scales"], ["y"], mode="nearest", antialias=1)],
                       {"x": (1, 1, 4, 4)}, {"y": (1, 1, 2, 2)}, {"scales": f32([1, 1, 0.5, 0.5])}, opset=19)
    with pytest.raises(UnsupportedOpError, match="antialias=1 is defined for the linear and cubic modes"):
        aot.build(model, target="host")
    model = make_model([node("Resize", ["x", "", "scales"], ["y"])], {"x": (1, 1, 4, 4), "scales": (3,)},
                       {"y": (1, 1, 8, 8)})
    with pytest.raises(UnsupportedOpError, match=r"scales of shape \[3\] is not 4 values"):
        aot.build(model, target="host")
    # int64 is admitted for sizes fed at run time, not for the data
    graph = helper.make_graph([node("Resize", ["x", "", "", "sizes"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 1, 2, 2]),
                               helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match="input 'x' is int64"):
        aot.build(model, target="host")


# --------------------------------------------------------------------------- Resize, scales or sizes fed

def fed_at_run_time(model, names):
    """The model with the initializers `names` made graph inputs (the output keeps its declared shape)."""
    keep = []
    for tensor in model.graph.initializer:
        if tensor.name in names:
            model.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            keep.append(tensor)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model


def resize_fed(shape, scales=None, sizes=None, roi=None, opset=19, tol=1e-4, seed=0, op="Resize", **attrs):
    """A Resize (or Upsample) whose scales or sizes, and roi if given, are graph inputs fed at run time;
    the output's shape is declared, from ONNX inference on the same model with them constant."""
    inits = {"scales": f32(scales)} if scales is not None else {"sizes": i64(sizes)}
    if op == "Upsample" or opset < 11:
        ins = ["x", "scales"]
    else:
        if roi is not None:
            inits["roi"] = f32(roi)
        ins = ["x", "roi" if roi is not None else "", *(["scales"] if scales is not None else ["", "sizes"])]
    model = fed_at_run_time(make_model([node(op, ins, ["y"], **attrs)], {"x": shape}, {"y": None}, inits,
                                       opset=opset), set(inits))
    rng = np.random.default_rng(seed)
    feeds = {"x": randn(rng, shape), **inits}
    return assert_matches_onnxruntime(model, feeds, tol=tol)


def test_resize_fed_antialias():
    """With the scales fed, the filter's width is unknown at build time: refused; sizes fed with the
    stretch policy fix the scale by the declared shape, and build."""
    with pytest.raises(UnsupportedOpError, match="antialias=1 with its scale fed at run time"):
        resize_fed((1, 2, 8, 8), scales=[1, 1, 0.5, 0.5], mode="linear", antialias=1)
    resize_fed((1, 2, 9, 8), sizes=[1, 2, 4, 3], mode="cubic", antialias=1)


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_fed_scales_nearest(nearest_mode, transform):
    # 0.65, not 0.6: with half_pixel_symmetric, 7 -> 4 at 0.6 puts a source coordinate a rounding error
    # from a tie (0.50000024), where aot's tables, constant or not, and onnxruntime round apart
    resize_fed((1, 2, 5, 7), scales=[1, 1, 1.7, 0.65], mode="nearest", nearest_mode=nearest_mode,
               coordinate_transformation_mode=transform)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_fed_scales_linear(transform):
    resize_fed((2, 3, 4, 6), scales=[1, 1, 1.8, 2.5], mode="linear", coordinate_transformation_mode=transform)
    resize_fed((1, 2, 9, 10), scales=[1, 1, 0.5, 0.6], mode="linear", coordinate_transformation_mode=transform)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_fed_scales_cubic(transform, exclude_outside):
    resize_fed((1, 3, 6, 5), scales=[1, 1, 1.5, 0.8], mode="cubic", coordinate_transformation_mode=transform,
               exclude_outside=exclude_outside, cubic_coeff_a=-0.5)


def test_resize_fed_scales_shapes_and_opsets():
    """3-D and 5-D, a scale on the channel axis, axes (opset 18), opset 10 and Upsample (nearest simple,
    which reads the scale to tell a downsampling)."""
    resize_fed((2, 3, 7), scales=[1, 1, 1.5], mode="linear")
    resize_fed((1, 2, 3, 4, 5), scales=[1, 1, 2, 1.5, 0.8], mode="linear")
    resize_fed((1, 3, 4, 5), scales=[1, 2, 1, 1], mode="nearest")
    resize_fed((1, 3, 4, 5), scales=[2.5, 0.5], axes=[3, 2], mode="cubic", opset=18)
    resize_fed((1, 2, 3, 4), scales=[1, 1, 2, 1.5], mode="linear", opset=10)
    resize_fed((1, 2, 6, 4), scales=[1, 1, 0.5, 1.5], mode="nearest", opset=10)
    resize_fed((1, 2, 3, 4), scales=[1, 1, 2, 3], mode="nearest", op="Upsample", opset=9)


def test_resize_fed_scales_after_conv_nhwc():
    """After a convolution the resize runs channels-last, its run-time taps permuted with the axes."""
    rng = np.random.default_rng(1)
    nodes = [node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             node("Resize", ["a", "", "scales"], ["up"], mode="linear"),
             node("Conv", ["up", "w2"], ["y"], kernel_shape=[1, 1])]
    inits = {"w": randn(rng, (10, 3, 3, 3), 0.3), "scales": f32([1, 1, 2, 1.5]), "w2": randn(rng, (4, 10, 1, 1), 0.3)}
    model = fed_at_run_time(make_model(nodes, {"x": (1, 3, 8, 10)}, {"y": None}, inits, opset=13), {"scales"})
    # the resized tensor's shape, declared as an exporter would (inference cannot tell it from fed scales)
    model.graph.value_info.append(helper.make_tensor_value_info("up", TensorProto.FLOAT, [1, 10, 8, 7]))
    assert_matches_onnxruntime(model, {"x": randn(rng, (1, 3, 8, 10)), "scales": inits["scales"]})


@pytest.mark.parametrize("where", QEMU)
def test_resize_fed_scales_on_targets(where):
    resize_fed((1, 3, 5, 6), scales=[1, 1, 2, 1.5], mode="linear")
    resize_fed((1, 2, 5, 4), scales=[1, 1, 0.6, 1.75], mode="cubic",
               coordinate_transformation_mode="half_pixel_symmetric")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_fed_sizes(mode):
    resize_fed((1, 2, 5, 7), sizes=[1, 2, 8, 4], mode=mode)
    resize_fed((1, 3, 6, 8), sizes=[9, 5], axes=[2, 3], mode=mode, opset=18)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("transform", ["half_pixel", "align_corners"])
def test_resize_fed_sizes_keep_aspect_ratio(policy, transform):
    """The common scale, picked at run time from the sizes, decides the coordinates."""
    resize_fed((1, 3, 6, 8), sizes=[9, 10], axes=[2, 3], mode="linear", keep_aspect_ratio_policy=policy,
               coordinate_transformation_mode=transform)
    resize_fed((1, 2, 5, 7), sizes=[1, 2, 3, 9], mode="nearest", keep_aspect_ratio_policy=policy)


@pytest.mark.parametrize("where", QEMU)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_fed_roi_tf_crop_and_resize(mode, where):
    """A roi fed at run time: coordinates and the extrapolation mask computed by the kernel."""
    resize_fed((1, 2, 6, 7), sizes=[1, 2, 5, 4], roi=[0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4], mode=mode,
               coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    resize_fed((2, 3, 6, 7), scales=[0.8, 1.5], roi=[0.1, 0.9, 0.2, 0.8], axes=[2, 3], mode=mode, opset=18,
               coordinate_transformation_mode="tf_crop_and_resize")


# --------------------------------------------------------------------------- ConvTranspose

def conv_transpose(shape, c_out, kernel, group=1, bias=True, seed=0, computed=(), **attrs):
    """ConvTranspose with random weights; the operands named in `computed` ("w", "b") are graph inputs
    fed at run time instead of initializers."""
    rng = np.random.default_rng(seed)
    c_in = shape[1]
    params = {"w": randn(rng, (c_in, c_out // group, *kernel), 0.5)}
    ins = ["x", "w"]
    if bias:
        params["b"] = randn(rng, (c_out,))
        ins.append("b")
    inits = {k: v for k, v in params.items() if k not in computed}
    fed = {k: v for k, v in params.items() if k in computed}
    model = make_model([node("ConvTranspose", ins, ["y"], kernel_shape=list(kernel), group=group, **attrs)],
                       {"x": shape, **{k: v.shape for k, v in fed.items()}}, {"y": None}, inits, opset=17)
    return assert_matches_onnxruntime(model, {"x": randn(rng, shape), **fed})


CONV_TRANSPOSE_CASES = {
    "k2_s2": ((1, 8, 5, 6), 4, (2, 2), 1, True, {"strides": [2, 2]}),
    "k3_s1_p1": ((1, 3, 5, 5), 5, (3, 3), 1, True, {"pads": [1, 1, 1, 1]}),
    "k3_s2_p1_outpad": ((1, 4, 4, 5), 6, (3, 3), 1, True, {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                          "output_padding": [1, 1]}),
    "k4_s2_p1": ((1, 5, 3, 4), 9, (4, 4), 1, False, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "k3_s3_asym": ((2, 3, 3, 4), 4, (3, 2), 1, True, {"strides": [3, 2], "pads": [0, 1, 2, 0]}),
    "k3_d2_s2": ((1, 3, 4, 4), 2, (3, 3), 1, True, {"strides": [2, 2], "dilations": [2, 2]}),
    "k3_d2_s1": ((1, 3, 4, 4), 2, (3, 3), 1, True, {"dilations": [2, 1], "pads": [2, 1, 0, 1]}),
    "groups2": ((1, 4, 4, 4), 6, (3, 3), 2, True, {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
    "depthwise": ((1, 5, 4, 3), 5, (2, 2), 5, True, {"strides": [2, 2]}),
    "output_shape": ((1, 3, 4, 4), 2, (3, 3), 1, True, {"strides": [2, 2], "output_shape": [10, 9]}),
    "same_upper": ((1, 3, 4, 5), 2, (4, 4), 1, True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 3, 4, 5), 2, (2, 2), 1, True, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "valid_big_pads_crop": ((1, 2, 5, 5), 3, (3, 3), 1, True, {"strides": [2, 2], "pads": [4, 3, 3, 4]}),
    "c17_to_33": ((1, 17, 3, 3), 33, (2, 2), 1, True, {"strides": [2, 2]}),
}


@pytest.mark.parametrize("case", list(CONV_TRANSPOSE_CASES))
def test_conv_transpose(case):
    shape, c_out, kernel, group, bias, attrs = CONV_TRANSPOSE_CASES[case]
    conv_transpose(shape, c_out, kernel, group, bias, **attrs)


@pytest.mark.parametrize("where", QEMU)
def test_conv_transpose_k3_s2(where):
    conv_transpose((1, 6, 4, 5), 8, (3, 3), strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])


def test_conv_transpose_1d():
    conv_transpose((1, 4, 7), 3, (3,), strides=[2], pads=[1, 0])
    conv_transpose((2, 3, 5), 6, (4,), group=3, strides=[3], output_padding=[2])


@pytest.mark.parametrize("case", list(CONV_TRANSPOSE_CASES))
def test_conv_transpose_computed_weight_and_bias(case):
    """The same cases with the weight and bias fed at run time (the direct kernel)."""
    shape, c_out, kernel, group, bias, attrs = CONV_TRANSPOSE_CASES[case]
    conv_transpose(shape, c_out, kernel, group, bias, computed=("w", "b"), **attrs)


@pytest.mark.parametrize("computed", [("w",), ("b",)])
def test_conv_transpose_computed_weight_or_bias(computed):
    conv_transpose((1, 4, 4, 5), 6, (3, 3), 2, True, computed=computed, strides=[2, 2], pads=[1, 1, 0, 0],
                   output_padding=[1, 0])
    conv_transpose((2, 3, 5), 6, (4,), group=3, computed=computed, strides=[3], output_padding=[2])


def test_conv_transpose_1d_computed_weight():
    conv_transpose((1, 4, 7), 3, (3,), computed=("w", "b"), strides=[2], pads=[1, 0], dilations=[2])
    conv_transpose((2, 3, 5), 6, (4,), group=3, bias=False, computed=("w",), strides=[3], output_padding=[2])


@pytest.mark.parametrize("where", QEMU[1:])
def test_conv_transpose_computed_weight_on_arm(where):
    conv_transpose((1, 6, 4, 5), 8, (3, 3), 2, computed=("w", "b"), strides=[2, 2], pads=[1, 1, 1, 1],
                   output_padding=[1, 1])


def test_conv_transpose_3d_computed_weight():
    """3-D runs as direct loops (conv_volume.py), which read a weight fed at run time as well."""
    model = make_model([node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1, 2])],
                       {"x": (1, 2, 3, 3, 3), "w": (2, 2, 2, 2, 2)}, {"y": None})
    rng = np.random.default_rng(3)
    assert_matches_onnxruntime(model, {"x": randn(rng, (1, 2, 3, 3, 3)), "w": randn(rng, (2, 2, 2, 2, 2))})


# --------------------------------------------------------------------------- DepthToSpace, SpaceToDepth

@pytest.mark.parametrize("where", QEMU)
def test_depth_to_space(where):
    for mode in ("DCR", "CRD"):
        run([node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)], {"x": (2, 12, 3, 4)}, {"y": None})


def test_depth_to_space_after_conv():
    """Inside an NHWC region: conv -> DepthToSpace (a pixel shuffle) -> conv."""
    rng = np.random.default_rng(2)
    nodes = [node("Conv", ["x", "w"], ["a"], kernel_shape=[1, 1]),
             node("DepthToSpace", ["a"], ["s"], blocksize=3, mode="CRD"),
             node("Conv", ["s", "w2"], ["y"], kernel_shape=[3, 3])]
    inits = {"w": randn(rng, (18, 3, 1, 1)), "w2": randn(rng, (4, 2, 3, 3))}
    run(nodes, {"x": (1, 3, 3, 4)}, {"y": None}, inits)


@pytest.mark.parametrize("where", QEMU)
def test_space_to_depth(where):
    run([node("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": (1, 5, 6, 4)}, {"y": None})
    run([node("SpaceToDepth", ["x"], ["y"], blocksize=3)], {"x": (2, 2, 3, 9)}, {"y": None})


def test_space_to_depth_crd():
    """Mode CRD (ONNX opset 28; onnxruntime lacks it): against onnx.reference."""
    graph = helper.make_graph([node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode="CRD")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    x = randn(np.random.default_rng(4), (1, 3, 4, 6))
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(aot.run(model, inputs={"x": x}, target="host")["y"], want)


# --------------------------------------------------------------------------- Expand, Tile

@pytest.mark.parametrize("where", QEMU)
def test_expand(where):
    run([node("Expand", ["x", "shape"], ["y"])], {"x": (3, 1, 5)}, {"y": None}, {"shape": i64([2, 1, 3, 4, 5])})
    run([node("Expand", ["x", "shape"], ["y"])], {"x": (1, 6)}, {"y": None}, {"shape": i64([4, 1])})


@pytest.mark.parametrize("where", QEMU)
def test_tile(where):
    run([node("Tile", ["x", "repeats"], ["y"])], {"x": (2, 3, 4)}, {"y": None}, {"repeats": i64([2, 1, 3])})
    run([node("Tile", ["x", "repeats"], ["y"])], {"x": (1, 3, 2, 5)}, {"y": None}, {"repeats": i64([1, 2, 2, 1])})


def test_expand_tile_after_conv():
    """Both follow an NHWC input (repeats remapped to channels-last)."""
    rng = np.random.default_rng(3)
    nodes = [node("Conv", ["x", "w"], ["a"], kernel_shape=[1, 1]),
             node("Tile", ["a", "repeats"], ["t"]),
             node("Expand", ["t", "shape"], ["y"])]
    inits = {"w": randn(rng, (5, 3, 1, 1)), "repeats": i64([1, 2, 1, 3]), "shape": i64([2, 1, 1, 1])}
    run(nodes, {"x": (1, 3, 4, 1)}, {"y": None}, inits)


# --------------------------------------------------------------------------- dilated pooling, LpPool

POOL_CASES = {
    "d2": ((1, 5, 9, 10), {"kernel_shape": [3, 3], "dilations": [2, 2]}),
    "d2_s2_p2": ((1, 3, 9, 8), {"kernel_shape": [3, 2], "dilations": [2, 3], "strides": [2, 1], "pads": [2, 1, 1, 1]}),
    "d3_c9": ((1, 9, 7, 7), {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 2, 1, 0]}),
    "d2_ceil": ((1, 4, 8, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
}


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_dilated_pool(op, case):
    shape, attrs = POOL_CASES[case]
    extra = [{}, {"count_include_pad": 1}] if op == "AveragePool" else [{}]
    for more in extra:
        run([node(op, ["x"], ["y"], **attrs, **more)], {"x": shape}, {"y": None}, opset=19)


@pytest.mark.parametrize("where", QEMU)
def test_dilated_max_pool_1d(where):
    run([node("MaxPool", ["x"], ["y"], kernel_shape=[3], dilations=[2], pads=[1, 2])], {"x": (1, 6, 11)},
        {"y": None}, opset=19)


LP_CASES = {
    "p2_3x3": ((1, 6, 7, 8), {"kernel_shape": [3, 3]}),
    "p1_s2_pads": ((1, 5, 8, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 1, 0, 1], "p": 1}),
    "p3_same": ((1, 3, 6, 5), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "p": 3}),
    "p2_dilated": ((1, 4, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 3]}),
}


@pytest.mark.parametrize("case", list(LP_CASES))
def test_lp_pool(case):
    shape, attrs = LP_CASES[case]
    run([node("LpPool", ["x"], ["y"], **attrs)], {"x": shape}, {"y": None}, opset=18)


@pytest.mark.parametrize("shape, p", [((1, 6, 7, 8), 2), ((2, 5, 9), 1), ((1, 3, 4, 5), 3), ((1, 4, 2, 3, 3), 2)])
def test_global_lp_pool(shape, p):
    run([node("GlobalLpPool", ["x"], ["y"], p=p)], {"x": shape}, {"y": None}, opset=18)


@pytest.mark.parametrize("where", QEMU)
def test_lp_pool_1d(where):
    run([node("LpPool", ["x"], ["y"], kernel_shape=[3], strides=[2], p=2)], {"x": (1, 9, 10)}, {"y": None}, opset=18)


# --------------------------------------------------------------------------- detector-style models

def _conv(name, x, y, c_in, c_out, k, rng, stride=1, relu=True):
    """A Conv (pads k//2) with random weights and bias, optionally followed by Relu."""
    inits = {f"{name}_w": randn(rng, (c_out, c_in, k, k), 1 / math.sqrt(c_in * k * k)),
             f"{name}_b": randn(rng, (c_out,), 0.1)}
    out = f"{name}_pre" if relu else y
    nodes = [helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [out], name=name, kernel_shape=[k, k],
                              strides=[stride, stride], pads=[k // 2] * 4)]
    if relu:
        nodes.append(helper.make_node("Relu", [out], [y], name=f"{name}_relu"))
    return nodes, inits


def yolo_head_model(size: int = 16, reg: int = 16, classes: int = 3):
    """Two feature maps; the coarse one upsampled x2 (nearest) and concatenated with the fine one; a conv
    head; (1, 4*reg + classes, N) split into box and class parts; DFL (softmax over the reg bins, expectation
    by a 1x1 conv with arange weights); sigmoid on the classes; both concatenated."""
    rng = np.random.default_rng(7)
    nodes, inits = [], {}
    for part in (_conv("c1", "x", "f1", 3, 8, 3, rng, stride=2), _conv("c2", "f1", "f2", 8, 16, 3, rng, stride=2),
                 _conv("head", "cat", "raw", 24, 4 * reg + classes, 1, rng, relu=False)):
        nodes += part[0]
        inits.update(part[1])
    n = (size // 2) ** 2
    inits.update({"scales": f32([1, 1, 2, 2]), "shape_flat": i64([1, 4 * reg + classes, n]),
                  "split": i64([4 * reg, classes]), "shape_bins": i64([1, 4, reg, n]), "shape_box": i64([1, 4, n]),
                  "dfl_w": np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1)})
    nodes.insert(len(nodes) - 1, helper.make_node("Resize", ["f2", "", "scales"], ["up"], name="up", mode="nearest"))
    nodes.insert(len(nodes) - 1, helper.make_node("Concat", ["up", "f1"], ["cat"], name="cat", axis=1))
    nodes += [
        helper.make_node("Reshape", ["raw", "shape_flat"], ["flat"], name="flat"),
        helper.make_node("Split", ["flat", "split"], ["box", "cls"], name="split", axis=1),
        helper.make_node("Reshape", ["box", "shape_bins"], ["bins"], name="bins"),
        helper.make_node("Transpose", ["bins"], ["bins_t"], name="bins_t", perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["bins_t"], ["prob"], name="prob", axis=1),
        helper.make_node("Conv", ["prob", "dfl_w"], ["dist"], name="dfl", kernel_shape=[1, 1]),
        helper.make_node("Reshape", ["dist", "shape_box"], ["boxes"], name="boxes"),
        helper.make_node("Sigmoid", ["cls"], ["scores"], name="scores"),
        helper.make_node("Concat", ["boxes", "scores"], ["y"], name="out", axis=1),
    ]
    return make_model(nodes, {"x": (1, 3, size, size)}, {"y": (1, 4 + classes, n)}, inits, opset=17)


def dbnet_model(size: int = 32):
    """A small conv backbone (strides 2, 4, 8), a top-down FPN (1x1 laterals, Resize x2 linear half_pixel,
    Add), a 3x3 fuse conv, two stride-2 ConvTranspose heads (to twice the input size), Sigmoid."""
    rng = np.random.default_rng(11)
    nodes, inits = [], {}
    parts = [_conv("c1", "x", "c1", 3, 8, 3, rng, stride=2), _conv("c2", "c1", "c2", 8, 16, 3, rng, stride=2),
             _conv("c3", "c2", "c3", 16, 16, 3, rng, stride=2),
             _conv("l3", "c3", "in3", 16, 8, 1, rng, relu=False), _conv("l2", "c2", "in2", 16, 8, 1, rng, relu=False),
             _conv("l1", "c1", "in1", 8, 8, 1, rng, relu=False)]
    for part in parts:
        nodes += part[0]
        inits.update(part[1])
    inits["scales"] = f32([1, 1, 2, 2])
    nodes += [helper.make_node("Resize", ["in3", "", "scales"], ["up3"], name="up3", mode="linear"),
              helper.make_node("Add", ["in2", "up3"], ["out2"], name="add2"),
              helper.make_node("Resize", ["out2", "", "scales"], ["up2"], name="up2", mode="linear",
                               coordinate_transformation_mode="half_pixel"),
              helper.make_node("Add", ["in1", "up2"], ["out1"], name="add1")]
    fuse_nodes, fuse_inits = _conv("fuse", "out1", "p", 8, 8, 3, rng)
    nodes += fuse_nodes
    inits.update(fuse_inits)
    inits.update({"t1_w": randn(rng, (8, 4, 2, 2), 0.3), "t1_b": randn(rng, (4,), 0.1),
                  "t2_w": randn(rng, (4, 1, 2, 2), 0.3), "t2_b": randn(rng, (1,), 0.1)})
    nodes += [helper.make_node("ConvTranspose", ["p", "t1_w", "t1_b"], ["t1"], name="t1", kernel_shape=[2, 2],
                               strides=[2, 2]),
              helper.make_node("Relu", ["t1"], ["t1r"], name="t1_relu"),
              helper.make_node("ConvTranspose", ["t1r", "t2_w", "t2_b"], ["t2"], name="t2", kernel_shape=[2, 2],
                               strides=[2, 2]),
              helper.make_node("Sigmoid", ["t2"], ["y"], name="prob")]
    return make_model(nodes, {"x": (1, 3, size, size)}, {"y": (1, 1, 2 * size, 2 * size)}, inits, opset=13)


@pytest.mark.parametrize("where", QEMU)
def test_yolo_head_model(where):
    model = yolo_head_model()
    x = randn(np.random.default_rng(0), (1, 3, 16, 16))
    out = assert_matches_onnxruntime(model, {"x": x}, tol=1e-4)["y"]
    assert np.all((out[:, 4:] > 0) & (out[:, 4:] < 1)) and np.all((out[:, :4] >= 0) & (out[:, :4] <= 15))


@pytest.mark.parametrize("where", QEMU)
def test_dbnet_model(where):
    model = dbnet_model()
    x = randn(np.random.default_rng(0), (1, 3, 32, 32))
    assert_matches_onnxruntime(model, {"x": x}, tol=1e-4)
