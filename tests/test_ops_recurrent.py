"""LSTM, GRU and RNN against onnxruntime: directions, optional inputs and outputs, activations, clip,
peepholes, input_forget, linear_before_reset, sequence_lens, layout 1, edge shapes; refusals; and the
recurrent example models (keyword spotters, CRNN). Representative tests also run under qemu."""

from __future__ import annotations

import json

import numpy as np
import onnx
import oracle
import pytest
import recurrent_models
from onnx import helper, numpy_helper
from oracle import assert_matches_onnxruntime, make_model, onnxruntime_outputs

import aot
from aot.errors import UnsupportedOpError

CROSS = ["host", pytest.param("aarch64", marks=pytest.mark.qemu), pytest.param("cortex-m4", marks=pytest.mark.qemu)]
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}


# Host by default; tests parametrized over CROSS (indirectly) also run on AArch64 and Cortex-M4.
@pytest.fixture(autouse=True)
def target(request, monkeypatch):
    name = getattr(request, "param", "host")
    monkeypatch.setattr(oracle, "TARGET", name)
    return name


def recurrent_model(op: str, seq: int = 4, batch: int = 1, inp: int = 5, hidden: int = 6,
                    direction: str = "forward", outputs: tuple[str, ...] | None = None, bias: bool = True,
                    initial: str | None = None, peepholes: bool = False, lens: list[int] | None = None,
                    lens_input: bool = False, layout: int = 0, opset: int = 14, seed: int = 0, **attrs
                    ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One LSTM/GRU/RNN node with random constant weights; `initial` is None, "input" (initial_h/c fed
    at run time) or "const"; `outputs` names the ONNX outputs kept ('' drops one). Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    inits = {"W": (rng.standard_normal((dirs, gates, inp)) * 0.6).astype(np.float32),
             "R": (rng.standard_normal((dirs, gates, hidden)) * 0.6).astype(np.float32)}
    if bias:
        inits["B"] = (rng.standard_normal((dirs, 2 * gates)) * 0.5).astype(np.float32)
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    graph_inputs = {"X": x_shape}
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    ins = ["X", "W", "R", "B" if bias else "", "", "", ""]
    if lens is not None:
        ins[4] = "L"
        if lens_input:
            feeds["L"] = np.asarray(lens, np.int32)
        else:
            inits["L"] = np.asarray(lens, np.int32)
    states = ["initial_h", "initial_c"] if op == "LSTM" else ["initial_h"]
    for i, name in enumerate(states if initial else ()):
        ins[5 + i] = name
        value = (rng.standard_normal(state) * 0.8).astype(np.float32)
        if initial == "input":
            graph_inputs[name], feeds[name] = state, value
        else:
            inits[name] = value
    if peepholes:
        ins.append("P")
        inits["P"] = (rng.standard_normal((dirs, 3 * hidden)) * 0.5).astype(np.float32)
    while ins and not ins[-1]:
        ins.pop()
    if layout:
        attrs["layout"] = layout
    outs = list(outputs if outputs is not None else OUTPUTS[op])
    node = helper.make_node(op, ins, outs, name=f"{op.lower()}0", hidden_size=hidden, direction=direction, **attrs)
    model = _model(node, graph_inputs, [o for o in outs if o], inits, opset, lens_input)
    return model, feeds


def _model(node, graph_inputs, outputs, inits, opset, lens_input):
    """make_model, but with an int32 sequence_lens graph input when asked."""
    if not lens_input:
        return make_model([node], graph_inputs, {o: None for o in outputs}, inits, opset=opset)
    f32, i32 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32
    batch = graph_inputs["X"][1]
    graph = helper.make_graph(
        [node], "aot_test",
        [helper.make_tensor_value_info(n, f32, list(s)) for n, s in graph_inputs.items()]
        + [helper.make_tensor_value_info("L", i32, [batch])],
        [helper.make_tensor_value_info(o, f32, None) for o in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out, inf in zip(model.graph.output, inferred.graph.output):
        out.type.CopyFrom(inf.type)
    return model


def fed_at_run_time(model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: tuple[str, ...]
                    ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with the initializers `names` made graph inputs, and the feeds with their values."""
    feeds, keep = dict(feeds), []
    for tensor in model.graph.initializer:
        if tensor.name not in names:
            keep.append(tensor)
            continue
        value = numpy_helper.to_array(tensor)
        model.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(value.shape)))
        feeds[tensor.name] = value
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model, feeds


WEIGHTS = ("W", "R", "B", "P")


def check(op: str, tol: float = 1e-4, fed: tuple[str, ...] = (), **kwargs) -> dict[str, np.ndarray]:
    """One node against onnxruntime; the parameters named in `fed` (W, R, B, P, L) are graph inputs."""
    model, feeds = fed_at_run_time(*recurrent_model(op, **kwargs), fed)
    return assert_matches_onnxruntime(model, feeds, tol=tol)


# --------------------------------------------------------------------------- directions, shapes

@pytest.mark.parametrize("target", CROSS, indirect=True)
@pytest.mark.parametrize("op,direction", [("LSTM", "bidirectional"), ("GRU", "forward"), ("RNN", "reverse")])
def test_representative(op, direction):
    check(op, direction=direction, batch=2, hidden=7, initial="input")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", list(GATES))
def test_directions(op, direction):
    check(op, direction=direction)


# (seq, batch, input, hidden): seq 1, hidden below / not a multiple of / above the vector width, batch 2-3.
SHAPES = {"seq1": (1, 1, 3, 4), "hidden1": (3, 1, 2, 1), "hidden5_batch2": (5, 2, 4, 5),
          "hidden13_batch3": (3, 3, 7, 13), "hidden33": (3, 1, 6, 33), "input1": (6, 2, 1, 8)}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("op", list(GATES))
def test_edge_shapes(op, shape):
    seq, batch, inp, hidden = SHAPES[shape]
    check(op, seq=seq, batch=batch, inp=inp, hidden=hidden, direction="bidirectional")


@pytest.mark.parametrize("op", list(GATES))
def test_no_bias_constant_initial_state(op):
    check(op, bias=False, initial="const", batch=2, direction="reverse")


@pytest.mark.parametrize("op", list(GATES))
def test_bidirectional_with_initial_states(op):
    check(op, direction="bidirectional", initial="input", batch=2, hidden=9, peepholes=op == "LSTM")


@pytest.mark.parametrize("outputs", [("Y",), ("", "Y_h"), ("", "", "Y_c"), ("Y", "", "Y_c"), ("", "Y_h", "Y_c")],
                         ids=["y", "y_h", "y_c", "y_and_y_c", "states"])
def test_lstm_output_subsets(outputs):
    check("LSTM", outputs=outputs, batch=2, direction="bidirectional")


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_only_final_state(op):
    check(op, outputs=("", "Y_h"), batch=2)


@pytest.mark.parametrize("op,opset", [("LSTM", 7), ("GRU", 7), ("RNN", 7), ("LSTM", 13)])
def test_earlier_opsets(op, opset):
    check(op, opset=opset, direction="bidirectional")


# --------------------------------------------------------------------------- attributes

@pytest.mark.parametrize("op", list(GATES))
def test_clip(op):
    check(op, clip=0.7, direction="bidirectional")


def test_lstm_peepholes():
    check("LSTM", peepholes=True, initial="input", batch=2)


def test_lstm_input_forget():
    check("LSTM", input_forget=1, peepholes=True, direction="bidirectional")


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(direction):
    check("GRU", linear_before_reset=1, direction=direction, initial="input", batch=2)


# RNN activations with their alpha/beta (the list is consumed by the activations that take them).
RNN_ACTS = {
    "Relu": ([], []), "Sigmoid": ([], []), "Tanh": ([], []), "Softsign": ([], []), "Softplus": ([], []),
    "LeakyRelu": ([0.2], []), "ThresholdedRelu": ([0.3], []), "Elu": ([0.7], []),
    "HardSigmoid": ([0.3], [0.4]), "Affine": ([0.5], [0.25]), "ScaledTanh": ([1.5], [0.7]),
}


@pytest.mark.parametrize("act", list(RNN_ACTS))
def test_rnn_activation(act):
    alpha, beta = RNN_ACTS[act]
    attrs = {"activations": [act]}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check("RNN", **attrs)


def test_lstm_activations_per_direction():
    check("LSTM", direction="bidirectional", activations=["HardSigmoid", "Tanh", "Relu", "Sigmoid", "Softsign", "Tanh"],
          activation_alpha=[0.25], activation_beta=[0.45])


def test_gru_activations():
    check("GRU", activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.3, 0.1], activation_beta=[0.6])


def test_default_activation_parameters():
    """HardSigmoid and LeakyRelu without alpha/beta take onnxruntime's defaults (0.2, 0.5; 0.01)."""
    check("GRU", activations=["HardSigmoid", "LeakyRelu"])


# --------------------------------------------------------------------------- sequence_lens

def test_sequence_lens_full_length():
    check("LSTM", seq=3, batch=2, lens=[3, 3])


@pytest.mark.parametrize("op", list(GATES))
def test_sequence_lens_masking(op):
    check(op, seq=5, batch=3, lens=[5, 2, 1], direction="bidirectional", initial="input")


def test_sequence_lens_zero_length():
    """A row of length 0: Y and the final states are zeros, whatever the initial state (as onnxruntime)."""
    got = check("LSTM", seq=3, batch=2, lens=[2, 0], initial="input")
    assert not np.any(got["Y_h"][:, 1]) and not np.any(got["Y"][:, :, 1])


@pytest.mark.parametrize("target", CROSS, indirect=True)
def test_sequence_lens_at_run_time(target):
    check("GRU", seq=4, batch=3, lens=[4, 1, 3], lens_input=True, direction="bidirectional")


# --------------------------------------------------------------------------- layout 1

@pytest.mark.parametrize("fed", [(), WEIGHTS], ids=["constant", "fed"])
@pytest.mark.parametrize("op", list(GATES))
def test_layout_batch_first(op, fed):
    """layout 1 (batch first), which onnxruntime's CPU kernels refuse: compared with onnxruntime on the
    same node in layout 0, the inputs and outputs transposed (the weights, when fed, as they are)."""
    model1, feeds1 = fed_at_run_time(*recurrent_model(op, layout=1, batch=2, seq=3, direction="bidirectional",
                                                      initial="input"), fed)
    model0, _ = fed_at_run_time(*recurrent_model(op, layout=0, batch=2, seq=3, direction="bidirectional",
                                                 initial="input"), fed)
    feeds0 = {name: value if name in fed else np.ascontiguousarray(value.transpose(1, 0, 2))
              for name, value in feeds1.items()}
    want = onnxruntime_outputs(model0, feeds0)
    got = aot.run(model1, inputs=feeds1, target=oracle.TARGET)
    assert got["Y"].shape == want["Y"].transpose(2, 0, 1, 3).shape
    np.testing.assert_allclose(got["Y"], want["Y"].transpose(2, 0, 1, 3), atol=1e-5, rtol=1e-4)
    for name in OUTPUTS[op][1:]:
        np.testing.assert_allclose(got[name], want[name].transpose(1, 0, 2), atol=1e-5, rtol=1e-4)


def test_onnx_node_tests_with_frozen_weights():
    """ONNX's own LSTM/GRU/RNN node tests (layout 1 among them) against their expected outputs, with the
    operands aot needs as constants (W, R, B, sequence_lens, P), which the tests feed as inputs, frozen."""
    import conformance

    cases = [c for c in conformance.onnx_cases() if c.model.graph.node[0].op_type in GATES
             and not c.name.endswith("_expanded")]
    assert len(cases) == 18
    for case in cases:
        node = case.model.graph.node[0]
        constant = set(node.input[1:5]) | set(node.input[7:8])
        inputs, expected = case.data_sets[0]
        names = [vi.name for vi in case.model.graph.input]
        freeze = {n: v for n, v in zip(names, inputs) if n in constant}
        got = aot.run(case.model, inputs={n: v for n, v in zip(names, inputs) if n not in constant}, freeze=freeze)
        for value, want in zip(got.values(), expected):
            np.testing.assert_allclose(value, want, rtol=case.rtol, atol=case.atol, err_msg=case.name)


def test_onnx_node_tests_fed_at_run_time():
    """The same node tests with every operand fed at run time, as the tests give them."""
    import conformance

    cases = [c for c in conformance.onnx_cases() if c.model.graph.node[0].op_type in GATES
             and not c.name.endswith("_expanded")]
    for case in cases:
        inputs, expected = case.data_sets[0]
        names = [vi.name for vi in case.model.graph.input]
        got = aot.run(case.model, inputs=dict(zip(names, inputs)))
        for value, want in zip(got.values(), expected):
            np.testing.assert_allclose(value, want, rtol=case.rtol, atol=case.atol, err_msg=case.name)


# --------------------------------------------------------------------------- weights fed at run time

@pytest.mark.parametrize("target", CROSS, indirect=True)
@pytest.mark.parametrize("op,direction", [("LSTM", "bidirectional"), ("GRU", "reverse"), ("RNN", "forward")])
def test_weights_fed_representative(op, direction):
    check(op, fed=WEIGHTS, direction=direction, batch=2, hidden=7, initial="input", peepholes=op == "LSTM")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", list(GATES))
def test_weights_fed_directions(op, direction):
    check(op, fed=WEIGHTS, direction=direction, initial="const")


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("op", list(GATES))
def test_weights_fed_edge_shapes(op, shape):
    seq, batch, inp, hidden = SHAPES[shape]
    check(op, fed=WEIGHTS, seq=seq, batch=batch, inp=inp, hidden=hidden, direction="bidirectional")


@pytest.mark.parametrize("fed", [("W",), ("R",), ("B",), ("W", "B"), ("R", "B")])
@pytest.mark.parametrize("op", list(GATES))
def test_some_weights_fed(op, fed):
    """Constant and computed operands mixed in one node (packed and run-time panels in one product)."""
    check(op, fed=fed, batch=2, hidden=9, direction="bidirectional")


@pytest.mark.parametrize("op", list(GATES))
def test_weights_fed_no_bias_clip(op):
    check(op, fed=WEIGHTS, bias=False, clip=0.7, hidden=5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_weights_fed_gru_linear_before_reset(direction, lbr):
    check("GRU", fed=WEIGHTS, direction=direction, linear_before_reset=lbr, batch=2, hidden=11)


def test_weights_fed_lstm_peepholes_input_forget_activations():
    check("LSTM", fed=WEIGHTS, peepholes=True, input_forget=1, hidden=9, initial="input")
    check("LSTM", fed=WEIGHTS, direction="bidirectional", peepholes=True, hidden=5,
          activations=["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "Relu", "Tanh"],
          activation_alpha=[0.3], activation_beta=[0.4])
    check("RNN", fed=WEIGHTS, activations=["LeakyRelu"], activation_alpha=[0.2])


@pytest.mark.parametrize("op", list(GATES))
def test_weights_fed_sequence_lens(op):
    check(op, fed=WEIGHTS, seq=5, batch=3, lens=[5, 2, 0], direction="bidirectional", initial="input")
    check(op, fed=WEIGHTS + ("L",), seq=5, batch=3, lens=[1, 5, 3], lens_input=True, hidden=4)


# --------------------------------------------------------------------------- refusals, memory

def _refused(model: onnx.ModelProto, message: str) -> None:
    with pytest.raises(UnsupportedOpError, match=message):
        aot.build(model, target="host")


def test_refuses_unknown_activation():
    model, _ = recurrent_model("RNN", activations=["Gelu"])
    _refused(model, r"node 'rnn0' \(RNN\): activation 'Gelu' is not supported")


def test_refuses_lengths_beyond_the_sequence():
    model, _ = recurrent_model("GRU", seq=3, batch=2, lens=[3, 4])
    _refused(model, r"node 'gru0' \(GRU\): sequence_lens \[3, 4\] has values outside \[0, 3\]")


def test_state_and_scratch_live_in_the_workspace(tmp_path):
    """With only Y kept, the hidden/cell state and the gate scratch are outputs of the node that
    dead-code elimination keeps and the memory plan places in the workspace, without overlap."""
    model, _ = recurrent_model("LSTM", outputs=("Y",), hidden=8)
    aot.build(model, target="host", out_dir=tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["steps"][0]["writes"] == ["Y", "lstm0_h_state", "lstm0_c_state", "lstm0_scratch"]
    sizes = {b["tensor"]: (b["offset"], b["size"]) for b in plan["buffers"]}
    for name, floats in (("lstm0_h_state", 8), ("lstm0_c_state", 8), ("lstm0_scratch", 32)):
        assert sizes[name][1] >= floats * 4
    spans = sorted(sizes.values())
    assert all(a + size <= b for (a, size), (b, _) in zip(spans, spans[1:]))
    assert plan["workspace_size"] >= sum(size for _, size in spans)


# --------------------------------------------------------------------------- models

@pytest.mark.parametrize("target", CROSS, indirect=True)
@pytest.mark.parametrize("name", list(recurrent_models.MODELS))
def test_recurrent_models(name):
    assert_matches_onnxruntime(recurrent_models.MODELS[name](), tol=1e-4)
