"""Synthetic float32 ONNX test models: the MLPerf Tiny networks plus two larger CNNs.

Every model is built with ``onnx.helper`` from deterministic random weights
(``numpy.random.default_rng(seed)``), uses opset 17 / IR version 8, has static
shapes with batch 1, one input ``"input"`` and one output ``"output"``.
Convolutions are followed by an unfolded ``BatchNormalization`` as in a model
exported from PyTorch.  Weights use He scaling and the BN running statistics
are drawn around the analytically expected activation statistics, so
activations keep a sane scale through deep nets.

Usage: ``python examples/zoo.py NAME [NAME...] -o DIR`` or ``--list``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class Builder:
    """Accumulates nodes and initializers; tracks channels and E[x^2] per tensor."""

    def __init__(self, seed: int, input_shape: Sequence[int]) -> None:
        self.rng = np.random.default_rng(seed)
        self.input_shape = list(input_shape)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}
        self.counts: dict[str, int] = {}
        self.chans: dict[str, int] = {"input": self.input_shape[1]}
        self.m2: dict[str, float] = {"input": 1.0}  # estimated second moment

    def uname(self, prefix: str) -> str:
        """Return a fresh name ``prefix1``, ``prefix2``, ..."""
        self.counts[prefix] = self.counts.get(prefix, 0) + 1
        return f"{prefix}{self.counts[prefix]}"

    def peek(self, prefix: str) -> str:
        """Return the name the next ``uname(prefix)`` call will give."""
        return f"{prefix}{self.counts.get(prefix, 0) + 1}"

    def const(self, name: str, value: np.ndarray) -> str:
        """Add (or reuse) an initializer and return its name."""
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.asarray(value), name)
        return name

    def node(
        self,
        op: str,
        inputs: Sequence[str],
        prefix: str,
        chans: int,
        m2: float,
        **attrs: object,
    ) -> str:
        """Append a node named ``prefixN`` whose single output has the same name."""
        name = self.uname(prefix)
        self.nodes.append(
            helper.make_node(op, list(inputs), [name], name=name, **attrs)
        )
        self.chans[name], self.m2[name] = chans, m2
        return name

    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        """float32 normal(0, std) array."""
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def build(self, y: str, output_shape: Sequence[int], name: str) -> onnx.ModelProto:
        """Rename tensor ``y`` to ``output`` and wrap everything in a checked model."""
        for n in self.nodes:
            for io in (n.input, n.output):
                for i, t in enumerate(io):
                    if t == y:
                        io[i] = "output"
        graph = helper.make_graph(
            self.nodes,
            name,
            [
                helper.make_tensor_value_info(
                    "input", TensorProto.FLOAT, self.input_shape
                )
            ],
            [
                helper.make_tensor_value_info(
                    "output", TensorProto.FLOAT, list(output_shape)
                )
            ],
            initializer=list(self.inits.values()),
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="aot-zoo",
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def _pads(pad: int | Sequence[int]) -> list[int]:
    return [pad] * 4 if isinstance(pad, int) else list(pad)


def conv(
    b: Builder,
    x: str,
    out_ch: int,
    k: int | tuple[int, int],
    stride: int = 1,
    pad: int | Sequence[int] = 0,
    group: int = 1,
    bias: bool = False,
) -> str:
    """Conv with He-initialised weight (OIHW) and optional bias."""
    kh, kw = (k, k) if isinstance(k, int) else k
    in_ch = b.chans[x]
    fan_in = in_ch // group * kh * kw
    name = b.peek("conv")
    inputs = [
        x,
        b.const(
            f"{name}.weight",
            b.normal((out_ch, in_ch // group, kh, kw), np.sqrt(2.0 / fan_in)),
        ),
    ]
    if bias:
        inputs.append(b.const(f"{name}.bias", b.normal((out_ch,), 0.01)))
    return b.node(
        "Conv",
        inputs,
        "conv",
        out_ch,
        2.0 * b.m2[x],
        kernel_shape=[kh, kw],
        strides=[stride, stride],
        pads=_pads(pad),
        group=group,
    )


def bn(b: Builder, x: str) -> str:
    """BatchNormalization; running stats drawn around the expected input statistics."""
    c, m2 = b.chans[x], b.m2[x]
    name = b.peek("bn")
    scale = b.rng.uniform(0.5, 1.5, c).astype(np.float32)
    shift = b.normal((c,), 0.1)
    mean = b.normal((c,), 0.1 * np.sqrt(m2))
    var = (m2 * b.rng.uniform(0.7, 1.4, c)).astype(np.float32)
    inputs = [x] + [
        b.const(f"{name}.{k}", v)
        for k, v in (("scale", scale), ("bias", shift), ("mean", mean), ("var", var))
    ]
    return b.node(
        "BatchNormalization", inputs, "bn", c, 1.1, epsilon=1e-5, momentum=0.9
    )


def act(b: Builder, x: str, kind: str | None) -> str:
    """Apply ``"relu"``, ``"relu6"`` (Clip with initializer bounds) or nothing."""
    if kind is None:
        return x
    if kind == "relu":
        return b.node("Relu", [x], "relu", b.chans[x], b.m2[x] / 2)
    if kind == "relu6":
        lo = b.const("relu6.min", np.array(0.0, np.float32))
        hi = b.const("relu6.max", np.array(6.0, np.float32))
        return b.node("Clip", [x, lo, hi], "clip", b.chans[x], b.m2[x] / 2)
    raise ValueError(f"unknown activation {kind!r}")


def conv_bn(
    b: Builder,
    x: str,
    out_ch: int,
    k: int | tuple[int, int],
    stride: int = 1,
    pad: int | Sequence[int] = 0,
    group: int = 1,
    act_kind: str | None = "relu",
    bias: bool = False,
) -> str:
    """Conv -> BatchNormalization -> activation."""
    return act(b, bn(b, conv(b, x, out_ch, k, stride, pad, group, bias)), act_kind)


def gemm(b: Builder, x: str, out: int, matmul: bool = False) -> str:
    """Fully connected: Gemm(transB=1) like PyTorch, or MatMul + Add like Keras."""
    n_in = b.chans[x]
    std, m2 = np.sqrt(2.0 / n_in), 2.0 * b.m2[x]
    if matmul:
        name = b.peek("matmul")
        w = b.const(f"{name}.weight", b.normal((n_in, out), std))
        y = b.node("MatMul", [x, w], "matmul", out, m2)
        return b.node(
            "Add", [y, b.const(f"{name}.bias", b.normal((out,), 0.01))], "add", out, m2
        )
    name = b.peek("gemm")
    w = b.const(f"{name}.weight", b.normal((out, n_in), std))
    bias = b.const(f"{name}.bias", b.normal((out,), 0.01))
    return b.node("Gemm", [x, w, bias], "gemm", out, m2, transB=1)


def add(b: Builder, x: str, y: str) -> str:
    """Elementwise residual Add."""
    return b.node("Add", [x, y], "add", b.chans[x], b.m2[x] + b.m2[y])


def global_pool_flatten(b: Builder, x: str, reshape: bool = False) -> str:
    """GlobalAveragePool followed by Flatten (or Reshape to [1, -1])."""
    c = b.chans[x]
    p = b.node("GlobalAveragePool", [x], "gap", c, b.m2[x])
    if reshape:
        shape = b.const("reshape.shape", np.array([1, -1], np.int64))
        return b.node("Reshape", [p, shape], "reshape", c, b.m2[x])
    return b.node("Flatten", [p], "flatten", c, b.m2[x], axis=1)


def softmax(b: Builder, x: str) -> str:
    """Softmax over the class axis."""
    return b.node("Softmax", [x], "softmax", b.chans[x], 0.1, axis=1)


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round channels like torchvision's ``_make_divisible``."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def ds_cnn(seed: int = 0) -> onnx.ModelProto:
    """MLPerf Tiny keyword spotting DS-CNN: (1,1,49,10) MFCC -> 12 probabilities."""
    b = Builder(seed, [1, 1, 49, 10])
    # TF "same" pads for a 10x4 kernel, stride 2 on 49x10: [top, left, bottom, right]
    x = conv_bn(b, "input", 64, (10, 4), 2, [4, 1, 5, 1], bias=True)  # -> 25x5
    for _ in range(4):
        x = conv_bn(b, x, 64, 3, 1, 1, group=64, bias=True)
        x = conv_bn(b, x, 64, 1, bias=True)
    x = b.node("AveragePool", [x], "avgpool", 64, b.m2[x], kernel_shape=[25, 5])
    x = b.node("Flatten", [x], "flatten", 64, b.m2[x], axis=1)
    return b.build(softmax(b, gemm(b, x, 12)), [1, 12], "ds_cnn")


def mobilenet_v1(
    seed: int = 0, alpha: float = 0.25, resolution: int = 96, classes: int = 2
) -> onnx.ModelProto:
    """MLPerf Tiny visual wake words MobileNetV1 (width ``alpha``), Relu6 as Clip."""
    b = Builder(seed, [1, 3, resolution, resolution])
    x = conv_bn(b, "input", int(32 * alpha), 3, 2, 1, act_kind="relu6")
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
    blocks += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for ch, stride in blocks:
        c = b.chans[x]
        x = conv_bn(b, x, c, 3, stride, 1, group=c, act_kind="relu6")
        x = conv_bn(b, x, int(ch * alpha), 1, act_kind="relu6")
    x = gemm(b, global_pool_flatten(b, x), classes)
    return b.build(softmax(b, x), [1, classes], "mobilenet_v1")


def basic_block(
    b: Builder, x: str, out_ch: int, stride: int, shortcut_bn: bool = True
) -> str:
    """ResNet basic block: conv3x3-BN-Relu-conv3x3-BN + shortcut, Add, Relu."""
    y = conv_bn(b, x, out_ch, 3, stride, 1)
    y = conv_bn(b, y, out_ch, 3, 1, 1, act_kind=None)
    if stride != 1 or b.chans[x] != out_ch:
        x = conv(b, x, out_ch, 1, stride)
        if shortcut_bn:
            x = bn(b, x)
    return act(b, add(b, y, x), "relu")


def resnet8(seed: int = 0) -> onnx.ModelProto:
    """MLPerf Tiny image classification ResNet-8: (1,3,32,32) CIFAR-10 -> 10 logits."""
    b = Builder(seed, [1, 3, 32, 32])
    x = conv_bn(b, "input", 16, 3, 1, 1)
    for ch, stride in ((16, 1), (32, 2), (64, 2)):
        x = basic_block(b, x, ch, stride, shortcut_bn=False)
    x = b.node("AveragePool", [x], "avgpool", 64, b.m2[x], kernel_shape=[8, 8])
    x = b.node("Flatten", [x], "flatten", 64, b.m2[x], axis=1)
    return b.build(gemm(b, x, 10), [1, 10], "resnet8")


def fc_autoencoder(seed: int = 0) -> onnx.ModelProto:
    """MLPerf Tiny anomaly detection autoencoder: 640 -> 128x4 -> 8 -> 128x4 -> 640."""
    b = Builder(seed, [1, 640])
    x = "input"
    for i, width in enumerate([128] * 4 + [8] + [128] * 4):
        x = act(b, bn(b, gemm(b, x, width, matmul=i % 2 == 1)), "relu")
    return b.build(gemm(b, x, 640, matmul=True), [1, 640], "fc_autoencoder")


def mobilenet_v2(
    seed: int = 0, width: float = 1.0, resolution: int = 224, classes: int = 1000
) -> onnx.ModelProto:
    """torchvision MobileNetV2: inverted residuals, linear bottlenecks, Relu6 = Clip."""
    b = Builder(seed, [1, 3, resolution, resolution])
    x = conv_bn(b, "input", make_divisible(32 * width), 3, 2, 1, act_kind="relu6")
    settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    for t, c, n, s in settings:
        out_ch = make_divisible(c * width)
        for i in range(n):
            stride, in_ch = (s if i == 0 else 1), b.chans[x]
            hidden = round(in_ch * t)
            y = x if t == 1 else conv_bn(b, x, hidden, 1, act_kind="relu6")
            y = conv_bn(b, y, hidden, 3, stride, 1, group=hidden, act_kind="relu6")
            y = conv_bn(b, y, out_ch, 1, act_kind=None)
            x = add(b, x, y) if stride == 1 and in_ch == out_ch else y
    x = conv_bn(b, x, make_divisible(1280 * max(1.0, width)), 1, act_kind="relu6")
    x = gemm(b, global_pool_flatten(b, x, reshape=True), classes)
    return b.build(x, [1, classes], "mobilenet_v2")


def resnet18(
    seed: int = 0, resolution: int = 224, classes: int = 1000
) -> onnx.ModelProto:
    """torchvision ResNet-18."""
    b = Builder(seed, [1, 3, resolution, resolution])
    x = conv_bn(b, "input", 64, 7, 2, 3)
    x = b.node(
        "MaxPool",
        [x],
        "maxpool",
        64,
        b.m2[x],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    for ch, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = basic_block(b, x, ch, stride)
        x = basic_block(b, x, ch, 1)
    x = gemm(b, global_pool_flatten(b, x), classes)
    return b.build(x, [1, classes], "resnet18")


ZOO: dict[str, Callable[[], onnx.ModelProto]] = {
    "ds_cnn": ds_cnn,
    "mobilenet_v1": mobilenet_v1,
    "resnet8": resnet8,
    "fc_autoencoder": fc_autoencoder,
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write DIR/NAME.onnx for each requested model."""
    parser = argparse.ArgumentParser(description="Write synthetic ONNX test models.")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="model names (see --list)"
    )
    parser.add_argument(
        "-o", "--output-dir", type=Path, default=Path("."), metavar="DIR"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the model names and exit"
    )
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(ZOO))
        return 0
    if not args.names:
        parser.error("give at least one NAME (or --list)")
    unknown = [n for n in args.names if n not in ZOO]
    if unknown:
        print(
            f"error: unknown model(s) {', '.join(unknown)} (known: {', '.join(ZOO)})",
            file=sys.stderr,
        )
        return 2
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        path = args.output_dir / f"{name}.onnx"
        onnx.save(ZOO[name](), path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
