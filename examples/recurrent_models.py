"""Synthetic recurrent float32 ONNX models, built with ``onnx.helper`` from deterministic random weights.

- ``lstm_kws``: keyword spotting on 49 frames of 10 MFCCs: LSTM (hidden 32), its last step, Gemm, Softmax.
- ``gru_kws``: the same with a GRU, reading the final hidden state Y_h.
- ``crnn``: text-line recognition: two Conv + Relu + MaxPool blocks on a 32x100 image, the width as the
  time axis, a bidirectional LSTM (hidden 32), a per-step MatMul to 37 classes, LogSoftmax.

Each has one input ``"input"`` and one output ``"output"``, batch 1, opset 14, IR version 8.
Usage: ``python examples/recurrent_models.py NAME [NAME...] -o DIR`` or ``--list``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 14
IR_VERSION = 8
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class Graph:
    """Nodes and initializers of one model, with a seeded generator for the weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape: Sequence[int], fan_in: int) -> str:
        return self.const(name, (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], outputs: Sequence[str], **attrs) -> list[str]:
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=f"{op}_{len(self.nodes)}", **attrs))
        return list(outputs)

    def model(self, name: str, input_shape: Sequence[int]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                  list(input_shape))],
                                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="aot-examples")
        model.ir_version = IR_VERSION
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        model.graph.output[0].type.CopyFrom(inferred.graph.output[0].type)
        onnx.checker.check_model(model, full_check=True)
        return model


def recurrent(g: Graph, op: str, x: str, inputs: int, hidden: int, outputs: Sequence[str],
              direction: str = "forward") -> list[str]:
    """An LSTM/GRU/RNN node with random W, R and B; `outputs` as ONNX lists them ('' for absent)."""
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    w = g.weight(f"{op}_W{len(g.nodes)}", (dirs, gates, inputs), inputs)
    r = g.weight(f"{op}_R{len(g.nodes)}", (dirs, gates, hidden), hidden)
    b = g.weight(f"{op}_B{len(g.nodes)}", (dirs, 2 * gates), 4 * hidden)
    return g.node(op, [x, w, r, b], outputs, hidden_size=hidden, direction=direction)


def lstm_kws(seed: int = 0, frames: int = 49, mfcc: int = 10, hidden: int = 32, classes: int = 12) -> onnx.ModelProto:
    """(1, frames, mfcc) batch-first -> time-major -> LSTM -> Y at the last step -> Gemm -> Softmax."""
    g = Graph(seed)
    g.node("Transpose", ["input"], ["seq"], perm=[1, 0, 2])
    recurrent(g, "LSTM", "seq", mfcc, hidden, ["y", "", ""])                # Y: (frames, 1, 1, hidden)
    starts, ends = g.const("last_start", np.array([frames - 1], np.int64)), g.const("last_end", np.array([frames]))
    g.node("Slice", ["y", starts, ends, g.const("axis0", np.array([0]))], ["y_last"])
    g.node("Reshape", ["y_last", g.const("flat", np.array([1, hidden], np.int64))], ["features"])
    g.node("Gemm", ["features", g.weight("fc_w", (classes, hidden), hidden), g.weight("fc_b", (classes,), 1)],
           ["logits"], transB=1)
    g.node("Softmax", ["logits"], ["output"], axis=-1)
    return g.model("lstm_kws", (1, frames, mfcc))


def gru_kws(seed: int = 1, frames: int = 49, mfcc: int = 10, hidden: int = 32, classes: int = 12) -> onnx.ModelProto:
    """(1, frames, mfcc) -> time-major -> GRU -> final state Y_h -> Gemm -> Softmax."""
    g = Graph(seed)
    g.node("Transpose", ["input"], ["seq"], perm=[1, 0, 2])
    recurrent(g, "GRU", "seq", mfcc, hidden, ["", "h"])                      # Y_h: (1, 1, hidden)
    g.node("Reshape", ["h", g.const("flat", np.array([1, hidden], np.int64))], ["features"])
    g.node("Gemm", ["features", g.weight("fc_w", (classes, hidden), hidden), g.weight("fc_b", (classes,), 1)],
           ["logits"], transB=1)
    g.node("Softmax", ["logits"], ["output"], axis=-1)
    return g.model("gru_kws", (1, frames, mfcc))


def crnn(seed: int = 2, height: int = 32, width: int = 100, hidden: int = 32, classes: int = 37) -> onnx.ModelProto:
    """Conv features of a text line read left to right: (1,1,H,W) -> 2 x (Conv3x3, Relu, MaxPool2) ->
    (W/4, 1, C * H/4) sequence -> bidirectional LSTM -> per-step MatMul + bias -> LogSoftmax."""
    g = Graph(seed)
    x, channels = "input", 1
    for i, out in enumerate((16, 32)):
        w = g.weight(f"conv{i}_w", (out, channels, 3, 3), channels * 9)
        b = g.weight(f"conv{i}_b", (out,), 4)
        x = g.node("Conv", [x, w, b], [f"conv{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])[0]
        x = g.node("Relu", [x], [f"relu{i}"])[0]
        x = g.node("MaxPool", [x], [f"pool{i}"], kernel_shape=[2, 2], strides=[2, 2])[0]
        channels = out
    steps, features = width // 4, channels * (height // 4)
    g.node("Transpose", [x], ["wnch"], perm=[3, 0, 1, 2])                              # (W/4, 1, C, H/4)
    g.node("Reshape", ["wnch", g.const("seq_shape", np.array([steps, 1, features], np.int64))], ["seq"])
    recurrent(g, "LSTM", "seq", features, hidden, ["y"], direction="bidirectional")    # (W/4, 2, 1, hidden)
    g.node("Transpose", ["y"], ["y_t"], perm=[0, 2, 1, 3])                             # (W/4, 1, 2, hidden)
    g.node("Reshape", ["y_t", g.const("step_shape", np.array([steps, 1, 2 * hidden], np.int64))], ["steps"])
    g.node("MatMul", ["steps", g.weight("head_w", (2 * hidden, classes), 2 * hidden)], ["head"])
    g.node("Add", ["head", g.weight("head_b", (classes,), 1)], ["logits"])
    g.node("LogSoftmax", ["logits"], ["output"], axis=-1)
    return g.model("crnn", (1, 1, height, width))


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {"lstm_kws": lstm_kws, "gru_kws": gru_kws, "crnn": crnn}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to write (default: all)")
    parser.add_argument("-o", "--out-dir", default="models", help="directory for NAME.onnx files")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, fn in MODELS.items():
            print(f"{name:10s} {fn.__doc__.splitlines()[0]}")
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; --list shows them", file=sys.stderr)
        return 2
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or MODELS:
        onnx.save(MODELS[name](), out / f"{name}.onnx")
        print(out / f"{name}.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
