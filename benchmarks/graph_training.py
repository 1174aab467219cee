"""Train a float ONNX classifier's weights with PyTorch, the graph itself being the model.

The zoo builds its models as ONNX graphs with random weights. A quantizer's figures on random weights say
little about trained ones: trained weights and activations have the outliers, the correlated channels and
the small margins that quantization meets in the field. `train` runs the graph in PyTorch (each ONNX node
as the torch function it means, every float initializer a parameter, BatchNormalization with batch
statistics and running averages as in training), fits it to labelled samples with cross-entropy on the
scores before the final Softmax, and writes the trained values back into the same graph.

Needs PyTorch (the CPU wheel: `pip install torch==2.13.0`); only the benchmarks use it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

try:
    import torch
    import torch.nn.functional as F
except ImportError:         # pragma: no cover - the message says what to install
    torch = None


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads(pads: list[int]) -> tuple[list[int], bool]:
    """ONNX [begin..., end...] as torch's symmetric padding, or as explicit F.pad widths (last axis first)."""
    half = len(pads) // 2
    if pads[:half] == pads[half:]:
        return pads[:half], True
    widths = []
    for axis in reversed(range(half)):
        widths += [pads[axis], pads[axis + half]]
    return widths, False


def _conv(x, w, b, a):
    pads = a.get("pads", [0] * (2 * (w.dim() - 2)))
    padding, symmetric = _pads(list(pads))
    if not symmetric:
        x, padding = F.pad(x, padding), 0
    return F.conv2d(x, w, b, a.get("strides", 1), padding, a.get("dilations", 1), a.get("group", 1))


def _average_pool(x, a):
    padding, symmetric = _pads(list(a.get("pads", [0, 0, 0, 0])))
    if not symmetric:
        raise NotImplementedError("AveragePool with asymmetric pads")
    return F.avg_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), padding,
                        count_include_pad=bool(a.get("count_include_pad", 0)))


def _lstm(x, w, r, b, a):
    """ONNX LSTM, one forward direction, default activations; gates in ONNX's order i, o, f, c."""
    if a.get("direction", b"forward") != b"forward":
        raise NotImplementedError("LSTM other than forward")
    hidden = a["hidden_size"]
    bias = b[0, :4 * hidden] + b[0, 4 * hidden:] if b is not None else 0
    h = x.new_zeros(x.shape[1], hidden)
    c = x.new_zeros(x.shape[1], hidden)
    ys = []
    for step in x:
        gates = step @ w[0].T + h @ r[0].T + bias
        i, o, f, g = gates.split(hidden, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        ys.append(h)
    y = torch.stack(ys)[:, None]                       # (seq, directions, batch, hidden)
    return y, h[None], c[None]


def _reshape(x, shape):
    shape = [int(s) for s in shape]
    if shape[0] == 1:               # the graph's batch of one: keep the training batch on the first axis
        shape[0] = -1
    return x.reshape(shape)


def _slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    index = [slice(None)] * x.dim()
    for i, axis in enumerate(axes):
        step = 1 if steps is None else int(steps[i])
        index[int(axis)] = slice(int(starts[i]), min(int(ends[i]), x.shape[int(axis)]), step)
    return x[tuple(index)]


def _run_node(node: onnx.NodeProto, args: list, training: bool, stats: dict):
    a = _attrs(node)
    op = node.op_type
    if op == "Conv":
        return _conv(args[0], args[1], args[2] if len(args) > 2 else None, a)
    if op == "BatchNormalization":
        x, scale, bias = args[:3]
        mean, var = stats[node.input[3]], stats[node.input[4]]
        return F.batch_norm(x, mean, var, scale, bias, training, 1 - a.get("momentum", 0.9),
                            a.get("epsilon", 1e-5))
    if op == "Relu":
        return F.relu(args[0])
    if op == "Clip":
        return args[0].clamp(float(args[1]), float(args[2]))
    if op == "Add":
        return args[0] + args[1]
    if op == "MatMul":
        return args[0] @ args[1]
    if op == "Gemm":
        weight = args[1].T if a.get("transB", 0) else args[1]
        x = args[0].T if a.get("transA", 0) else args[0]
        y = a.get("alpha", 1.0) * (x @ weight)
        return y + a.get("beta", 1.0) * args[2] if len(args) > 2 else y
    if op == "AveragePool":
        return _average_pool(args[0], a)
    if op == "GlobalAveragePool":
        return args[0].mean(dim=tuple(range(2, args[0].dim())), keepdim=True)
    if op == "Flatten":
        return args[0].flatten(a.get("axis", 1))
    if op == "Reshape":
        return _reshape(args[0], args[1].tolist())
    if op == "Transpose":
        return args[0].permute(a["perm"])
    if op == "Slice":
        return _slice(args[0], *[t.tolist() for t in args[1:]])
    if op == "Softmax":
        return F.softmax(args[0], a.get("axis", -1))
    if op == "LSTM":
        return _lstm(args[0], args[1], args[2], args[3] if len(args) > 3 else None, a)
    raise NotImplementedError(f"no training form for {op} (node {node.name or node.output[0]})")


def _statistics(model: onnx.ModelProto) -> set[str]:
    """The running means and variances of BatchNormalization: updated by training, not by the optimizer."""
    return {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}


def _forward(model, x, values: dict, stats: dict, training: bool):
    env = dict(values)
    env[model.graph.input[0].name] = x
    nodes = list(model.graph.node)
    final = nodes[-1]
    for node in nodes:
        if node is final and node.op_type == "Softmax":
            return env[node.input[0]]               # the scores the loss is taken on
        out = _run_node(node, [env[i] if i else None for i in node.input], training, stats)
        for name, value in zip(node.output, out if isinstance(out, tuple) else (out,)):
            if name:
                env[name] = value
    return env[model.graph.output[0].name]


def train(model: onnx.ModelProto, samples: np.ndarray, labels: np.ndarray, epochs: int = 12,
          batch: int = 64, rate: float = 2e-3, seed: int = 0) -> onnx.ModelProto:
    """`model` (batch of one, one input, class scores out) with every float weight trained by Adam on
    `samples` (batch axis first) and their `labels`."""
    if torch is None:
        raise SystemExit("training the zoo's models needs PyTorch: pip install torch==2.13.0 (the CPU wheel)")
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    frozen = _statistics(model)
    values, stats, params = {}, {}, []
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        tensor = torch.tensor(array)
        if init.name in frozen:
            stats[init.name] = tensor.clone()
            values[init.name] = stats[init.name]
        elif array.dtype == np.float32 and array.ndim > 0:
            tensor.requires_grad_(True)
            params.append(tensor)
            values[init.name] = tensor
        else:
            values[init.name] = tensor
    optimizer = torch.optim.AdamW(params, lr=rate, weight_decay=0.05)
    x_all, y_all = torch.tensor(samples), torch.tensor(labels, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    steps = epochs * -(-len(samples) // batch)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, rate, total_steps=steps)
    for _ in range(epochs):
        order = torch.randperm(len(samples), generator=generator)
        for start in range(0, len(samples), batch):
            pick = order[start:start + batch]
            if len(pick) < 2:       # batch statistics need two samples
                continue
            scores = _forward(model, x_all[pick], values, stats, training=True)
            loss = F.cross_entropy(scores.reshape(len(pick), -1), y_all[pick])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    trained = onnx.ModelProto()
    trained.CopyFrom(model)
    for init in trained.graph.initializer:
        if init.name in values:
            array = values[init.name].detach().numpy().astype(numpy_helper.to_array(init).dtype)
            init.CopyFrom(numpy_helper.from_array(array, init.name))
    return trained


def accuracy(model: onnx.ModelProto, samples: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy of `model` as onnxruntime runs it, one sample at a time."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    hits = [int(np.argmax(session.run(None, {name: s[None]})[0])) == int(y) for s, y in zip(samples, labels)]
    return float(np.mean(hits))
