"""TFLite test models built by code (tflite_builder): one operator at a time, float32 or int8 with its
encodings, and small whole networks of MLPerf Tiny's shapes. Weights and scales are random but
deterministic (a seed per model)."""

from __future__ import annotations

import math

import numpy as np
from tflite_builder import ModelBuilder


def _window_out(size: int, kernel: int, stride: int, padding: str, dilation: int = 1) -> int:
    effective = (kernel - 1) * dilation + 1
    return (size + stride - 1) // stride if padding == "SAME" else (size - effective + stride) // stride


class Net:
    """A model being built: float32, or int8 with an encoding per tensor (scales drawn so that results
    use most of the int8 range rather than saturating or rounding to zero)."""

    def __init__(self, int8: bool, seed: int = 0):
        self.b = ModelBuilder()
        self.int8 = int8
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def _name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def input(self, shape, scale: float = 0.05, zero_point: int = -3) -> tuple[int, float, int]:
        """(tensor, scale, zero point): the model's input."""
        if self.int8:
            return self.b.input("input", shape, "int8", scale=scale, zero_point=zero_point), scale, zero_point
        return self.b.input("input", shape, "float32"), 1.0, 0

    def tensor(self, shape, scale: float, zero_point: int = 0) -> tuple[int, float, int]:
        if self.int8:
            return self.b.tensor(self._name("t"), shape, "int8", scale=scale, zero_point=zero_point), scale, zero_point
        return self.b.tensor(self._name("t"), shape, "float32"), 1.0, 0

    def weights(self, shape, channel_axis: int, per_channel: bool = True):
        """(weights tensor, per-channel scales): int8 codes with scales, or float32 values."""
        channels = shape[channel_axis]
        if not self.int8:
            values = (self.rng.standard_normal(shape) / math.sqrt(np.prod(shape) / channels)).astype(np.float32)
            return self.b.constant(self._name("w"), values), np.ones(channels)
        codes = self.rng.integers(-127, 128, shape).astype(np.int8)
        scales = self.rng.uniform(0.002, 0.02, channels if per_channel else 1).astype(np.float32)
        t = self.b.constant(self._name("w"), codes, scale=scales, zero_point=np.zeros(scales.size, np.int64),
                            quantized_dimension=channel_axis)
        return t, np.broadcast_to(scales, (channels,))

    def bias(self, channels: int, x_scale: float, w_scales: np.ndarray):
        if not self.int8:
            return self.b.constant(self._name("b"), self.rng.standard_normal(channels).astype(np.float32) * 0.1)
        # one scale for per-tensor weights (LiteRT reads a bias of several scales as having none)
        scale = np.unique((np.float32(x_scale) * w_scales).astype(np.float32))
        return self.b.constant(self._name("b"), self.rng.integers(-3000, 3000, channels).astype(np.int32),
                               scale=scale if scale.size > 1 else float(scale[0]),
                               zero_point=np.zeros(scale.size, np.int64))

    def out_scale(self, x_scale: float, w_scales: np.ndarray, taps: int) -> float:
        """An output scale for a sum of `taps` products: about the spread of the result over the range."""
        return float(x_scale * float(np.mean(w_scales)) * 127 * math.sqrt(taps) / 40)

    def conv(self, x, shape, out_channels: int, kernel=(3, 3), stride=1, padding="SAME", act="RELU",
             depthwise: bool = False, multiplier: int = 1, dilation: int = 1, per_channel: bool = True):
        t, x_scale, _ = x
        n, h, w, c = shape
        oh = _window_out(h, kernel[0], stride, padding, dilation)
        ow = _window_out(w, kernel[1], stride, padding, dilation)
        if depthwise:
            out_channels = c * multiplier
            wt, ws = self.weights((1, *kernel, out_channels), 3, per_channel)
            taps = kernel[0] * kernel[1]
        else:
            wt, ws = self.weights((out_channels, *kernel, c), 0, per_channel)
            taps = kernel[0] * kernel[1] * c
        bias = self.bias(out_channels, x_scale, ws)
        y = self.tensor((n, oh, ow, out_channels), self.out_scale(x_scale, ws, taps), int(self.rng.integers(-20, 20)))
        options = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function=act,
                       dilation_w_factor=dilation, dilation_h_factor=dilation)
        if depthwise:
            options["depth_multiplier"] = multiplier
        self.b.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [t, wt, bias], [y[0]], **options)
        return y, (n, oh, ow, out_channels)

    def dense(self, x, depth: int, units: int, act="NONE", out_shape=None, per_channel: bool = False,
              bias: bool = True):
        t, x_scale, _ = x
        wt, ws = self.weights((units, depth), 0, per_channel)
        b = self.bias(units, x_scale, ws) if bias else None
        y = self.tensor(out_shape or (1, units), self.out_scale(x_scale, ws, depth), int(self.rng.integers(-20, 20)))
        self.b.op("FULLY_CONNECTED", [t, wt, b], [y[0]], fused_activation_function=act)
        return y

    def pool(self, x, shape, op: str, kernel, stride, padding="VALID"):
        t, scale, zero_point = x
        n, h, w, c = shape
        oh, ow = _window_out(h, kernel[0], stride, padding), _window_out(w, kernel[1], stride, padding)
        y = self.tensor((n, oh, ow, c), scale, zero_point)
        self.b.op(op, [t], [y[0]], padding=padding, stride_w=stride, stride_h=stride, filter_width=kernel[1],
                  filter_height=kernel[0])
        return y, (n, oh, ow, c)

    def add(self, a, b, shape, act="NONE"):
        y = self.tensor(shape, max(a[1], b[1]) * 1.5, int(self.rng.integers(-20, 20)))
        self.b.op("ADD", [a[0], b[0]], [y[0]], fused_activation_function=act)
        return y

    def reshape(self, x, shape):
        t, scale, zero_point = x
        y = self.tensor(shape, scale, zero_point)
        self.b.op("RESHAPE", [t, self.b.constant(self._name("shape"), np.array(shape, np.int32))], [y[0]],
                  new_shape=list(shape))
        return y

    def softmax(self, x, shape, beta: float = 1.0):
        if self.int8:
            y = (self.b.tensor(self._name("t"), shape, "int8", scale=1 / 256, zero_point=-128), 1 / 256, -128)
        else:
            y = self.tensor(shape, 1.0)
        self.b.op("SOFTMAX", [x[0]], [y[0]], beta=beta)
        return y

    def build(self, *outputs) -> bytes:
        for y in outputs:
            self.b.output(y[0])
        return self.b.build()


def ds_cnn(int8: bool, seed: int = 0) -> bytes:
    """MLPerf Tiny's keyword spotting network in small: a 10x4 stride-2 convolution, depthwise-separable
    blocks, average pooling over the whole map, a dense layer and softmax."""
    net = Net(int8, seed)
    shape = (1, 49, 10, 1)
    x = net.input(shape, 0.5847, 83)
    x, shape = net.conv(x, shape, 16, kernel=(10, 4), stride=2)
    for _ in range(2):
        x, shape = net.conv(x, shape, 0, depthwise=True)
        x, shape = net.conv(x, shape, 16, kernel=(1, 1))
    x, shape = net.pool(x, shape, "AVERAGE_POOL_2D", shape[1:3], 1)
    x = net.reshape(x, (1, shape[3]))
    x = net.dense(x, shape[3], 12)
    return net.build(net.softmax(x, (1, 12)))


def resnet_block(int8: bool, seed: int = 0) -> bytes:
    """MLPerf Tiny's image classification network's first stage: a convolution and a residual block,
    a strided block with a 1x1 shortcut, pooling, dense, softmax."""
    net = Net(int8, seed)
    shape = (1, 16, 16, 3)
    x = net.input(shape, 1.0, -128)
    x, shape = net.conv(x, shape, 8)
    y, _ = net.conv(x, shape, 8)
    y, _ = net.conv(y, shape, 8, act="NONE")
    x = net.add(x, y, shape, act="RELU")
    y, half = net.conv(x, shape, 16, stride=2)
    y, _ = net.conv(y, half, 16, act="NONE")
    shortcut, _ = net.conv(x, shape, 16, kernel=(1, 1), stride=2, act="NONE")
    x = net.add(y, shortcut, half, act="RELU")
    x, shape = net.pool(x, half, "AVERAGE_POOL_2D", half[1:3], 1)
    x = net.reshape(x, (1, 16))
    x = net.dense(x, 16, 10)
    return net.build(net.softmax(x, (1, 10)))


def lstm(batch: int = 2, steps: int = 5, width: int = 3, hidden: int = 4, time_major: bool = False,
         peepholes: bool = False, stacked: bool = False, cell_clip: float = 0.0, cifg: bool = False,
         seed: int = 0) -> bytes:
    """A float32 UNIDIRECTIONAL_SEQUENCE_LSTM (two in a row if `stacked`) over input x, its output and cell
    state variable tensors, a FULLY_CONNECTED head on its outputs. With `cifg`, no input gate (i = 1 - f)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    shape = (steps, batch, width) if time_major else (batch, steps, width)
    x = b.input("x", shape, "float32")

    names = iter(range(10**6))

    def layer(x: int, width: int, k: int) -> int:
        def array(*dims):
            return b.constant(f"l{k}_{next(names)}", (rng.standard_normal(dims) * 0.6).astype(np.float32))
        operands = [x] + [array(hidden, width) for _ in range(4)] + [array(hidden, hidden) for _ in range(4)]
        operands += [array(hidden) for _ in range(3)] if peepholes else [None] * 3
        operands += [array(hidden) for _ in range(4)] + [None, None]
        if cifg:        # the input gate's weights, peephole and bias absent
            operands[1] = operands[5] = operands[9] = operands[12] = None
        operands += [b.tensor(f"l{k}_h", (batch, hidden), "float32", variable=True),
                     b.tensor(f"l{k}_c", (batch, hidden), "float32", variable=True)]
        y = b.tensor(f"l{k}_y", (*shape[:2], hidden), "float32")
        b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", operands, [y], fused_activation_function="TANH", time_major=time_major,
             cell_clip=cell_clip)
        return y

    y = layer(x, width, 0)
    if stacked:
        y = layer(y, hidden, 1)
    flat = b.tensor("flat", (batch * steps, hidden), "float32")
    b.op("RESHAPE", [y, b.constant("flat_shape", np.array([batch * steps, hidden], np.int32))], [flat])
    out = b.tensor("out", (batch * steps, 2), "float32")
    b.op("FULLY_CONNECTED", [flat, b.constant("fc_w", rng.standard_normal((2, hidden)).astype(np.float32)), None],
         [out])
    b.output(out)
    return b.build()


def integer_lstm(batch: int = 2, steps: int = 6, width: int = 9, hidden: int = 7, time_major: bool = False,
                 act: str = "int8", x_zp: int = -128, h_zp: int = -1, cell_power: int | None = -11,
                 cell_clip: float = 0.0, cell_act: str = "TANH", stacked: bool = False, head: int = 0,
                 peepholes: bool = False, per_channel: bool = False, cifg: bool = False, seed: int = 0) -> bytes:
    """UNIDIRECTIONAL_SEQUENCE_LSTM as TFLite's converter quantizes it (int8 activations, or int16 ones: 16x8),
    the LSTM's output the model's (two LSTMs in a row if `stacked`; a FULLY_CONNECTED of `head` units after
    it): int8 weights of one scale per matrix, int32 (int64) biases of s_x * s_w, an int16 cell state of
    scale 2**cell_power. What TFLite Micro does not take, for the refusals: `peepholes`, weights `per_channel`,
    a cell scale that is no power of two (cell_power None), no input gate (`cifg`)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    wide = act == "int16"
    if wide:
        x_zp = h_zp = 0
    shape = (steps, batch, width) if time_major else (batch, steps, width)
    x_scale, h_scale = (1 / 4096, 1 / 32768) if wide else (0.05, 2 / 255)
    x = b.input("x", shape, act, scale=x_scale, zero_point=x_zp)
    bias_type = np.int64 if wide else np.int32
    names = iter(range(10**6))

    def layer(x: int, width: int, x_scale: float, k: int) -> int:
        scales = []

        def matrix(n: int) -> int:
            scales.append(float(rng.uniform(0.5, 2.0)) / (127 * np.sqrt(n)))
            scale = [scales[-1] * (1 + 0.01 * c) for c in range(hidden)] if per_channel else scales[-1]
            return b.constant(f"l{k}_w{next(names)}", rng.integers(-127, 128, (hidden, n)).astype(np.int8),
                              scale=scale, zero_point=[0] * hidden if per_channel else 0)
        operands = [x] + [matrix(width) for _ in range(4)] + [matrix(hidden) for _ in range(4)]
        operands += [b.constant(f"l{k}_p{g}", rng.integers(-100, 100, hidden).astype(np.int16), scale=1e-3,
                                zero_point=0) if peepholes else None for g in range(3)]
        for g in range(4):
            w_scale = scales[g]
            bias = rng.normal(1.0 if g == 1 else 0.0, 0.5, hidden) / (x_scale * w_scale)
            operands.append(b.constant(f"l{k}_b{g}", np.round(bias).astype(bias_type), scale=x_scale * w_scale,
                                       zero_point=0))
        if cifg:        # the input gate's weights and bias absent
            operands[1] = operands[5] = operands[12] = None
        operands += [None, None]
        operands += [b.tensor(f"l{k}_h", (batch, hidden), act, scale=h_scale, zero_point=h_zp, variable=True),
                     b.tensor(f"l{k}_c", (batch, hidden), "int16",
                              scale=2.0**cell_power if cell_power is not None else 0.0003, zero_point=0,
                              variable=True)]
        y = b.tensor(f"l{k}_y", (*shape[:2], hidden), act, scale=h_scale, zero_point=h_zp)
        b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", operands + [None] * 4, [y], fused_activation_function=cell_act,
             time_major=time_major, cell_clip=cell_clip)
        return y

    y = layer(x, width, x_scale, 0)
    if stacked:
        y = layer(y, hidden, h_scale, 1)
    if head:
        flat = b.tensor("flat", (batch * steps, hidden), act, scale=h_scale, zero_point=h_zp)
        b.op("RESHAPE", [y, b.constant("flat_shape", np.array([batch * steps, hidden], np.int32))], [flat])
        out = b.tensor("out", (batch * steps, head), act, scale=0.1 if not wide else 1 / 2048, zero_point=0)
        w = b.constant("fc_w", rng.integers(-127, 128, (head, hidden)).astype(np.int8), scale=0.01, zero_point=0)
        b.op("FULLY_CONNECTED", [flat, w, None], [out])
        y = out
    b.output(y)
    return b.build()


def svdf(dtype: str = "float32", batch: int = 2, width: int = 12, filters: int = 8, memory: int = 5, rank: int = 2,
         act: str = "RELU", bias: bool = True, layers: int = 2, seed: int = 0) -> bytes:
    """SVDF layers in a row, float32 or integer: int8 input and output with `dtype` ("int16" or "int8") state
    and time weights, encodings that keep the values within their ranges."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    integer = dtype != "float32"
    x = b.input("x", (batch, width), "int8" if integer else "float32", *((0.05, -3) if integer else ()))
    x_scale = 0.05
    for k in range(layers):
        units = filters // rank
        if integer:
            state_scale = 0.004 if dtype == "int16" else 0.25
            w = b.constant(f"w{k}", rng.integers(-127, 128, (filters, width)).astype(np.int8), scale=0.01, zero_point=0)
            limit = 2**15 - 1 if dtype == "int16" else 127
            t = b.constant(f"t{k}", rng.integers(-limit, limit + 1, (filters, memory)).astype(dtype),
                           scale=0.5 / limit, zero_point=0)
            bias_t = b.constant(f"b{k}", rng.integers(-2000, 2000, units).astype(np.int32),
                                scale=state_scale * 0.5 / limit, zero_point=0) if bias else None   # s_state s_time
            state = b.tensor(f"s{k}", (batch, filters * memory), dtype, scale=state_scale,
                             zero_point=0 if dtype == "int16" else 5, variable=True)
            y = b.tensor(f"y{k}", (batch, units), "int8", scale=0.06, zero_point=-10)
            x_scale = 0.06
        else:
            w = b.constant(f"w{k}", (rng.standard_normal((filters, width)) * 0.3).astype(np.float32))
            t = b.constant(f"t{k}", (rng.standard_normal((filters, memory)) * 0.3).astype(np.float32))
            bias_t = b.constant(f"b{k}", rng.standard_normal(units).astype(np.float32)) if bias else None
            state = b.tensor(f"s{k}", (batch, filters * memory), "float32", variable=True)
            y = b.tensor(f"y{k}", (batch, units), "float32")
        b.op("SVDF", [x, w, t, bias_t, state], [y], rank=rank, fused_activation_function=act)
        x, width = y, units
    b.output(x)
    del x_scale
    return b.build()
