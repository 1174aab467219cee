"""Random valid TFLite graphs for differential fuzzing of aot against LiteRT's reference kernels
(benchmarks/fuzz_compiler.py --format tflite).

`generate(seed, index)` always builds the same graph for the same pair. A graph starts from one NHWC input
and appends operators to tensors already in it: convolutions and depthwise convolutions of random geometry
(strides, dilations, SAME or VALID padding, fused activations, per-channel or per-tensor weights), pools,
residual ADDs, SUBs and MULs, LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU and PRELU, TRANSPOSE_CONV,
RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR, SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM (float32, or int8 as
TFLite Micro computes it, the graph's reference then TFLite Micro's interpreter) over the image's rows,
PAD, TRANSPOSE and CONCATENATION of tensors of one encoding, and it may end in a dense layer and a SOFTMAX.
Two graphs in three are int8, compared bit for bit; the others float32, within the ONNX tolerance (1e-4 of
the output's scale).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from fuzz_check import Outcome, run_aot
from tflite_models import Net, _window_out

from aot.errors import first_line


@dataclass
class Case:
    data: bytes
    inputs: dict[str, np.ndarray]
    ops: Counter
    int8: bool


class _Graph:
    """The tensors a graph has made: (tensor triple of Net, NHWC shape)."""

    def __init__(self, rng: np.random.Generator, net: Net):
        self.rng, self.net = rng, net
        self.tensors: list[tuple[tuple, tuple[int, ...]]] = []
        self.ops: Counter = Counter()

    def pick(self) -> tuple[tuple, tuple[int, ...]]:
        # the newest tensors most often, so graphs grow deep rather than only wide
        weights = np.arange(1, len(self.tensors) + 1, dtype=np.float64) ** 2
        return self.tensors[int(self.rng.choice(len(self.tensors), p=weights / weights.sum()))]


def _conv(g: _Graph) -> None:
    x, shape = g.pick()
    rng = g.rng
    depthwise = bool(rng.random() < 0.4)
    k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    stride, dilation = int(rng.integers(1, 3)), int(rng.choice([1, 1, 1, 2]))
    padding = str(rng.choice(["SAME", "VALID"]))
    if dilation > 1 and stride > 1:
        stride = 1
    if any(_window_out(n, kk, stride, padding, dilation) < 1 for n, kk in zip(shape[1:3], k)):
        padding = "SAME"
    act = str(rng.choice(["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]))
    y, out = g.net.conv(x, shape, int(rng.integers(1, 17)), k, stride, padding, act, depthwise,
                        int(rng.integers(1, 3)) if depthwise else 1, dilation, bool(rng.random() < 0.7))
    g.ops["DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"] += 1
    g.tensors.append((y, out))


def _pool(g: _Graph) -> None:
    x, shape = g.pick()
    rng = g.rng
    op = str(rng.choice(["AVERAGE_POOL_2D", "MAX_POOL_2D"]))
    k = (int(rng.integers(1, min(shape[1], 4) + 1)), int(rng.integers(1, min(shape[2], 4) + 1)))
    y, out = g.net.pool(x, shape, op, k, int(rng.integers(1, 3)), str(rng.choice(["SAME", "VALID"])))
    g.ops[op] += 1
    g.tensors.append((y, out))


def _add(g: _Graph) -> None:
    x, shape = g.pick()
    # a partner of the same shape: a 1x1 convolution of x, or another tensor that has it
    same = [t for t, s in g.tensors if s == shape and t is not x]
    if same and g.rng.random() < 0.5:
        other = same[int(g.rng.integers(len(same)))]
    else:
        other, _ = g.net.conv(x, shape, shape[3], (1, 1), act="NONE")
        g.ops["CONV_2D"] += 1
    op = str(g.rng.choice(["ADD", "ADD", "SUB", "MUL"]))
    act = str(g.rng.choice(["NONE", "RELU", "RELU6"]))
    if op == "ADD":
        y = g.net.add(x, other, shape, act)
    else:
        scale = x[1] * other[1] * 60 if op == "MUL" else max(x[1], other[1]) * 1.5
        y = g.net.tensor(shape, scale, int(g.rng.integers(-20, 20)))
        g.net.b.op(op, [x[0], other[0]], [y[0]], fused_activation_function=act)
    g.ops[op] += 1
    g.tensors.append((y, shape))


def _activation(g: _Graph) -> None:
    x, shape = g.pick()
    rng, net = g.rng, g.net
    op = str(rng.choice(["LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU", "PRELU"]))
    if not net.int8:
        y = net.tensor(shape, 1.0)
    elif op == "LOGISTIC":      # its output encoding is TFLite's fixed one
        y = net.tensor(shape, 1 / 256, -128)
    elif op == "TANH":
        y = net.tensor(shape, 1 / 128, 0)
    else:                       # (HARD_SWISH's output scale above the input's / 128, as TFLite requires)
        y = net.tensor(shape, x[1] * float(rng.uniform(0.3, 1.2)), int(rng.integers(-20, 20)))
    options, operands = {}, [x[0]]
    if op == "LEAKY_RELU":
        options["alpha"] = float(rng.choice([0.1, 0.2, -0.3, 1.5]))
    if op == "PRELU":           # one slope per channel
        slopes = rng.uniform(-0.5, 0.5, (1, 1, shape[3]))
        if net.int8:
            operands.append(net.b.constant(net._name("slope"), np.round(slopes / 0.004).astype(np.int8),
                                           scale=0.004, zero_point=0))
        else:
            operands.append(net.b.constant(net._name("slope"), slopes.astype(np.float32)))
    net.b.op(op, operands, [y[0]], **options)
    g.ops[op] += 1
    g.tensors.append((y, shape))


def _upsample(g: _Graph) -> None:
    """A TRANSPOSE_CONV of random geometry, or a RESIZE of random size and coordinates."""
    x, shape = g.pick()
    rng, net = g.rng, g.net
    if rng.random() < 0.5:
        k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        stride = int(rng.integers(1, 4))
        padding = str(rng.choice(["SAME", "VALID"]))
        channels = int(rng.integers(1, 9))
        out = (shape[0], *(n * stride if padding == "SAME" else (n - 1) * stride + kk
                           for n, kk in zip(shape[1:3], k)), channels)
        w, scales = net.weights((channels, *k, shape[3]), 0, bool(rng.random() < 0.7))
        taps = max(1, (k[0] * k[1] * shape[3]) // (stride * stride))
        y = net.tensor(out, net.out_scale(x[1], scales, taps), int(rng.integers(-10, 10)))
        operands = [net.b.constant(net._name("shape"), np.array(out, np.int32)), w, x[0],
                    net.bias(channels, x[1], scales) if rng.random() < 0.7 else None]
        net.b.op("TRANSPOSE_CONV", operands, [y[0]], padding=padding, stride_w=stride, stride_h=stride,
                 fused_activation_function=str(rng.choice(["NONE", "RELU", "RELU6"])))
        g.ops["TRANSPOSE_CONV"] += 1
    else:
        op = str(rng.choice(["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"]))
        size = (int(rng.integers(1, 2 * shape[1] + 2)), int(rng.integers(1, 2 * shape[2] + 2)))
        flag = str(rng.choice(["", "align_corners", "half_pixel_centers"]))
        out = (shape[0], *size, shape[3])
        y = net.tensor(out, x[1], x[2])
        net.b.op(op, [x[0], net.b.constant(net._name("size"), np.array(size, np.int32))], [y[0]],
                 **({flag: True} if flag else {}))
        g.ops[op] += 1
    g.tensors.append((y, out))


def _sequence(g: _Graph) -> None:
    """Rows of the image as a batch of sequences: an SVDF over each row's pixels (float32, or int8 with int16
    state), or a UNIDIRECTIONAL_SEQUENCE_LSTM along the row (float32, or int8 with an int16 cell); the result
    an image again (its state from the reset, a single run's)."""
    x, shape = g.pick()
    rng, net, b = g.rng, g.net, g.net.b
    _, h, w, c = shape
    if not net.int8 and rng.random() < 0.5:
        hidden = int(rng.integers(1, 6))
        seq = net.tensor((h, w, c), x[1], x[2])
        b.op("RESHAPE", [x[0], b.constant(net._name("shape"), np.array([h, w, c], np.int32))], [seq[0]])

        def array(*dims):
            return b.constant(net._name("lstm"), (rng.standard_normal(dims) * 0.5).astype(np.float32))
        operands = [seq[0]] + [array(hidden, c) for _ in range(4)] + [array(hidden, hidden) for _ in range(4)]
        operands += [array(hidden) for _ in range(3)] if rng.random() < 0.5 else [None] * 3
        operands += [array(hidden) for _ in range(4)] + [None, None]
        operands += [b.tensor(net._name("h"), (h, hidden), "float32", variable=True),
                     b.tensor(net._name("c"), (h, hidden), "float32", variable=True)]
        y = net.tensor((h, w, hidden), 1.0)
        b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", operands, [y[0]], fused_activation_function="TANH",
             cell_clip=float(rng.choice([0.0, 0.0, 0.5])))
        out = (1, h, w, hidden)
        g.ops["UNIDIRECTIONAL_SEQUENCE_LSTM"] += 1
    elif net.int8 and rng.random() < 0.4:     # TFLite Micro's integer LSTM: int8 weights, an int16 cell
        hidden = int(rng.integers(1, 9))
        seq = net.tensor((h, w, c), x[1], x[2])
        b.op("RESHAPE", [x[0], b.constant(net._name("shape"), np.array([h, w, c], np.int32))], [seq[0]])
        operands, scales = [seq[0]], []
        for n in [c] * 4 + [hidden] * 4:
            scales.append(float(rng.uniform(0.3, 3.0)) / (127 * np.sqrt(n)))
            operands.append(b.constant(net._name("lstm"), rng.integers(-127, 128, (hidden, n)).astype(np.int8),
                                       scale=scales[-1], zero_point=0))
        operands += [None] * 3
        h_scale, h_zp = float(rng.uniform(0.004, 0.012)), int(rng.integers(-8, 8))
        for gate in range(4):
            bias = rng.normal(1.0 if gate == 1 else 0.0, 1.0, hidden) / (x[1] * scales[gate])
            operands.append(b.constant(net._name("bias"), np.round(bias).astype(np.int32), scale=x[1] * scales[gate],
                                       zero_point=0))
        operands += [None, None]
        operands += [b.tensor(net._name("h"), (h, hidden), "int8", scale=h_scale, zero_point=h_zp, variable=True),
                     b.tensor(net._name("c"), (h, hidden), "int16", scale=2.0 ** int(rng.integers(-15, -8)),
                              zero_point=0, variable=True)]
        y = net.tensor((h, w, hidden), h_scale, h_zp)
        b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", operands + [None] * 4, [y[0]], fused_activation_function="TANH",
             cell_clip=float(rng.choice([0.0, 0.0, 3.0])))
        out = (1, h, w, hidden)
        g.ops["UNIDIRECTIONAL_SEQUENCE_LSTM"] += 1
    else:
        width, filters, memory, rank = w * c, int(rng.integers(1, 5)) * 2, int(rng.integers(1, 6)), 2
        units = filters // rank
        flat = net.tensor((h, width), x[1], x[2])
        b.op("RESHAPE", [x[0], b.constant(net._name("shape"), np.array([h, width], np.int32))], [flat[0]])
        bias = None
        if net.int8:
            # int16 state and time weights, or TFLite Micro's int8 ones (a state zero point too; the graph's
            # reference is then TFLite Micro's interpreter, which LiteRT cannot stand in for)
            kind = "int8" if rng.random() < 0.3 else "int16"
            limit = 127 if kind == "int8" else 32767
            features = b.constant(net._name("wf"), rng.integers(-127, 128, (filters, width)).astype(np.int8),
                                  scale=0.01, zero_point=0)
            times = b.constant(net._name("wt"), rng.integers(-limit, limit + 1, (filters, memory)).astype(kind),
                               scale=0.5 / limit, zero_point=0)
            # typical magnitudes: a feature ~ sqrt(width) |w| |x|, a unit's sum ~ sqrt(memory rank) |t| |feature|;
            # the state holds 4 typical features, the output 4 typical sums
            feature = float(np.sqrt(width) * 0.01 * 73 * 64 * x[1])
            state_scale = 4 * feature / limit
            state = b.tensor(net._name("s"), (h, filters * memory), kind, scale=state_scale,
                             zero_point=int(rng.integers(-10, 10)) if kind == "int8" else 0, variable=True)
            y = net.tensor((h, units), 4 * float(np.sqrt(memory * rank)) * 0.29 * feature / 128,
                           int(rng.integers(-20, 20)))
            # a bias of scale s_state * s_time: TFLite Micro reads its scale, and crashes without one
            bias = b.constant(net._name("bias"), rng.integers(-500, 500, units).astype(np.int32),
                              scale=state_scale * 0.5 / limit, zero_point=0)
        else:
            features = b.constant(net._name("wf"), (rng.standard_normal((filters, width)) * 0.3).astype(np.float32))
            times = b.constant(net._name("wt"), (rng.standard_normal((filters, memory)) * 0.3).astype(np.float32))
            state = b.tensor(net._name("s"), (h, filters * memory), "float32", variable=True)
            y = net.tensor((h, units), 1.0)
        b.op("SVDF", [flat[0], features, times, bias, state], [y[0]], rank=rank,
             fused_activation_function="RELU" if net.int8 else str(rng.choice(["NONE", "RELU"])))
        out = (1, h, units, 1)
        g.ops["SVDF"] += 1
    image = net.tensor(out, y[1], y[2])
    b.op("RESHAPE", [y[0], b.constant(net._name("shape"), np.array(out, np.int32))], [image[0]])
    g.ops["RESHAPE"] += 1
    g.tensors.append((image, out))


def _pad(g: _Graph) -> None:
    x, shape = g.pick()
    pads = g.rng.integers(0, 3, (4, 2))
    pads[0] = pads[3] = 0
    out = tuple(int(d + a + b) for d, (a, b) in zip(shape, pads))
    y = g.net.tensor(out, x[1], x[2])
    g.net.b.op("PAD", [x[0], g.net.b.constant(g.net._name("pads"), pads.astype(np.int32))], [y[0]])
    g.ops["PAD"] += 1
    g.tensors.append((y, out))


def _transpose(g: _Graph) -> None:
    x, shape = g.pick()
    perm = (0, 2, 1, 3)         # H and W exchanged: still an image for the operators after it
    out = tuple(shape[p] for p in perm)
    y = g.net.tensor(out, x[1], x[2])
    g.net.b.op("TRANSPOSE", [x[0], g.net.b.constant(g.net._name("perm"), np.array(perm, np.int32))], [y[0]])
    g.ops["TRANSPOSE"] += 1
    g.tensors.append((y, out))


def _concat(g: _Graph) -> None:
    x, shape = g.pick()
    # along channels, with a tensor of the same height, width and encoding (TFLite requires one encoding)
    partners = [(t, s) for t, s in g.tensors if s[:3] == shape[:3] and t[1:] == x[1:]]
    other, other_shape = partners[int(g.rng.integers(len(partners)))]
    out = (*shape[:3], shape[3] + other_shape[3])
    y = g.net.tensor(out, x[1], x[2])
    g.net.b.op("CONCATENATION", [x[0], other[0]], [y[0]], axis=3)
    g.ops["CONCATENATION"] += 1
    g.tensors.append((y, out))


MAKERS = (_conv, _conv, _conv, _pool, _add, _add, _activation, _upsample, _sequence, _pad, _transpose, _concat)


def generate(seed: int, index: int, max_nodes: int | None = None) -> Case:
    rng = np.random.default_rng([seed, index, 7])
    int8 = bool(rng.random() < 2 / 3)
    net = Net(int8, int(rng.integers(2**31)))
    shape = (1, int(rng.integers(3, 13)), int(rng.integers(3, 13)), int(rng.integers(1, 9)))
    g = _Graph(rng, net)
    g.tensors.append((net.input(shape, float(rng.uniform(0.01, 0.1)), int(rng.integers(-20, 20))), shape))
    for _ in range(max_nodes or int(rng.integers(1, 7))):
        MAKERS[int(rng.integers(len(MAKERS)))](g)
    last, shape = g.tensors[-1]
    outputs = [last]
    if rng.random() < 0.4:      # a classifier's head
        size = int(np.prod(shape))
        flat = net.reshape(last, (1, size))
        units = int(rng.integers(2, 12))
        dense = net.dense(flat, size, units, per_channel=bool(rng.random() < 0.5))
        outputs = [net.softmax(dense, (1, units), float(rng.choice([1.0, 1.0, 0.5])))]
        g.ops.update(["RESHAPE", "FULLY_CONNECTED", "SOFTMAX"])
    data = net.build(*outputs)
    inputs_rng = np.random.default_rng([seed, index, 8])
    x = (inputs_rng.integers(-128, 128, g.tensors[0][1]).astype(np.int8) if int8
         else inputs_rng.standard_normal(g.tensors[0][1]).astype(np.float32))
    return Case(data, {"input": x}, g.ops, int8)


def check(case: Case, target: str = "host", timeout: float = 120.0, work: str | None = None) -> Outcome:
    import os
    import tempfile

    from aot.reference import litert_outputs, tflite_micro_outputs

    with tempfile.TemporaryDirectory(dir=work) as tmp:
        path = os.path.join(tmp, "graph.tflite")
        with open(path, "wb") as f:
            f.write(case.data)
        try:
            from aot.frontend.model import load

            file = load(path).file       # a graph with an integer LSTM follows TFLite Micro's kernels
            expected = (tflite_micro_outputs if file.runtime == "tflite-micro" else litert_outputs)(file, case.inputs)
        except Exception as err:   # noqa: BLE001 - the reference refuses the graph: it is not valid
            return Outcome("invalid", first_line(err))
        got = run_aot(path, case.inputs, target, timeout)
        if isinstance(got, Outcome):
            return got
    for name, ref in expected.items():
        out = got[name]
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return Outcome("wrong", f"{name}: {out.dtype}{list(out.shape)}, LiteRT's {ref.dtype}{list(ref.shape)}")
        error = float(np.abs(out.astype(np.float64) - ref.astype(np.float64)).max()) if ref.size else 0.0
        allowed = 0.0 if case.int8 else 1e-4 * max(1.0, float(np.abs(ref).max()))
        if error > allowed:
            return Outcome("wrong", f"{name}: max error {error:g} (allowed {allowed:g})")
    return Outcome("pass")
