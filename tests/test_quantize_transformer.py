"""int8 transformers: `aot quantize` of an encoder as PyTorch exports one (token ids and a padding mask in,
an embedding table, (1, tokens, hidden) products by constant weights, attention whose padded positions are
-inf before the softmax), compiled to integer kernels and compared with onnxruntime on the quantized model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_quantized import DOT_INSTRUCTION, assert_within_one_step, integer_ops

import aot
from aot.quantize import quantize

VOCAB, TOKENS, HIDDEN, HEADS, FFN = 50, 8, 32, 2, 64
PADDED = 3      # the last tokens of each sample are padding (mask 0)


def encoder() -> onnx.ModelProto:
    """One BERT layer as the TorchScript exporter writes it: Gather embeddings, LayerNormalization, Q/K/V
    MatMul + Add, heads by Reshape/Transpose, Where(mask, scores, -inf), Softmax, an Erf GELU."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def const(name, array):
        inits.append(onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name, *shape, scale=0.2):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def dense(x, name, n_in, n_out):
        return node("Add", [node("MatMul", [x, weight(f"{name}.w", n_in, n_out)], f"{name}.mm"),
                            weight(f"{name}.b", n_out, scale=0.1)], f"{name}.add")

    def norm(x, name):
        return node("LayerNormalization", [x, const(f"{name}.g", np.ones(HIDDEN, np.float32)),
                                           const(f"{name}.beta", np.zeros(HIDDEN, np.float32))], name, axis=-1,
                    epsilon=1e-12)

    emb = node("Gather", [weight("word_embeddings", VOCAB, HIDDEN, scale=1.0), "input_ids"], "embed")
    x = norm(node("Add", [emb, weight("position_embeddings", 1, TOKENS, HIDDEN, scale=0.5)], "embed.pos"), "ln0")
    heads = const("heads_shape", np.array([1, TOKENS, HEADS, HIDDEN // HEADS], np.int64))

    def split(t, name, perm):
        return node("Transpose", [node("Reshape", [t, heads], f"{name}.heads")], f"{name}.t", perm=perm)

    q = split(dense(x, "query", HIDDEN, HIDDEN), "q", [0, 2, 1, 3])
    k = split(dense(x, "key", HIDDEN, HIDDEN), "k", [0, 2, 3, 1])
    v = split(dense(x, "value", HIDDEN, HIDDEN), "v", [0, 2, 1, 3])
    scores = node("Mul", [node("MatMul", [q, k], "qk"), const("scale", np.float32(1 / np.sqrt(HIDDEN // HEADS)))],
                  "scores")
    keep = node("Cast", [node("Unsqueeze", ["attention_mask", const("mask_axes", np.array([1, 2], np.int64))],
                              "mask4")], "keep", to=TensorProto.BOOL)
    masked = node("Where", [keep, scores, const("minus_inf", np.array(-np.inf, np.float32))], "masked")
    probs = node("Softmax", [masked], "probs", axis=-1)
    context = node("Transpose", [node("MatMul", [probs, v], "pv")], "context.t", perm=[0, 2, 1, 3])
    context = node("Reshape", [context, const("hidden_shape", np.array([1, TOKENS, HIDDEN], np.int64))], "context")
    x = norm(node("Add", [dense(context, "attn_out", HIDDEN, HIDDEN), x], "residual1"), "ln1")
    h = dense(x, "ffn1", HIDDEN, FFN)
    erf = node("Erf", [node("Div", [h, const("sqrt2", np.float32(np.sqrt(2)))], "gelu.div")], "gelu.erf")
    gelu = node("Mul", [node("Mul", [h, node("Add", [erf, const("one", np.float32(1))], "gelu.add")], "gelu.mul"),
                        const("half", np.float32(0.5))], "gelu")
    y = norm(node("Add", [dense(gelu, "ffn2", FFN, HIDDEN), x], "residual2"), "last_hidden_state")
    graph = helper.make_graph(nodes, "encoder",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, TOKENS]),
                               helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, TOKENS])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, TOKENS, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def tokens(count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((count, TOKENS), np.int64)
    mask[:, TOKENS - PADDED:] = 0
    return {"input_ids": rng.integers(0, VOCAB, (count, TOKENS)).astype(np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    d = tmp_path_factory.mktemp("encoder")
    onnx.save(encoder(), d / "encoder.onnx")
    np.savez(d / "calib.npz", **tokens(16, 1))
    report = quantize(d / "encoder.onnx", d / "encoder_int8.onnx", calibration=d / "calib.npz")
    return d, report


def test_the_padding_mask_stays_in_float_and_the_rest_quantizes(quantized):
    """Token ids and masks calibrate as the integers they are; the -inf of the padded positions has no int8
    scale (onnxruntime's quantizer would write an infinite one), so the nodes that carry it stay in float,
    the report says which, and every scale of the result is finite."""
    d, report = quantized
    assert {"masked", "probs"} <= set(report.unbounded), report.unbounded
    saved = json.loads((d / "encoder_int8.quantize_report.json").read_text())
    assert "masked" in saved["unbounded"]
    assert "attention masks" in (d / "encoder_int8.quantize_report.txt").read_text()
    model = onnx.load(d / "encoder_int8.onnx")
    scales = {n.input[1] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    values = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name in scales]
    assert values and all(np.all(np.isfinite(v)) and np.all(v > 0) for v in values)
    (out,) = report.outputs
    assert out.sqnr_db > 20, out


def test_products_and_the_embedding_table_run_on_integers(quantized):
    """The six products by constant weights (on (1, tokens, hidden) tensors) are integer Gemms, attention's
    two products of computed tensors integer MatMuls, and the embedding table is gathered as its int8
    codes: weights in about a quarter of the float bytes."""
    d, _ = quantized
    counts = integer_ops(str(d / "encoder_int8.onnx"))
    assert counts.get("Gemm") == 6 and counts.get("MatMul") == 2, counts
    program = aot.build(str(d / "encoder_int8.onnx"), out_dir=None).program
    table = [c for c in program.calls if c.node.op == "Gather" and c.node.name == "embed"]
    assert table and program.graph.values[table[0].node.inputs[0]].dtype == "int8"
    float_bytes = aot.build(str(d / "encoder.onnx"), out_dir=None).metadata["memory"]["weights"]
    int8_bytes = aot.build(str(d / "encoder_int8.onnx"), out_dir=None).metadata["memory"]["weights"]
    assert int8_bytes < 0.4 * float_bytes, (int8_bytes, float_bytes)


def test_the_quantized_encoder_matches_onnxruntime_on_the_host(quantized):
    d, _ = quantized
    assert_within_one_step(str(d / "encoder_int8.onnx"))


@pytest.mark.parametrize("target", ["x86-64-avx512-vnni", "aarch64-dotprod", "cortex-m55"])
def test_the_encoder_products_use_the_targets_dot_products(quantized, target, tmp_path):
    from aot.codegen.llvm import ModuleBuilder
    from aot.target import get_target

    d, _ = quantized
    artifact = aot.build(str(d / "encoder_int8.onnx"), target=target, out_dir=tmp_path / "b")
    mb = ModuleBuilder("m", get_target(target))
    for call in artifact.program.calls:
        if call.node.op == "Gemm":
            mb.add_kernel(call.kernel)
    assert DOT_INSTRUCTION[target] in mb.emit_assembly()


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["aarch64-dotprod", "cortex-m55", "cortex-m0plus"])
def test_the_quantized_encoder_matches_onnxruntime_on_arm(quantized, target):
    """Helium and the dot product; the Cortex-M0+ (no FPU) requantizes by fixed-point multipliers."""
    d, _ = quantized
    assert_within_one_step(str(d / "encoder_int8.onnx"), target=target)
