"""The MLPerf Tiny reference models, the .tflite files themselves, compiled for Cortex-M cores and checked
against LiteRT's reference kernels, with their estimated cycles, flash and RAM beside the published
results of the same models on a NUCLEO-L4R5ZI (Cortex-M4 at 120 MHz).

    python benchmarks/mlperf_tiny.py --fetch DIR                 # once: the reference models into DIR
    python benchmarks/mlperf_tiny.py DIR [--target cortex-m4 ...] [--inputs 3] [--float]

--fetch copies them from a checkout of github.com/mlcommons/tiny given with --checkout, or else downloads
them from that repository (benchmark/training/*/trained_models/). The tests never need them.

Each model runs under qemu with the instruction-counting plugin (aot/run/cycles.py: LLVM's pipeline model of
the core priced over the executed instructions; zero-wait-state memory, so the published figures, which
include the L4R5's flash wait states behind ST's ART accelerator, are not strictly comparable), on `--inputs`
random inputs over the whole int8 range; "max LSB" is the largest difference from LiteRT's reference kernels
over them (0 is bit-exact); with --tflite-arithmetic tflite-micro, the int8 files are built to TFLite Micro's
arithmetic and checked against its interpreter. CMSIS-NN's estimated cycles are those of
benchmarks/instruction_counts.py for the same layer shapes (examples/zoo.py's ds_cnn, mobilenet_v1, resnet8),
priced the same way.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import instruction_counts  # noqa: E402

import aot  # noqa: E402
from aot import (
    reference,  # noqa: E402
    text_table,  # noqa: E402
)
from aot.frontend.model import load  # noqa: E402
from aot.run import cycles  # noqa: E402

REPOSITORY = "https://raw.githubusercontent.com/mlcommons/tiny/master/"
TRAINED = "benchmark/training/{}/trained_models/{}"
# benchmark -> (task directory, int8 file, float file, zoo model of the same layer shapes)
MODELS = {
    "KWS": ("keyword_spotting", "kws_ref_model.tflite", "kws_ref_model_float32.tflite", "ds_cnn"),
    "VWW": ("visual_wake_words", "vww_96_int8.tflite", "vww_96_float.tflite", "mobilenet_v1"),
    "IC": ("image_classification", "pretrainedResnet_quant.tflite", "pretrainedResnet.tflite", "resnet8"),
    "AD": ("anomaly_detection", "ad01_int8.tflite", "ad01_fp32.tflite", "fc_autoencoder"),
}
# Published MLPerf Tiny v1.0 results on the NUCLEO-L4R5ZI, millions of cycles per inference (latency x 120 MHz)
PUBLISHED = {
    "Plumerai": {"KWS": 8.6, "VWW": 25.0, "IC": 20.8, "AD": 0.67},
    "X-CUBE-AI": {"KWS": 8.7, "VWW": 26.5, "IC": 26.6, "AD": 0.91},
    "microTVM + CMSIS-NN": {"KWS": 12.0, "VWW": 36.1, "IC": 46.7, "AD": 1.03},
    "TFLite Micro reference": {"KWS": 21.8, "VWW": 72.1, "IC": 84.5, "AD": 1.21},
}


def fetch(directory: Path, checkout: Path | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for task, *files, _ in MODELS.values():
        for name in files:
            dest = directory / name
            if dest.exists():
                continue
            relative = TRAINED.format(task, name)
            if checkout is not None:
                shutil.copyfile(checkout / relative, dest)
            else:
                with urllib.request.urlopen(REPOSITORY + relative, timeout=60) as response:
                    dest.write_bytes(response.read())
            print(f"{dest}: {dest.stat().st_size:,} bytes")


def _inputs(path: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(-128, 128, shape).astype(dtype) if dtype == "int8"
            else rng.standard_normal(shape).astype(dtype) for name, shape, dtype in load(path).file.inputs}


def measure(path: Path, target: str, inputs: int, tmp: Path, arithmetic: str | None = None) -> dict:
    """Build once; run `inputs` inputs, the first priced in cycles: the largest difference from the reference
    (LiteRT, or TFLite Micro with its `arithmetic`), instructions, estimated cycles, flash and RAM."""
    artifact = aot.build(str(path), target=target, out_dir=tmp / path.stem, tflite_arithmetic=arithmetic)
    worst, estimate = 0.0, None
    for seed in range(inputs):
        feeds = _inputs(path, seed)
        if seed == 0 and cycles.available(artifact.target):
            outputs, estimate = cycles.estimate_cycles(artifact, feeds)
        else:
            outputs = aot.run(artifact, feeds)
        ref = reference.run_reference(artifact.model.proto, feeds, path.name).outputs
        for name, expected in ref.items():
            worst = max(worst, float(np.abs(outputs[name].astype(np.float64) - expected.astype(np.float64)).max()))
    memory = artifact.metadata["memory"]
    return {"worst": worst, "estimate": estimate, "flash": memory["flash"], "ram": memory["ram"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where the reference .tflite files are (or go, with --fetch)")
    parser.add_argument("--fetch", action="store_true", help="copy or download the reference models first")
    parser.add_argument("--checkout", type=Path, help="with --fetch: a checkout of mlcommons/tiny to copy from")
    parser.add_argument("--target", action="append", help="default cortex-m4 and cortex-m55")
    parser.add_argument("--inputs", type=int, default=3, help="random inputs checked per model (default 3)")
    parser.add_argument("--float", action="store_true", help="also the float32 files (KWS's is hybrid: int8 "
                        "weights, float activations quantized at run time)")
    parser.add_argument("--tflite-arithmetic", choices=["litert", "tflite-micro"], help="build to this runtime's "
                        "arithmetic and check against it (default LiteRT's; the float files stay with LiteRT)")
    args = parser.parse_args()
    if args.fetch:
        fetch(args.directory, args.checkout)
    targets = args.target or ["cortex-m4", "cortex-m55"]
    header = ("target", "model", "file", "status", "max LSB", "M insns", "est. M cycles", "CMSIS-NN est.",
              "vs CMSIS-NN", *PUBLISHED, "flash B", "RAM B")
    rows, ok = [header], True
    with tempfile.TemporaryDirectory() as tmp:
        for target in targets:
            for bench, (_, int8_file, float_file, zoo_name) in MODELS.items():
                for name in [int8_file] + ([float_file] if args.float else []):
                    path = args.directory / name
                    published = [f"{PUBLISHED[peer][bench]:.2f}" if name == int8_file else "-" for peer in PUBLISHED]
                    try:
                        run = measure(path, target, args.inputs, Path(tmp),
                                      args.tflite_arithmetic if name == int8_file else None)
                    except aot.AotError as err:
                        rows.append((target, bench, name, f"refused: {str(err)[:60]}", *["-"] * 5, *published,
                                     "-", "-"))
                        continue
                    exact = run["worst"] == 0 if name == int8_file else run["worst"] < 1e-3
                    ok &= exact
                    est = run["estimate"]
                    peer = instruction_counts.REFERENCE.get((target, f"{zoo_name} int8"), (None, None))[1]
                    mcycles = est.cycles / 1e6 if est else None
                    rows.append((target, bench, name, "ok" if exact else "MISMATCH", f"{run['worst']:g}",
                                 f"{est.instructions / 1e6:.2f}" if est else "-",
                                 f"{mcycles:.2f}" if est else "-",
                                 f"{peer / 1e6:.2f}" if peer and name == int8_file else "-",
                                 f"{mcycles * 1e6 / peer:.3f}" if peer and est and name == int8_file else "-",
                                 *published, f"{run['flash']:,}", f"{run['ram']:,}"))
    versus = "TFLite Micro's" if args.tflite_arithmetic == "tflite-micro" else "LiteRT's"
    print(f"MLPerf Tiny reference models vs {versus} reference kernels, under qemu; est. cycles: {cycles.ESTIMATE}; "
          "published: millions of cycles on a NUCLEO-L4R5ZI (Cortex-M4, measured on the board)")
    text_table.show(rows, right=range(4, len(rows[0])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
