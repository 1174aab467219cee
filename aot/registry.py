"""The op registry: one definition per op holding every fact a pass or the lowering needs about it.

Two kinds of ops share the table. ONNX ops are rewritten by `canonicalize` into aot's own op set
(their `canonical` rule); aot's ops are what kernels implement (their `lower` function). Many names
are both (Conv, Add, Concat, ...): one definition then carries both halves. Passes ask an op's
definition (`op_def(node.op)`) and never keep lists of op names of their own.

Adding an op is one registration, next to its lowering:

    define("Sqrt", canonical=unary_rule("sqrt"))                          # ONNX op -> Unary
    define("Unary", lower=unary, layout=Layout.FOLLOW, fusion=Fusion.ACTIVATION)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from aot.graph.ir import Graph, Node, Rewriter
    from aot.kernel.ir import Kernel


class Layout(enum.Enum):
    """How an op treats 4-D activations that the layout pass keeps channels-last (NHWC)."""

    NCHW = "nchw"            # sees the model's layout: NHWC inputs are converted back first
    NHWC = "nhwc"            # wants channels-last: reads and writes NHWC (convolutions, pools)
    FOLLOW = "follow"        # runs in whichever layout its inputs have; `axis_attrs` are remapped
    TRANSPOSE = "transpose"  # a permutation: composed with the layout change instead of converting


class AxisAttr(enum.Enum):
    """How an attribute names axes, so the layout pass can remap it."""

    AXIS = "axis"            # one axis number
    AXES = "axes"            # a set of axis numbers
    PER_AXIS = "per_axis"    # one entry per axis (Slice starts/steps)
    PADS = "pads"            # begins for every axis, then ends


class Fusion(enum.Enum):
    """What `fuse_epilogues` may merge into or out of the op."""

    NONE = "none"
    ANCHOR = "anchor"        # takes activation epilogues
    ACTIVATION = "activation"  # appended to its producer's epilogue (and may take further ones itself)
    MATRIX = "matrix"        # an anchor that also takes a bias, a per-channel scale and a residual add


class QuantForm(enum.Enum):
    """The integer kernel a Dequantize -> op -> Quantize chain around this ONNX op becomes."""

    NONE = "none"            # no integer form: runs in float between Dequantize and Quantize
    MATRIX = "matrix"        # Conv/Gemm/MatMul with int8 weights, int32 accumulation, fused Relu/Clip
    BINARY = "binary"        # two quantized operands rescaled to the output's scale (Add, Mul)
    RESCALE = "rescale"      # one operand rescaled (average pooling)
    FUNCTION = "function"    # one operand dequantized, a float function applied, quantized again (Sigmoid, Relu)
    CONCAT = "concat"        # each operand rescaled into its slice
    MOVE = "move"            # moves values: integer only when input and output quantization agree


# The operands of a MATRIX op once canonical (ONNX's Conv X, W, B and Gemm A, B, C keep these positions).
MATRIX_OPERANDS = ("x", "weight", "bias", "residual")

ALL_DTYPES = frozenset({"float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"})
FLOAT = frozenset({"float32"})

Rule = Callable[["Rewriter", "Node"], None]
Lowering = Callable[..., "Kernel"]      # (LowerContext, Node, kernel name) -> Kernel


@dataclass(frozen=True)
class OpDef:
    name: str
    canonical: Rule | None = None          # ONNX op -> aot ops (canonicalize); None: not an ONNX op of ours
    lower: Lowering | None = None          # aot op -> kernel; None: rewritten away, or a view
    macs: Callable[[Graph, Node], int] | None = None
    layout: Layout = Layout.NCHW
    axis_attrs: dict[str, AxisAttr] = field(default_factory=dict)
    fusion: Fusion = Fusion.NONE
    matrix_epilogue: str = ""              # "add"/"mul": may fold into a MATRIX anchor as bias/residual/scale
    weight_channel_axis: int = 0           # MATRIX ops: the output-channel axis of the constant weight
    view: bool = False                     # moves no data: the output aliases its input's bytes
    view_offset: Callable[[Graph, Node], int] | None = None   # a view of part of them: where it starts (bytes)
    assembled: bool = False                # moves no data: its inputs are written in place, one after the
                                           #   other, into its output's bytes
    moves_values: bool = False             # every output element is a copy of an input element
    rows_either_way: bool = False          # its kernel can run its output rows last to first (LowerContext.backward)
    writes_transposed: bool = False        # its kernel can write its result transposed (attrs["perm"])
    elementwise: bool = False              # output element i is made from the inputs' elements i (broadcast
                                           #   operands aside): it may overwrite a same-shaped input in place
    dtypes: frozenset[str] = FLOAT         # element types its computed inputs may have
    quant: QuantForm = QuantForm.NONE
    quant_acts: bool = False               # a clamp after it (Relu, Clip) fuses into its integer form
    clamp: Callable[[Graph, Node], tuple[float, float] | None] | None = None   # a clamp to [lo, hi] (Relu, Clip)
    expand_qdq: Rule | None = None         # a QOperator op: rewrite as Dequantize -> op -> Quantize
    domain: str = ""                       # "" for the ONNX default domain
    shape_only: bool = False               # reads only its input's (static) shape: always folds (Shape, Size)
    dtype_only: tuple[int, ...] = ()       # inputs of which it reads only the element type (CastLike's target)
    random: bool = False                   # its result is not a function of its inputs: never folded
    check: Callable[[Graph, Node], str | None] | None = None   # shape rule for Graph.verify: a problem or None
    operands: tuple[str, ...] = ()         # names of its inputs in order, for `operand`/`with_operands`

    def index(self, operand_name: str) -> int:
        if operand_name not in self.operands:
            from aot.errors import InternalError
            raise InternalError(f"op {self.name} has no operand '{operand_name}' (it has {list(self.operands)})")
        return self.operands.index(operand_name)

    def facts(self) -> dict[str, Any]:
        """The declared facts as plain values (for listings and tests)."""
        return {"layout": self.layout.value, "fusion": self.fusion.value, "view": self.view,
                "moves_values": self.moves_values, "dtypes": sorted(self.dtypes), "quant": self.quant.value,
                "canonical": self.canonical is not None, "lower": self.lower is not None}


REGISTRY: dict[str, OpDef] = {}
_UNKNOWN = OpDef("?")


# Why a float64 tensor computed at run time is refused by an op, and what does build.
FLOAT64_NOTE = ("; aot computes float64 at run time in arithmetic (Add, Sub, Mul, Div, Min, Max, Neg, Abs), "
                "MatMul, sums, means, extrema and products, comparisons, Cast, Where and ops that move values; "
                "elsewhere only where it folds at compile time")


def define(name: str, **facts: Any) -> OpDef:
    """Register the one definition of op `name`."""
    if name in REGISTRY:
        raise ValueError(f"op {name} is registered twice")
    REGISTRY[name] = OpDef(name, **facts)
    return REGISTRY[name]


def op_def(name: str) -> OpDef:
    """The definition of op `name`; an op nobody registered has every fact at its default."""
    return REGISTRY.get(name, _UNKNOWN)


def operand(node: Node, name: str) -> str:
    """The value bound to `node`'s operand `name` ("" when an optional operand is absent)."""
    i = op_def(node.op).index(name)
    return node.inputs[i] if i < len(node.inputs) else ""


def with_operands(node: Node, **names: str) -> Node:
    """`node` with the named operands bound to other values (absent optional ones in between as "")."""
    definition = op_def(node.op)
    inputs = list(node.inputs)
    for name, value in names.items():
        i = definition.index(name)
        inputs += [""] * (i + 1 - len(inputs))
        inputs[i] = value
    return node.with_(inputs=tuple(inputs))


# --- shape rules (OpDef.check) -----------------------------------------------------------------------

def same_shape(graph: Graph, node: Node) -> str | None:
    """The output has the first input's shape (activations, conversions, normalizations), transposed
    by attrs["perm"] if the node writes it transposed."""
    x, y = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    if "perm" in node.attrs:
        x = tuple(x[axis] for axis in node.attrs["perm"])
    return None if x == y else f"output shape {list(y)} differs from the input's {list(x)}"


def broadcast_shape(graph: Graph, node: Node) -> str | None:
    """The output has the operands' shapes broadcast together (numpy rules)."""
    shapes = [graph.shape(name) for name in node.inputs if name]
    try:
        want = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return f"operand shapes {[list(s) for s in shapes]} do not broadcast"
    got = graph.shape(node.outputs[0])
    return None if got == want else f"output shape {list(got)}, but the operands broadcast to {list(want)}"


def same_size(graph: Graph, node: Node) -> str | None:
    """A view: the output has as many elements as the input."""
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    if x.size != y.size or x.dtype != y.dtype:
        return f"a view of {x.dtype}{list(x.shape)} as {y.dtype}{list(y.shape)}"
    return None
