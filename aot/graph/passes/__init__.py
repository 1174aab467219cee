"""The default optimization pipeline: one pass per line, each a function Graph -> Graph."""

from __future__ import annotations

from collections.abc import Callable

from aot.graph.ir import Graph
from aot.graph.passes.canonicalize import canonicalize
from aot.graph.passes.concat_in_place import concat_in_place
from aot.graph.passes.eliminate_dead_code import eliminate_dead_code
from aot.graph.passes.fold_batchnorm import fold_batchnorm
from aot.graph.passes.fold_constant_views import fold_constant_views
from aot.graph.passes.fold_constants import fold_constants
from aot.graph.passes.fuse_epilogues import fuse_epilogues
from aot.graph.passes.lower_quantized import lower_quantized
from aot.graph.passes.recognize_activations import recognize_activations
from aot.graph.passes.to_nhwc import fold_transposes, to_nhwc
from aot.graph.verify import verify

Pass = Callable[[Graph], Graph]

PIPELINE: list[Pass] = [
    lower_quantized,      # QOperator and QDQ patterns -> integer ops; the rest runs in float
    fold_constants,       # evaluate constant subgraphs (shape arithmetic, weight transposes)
    canonicalize,         # ONNX ops -> aot's op set; refuse unsupported ops here
    fold_constant_views,  # a view of a constant (CastLike of one becomes a Reshape) is a constant
    eliminate_dead_code,  # drop what no output needs before spending work on it
    fold_batchnorm,       # BN into the preceding Conv/Gemm weights, else Mul + Add
    recognize_activations,  # x * Sigmoid(x) and other activations spelled out -> one Unary
    to_nhwc,              # channels-last activations inside
    fuse_epilogues,       # bias, residual add and activations into their anchor
    fold_transposes,      # a layout change after a one-operand elementwise kernel: written by that kernel
    concat_in_place,      # a Concat of contiguous blocks: each producer writes its block of the result
    fold_constant_views,  # views of constants the layout and fusion rewrites made
    eliminate_dead_code,  # drop constants and nodes the rewrites orphaned
]


def optimize(graph: Graph, on_pass: Callable[[str, Graph], None] | None = None) -> Graph:
    """Run the pipeline, verifying the graph after each pass; `on_pass(name, graph)` sees the graph
    after each pass (for --dump-graph)."""
    verify(graph, "import")
    for p in PIPELINE:
        graph = verify(p(graph), p.__name__)
        if on_pass is not None:
            on_pass(p.__name__, graph)
    return graph
