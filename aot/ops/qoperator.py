"""QOperator ops (QLinearConv, QLinearMatMul, and onnxruntime's com.microsoft QGemm, QLinearAdd, ...):
each is expanded into DequantizeLinear -> float op -> QuantizeLinear, the QDQ format, which
graph/passes/lower_quantized.py then turns into integer kernels."""

from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.ir import Node, Rewriter
from aot.registry import define


def _dq(rw: Rewriter, node: Node, x: str, scale: str, zp: str, axis: int = 1) -> str:
    out = rw.value(x + "_dq", rw.values[x].shape)
    rw.add("DequantizeLinear", node.name + "_dq", [x, scale, zp], [out], axis=axis)
    return out


def _q(rw: Rewriter, node: Node, xf: str, scale: str, zp: str, out: str) -> None:
    rw.add("QuantizeLinear", node.name + "_q", [xf, scale, zp], [out])


def _padded(node: Node, count: int) -> tuple[str, ...]:
    """The node's inputs with absent optional ones at the end (a zero point) as ""."""
    return tuple(node.inputs) + ("",) * (count - len(node.inputs))


def _output_zero_point(rw: Rewriter, node: Node, zp: str, like: str) -> str:
    """The output zero point; an absent one is 0 of the type of `like` (the input), as onnxruntime reads it."""
    return zp or rw.constant(node.name + "_y_zero_point", np.zeros((), rw.values[like].dtype))


def _float_value(rw: Rewriter, like: str, hint: str) -> str:
    return rw.value(hint, rw.values[like].shape)


def _bias_scale(rw: Rewriter, x_scale: str, w_scale: str) -> str:
    return rw.constant(w_scale + "_bias_scale", (rw.constants[x_scale] * rw.constants[w_scale]).astype(np.float32))


def _expand_qlinear_conv(rw: Rewriter, node: Node) -> None:
    x, xs, xz, w, ws, wz, ys, yz = node.inputs[:8]
    inputs = [_dq(rw, node, x, xs, xz), _dq(rw, node, w, ws, wz, axis=0)]
    if len(node.inputs) > 8 and node.inputs[8]:
        zero = rw.constant("zero_i32", np.zeros(rw.constants[ws].shape, np.int32))
        inputs.append(_dq(rw, node, node.inputs[8], _bias_scale(rw, xs, ws), zero, axis=0))
    yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f")
    rw.add("Conv", node.name, inputs, [yf], **node.attrs)
    _q(rw, node, yf, ys, yz, node.outputs[0])


def _expand_qlinear_matmul(rw: Rewriter, node: Node) -> None:
    a, as_, az, b, bs, bz, ys, yz = node.inputs
    yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f")
    rw.add("MatMul", node.name, [_dq(rw, node, a, as_, az), _dq(rw, node, b, bs, bz, axis=-1)], [yf])
    _q(rw, node, yf, ys, yz, node.outputs[0])


def _expand_qgemm(rw: Rewriter, node: Node) -> None:
    a, as_, az, b, bs, bz = node.inputs[:6]
    c = node.inputs[6] if len(node.inputs) > 6 else ""
    trans_b = int(node.attrs.get("transB", 0))
    inputs = [_dq(rw, node, a, as_, az), _dq(rw, node, b, bs, bz, axis=0 if trans_b else 1)]
    if c:
        zero = rw.constant("zero_i32", np.zeros(rw.constants[bs].shape, np.int32))
        inputs.append(_dq(rw, node, c, _bias_scale(rw, as_, bs), zero, axis=0))
    attrs = {k: v for k, v in node.attrs.items() if k in ("alpha", "transA", "transB")}
    quantized_out = len(node.inputs) > 7 and node.inputs[7]
    yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f") if quantized_out else node.outputs[0]
    if quantized_out:
        rw.values[yf] = rw.values[yf].__class__(yf, rw.values[yf].shape, "float32")
    rw.add("Gemm", node.name, inputs, [yf], **attrs)
    if quantized_out:
        _q(rw, node, yf, node.inputs[7], node.inputs[8] if len(node.inputs) > 8 else "", node.outputs[0])


def _expand_binary(op: str):
    def expand(rw: Rewriter, node: Node) -> None:
        a, as_, az, b, bs, bz, ys, yz = _padded(node, 8)
        yz = _output_zero_point(rw, node, yz, a)
        yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f")
        rw.add(op, node.name, [_dq(rw, node, a, as_, az), _dq(rw, node, b, bs, bz)], [yf])
        _q(rw, node, yf, ys, yz, node.outputs[0])
    return expand


def _expand_unary_io(op: str):
    """Ops whose inputs are (x, x_scale, x_zp, y_scale, y_zp)."""
    def expand(rw: Rewriter, node: Node) -> None:
        if node.attrs.get("channels_last", 0):
            raise UnsupportedOpError(f"node '{node.name}' ({node.op}): channels_last=1 is not supported")
        x, xs, xz, ys, yz = _padded(node, 5)
        yz = _output_zero_point(rw, node, yz, x)
        attrs = {k: v for k, v in node.attrs.items() if k not in ("channels_last", "domain", "opset")}
        yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f")
        rw.add(op, node.name, [_dq(rw, node, x, xs, xz)], [yf], **attrs)
        _q(rw, node, yf, ys, yz, node.outputs[0])
    return expand


def _expand_qlinear_concat(rw: Rewriter, node: Node) -> None:
    ys, yz, *triples = node.inputs
    parts = [_dq(rw, node, triples[i], triples[i + 1], triples[i + 2]) for i in range(0, len(triples), 3)]
    yf = _float_value(rw, node.outputs[0], node.outputs[0] + "_f")
    rw.add("Concat", node.name, parts, [yf], axis=node.attrs["axis"])
    _q(rw, node, yf, ys, yz, node.outputs[0])


_MS = "com.microsoft"
define("QLinearConv", expand_qdq=_expand_qlinear_conv)
define("QLinearMatMul", expand_qdq=_expand_qlinear_matmul)
define("QGemm", expand_qdq=_expand_qgemm, domain=_MS)
define("QLinearAdd", expand_qdq=_expand_binary("Add"), domain=_MS)
define("QLinearMul", expand_qdq=_expand_binary("Mul"), domain=_MS)
define("QLinearAveragePool", expand_qdq=_expand_unary_io("AveragePool"), domain=_MS)
define("QLinearGlobalAveragePool", expand_qdq=_expand_unary_io("GlobalAveragePool"), domain=_MS)
define("QLinearSigmoid", expand_qdq=_expand_unary_io("Sigmoid"), domain=_MS)
define("QLinearLeakyRelu", expand_qdq=_expand_unary_io("LeakyRelu"), domain=_MS)
define("QLinearSoftmax", expand_qdq=_expand_unary_io("Softmax"), domain=_MS)
define("QLinearConcat", expand_qdq=_expand_qlinear_concat, domain=_MS)
