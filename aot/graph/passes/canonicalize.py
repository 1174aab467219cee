"""Rewrite ONNX ops into the small op set the later passes and kernels know.

After this pass (shapes are NCHW, semantics ONNX's):
  Conv(x, w, b?)         2-D, attrs kernel/strides/pads(t,l,b,r)/dilations/group; w constant
  Gemm(x, w, b?)         x (M,K) @ w (K,N) constant + b (N,) constant
  MatMul(a, b)           both computed, batched (batch dims broadcast)
  Add/Sub/Mul/Div/Max/Min  numpy broadcasting
  Unary(x)               attrs fn, params: relu, clip, leaky_relu, sigmoid, tanh, hard_sigmoid, ...
  BatchNormalization     left for fold_batchnorm
  MaxPool/AveragePool    2-D, attrs kernel/strides/pads(t,l,b,r)/count_include_pad
  GlobalAveragePool/GlobalMaxPool, Transpose(perm), Concat(axis>=0), Pad(pads, mode, value),
  Softmax/LogSoftmax(axis>=0), Reduce(fn, axes) keeping dims, Slice(starts, steps) per axis
  Reshape(x)             a view: same bytes, new shape (Flatten, Squeeze, Unsqueeze, Identity, Dropout)
Anything else is refused with an error naming the node and its op.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from aot.errors import UnsupportedOpError
from aot.graph.ir import Graph, Node, Rewriter

Rule = Callable[[Rewriter, Node], None]


def canonicalize(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        rule = RULES.get(node.op)
        if rule is None or node.attrs.get("domain"):
            domain = f" from domain '{node.attrs['domain']}'" if node.attrs.get("domain") else ""
            raise UnsupportedOpError(f"node '{node.name}': op {node.op}{domain} is not supported "
                                     "(the README lists the supported ops)")
        for name in node.inputs:
            dtype = rw.values[name].dtype if name and name not in rw.constants else "float32"
            integer_ok = node.op in _INTEGER_OK or "quant" in node.attrs
            if dtype != "float32" and not (dtype in ("int8", "uint8") and integer_ok):
                raise UnsupportedOpError(f"node '{node.name}' ({node.op}): input '{name}' is {dtype}; only float32 "
                                         "tensors, and int8/uint8 ones of quantized ops, are supported")
        rule(rw, node)
    return rw.finish()


# Ops that move integer tensors without arithmetic (or convert them), so need no quantization parameters.
_INTEGER_OK = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "MaxPool", "Concat",
               "Slice", "Split", "DequantizeLinear"}


def _quant(node: Node) -> dict:
    """The node's quantization attributes, to carry over to its rewritten form."""
    return {k: node.attrs[k] for k in ("quant", "input_quant") if k in node.attrs}


def _refuse(node: Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"node '{node.name}' ({node.op}): {why}")


def _const(rw: Rewriter, node: Node, index: int, what: str) -> np.ndarray | None:
    """The constant at input `index`, None if the input is absent; refuse a computed one."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    name = node.inputs[index]
    if name not in rw.constants:
        raise _refuse(node, f"{what} must be a constant (an initializer), but '{name}' is computed")
    return rw.constants[name]


def _view(rw: Rewriter, node: Node, src: str, shape: tuple[int, ...], out: str | None = None) -> str:
    out = out or rw.like(f"{src}_view", src, shape)
    rw.add("Reshape", node.name + "_view", [src], [out], shape=tuple(shape))
    return out


# --- convolution and pooling -------------------------------------------------------------------

def _spatial_attrs(rw: Rewriter, node: Node, kernel: tuple[int, ...]) -> dict:
    rank = len(kernel)
    x = rw.values[node.inputs[0]].shape[2:]
    strides = tuple(node.attrs.get("strides", (1,) * rank))
    dilations = tuple(node.attrs.get("dilations", (1,) * rank))
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(x, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        pads = tuple(begin + end)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * rank)
    else:
        pads = tuple(node.attrs.get("pads", (0,) * (2 * rank)))
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads}


def _lift_1d(rw: Rewriter, node: Node, attrs: dict, weight: str | None = None) -> tuple[str, str, str | None]:
    """For 1-D ops: view x (N,C,L) as (N,C,1,L); return (x, out placeholder, weight) to use in 2-D."""
    x = node.inputs[0]
    n, c, length = rw.values[x].shape
    x2 = _view(rw, node, x, (n, c, 1, length))
    on, oc, ol = rw.values[node.outputs[0]].shape
    out2 = rw.like(node.outputs[0] + "_2d", node.outputs[0], (on, oc, 1, ol))
    w2 = None
    if weight is not None:
        w = rw.constants[weight]
        w2 = rw.constant(weight + "_2d", w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))
    for key in ("kernel", "strides", "dilations"):
        attrs[key] = (1,) + tuple(attrs[key])
    attrs["pads"] = (0, attrs["pads"][0], 0, attrs["pads"][1])
    return x2, out2, w2



def conv(rw: Rewriter, node: Node) -> None:
    w = _const(rw, node, 1, "the weight")
    rank = w.ndim - 2
    if rank not in (1, 2):
        raise _refuse(node, f"{rank}-D convolution is not supported (1-D and 2-D are)")
    attrs = _spatial_attrs(rw, node, tuple(w.shape[2:]))
    attrs["group"] = int(node.attrs.get("group", 1))
    attrs.update(_quant(node))
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    if bias:
        _const(rw, node, 2, "the bias")
    if rank == 1:
        x2, out2, w2 = _lift_1d(rw, node, attrs, node.inputs[1])
        rw.add("Conv", node.name, [x2, w2, bias], [out2], **attrs)
        _view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    else:
        rw.add("Conv", node.name, [node.inputs[0], node.inputs[1], bias], node.outputs, **attrs)


def pool(rw: Rewriter, node: Node) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise _refuse(node, "the Indices output is not supported")
    kernel = tuple(node.attrs["kernel_shape"])
    if any(d != 1 for d in node.attrs.get("dilations", ())):
        raise _refuse(node, "dilated pooling is not supported")
    attrs = _spatial_attrs(rw, node, kernel)
    del attrs["dilations"]
    attrs.update(_quant(node))
    if node.op == "AveragePool":
        attrs["count_include_pad"] = int(node.attrs.get("count_include_pad", 0))
    if len(kernel) == 1:
        attrs["dilations"] = (1,)
        x2, out2, _ = _lift_1d(rw, node, attrs)
        del attrs["dilations"]
        rw.add(node.op, node.name, [x2], [out2], **attrs)
        _view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    elif len(kernel) == 2:
        rw.add(node.op, node.name, [node.inputs[0]], node.outputs[:1], **attrs)
    else:
        raise _refuse(node, f"{len(kernel)}-D pooling is not supported")


def global_pool(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    if len(shape) == 4:
        rw.keep(node.with_(attrs=_quant(node)))
    elif len(shape) == 3:
        x2 = _view(rw, node, node.inputs[0], shape[:2] + (1, shape[2]))
        out2 = rw.like(node.outputs[0] + "_2d", node.outputs[0], shape[:2] + (1, 1))
        rw.add(node.op, node.name, [x2], [out2], **_quant(node))
        _view(rw, node, out2, rw.values[node.outputs[0]].shape, node.outputs[0])
    else:
        raise _refuse(node, f"input of rank {len(shape)} is not supported (rank 3 or 4)")


# --- matrix products -----------------------------------------------------------------------------

def gemm(rw: Rewriter, node: Node) -> None:
    if "quant" in node.attrs:       # already x (M,K) @ w (K,N) + int32 bias (lower_quantized)
        rw.keep(node)
        return
    a, b = node.inputs[:2]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    m, n = rw.values[node.outputs[0]].shape
    if node.attrs.get("transA", 0):
        at = rw.value(a + "_t", rw.values[a].shape[::-1])
        rw.add("Transpose", node.name + "_transA", [a], [at], perm=(1, 0))
        a = at
    if b not in rw.constants:
        if node.attrs.get("transB", 0):
            bt = rw.value(b + "_t", rw.values[b].shape[::-1])
            rw.add("Transpose", node.name + "_transB", [b], [bt], perm=(1, 0))
            b = bt
        product = rw.value(node.outputs[0] + "_ab", (m, n)) if (alpha != 1 or c) else node.outputs[0]
        rw.add("MatMul", node.name, [a, b], [product])
        _gemm_tail(rw, node, product, alpha, c, beta)
        return
    weight = rw.constants[b].astype(np.float32)
    weight = (weight.T if node.attrs.get("transB", 0) else weight) * np.float32(alpha)
    bias, rest = _split_bias(rw, c, beta, m, n)
    w = rw.constant(b + "_kn", weight)
    out = node.outputs[0] if not rest else rw.value(node.outputs[0] + "_ab", (m, n))
    rw.add("Gemm", node.name, [a, w, bias], [out])
    if rest:
        rw.add("Add", node.name + "_c", [out, rest], node.outputs)


def _split_bias(rw: Rewriter, c: str, beta: float, m: int, n: int) -> tuple[str, str]:
    """Gemm's C as a per-column bias (fused) when it is a constant row; otherwise a separate addend."""
    if not c:
        return "", ""
    if c in rw.constants:
        full = np.broadcast_to(rw.constants[c].astype(np.float32) * np.float32(beta), (m, n))
        if np.all(full == full[:1]):
            return rw.constant(c + "_bias", np.ascontiguousarray(full[0])), ""
        return "", rw.constant(c + "_full", np.ascontiguousarray(full))
    if beta == 1:
        return "", c
    scaled = rw.value(c + "_scaled", rw.values[c].shape)
    rw.add("Mul", c + "_beta", [c, rw.constant("beta", np.array(beta, np.float32))], [scaled])
    return "", scaled


def _gemm_tail(rw: Rewriter, node: Node, product: str, alpha: float, c: str, beta: float) -> None:
    m, n = rw.values[node.outputs[0]].shape
    if alpha != 1:
        scaled = rw.value(node.outputs[0] + "_alpha", (m, n)) if c else node.outputs[0]
        rw.add("Mul", node.name + "_alpha", [product, rw.constant("alpha", np.array(alpha, np.float32))], [scaled])
        product = scaled
    if c:
        bias, rest = _split_bias(rw, c, beta, m, n)
        rw.add("Add", node.name + "_c", [product, bias or rest], node.outputs)


def matmul(rw: Rewriter, node: Node) -> None:
    a, b = node.inputs
    out = node.outputs[0]
    ashape, bshape, oshape = rw.values[a].shape, rw.values[b].shape, rw.values[out].shape
    if b in rw.constants and len(bshape) == 2:
        k, n = bshape
        rows = int(np.prod(ashape[:-1], dtype=np.int64))
        a2 = a if len(ashape) == 2 else _view(rw, node, a, (rows, k))
        out2 = out if len(ashape) == 2 else rw.like(out + "_2d", out, (rows, n))
        rw.add("Gemm", node.name, [a2, b, ""], [out2])
        if out2 != out:
            _view(rw, node, out2, oshape, out)
        return
    if len(ashape) < 2 or len(bshape) < 2:
        raise _refuse(node, "1-D operands of a MatMul of two computed tensors are not supported")
    rw.keep(node.with_(attrs={}))


# --- elementwise -----------------------------------------------------------------------------------

def binary(rw: Rewriter, node: Node) -> None:
    if len(node.inputs) != 2:
        raise _refuse(node, "only two operands are supported")
    rw.keep(node.with_(attrs=_quant(node)))


def _unary(fn: str, *defaults: tuple[str, float]) -> Rule:
    def rule(rw: Rewriter, node: Node) -> None:
        params = tuple(float(node.attrs.get(key, value)) for key, value in defaults)
        rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn=fn, params=params)
    return rule


def clip(rw: Rewriter, node: Node) -> None:
    lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
    lo_c, hi_c = _const(rw, node, 1, "min"), _const(rw, node, 2, "max")
    lo = float(lo_c) if lo_c is not None else float(lo)
    hi = float(hi_c) if hi_c is not None else float(hi)
    rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn="clip", params=(lo, hi))


def batchnorm(rw: Rewriter, node: Node) -> None:
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise _refuse(node, "training mode (extra outputs) is not supported")
    for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1):
        _const(rw, node, i, what)
    rw.keep(node.with_(outputs=node.outputs[:1], attrs={"epsilon": float(node.attrs.get("epsilon", 1e-5))}))


# --- data movement -----------------------------------------------------------------------------------

def view(rw: Rewriter, node: Node) -> None:
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        raise _refuse(node, "the mask output is not supported")
    _view(rw, node, node.inputs[0], rw.values[node.outputs[0]].shape, node.outputs[0])


def transpose(rw: Rewriter, node: Node) -> None:
    rank = len(rw.values[node.inputs[0]].shape)
    perm = tuple(node.attrs.get("perm", tuple(reversed(range(rank)))))
    rw.add("Transpose", node.name, node.inputs, node.outputs, perm=perm)


def concat(rw: Rewriter, node: Node) -> None:
    rank = len(rw.values[node.outputs[0]].shape)
    rw.add("Concat", node.name, node.inputs, node.outputs, axis=int(node.attrs["axis"]) % rank, **_quant(node))


def pad(rw: Rewriter, node: Node) -> None:
    x = node.inputs[0]
    rank = len(rw.values[x].shape)
    mode = node.attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise _refuse(node, f"mode '{mode}' is not supported (constant, reflect, edge)")
    pads = _const(rw, node, 1, "pads")
    pads = tuple(int(p) for p in (pads if pads is not None else node.attrs.get("pads", (0,) * 2 * rank)))
    value = _const(rw, node, 2, "the constant value")
    value = float(value) if value is not None else float(node.attrs.get("value", 0.0))
    axes = _const(rw, node, 3, "axes")
    if axes is not None:
        full = [0] * (2 * rank)
        for i, axis in enumerate(int(a) % rank for a in axes):
            full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
        pads = tuple(full)
    if any(p < 0 for p in pads):
        raise _refuse(node, "negative pads (cropping) are not supported")
    rw.add("Pad", node.name, [x], node.outputs, pads=pads, mode=mode, value=value)


def softmax(rw: Rewriter, node: Node) -> None:
    shape = rw.values[node.inputs[0]].shape
    axis = int(node.attrs.get("axis", -1 if rw.graph.opset >= 13 else 1)) % len(shape)
    if rw.graph.opset >= 13 or axis == len(shape) - 1:
        rw.add(node.op, node.name, node.inputs, node.outputs, axis=axis)
        return
    # Before opset 13 the input is coerced to 2-D at `axis` and normalized over the second dimension.
    rows, cols = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    flat = _view(rw, node, node.inputs[0], (rows, cols))
    out = rw.value(node.outputs[0] + "_2d", (rows, cols))
    rw.add(node.op, node.name, [flat], [out], axis=1)
    _view(rw, node, out, shape, node.outputs[0])


def reduce(rw: Rewriter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    axes_input = _const(rw, node, 1, "axes")
    axes = axes_input if axes_input is not None else node.attrs.get("axes")
    if axes is None or len(axes) == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            _view(rw, node, x, shape, out)
            return
        axes = range(len(shape))
    axes = tuple(sorted({int(a) % len(shape) for a in axes}))
    fn = node.op[len("Reduce"):].lower()
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    keepdims = bool(node.attrs.get("keepdims", 1))
    target = out if keepdims else rw.value(out + "_keepdims", kept)
    if len(shape) == 4 and axes == (2, 3) and fn in ("mean", "max"):      # global pooling
        rw.add("GlobalAveragePool" if fn == "mean" else "GlobalMaxPool", node.name, [x], [target])
    else:
        rw.add("Reduce", node.name, [x], [target], fn=fn, axes=axes)
    if not keepdims:
        _view(rw, node, target, rw.values[out].shape, out)


def slice_(rw: Rewriter, node: Node) -> None:
    x = node.inputs[0]
    shape = rw.values[x].shape
    starts, ends = _const(rw, node, 1, "starts"), _const(rw, node, 2, "ends")
    if starts is None:      # before opset 10 they are attributes
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes, steps = node.attrs.get("axes"), None
    else:
        axes, steps = _const(rw, node, 3, "axes"), _const(rw, node, 4, "steps")
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    begin, step = [0] * len(shape), [1] * len(shape)
    for axis, b, e, s in zip(axes, starts, ends, steps):
        axis = int(axis) % len(shape)
        begin[axis], _, step[axis] = slice(int(b), int(e), int(s)).indices(shape[axis])
    rw.add("Slice", node.name, [x], node.outputs[:1], starts=tuple(begin), steps=tuple(step))


def split(rw: Rewriter, node: Node) -> None:
    """Split becomes one Slice per output."""
    shape = rw.values[node.inputs[0]].shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    start = 0
    for i, out in enumerate(node.outputs):
        size = rw.values[out].shape[axis]
        begin = tuple(start if a == axis else 0 for a in range(len(shape)))
        rw.add("Slice", f"{node.name}_{i}", [node.inputs[0]], [out], starts=begin, steps=(1,) * len(shape))
        start += size


def gelu(rw: Rewriter, node: Node) -> None:
    approximate = node.attrs.get("approximate", "none")
    rw.add("Unary", node.name, node.inputs[:1], node.outputs, fn="gelu_tanh" if approximate == "tanh" else "gelu",
           params=())


def quantize(rw: Rewriter, node: Node) -> None:
    """QuantizeLinear / DequantizeLinear of a computed tensor, per-tensor: y = saturate(round(x / s) + zp),
    x = (q - zp) * s. (Those of constants were folded; per-channel weights belong to integer ops.)"""
    scale = _const(rw, node, 1, "the scale")
    zp = _const(rw, node, 2, "the zero point")
    if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
        raise _refuse(node, "only per-tensor quantization of activations is supported")
    zp_value = int(zp.reshape(-1)[0]) if zp is not None else 0
    op = "Quantize" if node.op == "QuantizeLinear" else "Dequantize"
    rw.add(op, node.name, node.inputs[:1], node.outputs, scale=float(scale.reshape(-1)[0]), zero_point=zp_value)


RULES: dict[str, Rule] = {
    "Conv": conv,
    "MaxPool": pool, "AveragePool": pool,
    "GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool,
    "Gemm": gemm, "MatMul": matmul,
    "Add": binary, "Sub": binary, "Mul": binary, "Div": binary, "Max": binary, "Min": binary,
    "Relu": _unary("relu"), "Clip": clip, "LeakyRelu": _unary("leaky_relu", ("alpha", 0.01)),
    "Sigmoid": _unary("sigmoid"), "Tanh": _unary("tanh"), "Erf": _unary("erf"), "Exp": _unary("exp"),
    "HardSigmoid": _unary("hard_sigmoid", ("alpha", 0.2), ("beta", 0.5)), "HardSwish": _unary("hard_swish"),
    "Neg": _unary("neg"), "Abs": _unary("abs"),
    "BatchNormalization": batchnorm,
    "Reshape": view, "Flatten": view, "Squeeze": view, "Unsqueeze": view, "Identity": view, "Dropout": view,
    "Transpose": transpose, "Concat": concat, "Pad": pad, "Softmax": softmax, "LogSoftmax": softmax,
    "ReduceMean": reduce, "ReduceMax": reduce, "ReduceMin": reduce, "ReduceSum": reduce,
    "QuantizeLinear": quantize, "DequantizeLinear": quantize,
    "Slice": slice_, "Split": split, "Reciprocal": _unary("reciprocal"), "Gelu": gelu, "Log": _unary("log"),
}
