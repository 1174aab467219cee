"""Workspace per zoo model: the plain plan (every tensor in bytes of its own), the plan with sharing
(results in place of, or overlapping, the inputs they replace where the kernels allow it) in the graph's
order and in the build's (the order searched for fewer live bytes, where that plans smaller), the lower
bound of the plain plan, and the targets of the memory work. Both builds are checked against
onnxruntime once on the host; the sizes are those of the target's build.

A second table builds models under a RAM budget (BUDGETS; the caller's input and output buffers count):
the workspace without and with it, the RAM used, the row-band schedule chosen and its MAC overhead, and
whether the banded build gives the plain build's bits and onnxruntime's answer on the host.

    python benchmarks/memory_table.py [MODEL ...] [--target cortex-m7] [--precision fp32|int8 ...] [--no-check]
                                      [--no-budgets]
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

# (model, precision, --memory): MobileNetV2-224 int8 in 1 MiB of RAM, inputs and outputs included (its
# weights need more flash than the target's reference layout has).
BUDGETS = [("mobilenet_v2", "int8", {"ram": 1 << 20, "flash": 8 << 20})]

# Workspace targets on cortex-m7 builds (bytes), from the issue that set them.
TARGETS = {("ds_cnn", "int8"): 9_600, ("mobilenet_v1", "int8"): 36_864, ("resnet8", "int8"): 32_768,
           ("ds_cnn", "fp32"): 38_400, ("mobilenet_v1", "fp32"): 147_456, ("resnet8", "fp32"): 131_072}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder"])
    parser.add_argument("--target", default="cortex-m7")
    parser.add_argument("--precision", action="append", choices=["fp32", "int8"])
    parser.add_argument("--no-check", action="store_true", help="skip the host check against onnxruntime")
    parser.add_argument("--no-budgets", action="store_true", help="skip the table of builds under a RAM budget")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)      # onnxruntime's quantizer is chatty
    rows = [("model", "precision", "plain B", "graph order B", "shared B", "shared/plain", "bound B", "target B",
             "met", "check")]
    ok = True
    for name in args.models:
        for precision in args.precision or ["fp32", "int8"]:
            model = zoo_model(name, precision)
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
    print_table(rows)
    if not args.no_budgets:
        ok = budget_table(args.target, not args.no_check) and ok
    return 0 if ok else 1


def zoo_model(name: str, precision: str):
    model = zoo.ZOO[name]()
    return quantize_model(model, "QDQ", True, "QInt8") if precision == "int8" else model


def budget_table(target: str, check: bool) -> bool:
    rows = [("model", "precision", "budget", "workspace B", "budgeted B", "RAM B", "row bands", "MACs",
             "same bits", "vs onnxruntime")]
    ok = True
    for name, precision, memory in BUDGETS:
        model = zoo_model(name, precision)
        limits = {"flash": memory["flash"]} if "flash" in memory else {}
        plain = aot.build(model, target=target, out_dir=None, memory=limits)
        budgeted = aot.build(model, target=target, out_dir=None, memory=memory)
        bands = budgeted.program.bands
        same = reference = "-"
        if check:
            host = aot.check(model, memory={"ram": memory["ram"]})
            same_bits = all((aot.run(model, host.inputs)[k] == v).all() for k, v in host.outputs.items())
            same, reference = ("yes" if same_bits else "NO"), ("ok" if host.ok else "MISMATCH")
            ok = ok and same_bits
        rows.append((name, precision, f"ram={memory['ram']:,}", f"{plain.program.plan.size:,}",
                     f"{budgeted.program.plan.size:,}", f"{budgeted.metadata['memory']['ram']:,}",
                     f"{bands.first_node}..{bands.last_node} x{bands.stage.bands}" if bands else "none",
                     f"+{100 * (bands.macs - bands.plain_macs) / bands.plain_macs:.1f}%" if bands else "+0%",
                     same, reference))
        print(f"  {name} {precision} under a budget", file=sys.stderr, flush=True)
    print()
    print_table(rows)
    return ok


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    sys.exit(main())
