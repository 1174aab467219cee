"""Workspace per zoo model: the plain plan (every tensor in bytes of its own), the plan with sharing
(results in place of, or overlapping, the inputs they replace where the kernels allow it) in the graph's
order and in the build's (the order searched for fewer live bytes, where that plans smaller), the lower
bound of the plain plan, and the targets of the memory work. Both builds are checked against
onnxruntime once on the host; the sizes are those of the target's build.

    python benchmarks/memory_table.py [MODEL ...] [--target cortex-m7] [--precision fp32|int8 ...] [--no-check]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402
from quantize import quantize_model  # noqa: E402

import aot  # noqa: E402

# Workspace targets on cortex-m7 builds (bytes), from the issue that set them.
TARGETS = {("ds_cnn", "int8"): 9_600, ("mobilenet_v1", "int8"): 36_864, ("resnet8", "int8"): 32_768,
           ("ds_cnn", "fp32"): 38_400, ("mobilenet_v1", "fp32"): 147_456, ("resnet8", "fp32"): 131_072}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"])
    parser.add_argument("--target", default="cortex-m7")
    parser.add_argument("--precision", action="append", choices=["fp32", "int8"])
    parser.add_argument("--no-check", action="store_true", help="skip the host check against onnxruntime")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)      # onnxruntime's quantizer is chatty
    rows = [("model", "precision", "plain B", "graph order B", "shared B", "shared/plain", "bound B", "target B",
             "met", "check")]
    ok = True
    for name in args.models:
        for precision in args.precision or ["fp32", "int8"]:
            model = zoo.ZOO[name]()
            if precision == "int8":
                model = quantize_model(model, "QDQ", True, "QInt8")
            plain = aot.build(model, target=args.target, out_dir=None, knobs={"share_memory": False}).program.plan
            program = aot.build(model, target=args.target, out_dir=None).program
            shared = program.plan
            check = "-"
            if not args.no_check:
                passed = aot.check(model).ok and aot.check(model, knobs={"share_memory": False}).ok
                check, ok = ("ok" if passed else "MISMATCH"), ok and passed
            target = TARGETS.get((name, precision))
            rows.append((name, precision, f"{plain.size:,}", f"{program.order.graph_order:,}", f"{shared.size:,}",
                         f"{shared.size / plain.size:.2f}",
                         f"{plain.lower_bound:,}", f"{target:,}" if target else "-",
                         ("yes" if shared.size <= target else "no") if target else "-", check))
            print(f"  {name} {precision}", file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
