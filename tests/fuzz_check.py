"""One differential check of a fuzzed graph: compile with aot, run, compare with an independent reference.

The reference is onnxruntime (CPU, graph optimizations off, as tests/oracle.py runs it); where it cannot
run the graph (no kernel for an op or type), `onnx.reference.ReferenceEvaluator`. The outcome is one of

- pass;
- reference-wrong: an output differs from the reference past the tolerance, and the float64 evaluation
  finds aot within it and the reference not (onnxruntime's MeanVarianceNormalization gives NaN, 0/0,
  for a group of equal values where the op's definition adds an epsilon and gives 0): not aot's fault;
- wrong: an output's shape, dtype or numbers differ past the tolerance below;
- crash: aot raised an exception that is not an `AotError`, or an `AotError` that is aot's own fault: an
  `InternalError`, a `PlanError` (the planner's verifier), a `RunError` (the generated program failed to
  compile, faulted, returned an error code or hung);
- refused: any other `AotError` (unsupported op or attribute, ...): its message is kept and listed;
- invalid: neither reference can run the graph (a generator bug; never counted as aot's).

Tolerances, per output (`bound`):
- bool and integer outputs are compared exactly: the generator feeds comparisons, casts and index ops
  only exact tensors (see fuzz_graphs.py), on which both sides agree to the bit;
- an int8/uint8 output made by QuantizeLinear (through ops that only move values) may be one step off:
  x/scale rounds to the nearest integer, and a one-ulp difference in x/scale (aot multiplies by the
  reciprocal, requantizes int32 accumulators in float, fuses the scales) flips a tie. Likewise a float
  output that is a DequantizeLinear of such a tensor may differ by that DequantizeLinear's scale;
- float outputs: max|aot - ref| <= rtol * max|ref| with rtol = 2e-5 * (depth + 2), where depth counts
  the ops that compute (not just move) values on the longest path to the output: every float32 kernel
  rounds at its own points (fused multiply-add, another summation order, our polynomial exp/tanh/erf
  within a few ulp), so the error grows with the chain, and it is measured against the output's scale
  because a fixed number of ulps of the largest intermediate is what float32 can keep.
- past that bound, the graph is evaluated in float64 (ReferenceEvaluator on a float64 copy, aot.graph.widen)
  to arbitrate: aot within the bound of the float64 result and the reference not is reference-wrong;
  for ill-conditioned cases (cancellation) aot passes if its distance to the float64 result is within
  the bound plus 4x onnxruntime's own (finite) distance to it: onnxruntime's float32 error measures how
  well float32 can compute this chain, and aot computes in float32 too, in another order. The tolerance
  is never widened beyond that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx

import aot
from aot.errors import AotError, InternalError, PlanError, RunError, first_line
from aot.graph.widen import widen_model

KINDS = ("pass", "reference-wrong", "wrong", "crash", "refused", "invalid")
# ops that only move values (and DequantizeLinear's scale survives them unchanged)
MOVES = {"Reshape", "Transpose", "Slice", "Squeeze", "Unsqueeze", "Expand", "Flatten", "Identity", "Concat",
         "Split", "Tile", "Gather", "GatherElements", "GatherND", "Dropout", "Pad", "MaxPool", "GlobalMaxPool"}
QDQ = {"QuantizeLinear", "DequantizeLinear"}


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""

    @property
    def signature(self) -> str:
        """What "fails the same way" means to the reducer: the kind, and for crashes and refusals the
        message with names and numbers blanked (they change as the graph shrinks)."""
        if self.kind == "wrong":
            return "wrong:" + self.detail.split(":", 1)[0].split(" ")[0]
        text = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", self.detail.splitlines()[0] if self.detail else "")
        text = re.sub(r"\b[A-Za-z_]*\d+[\w.]*", "#", text)
        return f"{self.kind}:{text[:160]}"


def reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
              names: list[str] | None = None) -> tuple[dict[str, np.ndarray], str]:
    """The reference's outputs (or the values `names`) and which reference computed them."""
    try:
        return _onnxruntime(model, inputs, names), "onnxruntime"
    except Exception:          # noqa: BLE001 - no kernel for an op/type: the ONNX reference instead
        from aot.graph.evaluate import reference_evaluator
        results = reference_evaluator(model).run(names, inputs)
        wanted = names or [o.name for o in model.graph.output]
        return dict(zip(wanted, (np.asarray(r) for r in results))), "onnx.reference"


def _onnxruntime(model, inputs, names):
    import onnxruntime as ort
    if names:
        model = with_outputs(model, names)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in sess.get_outputs()]
    return dict(zip(wanted, sess.run(wanted, inputs)))


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy whose outputs are `names` (types left for the runtime to infer)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.output[:]
    copy.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    return copy


def check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], target: str = "host",
          timeout: float = 120.0) -> Outcome:
    try:
        expected, _ = reference(model, inputs)
    except Exception as err:   # noqa: BLE001 - neither reference runs it: the graph is not valid
        return Outcome("invalid", first_line(err))
    got = run_aot(model, inputs, target, timeout)
    return got if isinstance(got, Outcome) else compare(model, inputs, got, expected)


def run_aot(model, inputs: dict[str, np.ndarray], target: str, timeout: float) -> dict[str, np.ndarray] | Outcome:
    """aot's outputs for a model (ONNX or TFLite), or the outcome that it crashed or refused it."""
    try:
        return aot.run(model, inputs={k: v.copy() for k, v in inputs.items()}, target=target, timeout=timeout)
    except (InternalError, PlanError, RunError) as err:
        return Outcome("crash", f"{type(err).__name__}: {first_line(err)}")
    except AotError as err:
        return Outcome("refused", f"{type(err).__name__}: {first_line(err)}")
    except Exception as err:   # noqa: BLE001 - any other exception is a compiler crash
        return Outcome("crash", f"{type(err).__name__}: {first_line(err)}")


def compare(model, inputs, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> Outcome:
    graph = GraphFacts(model)
    names = [o.name for o in model.graph.output]
    if list(got) != names:
        return Outcome("wrong", f"outputs: aot returned {list(got)}, the model has {names}")
    found = Outcome("pass")
    for name in names:
        out, ref = np.asarray(got[name]), np.asarray(expected[name])
        if out.shape != ref.shape:
            return Outcome("wrong", f"shape: {name} aot {list(out.shape)} reference {list(ref.shape)}")
        if out.dtype != ref.dtype:
            return Outcome("wrong", f"dtype: {name} aot {out.dtype} reference {ref.dtype}")
        problem = compare_output(graph, name, out, ref)
        if problem and ref.dtype == np.float32:
            part = computing(model, name)
            if GraphFacts(part).float64_able:
                exact = float64_outputs(part, {k: v for k, v in inputs.items()
                                               if k in {i.name for i in part.graph.input}})
                if exact is not None:
                    verdict = arbitrate(graph, name, out, ref, *exact)
                    if verdict.kind == "pass":
                        continue
                    if verdict.kind == "reference-wrong":
                        found = verdict
                        continue
                    return verdict
        if problem:
            return Outcome("wrong", problem)
    return found


def compare_output(graph: GraphFacts, name: str, out: np.ndarray, ref: np.ndarray) -> str:
    if ref.size == 0:
        return ""
    if ref.dtype != np.float32:
        diff = np.abs(out.astype(np.int64) - ref.astype(np.int64))
        allowed = 1 if graph.quantized_from(name) is not None else 0
        if int(diff.max()) > allowed:
            i = int(np.argmax(diff))
            return (f"values: {name} ({ref.dtype}) differs by {int(diff.max())} (allowed {allowed}) at "
                    f"{np.unravel_index(i, ref.shape)}: aot {out.flat[i]} reference {ref.flat[i]}")
        return ""
    bound, step = float_bound(graph, name, ref)
    err = max_error(out, ref)
    if err <= bound + step:
        return ""
    diff = np.abs(out.astype(np.float64) - ref)
    i = int(np.nanargmax(diff)) if np.isfinite(err) and not np.all(np.isnan(diff)) else 0
    return (f"values: {name} max abs error {err:.3g} > bound {bound + step:.3g} (max|ref| "
            f"{np.nanmax(np.abs(ref)):.3g}, depth {graph.depth(name)}) at {np.unravel_index(i, ref.shape)}: "
            f"aot {out.flat[i]!r} reference {ref.flat[i]!r}")


def float_bound(graph: GraphFacts, name: str, ref: np.ndarray) -> tuple[float, float]:
    rtol = 2e-5 * (graph.depth(name) + 2)
    finite = np.abs(ref[np.isfinite(ref)].astype(np.float64))
    scale = float(finite.max()) if finite.size else 0.0
    dq_scale = graph.dequantized_scale(name)
    return rtol * max(scale, 1e-30), (dq_scale * 1.001 if dq_scale else 0.0)


def max_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Max |out - ref|, NaN in the same place counting as equal, any other NaN or inf as infinite."""
    a, r = out.astype(np.float64), ref.astype(np.float64)
    same_nan = np.isnan(a) & np.isnan(r)
    diff = np.where(same_nan, 0.0, np.abs(a - r))
    diff = np.where(np.isnan(diff), np.inf, diff)
    return float(diff.max())


def arbitrate(graph: GraphFacts, name: str, out, ref, exact: np.ndarray, label: str = "float64") -> Outcome:
    """aot's and onnxruntime's output against the float64 result (`label` says if it is only onnx.reference's
    float32 one): pass, reference-wrong or wrong, as the module's docstring says."""
    bound, step = float_bound(graph, name, ref)
    ours, theirs = max_error(out, exact), max_error(ref, exact)
    if ours <= bound + step < theirs:
        return Outcome("reference-wrong", f"values: {name} max abs error vs {label} {ours:.3g} <= bound "
                                          f"{bound + step:.3g}, the reference's {theirs:.3g}")
    if np.isfinite(theirs) and ours <= bound + step + 4 * theirs:
        return Outcome("pass")
    return Outcome("wrong", f"values: {name} max abs error vs {label} {ours:.3g} > bound {bound + step:.3g} + 4 x "
                            f"reference's own {theirs:.3g} (depth {graph.depth(name)})")


def computing(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """The part of the graph that computes output `name`: the arbitration of one output neither fails on
    nor is barred by an op elsewhere (a GatherElements onnx.reference cannot run, a QDQ island)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    needed, read, stack = set(), {name}, [name]
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        inputs = [i for i in node.input if i]
        for a in node.attribute:        # what a subgraph reads from the outer scope
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                inputs += [i for n in g.node for i in n.input if i]
        read.update(inputs)
        stack.extend(inputs)
    part = onnx.ModelProto()
    part.CopyFrom(model)
    g = part.graph
    nodes = [n for n in model.graph.node if id(n) in needed]
    del g.node[:]
    g.node.extend(nodes)
    inputs = [i for i in model.graph.input if i.name in read]
    del g.input[:]
    g.input.extend(inputs)
    outputs = [o for o in model.graph.output if o.name == name]
    del g.output[:]
    g.output.extend(outputs)
    return part


def float64_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, str] | None:
    """The graph's one output evaluated in float64 by onnx.reference, and "float64"; where it cannot run an
    op in float64, in float32 and "onnx.reference" (a second, independent float32 reference); None if
    neither runs."""
    from aot.graph.evaluate import reference_evaluator
    try:
        wide = widen_model(model)
        feeds = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in inputs.items()}
        with np.errstate(all="ignore"):
            value = np.asarray(reference_evaluator(wide).run(None, feeds)[0])
        return value, "float64" if value.dtype == np.float64 else f"onnx.reference in {value.dtype}"
    except Exception:          # noqa: BLE001 - an op the reference cannot run in float64
        pass
    try:
        with np.errstate(all="ignore"):
            return np.asarray(reference_evaluator(model).run(None, inputs)[0]), "onnx.reference in float32"
    except Exception:          # noqa: BLE001 - no arbitration
        return None


class GraphFacts:
    """What the tolerance needs to know of the graph: depth of computation, quantized producers."""

    def __init__(self, model: onnx.ModelProto):
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.consts = {t.name: t for t in model.graph.initializer}
        self.consts.update({n.output[0]: n.attribute[0].t for n in model.graph.node
                            if n.op_type == "Constant" and n.attribute[0].type == onnx.AttributeProto.TENSOR})
        self.float64_able = not any(n.op_type in QDQ for n in model.graph.node)
        self._depth: dict[str, int] = {}

    def depth(self, name: str) -> int:
        if name not in self._depth:
            node = self.producer.get(name)
            if node is None or node.op_type == "Constant":
                self._depth[name] = 0
            else:
                below = max((self.depth(i) for i in node.input if i), default=0)
                self._depth[name] = below + (0 if node.op_type in MOVES else 1)
        return self._depth[name]

    def _through_moves(self, name: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        while node is not None and node.op_type in MOVES:
            node = self.producer.get(node.input[0])
        return node

    def quantized_from(self, name: str) -> onnx.NodeProto | None:
        node = self._through_moves(name)
        return node if node is not None and node.op_type == "QuantizeLinear" else None

    def dequantized_scale(self, name: str) -> float:
        """The largest step of the DequantizeLinear this value is a move of (0 if none)."""
        node = self._through_moves(name)
        if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in self.consts:
            return 0.0
        return float(np.max(onnx.numpy_helper.to_array(self.consts[node.input[1]])))
