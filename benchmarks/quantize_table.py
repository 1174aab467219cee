"""What `aot quantize` costs on the zoo's float models, int8 against a16w8 (int16 activations, int8 weights).

    python benchmarks/quantize_table.py [MODEL ...] [--target cortex-m4 --target cortex-m55] [--no-count]
                                        [--samples N] [--held-out N] [--keep DIR]

Needs PyTorch to train the models (the CPU wheel: pip install torch==2.13.0).

The zoo's models (examples/zoo.py, examples/recurrent_models.py) are built with random weights, and a
quantizer's figures on random weights say little about trained ones. So each classifier is first trained
(benchmarks/graph_training.py, PyTorch) on data made here: every class has a smooth pattern (varying over a
few pixels or frames, as images and spectrograms do) and amplitudes along the input's last axis, and a sample
is its class's pattern plus white noise, times the amplitudes. The FC-AutoEncoder reconstructs standard-normal
inputs and keeps its random weights. Then, per scheme, `aot quantize` calibrates on N samples and compares on
other (held-out) samples with their labels, and aot builds the result for each target: workspace and flash
from the build, instructions executed by one run under qemu (checked against onnxruntime). Every figure is
printed as measured; nothing is left out for failing (a failure is a row that says so).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import graph_training  # noqa: E402
import recurrent_models  # noqa: E402
import zoo  # noqa: E402

import aot  # noqa: E402
from aot import reference  # noqa: E402
from aot.api import quantization_steps  # noqa: E402
from aot.errors import AotError  # noqa: E402
from aot.quantize import quantize  # noqa: E402
from aot.run.count import count_instructions  # noqa: E402

MODELS = {"ds_cnn": zoo.ds_cnn, "mobilenet_v1": zoo.mobilenet_v1, "resnet8": zoo.resnet8,
          "fc_autoencoder": zoo.fc_autoencoder, "lstm_kws": recurrent_models.lstm_kws,
          "mobilenet_v2": zoo.mobilenet_v2}
DEFAULT = ("ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder", "lstm_kws")
TARGETS = ("cortex-m4", "cortex-m55")
SCHEMES = ("int8", "a16w8")
SMOOTH = 4          # a pattern varies over this many pixels or frames, as images and spectrograms do
NOISE = 1.0         # noise around a class prototype, in units of the prototype's standard deviation
TRAIN = 2048        # training samples


def input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)


def prototypes(shape: tuple[int, ...], classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each class's pattern and its amplitude along the input's last axis (an MFCC coefficient, an image
    column): pooled features tell classes apart by where their energy lies, not only by its pattern."""
    amplitude = rng.uniform(0.3, 2.0, (classes, *([1] * (len(shape) - 2)), shape[-1])).astype(np.float32)
    pattern = rng.standard_normal((classes, *shape[1:-2], *(max(3, n // SMOOTH) for n in shape[-2:])))
    for axis in (-2, -1):
        pattern = upsample(pattern, axis, shape[axis])
    return (pattern / pattern.std()).astype(np.float32), amplitude


def upsample(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`array` linearly interpolated to `size` points along `axis`."""
    points = np.linspace(0, array.shape[axis] - 1, size)
    low = np.floor(points).astype(int).clip(0, array.shape[axis] - 2)
    frac = (points - low).reshape([-1] + [1] * (-axis - 1))
    return np.take(array, low, axis) * (1 - frac) + np.take(array, low + 1, axis) * frac


def class_data(shape: tuple[int, ...], classes: int, count: int, rng: np.random.Generator,
               protos: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`count` samples (batch axis first) of random classes: the class's pattern plus noise, times its
    amplitudes."""
    labels = rng.integers(0, classes, count)
    pattern, amplitude = protos
    noise = NOISE * rng.standard_normal((count, *shape[1:])).astype(np.float32)
    return (amplitude[labels] * (pattern[labels] + noise)).astype(np.float32), labels


def prepare(name: str, count: int, held_out: int, tmp: Path) -> tuple[Path, Path, Path, Path | None]:
    """The float model (a classifier of made data, or the autoencoder as it is), calibration and held-out
    data (.npz), and the held-out labels (.npy; None for the autoencoder)."""
    model = MODELS[name]()
    shape = input_shape(model)
    rng = np.random.default_rng(7)
    key = model.graph.input[0].name
    if name == "fc_autoencoder":
        calib, held = (rng.standard_normal((n, *shape[1:])).astype(np.float32) for n in (count, held_out))
        labels = None
    else:
        classes = model.graph.output[0].type.tensor_type.shape.dim[-1].dim_value
        protos = prototypes(shape, classes, rng)
        train, train_labels = class_data(shape, classes, TRAIN, rng, protos)
        model = graph_training.train(model, train, train_labels)
        calib, _ = class_data(shape, classes, count, rng, protos)
        held, labels = class_data(shape, classes, held_out, rng, protos)
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    np.savez(tmp / "calib.npz", **{key: calib})
    np.savez(tmp / "held_out.npz", **{key: held})
    if labels is not None:
        np.save(tmp / "labels.npy", labels)
    return path, tmp / "calib.npz", tmp / "held_out.npz", (tmp / "labels.npy" if labels is not None else None)


def measure_build(path: Path, target: str, count: bool, tmp: Path) -> dict:
    """Workspace and flash of aot's build for `target`; with `count`, instructions of one run under qemu,
    its outputs checked against onnxruntime."""
    artifact = aot.build(path, target=target, out_dir=tmp / f"build_{target}")
    row = {"workspace": artifact.metadata["workspace"]["size"], "flash": artifact.metadata["memory"]["flash"]}
    if count:
        model = onnx.load(path)
        feeds = reference.random_inputs(model, 0)
        outputs, insns = count_instructions(artifact, feeds)
        comparisons = reference.compare(outputs, reference.reference_outputs(model, feeds),
                                        quantization_steps(artifact.program))
        ok = all(c.ok for c in comparisons)
        # past a step from onnxruntime: right if float64 node-by-node arbitration finds aot right where the
        # two first differ (a step's difference inside a deep model grows over the layers after it)
        row.update(insns=insns, ok=ok or aot.check(path, inputs=feeds, target=target).ok, arbitrated=not ok)
    return row


def measure(name: str, targets: tuple[str, ...], count_insns: bool, samples: int, held_out: int,
            keep: Path | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as work:
        tmp = keep / name if keep else Path(work)
        tmp.mkdir(parents=True, exist_ok=True)
        path, calib, held, labels = prepare(name, samples, held_out, tmp)
        for scheme in SCHEMES:
            row = {"model": name, "scheme": scheme}
            try:
                out = tmp / f"{name}_{scheme}.onnx"
                report = quantize(path, out, calib, scheme=scheme, evaluation=held, labels=labels)
                y = report.outputs[0]
                row.update(sqnr=y.sqnr_db, agree=y.top1_agreement, float_acc=y.float_accuracy,
                           quant_acc=y.quantized_accuracy)
                for target in targets:
                    row[target] = measure_build(out, target, count_insns, tmp / scheme)
            except AotError as err:
                row["error"] = str(err).splitlines()[0]
            rows.append(row)
            print(f"  {name} {scheme}: done", file=sys.stderr)
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def print_table(rows: list[dict], targets: tuple[str, ...], samples: int, held_out: int) -> None:
    header = ["model", "scheme", "SQNR dB", "gain dB", "top-1 agree", "float acc", "quant acc"]
    for target in targets:
        header += [f"{target} workspace B", "flash B", "M insns", "check"]
    table = [header]
    sqnr = {(r["model"], r["scheme"]): r.get("sqnr") for r in rows}
    for r in rows:
        if "error" in r:
            table.append([r["model"], r["scheme"], f"FAILED: {r['error']}"])
            continue
        int8 = sqnr.get((r["model"], "int8"))
        gain = f"{r['sqnr'] - int8:+.1f}" if r["scheme"] != "int8" and int8 is not None else "-"
        line = [r["model"], r["scheme"], f"{r['sqnr']:.1f}", gain, _pct(r["agree"]), _pct(r["float_acc"]),
                _pct(r["quant_acc"])]
        for target in targets:
            t = r[target]
            line += [f"{t['workspace']:,}", f"{t['flash']:,}",
                     f"{t['insns'] / 1e6:.2f}" if "insns" in t else "-",
                     ("MISMATCH" if not t["ok"] else "ok*" if t["arbitrated"] else "ok") if "ok" in t else "-"]
        table.append(line)
    widths = [max(len(row[i]) for row in table if i < len(row)) for i in range(len(header))]
    print(f"aot quantize (onnxruntime's quantizer): {samples} calibration and {held_out} held-out samples per "
          "model, made by this script; SQNR and agreement of the quantized model's output against the float "
          "model's on the held-out samples (onnxruntime runs both); instructions executed under qemu, not cycles; "
          "check: outputs within a step of onnxruntime (ok), or past it and found right by float64 arbitration "
          "(ok*)")
    for row in table:
        if len(row) == 3 and row[2].startswith("FAILED"):
            print("  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2]]))
            continue
        print("  ".join(cell.rjust(w) if i > 1 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(DEFAULT), help=f"of {', '.join(MODELS)} "
                        f"(default {', '.join(DEFAULT)})")
    parser.add_argument("--target", action="append", help=f"default {', '.join(TARGETS)}")
    parser.add_argument("--no-count", action="store_true", help="skip the runs under qemu")
    parser.add_argument("--samples", type=int, default=64, help="calibration samples (default 64)")
    parser.add_argument("--held-out", type=int, default=256, help="samples compared on (default 256)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the models, data and builds in DIR")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(MODELS)})")
    logging.getLogger().setLevel(logging.ERROR)     # the quantizer's notes on opsets and BatchNorm scales
    targets = tuple(args.target or TARGETS)
    rows = [row for name in args.models for row in measure(name, targets, not args.no_count, args.samples,
                                                             args.held_out, args.keep)]
    print_table(rows, targets, args.samples, args.held_out)
    return 0 if all("error" not in r and all(r[t].get("ok", True) for t in targets) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
