"""`aot run --bisect`: where the compiled model's results part from the reference's, node by node.

The model is built as usual, and then each optimized-graph value that holds a value of the ONNX model
(under its ONNX name, or channels-last under a name to_nhwc marked with `channels_last_of`) is copied
into an extra output of the build right after it is computed. onnxruntime runs the model given, with
the same values added to its graph outputs (or the reference chosen: onnx.reference, directly or
when onnxruntime cannot run the model); aot's tensors are put back in the model's layout (NHWC
to NCHW) and compared with onnxruntime's: integer tensors of quantized arithmetic in steps (their
codes), float ones in absolute error against the tolerance of `aot run` (1e-4 of the tensor's largest
magnitude, or one step for a tensor a Dequantize made).

One row per node of the model, in its order. A node whose result has no tensor of its own in aot (a
Conv whose Relu is fused into it, a DequantizeLinear or a float op inside an int8 QDQ group) says which
kernel it is fused into and at which row that kernel's result is checked. In a QDQ model the float
values between DequantizeLinear and QuantizeLinear are never added to onnxruntime's outputs, as that
would stop onnxruntime fusing the group into its integer kernel and change what it computes: there
the int8 tensors are compared, the QuantizeLinear outputs, and the rows show where aot's integer
kernels and float islands and onnxruntime's part.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from aot import progress
from aot import reference as checks
from aot.build import build
from aot.errors import OptionError
from aot.frontend.model import load
from aot.frontend.onnx import FreezeValue, LoadedModel
from aot.graph.ir import Graph, Rewriter
from aot.graph.passes.to_nhwc import TO_NCHW
from aot.report import describe
from aot.run import local

# Ops whose float result onnxruntime fuses into an integer kernel when it sits between them (QDQ).
_DEQUANTIZE = {"DequantizeLinear"}
_QUANTIZE = {"QuantizeLinear"}
FOLDED = "constant: folded at build time"
_RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
# aot nodes that only move a result to where the model wants it (layout changes, views, copies).
_MOVES = {"Transpose", "Reshape", "Copy"}


@dataclass(frozen=True)
class Row:
    """One node of the model: its result compared with onnxruntime's, or why it is not."""

    index: int                      # position in the model's node order
    node: str
    op: str
    tensor: str = ""                # the ONNX value compared ("" if none)
    kernel: str = ""                # aot's node (kernel) that computes it, or that the node is fused into
    kernel_op: str = ""             # that kernel's op with its epilogue ("Conv+bias+relu", "Conv int8")
    max_abs: float | None = None    # largest absolute difference, in the tensor's real units
    steps: float | None = None      # the same in quantization steps (quantized tensors, Dequantize results)
    scale: float | None = None      # largest magnitude of onnxruntime's tensor (in codes if quantized)
    tolerance: float | None = None  # largest max_abs that passes
    ok: bool | None = None          # None: not compared
    note: str = ""                  # why not compared, or where its result is checked
    checked_at: int | None = None   # the row that checks a fused node's result
    first: bool = False             # the first row past the tolerance

    @property
    def compared(self) -> bool:
        return self.ok is not None


@dataclass(frozen=True)
class Probed:
    """What a bisect run leaves for comparing again against other reference tensors (aot.arbitrate
    does, with a node's result replaced by its float64 value): the model's side, aot's graph and probes,
    aot's tensors by ONNX name (in the model's layout), the reference's, and what the reference ran."""

    side: _OnnxSide
    graph: Graph
    probes: dict[str, tuple[str, bool, str]]
    ours: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    proto: onnx.ModelProto          # the model the reference runs (probed values not yet added)
    feeds: dict[str, np.ndarray]    # its inputs, frozen ones included
    label: str


@dataclass(frozen=True)
class BisectResult:
    model: str
    target: str
    rows: tuple[Row, ...]
    inputs: dict[str, np.ndarray] = field(repr=False)
    outputs: dict[str, np.ndarray] = field(repr=False)    # the model's outputs, by ONNX name
    # graph outputs onnxruntime computed differently once the intermediate values were made outputs too
    # (its fusions changed); the comparison then holds for that run of onnxruntime
    reference_changed: tuple[str, ...] = ()
    reference: str = "onnxruntime"  # the reference that ran: onnxruntime or onnx (onnx.reference)
    fallback_reason: str = ""       # why onnxruntime, asked for, did not (its error)
    probed: Probed | None = field(default=None, repr=False, compare=False)

    @property
    def first(self) -> Row | None:
        """The first node, in the model's order, whose result is past the tolerance."""
        return next((r for r in self.rows if r.first), None)

    @property
    def ok(self) -> bool:
        return self.first is None

    def to_json(self) -> dict:
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v

        rows = [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows]
        first = self.first
        return {"model": self.model, "target": self.target,
                "tolerance": {"float": f"{checks.TOLERANCE:g} of the tensor's largest magnitude",
                              "quantized": "one step"},
                "first_divergence": None if first is None else rows[first.index],
                "reference": self.reference, "fallback_reason": self.fallback_reason or None,
                "reference_changed": list(self.reference_changed), "rows": rows}


def bisect(model: str | os.PathLike | onnx.ModelProto, inputs: dict[str, np.ndarray] | None = None,
           target: str = "host", input_shapes: dict[str, tuple[int, ...]] | None = None,
           out_dir: str | os.PathLike | None = None, seed: int = 0, timeout: float = 600.0,
           knobs: dict | None = None, freeze: dict[str, FreezeValue] | None = None,
           memory: dict[str, int] | None = None, records: str | os.PathLike | None = None,
           reference: str = "onnxruntime") -> BisectResult:
    """Build the model with its intermediate tensors as extra outputs, run it (natively or under the
    target's emulator) and the reference (see aot.reference.run_reference) on the same inputs (random
    with `seed` unless given), and compare node by node (see the module's docstring). The options are
    aot.run's."""
    if checks.check_reference(reference) == "none":
        raise OptionError("--bisect compares with a reference: give --reference onnxruntime or onnx")
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
    loaded = load(model, input_shapes, freeze)
    if not isinstance(loaded, LoadedModel):
        raise OptionError(f"{loaded.label}: --bisect runs ONNX models node by node in onnxruntime; a TFLite "
                          "model is checked as a whole against LiteRT")
    onnx_model = _OnnxSide(loaded.inferred_with_weights())
    probes: dict[str, tuple[str, bool, str]] = {}

    def add_probes(graph: Graph) -> Graph:
        graph, found = with_probes(graph, onnx_model.exposable)
        probes.update(found)
        return graph

    with tempfile.TemporaryDirectory(prefix="aot-bisect-") as tmp:
        artifact = build(model, target=target, out_dir=out_dir or os.path.join(tmp, "build"),
                         input_shapes=input_shapes, knobs=knobs, freeze=freeze, memory=memory, records=records,
                         after_optimize=add_probes)
        proto = artifact.model.proto
        feeds = (checks.random_inputs(proto, seed) if inputs is None
                 else checks.validate_inputs(proto, inputs, artifact.model.label))
        with progress.phase(f"running {artifact.name} with its {len(probes)} intermediate tensors as outputs"):
            got = local.run(artifact, feeds, timeout)
    reference_proto, frozen = artifact.model.reference()
    feeds_all = {**feeds, **frozen}
    first = checks.run_reference(reference_proto, feeds_all, loaded.label, reference)
    plain = first.outputs
    exposed = [name for name in probes if name not in plain]
    widened = onnx_model.with_outputs(reference_proto, exposed)
    tensors = checks.run_reference(widened, feeds_all, loaded.label, first.used).outputs
    changed = tuple(name for name in plain if not _same(plain[name], tensors[name]))

    graph = artifact.program.graph
    ours = {}
    for name, (_, channels_last, output) in probes.items():
        array = got[output]
        ours[name] = array.transpose(TO_NCHW) if channels_last else array
    probed = Probed(onnx_model, graph, probes, ours, tensors, reference_proto, feeds_all, loaded.label)
    outputs = {name: got[name] for name in graph.outputs if name in plain}
    return BisectResult(loaded.label, artifact.target.name, compare_rows(probed, tensors), feeds, outputs, changed,
                        first.used, first.fallback_reason, probed)


def compare_rows(probed: Probed, reference: dict[str, np.ndarray]) -> tuple[Row, ...]:
    """aot's tensors compared node by node with `reference` (ONNX value -> tensor)."""
    return _rows(probed.side, probed.graph, probed.probes, probed.ours, reference)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def with_probes(graph: Graph, wanted: set[str]) -> tuple[Graph, dict[str, tuple[str, bool, str]]]:
    """The optimized graph with each computed value that holds one of the model's `wanted` values
    copied into an extra graph output right after it is made (a graph output is read as it is).
    Returns the graph and {ONNX value: (aot value, stored channels-last, graph output holding it)}."""
    producers = graph.producers()
    holders: dict[str, tuple[str, bool]] = {}
    for name, value in graph.values.items():
        if name in graph.constants or name not in producers or value.size == 0:
            continue
        model_name = value.channels_last_of or name
        if model_name in wanted and (model_name not in holders or name == model_name):
            holders[model_name] = (name, bool(value.channels_last_of))
    copied = {value: model_name for model_name, (value, _) in holders.items() if value not in graph.outputs}
    rw = Rewriter(graph)
    outputs: dict[str, str] = {}
    for node in graph.nodes:
        rw.keep(node)
        for out in node.outputs:
            if out in copied:
                probe = rw.like(f"bisect_{out}", out)
                rw.add("Copy", f"bisect_{out}", [out], [probe])
                outputs[out] = probe
    probed = rw.finish(outputs=graph.outputs + tuple(outputs.values()))
    found = {model_name: (value, channels_last, outputs.get(value, value))
             for model_name, (value, channels_last) in holders.items()}
    return probed, found


class _OnnxSide:
    """The model's nodes in order (named as aot names them), its computed values and their types, and
    which of them onnxruntime can give as outputs without computing differently."""

    def __init__(self, inferred: onnx.ModelProto):
        g = inferred.graph
        self.types = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.input)
                      + list(g.output) if vi.type.HasField("tensor_type")}
        constant = {t.name for t in g.initializer}
        self.nodes: list[onnx.NodeProto] = []
        self.names: list[str] = []
        for index, node in enumerate(g.node):
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                constant.update(node.output)
                continue
            if node.op_type in ("Shape", "Size") or (  # shapes are static: aot folds what only they decide
                    all(not name or name in constant for name in node.input) and node.op_type not in _RANDOM):
                constant.update(node.output)
            self.nodes.append(node)
            self.names.append(node.name or f"{node.op_type}_{index}")
        self.constant = constant
        self.outputs = [vi.name for vi in g.output]
        dequantized = {o for n in self.nodes if n.op_type in _DEQUANTIZE for o in n.output}
        quantized = {i for n in self.nodes if n.op_type in _QUANTIZE for i in n.input[:1]}
        self.inside_qdq = (dequantized | quantized) - set(self.outputs)
        self.exposable = {o for n in self.nodes for o in n.output
                          if o and o not in constant and o in self.types and o not in self.inside_qdq}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(i)

    def with_outputs(self, proto: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
        """A copy of `proto` with `names` added to its graph outputs."""
        widened = onnx.ModelProto.FromString(proto.SerializeToString())
        widened.graph.output.extend(onnx.helper.make_tensor_value_info(n, self.types[n], None) for n in names)
        return widened


def _rows(side: _OnnxSide, graph: Graph, probes: dict[str, tuple[str, bool, str]], ours: dict[str, np.ndarray],
          reference: dict[str, np.ndarray]) -> tuple[Row, ...]:
    producers = graph.producers()
    model_nodes = set(side.names)
    steps = checks.value_steps(graph, [value for value, _, _ in probes.values()])

    def kernel_of(value: str) -> tuple[str, str]:
        node = producers.get(value)
        while (node is not None and node.op in _MOVES and node.name not in model_nodes
               and node.inputs[0] in producers):
            node = producers[node.inputs[0]]
        return (node.name, describe(graph, node)) if node is not None else ("", "")

    rows: list[Row] = []
    compared: dict[int, Row] = {}
    for index, (node, name) in enumerate(zip(side.nodes, side.names)):
        results = [_compare(index, name, node.op_type, out, probes[out][0], ours[out], reference[out],
                            steps.get(probes[out][0]), graph, kernel_of(probes[out][0]))
                   for out in node.output if out in probes and out in reference]
        row = max(results, key=_badness) if results else Row(index, name, node.op_type)
        if row.compared:
            compared[index] = row
        rows.append(row)
    first = next((i for i, r in compared.items() if r.ok is False), None)
    held = {value.channels_last_of or value.name for value in graph.values.values()}
    final = []
    for row in rows:
        if row.compared:
            final.append(_replace(row, first=row.index == first))
        elif row.note:
            final.append(row)
        else:
            final.append(_uncompared(side, row, compared, held))
    return tuple(final)


def _badness(row: Row) -> float:
    if row.max_abs is None or row.tolerance is None:
        return 0.0
    return math.inf if not math.isfinite(row.max_abs) else row.max_abs / max(row.tolerance, 1e-30)


def _compare(index: int, node: str, op: str, tensor: str, value: str, ours: np.ndarray, ref: np.ndarray,
             step: float | None, graph: Graph, kernel: tuple[str, str]) -> Row:
    base = Row(index, node, op, tensor, *kernel)
    if ours.shape != ref.shape:
        return _replace(base, note=f"aot's tensor {value} has shape {list(ours.shape)}, the reference's "
                        f"{list(ref.shape)}: not compared")
    c = checks.compare({tensor: ours}, {tensor: ref}, {tensor: step} if step else None)[0]
    quant = graph.values[value].quant
    if quant is not None:       # codes: a step is one code, its real size the tensor's scale
        real = float(np.max(quant.scale))
        return _replace(base, max_abs=c.max_abs * real, steps=c.max_abs, scale=c.scale, tolerance=1.001 * real,
                        ok=c.ok)
    tolerance = max(checks.TOLERANCE * c.scale, 1.001 * step if step else 0.0)
    return _replace(base, max_abs=c.max_abs, steps=c.max_abs / step if step else None, scale=c.scale,
                    tolerance=tolerance, ok=c.ok)


def _uncompared(side: _OnnxSide, row: Row, compared: dict[int, Row], held: set[str]) -> Row:
    """Why a node has no tensor compared, and which compared row its result reaches first."""
    node = side.nodes[row.index]
    outputs = [o for o in node.output if o]
    if outputs and all(o in side.constant for o in outputs):
        return _replace(row, note=FOLDED)
    island = any(o in held and o in side.inside_qdq for o in outputs)
    later = _checked_at(side, row.index, compared)
    if later is None:
        return _replace(row, note="float between Dequantize and Quantize (not compared)" if island
                        else "no tensor in aot, and nothing after it is compared")
    checked = compared[later]
    if island:      # aot computes it in float; onnxruntime would change its arithmetic if asked for it
        note = f"float between Dequantize and Quantize: checked at #{later}"
    elif checked.kernel == row.node:
        note = f"fused with #{later} {checked.node} into one kernel"
    else:
        note = f"fused into {checked.kernel}, checked at #{later}"
    return _replace(row, kernel=checked.kernel, kernel_op=checked.kernel_op, note=note, checked_at=later)


def _checked_at(side: _OnnxSide, index: int, compared: dict[int, Row]) -> int | None:
    """The first compared node, in the model's order, that the node's results reach."""
    seen: set[int] = set()
    stack = [i for o in side.nodes[index].output for i in side.consumers.get(o, [])]
    best = None
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in compared:
            best = i if best is None else min(best, i)
            continue
        stack.extend(j for o in side.nodes[i].output for j in side.consumers.get(o, []))
    return best


def _replace(row: Row, **changes) -> Row:
    return dataclasses.replace(row, **changes)


# --- the table ------------------------------------------------------------------------------------

def _number(value: float | None) -> str:
    if value is None:
        return ""
    if not math.isfinite(value):
        return str(value)
    return "0" if value == 0 else f"{value:.3g}"


def table(result: BisectResult) -> list[str]:
    """The rows as text: node, op, aot's kernel, max abs error, steps, and the verdict. Nodes folded
    into constants (weights' DequantizeLinear, shape arithmetic) are counted in a last line instead."""
    header = ("#", "node", "op", "aot kernel", "max abs err", "steps", "")
    lines = [header]
    folded = [r for r in result.rows if r.note == FOLDED]
    for r in result.rows:
        if r.note == FOLDED:
            continue
        if r.compared:
            verdict = ("ok" if r.ok else "DIVERGES") + ("  <- first divergence" if r.first else "")
        else:
            verdict = r.note
        kernel = f"{r.kernel} ({r.kernel_op})" if r.kernel and r.compared else ""
        lines.append((str(r.index), r.node, r.op, kernel, _number(r.max_abs), _number(r.steps), verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right = {0, 4, 5}
    text = ["  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(line, widths))).rstrip() for line in lines]
    if folded:
        text.append(f"({len(folded)} node{'s' if len(folded) > 1 else ''} folded into constants at build time "
                    "not shown)")
    return text


def summary(result: BisectResult) -> str:
    first = result.first
    compared = sum(1 for r in result.rows if r.compared)
    if first is None:
        return f"all {compared} compared tensors within tolerance"
    steps = f" ({_number(first.steps)} steps)" if first.steps is not None else ""
    return (f"first divergence: #{first.index} {first.node} ({first.op}), tensor {first.tensor} computed by "
            f"aot's {first.kernel} ({first.kernel_op}): max abs error {_number(first.max_abs)}{steps}, "
            f"tolerance {_number(first.tolerance)}")


def write_json(result: BisectResult, path: str | os.PathLike, extra: dict | None = None) -> None:
    """The table as JSON, with `extra` keys (the float64 arbitration of a divergence)."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({**result.to_json(), **(extra or {})}, indent=2) + "\n")
    except OSError as err:
        raise OptionError(f"--json {path}: cannot write it: {err.strerror or err}") from None
