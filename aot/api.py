"""The Python API: build, run and check models from scripts and notebooks. The CLI is a thin layer on it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from aot import reference as checks
from aot.arbitrate import Arbitration
from aot.arbitrate import arbitrate as arbitrate_bisect
from aot.bisect import bisect
from aot.build import Artifact, build
from aot.device.board import DeviceBoard
from aot.errors import AotError, OptionError
from aot.frontend.onnx import FreezeValue
from aot.run import local


def _build_for_run(model, target, input_shapes, out_dir, knobs, freeze, tmp: str, memory=None,
                   records=None, tflite_arithmetic=None) -> Artifact:
    return build(model, target=target, out_dir=out_dir or os.path.join(tmp, "build"), input_shapes=input_shapes,
                 knobs=knobs, freeze=freeze, memory=memory, records=records, tflite_arithmetic=tflite_arithmetic)


def run(model: str | os.PathLike | onnx.ModelProto | Artifact, inputs: dict[str, np.ndarray] | None = None,
        target: str = "host", input_shapes: dict[str, tuple[int, ...]] | None = None,
        out_dir: str | os.PathLike | None = None, seed: int = 0, timeout: float = 600.0,
        knobs: dict | None = None, freeze: dict[str, FreezeValue] | None = None,
        memory: dict[str, int] | None = None, records: str | os.PathLike | None = None,
        board: str | DeviceBoard | None = None, board_dirs: Sequence[str | os.PathLike] = (),
        tflite_arithmetic: str | None = None) -> dict[str, np.ndarray]:
    """Compile (unless given an Artifact) and run the model through its C entry point, natively or
    under the target's emulator. Returns the outputs by ONNX name, in graph order. Missing `inputs`
    are random with `seed`; a run longer than `timeout` seconds is stopped (RunError). Inputs named
    in `freeze` are constants of the build (see aot.build) and take no value in `inputs`; `memory`
    limits the build, `records` picks its schedules and `tflite_arithmetic` a TFLite model's arithmetic as
    aot.build's do.

    With `board`, a microcontroller board (a name looked up in `board_dirs`, or a DeviceBoard), the
    model is built for the board's target within its memory and runs on the board (aot/device/).
    """
    return _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs, freeze, memory,
                    records, board, board_dirs, tflite_arithmetic)[0]


@dataclass(frozen=True)
class CheckResult:
    artifact_dir: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]        # empty with reference="none"
    comparisons: list[checks.Comparison]    # empty with reference="none"
    reference_used: str = "onnxruntime"     # onnxruntime, onnx (onnx.reference) or none
    fallback_reason: str = ""               # why onnxruntime, asked for, could not run the model
    arbitration: Arbitration | None = None  # outputs differed: which side float64 found closer
    not_arbitrated: str = ""                # outputs differed but were not arbitrated: why

    @property
    def compared(self) -> bool:
        return self.reference_used != "none"

    @property
    def ok(self) -> bool:
        """No output past the tolerance, or each divergence arbitrated in aot's favour; True when
        nothing was compared (reference="none": see `compared`)."""
        if all(c.ok for c in self.comparisons):
            return True
        return self.arbitration is not None and self.arbitration.ok

    @property
    def mismatches(self) -> list[checks.Comparison]:
        return [c for c in self.comparisons if not c.ok]


def check(model: str | os.PathLike | onnx.ModelProto | Artifact, inputs: dict[str, np.ndarray] | None = None,
          target: str = "host", input_shapes: dict[str, tuple[int, ...]] | None = None,
          out_dir: str | os.PathLike | None = None, seed: int = 0, timeout: float = 600.0,
          knobs: dict | None = None, freeze: dict[str, FreezeValue] | None = None,
          memory: dict[str, int] | None = None, records: str | os.PathLike | None = None,
          reference: str = "onnxruntime", arbitrate: bool = True, board: str | DeviceBoard | None = None,
          board_dirs: Sequence[str | os.PathLike] = (), tflite_arithmetic: str | None = None) -> CheckResult:
    """Run the compiled model and the reference on the same inputs and compare every output; the
    reference runs the model with the `freeze` values as constants too.

    `reference`: "onnxruntime" (default; a model onnxruntime cannot load or run goes to onnx.reference,
    and `fallback_reason` says why), "onnx" (onnx.reference), or "none" (run only, compare nothing).
    Outputs past the tolerance are arbitrated in float64 (aot.arbitrate) unless `arbitrate` is False:
    the model is built again with its intermediate tensors as outputs, and the first diverging node
    is evaluated in float64; where aot is the closer side, the check passes (the arbitration runs here,
    under the target's emulator, also when the model ran on a `board`, as for aot.run)."""
    checks.check_reference(reference)
    outputs, artifact, feeds = _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs,
                                        freeze, memory, records, board, board_dirs, tflite_arithmetic)
    if reference == "none":
        return CheckResult(str(artifact.dir), feeds, outputs, {}, [], "none")
    proto, frozen = artifact.model.reference()
    ref = checks.run_reference(proto, {**feeds, **frozen}, artifact.model.label, reference)
    steps = quantization_steps(artifact.program)
    result = CheckResult(str(artifact.dir), feeds, outputs, ref.outputs, checks.compare(outputs, ref.outputs, steps),
                         ref.used, ref.fallback_reason)
    if result.ok or not arbitrate:
        return result
    if ref.used in ("litert", "tflite-micro"):
        return replace(result, not_arbitrated=f"a TFLite model is compared with {ref.used} as it is, bit for bit "
                       "where it is quantized; the float64 arbitration runs ONNX models")
    if isinstance(model, Artifact):
        return replace(result, not_arbitrated="given a built artifact, which cannot be rebuilt with its "
                       "intermediate tensors as outputs: pass the model instead")
    try:
        probed = bisect(model, inputs=feeds, target=artifact.target, input_shapes=input_shapes, timeout=timeout,
                        knobs=knobs, freeze=freeze, memory=memory, records=records, reference=ref.used)
        arbitration = arbitrate_bisect(probed)
    except AotError as err:     # e.g. the copies of the intermediate tensors do not fit --memory
        return replace(result, not_arbitrated=f"the node-by-node run failed: {err}")
    return replace(result, arbitration=arbitration)


def quantization_steps(program) -> dict[str, float]:
    """For outputs made by quantized arithmetic: the size of one step (1 for integer outputs). Other
    outputs (float, and integer or bool ones such as indices and masks) get no such allowance."""
    return checks.value_steps(program.graph, program.graph.outputs)


def device_board(board: str | DeviceBoard, board_dirs: Sequence[str | os.PathLike] = ()) -> DeviceBoard:
    """A microcontroller board by name or file; a Linux board is an OptionError (aot bench takes those)."""
    from aot.boards import load_board

    brd = load_board(board, board_dirs) if isinstance(board, str) else board
    if not isinstance(brd, DeviceBoard):
        raise OptionError(f"board {brd.name} is a Linux board reached over SSH: `aot bench --board` runs models "
                          "there; running and checking on a board is for microcontroller boards")
    return brd


def _execute(model, inputs, target, input_shapes, out_dir, seed, timeout, knobs=None, freeze=None, memory=None,
             records=None, board=None, board_dirs=(), tflite_arithmetic=None):
    brd = device_board(board, board_dirs) if board is not None else None
    if brd is not None:
        target, memory = brd.target, brd.build_memory(memory)
    with tempfile.TemporaryDirectory(prefix="aot-") as tmp:
        artifact = (model if isinstance(model, Artifact)
                    else _build_for_run(model, target, input_shapes, out_dir, knobs, freeze, tmp, memory, records,
                                        tflite_arithmetic))
        proto = artifact.model.proto
        feeds = (checks.random_inputs(proto, seed) if inputs is None
                 else checks.validate_inputs(proto, inputs, artifact.model.label))
        if brd is not None:
            from aot.device.run import run_on_board

            return run_on_board(artifact, brd, feeds, warmup=0, laps=1, timeout=timeout).outputs, artifact, feeds
        return local.run(artifact, feeds, timeout), artifact, feeds
