"""Arbitration in float64: when aot and the reference disagree, which of them is closer to the exact value.

A reference is a program too: onnxruntime's Sigmoid, for one, is about 1e-7 off (several times the value
itself) for logits below -12, where aot's is within a few ulp. So a disagreement past the tolerance is
not taken as aot's fault until it is arbitrated:

1. aot.bisect names the first node, in the model's order, whose result differs past the tolerance.
2. That node is evaluated in float64 by onnx.reference's op implementations, from the reference's
   float32 values at its inputs cast to float64; nodes whose results aot holds no tensor of (fused into
   the same kernel before it: a Conv whose Sigmoid is its epilogue) are evaluated with it, from theirs.
3. aot's result and the reference's are measured against that float64 value. aot passes the node if it
   is within the tolerance of the float64 value and closer to it than the reference is.
4. If the reference is closer, the node is evaluated in float64 once more, from aot's own values at its
   inputs. If aot's result is within the tolerance of that value, aot computes the node right: the
   difference comes from its inputs, each within the tolerance, and the node amplifies it (an atan2 of
   two values near 0, a division by a small difference). Otherwise aot is wrong at that node.
5. If aot passes, the reference's result of that node is replaced by the float64 value (by aot's own result
   where the node amplified its inputs' difference; in the tensor's dtype), the reference runs the rest of
   the model from it, and the comparison resumes: a later node may still diverge, and is arbitrated in turn.

The model passes when no node diverges any more and its outputs are within tolerance of the corrected
reference's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot import reference as checks
from aot.bisect import BisectResult, Probed, Row, compare_rows
from aot.errors import RunError, first_line
from aot.graph.widen import widen_model

# Nodes arbitrated in one model before giving up: each one aot wins costs a run of the reference (a
# second or two for a ViT-tiny). An int8 transformer whose one-code differences grow layer by layer
# diverges anew at each of its LayerNorms: 12 layers took 15.
MAX_NODES = 32


@dataclass(frozen=True)
class Verdict:
    """One diverging node, evaluated in float64: how far each side is from that value."""

    node: str
    op: str
    tensor: str
    fused: tuple[str, ...] = ()         # nodes evaluated with it, aot holding no tensor of theirs
    aot_error: float = math.inf         # max |aot - float64 value| (codes for a quantized tensor)
    reference_error: float = math.inf   # max |reference - float64 value|
    tolerance: float = 0.0              # the largest aot_error that passes
    own_error: float = math.inf         # max |aot - the float64 value from aot's own inputs| (when aot is
                                        #   not closer from the reference's)
    unevaluated: str = ""               # why there is no float64 value (then aot does not pass)
    reference_nans: int = 0             # elements the reference gives NaN or an infinity where the float64
                                        #   value is finite (a 0/0 its own arithmetic made, say)
    size: int = 0
    exact: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def aot_wins(self) -> bool:
        return not self.unevaluated and self.aot_error <= self.tolerance and self.aot_error < self.reference_error

    @property
    def amplified(self) -> bool:
        """aot is not closer from the reference's inputs, but computes the node right from its own: the
        difference is its inputs', each within the tolerance, grown by the node."""
        return not self.unevaluated and not self.aot_wins and self.own_error <= self.tolerance

    @property
    def aot_right(self) -> bool:
        return self.aot_wins or self.amplified

    def closeness(self) -> str:
        """'aot is 800x closer', or the same of the reference."""
        better, worse, who = ((self.aot_error, self.reference_error, "aot") if self.aot_error < self.reference_error
                              else (self.reference_error, self.aot_error, "the reference"))
        if better == 0:
            return f"{who} equals it"
        if math.isinf(worse):
            return f"{who} is closer"
        return f"{who} is {worse / better:.3g}x closer"


@dataclass(frozen=True)
class Arbitration:
    reference: str                      # the reference that ran: onnxruntime or onnx
    verdicts: tuple[Verdict, ...]
    comparisons: list[checks.Comparison]    # aot's outputs against the corrected reference's
    mismatches: list[checks.Comparison]     # aot's outputs past the tolerance of the reference's, as first run
    bisect: BisectResult = field(repr=False)
    exhausted: bool = False             # MAX_NODES nodes arbitrated and still a divergence
    stopped: str = ""                   # the reference could not run on from a float64 value: why

    @property
    def ok(self) -> bool:
        """Every divergence arbitrated in aot's favour, and the outputs within the tolerance of the
        corrected reference's. Nothing to arbitrate is no verdict for aot: an output that differed while
        no node's result did (the reference computing otherwise once its intermediate values are outputs)
        is not passed."""
        return (bool(self.verdicts) and not self.exhausted and not self.stopped
                and all(v.aot_right for v in self.verdicts) and all(c.ok for c in self.comparisons))

    @property
    def wrong(self) -> Verdict | None:
        """The node where aot was found the wrong side (or could not be cleared)."""
        return next((v for v in self.verdicts if not v.aot_right), None)


def arbitrate(result: BisectResult) -> Arbitration:
    """Arbitrate each divergence of a bisect run in turn (see the module's docstring)."""
    probed = result.probed
    if probed is None:
        raise ValueError("arbitrate needs the BisectResult of aot.bisect.bisect")
    tensors = dict(probed.reference)
    rows = result.rows
    replaced: dict[str, np.ndarray] = {}
    verdicts: list[Verdict] = []
    for _ in range(MAX_NODES):
        first = next((r for r in rows if r.first), None)
        if first is None:
            break
        verdict = judge(probed, first, tensors)
        verdicts.append(verdict)
        if not verdict.aot_right:
            break
        value = verdict.exact if verdict.aot_wins else probed.ours[first.tensor]
        replaced[first.tensor] = np.asarray(value).astype(tensors[first.tensor].dtype)
        try:
            tensors = _rerun(probed, replaced, result.reference)
        except RunError as err:
            return _finish(result, verdicts, tensors, stopped=str(err))
        rows = compare_rows(probed, tensors)
    exhausted = any(r.first for r in rows) and len(verdicts) == MAX_NODES and verdicts[-1].aot_right
    return _finish(result, verdicts, tensors, exhausted=exhausted)


def _finish(result: BisectResult, verdicts: list[Verdict], tensors: dict[str, np.ndarray], **flags) -> Arbitration:
    """The arbitration, with aot's outputs compared with the reference's as first run and as corrected."""
    probed = result.probed
    steps = checks.value_steps(probed.graph, [n for n in result.outputs if n in probed.graph.values])
    comparisons = checks.compare(result.outputs, {n: tensors[n] for n in result.outputs}, steps)
    before = checks.compare(result.outputs, {n: probed.reference[n] for n in result.outputs}, steps)
    return Arbitration(result.reference, tuple(verdicts), comparisons, [c for c in before if not c.ok], result,
                       **flags)


def judge(probed: Probed, row: Row, tensors: dict[str, np.ndarray]) -> Verdict:
    """The row's node (with what is fused before it) in float64, against aot's and the reference's result."""
    nodes, boundary = _piece(probed, row.tensor, tensors)
    fused = tuple(n.name or n.op_type for n in nodes      # weights' Dequantize and such are not worth naming
                  if row.tensor not in n.output and not all(o in probed.side.constant for o in n.output))
    base = Verdict(row.node, row.op, row.tensor, fused)
    try:
        exact = _evaluate(probed.proto, nodes, boundary, row.tensor)
    except _Unevaluable as err:
        return _with(base, unevaluated=str(err))
    ours, ref = probed.ours[row.tensor], tensors[row.tensor]
    if exact.shape != ours.shape or exact.shape != ref.shape:
        return _with(base, unevaluated=f"its float64 value has shape {list(exact.shape)}, aot's {list(ours.shape)}")
    value = probed.probes[row.tensor][0]
    steps = checks.value_steps(probed.graph, [value])
    c = checks.compare({row.tensor: ours}, {row.tensor: exact}, {row.tensor: steps[value]} if steps else None)[0]
    # the tolerance of `aot run`, about the float64 value: 1e-4 of its largest magnitude, or one step
    tolerance = max(checks.TOLERANCE * c.scale, 1.001 * c.step)
    theirs = checks.compare({row.tensor: ref}, {row.tensor: exact})[0]
    nans = int(np.count_nonzero(~np.isfinite(ref) & np.isfinite(exact)))
    verdict = _with(base, aot_error=c.max_abs, reference_error=theirs.max_abs, tolerance=tolerance, exact=exact,
                    reference_nans=nans, size=exact.size)
    if verdict.aot_wins:
        return verdict
    own = {name: probed.ours.get(name, value) for name, value in boundary.items()}
    try:
        exact_own = _evaluate(probed.proto, nodes, own, row.tensor)
    except _Unevaluable:
        return verdict
    if exact_own.shape != ours.shape:
        return verdict
    own_error = checks.compare({row.tensor: ours}, {row.tensor: exact_own},
                               {row.tensor: steps[value]} if steps else None)[0].max_abs
    return _with(verdict, own_error=own_error)


def _with(verdict: Verdict, **changes) -> Verdict:
    return dataclasses.replace(verdict, **changes)


def _piece(probed: Probed, tensor: str, tensors: dict[str, np.ndarray]
           ) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """The nodes that compute `tensor` back to values the reference gave (its tensors, the feeds,
    the initializers), in the model's order, and those values."""
    graph = probed.proto.graph
    known = {**{t.name: numpy_helper.to_array(t) for t in graph.initializer}, **probed.feeds, **tensors}
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    wanted, boundary, stack = set(), {}, [tensor]
    while stack:
        name = stack.pop()
        index = producer.get(name)
        if name in known and (name != tensor):
            boundary[name] = known[name]
        elif index is not None and index not in wanted:
            wanted.add(index)
            node = graph.node[index]
            stack.extend(n for n in node.input if n)
            stack.extend(_outer_names(node))
    return [graph.node[i] for i in sorted(wanted)], boundary


def _outer_names(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs (If, Loop, Scan bodies) read from outside, roughly: every input of
    their nodes; those the subgraph makes itself are simply not found outside."""
    names = []
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            for inner in sub.node:
                names.extend(n for n in inner.input if n)
                names.extend(_outer_names(inner))
    return names


class _Unevaluable(Exception):
    pass


def _evaluate(proto: onnx.ModelProto, nodes: list[onnx.NodeProto], boundary: dict[str, np.ndarray],
              tensor: str) -> np.ndarray:
    """`tensor` computed by onnx.reference from `boundary`, every float value and constant in float64."""
    feeds = {name: _f64(value) for name, value in boundary.items()}
    graph = helper.make_graph(nodes, "arbitrate",
                              [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in feeds],
                              [helper.make_tensor_value_info(tensor, TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import), functions=list(proto.functions))
    model.ir_version = proto.ir_version
    model = widen_model(model)
    try:
        with np.errstate(all="ignore"):     # a log of a negative is the model's business, as in float32
            value = np.asarray(checks.reference_evaluator(model).run([tensor], feeds)[0])
    except Exception as err:        # noqa: BLE001 - the evaluator's failure on float64, said in one line
        raise _Unevaluable(f"onnx.reference cannot evaluate it in float64: {first_line(err)}") from None
    if value.dtype.kind == "f" and value.dtype != np.float64:
        raise _Unevaluable(f"onnx.reference computes it in {value.dtype}, not float64")
    return value


def _f64(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.float64) if value.dtype.kind == "f" else value


def _rerun(probed: Probed, replaced: dict[str, np.ndarray], reference: str) -> dict[str, np.ndarray]:
    """The reference's tensors with `replaced` values taking the place of what their producers computed:
    each is made a graph input, its producer's output renamed away, and the model run again."""
    model = onnx.ModelProto.FromString(probed.proto.SerializeToString())
    graph = model.graph
    for node in graph.node:
        for i, out in enumerate(node.output):
            if out in replaced:
                node.output[i] = f"{out}__replaced_by_float64"
    graph.input.extend(helper.make_tensor_value_info(name, probed.side.types[name], list(value.shape))
                       for name, value in replaced.items())
    wanted = [n for n in dict.fromkeys([o.name for o in graph.output] + list(probed.probes)) if n not in replaced]
    kept = [o for o in graph.output if o.name in wanted]
    extra = [n for n in wanted if n not in {o.name for o in kept} and n in probed.side.types]
    del graph.output[:]
    graph.output.extend(kept)
    graph.output.extend(helper.make_tensor_value_info(n, probed.side.types[n], None) for n in extra)
    if not graph.output:
        return dict(replaced)
    run = checks.run_reference(model, {**probed.feeds, **replaced}, probed.label, reference)
    return {**run.outputs, **replaced}


def to_json(arbitration: Arbitration) -> dict:
    """The verdicts as plain values (infinities as None), for `aot run --bisect --json`."""
    def clean(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return {"ok": arbitration.ok, "reference": arbitration.reference, "stopped": arbitration.stopped or None,
            "exhausted": arbitration.exhausted,
            "verdicts": [{"node": v.node, "op": v.op, "tensor": v.tensor, "fused": list(v.fused),
                          "aot_error": clean(v.aot_error), "reference_error": clean(v.reference_error),
                          "tolerance": v.tolerance, "aot_wins": v.aot_wins, "own_error": clean(v.own_error),
                          "amplified": v.amplified, "unevaluated": v.unevaluated or None,
                           "reference_nans": v.reference_nans}
                         for v in arbitration.verdicts]}


# --- the text -------------------------------------------------------------------------------------

def _number(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def verdict_line(verdict: Verdict, reference: str) -> str:
    """The node, its float64 evaluation, each side's distance from it, and the verdict."""
    fused = f"; with {', '.join(verdict.fused)} before it in aot's kernel" if verdict.fused else ""
    where = f"at node '{verdict.node}' ({verdict.op}{fused})"
    if verdict.unevaluated:
        return f"{where}: not arbitrated: {verdict.unevaluated}"
    closer = verdict.closeness().replace("the reference", reference)
    errors = (f"aot is off by {_number(verdict.aot_error)}, {reference} by {_number(verdict.reference_error)} "
              f"(tolerance {_number(verdict.tolerance)})")
    if verdict.reference_nans:
        errors += (f"; {reference} gives NaN or an infinity at {verdict.reference_nans} of {verdict.size} elements "
                   f"where the float64 value (the op's definition) is finite")
    if verdict.aot_wins:
        return f"{where} evaluated in float64 {closer}: {errors}: aot is right there"
    if verdict.amplified:
        return (f"{where} evaluated in float64 {closer}: {errors}; from aot's own inputs aot is off by "
                f"{_number(verdict.own_error)}: the node amplifies its inputs' difference (each within the "
                f"tolerance), aot is right there")
    return f"{where} evaluated in float64 {closer}: {errors}: aot is wrong there"


def lines(arbitration: Arbitration) -> list[str]:
    """One line per node arbitrated, then one per output that differed: passes or fails, and why."""
    ref = "onnx.reference" if arbitration.reference == "onnx" else arbitration.reference
    text = [verdict_line(v, ref) for v in arbitration.verdicts]
    if not arbitration.verdicts:
        text.append(f"no node's result differs from {ref}'s past the tolerance in the node-by-node run "
                    f"({ref} computes otherwise once its intermediate values are outputs): nothing to arbitrate")
    if arbitration.stopped:
        text.append(f"not arbitrated further: {arbitration.stopped}")
    if arbitration.exhausted:
        text.append(f"still diverging after {MAX_NODES} nodes arbitrated: not arbitrated further")
    wrong = arbitration.wrong
    won = [v for v in arbitration.verdicts if v.aot_right]
    corrected = {c.output: c for c in arbitration.comparisons}
    for c in arbitration.mismatches:
        head = f"output '{c.output}': aot differs from {ref} by {_number(c.max_abs)} beyond tolerance"
        if corrected[c.output].ok and won:
            more = len(won) - 1
            how = ("aot computes it right from its own inputs, whose difference it amplifies" if won[0].amplified
                   else won[0].closeness())
            text.append(f"{head}; at node '{won[0].node}' ({won[0].op}) evaluated in float64 {how}"
                        + (f" (and at {more} more node{'s' if more > 1 else ''})" if more else "") + ": passes")
        elif wrong is not None and not wrong.unevaluated:
            text.append(f"{head}; at node '{wrong.node}' ({wrong.op}) evaluated in float64 "
                        f"{wrong.closeness().replace('the reference', ref)}: aot is wrong: fails")
        else:
            text.append(f"{head}: fails")
    return text
