"""Reduce a failing fuzzed graph to a minimal one that fails the same way, and write it as a script.

Delta debugging over the graph's structure, greedy to a fixed point: drop a graph output; replace a
node's result by one of the node's own inputs of the same shape and type, or by a fresh graph input
holding the value the reference computed for it (so indices stay valid and Log's operand positive);
then drop whatever no longer feeds an output. A candidate is kept when `fails(model, inputs)` still
holds (the caller compares the Outcome's signature, see fuzz_check.py).

`script(model, inputs)` prints the graph as a standalone Python module building it with onnx.helper,
for pasting into a regression test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import onnx
from fuzz_check import reference
from onnx import helper, numpy_helper

Fails = Callable[[onnx.ModelProto, dict[str, np.ndarray]], bool]


@dataclass(frozen=True)
class Sketch:
    """A graph as the reducer edits it; `values` holds every tensor's value (the reference's)."""
    nodes: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]
    inits: tuple[onnx.TensorProto, ...]
    outputs: tuple[str, ...]
    opset: int


def sketch_of(model: onnx.ModelProto) -> Sketch:
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    inits = {t.name for t in model.graph.initializer}
    return Sketch(tuple(model.graph.node), tuple(i.name for i in model.graph.input if i.name not in inits),
                  tuple(model.graph.initializer), tuple(o.name for o in model.graph.output), opset)


def all_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o for n in model.graph.node for o in n.output if o]
    values, _ = reference(model, inputs, names)
    values.update(inputs)
    values.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    return {k: np.asarray(v) for k, v in values.items()}


def to_model(s: Sketch, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    def info(name: str) -> onnx.ValueInfoProto:
        v = values[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
    graph = helper.make_graph(list(s.nodes), "fuzz", [info(n) for n in s.inputs], [info(n) for n in s.outputs],
                              initializer=list(s.inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", s.opset)], producer_name="fuzz")
    model.ir_version = 8
    return model


def prune(s: Sketch) -> Sketch:
    """Drop nodes, initializers and inputs that no output depends on."""
    needed = set(s.outputs)
    kept = []
    for node in reversed(s.nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    return replace(s, nodes=tuple(reversed(kept)), inits=tuple(t for t in s.inits if t.name in needed),
                   inputs=tuple(i for i in s.inputs if i in needed))


def substitute(s: Sketch, old: str, new: str) -> Sketch:
    """Every use of `old` reads `new` instead (graph outputs renamed too)."""
    nodes = []
    for node in s.nodes:
        if old in node.input:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [new if i == old else i for i in node.input]
            node = copy
        nodes.append(node)
    outputs = tuple(dict.fromkeys(new if o == old else o for o in s.outputs))
    return prune(replace(s, nodes=tuple(nodes), outputs=outputs))


def candidates(s: Sketch, values: dict[str, np.ndarray]) -> Iterator[Sketch]:
    """Smaller graphs, the biggest cuts first."""
    if len(s.outputs) > 1:
        for out in s.outputs:
            yield prune(replace(s, outputs=tuple(o for o in s.outputs if o != out)))
    produced = {o for n in s.nodes for o in n.output}
    fixed = set(s.inputs) | {t.name for t in s.inits}
    for node in reversed(s.nodes):
        for out in node.output:
            if not out or out not in values:
                continue
            v = values[out]
            for src in node.input:
                if src and src in values and values[src].shape == v.shape and values[src].dtype == v.dtype:
                    if out in s.outputs and src not in produced:
                        continue       # a graph input straight to an output says nothing
                    yield substitute(s, out, src)
            if out not in s.outputs and node.op_type != "Constant" and out not in fixed:
                fresh = f"{out}_in"
                values.setdefault(fresh, v)
                cut = substitute(s, out, fresh)
                yield replace(cut, inputs=tuple(dict.fromkeys((*cut.inputs, fresh))))


def reduce(model: onnx.ModelProto, inputs: dict[str, np.ndarray], fails: Fails,
           max_tries: int = 400) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    values = all_values(model, inputs)
    best = prune(sketch_of(model))
    tries = 0
    progress = True
    while progress and tries < max_tries:
        progress = False
        for cand in candidates(best, values):
            if (len(cand.nodes), len(cand.outputs)) >= (len(best.nodes), len(best.outputs)):
                continue       # no smaller: a cut must remove a node or an output (so the loop ends)
            tries += 1
            model_c = to_model(cand, values)
            feeds = {n: values[n] for n in cand.inputs}
            if _valid(model_c) and fails(model_c, feeds):
                best, progress = cand, True
                break
            if tries >= max_tries:
                break
    return to_model(best, values), {n: values[n] for n in best.inputs}


def _valid(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
        return True
    except Exception:      # noqa: BLE001 - a substitution the op's type rules do not allow
        return False


# ---------------------------------------------------------------- the model as a script


def script(model: onnx.ModelProto, inputs: dict[str, np.ndarray], title: str = "") -> str:
    """Python source that builds `model` with onnx.helper and its inputs with numpy."""
    g = model.graph
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    lines = [f'"""{title or "A graph found by the differential fuzzer."}"""', "",
             "import numpy as np", "from onnx import TensorProto, helper, numpy_helper", "", "",
             "def model():", "    nodes = ["]
    lines += [f"        {node_source(n)}," for n in g.node]
    lines += ["    ]", "    initializers = ["]
    lines += [f"        numpy_helper.from_array({array_source(numpy_helper.to_array(t))}, {t.name!r}),"
              for t in g.initializer]
    lines += ["    ]", f"    inputs = [{', '.join(value_info_source(v) for v in g.input)}]",
              f"    outputs = [{', '.join(value_info_source(v) for v in g.output)}]",
              '    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, initializer=initializers)',
              f'    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", {opset})])',
              f"    m.ir_version = {model.ir_version}", "    return m", "", "",
              "def inputs():", "    return {"]
    lines += [f"        {k!r}: {array_source(v)}," for k, v in inputs.items()]
    lines += ["    }", "", "", 'if __name__ == "__main__":',
              "    from fuzz_check import check", "", "    print(check(model(), inputs()))", ""]
    return "\n".join(lines)


def node_source(n: onnx.NodeProto) -> str:
    attrs = "".join(f", {a.name}={attribute_source(a)}" for a in n.attribute)
    return f"helper.make_node({n.op_type!r}, {list(n.input)!r}, {list(n.output)!r}{attrs})"


def attribute_source(a: onnx.AttributeProto) -> str:
    value = helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.TENSOR:
        return f"numpy_helper.from_array({array_source(numpy_helper.to_array(value))})"
    if isinstance(value, bytes):
        return repr(value.decode())
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return repr([v.decode() for v in value])
    return repr(value)


def value_info_source(v: onnx.ValueInfoProto) -> str:
    tt = v.type.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tt.elem_type)
    return f"helper.make_tensor_value_info({v.name!r}, TensorProto.{dtype}, {[d.dim_value for d in tt.shape.dim]})"


def array_source(a: np.ndarray) -> str:
    a = np.asarray(a)
    flat = ", ".join(scalar_source(v) for v in a.reshape(-1))
    body = f"np.array([{flat}], dtype=np.{a.dtype})"
    return body if a.ndim == 1 else f"{body}.reshape({tuple(a.shape)})"


def scalar_source(v) -> str:
    if isinstance(v, (np.floating, float)):
        if not np.isfinite(v):
            return f"float('{v}')"
        return str(v)      # numpy prints the shortest text that reads back to the same float
    return str(v.item() if hasattr(v, "item") else v)
