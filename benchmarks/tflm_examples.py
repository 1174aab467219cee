"""TFLite Micro's own example and test models, the .tflite files of its repository, compiled for each target
and checked against the reference, LiteRT's reference kernels (TFLite Micro's own, from the `tflite-micro`
package, for models with an integer LSTM, which LiteRT computes otherwise): which compile, how far from the
reference, or why refused.

    python benchmarks/tflm_examples.py DIR --fetch --checkout PATH    # once: the files from a tflite-micro checkout
    python benchmarks/tflm_examples.py DIR [--target host --target cortex-m4 ...] [--inputs 3]

Inputs are random over the whole integer range (int8, int16) or standard normal (float32); "max diff" is the
largest difference from the reference over them, in codes for integer outputs (0 is bit-exact), in values for
float ones (checked against the float tolerance, 1e-4 of the output's scale, by aot.check). A model with
state (LSTM, SVDF) runs from its reset state, as the reference's first invoke does. Cortex-M targets run under qemu.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

import aot
from aot import text_table
from aot.frontend.model import load

# TFLite Micro's models: its examples, its tests' models, the Xtensa examples, and one TFLM integration test
# per operator family (the seanet ones are layers of a speech enhancement network)
FILES = (
    "tensorflow/lite/micro/examples/hello_world/models/hello_world_float.tflite",
    "tensorflow/lite/micro/examples/hello_world/models/hello_world_int8.tflite",
    "tensorflow/lite/micro/examples/micro_speech/models/micro_speech_quantized.tflite",
    "tensorflow/lite/micro/examples/micro_speech/models/audio_preprocessor_int8.tflite",
    "tensorflow/lite/micro/models/person_detect.tflite",
    "tensorflow/lite/micro/models/person_detect_vela.tflite",
    "tensorflow/lite/micro/models/keyword_scrambled.tflite",
    "tensorflow/lite/micro/models/keyword_scrambled_8bit.tflite",
    "tensorflow/lite/micro/examples/mnist_lstm/trained_lstm.tflite",
    "tensorflow/lite/micro/examples/mnist_lstm/trained_lstm_int8.tflite",
    "tensorflow/lite/micro/examples/dtln/dtln_noise_suppression.tflite",
    "tensorflow/lite/micro/examples/memory_footprint/models/simple_add_model.tflite",
    "third_party/xtensa/examples/micro_speech_lstm/micro_speech_lstm.tflite",
    "third_party/xtensa/examples/pytorch_to_tflite/mobilenet_v2_quantized_1x3x224x224.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/conv/conv0.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/add/add0.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/pad/pad0.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/strided_slice/strided_slice0.tflite",
)


def fetch(directory: Path, checkout: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative in FILES:
        source = checkout / relative
        if not source.is_file():
            continue
        dest = directory / source.name
        if not dest.exists():
            shutil.copyfile(source, dest)
            print(f"{dest}: {dest.stat().st_size:,} bytes")


def _inputs(path: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
            if np.dtype(dtype).kind == "i" else rng.standard_normal(shape).astype(dtype)
            for name, shape, dtype in load(path).file.inputs}


def measure(path: Path, target: str, inputs: int, tmp: Path) -> tuple[str, str, str, str, str]:
    """(status, types, reference, max diff, flash/RAM) of one file on one target."""
    try:
        artifact = aot.build(str(path), target=target, out_dir=tmp / f"{path.stem}-{target}")
    except aot.AotError as err:
        return f"refused: {str(err).split(': ', 1)[-1][:90]}", "-", "-", "-", "-"
    worst, ok, used = 0.0, True, "-"
    for seed in range(inputs):
        result = aot.check(artifact, inputs=_inputs(path, seed))
        ok &= result.ok
        used = result.reference_used
        for name, expected in result.reference.items():
            got = result.outputs[name].astype(np.float64)
            worst = max(worst, float(np.abs(got - expected.astype(np.float64)).max()))
    kinds = sorted({t.dtype for t in artifact.program.graph.values.values() if t.dtype != "int32"})
    memory = artifact.metadata["memory"]
    return ("ok" if ok else "MISMATCH", "/".join(kinds), used, f"{worst:g}",
            f"{memory['flash']:,} / {memory['ram']:,}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where the .tflite files are (or go, with --fetch)")
    parser.add_argument("--fetch", action="store_true", help="copy the models from --checkout first")
    parser.add_argument("--checkout", type=Path, help="with --fetch: a checkout of tensorflow/tflite-micro")
    parser.add_argument("--target", action="append", help="default host, cortex-m4 and cortex-m55")
    parser.add_argument("--inputs", type=int, default=3, help="random inputs checked per model (default 3)")
    args = parser.parse_args()
    if args.fetch:
        if args.checkout is None:
            parser.error("--fetch needs --checkout PATH (a checkout of github.com/tensorflow/tflite-micro)")
        fetch(args.directory, args.checkout)
    files = sorted(args.directory.glob("*.tflite"))
    if not files:
        parser.error(f"{args.directory}: no .tflite files (fetch them with --fetch --checkout PATH)")
    rows, ok = [("target", "file", "status", "types", "reference", "max diff", "flash / RAM B")], True
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.target or ["host", "cortex-m4", "cortex-m55"]:
            for path in files:
                status, kinds, used, worst, memory = measure(path, target, args.inputs, Path(tmp))
                ok &= status != "MISMATCH"
                rows.append((target, path.name, status, kinds, used, worst, memory))
    print("TFLite Micro's models vs the reference kernels (Cortex-M under qemu); max diff in codes for integer "
          "outputs, in values for float ones")
    text_table.show(rows, right=range(5, len(rows[0])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
