"""Broken and hostile models and command lines through `aot build`.

A fixed corpus, generated here from a seed: truncated, bit-flipped and random bytes; cycles; missing
and twice-produced tensors; odd dims and dtypes; unknown ops and opsets; attributes of the wrong type
or value; tensor data that does not match its shape; external data past the end of its file, missing,
or outside the model's directory; NaN weights; hostile names; bad options; a 10,000-node chain.

Each case runs through the CLI's `main` in this process, in a directory of its own. Whatever the
case, `aot build` either succeeds (exit 0, a complete output directory) or fails with one
`aot: error:` line (argparse's usage line besides, for a bad option) and leaves no output directory;
it never raises, and never writes outside its output directory (nor into the home directory, which
each test points at an empty one). A case marked "error" is invalid and must fail; one marked "ok" is
valid and must build.

Besides the corpus, mutants: seed models covering the main op families (dense, convolution and
pooling, ConvTranspose and Resize, shape movement, reductions and normalization, indexing,
onnxruntime's quantized contrib ops) with attribute values (wrong lengths, zeros, negatives, huge
values, other types), small constant inputs, tensor shapes or element types changed, or bits
flipped, generated from their index. A refused mutant's error must name the model or a node, op or
tensor; a few built ones run and must agree with onnxruntime. AOT_HOSTILE_MUTANTS sets how many
(the first N are the same whatever the count), AOT_HOSTILE_COMPARED how many built ones per chunk
run: `AOT_HOSTILE_MUTANTS=20000 AOT_HOSTILE_COMPARED=50 pytest -n 2 tests/test_hostile.py -k mutants`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from aot import cli

SEED = 12
CHUNKS = 16


def both(*changes):
    """One mutation made of several."""
    def change(m):
        for c in changes:
            c(m)
    return change


@dataclass(frozen=True)
class Case:
    name: str                       # category-index, also the case's directory
    model: bytes                    # written to model.onnx
    args: tuple[str, ...] = ()      # after `build model.onnx -o out`
    expect: str = "any"             # "ok": must build; "error": must fail; "any": either, cleanly
    files: dict[str, bytes] = field(default_factory=dict)   # beside the model (external data)
    links: dict[str, str] = field(default_factory=dict)     # symlinks beside the model: name -> target
    model_file: str = "model.onnx"
    argv: tuple[str, ...] | None = None     # the whole command line after `aot`, instead of the above
    note: str = ""                  # what a mutant changed


# --------------------------------------------------------------------------- valid models to break


def _model(nodes, inputs, outputs, inits=(), opset=17, name="g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hostile")
    model.ir_version = 8
    return model


def _f32(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp() -> onnx.ModelProto:
    """x[1,8] -> MatMul -> Add -> Relu -> Gemm(transB) -> Softmax."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 8)), ("b1", (8,)), ("w2", (4, 8)), ("b2", (4,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b1"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["g"], name="gemm", transB=1),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, [_f32("x", [1, 8])], [_f32("y", [1, 4])], inits)


def cnn() -> onnx.ModelProto:
    """x[1,2,6,6] -> Conv(pads, strides) -> LeakyRelu -> MaxPool -> Flatten."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                              kernel_shape=[3, 3], group=1),
             helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.1),
             helper.make_node("MaxPool", ["l"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["y"], name="flatten", axis=1)]
    return _model(nodes, [_f32("x", [1, 2, 6, 6])], [_f32("y", [1, 36])], inits)


def contrib() -> onnx.ModelProto:
    """onnxruntime's quantized ops (com.microsoft) between QuantizeLinear and DequantizeLinear."""
    scalars = {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(1 / 256), "yz": np.uint8(0),
               "zs": np.float32(0.02), "zz": np.uint8(100)}
    inits = [numpy_helper.from_array(np.array(v), n) for n, v in scalars.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
             helper.make_node("QLinearSigmoid", ["xq", "xs", "xz", "ys", "yz"], ["sq"], name="sigmoid",
                              domain="com.microsoft"),
             helper.make_node("QLinearAdd", ["sq", "ys", "yz", "xq", "xs", "xz", "zs", "zz"], ["aq"], name="add",
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["aq", "zs", "zz"], ["y"], name="dq")]
    model = _model(nodes, [_f32("x", [1, 8])], [_f32("y", [1, 8])], inits)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def branches() -> onnx.ModelProto:
    """An If on a constant condition, each branch a small subgraph."""
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                             [_f32("t", [1, 8])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                              [_f32("e", [1, 8])])
    nodes = [helper.make_node("If", ["cond"], ["b"], name="if", then_branch=then, else_branch=other),
             helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid")]
    return _model(nodes, [_f32("x", [1, 8])], [_f32("y", [1, 8])], [numpy_helper.from_array(np.array(True), "cond")])


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype), name)


def _weights(rng: np.random.Generator, name: str, shape) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def vision() -> onnx.ModelProto:
    """x[1,4,8,8] -> depthwise Conv (group, dilations) -> BatchNormalization -> AveragePool -> ConvTranspose
    -> Resize -> GlobalAveragePool."""
    rng = np.random.default_rng(2)
    inits = [_weights(rng, "dw", (4, 1, 3, 3)), _weights(rng, "db", (4,)),
             _weights(rng, "scale", (4,)), _weights(rng, "bias", (4,)), _weights(rng, "mean", (4,)),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
             _weights(rng, "tw", (4, 2, 2, 2)), _weights(rng, "tb", (2,)),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "dw", "db"], ["c"], name="depthwise", group=4, kernel_shape=[3, 3],
                              pads=[2, 2, 2, 2], dilations=[2, 2], strides=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn",
                              epsilon=1e-5),
             helper.make_node("AveragePool", ["n"], ["p"], name="avgpool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], count_include_pad=0),
             helper.make_node("ConvTranspose", ["p", "tw", "tb"], ["t"], name="deconv", kernel_shape=[2, 2],
                              strides=[2, 2], output_padding=[1, 1]),
             helper.make_node("Resize", ["t", "", "scales"], ["r"], name="resize", mode="nearest"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    return _model(nodes, [_f32("x", [1, 4, 8, 8])], [_f32("y", [1, 2, 1, 1])], inits)


def shapes() -> onnx.ModelProto:
    """x[2,3,4] -> Transpose -> Reshape -> Slice -> Split -> Concat -> Unsqueeze -> Pad -> Squeeze -> Flatten."""
    inits = [_const("shape", [4, 6]), _const("starts", [0, 1]), _const("ends", [4, 6]), _const("axes", [0, 1]),
             _const("steps", [1, 2]), _const("split", [1, 3]), _const("uaxes", [0]),
             _const("pads", [0, 0, 1, 0, 0, 2]), _const("saxes", [0])]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[2, 0, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="reshape"),
             helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["s"], name="slice"),
             helper.make_node("Split", ["s", "split"], ["s0", "s1"], name="split", axis=0),
             helper.make_node("Concat", ["s1", "s0"], ["c"], name="concat", axis=0),
             helper.make_node("Unsqueeze", ["c", "uaxes"], ["u"], name="unsqueeze"),
             helper.make_node("Pad", ["u", "pads"], ["p"], name="pad", mode="constant"),
             helper.make_node("Squeeze", ["p", "saxes"], ["q"], name="squeeze"),
             helper.make_node("Flatten", ["q"], ["y"], name="flatten", axis=1)]
    return _model(nodes, [_f32("x", [2, 3, 4])], [_f32("y", [4, 6])], inits)


def reduce() -> onnx.ModelProto:
    """x[2,3,4] -> ReduceMean(axes, keepdims) -> LayerNormalization -> Softmax -> Gather -> CumSum -> ArgMax."""
    rng = np.random.default_rng(3)
    inits = [_weights(rng, "gamma", (4,)), _weights(rng, "beta", (4,)), _const("idx", [[0, 2], [1, 1]]),
             _const("cax", 1, np.int32)]
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"], name="sub"),
             helper.make_node("LayerNormalization", ["d", "gamma", "beta"], ["l"], name="layernorm", axis=-1,
                              epsilon=1e-5),
             helper.make_node("Softmax", ["l"], ["s"], name="softmax", axis=1),
             helper.make_node("Gather", ["s", "idx"], ["g"], name="gather", axis=2),
             helper.make_node("CumSum", ["g", "cax"], ["c"], name="cumsum", exclusive=0, reverse=1),
             helper.make_node("ArgMax", ["c"], ["y"], name="argmax", axis=1, keepdims=0)]
    return _model(nodes, [_f32("x", [2, 3, 4])], [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 2, 2])],
                  inits)


def index() -> onnx.ModelProto:
    """x[2,4,4,4] -> DepthToSpace -> SpaceToDepth -> GatherElements -> ScatterND -> Expand -> Tile -> TopK."""
    inits = [_const("gi", np.zeros((2, 4, 4, 4), np.int64) + np.arange(4) % 3),
             _const("si", [[0, 1], [1, 3]]), numpy_helper.from_array(np.ones((2, 4, 4), np.float32), "upd"),
             _const("eshape", [2, 4, 4, 4]), _const("reps", [1, 1, 1, 2]), _const("k", [3])]
    nodes = [helper.make_node("DepthToSpace", ["x"], ["d"], name="d2s", blocksize=2, mode="CRD"),
             helper.make_node("SpaceToDepth", ["d"], ["s"], name="s2d", blocksize=2),
             helper.make_node("GatherElements", ["s", "gi"], ["g"], name="gather_elements", axis=3),
             helper.make_node("ScatterND", ["g", "si", "upd"], ["n"], name="scatter_nd"),
             helper.make_node("Expand", ["n", "eshape"], ["e"], name="expand"),
             helper.make_node("Tile", ["e", "reps"], ["t"], name="tile"),
             helper.make_node("TopK", ["t", "k"], ["y", "yi"], name="topk", axis=-1, largest=1, sorted=1)]
    outputs = [_f32("y", [2, 4, 4, 3]), helper.make_tensor_value_info("yi", TensorProto.INT64, [2, 4, 4, 3])]
    return _model(nodes, [_f32("x", [2, 4, 4, 4])], outputs, inits)


def qpool() -> onnx.ModelProto:
    """QuantizeLinear -> QLinearAveragePool -> QLinearGlobalAveragePool (com.microsoft) -> DequantizeLinear."""
    scalars = {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(0.04), "yz": np.uint8(120)}
    inits = [numpy_helper.from_array(np.array(v), n) for n, v in scalars.items()]
    ms = "com.microsoft"
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
             helper.make_node("QLinearAveragePool", ["xq", "xs", "xz", "ys", "yz"], ["pq"], name="qavgpool",
                              domain=ms, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
             helper.make_node("QLinearGlobalAveragePool", ["pq", "ys", "yz", "xs", "xz"], ["gq"], name="qgap",
                              domain=ms, channels_last=0),
             helper.make_node("DequantizeLinear", ["gq", "xs", "xz"], ["y"], name="dq")]
    model = _model(nodes, [_f32("x", [1, 3, 7, 7])], [_f32("y", [1, 3, 1, 1])], inits)
    model.opset_import.append(helper.make_opsetid(ms, 1))
    return model


BASES = {"mlp": mlp, "cnn": cnn, "contrib": contrib, "branches": branches, "vision": vision, "shapes": shapes,
         "reduce": reduce, "index": index, "qpool": qpool}


def _bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


def _edit(base: str, change) -> bytes:
    """A fresh copy of a base model, changed in place by `change(model)`."""
    model = BASES[base]()
    change(model)
    return _bytes(model)


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _init(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _set_attr(model, node: str, attr: AttributeProto) -> None:
    n = _node(model, node)
    kept = [a for a in n.attribute if a.name != attr.name]
    del n.attribute[:]
    n.attribute.extend(kept + [attr])


# --------------------------------------------------------------------------- the corpus, by category


def fuzzed(rng: np.random.Generator) -> list[Case]:
    """Truncations and bit flips of valid models, and random bytes."""
    cases = []
    for base, (cuts, flips) in {"mlp": (40, 60), "cnn": (40, 60), "contrib": (15, 40), "branches": (15, 40)}.items():
        data = _bytes(BASES[base]())
        for i in range(cuts):
            cut = int(rng.integers(0, len(data)))
            cases.append(Case(f"truncated-{base}-{i}", data[:cut], expect="error" if cut < 8 else "any"))
        for i in range(flips):
            flipped = bytearray(data)
            for _ in range(int(rng.integers(1, 9))):
                bit = int(rng.integers(0, 8 * len(data)))
                flipped[bit // 8] ^= 1 << (bit % 8)
            cases.append(Case(f"bitflip-{base}-{i}", bytes(flipped)))
    for i in range(20):
        cases.append(Case(f"random-bytes-{i}", rng.integers(0, 256, int(rng.integers(0, 400)), np.uint8).tobytes()))
    for i in range(20):     # well-formed protobuf wire format, random fields: parses, means nothing
        out = bytearray()
        for _ in range(int(rng.integers(1, 12))):
            number, wire = int(rng.integers(1, 20)), int(rng.choice([0, 2]))
            out += _varint(number << 3 | wire)
            if wire == 0:
                out += _varint(int(rng.integers(0, 1 << 20)))
            else:
                payload = rng.integers(0, 256, int(rng.integers(0, 30)), np.uint8).tobytes()
                out += _varint(len(payload)) + payload
        cases.append(Case(f"random-protobuf-{i}", bytes(out)))
    return cases


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def structure() -> list[Case]:
    """Cycles, missing tensors, values produced twice."""
    def cycle(m):
        _node(m, "matmul").input[0] = "r"           # matmul reads relu's output, which needs matmul

    def self_loop(m):
        _node(m, "relu").input[0] = "r"

    def missing_input(m):
        _node(m, "add").input[1] = "nowhere"

    def missing_initializer(m):
        m.graph.initializer.remove(_init(m, "w2"))

    def output_never_computed(m):
        m.graph.output[0].name = "nothing"

    def no_nodes(m):
        del m.graph.node[:]

    def twice_by_nodes(m):
        _node(m, "relu").output[0] = "a"
        _node(m, "gemm").input[0] = "a"

    def output_is_input(m):
        _node(m, "matmul").output[0] = "x"
        _node(m, "add").input[0] = "x"

    def output_is_initializer(m):
        _node(m, "add").output[0] = "b1"
        _node(m, "relu").input[0] = "b1"

    def duplicate_initializer(m):
        m.graph.initializer.append(_init(m, "w1"))

    def duplicate_input(m):
        m.graph.input.append(m.graph.input[0])

    def two_outputs_same_name(m):
        _node(m, "matmul").output.append("m")

    def empty_output_name(m):
        _node(m, "relu").output[0] = ""

    def unsorted(m):
        nodes = list(m.graph.node)
        del m.graph.node[:]
        m.graph.node.extend(reversed(nodes))

    def output_listed_twice(m):
        m.graph.output.append(m.graph.output[0])

    def input_is_output(m):
        m.graph.output[0].CopyFrom(m.graph.input[0])

    def dangling_nodes(m):
        m.graph.node.append(helper.make_node("Neg", ["r"], ["unused"], name="dangling"))

    def subgraph_value_produced_again(m):     # an If branch and a later outer node both produce "t"
        then = helper.make_graph([helper.make_node("Neg", ["a"], ["t"], name="inner")], "then", [], [_f32("t", [1, 8])])
        other = helper.make_graph([helper.make_node("Relu", ["a"], ["u"], name="inner2")], "else", [],
                                  [_f32("u", [1, 8])])
        m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
        relu = _node(m, "relu")
        relu.CopyFrom(helper.make_node("If", ["cond"], ["r"], name="if", then_branch=then, else_branch=other))
        m.graph.node.insert(3, helper.make_node("Neg", ["r"], ["t"], name="again"))
        _node(m, "gemm").input[0] = "t"

    edits = [cycle, self_loop, missing_input, missing_initializer, output_never_computed, no_nodes, twice_by_nodes,
             output_is_input, output_is_initializer, duplicate_initializer, duplicate_input, two_outputs_same_name,
             empty_output_name, unsorted, input_is_output]
    cases = [Case(f"structure-{e.__name__}", _edit("mlp", e), expect="error") for e in edits]
    # ONNX lets a subgraph produce a name the outer graph produces later (it is not visible there yet)
    cases += [Case(f"structure-{e.__name__}", _edit("mlp", e), expect="ok") for e in (output_listed_twice,
                                                                                      dangling_nodes,
                                                                                      subgraph_value_produced_again)]
    return cases


def nested_ifs(depth: int = 30) -> Case:
    """Ifs inside Ifs, as deep as protobuf parses (its limit is 100 nested messages, 3 per level)."""
    inner = helper.make_graph([helper.make_node("Relu", ["x"], ["o0"], name="r0")], "g0", [], [_f32("o0", [1, 8])])
    for d in range(1, depth):
        other = helper.make_graph([helper.make_node("Neg", ["x"], [f"n{d}"], name=f"neg{d}")], f"e{d}", [],
                                  [_f32(f"n{d}", [1, 8])])
        node = helper.make_node("If", ["cond"], [f"o{d}"], name=f"if{d}", then_branch=inner, else_branch=other)
        inner = helper.make_graph([node], f"g{d}", [], [_f32(f"o{d}", [1, 8])])
    nodes = list(inner.node)
    nodes[-1].output[0] = "y"
    model = _model(nodes, [_f32("x", [1, 8])], [_f32("y", [1, 8])], [numpy_helper.from_array(np.array(True), "cond")])
    return Case(f"structure-nested-ifs-{depth}", _bytes(model), expect="ok")


def dims_and_dtypes() -> list[Case]:
    """Zero, negative and huge dimensions; element types aot does not compute with."""
    cases = []
    for label, dims in (("zero", [0, 8]), ("minus-one", [-1, 8]), ("negative", [1, -7]), ("huge", [1 << 40, 8]),
                        ("huge-inner", [1, 1 << 40]), ("rank-0", []), ("rank-9", [1] * 9)):
        def set_input(m, dims=dims):
            shape = m.graph.input[0].type.tensor_type.shape
            del shape.dim[:]
            for d in dims:
                shape.dim.add().dim_value = d
        cases.append(Case(f"dims-input-{label}", _edit("mlp", set_input), expect="error"))
    for label, dims in (("zero", [0, 8]), ("negative", [8, -8]), ("huge", [1 << 40, 8]), ("more", [8, 8, 8])):
        def set_initializer(m, dims=dims):
            t = _init(m, "w1")
            del t.dims[:]
            t.dims.extend(dims)
        cases.append(Case(f"dims-initializer-{label}", _edit("mlp", set_initializer), expect="error"))
    for label, dims in (("huge", [1 << 33, 8]), ("wrong", [2, 3]), ("negative", [-1, 4])):
        def set_output(m, dims=dims):
            shape = m.graph.output[0].type.tensor_type.shape
            del shape.dim[:]
            for d in dims:
                shape.dim.add().dim_value = d
        cases.append(Case(f"dims-output-{label}", _edit("mlp", set_output),
                          expect="any" if label == "negative" else "error"))
    for label, dims, value in (("huge-reshape", [1 << 36, 16], "reshape"),
                               ("huge-constant-of-shape", [1 << 34], "cos")):
        def huge(m, dims=dims, value=value):
            shape = numpy_helper.from_array(np.array(dims, np.int64), "shape")
            m.graph.initializer.append(shape)
            if value == "reshape":
                _node(m, "softmax").CopyFrom(helper.make_node("Reshape", ["g", "shape"], ["y"], name="reshape"))
            else:
                m.graph.node.append(helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos"))
                m.graph.node.append(helper.make_node("ReduceSum", ["big"], ["total"], name="sum", keepdims=0))
                m.graph.output.append(_f32("total", []))
        cases.append(Case(f"dims-{label}", _edit("mlp", huge), expect="error"))
    for dtype in (TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.BOOL, TensorProto.FLOAT16,
                  TensorProto.BFLOAT16, TensorProto.UINT64, TensorProto.FLOAT8E4M3FN, TensorProto.UNDEFINED, 77):
        def set_dtype(m, dtype=dtype):
            m.graph.input[0].type.tensor_type.elem_type = dtype
        cases.append(Case(f"dtype-input-{dtype}", _edit("mlp", set_dtype), expect="error"))

        def set_weight_dtype(m, dtype=dtype):
            _init(m, "w1").data_type = dtype
        cases.append(Case(f"dtype-initializer-{dtype}", _edit("mlp", set_weight_dtype), expect="error"))
    return cases


def ops_and_opsets() -> list[Case]:
    """Unknown ops and domains, ops their opset does not define, odd opset imports."""
    def op(name, domain=""):
        def change(m):
            n = _node(m, "relu")
            n.op_type, n.domain = name, domain
        return change

    def opset(version, domain=""):
        def change(m):
            m.opset_import[0].domain, m.opset_import[0].version = domain, version
        return change

    def also_import(domain, version):
        def change(m):
            m.opset_import.append(helper.make_opsetid(domain, version))
        return change

    bad = {"unknown-op": op("Frobnicate"), "gelu-before-opset-20": op("Gelu"), "lowercase-op": op("relu"),
           "empty-op": op(""), "unknown-domain": op("Relu", "org.example"),
           "unknown-domain-imported": both(op("Relu", "org.example"), also_import("org.example", 1)),
           "ms-relu": both(op("Relu", "com.microsoft"), also_import("com.microsoft", 1)),
           "ms-unknown": both(op("Frobnicate", "com.microsoft"), also_import("com.microsoft", 1)),
           "ms-no-import": op("QLinearSigmoid", "com.microsoft"),
           "ms-opset-0": both(op("QLinearSigmoid", "com.microsoft"), also_import("com.microsoft", 0)),
           "ml-relu": both(op("Relu", "ai.onnx.ml"), also_import("ai.onnx.ml", 3)),
           "opset-99": opset(99), "opset-0": opset(0), "opset-negative": opset(-4), "opset-1": opset(1),
           "opset-unknown-domain-only": opset(17, "org.example"),
           "default-domain-twice": also_import("", 13), "ai-onnx-and-default": also_import("ai.onnx", 13),
           "no-opset-import": lambda m: m.ClearField("opset_import"),
           "ir-version-99": lambda m: setattr(m, "ir_version", 99),
           "ir-version-0": lambda m: setattr(m, "ir_version", 0)}
    cases = [Case(f"ops-{label}", _edit("mlp", change), expect="error") for label, change in bad.items()]

    def leaky(alpha):
        def change(m):
            n = _node(m, "sigmoid")
            n.op_type = "QLinearLeakyRelu"
            n.attribute.append(helper.make_attribute("alpha", alpha))
        return change

    def drop_input(node, keep):
        def change(m):
            del _node(m, node).input[keep:]
        return change

    contrib_cases = {"contrib-alpha-int": (leaky(1), "error"), "contrib-alpha-float": (leaky(0.25), "ok"),
                     "contrib-too-few-inputs": (drop_input("add", 5), "error"),
                     # the schema makes it optional; onnxruntime 1.32 aborts on a QLinearSigmoid without it
                     "contrib-optional-zero-point-absent": (drop_input("sigmoid", 4), "any"),
                     "contrib-unknown-attribute": (lambda m: _set_attr(m, "add", helper.make_attribute("k", 1)),
                                                   "error")}
    cases += [Case(f"ops-{label}", _edit("contrib", change), expect=expect)
              for label, (change, expect) in contrib_cases.items()]
    good = {"ai-onnx-domain-name": opset(17, "ai.onnx"), "opset-13": opset(13), "unused-extra-domain":
            also_import("org.example", 1)}
    cases += [Case(f"ops-{label}", _edit("mlp", change), expect="ok") for label, change in good.items()]
    return cases


def attributes() -> list[Case]:
    """Attributes of the wrong type, missing, unknown, repeated or with impossible values."""
    def attr(node, a):
        return lambda m: _set_attr(m, node, a)

    def raw(name, kind, **fields):
        return AttributeProto(name=name, type=kind, **fields)

    def drop(node, name):
        def change(m):
            n = _node(m, node)
            kept = [a for a in n.attribute if a.name != name]
            del n.attribute[:]
            n.attribute.extend(kept)
        return change

    def constant(name, values):
        def change(m):
            t = _init(m, name)
            array = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(np.array(values, array.dtype), name))
        return change

    def weights(name, dims):
        def change(m):
            t = _init(m, name)
            array = numpy_helper.to_array(t)
            values = np.ones(dims, array.dtype) if array.dtype.kind != "f" else np.full(dims, 0.5, array.dtype)
            t.CopyFrom(numpy_helper.from_array(values, name))
        return change

    def reshape_graph_input(dims):
        def change(m):
            shape = m.graph.input[0].type.tensor_type.shape
            del shape.dim[:]
            for d in dims:
                shape.dim.add().dim_value = d
        return change

    def repeat(node, name):
        def change(m):
            n = _node(m, node)
            n.attribute.append(next(a for a in n.attribute if a.name == name))
        return change

    bad = {
        "alpha-int": ("cnn", attr("leaky", helper.make_attribute("alpha", 2))),
        "alpha-string": ("cnn", attr("leaky", helper.make_attribute("alpha", "0.1"))),
        "alpha-floats": ("cnn", attr("leaky", helper.make_attribute("alpha", [0.1, 0.2]))),
        "alpha-tensor": ("cnn", attr("leaky", helper.make_attribute("alpha", numpy_helper.from_array(
            np.array(0.1, np.float32))))),
        "alpha-type-undefined": ("cnn", attr("leaky", AttributeProto(name="alpha", f=0.1))),
        "alpha-type-says-int-holds-float": ("cnn", attr("leaky", raw("alpha", AttributeProto.INT, f=0.1))),
        "axis-float": ("mlp", attr("softmax", helper.make_attribute("axis", 1.0))),
        "axis-string": ("mlp", attr("softmax", helper.make_attribute("axis", "1"))),
        "axis-out-of-range": ("mlp", attr("softmax", helper.make_attribute("axis", 9))),
        "axis-huge": ("mlp", attr("softmax", helper.make_attribute("axis", 1 << 62))),
        "transB-string": ("mlp", attr("gemm", helper.make_attribute("transB", "yes"))),
        "kernel-shape-floats": ("cnn", attr("conv", helper.make_attribute("kernel_shape", [3.0, 3.0]))),
        "kernel-shape-wrong": ("cnn", attr("conv", helper.make_attribute("kernel_shape", [5, 5]))),
        "kernel-shape-negative": ("cnn", attr("pool", helper.make_attribute("kernel_shape", [-2, 2]))),
        "kernel-shape-zero": ("cnn", attr("pool", helper.make_attribute("kernel_shape", [0, 2]))),
        "kernel-shape-rank": ("cnn", attr("pool", helper.make_attribute("kernel_shape", [2, 2, 2]))),
        "pool-kernel-larger-than-input": ("cnn", attr("pool", helper.make_attribute("kernel_shape", [9, 9]))),
        "strides-zero": ("cnn", attr("conv", helper.make_attribute("strides", [0, 1]))),
        "strides-negative": ("cnn", attr("pool", helper.make_attribute("strides", [-1, 2]))),
        "strides-huge": ("cnn", attr("conv", helper.make_attribute("strides", [1 << 40, 1]))),
        "pads-negative": ("cnn", attr("conv", helper.make_attribute("pads", [-5, -5, -5, -5]))),
        "pads-short": ("cnn", attr("conv", helper.make_attribute("pads", [1, 1]))),
        "pads-huge": ("cnn", attr("conv", helper.make_attribute("pads", [1 << 40, 1, 1, 1]))),
        "group-zero": ("cnn", attr("conv", helper.make_attribute("group", 0))),
        "group-3": ("cnn", attr("conv", helper.make_attribute("group", 3))),
        "dilations-zero": ("cnn", attr("conv", helper.make_attribute("dilations", [0, 1]))),
        "auto-pad-bogus": ("cnn", attr("conv", helper.make_attribute("auto_pad", "SIDEWAYS"))),
        "auto-pad-bytes": ("cnn", attr("conv", helper.make_attribute("auto_pad", b"\xff\xfe"))),
        "flatten-axis-9": ("cnn", attr("flatten", helper.make_attribute("axis", 9))),
        "unknown-attribute": ("mlp", attr("relu", helper.make_attribute("bogus", 1))),
        "repeated-attribute": ("cnn", repeat("conv", "pads")),
        "missing-required": ("mlp", lambda m: _node(m, "relu").CopyFrom(
            helper.make_node("Transpose", ["a"], ["r"], name="relu", perm=[0, 1, 2]))),
        "graph-attribute-on-relu": ("mlp", attr("relu", helper.make_attribute(
            "body", helper.make_graph([], "empty", [], [])))),
        "kernel-shape-missing": ("cnn", drop("pool", "kernel_shape")),
        # values that contradict the shapes they describe, or each other
        "slice-step-zero": ("shapes", constant("steps", [1, 0])),
        "slice-lengths-differ": ("shapes", constant("steps", [1, 1, 1])),
        "conv-weight-vs-kernel-shape": ("cnn", weights("w", (4, 2, 2, 2))),
        "conv-weight-vs-channels": ("cnn", weights("w", (4, 3, 3, 3))),
        "conv-weight-vs-group": ("cnn", attr("conv", helper.make_attribute("group", 2))),
        "conv-weight-rank": ("cnn", weights("w", (4, 2, 3))),
        "conv-bias-length": ("cnn", weights("b", (5,))),
        "depthwise-weight-vs-group": ("vision", weights("dw", (4, 2, 3, 3))),
        "depthwise-group-not-dividing": ("vision", attr("depthwise", helper.make_attribute("group", 3))),
        "gemm-weight-vs-transB": ("mlp", attr("gemm", helper.make_attribute("transB", 0))),
        "gemm-weight-rank": ("mlp", weights("w2", (4, 8, 1))),
        "gemm-transA-huge": ("mlp", attr("gemm", helper.make_attribute("transA", 1 << 40))),
        "gemm-bias-length": ("mlp", weights("b2", (8,))),
        "gemm-bias-column": ("mlp", weights("b2", (4, 1))),
        "cumsum-axis-empty": ("reduce", constant("cax", [])),
        "cumsum-axis-out-of-range": ("reduce", constant("cax", 7)),
        "pads-long": ("cnn", attr("conv", helper.make_attribute("pads", [1, 1, 1, 1, 1, 1]))),
        "strides-short": ("cnn", attr("pool", helper.make_attribute("strides", [2]))),
        "strides-long": ("cnn", attr("conv", helper.make_attribute("strides", [1, 1, 1]))),
        "dilations-short": ("vision", attr("depthwise", helper.make_attribute("dilations", [2]))),
        "dilations-negative": ("vision", attr("depthwise", helper.make_attribute("dilations", [-2, 2]))),
        "kernel-shape-short": ("cnn", attr("conv", helper.make_attribute("kernel_shape", [3]))),
        "avgpool-pads-huge": ("vision", attr("avgpool", helper.make_attribute("pads", [1 << 40] * 4))),
        "output-padding-too-large": ("vision", attr("deconv", helper.make_attribute("output_padding", [2, 2]))),
        "output-padding-short": ("vision", attr("deconv", helper.make_attribute("output_padding", [1]))),
        "output-shape-long": ("vision", attr("deconv", helper.make_attribute("output_shape", [8, 8, 8]))),
        "deconv-bias-length": ("vision", weights("tb", (4,))),
        "perm-short": ("shapes", attr("transpose", helper.make_attribute("perm", [1, 0]))),
        "perm-long": ("shapes", attr("transpose", helper.make_attribute("perm", [0, 1, 2, 3]))),
        "perm-repeated": ("shapes", attr("transpose", helper.make_attribute("perm", [0, 0, 1]))),
        "perm-negative": ("shapes", attr("transpose", helper.make_attribute("perm", [-1, 0, 1]))),
        "axes-repeated": ("reduce", attr("mean", helper.make_attribute("axes", [1, 1]))),
        "axes-out-of-range": ("reduce", attr("mean", helper.make_attribute("axes", [5]))),
        "unsqueeze-axes-repeated": ("shapes", constant("uaxes", [0, 0])),
        "split-sum": ("shapes", constant("split", [1, 2])),
        "split-negative": ("shapes", constant("split", [5, -1])),
        "reshape-two-minus-ones": ("shapes", constant("shape", [-1, -1])),
        "reshape-count": ("shapes", constant("shape", [5, 5])),
        "pads-input-short": ("shapes", constant("pads", [0, 1, 0, 2])),
        "resize-scales-short": ("vision", constant("scales", [2.0, 2.0])),
        "resize-scales-zero": ("vision", constant("scales", [1.0, 1.0, 0.0, 2.0])),
        "gather-elements-indices-rank": ("index", weights("gi", (2, 4, 4))),
        "scatter-nd-updates-shape": ("index", weights("upd", (2, 4, 5))),
        "blocksize-zero": ("index", attr("d2s", helper.make_attribute("blocksize", 0))),
        "blocksize-not-dividing": ("index", attr("d2s", helper.make_attribute("blocksize", 3))),
        "tile-repeats-short": ("index", constant("reps", [1, 2])),
        "topk-k-too-large": ("index", constant("k", [9])),
        "topk-largest-2": ("index", attr("topk", helper.make_attribute("largest", 2))),
        "batchnorm-mean-length": ("vision", weights("mean", (3,))),
        "quantize-scale-zero": ("contrib", constant("xs", np.float32(0))),
        "qavgpool-strides-empty": ("qpool", attr("qavgpool", helper.make_attribute("strides", [],
                                                                                  attr_type=AttributeProto.INTS))),
        "qavgpool-pads-short": ("qpool", attr("qavgpool", helper.make_attribute("pads", [1, 1]))),
        "qavgpool-strides-zero": ("qpool", attr("qavgpool", helper.make_attribute("strides", [0, 0]))),
        "qavgpool-input-rank": ("qpool", reshape_graph_input([1, 3, 7])),
    }
    cases = [Case(f"attribute-{label}", _edit(base, change), expect="error") for label, (base, change) in bad.items()]
    lenient = {
        "transB-2": ("mlp", attr("gemm", helper.make_attribute("transB", 2))),     # onnxruntime: nonzero is true
        "quantize-scale-negative": ("contrib", constant("xs", np.float32(-0.05))),
        "resize-scales-by-axes": ("vision", both(lambda m: setattr(m.opset_import[0], "version", 18),
                                                 attr("resize", helper.make_attribute("axes", [2, 3])),
                                                 constant("scales", [2.0, 2.0]))),
        "output-padding-below-stride": ("vision", attr("deconv", helper.make_attribute("output_padding", [0, 1]))),
        "strides-missing": ("cnn", drop("conv", "strides")),
        "kernel-shape-absent-on-conv": ("cnn", drop("conv", "kernel_shape")),
        "alpha-nan": ("cnn", attr("leaky", helper.make_attribute("alpha", float("nan")))),
        "axis-negative": ("mlp", attr("softmax", helper.make_attribute("axis", -1))),
    }
    cases += [Case(f"attribute-{label}", _edit(base, change), expect="ok") for label, (base, change) in lenient.items()]
    return cases


def tensor_data() -> list[Case]:
    """Data that does not match the declared shape and type; NaN and infinite weights."""
    def raw_bytes(extra: int):
        def change(m):
            t = _init(m, "w1")
            t.raw_data = t.raw_data + b"\0" * extra if extra > 0 else t.raw_data[:extra]
        return change

    def typed(count: int, kind: str = "float_data"):
        def change(m):
            t = _init(m, "w1")
            t.ClearField("raw_data")
            getattr(t, kind).extend([1] * count)
        return change

    def both_fields(m):
        _init(m, "w1").float_data.extend([1.0] * 64)

    def no_data(m):
        _init(m, "w1").ClearField("raw_data")

    def int64_shape_short(m):
        m.graph.initializer.append(numpy_helper.from_array(np.array([1, 4], np.int64), "shape"))
        _init(m, "shape").raw_data = _init(m, "shape").raw_data[:12]
        m.graph.node.append(helper.make_node("Reshape", ["y", "shape"], ["z"], name="reshape"))
        m.graph.output[0].name = "z"

    def constant_node_mismatch(m):
        value = numpy_helper.from_array(np.ones(8, np.float32), "c")
        value.raw_data = value.raw_data + b"\0" * 4
        m.graph.initializer.remove(_init(m, "b1"))
        m.graph.node.insert(0, helper.make_node("Constant", [], ["b1"], name="const", value=value))

    def string_data(m):
        t = _init(m, "b1")
        t.data_type = TensorProto.STRING
        t.ClearField("raw_data")
        t.string_data.extend([b"\xff"] * 8)

    bad = {"raw-too-long": raw_bytes(4), "raw-too-short": raw_bytes(-4), "raw-one-byte-more": raw_bytes(1),
           "raw-much-too-long": raw_bytes(1 << 16), "float-data-short": typed(63), "float-data-long": typed(65),
           "int32-data-for-float": typed(64, "int32_data"), "both-raw-and-typed": both_fields, "no-data": no_data,
           "int64-raw-short": int64_shape_short, "constant-node-raw-too-long": constant_node_mismatch,
           "string-data": string_data}
    cases = [Case(f"data-{label}", _edit("mlp", change), expect="error") for label, change in bad.items()]
    for label, value in (("nan", np.nan), ("inf", np.inf), ("minus-inf", -np.inf), ("denormal", 1e-45),
                         ("max", np.finfo(np.float32).max)):
        def special(m, value=value):
            t = _init(m, "w1")
            array = numpy_helper.to_array(t).copy()
            array[::3] = value
            t.CopyFrom(numpy_helper.from_array(array, "w1"))
        cases.append(Case(f"data-weights-{label}", _edit("mlp", special), expect="ok"))
    return cases


def external_data() -> list[Case]:
    """Weights in a file beside the model, described wrongly or pointing elsewhere."""
    weights = numpy_helper.to_array(_init(mlp(), "w1")).tobytes()      # 256 bytes

    def external(location: str, offset=None, length=None, **extra):
        def change(m):
            t = _init(m, "w1")
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            entries = {"location": location, "offset": offset, "length": length, **extra}
            for key, value in entries.items():
                if value is not None:
                    entry = t.external_data.add()
                    entry.key, entry.value = key, str(value)
        return _edit("mlp", change)

    data = {"w.bin": weights}
    cases = [
        Case("external-ok", external("w.bin", 0, 256), expect="ok", files=data),
        Case("external-ok-no-length", external("w.bin"), expect="ok", files=data),
        Case("external-ok-offset", external("w.bin", 16, 256), expect="ok", files={"w.bin": b"\0" * 16 + weights}),
        Case("external-offset-past-eof", external("w.bin", 300, 256), expect="error", files=data),
        Case("external-offset-at-eof", external("w.bin", 256), expect="error", files=data),
        Case("external-length-past-eof", external("w.bin", 0, 512), expect="error", files=data),
        Case("external-offset-plus-length-past-eof", external("w.bin", 128, 256), expect="error", files=data),
        Case("external-length-short", external("w.bin", 0, 128), expect="error", files=data),
        Case("external-offset-not-a-number", external("w.bin", "zero", 256), expect="error", files=data),
        Case("external-length-negative", external("w.bin", 0, -256), expect="error", files=data),
        Case("external-offset-huge", external("w.bin", 1 << 70, 256), expect="error", files=data),
        Case("external-missing-file", external("nothere.bin", 0, 256), expect="error"),
        Case("external-no-location", external("", 0, 256), expect="error", files=data),
        Case("external-location-is-directory", external(".", 0, 256), expect="error"),
        Case("external-escape-relative", external("../../../../../../etc/passwd", 0, 256), expect="error"),
        Case("external-escape-parent", external("../w.bin", 0, 256), expect="error"),
        Case("external-escape-absolute", external("/etc/passwd", 0, 256), expect="error"),
        Case("external-escape-symlink", external("link.bin", 0, 256), expect="error",
             links={"link.bin": "/etc/passwd"}),
        Case("external-nul-in-location", external("w.bin\0x", 0, 256), expect="error", files=data),
        Case("external-unknown-key", external("w.bin", 0, 256, colour="blue"), expect="any", files=data),
        Case("external-location-non-utf8", _replace(external("w.bin", 0, 256), b"w.bin", b"w\xff.in"),
             expect="error", files=data),
    ]
    return cases


def _replace(data: bytes, old: bytes, new: bytes) -> bytes:
    """Edit serialized bytes (how a name that is not UTF-8 gets into a model); same length keeps it parseable."""
    assert old in data and len(old) == len(new)
    return data.replace(old, new)


def names() -> list[Case]:
    """Names that are not text, very long, path-like, shell-like, C keywords, or collide once made C names."""
    def rename_everywhere(old: str, new: str):
        def change(m):
            g = m.graph
            for vi in list(g.input) + list(g.output) + list(g.value_info):
                vi.name = new if vi.name == old else vi.name
            for t in g.initializer:
                t.name = new if t.name == old else t.name
            for n in g.node:
                n.input[:] = [new if i == old else i for i in n.input]
                n.output[:] = [new if o == old else o for o in n.output]
                n.name = new if n.name == old else n.name
        return change

    hostile = {"long": "n" * 10_000, "dotdot": "../../escape", "absolute": "/tmp/escape",
               "shell": "$(touch pwned);`x`|&>", "keyword-int": "int", "keyword-return": "return", "main": "main",
               "newline": "a\nb", "escape": "\x1b[31mred", "quote": "w\"'\\", "space": "  ", "unicode": "вес·重量",
               "percent": "%s%n%x", "dash": "-o"}
    cases = []
    for label, new in hostile.items():
        for old in ("x", "w1", "y", "relu", "a"):
            cases.append(Case(f"name-{label}-for-{old}", _edit("mlp", rename_everywhere(old, new)), expect="ok"))
    collide = [("x", "in.put"), ("y", "in-put")]       # an input and an output: both `in_put` in C

    def colliding(m):
        for old, new in collide:
            rename_everywhere(old, new)(m)
    cases.append(Case("name-collide-after-sanitizing", _edit("mlp", colliding), expect="ok"))

    def two_inputs(m):      # a second input "X": the macros are upper case
        m.graph.input.append(_f32("X", [1, 8]))
        _node(m, "add").input[1] = "X"
    cases.append(Case("name-collide-case", _edit("mlp", two_inputs), expect="ok"))
    base = _bytes(mlp())
    for label, old, new in (("node", b"matmul", b"matm\xffl"), ("tensor", b"w2", b"\xc3w"),
                            ("input", b"\x0a\x01x", b"\x0a\x01\xff"), ("op", b"Relu", b"Rel\xfe"),
                            ("graph", b"\x12\x01g", b"\x12\x01\x80"), ("producer", b"hostile", b"hostil\xe9")):
        cases.append(Case(f"name-not-utf8-{label}", _replace(base, old, new), expect="error"))
    for label, name in (("keyword", "int"), ("dotdot", "../../../escape"), ("empty", ""), ("digits", "123"),
                        ("shell", "$(touch pwned)"), ("long", "m" * 5000)):
        # a name longer than the file system allows in a file name may be refused, cleanly
        cases.append(Case(f"name-option-{label}", base, ("--name", name), expect="any" if label == "long" else "ok"))
    for label, file in (("keyword", "int.onnx"), ("spaces", "my model.onnx"),
                        ("no-extension", "model"), ("unicode", "модель.onnx"), ("dots", "..onnx")):
        cases.append(Case(f"name-file-{label}", base, expect="ok", model_file=file))
    return cases


def options() -> list[Case]:
    """Command lines aot must refuse."""
    base = _bytes(mlp())
    bad = {"unknown-target": ("--target", "pdp11"), "empty-target": ("--target", ""),
           "target-path": ("--target", "../../etc/passwd"),
           "shape-no-equals": ("--input-shape", "x"), "shape-no-name": ("--input-shape", "=1x8"),
           "shape-letters": ("--input-shape", "x=1xAx8"), "shape-zero": ("--input-shape", "x=0x8"),
           "shape-negative": ("--input-shape", "x=-1x8"), "shape-empty": ("--input-shape", "x="),
           "shape-unknown-input": ("--input-shape", "nosuch=1x8"), "shape-wrong-rank": ("--input-shape", "x=1x8x1"),
           "shape-contradicts": ("--input-shape", "x=2x8"), "shape-huge": ("--input-shape", "x=1x" + "9" * 30),
           "shape-float": ("--input-shape", "x=1.5x8"), "memory-bad": ("--memory", "ram=lots"),
           "memory-too-small": ("--memory", "ram=1"), "memory-unknown-kind": ("--memory", "disk=1M"),
           "freeze-unknown": ("--freeze", "nosuch=1"), "freeze-bad-value": ("--freeze", "x=abc"),
           "freeze-count": ("--freeze", "x=1,2,3"), "knobs-missing": ("--knobs", "nosuch.toml"),
           "knobs-directory": ("--knobs", "."), "unknown-option": ("--frobnicate",),
           "output-is-file": ("-o", "model.onnx")}
    cases = [Case(f"option-{label}", base, args, expect="error") for label, args in bad.items()]
    cases.append(Case("option-missing-model-argument", base, expect="error", argv=("build", "--target")))
    cases.append(Case("option-no-command", base, expect="error", argv=()))
    cases.append(Case("option-model-is-directory", base, expect="error", model_file="dir.onnx/"))
    cases.append(Case("option-empty-file", b"", expect="error"))
    return cases


def deep_chain(count: int = 10_000) -> Case:
    nodes = [helper.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}" if i < count - 1 else "y"], name=f"relu{i}")
             for i in range(count)]
    return Case(f"deep-chain-{count}", _bytes(_model(nodes, [_f32("x", [1, 16])], [_f32("y", [1, 16])])), expect="ok")


# --------------------------------------------------------------------------- mutants of valid models

# Mutants per run: a modest number in CI, more for a long run (see the module's docstring). Of the
# mutants that build, up to AOT_HOSTILE_COMPARED per chunk also run and are compared with onnxruntime.
MUTANTS = int(os.environ.get("AOT_HOSTILE_MUTANTS", "400"))
COMPARED = int(os.environ.get("AOT_HOSTILE_COMPARED", "2"))
MUTANT_BASES = ("mlp", "cnn", "contrib", "vision", "shapes", "reduce", "index", "qpool")

_ODD_INTS = (0, -1, -2, 2, 3, 7, 1 << 31, 1 << 40, (1 << 63) - 1, -(1 << 63))
_ODD_FLOATS = (0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e30, -1e-30)
_ODD_STRINGS = ("", "SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET", "linear", "cubic", "nearest", "DCR", "CRD",
                "reflect", "edge", "wrap", "bogus", "half_pixel", "floor")


def _odd_ints(values: list[int], rng: np.random.Generator) -> list[int]:
    """A list of ints like `values` but of the wrong length, or with a zero, negative, huge or repeated entry."""
    values = list(values) or [1]
    i = int(rng.integers(len(values)))
    odd = int(rng.choice(_ODD_INTS))
    choices = [values[:-1], values + [values[-1]], [], values * 2, values[:i] + [odd] + values[i + 1:],
               [0] * len(values), [-v - 1 for v in values], values[::-1], [values[0]] * len(values),
               [int(v) for v in rng.integers(-3, 6, int(rng.integers(1, 7)))]]
    return choices[int(rng.integers(len(choices)))]


def _odd_value(attr: AttributeProto, rng: np.random.Generator) -> AttributeProto | None:
    """The attribute with a value of its own type that is wrong, or now and then of another type."""
    if rng.random() < 0.1:      # another type altogether
        value = [rng.choice(_ODD_INTS), 1.5, "1", [1.0, 2.0], [1, 2]][int(rng.integers(5))]
        return helper.make_attribute(attr.name, value.item() if isinstance(value, np.generic) else value)
    if attr.type == AttributeProto.INT:
        return helper.make_attribute(attr.name, int(rng.choice(_ODD_INTS)))
    if attr.type == AttributeProto.INTS:
        return helper.make_attribute(attr.name, _odd_ints(list(attr.ints), rng), attr_type=AttributeProto.INTS)
    if attr.type == AttributeProto.FLOAT:
        return helper.make_attribute(attr.name, float(rng.choice(_ODD_FLOATS)))
    if attr.type == AttributeProto.FLOATS:
        floats = [float(rng.choice(_ODD_FLOATS)) for _ in range(int(rng.integers(0, 5)))]
        return helper.make_attribute(attr.name, floats, attr_type=AttributeProto.FLOATS)
    if attr.type == AttributeProto.STRING:
        return helper.make_attribute(attr.name, str(rng.choice(_ODD_STRINGS)))
    return None


def _pick(items: list, rng: np.random.Generator):
    return items[int(rng.integers(len(items)))] if items else None


def mutate_attribute(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """One attribute of one node gets an odd value."""
    node = _pick([n for n in m.graph.node if n.attribute], rng)
    if node is None:
        return None
    attr = _pick(list(node.attribute), rng)
    new = _odd_value(attr, rng)
    if new is None:
        return None
    _set_attr(m, node.name, new)
    return f"{node.name}.{attr.name} = {helper.get_attribute_value(new)!r}"[:200]


def add_attribute(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """A node gets an attribute its op declares but the node did not set, with an odd value."""
    node = _pick(list(m.graph.node), rng)
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=17, domain=node.domain)
    except onnx.defs.SchemaError:
        return None
    have = {a.name for a in node.attribute}
    kinds = {AttributeProto.INT: [1], AttributeProto.INTS: [1, 1], AttributeProto.FLOAT: [1.0],
             AttributeProto.FLOATS: [1.0], AttributeProto.STRING: ["x"]}
    name = _pick(sorted(n for n, a in schema.attributes.items() if n not in have and int(a.type) in kinds), rng)
    if name is None:
        return None
    kind = int(schema.attributes[name].type)
    blank = helper.make_attribute(name, kinds[kind][0] if kind in (AttributeProto.INT, AttributeProto.FLOAT,
                                                                    AttributeProto.STRING) else kinds[kind],
                                  attr_type=kind)
    new = _odd_value(blank, rng)
    node.attribute.append(new)
    return f"{node.name}.{name} += {helper.get_attribute_value(new)!r}"[:200]


def mutate_constant(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """A small constant input (shape, axes, starts, pads, indices, scales, zero points) gets odd values."""
    t = _pick([t for t in m.graph.initializer if np.prod(t.dims) <= 16], rng)
    if t is None:
        return None
    array = numpy_helper.to_array(t)
    flat = array.reshape(-1).tolist()
    if array.dtype.kind == "f":
        new = np.array([float(rng.choice(_ODD_FLOATS)) if rng.random() < 0.5 else v for v in flat] or [0.0])
        new = new.reshape(array.shape) if new.size == array.size else new
    elif array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        values = [min(max(v, int(info.min)), int(info.max)) for v in _odd_ints(flat, rng)]
        new = np.array(values, np.int64)
        new = new.reshape(array.shape) if new.size == array.size else new
    else:
        return None
    t.CopyFrom(numpy_helper.from_array(new.astype(array.dtype), t.name))
    return f"{t.name} = {new.tolist()!r}"[:200]


def reshape_initializer(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """An initializer gets other dims (one changed, one more or one fewer), its data remade to match."""
    t = _pick(list(m.graph.initializer), rng)
    dims = _odd_dims(list(t.dims), rng)
    array = numpy_helper.to_array(t)
    if array.dtype.kind == "f":
        new = rng.standard_normal(dims).astype(array.dtype)
    else:
        new = rng.integers(0, 4, dims).astype(array.dtype)
    t.CopyFrom(numpy_helper.from_array(new, t.name))
    return f"{t.name}: {list(array.shape)} -> {dims}"


def reshape_input(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """A graph input (or output) is declared with other dims."""
    vi = _pick(list(m.graph.input) + list(m.graph.output), rng)
    shape = vi.type.tensor_type.shape
    old = [d.dim_value for d in shape.dim]
    dims = _odd_dims(old, rng)
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = d
    return f"{vi.name}: {old} -> {dims}"


def _odd_dims(dims: list[int], rng: np.random.Generator) -> list[int]:
    i = int(rng.integers(len(dims))) if dims else 0
    choices = [dims[:i] + [max(1, dims[i] + int(rng.choice([-1, 1, 2])))] + dims[i + 1:] if dims else [2],
               dims[:i] + [dims[i] * 2] + dims[i + 1:] if dims else [3], [1] + dims, dims + [1], dims[:-1],
               dims[1:], dims[::-1]]
    return choices[int(rng.integers(len(choices)))]


def retype_initializer(m: onnx.ModelProto, rng: np.random.Generator) -> str | None:
    """An initializer's element type changes (its values converted)."""
    t = _pick(list(m.graph.initializer), rng)
    array = numpy_helper.to_array(t)
    dtype = np.dtype(str(rng.choice(["float64", "float16", "int64", "int32", "int8", "uint8", "bool"])))
    with np.errstate(all="ignore"):
        t.CopyFrom(numpy_helper.from_array(array.astype(dtype), t.name))
    return f"{t.name}: {array.dtype} -> {dtype}"


MUTATIONS = (mutate_attribute, mutate_attribute, add_attribute, mutate_constant, mutate_constant,
             reshape_initializer, reshape_input, retype_initializer)


def mutant(i: int) -> Case:
    """Mutant i: a seed model with one or two mutations, or a few flipped bits; the same for the same i."""
    rng = np.random.default_rng([SEED, i])
    base = MUTANT_BASES[i % len(MUTANT_BASES)]
    model = BASES[base]()
    if rng.random() < 0.05:
        data = bytearray(_bytes(model))
        for _ in range(int(rng.integers(1, 5))):
            bit = int(rng.integers(0, 8 * len(data)))
            data[bit // 8] ^= 1 << (bit % 8)
        return Case(f"mutant-{base}-{i}", bytes(data), note="bit flips")
    notes = []
    for _ in range(1 + int(rng.random() < 0.2)):
        for _attempt in range(8):
            note = MUTATIONS[int(rng.integers(len(MUTATIONS)))](model, rng)
            if note is not None:
                notes.append(note)
                break
    return Case(f"mutant-{base}-{i}", _bytes(model), note="; ".join(notes))


def mutants(count: int = MUTANTS) -> list[Case]:
    return [mutant(i) for i in range(count)]


def corpus() -> list[Case]:
    rng = np.random.default_rng(SEED)
    cases = (fuzzed(rng) + structure() + [nested_ifs()] + dims_and_dtypes() + ops_and_opsets() + attributes()
             + tensor_data() + external_data() + names() + options())
    assert len({c.name for c in cases}) == len(cases), "case names must be unique"
    return cases


CORPUS = corpus()


# --------------------------------------------------------------------------- running a case


@dataclass(frozen=True)
class Outcome:
    code: int | None        # exit code; None if an exception escaped
    stdout: str
    stderr: str
    raised: str             # the traceback, if one escaped
    warned: list[str]       # warnings the run emitted (the CLI would print them)
    outputs: list[str] | None   # files in the output directory, None if there is none
    strays: list[str]       # paths created, changed or removed outside the output directory


def snapshot(root: Path, skip: Path) -> dict[str, tuple]:
    """Every path under root (not following symlinks) except `skip` and what is under it, with what
    identifies its content: mode, size and modification time for files and links, mode for directories
    (a directory's times change when the output directory appears in it)."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != skip]
        for name in dirnames + filenames:
            st = (here / name).lstat()
            seen[str((here / name).relative_to(root))] = ((st.st_mode,) if stat.S_ISDIR(st.st_mode)
                                                          else (st.st_mode, st.st_size, st.st_mtime_ns))
    return seen


def run_case(case: Case, root: Path) -> Outcome:
    """Run `aot build` on the case in root/<case name>/, with that directory as the working directory."""
    where = root / case.name
    where.mkdir(parents=True)
    if case.model_file.endswith("/"):
        (where / case.model_file).mkdir()
    else:
        (where / case.model_file).write_bytes(case.model)
    for name, data in case.files.items():
        (where / name).write_bytes(data)
    for name, target in case.links.items():
        (where / name).symlink_to(target)
    out = where / "out"
    argv = list(case.argv if case.argv is not None else ("build", case.model_file.rstrip("/"), "-o", "out", *case.args))
    before = snapshot(root, out)
    stdout, stderr, raised, code = io.StringIO(), io.StringIO(), "", None
    cwd = os.getcwd()
    try:
        os.chdir(where)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                code = cli.main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:       # noqa: B036 - what this test looks for: anything escaping main
                raised = traceback.format_exc()
    finally:
        os.chdir(cwd)
    after = snapshot(root, out)
    strays = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    outputs = sorted(os.listdir(out)) if out.is_dir() else None
    return Outcome(code, stdout.getvalue(), stderr.getvalue(), raised,
                   [f"{w.category.__name__}: {w.message}" for w in caught], outputs, strays)


# a phase that took a while on a loaded machine says so on stderr: progress, not a complaint
PROGRESS_LINE = re.compile(r"aot: [^:]+: (\d+/\d+ in )?\d+\.\d s")


def problems(case: Case, outcome: Outcome) -> list[str]:
    """What is wrong with how aot handled the case (nothing, for a pass)."""
    if outcome.raised:
        return [f"raised:\n{outcome.raised}"]
    found = []
    if outcome.strays:
        found.append(f"wrote outside the output directory: {outcome.strays[:5]}")
    if outcome.warned:
        found.append(f"printed warnings: {outcome.warned[:3]}")
    if outcome.code == 0:
        if case.expect == "error":
            found.append(f"built an invalid model: {outcome.stdout.strip()}")
        suffixes = (".o", ".h", ".c", ".a", ".mk")
        named = sorted(os.path.splitext(f)[1] for f in outcome.outputs or [] if f.endswith(suffixes))
        others = {"plan.json", "metadata.json", "report.txt", "report.svg", "CMakeLists.txt"}
        if (outcome.outputs is None or len(outcome.outputs) != len(named) + len(others)
                or named != [".a", ".c", ".h", ".mk", ".o"] or not others <= set(outcome.outputs)):
            found.append(f"succeeded without a complete output directory: {outcome.outputs}")
        said = [line for line in outcome.stderr.splitlines() if not PROGRESS_LINE.fullmatch(line)]
        if said:
            found.append(f"succeeded but printed to stderr: {outcome.stderr!r}")
        return found
    if case.expect == "ok":
        found.append(f"refused a valid model: {outcome.stderr.strip()}")
    lines = outcome.stderr.strip().splitlines()
    if outcome.code == 2 and lines and lines[0].startswith("usage: "):
        lines = [line for line in lines if not line.startswith(("usage: ", " "))]   # argparse's usage, wrapped
    if len(lines) != 1 or not lines[0].startswith(("aot: error: ", "aot build: error: ")):
        found.append(f"exit {outcome.code} without one error line: {outcome.stderr!r}")
    if outcome.outputs is not None:
        found.append(f"failed but left an output directory: {outcome.outputs}")
    return found


CHUNK_CASES = [CORPUS[i::CHUNKS] for i in range(CHUNKS)]


def test_corpus_covers_every_category():
    prefixes = {c.name.split("-")[0] for c in CORPUS}
    assert prefixes == {"truncated", "bitflip", "random", "structure", "dims", "dtype", "ops", "attribute", "data",
                        "external", "name", "option"}
    assert len(CORPUS) >= 300
    assert sum(c.expect == "error" for c in CORPUS) >= 100 and sum(c.expect == "ok" for c in CORPUS) >= 50


def c_problems(case: Case, root: Path) -> list[str]:
    """The wrapper of a model with hostile names compiles as strict C99 (names become C identifiers)."""
    source = next((root / case.name / "out").glob("*.c"))
    proc = subprocess.run([*STRICT_C, "-fsyntax-only", str(source)], capture_output=True, text=True)
    return [f"its C wrapper does not compile: {proc.stderr.strip()[:400]}"] if proc.returncode else []


def svg_problems(case: Case, root: Path) -> list[str]:
    """report.svg of a model with hostile names is still XML (names escaped, characters XML cannot hold
    replaced)."""
    try:
        ElementTree.parse(root / case.name / "out" / "report.svg")
    except ElementTree.ParseError as err:
        return [f"its report.svg is not XML: {err}"]
    return []


STRICT_C = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_hostile_corpus(chunk, tmp_path, home):
    root = tmp_path / "cases"
    failures = []
    for case in CHUNK_CASES[chunk]:
        outcome = run_case(case, root)
        found = problems(case, outcome)
        if not found and outcome.code != 0 and case.name.startswith("attribute-"):
            found = named_in_error(case, outcome)
        if not found and outcome.code == 0 and case.name.startswith("name-"):
            found = svg_problems(case, root) + (c_problems(case, root) if shutil.which(STRICT_C[0]) else [])
        failures += [f"{case.name}: {p}" for p in found]
    assert not failures, "\n".join(failures)
    assert not list(home.rglob("*")), "written into the home directory"



def test_deep_chain_builds(tmp_path):
    """10,000 nodes in a chain: no recursion as deep as the graph, no pass quadratic in its size."""
    case = deep_chain()
    outcome = run_case(case, tmp_path)
    assert not problems(case, outcome), problems(case, outcome)


# --------------------------------------------------------------------------- mutants, against onnxruntime

MUTANT_CHUNKS = 8
MUTANT_CASES = mutants()


def named_in_error(case: Case, outcome: Outcome) -> list[str]:
    """A refusal names the model, or a node, op or tensor of it (an undecodable mutant: the model)."""
    line = outcome.stderr.strip().splitlines()[-1] if outcome.stderr.strip() else ""
    try:
        graph = onnx.load_from_string(case.model).graph
        names = {n.name for n in graph.node} | {n.op_type for n in graph.node} | {t.name for t in graph.initializer}
    except Exception:       # noqa: BLE001 - bytes that do not parse name nothing but the model
        names = set()
    if case.model_file in line or any(f"'{name}'" in line or f"({name})" in line for name in names if name):
        return []
    return [f"its error names neither the model nor a node, op or tensor: {line!r}"]


def differs_from_onnxruntime(case: Case, root: Path, ort_home: Path) -> list[str]:
    """Run a built mutant through its C entry point and onnxruntime on the same random inputs: the same
    results (a mutant onnxruntime refuses is not compared). Where onnxruntime's output holds NaN or
    infinity (NaN weights, say), only the elements finite in both are compared: libraries propagate
    NaN through max and min differently, and IEEE leaves that open."""
    from aot import api, reference
    from aot.errors import AotError, RunError

    proto = onnx.load_from_string(case.model)
    feeds = reference.random_inputs(proto)
    with pytest.MonkeyPatch.context() as env:      # importing onnxruntime writes under the home directory
        env.setenv("HOME", str(ort_home))
        env.setenv("XDG_CACHE_HOME", str(ort_home / ".cache"))
        try:
            expected = reference.reference_outputs(proto, feeds)
        except RunError:
            return []
    try:
        got = api.run(root / case.name / case.model_file, feeds, out_dir=root / case.name / "run", timeout=60)
    except AotError as err:
        return [f"built, but running it failed: {err}"]
    found = []
    unordered = {out: next((a.i for a in n.attribute if a.name == "axis"), -1)    # TopK outputs: their axis
                 for n in proto.graph.node if n.op_type == "TopK" for out in n.output
                 if any(a.name == "sorted" and a.i == 0 for a in n.attribute)}
    for name, want in expected.items():
        have = got[name].astype(np.float64)
        want = want.astype(np.float64)
        if name in unordered:       # TopK with sorted=0 returns its k elements in any order
            have, want = np.sort(have, axis=unordered[name]), np.sort(want, axis=unordered[name])
        if have.shape != want.shape:
            found.append(f"output '{name}' has shape {list(have.shape)}, onnxruntime's {list(want.shape)}")
            continue
        same = (have == want) | (np.isnan(have) & np.isnan(want))
        if not np.all(np.isfinite(want)):   # libraries take the max of NaN and x differently: compare the rest
            same |= ~np.isfinite(want) | ~np.isfinite(have)
        comparison = reference.compare({name: np.where(same, 0, have)}, {name: np.where(same, 0, want)})[0]
        if not comparison.ok:
            found.append(f"output '{name}' differs from onnxruntime's by {comparison.max_abs:.3g} "
                         f"(scale {comparison.scale:.3g})")
    return found


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty home directory (and cache) for the test: a build must leave it empty."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(path / ".cache"))
    return path


@pytest.mark.parametrize("chunk", range(MUTANT_CHUNKS))
def test_mutants(chunk, tmp_path, home):
    """Seed models with attribute values, constant inputs, tensor shapes or element types changed (or
    bits flipped): each builds, or is refused with one error line naming what is at fault; no
    traceback, nothing written outside the output directory or into the home directory. A few that
    build (COMPARED per chunk) also run and must agree with onnxruntime where it runs them."""
    root, ort_home = tmp_path / "cases", tmp_path / "ort-home"
    root.mkdir()
    failures, compared = [], 0
    for case in MUTANT_CASES[chunk::MUTANT_CHUNKS]:
        outcome = run_case(case, root)
        found = problems(case, outcome)
        if not found and outcome.code != 0:
            found = named_in_error(case, outcome)
        if not found and outcome.code == 0 and compared < COMPARED:
            compared += 1
            found = differs_from_onnxruntime(case, root, ort_home)
        failures += [f"{case.name} ({case.note}): {p}" for p in found]
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert not written, f"written into the home directory: {written}"
    assert not failures, "\n".join(failures)


def test_mutants_cover_the_seeds_and_mutations():
    """The default count reaches every seed model and every kind of mutation."""
    assert {c.name.split("-")[1] for c in MUTANT_CASES} == set(MUTANT_BASES)
    kinds = {"=", "+=", "->", ":", "bit flips"}
    assert all(any(k in c.note for c in MUTANT_CASES) for k in kinds)
    assert len(MUTANT_CASES) == MUTANTS


def test_build_never_imports_onnxruntime(tmp_path):
    """Building a model with onnxruntime's contrib ops reads their schemas from aot's own table:
    importing onnxruntime would write a device id under the home directory."""
    (tmp_path / "model.onnx").write_bytes(_bytes(contrib()))
    home = tmp_path / "home"
    home.mkdir()
    script = ("import sys; from aot import cli; code = cli.main(['build', 'model.onnx', '-o', 'out']); "
              "sys.exit(code or 3 * ('onnxruntime' in sys.modules))")
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not list(home.rglob("*"))


def test_contrib_schemas_match_onnxruntime(home):
    """aot's table of the contrib ops it compiles says what onnxruntime's schemas say."""
    ort = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
    from aot.frontend.validate import CONTRIB_SCHEMAS

    theirs = {(s.domain, s.name): s for s in ort.get_all_operator_schema()}
    for key, ours in CONTRIB_SCHEMAS.items():
        schema = theirs[key]
        assert (ours.since_version, ours.min_input, ours.max_input, ours.min_output, ours.max_output) == (
            schema.since_version, schema.min_input, schema.max_input, schema.min_output, schema.max_output), key
        assert {n: (a.type, a.required) for n, a in ours.attributes.items()} == {
            n: (int(a.type), a.required) for n, a in schema.attributes.items()}, key
