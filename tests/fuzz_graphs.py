"""Random valid ONNX graphs for differential fuzzing of aot (see fuzz_check.py and fuzz_reduce.py).

`generate(seed, index)` always builds the same graph for the same pair: every random choice comes from a
generator seeded with both. A graph grows by appending ops, each picked from `MAKERS` and applied to
tensors already in the graph (or to new inputs, initializers and Constant nodes it creates); every maker
knows its op's typing and shape rules, so the model passes the ONNX checker with strict shape inference.

Values are kept where float32 arithmetic is well conditioned, so that aot and the reference can be
compared with a tolerance that means something:
- each tensor carries a bound on its magnitude (`mag`); ops that would overflow or lose all precision
  (Exp of a large value, products of large values) are not applied, or their operand is squashed first;
- functions with a restricted domain (Log, Sqrt, Asin, Acosh, ...) get their operand mapped into it;
- ops whose result jumps at some input value (Floor, Round, Sign, comparisons, ArgMax, TopK, casts to
  integers, ...) only take *exact* tensors: graph inputs and constants, and what exact ops (moves,
  Max/Min, Neg, Abs, Relu) make of them, whose values aot and the reference agree on to the bit;
- an int8 QDQ island quantizes exact tensors only and runs one integer op (Conv, MatMul, Gemm, Add, Mul,
  pooling, Concat, ...); its result (int8, or dequantized) is consumed only by ops that move values, so
  a legitimate one-step rounding difference stays one step where it is compared.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

FLOAT = "float32"
INTS = ("int64", "int32")
ONNX_TYPE = {"float32": onnx.TensorProto.FLOAT, "float64": onnx.TensorProto.DOUBLE,
             "int64": onnx.TensorProto.INT64, "int32": onnx.TensorProto.INT32, "int8": onnx.TensorProto.INT8,
             "uint8": onnx.TensorProto.UINT8, "int16": onnx.TensorProto.INT16, "bool": onnx.TensorProto.BOOL}
OPSETS = (17, 18, 20, 21)
MAX_MAG = 1e4       # no tensor grows past this: float32 keeps ~1e-3 absolute precision there


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    mag: float = 4.0          # bound on max |value| (random normal inputs are within 4 sigma, near enough)
    exact: bool = True        # aot and the reference agree on it to the bit
    quant: bool = False       # carries a quantization step of rounding freedom: only moves may consume it
    const: bool = False       # an initializer or a Constant node's output
    uses: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Case:
    """One generated graph: the model, its input values and the ops it contains."""
    seed: int
    index: int
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    ops: Counter = field(default_factory=Counter)


class Skip(Exception):
    """A maker found nothing to apply its op to; another one is tried."""


class Builder:
    def __init__(self, rng: np.random.Generator, opset: int):
        self.rng = rng
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.graph_inputs: list[Tensor] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.tensors: list[Tensor] = []
        self.ops: Counter = Counter()
        self._count = 0

    # ---- names, inputs, constants
    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def add(self, t: Tensor) -> Tensor:
        self.tensors.append(t)
        return t

    def new_input(self, shape: tuple[int, ...], dtype: str = FLOAT, values: np.ndarray | None = None) -> Tensor:
        if values is None:
            values = self.random_values(shape, dtype)
        t = Tensor(self.fresh("in"), tuple(shape), dtype, mag=_mag(values))
        self.graph_inputs.append(t)
        self.feeds[t.name] = np.asarray(values, dtype=dtype).reshape(shape)
        return self.add(t)

    def random_values(self, shape, dtype: str) -> np.ndarray:
        if dtype == FLOAT:
            return self.rng.standard_normal(shape).astype(np.float32)
        if dtype == "bool":
            return self.rng.random(shape) < 0.5
        lo, hi = (-128, 128) if dtype == "int8" else (0, 256) if dtype == "uint8" else (-6, 7)
        return self.rng.integers(lo, hi, shape).astype(dtype)

    def constant(self, values: np.ndarray, register: bool = True, as_node: bool | None = None) -> Tensor:
        """An initializer or, at random, a Constant node holding `values`."""
        values = np.asarray(values)
        name = self.fresh("c")
        if as_node is None:
            as_node = bool(self.rng.random() < 0.3)
        if as_node:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(values, name)))
            self.ops["Constant"] += 1
        else:
            self.inits.append(numpy_helper.from_array(values, name))
        t = Tensor(name, tuple(values.shape), str(values.dtype), mag=_mag(values), const=True)
        return self.add(t) if register else t

    def ints(self, values) -> str:
        """An int64 constant operand (shapes, axes, pads): never a tensor other ops pick."""
        return self.constant(np.asarray(values, dtype=np.int64), register=False).name

    def weight(self, shape, scale: float | None = None) -> Tensor:
        scale = scale if scale is not None else 1.0 / math.sqrt(max(1, int(np.prod(shape[1:]))))
        return self.constant((self.rng.standard_normal(shape) * scale).astype(np.float32), register=False)

    # ---- nodes
    def node(self, op: str, inputs: list[str], outputs: list[Tensor], **attrs) -> list[Tensor]:
        self.nodes.append(helper.make_node(op, inputs, [t.name for t in outputs], **attrs))
        self.ops[op] += 1
        for t in outputs:
            self.add(t)
        return outputs

    def out(self, shape, dtype: str = FLOAT, mag: float = 4.0, exact: bool = False, quant: bool = False) -> Tensor:
        return Tensor(self.fresh("t"), tuple(int(d) for d in shape), dtype, min(mag, 1e30), exact, quant)

    def one(self, op: str, inputs: list[Tensor | str], shape, dtype: str = FLOAT, mag: float = 4.0,
            exact: bool = False, quant: bool = False, **attrs) -> Tensor:
        names = [x.name if isinstance(x, Tensor) else x for x in inputs]
        for x in inputs:
            if isinstance(x, Tensor):
                x.uses += 1
        return self.node(op, names, [self.out(shape, dtype, mag, exact, quant)], **attrs)[0]

    # ---- picking operands
    def pick(self, pred: Callable[[Tensor], bool], fresh_shape: tuple[int, ...] | None = None,
             dtype: str = FLOAT) -> Tensor:
        """A random tensor satisfying `pred` (recent ones more likely), else a new input if
        `fresh_shape` is given, else Skip."""
        cands = [t for t in self.tensors if not t.quant and pred(t)]
        if cands and self.rng.random() < 0.9:
            weights = np.array([1.0 + i for i in range(len(cands))]) / (1.0 + np.array([c.uses for c in cands]))
            return cands[int(self.rng.choice(len(cands), p=weights / weights.sum()))]
        if fresh_shape is None:
            raise Skip
        return self.new_input(fresh_shape, dtype)

    def float_tensor(self, min_rank: int = 0, max_rank: int = 4, exact: bool = False, max_mag: float = MAX_MAG,
                     min_size: int = 1) -> Tensor:
        rank = int(self.rng.integers(max(min_rank, 1), max_rank + 1))
        return self.pick(lambda t: t.dtype == FLOAT and min_rank <= t.rank <= max_rank and t.mag <= max_mag
                         and (t.exact or not exact) and t.size >= min_size, self.random_shape(rank))

    def random_shape(self, rank: int, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
        return tuple(int(d) for d in self.rng.integers(lo, hi + 1, rank))

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    # ---- the model
    def model(self, outputs: list[Tensor]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "fuzz",
            [helper.make_tensor_value_info(t.name, ONNX_TYPE[t.dtype], list(t.shape)) for t in self.graph_inputs],
            [helper.make_tensor_value_info(t.name, ONNX_TYPE[t.dtype], list(t.shape)) for t in outputs],
            initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="fuzz")
        model.ir_version = 8
        return model


def _mag(values: np.ndarray) -> float:
    values = np.asarray(values)
    if values.size == 0 or values.dtype == bool:
        return 1.0
    return float(np.max(np.abs(values.astype(np.float64)))) + 1e-3


# ---------------------------------------------------------------- operands made on purpose


def second_operand(b: Builder, x: Tensor, exact: bool = False) -> Tensor:
    """A float operand broadcasting against `x`: an existing tensor, a new input, an initializer or a
    scalar (a Constant, at times of another type followed by CastLike as exporters write inlined
    functions)."""
    kind = b.rng.random()
    if kind < 0.2:
        return scalar_like(b, x)
    shape = broadcast_partner(b, x.shape)
    if kind < 0.4:
        values = b.rng.standard_normal(shape).astype(np.float32)
        return b.constant(values)
    return b.pick(lambda t: t.dtype == FLOAT and t.shape == shape and (t.exact or not exact)
                  and t.mag < 100 and t is not x, shape)


def scalar_like(b: Builder, x: Tensor) -> Tensor:
    value = float(np.float32(b.rng.uniform(-2, 2)))
    if b.coin(0.5):
        dtype = b.choice(["float64", "int64", "float32"])
        value = round(value) if dtype == "int64" else value
        shape: tuple[int, ...] = () if b.coin() else (1,)
        c = b.constant(np.full(shape, value, dtype=dtype), register=False, as_node=True)
        if dtype == "float32":
            c.mag = abs(value) + 1e-3
            return b.add(c)
        return b.one("CastLike", [c, x], shape, mag=abs(value) + 1e-3, exact=True)
    return b.constant(np.full(() if b.coin() else (1,), value, dtype=np.float32))


def broadcast_partner(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape` (a suffix of it, some dimensions 1), or `shape` itself."""
    if b.coin(0.4):
        return shape
    rank = int(b.rng.integers(0, len(shape) + 1))
    tail = shape[len(shape) - rank:]
    return tuple(1 if b.coin(0.4) else d for d in tail)


def broadcast(a: tuple[int, ...], c: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(d) for d in np.broadcast_shapes(a, c))


def squash(b: Builder, x: Tensor, limit: float) -> Tensor:
    """x itself when |x| <= limit, else Tanh(x) * limit."""
    if x.mag <= limit:
        return x
    t = b.one("Tanh", [x], x.shape, mag=1.0)
    return b.one("Mul", [t, b.constant(np.float32(limit), register=False)], x.shape, mag=limit)


# ---------------------------------------------------------------- elementwise float ops

# op -> (domain mapping, magnitude of the result from that of the operand, attributes)
UNARY: dict[str, tuple[str, Callable[[float], float]]] = {
    "Relu": ("any", lambda m: m), "Sigmoid": ("any", lambda m: 1.0), "Tanh": ("any", lambda m: 1.0),
    "Abs": ("any", lambda m: m), "Neg": ("any", lambda m: m), "Exp": ("small", lambda m: math.exp(min(m, 8))),
    "Sin": ("any", lambda m: 1.0), "Cos": ("any", lambda m: 1.0), "Atan": ("any", lambda m: 1.6),
    "Tan": ("unit", lambda m: 2.0), "Asin": ("unit", lambda m: 1.6), "Acos": ("unit", lambda m: 3.2),
    "Atanh": ("unit", lambda m: 1.5), "Sinh": ("small", lambda m: math.exp(min(m, 8))),
    "Cosh": ("small", lambda m: math.exp(min(m, 8))), "Asinh": ("any", lambda m: math.log(m + 2) + 1),
    "Acosh": ("ge1", lambda m: math.log(m + 2) + 1), "Sqrt": ("pos", lambda m: math.sqrt(m + 1)),
    "Log": ("pos", lambda m: max(3.0, math.log(m + 2))), "Reciprocal": ("pos", lambda m: 2.0),
    "Softplus": ("any", lambda m: m + 1), "Softsign": ("any", lambda m: 1.0), "Erf": ("any", lambda m: 1.0),
    "Elu": ("any", lambda m: m + 1), "Selu": ("any", lambda m: 1.1 * m + 2), "Celu": ("any", lambda m: m + 1),
    "LeakyRelu": ("any", lambda m: m), "HardSigmoid": ("any", lambda m: 1.0), "HardSwish": ("any", lambda m: m),
    "ThresholdedRelu": ("exact", lambda m: m), "Shrink": ("exact", lambda m: m), "Clip": ("any", lambda m: m),
    "Mish": ("any", lambda m: m + 1), "Gelu": ("any", lambda m: m + 1), "Identity": ("any", lambda m: m),
    "Floor": ("exact", lambda m: m + 1), "Ceil": ("exact", lambda m: m + 1), "Round": ("exact", lambda m: m + 1),
    "Sign": ("exact", lambda m: 1.0), "Dropout": ("any", lambda m: m),
}
EXACT_UNARY = {"Relu", "Abs", "Neg", "Identity", "Floor", "Ceil", "Round", "Sign", "Clip", "Dropout"}
MIN_OPSET = {"Mish": 18, "Gelu": 20}


def make_unary(b: Builder) -> None:
    op = b.choice([o for o in UNARY if b.opset >= MIN_OPSET.get(o, 0)])
    domain, result_mag = UNARY[op]
    x = b.float_tensor(exact=domain == "exact")
    x = map_domain(b, x, domain)
    attrs: dict = {}
    if op in ("LeakyRelu", "Elu", "Celu") and b.coin():
        attrs["alpha"] = float(np.float32(b.rng.uniform(0.05, 2)))
    if op == "HardSigmoid" and b.coin():
        attrs.update(alpha=float(np.float32(b.rng.uniform(0.1, 0.5))), beta=float(np.float32(b.rng.uniform(0, 1))))
    if op == "ThresholdedRelu":
        attrs["alpha"] = float(np.float32(b.rng.uniform(-0.5, 1.5)))
    if op == "Shrink":
        attrs.update(lambd=float(np.float32(b.rng.uniform(0, 1))), bias=float(np.float32(b.rng.uniform(0, 1))))
    if op == "Gelu" and b.coin():
        attrs["approximate"] = "tanh"
    inputs: list = [x]
    if op == "Clip":
        # min, max, both or neither; an absent min is the empty name
        lo = b.constant(np.float32(b.rng.uniform(-2, 0)), register=False).name if b.coin(0.8) else ""
        hi = [b.constant(np.float32(b.rng.uniform(0, 2)), register=False).name] if b.coin(0.8) else []
        inputs = [x, lo, *hi] if lo or hi else [x]
    exact = x.exact and op in EXACT_UNARY
    b.one(op, inputs, x.shape, mag=result_mag(x.mag), exact=exact, **attrs)


def map_domain(b: Builder, x: Tensor, domain: str) -> Tensor:
    """x mapped into the op's domain, through ops that are themselves part of the test."""
    if domain == "small":
        return squash(b, x, 3.0)
    if domain == "unit":
        t = b.one("Tanh", [x], x.shape, mag=1.0)
        return b.one("Mul", [t, b.constant(np.float32(0.9), register=False)], x.shape, mag=0.9)
    if domain in ("pos", "ge1"):
        a = b.one("Abs", [x], x.shape, mag=x.mag, exact=x.exact)
        offset = np.float32(0.5 if domain == "pos" else 1.25)
        return b.one("Add", [a, b.constant(offset, register=False)], x.shape, mag=x.mag + 1.25)
    return x


BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Mod")


def make_binary(b: Builder) -> None:
    op = b.choice(BINARY)
    x = b.float_tensor(max_mag=100 if op in ("Mul", "Div", "Pow") else MAX_MAG)
    y = second_operand(b, x)
    if op == "PRelu":
        # the slope broadcasts to x (unidirectionally)
        y = b.constant(b.rng.uniform(-0.5, 0.5, broadcast_partner(b, x.shape)).astype(np.float32))
    elif b.coin(0.3):
        x, y = y, x
    shape = broadcast(x.shape, y.shape)
    if op in ("Div", "Mod", "Pow"):
        return make_guarded(b, op, x, y, shape)
    mag = {"Add": x.mag + y.mag, "Sub": x.mag + y.mag, "Mul": x.mag * y.mag}.get(op, max(x.mag, y.mag))
    if mag > MAX_MAG:
        raise Skip
    exact = x.exact and y.exact and op in ("Max", "Min")
    b.one(op, [x, y], shape, mag=mag, exact=exact)


def make_guarded(b: Builder, op: str, x: Tensor, y: Tensor, shape) -> None:
    """Div, Mod and Pow with the second operand kept away from 0 (and Pow's base positive)."""
    if op == "Pow":
        base = map_domain(b, squash(b, x, 3.0), "pos")
        exponent = squash(b, y, 2.0)
        mag = (base.mag + 1) ** exponent.mag
        if mag > MAX_MAG:
            raise Skip
        b.one("Pow", [base, exponent], shape, mag=mag)
        return
    if op == "Mod":
        # fmod of exact operands: exact in both (x - trunc(x/y)*y computed exactly when |x/y| is small)
        x = b.float_tensor(exact=True, max_mag=100)
        y = b.constant((b.rng.uniform(0.5, 2, broadcast_partner(b, x.shape))
                        * b.choice([-1, 1])).astype(np.float32))
        b.one("Mod", [x, y], broadcast(x.shape, y.shape), mag=2.0, fmod=1)
        return
    a = b.one("Abs", [y], y.shape, mag=y.mag, exact=y.exact)
    d = b.one("Add", [a, b.constant(np.float32(0.5), register=False)], y.shape, mag=y.mag + 0.5)
    b.one("Div", [x, d], shape, mag=x.mag * 2)


def make_variadic(b: Builder) -> None:
    op = b.choice(["Sum", "Mean", "Max", "Min"])
    x = b.float_tensor(max_mag=1000)
    operands = [x] + [second_operand(b, x) for _ in range(int(b.rng.integers(1, 4)))]
    shape = x.shape
    for o in operands:
        shape = broadcast(shape, o.shape)
    mag = sum(o.mag for o in operands)
    b.one(op, operands, shape, mag=mag, exact=op in ("Max", "Min") and all(o.exact for o in operands))


# ---------------------------------------------------------------- matrix products and convolution


def make_matmul(b: Builder) -> None:
    a = b.float_tensor(min_rank=1, max_rank=4, max_mag=100)
    k = a.shape[-1]
    n = int(b.rng.integers(1, 9))
    if a.rank >= 2 and b.coin(0.3):
        # both operands computed: a batched product with broadcast batch dimensions
        batch = broadcast_partner(b, a.shape[:-2])
        w = b.pick(lambda t: t.dtype == FLOAT and t.shape == (*batch, k, n) and t.mag < 100, (*batch, k, n))
    else:
        w = b.weight((k, n) if b.coin(0.85) else (k,))
    if a.rank == 1:
        out = w.shape[1:] if w.rank == 2 else ()
        out = tuple(w.shape[:-2]) + tuple(w.shape[-1:]) if w.rank > 2 else out
    else:
        batch = broadcast(a.shape[:-2], w.shape[:-2]) if w.rank > 2 else a.shape[:-2]
        out = (*batch, a.shape[-2]) + ((w.shape[-1],) if w.rank >= 2 else ())
    b.one("MatMul", [a, w], out, mag=a.mag * max(1.0, w.mag) * math.sqrt(k) + 1)


def make_gemm(b: Builder) -> None:
    a = b.float_tensor(min_rank=2, max_rank=2, max_mag=100)
    trans_a, trans_b = int(b.coin(0.3)), int(b.coin())
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = int(b.rng.integers(1, 9))
    w = b.weight((n, k) if trans_b else (k, n))
    inputs = [a, w]
    attrs = {"transA": trans_a, "transB": trans_b}
    if b.coin(0.7):
        c_shape = b.choice([(n,), (1, n), (m, n), (m, 1), ()])
        inputs.append(b.constant(b.rng.standard_normal(c_shape).astype(np.float32)))
    if b.coin(0.3):
        attrs["alpha"] = float(np.float32(b.rng.uniform(0.25, 2)))
    if b.coin(0.3):
        attrs["beta"] = float(np.float32(b.rng.uniform(0.25, 2)))
    b.one("Gemm", inputs, (m, n), mag=a.mag * math.sqrt(k) * 2 + 4, **attrs)


def conv_geometry(b: Builder, spatial: tuple[int, ...], transpose: bool = False) -> dict | None:
    """Random kernel, strides, dilations and pads that fit `spatial`; None when nothing fits."""
    nd = len(spatial)
    kernel = [int(b.rng.integers(1, 4)) for _ in range(nd)]
    strides = [int(b.rng.integers(1, 3)) for _ in range(nd)]
    dilations = [int(b.rng.integers(1, 3)) if b.coin(0.2) else 1 for _ in range(nd)]
    pads = [int(b.rng.integers(0, k)) for k in kernel] + [int(b.rng.integers(0, k)) for k in kernel]
    if not transpose:
        for i, size in enumerate(spatial):
            span = dilations[i] * (kernel[i] - 1) + 1
            if size + pads[i] + pads[i + nd] < span:
                return None
    attrs: dict = {"kernel_shape": kernel, "strides": strides}
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    if b.coin(0.2) and not transpose and all(d == 1 for d in dilations):
        # (onnxruntime does not dilate SAME windows: refused for Conv, another output size for MaxPool)
        attrs["auto_pad"] = b.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
        if attrs["auto_pad"] == "VALID" and any(
                s < dilations[i] * (kernel[i] - 1) + 1 for i, s in enumerate(spatial)):
            return None
    elif any(pads):
        attrs["pads"] = pads
    return attrs


def conv_out(spatial, attrs: dict) -> tuple[int, ...]:
    nd = len(spatial)
    k, s = attrs["kernel_shape"], attrs["strides"]
    d = attrs.get("dilations", [1] * nd)
    auto = attrs.get("auto_pad", "NOTSET")
    p = attrs.get("pads", [0] * 2 * nd)
    out = []
    for i, size in enumerate(spatial):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // s[i]))
        elif auto == "VALID":
            out.append((size - d[i] * (k[i] - 1) - 1) // s[i] + 1)
        else:
            out.append((size + p[i] + p[i + nd] - d[i] * (k[i] - 1) - 1) // s[i] + 1)
    return tuple(out)


def make_conv(b: Builder) -> None:
    x = b.pick(lambda t: t.dtype == FLOAT and t.rank in (3, 4) and t.mag < 100 and t.shape[1] <= 16,
               (1, int(b.rng.integers(1, 9)), *b.random_shape(int(b.rng.integers(1, 3)), 3, 8)))
    c = x.shape[1]
    attrs = conv_geometry(b, x.shape[2:])
    if attrs is None:
        raise Skip
    groups = b.choice([g for g in (1, 1, 2, 3, 4, c) if c % g == 0])
    m = groups * int(b.rng.integers(1, 4)) if groups > 1 else int(b.rng.integers(1, 9))
    if groups > 1:
        attrs["group"] = groups
    w = b.weight((m, c // groups, *attrs["kernel_shape"]))
    inputs = [x, w] + ([b.constant(b.rng.standard_normal(m).astype(np.float32), register=False)] if b.coin(0.7) else [])
    fan = c // groups * int(np.prod(attrs["kernel_shape"]))
    b.one("Conv", inputs, (x.shape[0], m, *conv_out(x.shape[2:], attrs)), mag=x.mag * math.sqrt(fan) + 4, **attrs)


def make_conv_transpose(b: Builder) -> None:
    x = b.pick(lambda t: t.dtype == FLOAT and t.rank in (3, 4) and t.mag < 100 and t.shape[1] <= 16,
               (1, int(b.rng.integers(1, 6)), *b.random_shape(int(b.rng.integers(1, 3)), 2, 5)))
    c, nd = x.shape[1], x.rank - 2
    attrs = conv_geometry(b, x.shape[2:], transpose=True)
    groups = b.choice([g for g in (1, 1, 2, c) if c % g == 0])
    m = int(b.rng.integers(1, 4))
    if groups > 1:
        attrs["group"] = groups
    k, s = attrs["kernel_shape"], attrs["strides"]
    d = attrs.get("dilations", [1] * nd)
    p = attrs.get("pads", [0] * 2 * nd)
    # below the stride (ONNX allows below the dilation too; onnxruntime does not)
    out_pad = [int(b.rng.integers(0, s[i])) if b.coin(0.3) else 0 for i in range(nd)]
    if any(out_pad):
        attrs["output_padding"] = out_pad
    spatial = tuple(s[i] * (x.shape[2 + i] - 1) + out_pad[i] + d[i] * (k[i] - 1) + 1 - p[i] - p[i + nd]
                    for i in range(nd))
    if min(spatial) < 1:
        raise Skip
    w = b.weight((c, m, *k), scale=1.0 / math.sqrt(c * int(np.prod(k))))
    inputs = [x, w] + ([b.constant(b.rng.standard_normal(m * groups).astype(np.float32), register=False)]
                       if b.coin() else [])
    b.one("ConvTranspose", inputs, (x.shape[0], m * groups, *spatial), mag=x.mag * 3 + 4, **attrs)


def make_pool(b: Builder) -> None:
    op = b.choice(["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"])
    x = b.pick(lambda t: t.dtype == FLOAT and t.rank in (3, 4) and t.mag < 1000,
               (1, int(b.rng.integers(1, 5)), *b.random_shape(int(b.rng.integers(1, 3)), 2, 7)))
    if op.startswith("Global"):
        b.one(op, [x], (*x.shape[:2], *[1] * (x.rank - 2)), mag=x.mag, exact=x.exact and op == "GlobalMaxPool")
        return
    attrs = conv_geometry(b, x.shape[2:])
    if attrs is None:
        raise Skip
    nd = x.rank - 2
    pads = attrs.get("pads", [0] * 2 * nd)
    if any(pads[i] >= attrs["kernel_shape"][i] or pads[i + nd] >= attrs["kernel_shape"][i] for i in range(nd)):
        raise Skip
    if op == "LpPool":
        attrs.pop("dilations", None) if b.opset < 18 else None
        attrs["p"] = b.choice([1, 2, 3])
    elif b.coin(0.3) and "auto_pad" not in attrs:
        attrs["ceil_mode"] = 1
    if op == "AveragePool":
        if b.opset < 19:
            attrs.pop("dilations", None)
        if b.coin(0.4):
            attrs["count_include_pad"] = 1
    out = conv_out(x.shape[2:], attrs)
    if attrs.get("ceil_mode"):
        out = ceil_pool_out(x.shape[2:], attrs)
        if out is None:
            raise Skip
    b.one(op, [x], (*x.shape[:2], *out), mag=x.mag * (3 if op == "LpPool" else 1) + 1,
          exact=x.exact and op == "MaxPool", **attrs)


def ceil_pool_out(spatial, attrs) -> tuple[int, ...] | None:
    nd = len(spatial)
    k, s = attrs["kernel_shape"], attrs["strides"]
    d = attrs.get("dilations", [1] * nd)
    p = attrs.get("pads", [0] * 2 * nd)
    out = []
    for i, size in enumerate(spatial):
        span = d[i] * (k[i] - 1) + 1
        o = -(-(size + p[i] + p[i + nd] - span) // s[i]) + 1
        if (o - 1) * s[i] >= size + p[i]:     # the last window starts in the padding: ONNX drops it
            o -= 1
        out.append(o)
    return tuple(out)


# ---------------------------------------------------------------- normalization, reduction, softmax


def make_norm(b: Builder) -> None:
    op = b.choice(["BatchNormalization", "LayerNormalization", "InstanceNormalization", "LpNormalization",
                   "MeanVarianceNormalization", "LRN", "GroupNormalization"])
    min_rank = 4 if op == "LRN" else 3 if op in ("InstanceNormalization", "GroupNormalization") else 2
    x = b.float_tensor(min_rank=min_rank, max_rank=4, max_mag=100, min_size=2)
    c = x.shape[1]
    vec = lambda n, lo=-1.0, hi=1.0: b.constant(b.rng.uniform(lo, hi, n).astype(np.float32), register=False)  # noqa: E731
    attrs: dict = {}
    if op == "BatchNormalization":
        inputs = [x, vec(c, 0.5, 1.5), vec(c), vec(c), vec(c, 0.5, 2)]
        attrs["epsilon"] = float(np.float32(b.choice([1e-5, 1e-3])))
    elif op == "LayerNormalization":
        axis = int(b.rng.integers(-x.rank, x.rank))
        inner = x.shape[axis:]
        if int(np.prod(inner)) < 2:
            raise Skip
        inputs = [x, b.constant(b.rng.uniform(0.5, 1.5, inner).astype(np.float32), register=False)]
        if b.coin():
            inputs.append(b.constant(b.rng.uniform(-1, 1, inner).astype(np.float32), register=False))
        attrs["axis"] = axis
    elif op == "InstanceNormalization":
        if int(np.prod(x.shape[2:])) < 2:
            raise Skip
        inputs = [x, vec(c, 0.5, 1.5), vec(c)]
    elif op == "GroupNormalization":
        if b.opset < 21:      # opset 18's form (scale and bias per group) is deprecated: 21's, per channel
            raise Skip
        groups = b.choice([g for g in range(1, c + 1) if c % g == 0])
        if c // groups * int(np.prod(x.shape[2:])) < 2:
            raise Skip
        inputs = [x, vec(c, 0.5, 1.5), vec(c)]
        attrs["num_groups"] = groups
    elif op == "LpNormalization":
        inputs = [x]
        attrs = {"axis": int(b.rng.integers(-x.rank, x.rank)), "p": b.choice([1, 2])}
    elif op == "MeanVarianceNormalization":
        if x.rank != 4:
            raise Skip
        inputs = [x]
        attrs["axes"] = b.choice([[0, 2, 3], [2, 3], [1], [0, 1, 2, 3]])
        if int(np.prod([x.shape[a] for a in attrs["axes"]])) < 2:
            raise Skip
    else:
        inputs = [x]
        attrs = {"size": b.choice([1, 3, 5]), "alpha": 1e-3, "beta": 0.75, "bias": 1.0}
        if b.coin():
            attrs.update(alpha=float(np.float32(b.rng.uniform(1e-4, 0.5))),
                         beta=float(np.float32(b.rng.uniform(0.5, 1))))
    mag = x.mag * 2 + 2 if op in ("BatchNormalization", "LRN", "LpNormalization") else 2 * math.sqrt(x.size) + 4
    b.one(op, inputs, x.shape, mag=mag, **attrs)


REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def make_reduce(b: Builder) -> None:
    op = b.choice(REDUCE)
    x = b.float_tensor(max_mag=30 if op in ("ReduceLogSumExp",) else 1000, exact=op in ("ReduceMax", "ReduceMin")
                       and b.coin(0.3))
    if op == "ReduceProd":
        x = squash(b, x, 1.5)
        if x.size > 32:
            raise Skip
    if op == "ReduceLogSum":
        x = map_domain(b, x, "pos")
    axes = sorted({int(a) for a in b.rng.integers(0, x.rank, int(b.rng.integers(0, x.rank + 1)))}) if x.rank else []
    keep = int(b.coin())
    attrs: dict = {"keepdims": keep}
    inputs: list = [x]
    neg = [a - x.rank if b.coin(0.3) else a for a in axes]
    if not axes:
        pass         # every axis
    elif b.opset >= 18 or op == "ReduceSum":
        inputs.append(b.ints(neg))
    else:
        attrs["axes"] = neg
    reduced = set(axes) if axes else set(range(x.rank))
    shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape) if keep or i not in reduced)
    n = int(np.prod([x.shape[i] for i in reduced]))
    mag = {"ReduceSum": x.mag * n, "ReduceL1": x.mag * n, "ReduceSumSquare": x.mag ** 2 * n,
           "ReduceProd": 1.5 ** n, "ReduceL2": x.mag * math.sqrt(n)}.get(op, x.mag + math.log(n + 1) + 1)
    if mag > MAX_MAG:
        raise Skip
    b.one(op, inputs, shape, mag=mag, exact=x.exact and op in ("ReduceMax", "ReduceMin"), **attrs)


def make_softmax(b: Builder) -> None:
    op = b.choice(["Softmax", "LogSoftmax", "Softmax", "Hardmax"])
    x = b.float_tensor(min_rank=1, max_mag=100, exact=op == "Hardmax")
    axis = int(b.rng.integers(-x.rank, x.rank))
    b.one(op, [x], x.shape, mag=2 * x.mag + 5 if op == "LogSoftmax" else 1.0, exact=op == "Hardmax", axis=axis)


def make_arg(b: Builder) -> None:
    op = b.choice(["ArgMax", "ArgMin"])
    x = b.float_tensor(min_rank=1, exact=True)
    axis = int(b.rng.integers(-x.rank, x.rank))
    keep = int(b.coin())
    shape = tuple(1 if i == axis % x.rank else d for i, d in enumerate(x.shape) if keep or i != axis % x.rank)
    attrs = {"axis": axis, "keepdims": keep}
    if b.coin(0.3):
        attrs["select_last_index"] = 1
    b.one(op, [x], shape, "int64", mag=x.shape[axis], exact=True, **attrs)


def make_topk(b: Builder) -> None:
    x = b.float_tensor(min_rank=1, exact=True)
    axis = int(b.rng.integers(-x.rank, x.rank))
    k = int(b.rng.integers(1, x.shape[axis] + 1))
    shape = tuple(k if i == axis % x.rank else d for i, d in enumerate(x.shape))
    attrs = {"axis": axis, "largest": int(b.coin(0.7)), "sorted": 1}
    x.uses += 1
    b.node("TopK", [x.name, b.ints([k])], [b.out(shape, mag=x.mag, exact=True),
                                           b.out(shape, "int64", mag=x.shape[axis], exact=True)], **attrs)


def make_cumsum(b: Builder) -> None:
    x = b.float_tensor(min_rank=1, max_mag=100)
    axis = int(b.rng.integers(-x.rank, x.rank))
    b.one("CumSum", [x, b.ints(axis)], x.shape, mag=x.mag * x.shape[axis],
          exclusive=int(b.coin(0.3)), reverse=int(b.coin(0.3)))


# ---------------------------------------------------------------- views and data movement


def factorize(b: Builder, size: int, rank: int) -> tuple[int, ...]:
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        d = b.choice(divisors)
        dims.append(d)
        size //= d
    dims.append(size)
    b.rng.shuffle(dims)
    return tuple(dims)


def moved(x: Tensor) -> dict:
    """The facts an op that only moves x's values keeps."""
    return {"mag": x.mag, "exact": x.exact, "quant": x.quant}


def make_view(b: Builder, x: Tensor | None = None) -> Tensor:
    op = b.choice(["Reshape", "Transpose", "Slice", "Squeeze", "Unsqueeze", "Expand", "Flatten", "Identity"])
    if x is None:
        x = b.pick(lambda t: t.dtype != "bool" or op != "Expand")
    if op == "Reshape":
        shape = factorize(b, x.size, int(b.rng.integers(1, 5)))
        spec = list(shape)
        if b.coin(0.3):
            spec[int(b.rng.integers(len(spec)))] = -1
        if b.coin(0.3):
            zero = [i for i in range(min(len(spec), x.rank)) if spec[i] == x.shape[i] and spec[i] != -1]
            if zero:
                spec[b.choice(zero)] = 0
        return b.one(op, [x, b.ints(spec)], shape, x.dtype, **moved(x))
    if op == "Transpose":
        if x.rank == 0:
            raise Skip
        perm = [int(p) for p in b.rng.permutation(x.rank)]
        return b.one(op, [x], tuple(x.shape[p] for p in perm), x.dtype, perm=perm, **moved(x))
    if op == "Slice":
        return make_slice(b, x)
    if op == "Squeeze":
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        if not ones:
            raise Skip
        axes = [i for i in ones if b.coin()] or ones[:1]
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        named = b.ints([a - x.rank if b.coin(0.3) else a for a in axes])
        inputs = [x] if b.coin(0.2) and len(axes) == len(ones) else [x, named]
        return b.one(op, inputs, shape, x.dtype, **moved(x))
    if op == "Unsqueeze":
        if x.rank >= 5:
            raise Skip
        n = int(b.rng.integers(1, 3))
        axes = sorted(int(a) for a in b.rng.choice(x.rank + n, n, replace=False))
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        return b.one(op, [x, b.ints(axes)], tuple(shape), x.dtype, **moved(x))
    if op == "Expand":
        grow = [d if d != 1 or not b.coin() else int(b.rng.integers(2, 4)) for d in x.shape]
        lead = [int(b.rng.integers(1, 3)) for _ in range(int(b.rng.integers(0, 2)))]
        target = lead + [1 if b.coin(0.2) and g == x.shape[i] else g for i, g in enumerate(grow)]
        shape = broadcast(x.shape, tuple(target))
        if int(np.prod(shape)) > 512:
            raise Skip
        return b.one(op, [x, b.ints(target)], shape, x.dtype, **moved(x))
    if op == "Flatten":
        axis = int(b.rng.integers(-x.rank, x.rank + 1)) if x.rank else 0
        a = axis + x.rank if axis < 0 else axis
        shape = (int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))
        return b.one(op, [x], shape, x.dtype, axis=axis, **moved(x))
    return b.one(op, [x], x.shape, x.dtype, **moved(x))


def make_slice(b: Builder, x: Tensor) -> Tensor:
    if x.rank == 0:
        raise Skip
    axes = sorted({int(a) for a in b.rng.integers(0, x.rank, int(b.rng.integers(1, x.rank + 1)))})
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        n = x.shape[a]
        step = b.choice([1, 1, 1, 2, -1, -2])
        lo = int(b.rng.integers(0, n))
        hi = int(b.rng.integers(lo + 1, n + 1))
        if step > 0:
            start, end = lo, hi
            shape[a] = len(range(lo, hi, step))
        else:
            start, end = hi - 1, lo - 1
            shape[a] = len(range(start, end, step))
            end = end if end >= 0 else -n - 1 - (b.coin() and 100)     # past the front: clamped
        if b.coin(0.2):
            start -= n if start < n else 0
        if step > 0 and end == n and b.coin(0.3):
            end = 2 ** 31
        starts.append(start)
        ends.append(end)
        steps.append(step)
    inputs = [x, b.ints(starts), b.ints(ends)]
    if b.coin(0.8) or any(s != 1 for s in steps):
        inputs.append(b.ints([a - x.rank if b.coin(0.3) else a for a in axes]))
        inputs.append(b.ints(steps))
    elif axes != list(range(len(axes))):
        inputs.append(b.ints(axes))
    return b.one("Slice", inputs, tuple(shape), x.dtype, **moved(x))


def make_view_op(b: Builder) -> None:
    make_view(b)


def make_concat(b: Builder) -> None:
    x = b.pick(lambda t: t.rank >= 1 and t.dtype in (FLOAT, "int64", "bool"))
    axis = int(b.rng.integers(-x.rank, x.rank))
    parts = [x]
    for _ in range(int(b.rng.integers(1, 4))):
        shape = list(x.shape)
        shape[axis] = int(b.rng.integers(1, 4))
        if b.coin(0.5):
            shape[axis] = x.shape[axis]
        shape = tuple(shape)
        if x.dtype == FLOAT and b.coin(0.2):
            parts.append(b.constant(b.rng.standard_normal(shape).astype(np.float32)))
        else:
            parts.append(b.pick(lambda t: t.shape == shape and t.dtype == x.dtype, shape, x.dtype))
    out = list(x.shape)
    out[axis] = sum(p.shape[axis] for p in parts)
    b.one("Concat", parts, tuple(out), x.dtype, mag=max(p.mag for p in parts), exact=all(p.exact for p in parts),
          axis=axis)


def make_split(b: Builder) -> None:
    x = b.pick(lambda t: t.rank >= 1 and max(t.shape) >= 2 and t.dtype in (FLOAT, "int64"))
    axis = b.choice([i for i, d in enumerate(x.shape) if d >= 2])
    n = x.shape[axis]
    k = int(b.rng.integers(2, min(n, 4) + 1))
    if b.opset >= 18 and b.coin(0.4):
        size = -(-n // k)
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
        attrs, inputs = {"num_outputs": len(sizes)}, [x.name]
    else:
        cuts = sorted(int(c) for c in b.rng.choice(np.arange(1, n), k - 1, replace=False))
        sizes = [e - s for s, e in zip([0, *cuts], [*cuts, n])]
        attrs, inputs = {}, [x.name, b.ints(sizes)]
        if b.coin(0.2) and len(set(sizes)) == 1 and b.opset < 18:
            inputs = [x.name]
    if b.coin(0.3):
        axis -= x.rank
    outs = [b.out(tuple(s if i == axis % x.rank else d for i, d in enumerate(x.shape)), x.dtype, **moved(x))
            for s in sizes]
    x.uses += 1
    b.node("Split", inputs, outs, axis=axis, **attrs)


def make_pad(b: Builder) -> None:
    x = b.float_tensor(min_rank=1)
    mode = b.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for _ in range(2):
        for d in x.shape:
            hi = d if mode == "reflect" else 3
            pads.append(int(b.rng.integers(0, hi)) if b.coin(0.6) else 0)
    if mode == "constant":
        # negative pads crop (refused by aot: README does not claim them; rare, to count the refusal)
        pads = [p - int(b.rng.integers(0, x.shape[i % x.rank])) if b.coin(0.02) else p for i, p in enumerate(pads)]
    shape = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape))
    if min(shape) < 1:
        raise Skip
    inputs = [x, b.ints(pads)]
    if mode == "constant" and b.coin():
        inputs.append(b.constant(np.float32(b.rng.uniform(-1, 1)), register=False).name)
    b.one("Pad", inputs, shape, mag=x.mag + 1, exact=x.exact, mode=mode)


def make_tile(b: Builder) -> None:
    x = b.pick(lambda t: t.rank >= 1 and t.size <= 64 and t.dtype != "bool")
    reps = [int(b.rng.integers(1, 3)) for _ in x.shape]
    b.one("Tile", [x, b.ints(reps)], tuple(d * r for d, r in zip(x.shape, reps)), x.dtype, **moved(x))


def make_depth_space(b: Builder) -> None:
    op = b.choice(["DepthToSpace", "SpaceToDepth"])
    blk = b.choice([2, 2, 3])
    if op == "DepthToSpace":
        x = b.pick(lambda t: t.rank == 4 and t.dtype == FLOAT and t.shape[1] % (blk * blk) == 0,
                   (1, blk * blk * int(b.rng.integers(1, 3)), *b.random_shape(2, 1, 4)))
        n, c, h, w = x.shape
        attrs = {"blocksize": blk, "mode": b.choice(["DCR", "CRD"])}
        b.one(op, [x], (n, c // blk // blk, h * blk, w * blk), **moved(x), **attrs)
    else:
        x = b.pick(lambda t: t.rank == 4 and t.dtype == FLOAT and t.shape[2] % blk == 0 and t.shape[3] % blk == 0,
                   (1, int(b.rng.integers(1, 4)), blk * int(b.rng.integers(1, 3)), blk * int(b.rng.integers(1, 3))))
        n, c, h, w = x.shape
        b.one(op, [x], (n, c * blk * blk, h // blk, w // blk), blocksize=blk, **moved(x))


def make_resize(b: Builder) -> None:
    x = b.pick(lambda t: t.rank == 4 and t.dtype == FLOAT and t.mag < 1000,
               (1, int(b.rng.integers(1, 4)), *b.random_shape(2, 2, 5)))
    mode = b.choice(["nearest", "linear", "cubic"])
    scales = [1.0, 1.0] + [b.choice([0.5, 1.0, 1.5, 2.0, 3.0]) for _ in range(2)]
    shape = tuple(int(math.floor(d * s)) for d, s in zip(x.shape, scales))
    if min(shape) < 1:
        raise Skip
    ctm = b.choice(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = b.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    if b.coin(0.5):
        inputs = [x.name, "", b.constant(np.array(scales, dtype=np.float32), register=False).name]
    else:
        inputs = [x.name, "", "", b.ints(shape)]
    exact = mode == "nearest" and x.exact
    # a nearest pick rounds a computed coordinate: exact only when scales are integers or halves
    x.uses += 1
    b.node("Resize", inputs, [b.out(shape, mag=x.mag * (1.5 if mode == "cubic" else 1), exact=exact)], **attrs)


# ---------------------------------------------------------------- integer and boolean tensors


def make_compare(b: Builder) -> None:
    op = b.choice(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
    x = b.pick(lambda t: t.exact and t.dtype in (FLOAT, "int64", "int32"))
    if x.dtype == FLOAT and op == "Equal":
        x = b.one("Round", [x], x.shape, mag=x.mag + 1, exact=True)
    shape = broadcast_partner(b, x.shape)
    if x.dtype == FLOAT and b.coin(0.4):
        y = b.constant(np.round(b.rng.standard_normal(shape) * 2).astype(np.float32) / 2)
    else:
        y = b.pick(lambda t: t.exact and t.dtype == x.dtype and t.shape == shape and t is not x, shape, x.dtype)
    b.one(op, [x, y], broadcast(x.shape, y.shape), "bool", mag=1, exact=True)


def make_logic(b: Builder) -> None:
    op = b.choice(["And", "Or", "Xor", "Not"])
    x = b.pick(lambda t: t.dtype == "bool", b.random_shape(int(b.rng.integers(1, 4))), "bool")
    if op == "Not":
        b.one(op, [x], x.shape, "bool", mag=1, exact=True)
        return
    shape = broadcast_partner(b, x.shape)
    y = b.pick(lambda t: t.dtype == "bool" and t.shape == shape, shape, "bool")
    b.one(op, [x, y], broadcast(x.shape, shape), "bool", mag=1, exact=True)


def make_where(b: Builder) -> None:
    x = b.pick(lambda t: t.dtype in (FLOAT, "int64"))
    cond_shape = broadcast_partner(b, x.shape)
    cond = b.pick(lambda t: t.dtype == "bool" and t.shape == cond_shape, cond_shape, "bool")
    if x.dtype == FLOAT:
        y = second_operand(b, x)
    else:
        y = b.pick(lambda t: t.dtype == "int64" and t.shape == broadcast_partner(b, x.shape), x.shape, "int64")
    operands = [cond, x, y] if b.coin() else [cond, y, x]
    shape = broadcast(broadcast(cond.shape, x.shape), y.shape)
    b.one("Where", operands, shape, x.dtype, mag=max(x.mag, y.mag), exact=x.exact and y.exact)


def make_cast(b: Builder) -> None:
    x = b.pick(lambda t: t.exact and t.dtype in (FLOAT, "int64", "int32", "bool"))
    targets = {FLOAT: ["int64", "int32"], "int64": [FLOAT, "int32"], "int32": [FLOAT, "int64"],
               "bool": [FLOAT, "int64"]}[x.dtype]
    to = b.choice(targets)
    if b.coin(0.3) and x.dtype != "bool":
        like = b.constant(np.zeros((), dtype=to), register=False)
        b.one("CastLike", [x, like], x.shape, to, mag=x.mag + 1, exact=True)
    else:
        b.one("Cast", [x], x.shape, to, mag=x.mag + 1, exact=True, to=ONNX_TYPE[to])


def make_shape(b: Builder) -> None:
    """Shape arithmetic as exporters write it: Shape (a part of it at times) or Size of a computed tensor,
    as int64 or cast to float. The values fold at compile time though the tensor they read is computed."""
    x = b.pick(lambda t: t.rank >= 1 and not t.const)
    if b.coin(0.2):
        y = b.one("Size", [x], (), "int64", mag=x.size, exact=True)
    else:
        start, end = (0, x.rank) if b.coin(0.6) else sorted(int(v) for v in b.rng.integers(-x.rank, x.rank + 1, 2))
        dims = np.array(x.shape[start:end], np.int64)
        if dims.size == 0:
            raise Skip
        attrs = {} if (start, end) == (0, x.rank) else {"start": start, "end": end}
        y = b.one("Shape", [x], dims.shape, "int64", mag=int(dims.max()), exact=True, **attrs)
    if b.coin(0.7):
        b.one("Cast", [y], y.shape, FLOAT, mag=y.mag, exact=True, to=ONNX_TYPE[FLOAT])


def make_int_arith(b: Builder) -> None:
    op = b.choice(["Add", "Sub", "Mul", "Max", "Min", "Neg", "Abs", "Div", "Mod"])
    x = b.pick(lambda t: t.dtype in INTS and t.mag < 1e4, b.random_shape(int(b.rng.integers(1, 4))), "int64")
    if op in ("Neg", "Abs"):
        b.one(op, [x], x.shape, x.dtype, mag=x.mag, exact=True)
        return
    shape = broadcast_partner(b, x.shape)
    if op in ("Div", "Mod"):
        nz = b.rng.integers(1, 5, shape) * b.rng.choice([-1, 1], shape)
        y = b.constant(nz.astype(x.dtype))
    else:
        y = b.pick(lambda t: t.dtype == x.dtype and t.shape == shape and t.mag < 100, shape, x.dtype)
    mag = x.mag * y.mag if op == "Mul" else x.mag + y.mag
    b.one(op, [x, y], broadcast(x.shape, shape), x.dtype, mag=mag, exact=True)


def index_input(b: Builder, shape, bound: int) -> Tensor:
    """int64 indices in [-bound, bound): a graph input (negative ones count from the end) or a constant."""
    values = b.rng.integers(-bound, bound, shape).astype(np.int64)
    if b.coin(0.6):
        return b.new_input(tuple(shape), "int64", values)
    return b.constant(values, register=False)


def make_gather(b: Builder) -> None:
    op = b.choice(["Gather", "Gather", "GatherElements", "GatherND"])
    x = b.pick(lambda t: t.rank >= 1 and t.dtype in (FLOAT, "int64"))
    axis = int(b.rng.integers(-x.rank, x.rank))
    n = x.shape[axis]
    if op == "Gather":
        ishape = b.random_shape(int(b.rng.integers(0, 3)), 1, 4)
        idx = index_input(b, ishape, n)
        shape = x.shape[:axis % x.rank] + ishape + x.shape[axis % x.rank + 1:]
        if len(shape) > 5:
            raise Skip
        b.one(op, [x, idx], shape, x.dtype, **moved(x), axis=axis)
    elif op == "GatherElements":
        ishape = tuple(int(b.rng.integers(1, d + 1)) if i != axis % x.rank else int(b.rng.integers(1, 5))
                       for i, d in enumerate(x.shape))
        idx = index_input(b, ishape, n)
        b.one(op, [x, idx], ishape, x.dtype, **moved(x), axis=axis)
    else:
        k = int(b.rng.integers(1, x.rank + 1))
        batch = b.random_shape(int(b.rng.integers(0, 3)), 1, 3)
        # non-negative: onnxruntime rejects negative GatherND indices (ONNX allows them)
        values = np.stack([b.rng.integers(0, d, batch) for d in x.shape[:k]], axis=-1).astype(np.int64)
        idx = b.new_input(values.shape, "int64", values) if b.coin(0.6) else b.constant(values, register=False)
        b.one(op, [x, idx], batch + x.shape[k:], x.dtype, **moved(x))


# ---------------------------------------------------------------- int8 QDQ islands


def quantize(b: Builder, x: Tensor, dtype: str = "int8") -> tuple[Tensor, float, int]:
    if dtype == "int16":    # symmetric as quantizers make it, at times with a zero point
        scale = float(np.float32(max(x.mag, 0.1) / b.choice([8000.0, 20000.0, 32767.0])))
        zp = int(b.rng.integers(-300, 301)) if b.coin(0.25) else 0
    else:
        scale = float(np.float32(max(x.mag, 0.1) / b.choice([60.0, 100.0, 127.0])))
        zp = int(b.rng.integers(-10, 11)) if dtype == "int8" else int(b.rng.integers(100, 156))
    s = b.constant(np.float32(scale), register=False)
    z = b.constant(np.array(zp, dtype=dtype), register=False)
    q = b.one("QuantizeLinear", [x, s, z], x.shape, dtype, mag=32768 if dtype == "int16" else 128, exact=True)
    return q, scale, zp


def dequantize(b: Builder, q: Tensor, scale: float, zp: int, quant: bool = False) -> Tensor:
    s = b.constant(np.float32(scale), register=False)
    z = b.constant(np.array(zp, dtype=q.dtype), register=False)
    return b.one("DequantizeLinear", [q, s, z], q.shape, mag=scale * (65536 if q.dtype == "int16" else 256),
                 exact=not quant, quant=quant)


def qdq_weight(b: Builder, shape, per_channel: bool) -> str:
    """A DequantizeLinear of an int8 constant weight (symmetric; per output channel at times)."""
    w = b.rng.integers(-127, 128, shape).astype(np.int8)
    q = b.constant(w, register=False)
    if per_channel:
        scales = (b.rng.uniform(0.5, 1.5, shape[0]) / 127 / math.sqrt(np.prod(shape[1:]))).astype(np.float32)
        s = b.constant(scales, register=False)
        z = b.constant(np.zeros(shape[0], np.int8), register=False)
        return b.one("DequantizeLinear", [q, s, z], shape, exact=True, axis=0).name
    s = b.constant(np.float32(1.0 / 127 / math.sqrt(np.prod(shape[1:]))), register=False)
    z = b.constant(np.array(0, np.int8), register=False)
    return b.one("DequantizeLinear", [q, s, z], shape, exact=True).name


def make_qdq(b: Builder) -> None:
    """QuantizeLinear -> DequantizeLinear -> op -> QuantizeLinear [-> DequantizeLinear], the op's float
    operands dequantized from int8 (activations from exact tensors, weights from int8 constants)."""
    op = b.choice(["Conv", "MatMul", "Gemm", "Add", "Mul", "Relu", "AveragePool", "GlobalAveragePool", "MaxPool",
                   "Concat", "Sigmoid", "Reshape", "Transpose", "Softmax"])
    rank = {"Conv": 4, "AveragePool": 4, "GlobalAveragePool": 4, "MaxPool": 4, "Gemm": 2}.get(op)
    x = b.pick(lambda t: t.dtype == FLOAT and t.exact and (rank is None or t.rank == rank) and t.rank >= 1
               and t.shape[1 % t.rank] <= 16,
               (1, int(b.rng.integers(1, 9)), *b.random_shape(2, 2, 6)) if rank != 2 else b.random_shape(2, 1, 8))
    act = "uint8" if b.coin(0.2) else "int8"
    if b.opset >= 21 and b.coin(0.4):      # int16 activations (int8 weights), QuantizeLinear's types from opset 21
        act = "int16"
    q, scale, zp = quantize(b, x, act)
    if b.opset >= 21 and b.coin(0.2):     # a mixed-precision conversion first: Dequantize -> Quantize to another type
        q, scale, zp = quantize(b, dequantize(b, q, scale, zp), "int8" if act == "int16" else "int16")
        b.ops["qdq:convert"] += 1
    dq = dequantize(b, q, scale, zp)
    y = qdq_body(b, op, x, dq, act)
    if y is None:
        raise Skip
    relu = op in ("Conv", "MatMul", "Gemm", "Add") and b.coin(0.3)
    if relu:
        y = b.one("Relu", [y], y.shape, mag=y.mag)
    if act == "int16":
        out_scale = float(np.float32(y.mag / b.choice([5000.0, 16000.0, 32767.0])))
        zp_out = int(b.rng.integers(-300, 301)) if b.coin(0.25) else 0
    else:
        out_scale = float(np.float32(y.mag / b.choice([40.0, 80.0, 127.0])))
        zp_out = int(b.rng.integers(-20, 21)) if act == "int8" else 128
    s, z = b.constant(np.float32(out_scale), register=False), b.constant(np.array(zp_out, act), register=False)
    q2 = b.one("QuantizeLinear", [y, s, z], y.shape, act, mag=32768 if act == "int16" else 128, exact=False,
               quant=True)
    b.ops[f"qdq:{op}"] += 1
    if b.coin(0.6):
        dequantize(b, q2, out_scale, zp_out, quant=True)


def qdq_body(b: Builder, op: str, x: Tensor, dq: Tensor, act: str) -> Tensor | None:
    """The float op of a QDQ island on `dq`; its magnitude estimate sizes the output scale."""
    if op == "Conv":
        c = x.shape[1]
        groups = b.choice([1, 1, c] if c > 1 else [1])
        m = c if groups > 1 else int(b.rng.integers(1, 9))
        k = b.choice([1, 3])
        w = qdq_weight(b, (m, c // groups, k, k), per_channel=b.coin())
        bias = b.constant((b.rng.standard_normal(m) * 0.1).astype(np.float32), register=False)
        attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4, "group": groups, "strides": [b.choice([1, 2])] * 2}
        return b.one("Conv", [dq, w, bias], (x.shape[0], m, *conv_out(x.shape[2:], attrs)),
                     mag=x.mag * 2 + 1, **attrs)
    if op in ("MatMul", "Gemm"):
        k, n = x.shape[-1], int(b.rng.integers(1, 9))
        if op == "Gemm":
            w = qdq_weight(b, (n, k), per_channel=False)
            bias = b.constant((b.rng.standard_normal(n) * 0.1).astype(np.float32), register=False)
            return b.one("Gemm", [dq, w, bias], (x.shape[0], n), mag=x.mag * 2 + 1, transB=1)
        w = qdq_weight(b, (k, n), per_channel=False)
        return b.one("MatMul", [dq, w], (*x.shape[:-1], n), mag=x.mag * 2 + 1)
    if op in ("Add", "Mul", "Concat"):
        other = b.pick(lambda t: t.dtype == FLOAT and t.exact and t.shape == x.shape and t is not x, x.shape)
        q2, s2, z2 = quantize(b, other, act)
        dq2 = dequantize(b, q2, s2, z2)
        if op == "Concat":
            axis = int(b.rng.integers(0, x.rank))
            shape = tuple(2 * d if i == axis else d for i, d in enumerate(x.shape))
            return b.one("Concat", [dq, dq2], shape, mag=max(x.mag, other.mag), axis=axis)
        return b.one(op, [dq, dq2], x.shape, mag=x.mag + other.mag if op == "Add" else x.mag * other.mag + 0.1)
    if op in ("AveragePool", "MaxPool"):
        attrs = {"kernel_shape": [2, 2], "strides": [b.choice([1, 2])] * 2}
        if min(x.shape[2:]) < 2:
            return None
        return b.one(op, [dq], (*x.shape[:2], *conv_out(x.shape[2:], attrs)), mag=x.mag, **attrs)
    if op == "GlobalAveragePool":
        return b.one(op, [dq], (*x.shape[:2], 1, 1), mag=x.mag)
    if op in ("Relu", "Sigmoid"):
        return b.one(op, [dq], x.shape, mag=x.mag if op == "Relu" else 1.0)
    if op == "Softmax":
        return b.one(op, [dq], x.shape, mag=1.0, axis=int(b.rng.integers(-x.rank, x.rank)))
    if op == "Reshape":
        shape = factorize(b, x.size, int(b.rng.integers(1, 4)))
        return b.one(op, [dq, b.ints(shape)], shape, mag=x.mag)
    perm = [int(p) for p in b.rng.permutation(x.rank)]
    return b.one(op, [dq], tuple(x.shape[p] for p in perm), mag=x.mag, perm=perm)


def make_quant_move(b: Builder) -> None:
    """A move of a quantized tensor (an island's int8 result or its dequantized value)."""
    cands = [t for t in b.tensors if t.quant]
    if not cands:
        raise Skip
    make_view(b, b.choice(cands))


# ---------------------------------------------------------------- the graph

MAKERS: dict[str, tuple[float, Callable[[Builder], None]]] = {
    "unary": (6, make_unary), "binary": (6, make_binary), "variadic": (1, make_variadic),
    "matmul": (2, make_matmul), "gemm": (1.5, make_gemm), "conv": (2.5, make_conv),
    "conv_transpose": (0.7, make_conv_transpose), "pool": (2, make_pool), "norm": (2, make_norm),
    "reduce": (2, make_reduce), "softmax": (1.5, make_softmax), "arg": (0.7, make_arg), "topk": (0.5, make_topk),
    "cumsum": (0.5, make_cumsum), "view": (5, make_view_op), "concat": (1.5, make_concat), "split": (1, make_split),
    "pad": (1, make_pad), "tile": (0.5, make_tile), "depth_space": (0.5, make_depth_space),
    "resize": (0.8, make_resize), "compare": (1, make_compare), "logic": (0.7, make_logic),
    "where": (1, make_where), "cast": (1, make_cast), "int_arith": (0.8, make_int_arith), "gather": (1.5, make_gather),
    "shape": (0.7, make_shape), "qdq": (2, make_qdq), "quant_move": (1, make_quant_move),
}


def generate(seed: int, index: int, max_nodes: int | None = None) -> Case:
    """Graph `index` of `seed`: always the same."""
    rng = np.random.default_rng([seed, index])
    b = Builder(rng, int(rng.choice(OPSETS)))
    size = max_nodes or int(rng.integers(1, 9))
    names = list(MAKERS)
    weights = np.array([MAKERS[n][0] for n in names])
    steps = 0
    while steps < size * 4 and sum(1 for n in b.nodes if n.op_type != "Constant") < size:
        steps += 1
        maker = MAKERS[names[int(rng.choice(len(names), p=weights / weights.sum()))]][1]
        mark = (len(b.nodes), len(b.inits), len(b.graph_inputs), len(b.tensors), b._count, Counter(b.ops))
        try:
            maker(b)
        except Skip:
            rollback(b, mark)
    outputs = pick_outputs(b)
    return Case(seed, index, b.model(outputs), dict(b.feeds), b.ops)


def rollback(b: Builder, mark) -> None:
    """Undo a maker that gave up half way (it may have added operands before finding no fit)."""
    n_nodes, n_inits, n_inputs, n_tensors, _, ops = mark
    del b.nodes[n_nodes:], b.inits[n_inits:]
    for t in b.graph_inputs[n_inputs:]:
        b.feeds.pop(t.name, None)
    del b.graph_inputs[n_inputs:], b.tensors[n_tensors:]
    b.ops = ops


def pick_outputs(b: Builder) -> list[Tensor]:
    """Every unused result (no dead node is left), or the last one, plus at times an intermediate one."""
    made = {o for n in b.nodes if n.op_type != "Constant" for o in n.output}
    results = [t for t in b.tensors if t.name in made]
    if not results:
        x = b.float_tensor()
        results = [b.one("Relu", [x], x.shape, mag=x.mag, exact=x.exact)]
    leaves = [t for t in results if t.uses == 0]
    chosen = leaves or [results[-1]]
    others = [t for t in results if t not in chosen]
    if others and b.coin(0.3):
        chosen.append(b.choice(others))
    return chosen
