"""What the hill climb of `aot tune` buys over random search, at equal trials.

    python benchmarks/tune_search.py [MODEL] [--target cortex-m4] [--precision int8] [--trials 4 8 16]
                                     [--seeds 4]

Tunes the zoo model's workloads under the emulator (instruction counts: exact, so the comparison has
no timing noise) with each search and trial limit, over several seeds (the order of the untried space),
and prints the tuned kernels' instructions against the default schedules' (summed over the model's
nodes): the mean over seeds and the worst seed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402
from instruction_counts import quantized  # noqa: E402

from aot.tune import tune  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="ds_cnn", choices=sorted(zoo.ZOO))
    parser.add_argument("--target", default="cortex-m4")
    parser.add_argument("--precision", default="int8", choices=["fp32", "int8"])
    parser.add_argument("--trials", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    model = quantized(args.model) if args.precision == "int8" else zoo.ZOO[args.model]()
    rows = [("trials per workload", "search", "tuned/default (mean)", "worst seed")]
    with tempfile.TemporaryDirectory() as tmp:
        for trials in args.trials:
            for search in ("climb", "random"):
                ratios = []
                for seed in range(args.seeds):
                    log = Path(tmp) / f"{search}_{trials}_{seed}.json"
                    results = tune(model, args.target, records=log, budget_s=3600, trials=trials, seed=seed,
                                   search=search)
                    done = [r for r in results if r.default_cost is not None]
                    default = sum(r.default_cost * len(r.nodes) for r in done)
                    ratios.append(sum(r.best_cost * len(r.nodes) for r in done) / default)
                rows.append((str(trials), search, f"{statistics.fmean(ratios):.3f}", f"{max(ratios):.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"{args.model} {args.precision} on {args.target}: tuned kernels' instructions / default schedules'")
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
