"""Build every zoo model for a target, run it through the C entry point, compare with onnxruntime and
print one table: max error, workspace vs its lower bound, weights and code bytes, build time.

    python benchmarks/zoo_table.py [--target host] [MODEL ...]
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
from aot.report import object_sections  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(zoo.ZOO), help="zoo model names (default: all)")
    parser.add_argument("--target", default="host")
    args = parser.parse_args()
    header = ("model", "max abs err", "err/scale", "workspace B", "lower bound B", "ws/bound", "weights B",
              "code B", "build s")
    rows = [header]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = zoo.ZOO[name]()
            start = time.perf_counter()
            artifact = aot.build(model, target=args.target, out_dir=Path(tmp) / name, name=name)
            seconds = time.perf_counter() - start
            result = aot.check(artifact.model.proto, target=args.target)
            worst = max(result.comparisons, key=lambda c: c.max_abs / max(c.scale, 1e-30))
            failed |= not result.ok
            code, weights = object_sections(artifact.object.read_bytes(), artifact.target.weights_section)
            plan = artifact.plan
            rows.append((name, f"{worst.max_abs:.2e}", f"{worst.max_abs / max(worst.scale, 1e-30):.1e}",
                         f"{plan['workspace_size']:,}", f"{plan['lower_bound']:,}",
                         f"{plan['workspace_size'] / max(plan['lower_bound'], 1):.3f}", f"{weights:,}",
                         f"{code:,}", f"{seconds:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    print(f"target {artifact.target.name}; tolerance: err/scale <= 1e-4")
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
