"""The Python API: build, run and check models from scripts and notebooks. The CLI is a thin layer on it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx

from aot import reference as checks
from aot.build import Artifact, build
from aot.frontend.onnx import FreezeValue
from aot.ops.registry import op_def
from aot.run import local


def _build_for_run(model, target, input_shapes, out_dir, knobs, freeze, tmp: str, memory=None,
                   records=None) -> Artifact:
    return build(model, target=target, out_dir=out_dir or os.path.join(tmp, "build"), input_shapes=input_shapes,
                 knobs=knobs, freeze=freeze, memory=memory, records=records)


def run(model: str | os.PathLike | onnx.ModelProto | Artifact, inputs: dict[str, np.ndarray] | None = None,
        target: str = "host", input_shapes: dict[str, tuple[int, ...]] | None = None,
        out_dir: str | os.PathLike | None = None, seed: int = 0, timeout: float = 600.0,
        knobs: dict | None = None, freeze: dict[str, FreezeValue] | None = None,
        memory: dict[str, int] | None = None, records: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """Compile (unless given an Artifact) and run the model through its C entry point, natively or
    under the target's emulator. Returns the outputs by ONNX name, in graph order. Missing `inputs`
    are random with `seed`; a run longer than `timeout` seconds is stopped (RunError). Inputs named
    in `freeze` are constants of the build (see aot.build) and take no value in `inputs`; `memory`
    limits the build and `records` picks its schedules as aot.build's do.
    """
    return _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs, freeze, memory,
                    records)[0]


@dataclass(frozen=True)
class CheckResult:
    artifact_dir: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    comparisons: list[checks.Comparison]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)


def check(model: str | os.PathLike | onnx.ModelProto | Artifact, inputs: dict[str, np.ndarray] | None = None,
          target: str = "host", input_shapes: dict[str, tuple[int, ...]] | None = None,
          out_dir: str | os.PathLike | None = None, seed: int = 0, timeout: float = 600.0,
          knobs: dict | None = None, freeze: dict[str, FreezeValue] | None = None,
          memory: dict[str, int] | None = None, records: str | os.PathLike | None = None) -> CheckResult:
    """Run the compiled model and onnxruntime on the same inputs and compare every output; onnxruntime
    runs the model with the `freeze` values as constants too."""
    outputs, artifact, feeds = _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs,
                                        freeze, memory, records)
    proto, frozen = artifact.model.reference()
    reference = checks.reference_outputs(proto, {**feeds, **frozen}, artifact.model.label)
    steps = quantization_steps(artifact.program)
    return CheckResult(str(artifact.dir), feeds, outputs, reference, checks.compare(outputs, reference, steps))


def quantization_steps(program) -> dict[str, float]:
    """For outputs made by quantized arithmetic: the size of one step (1 for integer outputs). Other
    outputs (float, and integer or bool ones such as indices and masks) get no such allowance."""
    return value_steps(program.graph, program.graph.outputs)


def value_steps(graph, names) -> dict[str, float]:
    """quantization_steps for any of the graph's values: 1 for a quantized integer tensor (its steps
    are its codes), the scale of the Dequantize that made a float one; others are left out."""
    producers = graph.producers()
    steps = {}
    for out in names:
        if graph.values[out].quant is not None:
            steps[out] = 1.0
            continue
        node = producers.get(out)
        while node is not None and op_def(node.op).moves_values and len(node.inputs) == 1:
            node = producers.get(node.inputs[0])
        if node is not None and node.op == "Dequantize":
            steps[out] = node.attrs["scale"]
    return steps


def _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs=None, freeze=None, memory=None,
             records=None):
    with tempfile.TemporaryDirectory(prefix="aot-") as tmp:
        artifact = (model if isinstance(model, Artifact)
                    else _build_for_run(model, target, input_shapes, out_dir, knobs, freeze, tmp, memory, records))
        proto = artifact.model.proto
        feeds = (checks.random_inputs(proto, seed) if inputs is None
                 else checks.validate_inputs(proto, inputs, artifact.model.label))
        return local.run(artifact, feeds, timeout), artifact, feeds
