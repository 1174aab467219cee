"""The op registry and the two verifiers: Graph.verify after each pass, the kernel-IR verifier."""

from __future__ import annotations

import numpy as np
import pytest

from aot.errors import InternalError
from aot.frontend.functions import FRONTEND_OPS
from aot.graph.ir import Graph, Node, Value
from aot.graph.quant import QuantParams
from aot.graph.verify import verify
from aot.kernel import ir as k
from aot.kernel.verify import verify_kernel
from aot.registry import REGISTRY, Layout, op_def, operand, with_operands


def test_every_op_that_canonicalizes_to_a_kernel_op_can_be_lowered():
    """Each aot op a layout or fusion fact mentions has a kernel or is a view."""
    for name, definition in REGISTRY.items():
        if definition.layout in (Layout.NHWC, Layout.FOLLOW, Layout.TRANSPOSE):
            assert definition.lower is not None or definition.view, name
        if definition.axis_attrs:
            assert definition.layout is Layout.FOLLOW, name


def test_unknown_ops_have_no_facts():
    unknown = op_def("NoSuchOp")
    assert unknown.canonical is None and unknown.lower is None and not unknown.view


def _graph(nodes, values, constants=None, inputs=("x",), outputs=("y",)) -> Graph:
    return Graph("g", tuple(nodes), {v.name: v for v in values}, constants or {}, inputs, outputs)


_CONV = {"kernel": (1, 1), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "group": 1}


def test_operands_are_named():
    conv = Node("Conv", "c", ("x", "w"), ("y",))
    assert (operand(conv, "weight"), operand(conv, "bias"), operand(conv, "residual")) == ("w", "", "")
    fused = with_operands(conv, residual="r")
    assert fused.inputs == ("x", "w", "", "r") and operand(fused, "residual") == "r"
    with pytest.raises(InternalError, match="op Conv has no operand 'scale'"):
        operand(conv, "scale")


def test_verify_accepts_a_well_formed_graph():
    g = _graph([Node("Add", "add", ("x", "c"), ("y",))],
               [Value("x", (2, 3)), Value("c", (3,)), Value("y", (2, 3))], {"c": np.ones(3, np.float32)})
    assert verify(g, "test") is g


@pytest.mark.parametrize("nodes, values, constants, message", [
    ([Node("Add", "add", ("x", "z"), ("y",))], [Value("x", (2,)), Value("y", (2,))], {},
     "node 'add' (Add): reads 'z'"),
    ([Node("Relu", "a", ("x",), ("y",)), Node("Relu", "b", ("x",), ("y",))], [Value("x", (2,)), Value("y", (2,))], {},
     "node 'b' (Relu): writes 'y', which already has a value"),
    ([Node("Relu", "a", ("x",), ("t",)), Node("Relu", "a", ("t",), ("y",))],
     [Value("x", (2,)), Value("t", (2,)), Value("y", (2,))], {}, "node 'a' (Relu): another node has the same name"),
    ([Node("Add", "add", ("x", "c"), ("y",))], [Value("x", (2, 3)), Value("c", (3,)), Value("y", (2, 4))],
     {"c": np.ones(3, np.float32)}, "operands broadcast to [2, 3]"),
    ([Node("Add", "add", ("x", "c"), ("y",))], [Value("x", (2, 3)), Value("c", (4,)), Value("y", (2, 3))],
     {"c": np.ones(3, np.float32)}, "constant 'c' is float32[3], its value says float32[4]"),
    ([Node("Unary", "u", ("x",), ("y",), {"fn": "relu", "params": ()})], [Value("x", (2, 3)), Value("y", (3, 2))],
     {}, "output shape [3, 2] differs from the input's [2, 3]"),
    ([Node("Relu", "r", ("x",), ("y",))], [Value("x", (2,), quant=QuantParams.per_tensor(0.1, 0)), Value("y", (2,))],
     {}, "'x' is float32 but has quantization parameters"),
    ([Node("Conv", "c", ("x", "w"), ("y",), _CONV)],
     [Value("x", (1, 2, 2, 3), "int8", QuantParams.per_tensor(0.1, 0)),
      Value("w", (4, 1, 1, 3), "int8", QuantParams(np.ones(3), np.zeros(3, np.int64), 0)),
      Value("y", (1, 2, 2, 4), "int8", QuantParams.per_tensor(0.2, 0))],
     {"w": np.ones((4, 1, 1, 3), np.int8)}, "'w' [4, 1, 1, 3]: per-channel parameters of size 3 on axis 0"),
    ([Node("Conv", "c", ("x", "w"), ("y",), _CONV)],
     [Value("x", (1, 2, 2, 3), "int8", QuantParams.per_tensor(0.1, 0)), Value("w", (4, 1, 1, 3), "int8"),
      Value("y", (1, 2, 2, 4), "int8", QuantParams.per_tensor(0.2, 0))],
     {"w": np.ones((4, 1, 1, 3), np.int8)}, "integer op without per-channel parameters on its weight 'w'"),
    ([Node("Conv", "c", ("x", "w", "", "x", "x"), ("y",), _CONV)],
     [Value("x", (1, 2, 2, 3)), Value("w", (4, 1, 1, 3)), Value("y", (1, 2, 2, 4))],
     {"w": np.ones((4, 1, 1, 3), np.float32)}, "5 inputs for the operands"),
])
def test_verify_names_the_node_at_fault(nodes, values, constants, message):
    with pytest.raises(InternalError, match="after test: .*" + message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("]", r"\]")):
        verify(_graph(nodes, values, constants), "test")


def _kernel(build) -> k.Kernel:
    x, y = k.Buffer("x", "f32", 16), k.Buffer("y", "f32", 16)
    b = k.Builder()
    build(b, x, y)
    return k.Kernel("kern", (x, y), b.block())


def test_kernel_verifier_accepts_vector_loops_in_bounds():
    def body(b, x, y):
        with b.loop("i", 0, 16, 4) as i:
            b.store(y, i, x.vec(i, 4) * 2.0)
    verify_kernel(_kernel(body))


@pytest.mark.parametrize("body, message", [
    (lambda b, x, y: _loop(b, 0, 16, 4, lambda i: b.store(y, i + 1, x.vec(i, 4))), r"stores to y\[1..16\]"),
    (lambda b, x, y: _loop(b, 0, 16, 1, lambda i: b.store(y, i, x[i + 1])), r"loads from x\[1..16\]"),
    (lambda b, x, y: b.store(y, 0, k.Cast(x[0], "i32")), "stores i32 into y"),
    (lambda b, x, y: b.store(y, k.Var("nowhere"), x[0]), "reads nowhere outside"),
    (lambda b, x, y: b.assign(b.let("v", x[0]), x[1]), "assigns v0, which is not a mutable local"),
    (lambda b, x, y: b.store(y, 0, k.Bin("add", x[0], k.Cast(x[1], "i32"))), "add of f32x1 and i32x1"),
    (lambda b, x, y: b.emit(k.Tile("dot", (0, 4, 8))), r"tile_dot of tiles \[0, 4, 8\]"),
    (lambda b, x, y: b.emit(k.Tile("zero", (0, 1))), r"tile_zero of tiles \[0, 1\]"),
    (lambda b, x, y: b.emit(k.Tile("config", buf=k.Buffer("cfg", "u8", 16, np.zeros(16, np.uint8)))),
     "tile configuration cfg of 16 bytes, not 64"),
    (lambda b, x, y: b.emit(k.Tile("load", (4,), x, k.const(16), k.const(64))), r"loads from x\[16..16\]"),
])
def test_kernel_verifier_names_the_kernel_and_fault(body, message):
    with pytest.raises(InternalError, match="kernel kern: .*" + message):
        verify_kernel(_kernel(body))


def _loop(b, start, stop, step, body):
    with b.loop("i", start, stop, step) as i:
        body(i)


def _pair_loop(steps: int = 3, stride: int = 16, weights: int = 0, dtype: str = "i8", local: bool = True) -> k.Kernel:
    """A 2 x 2 tile's PairLoop over a 32-byte input and 24 bytes of weights."""
    x, w = k.Buffer("x", dtype, 32), k.Buffer("w", "i8", 24, np.zeros(24, np.int8))
    b = k.Builder()
    make = b.local if local else b.let
    accs = tuple(tuple(make("acc", k.const(0, "i32")) for _ in range(2)) for _ in range(2))
    b.emit(k.PairLoop(accs, x, k.const(0), stride, w, k.const(weights), steps))
    return k.Kernel("kern", (x,), b.block())


def test_kernel_verifier_bounds_a_pair_loop_by_its_last_words():
    verify_kernel(_pair_loop(stride=20))     # pixel 1's last word ends at byte 32, the weights' at 24


@pytest.mark.parametrize("kernel, message", [
    (_pair_loop(stride=21), r"loads from x\[0..32\]"),
    (_pair_loop(weights=4), r"loads from w\[4..27\]"),
    (_pair_loop(dtype="f32"), "f32 activations and i8 weights, not bytes"),
    (_pair_loop(local=False), "accumulates into acc0, which is no mutable int32 local"),
    (_pair_loop(steps=0), "over 0 steps"),
])
def test_kernel_verifier_rejects_a_pair_loop_outside_its_buffers(kernel, message):
    with pytest.raises(InternalError, match="kernel kern: .*" + message):
        verify_kernel(kernel)


# Default-domain ops of the installed onnx that aot does not compile yet (issue: every op onnxruntime's CPU
# provider runs). An op added to onnx, or one aot learns, changes this set: the test below says which.
NOT_YET = {
    "DynamicQuantizeLinear", "SwiGLU",
    "LinearAttention", "CausalConvWithState", "TensorScatter", "BitCast", "BitShift", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXor", "Col2Im", "Compress", "ConvInteger", "MatMulInteger", "CumProd", "DeformConv",
    "Einsum", "MaxRoiPool", "MelWeightMatrix", "NonMaxSuppression", "Unique",
    "Optional", "OptionalGetElement", "OptionalHasElement",
    # strings, images: refused by design so far
    "RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit", "ImageDecoder",
}
FRONTEND = FRONTEND_OPS
# compiled through the function body ONNX defines them by (aot/frontend/functions.py; tests/test_ops_functions.py)
EXPANDED = {"Attention", "RotaryEmbedding", "AffineGrid", "CenterCropPad"}
DEFINED_OPSET = 28      # the installed onnx's (1.23): ops of a newer onnx's opsets show up when this moves


def test_every_default_domain_op_is_compiled_or_a_known_gap():
    import onnx.defs

    from aot.ops import _import_op_modules

    _import_op_modules()
    ops = {s.name for s in onnx.defs.get_all_schemas_with_history()
           if s.domain == "" and not s.deprecated and s.since_version <= DEFINED_OPSET}
    missing = ops - set(REGISTRY) - FRONTEND - EXPANDED
    assert missing - NOT_YET == set(), f"ops onnx defines that aot neither compiles nor lists: {missing - NOT_YET}"
    assert NOT_YET - missing == set(), f"listed as gaps but compiled now (take them off): {NOT_YET - missing}"
