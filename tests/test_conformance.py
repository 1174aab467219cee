"""The ONNX backend node tests (benchmarks/conformance.py): a fixed subset that passes today, one case per
test, the selection rule (expanded variants included unless asked), and the two figures (passed with
the freezing rule, passed with every input fed at run time). The cases are generated locally by the
installed onnx package."""

from functools import cache

import conformance
import numpy as np
import onnx
import pytest

# Cases that pass, spanning the op families aot compiles (some only with their parameters frozen, as the
# script does when a build with every input fed at run time is refused).
PASSING = [
    "test_abs", "test_add_bcast", "test_sub", "test_mul_bcast", "test_div_bcast", "test_neg", "test_reciprocal",
    "test_max_two_inputs", "test_relu", "test_leakyrelu", "test_sigmoid", "test_tanh", "test_hardsigmoid",
    "test_hardswish", "test_erf", "test_exp", "test_log", "test_clip_default_inbounds", "test_dropout_default_ratio",
    "test_averagepool_1d_default", "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_same_lower",
    "test_maxpool_2d_ceil", "test_maxpool_2d_same_upper", "test_globalaveragepool",
    "test_globalmaxpool_precomputed", "test_softmax_axis_0", "test_softmax_large_number",
    "test_logsoftmax_negative_axis", "test_reduce_max_default_axes_keepdims_random",
    "test_reduce_min_default_axes_keepdims_example", "test_gemm_all_attributes", "test_gemm_transposeA",
    "test_gemm_default_single_elem_vector_bias", "test_matmul_3d", "test_matmul_bcast", "test_flatten_negative_axis2",
    "test_transpose_all_permutations_4", "test_concat_3d_axis_negative_2", "test_split_1d_uneven_split_opset18",
    "test_conv_with_strides_padding", "test_batchnorm_example_training_mode", "test_layer_normalization_4d_axis1",
    "test_instancenorm_example", "test_lstm_with_initial_bias", "test_gru_defaults", "test_rnn_seq_length",
    "test_resize_upsample_scales_nearest", "test_resize_downsample_scales_linear", "test_convtranspose_pads",
    "test_gather_1", "test_scatternd", "test_gridsample", "test_dft", "test_pow", "test_sqrt",
    "test_reshape_reordered_all_dims", "test_slice_neg_steps", "test_nllloss_NCd1",
    "test_depthtospace_crd_mode_example",
    "test_roialign_aligned_true", "test_tfidfvectorizer_tf_batch_onlybigrams_skip5", "test_hannwindow", "test_det_nd",
    "test_onehot_with_axis",
]

# Cases that pass with every input fed at run time, as the test gives them (no freezing).
PASSING_UNFROZEN = ["test_relu", "test_softmax_axis_0_expanded", "test_convtranspose_pads", "test_lstm_with_peepholes",
                    "test_gru_with_initial_bias", "test_rnn_seq_length", "test_layer_normalization_4d_axis1_expanded",
                    "test_resize_downsample_scales_linear", "test_resize_tf_crop_and_resize",
                    # function bodies that once gave wrong numbers: a scalar Constant seen through CastLike
                    # was read as 0 (views of constants), a one-element Pad value, an empty output
                    "test_leakyrelu_expanded", "test_elu_expanded_ver18", "test_selu_default_expanded_ver18",
                    "test_celu_expanded", "test_hardsigmoid_expanded_ver18", "test_shrink_soft_expanded_ver18",
                    "test_softplus_expanded_ver18", "test_softsign_expanded_ver18",
                    "test_thresholdedrelu_expanded_ver18",
                    "test_gelu_tanh_1_expanded", "test_swish_expanded", "test_attention_4d_attn_mask_expanded",
                    "test_attention_4d_diff_heads_mask4d_padded_kv_expanded",
                    "test_causal_conv_with_state_kernel_size_one_expanded",
                    # axes and axis fed at run time where the shapes allow several: each computed, one selected
                    "test_dft", "test_dft_axis", "test_dft_rfft", "test_dft_irfft",
                    *(f"test_reduce_{fn}_do_not_keepdims_{data}{expanded}"
                      for fn in ("l1", "l2", "max", "mean", "min", "prod", "sum", "sum_square")
                      for data in ("example", "random")
                      for expanded in (("", "_expanded") if fn in ("l1", "l2", "sum_square") else ("",))),
                    # function bodies whose ReduceSum onnx's inference leaves without a shape (fed axes)
                    "test_reduce_l2_keep_dims_example_expanded",
                    "test_reduce_l2_negative_axes_keep_dims_random_expanded",
                    "test_reduce_l2_empty_set_expanded", "test_reduce_log_sum_asc_axes_expanded",
                    "test_reduce_log_sum_negative_axes_expanded", "test_reduce_log_sum_empty_set_expanded",
                    "test_reduce_l2_keep_dims_random_expanded", "test_reduce_log_sum_desc_axes_expanded",
                    # windows whose size is fed at run time: the declared length decides it
                    "test_hannwindow", "test_blackmanwindow_symmetric",
                    # Range fed at run time; a window's expanded body, through Range
                    "test_range_float_type_positive_delta", "test_hammingwindow_symmetric_expanded",
                    # ONNX's Range body: a Loop whose run-time trip count the declared output's length gives
                    "test_range_float_type_positive_delta_expanded", "test_constantofshape_float_ones",
                    # integer parameters fed at run time with the output's shape declared: what the shape
                    # decides is taken from it (Tile, Expand, OneHot), the rest read at run time (Slice, Pad)
                    "test_tile", "test_tile_precomputed", "test_expand_dim_changed", "test_expand_dim_unchanged",
                    "test_onehot_with_axis", "test_onehot_with_negative_axis", "test_onehot_negative_indices",
                    "test_onehot_out_of_range_indices", "test_slice", "test_slice_default_axes",
                    "test_slice_default_steps", "test_slice_end_out_of_bounds", "test_slice_neg",
                    "test_slice_neg_steps", "test_slice_negative_axes", "test_constant_pad", "test_constant_pad_axes",
                    "test_constant_pad_negative_axes"]

# The selection's size for the onnx versions it was counted with: (with expanded variants, without).
SELECTED = {"1.23.2": (971, 618)}


@cache
def selection(expanded: bool = True) -> tuple[list[conformance.Case], dict[str, int]]:
    cases, removed = conformance.select(expanded)
    return cases, dict(removed)


@cache
def case_by_name() -> dict[str, conformance.Case]:
    return {c.name: c for c in selection()[0]}


@pytest.mark.parametrize("name", PASSING)
def test_case_passes(name):
    result = conformance.run_case(case_by_name()[name])
    assert result.passed, f"{name} ({result.op}): {result.status}: {result.message} (max abs error {result.max_abs})"


@pytest.mark.parametrize("name", PASSING_UNFROZEN)
def test_case_passes_unfrozen(name):
    result = conformance.run_case(case_by_name()[name])
    assert result.passed_unfrozen and result.frozen == () and result.unfrozen == "", result


def test_a_case_passing_only_frozen_records_why_it_failed_unfrozen():
    """test_slice_start_out_of_bounds feeds its starts at run time and declares an empty output, whose size
    0 the frontend reads as an exporter's unknown dimension: a shape it cannot tell, refused; frozen, it
    passes. It counts in the figure with freezing only."""
    result = conformance.run_case(case_by_name()["test_slice_start_out_of_bounds"])
    assert result.passed and not result.passed_unfrozen and "starts" in result.frozen, result
    assert result.unfrozen.startswith("refused: "), result.unfrozen
    assert conformance.reason_unfrozen(result).startswith("refused: tensor 'y'"), result.unfrozen


@pytest.mark.parametrize("expanded", [True, False])
def test_selection_rule(expanded):
    cases, removed = selection(expanded)
    declared = conformance.declared_ops(conformance.onnx_cases())
    names = [c.name for c in cases]
    assert names == sorted(set(names))
    assert len(cases) + sum(removed.values()) == len(conformance.onnx_cases())
    if onnx.__version__ in SELECTED:
        assert len(cases) == SELECTED[onnx.__version__][0 if expanded else 1], removed
    for case in cases:
        graph = case.model.graph
        if conformance.EXPANDED.search(case.name):      # counted under the op of the test it expands
            assert expanded, case.name
            assert case.op == declared[conformance.EXPANDED.sub("", case.name)], case.name
            assert all(n.domain in ("", "ai.onnx") and conformance.op_at_opset(n.op_type, 17)
                       for n in graph.node), case.name
        else:
            assert [n.op_type for n in graph.node] == [case.op], case.name
            assert conformance.op_at_opset(case.op, 17) and graph.node[0].domain in ("", "ai.onnx"), case.name
        assert conformance.float_tensors(graph) and conformance.static_shapes(graph), case.name
        assert all(len(inputs) == len(graph.input) and len(outputs) == len(graph.output)
                   for inputs, outputs in case.data_sets), case.name
    # integer auxiliary inputs count; integer outputs and deprecated ops do not; expanded variants unless left out
    assert {"test_reshape_reordered_all_dims", "test_gather_0", "test_slice"} <= set(names)
    assert not {"test_argmax_default_axis_example", "test_upsample_nearest", "test_where_example"} & set(names)
    assert ("test_softmax_axis_0_expanded" in names) == expanded
    # the body of an op newer than opset 17, made of older ops, is a graph users' exporters emit
    assert ("test_attention_4d_diff_heads_mask4d_padded_kv_expanded" in names) == expanded
    assert set(PASSING) <= set(names)
    assert not expanded or set(PASSING_UNFROZEN) <= set(names)


def test_compare_follows_assert_allclose():
    expected = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert conformance.compare(expected.copy(), expected, rtol=1e-3, atol=1e-7) == ("", None)
    within = expected + np.array([1e-3, 0, 0, 0], np.float32)
    assert conformance.compare(within, expected, rtol=1e-3, atol=1e-7)[0] == ""
    off = expected + np.array([0, 0, 0, 0.5], np.float32)
    assert conformance.compare(off, expected, rtol=1e-3, atol=1e-7) == ("1 of 4 values differ", 0.5)
    nan = np.array([1.0, 0.0, np.inf, -2.0], np.float32)
    assert conformance.compare(nan, expected, rtol=1e-3, atol=1e-7)[1] == np.inf
    assert "dtype" in conformance.compare(expected.astype(np.float64), expected, 1e-3, 1e-7)[0]
    assert "shape" in conformance.compare(expected[:3], expected, 1e-3, 1e-7)[0]
    assert conformance.compare(None, expected, 1e-3, 1e-7)[0] == "output missing"


def test_failures_are_results_not_exceptions():
    refused = conformance.run_case(case_by_name()["test_bernoulli_seed"])
    assert refused.status == "refused" and "Bernoulli" in refused.message
