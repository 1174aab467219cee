"""`aot validate`: a model run over a data set where it will run (the host, a target under its emulator, or a
microcontroller board), every output measured against the reference's on the same samples, as a firmware
engineer signs a deployment off (ST's `stedgeai validate` reports the same figures).

Per output, over all samples, in float64 (a quantized output in its integer codes):
- l2r: ||aot - ref||₂ / ||ref||₂, the relative L2 error;
- cosine: aot·ref / (||aot||₂ ||ref||₂);
- MAE, RMSE and the max abs error;
- top-1: the share of samples whose largest element is at the same place, for outputs that hold a vector
  of scores per sample (one axis longer than 1);
- within tolerance: the samples within the tolerance `aot run` holds each run to (1e-4 of the output's
  scale, or one quantization step), counted before any float64 arbitration.

The model is built once and flashed once: on a microcontroller board the samples' inputs go over the console one
sample after another (runtime_c/device/harness.c.j2's `load`), as MLPerf Tiny's runner loads its inputs; on a
Linux board the harness is uploaded once over SSH and each sample's inputs after it (aot/remote/run.py).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aot import reference as checks
from aot.build import build
from aot.calibration import load_calibration
from aot.errors import OptionError


@dataclass(frozen=True)
class OutputMetrics:
    output: str
    samples: int
    l2r: float
    cosine: float
    mae: float
    rmse: float
    max_abs: float
    top1: float | None          # None: the output is not a vector of scores
    within_tolerance: int       # samples within `aot run`'s tolerance


@dataclass(frozen=True)
class Validation:
    model: str
    where: str                  # the target, or the board and its target
    reference: str              # onnxruntime or onnx
    samples: int
    metrics: list[OutputMetrics]

    @property
    def ok(self) -> bool:
        return all(m.within_tolerance == m.samples for m in self.metrics)

    def to_json(self) -> dict:
        def clean(value):
            return value if not isinstance(value, float) or math.isfinite(value) else str(value)
        return {"model": self.model, "where": self.where, "reference": self.reference, "samples": self.samples,
                "ok": self.ok, "outputs": [{k: clean(v) for k, v in asdict(m).items()} for m in self.metrics]}


def read_samples(path: str | os.PathLike, proto, label: str, limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """The samples in `path` (an .npz with the samples on the first axis, a directory of .npz/.npy files, or
    ONNX test_data_set_* folders), each a dict of the model's inputs in their dtypes."""
    specs = checks.input_specs(proto)
    feeds = {name: shape for name, shape, _ in specs}
    samples = load_calibration(Path(path), feeds, "--inputs", dtypes={name: np.dtype(d) for name, _, d in specs})
    if not samples:
        raise OptionError(f"--inputs {path}: no samples in it")
    return [checks.validate_inputs(proto, s, label) for s in samples[:limit]]


def validate(model, samples: Sequence[dict[str, np.ndarray]], target="host", board=None, board_dirs=(),
             input_shapes=None, knobs=None, memory=None, records=None, reference: str = "onnxruntime",
             timeout: float = 600.0, on_sample: Callable[[int], None] | None = None,
             out_dir=None, tflite_arithmetic: str | None = None) -> Validation:
    """Build `model` once, run it on every sample (on `board` if given, else `target`), and measure each
    output against `reference`'s (onnxruntime, or onnx: onnx.reference; a TFLite model's: LiteRT's or TFLite
    Micro's, as for aot.check). `tflite_arithmetic` is aot.build's."""
    from aot.boards import load_board
    from aot.device.board import DeviceBoard
    from aot.run import local

    checks.check_reference(reference)
    if reference == "none":
        raise OptionError("aot validate compares with a reference: --reference onnxruntime or onnx")
    brd = (load_board(board, board_dirs) if isinstance(board, str) else board) if board is not None else None
    if brd is not None:
        target = brd.target
        memory = brd.build_memory(memory) if isinstance(brd, DeviceBoard) else memory
    with tempfile.TemporaryDirectory(prefix="aot-validate-") as tmp:
        artifact = build(model, target=target, out_dir=out_dir or os.path.join(tmp, "build"),
                         input_shapes=input_shapes, knobs=knobs, memory=memory, records=records,
                         tflite_arithmetic=tflite_arithmetic)
        if isinstance(brd, DeviceBoard):
            from aot.device.run import run_samples_on_board
            outputs = run_samples_on_board(artifact, brd, samples, timeout, on_sample=on_sample)
        elif brd is not None:
            from aot.remote.run import run_samples_on_linux_board
            outputs = run_samples_on_linux_board(artifact, brd, samples, timeout, on_sample=on_sample)
        else:
            outputs = local.run_samples(artifact, samples, timeout, on_sample=on_sample)
    proto, frozen = artifact.model.reference()
    refs, used = [], reference
    for sample in samples:
        run = checks.run_reference(proto, {**sample, **frozen}, artifact.model.label, reference)
        refs.append(run.outputs)
        used = run.used
    steps = checks.value_steps(artifact.program.graph, artifact.program.graph.outputs)
    names = [o for o in refs[0]]
    metrics = [measure(name, [o[name] for o in outputs], [r[name] for r in refs], steps.get(name, 0.0))
               for name in names]
    where = f"board {brd.name} ({artifact.target.name})" if brd else artifact.target.name
    return Validation(artifact.model.label, where, used, len(samples), metrics)


def measure(name: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray], step: float = 0.0) -> OutputMetrics:
    """The figures of the module's docstring for one output, from aot's and the reference's values per sample."""
    a = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in got])
    r = np.concatenate([np.asarray(w, np.float64).reshape(-1) for w in want])
    diff = a - r
    with np.errstate(all="ignore"):
        norm = float(np.linalg.norm(r))
        l2r = float(np.linalg.norm(diff)) / norm if norm else (0.0 if not diff.any() else math.inf)
        denominator = float(np.linalg.norm(a)) * norm
        cosine = float(np.dot(a, r)) / denominator if denominator else (1.0 if not diff.any() else 0.0)
        cosine = min(1.0, max(-1.0, cosine))        # no rounding past what a cosine can be
    top1 = None
    if all(_is_scores(np.asarray(w)) for w in want):
        top1 = float(np.mean([np.argmax(np.asarray(g).reshape(-1)) == np.argmax(np.asarray(w).reshape(-1))
                              for g, w in zip(got, want)]))
    within = sum(checks.compare({name: np.asarray(g)}, {name: np.asarray(w)}, {name: step} if step else None)[0].ok
                 for g, w in zip(got, want))
    return OutputMetrics(name, len(got), l2r, cosine, float(np.mean(np.abs(diff))) if diff.size else 0.0,
                         float(np.sqrt(np.mean(diff * diff))) if diff.size else 0.0,
                         float(np.max(np.abs(diff))) if diff.size else 0.0, top1, int(within))


def _is_scores(value: np.ndarray) -> bool:
    """A vector of scores per sample: exactly one axis longer than 1."""
    return sum(d > 1 for d in value.shape) == 1


def table(result: Validation) -> list[tuple[str, ...]]:
    """The rows of `aot validate`'s table."""
    rows = [("output", "samples", "l2r", "cosine", "MAE", "RMSE", "max abs", "top-1", "within tolerance")]
    for m in result.metrics:
        rows.append((m.output, str(m.samples), f"{m.l2r:.3g}", f"{m.cosine:.9f}", f"{m.mae:.3g}", f"{m.rmse:.3g}",
                     f"{m.max_abs:.3g}", "-" if m.top1 is None else f"{100 * m.top1:.1f} %",
                     f"{m.within_tolerance}/{m.samples}"))
    return rows
