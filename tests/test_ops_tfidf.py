"""TfIdfVectorizer against onnxruntime: every mode, n-gram lengths and skips, one row or a batch,
int32 and int64 tokens."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot

POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7], ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6])


def _model(shape, dtype, mode, min_gram, max_gram, skip, weights=None):
    attrs = dict(POOL, mode=mode, min_gram_length=min_gram, max_gram_length=max_gram, max_skip_count=skip)
    if weights is not None:
        attrs["weights"] = weights
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attrs)
    out = [7] if len(shape) == 1 else [shape[0], 7]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mode, weights", [("TF", None), ("IDF", None), ("IDF", [0.5] * 7),
                                           ("TFIDF", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])])
@pytest.mark.parametrize("grams, skip", [((1, 1), 0), ((2, 2), 3), ((1, 2), 2)])
@pytest.mark.parametrize("shape, dtype", [((12,), TensorProto.INT64), ((3, 10), TensorProto.INT32)])
def test_tfidf(mode, weights, grams, skip, shape, dtype):
    tokens = np.random.default_rng(3).integers(2, 9, shape).astype(np.int64 if dtype == TensorProto.INT64
                                                                     else np.int32)
    result = aot.check(_model(shape, dtype, mode, *grams, skip, weights), inputs={"x": tokens})
    assert result.ok, result.comparisons


def test_string_pools_are_refused():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="words", mode="TF", min_gram_length=1,
                            max_gram_length=1, max_skip_count=0, pool_strings=["a", "b"], ngram_counts=[0],
                            ngram_indexes=[0, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(aot.AotError, match="node 'words'.*string pools"):
        aot.build(model, out_dir=None)
