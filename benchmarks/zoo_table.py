"""Build zoo models for one or more targets, run each through its C entry point (natively or under the
target's emulator), compare with onnxruntime and print one table: max error, workspace vs its lower
bound, flash (code + weights) and RAM (workspace + inputs/outputs), build time.

    python benchmarks/zoo_table.py [--target host] [--target cortex-m4 ...] [MODEL ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402

import aot  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(zoo.ZOO), help="zoo model names (default: all)")
    parser.add_argument("--target", action="append", help="target name (repeatable; default: host)")
    args = parser.parse_args()
    header = ("target", "model", "max abs err", "err/scale", "workspace B", "lower bound B", "flash B", "code B",
              "RAM B", "build s", "check")
    rows = [header]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.target or ["host"]:
            for name in args.models:
                start = time.perf_counter()
                try:
                    artifact = aot.build(zoo.ZOO[name](), target=target, out_dir=Path(tmp) / target / name, name=name)
                except aot.AotError as err:      # e.g. does not fit the target's memory
                    rows.append((target, name, "-", "-", "-", "-", "-", "-", "-", "-", str(err)[:60]))
                    continue
                seconds = time.perf_counter() - start
                result = aot.check(artifact)
                worst = max(result.comparisons, key=lambda c: c.max_abs / max(c.scale, 1e-30))
                failed |= not result.ok
                plan, mem = artifact.plan, artifact.metadata["memory"]
                rows.append((artifact.target.name, name, f"{worst.max_abs:.2e}",
                             f"{worst.max_abs / max(worst.scale, 1e-30):.1e}", f"{plan['workspace_size']:,}",
                             f"{plan['lower_bound']:,}", f"{mem['flash']:,}", f"{mem['code']:,}", f"{mem['ram']:,}",
                             f"{seconds:.2f}", "ok" if result.ok else "MISMATCH"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    print("tolerance: err/scale <= 1e-4 (scale = max |onnxruntime output|)")
    for r in rows:
        print("  ".join(c.ljust(w) if i < 2 or i == len(r) - 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
