"""Shared test helpers: build tiny ONNX models and compare aot against onnxruntime."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

Shape = Sequence[int]


TARGET = "host"


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Shape],
    outputs: Mapping[str, Shape | None],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """Build (and check) a float32 model from nodes, graph inputs/outputs and initializers.

    An output shape of None means "whatever ONNX shape inference says" (it is filled in).
    Initializers keep the dtype of the numpy array (use int64 for shapes/axes/pads).
    """
    initializers = initializers or {}
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        list(nodes),
        "aot_test",
        [helper.make_tensor_value_info(n, f32, list(s)) for n, s in inputs.items()],
        [
            helper.make_tensor_value_info(n, f32, None if s is None else list(s))
            for n, s in outputs.items()
        ],
        initializer=[
            numpy_helper.from_array(np.asarray(a), name=n) for n, a in initializers.items()
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="aot-tests"
    )
    model.ir_version = 8
    if any(s is None for s in outputs.values()):
        # the checker requires a shape on graph outputs: fill unknown ones by shape inference
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for out, inf in zip(model.graph.output, inferred.graph.output):
            if outputs[out.name] is None:
                out.type.CopyFrom(inf.type)
    onnx.checker.check_model(model, full_check=True)
    return model


def make_typed_model(nodes, inputs, outputs, opset: int = 17, inits=(), ir_version: int = 10) -> onnx.ModelProto:
    """A model of any element types: inputs and outputs as (name, TensorProto type, shape) triples (a shape
    may be None or hold dimension names), initializers as (name, array) pairs. Not checked here: a test
    of a refusal may build what the checker would take but aot should refuse."""
    graph = helper.make_graph(nodes, "aot_test", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"expected onnx.ModelProto or a path, got {type(model).__name__}")


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal values for every graph input that is not an initializer."""
    model = _load(model)
    rng = np.random.default_rng(seed)
    init_names = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        ttype = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in ttype.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def onnxruntime_outputs(model, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the model with onnxruntime (CPU, no graph optimizations); outputs keyed by name."""
    import onnxruntime as ort

    model = _load(model)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, {k: np.asarray(v) for k, v in inputs.items()})
    return dict(zip(names, results))


def assert_matches_onnxruntime(
    model,
    inputs: Mapping[str, np.ndarray] | None = None,
    tol: float = 1e-4,
    target: str | None = None,
) -> dict[str, np.ndarray]:
    """Run aot and onnxruntime on the same inputs and compare every output.

    `target` defaults to TARGET, which a test module may switch (see test_ops.py).

    Error bound per output: max|aot - ort| <= tol * max(1e-6, max|ort|).
    Returns the aot outputs.
    """
    import aot

    proto = _load(model)
    if inputs is None:
        inputs = random_inputs(proto)
    inputs = {k: np.array(v, copy=True) for k, v in inputs.items()}

    expected = onnxruntime_outputs(proto, inputs)
    got = aot.run(model, inputs={k: v.copy() for k, v in inputs.items()}, target=target or TARGET)

    names = [o.name for o in proto.graph.output]
    assert list(got) == names, f"aot returned outputs {list(got)}, expected {names} (graph order)"
    for name in names:
        ref = np.asarray(expected[name])
        out = np.asarray(got[name])
        assert out.shape == ref.shape, (
            f"output {name!r}: aot shape {out.shape} != onnxruntime shape {ref.shape}"
        )
        if ref.size == 0:
            continue
        ref64 = ref.astype(np.float64)
        scale = float(np.max(np.abs(ref64)))
        err = float(np.max(np.abs(out.astype(np.float64) - ref64)))
        bound = tol * max(1e-6, scale)
        # written so that NaN in either side fails
        assert err <= bound, (
            f"output {name!r}: max abs error {err:.3g} > {bound:.3g} "
            f"(scale max|ort| = {scale:.3g}, tol = {tol:g}, shape {ref.shape})"
        )
    return got
