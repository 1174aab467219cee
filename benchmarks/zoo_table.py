"""Build zoo models for one or more targets, run each through its C entry point (natively or under the
target's emulator), compare with onnxruntime and print one table: max error, workspace vs its lower
bound, flash (code + weights) and RAM (workspace + inputs/outputs), build time.

    python benchmarks/zoo_table.py [--target host] [--target cortex-m4 ...] [--int8] [MODEL ...]

With --int8 each model is first quantized by onnxruntime's quantize_static (QDQ unless --format
QOperator, per-channel weights, int8 activations; examples/quantize.py) and compared with onnxruntime
running that int8 model; the table then counts elements one quantization step off.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402
from quantize import quantize_model  # noqa: E402

import aot  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(zoo.ZOO), help="zoo model names (default: all)")
    parser.add_argument("--target", action="append", help="target name (repeatable; default: host)")
    parser.add_argument("--int8", action="store_true", help="quantize the models to int8 first")
    parser.add_argument("--format", choices=["QDQ", "QOperator"], default="QDQ", help="int8 model format")
    args = parser.parse_args()
    header = ("target", "model", "max abs err", "err/scale" if not args.int8 else "steps off", "workspace B",
              "lower bound B", "flash B", "code B", "RAM B", "build s", "check")
    models = {name: zoo.ZOO[name]() for name in args.models}
    if args.int8:
        models = {name: quantize_model(model, args.format) for name, model in models.items()}
    rows = [header]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.target or ["host"]:
            for name in args.models:
                start = time.perf_counter()
                try:
                    artifact = aot.build(models[name], target=target, out_dir=Path(tmp) / target / name, name=name)
                except aot.AotError as err:      # e.g. does not fit the target's memory
                    rows.append((target, name, "-", "-", "-", "-", "-", "-", "-", "-", str(err)[:60]))
                    continue
                seconds = time.perf_counter() - start
                result = aot.check(artifact)
                worst = max(result.comparisons, key=lambda c: c.max_abs / max(c.scale, 1e-30))
                failed |= not result.ok
                plan, mem = artifact.plan, artifact.metadata["memory"]
                error = (f"{worst.off_by_one} of {worst.size}" if args.int8
                         else f"{worst.max_abs / max(worst.scale, 1e-30):.1e}")
                rows.append((artifact.target.name, name, f"{worst.max_abs:.2e}", error, f"{plan['workspace_size']:,}",
                             f"{plan['lower_bound']:,}", f"{mem['flash']:,}", f"{mem['code']:,}", f"{mem['ram']:,}",
                             f"{seconds:.2f}", "ok" if result.ok else "MISMATCH"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    print("tolerance: one quantization step" if args.int8 else
          "tolerance: err/scale <= 1e-4 (scale = max |onnxruntime output|)")
    for r in rows:
        print("  ".join(c.ljust(w) if i < 2 or i == len(r) - 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
