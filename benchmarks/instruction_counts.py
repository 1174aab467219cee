"""Instructions executed per model on emulated ARM targets, against a scalar build of the same model.

    python benchmarks/instruction_counts.py [MODEL ...] [--target aarch64 ...] [--precision fp32|int8 ...]
                                            [--per-layer]

Each model is built twice per target: with the target's knobs, and with `simd = false` (one lane, no
integer SIMD, LLVM's vectorizers off). Both run once under qemu with the instruction-counting plugin
(aot/run/count.py); both outputs are checked against onnxruntime. The table gives the instructions
the kernels executed, per multiply-accumulate, and how many times fewer the SIMD build needs.
With --per-layer, each model's SIMD build is profiled too: instructions per kernel, per MAC, and
the kernel's share of the whole inference.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import onnx  # noqa: E402
import zoo  # noqa: E402
from quantize import quantize_model  # noqa: E402

import aot  # noqa: E402
from aot import reference  # noqa: E402
from aot.api import quantization_steps  # noqa: E402
from aot.ops import macs  # noqa: E402
from aot.run.count import count_instructions, count_instructions_per_kernel  # noqa: E402

TARGETS = ("aarch64", "armv7-neon", "cortex-m4", "cortex-m55")
TINY = ("ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder")


def _count(model: onnx.ModelProto, target: str, knobs: dict, tmp: Path) -> tuple[int, int, bool]:
    """(instructions, MACs, outputs match onnxruntime) for one build."""
    artifact = aot.build(model, target=target, out_dir=tmp / "build", knobs=knobs)
    feeds = reference.random_inputs(model, 0)
    outputs, insns = count_instructions(artifact, feeds)
    comparisons = reference.compare(outputs, reference.reference_outputs(model, feeds),
                                    quantization_steps(artifact.program))
    total_macs = sum(macs(artifact.program.graph, c.node) for c in artifact.program.calls)
    return insns, total_macs, all(c.ok for c in comparisons)


def insns_table(models: dict[str, onnx.ModelProto], knobs: dict | None = None,
                targets: tuple[str, ...] = TARGETS) -> bool:
    """Print the table; True if every output matched."""
    rows = [("target", "model", "MMACs", "M insns", "insns/MAC", "scalar M insns", "scalar/SIMD", "check")]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for target in targets:
            for label, model in models.items():
                try:
                    insns, n_macs, simd_ok = _count(model, target, dict(knobs or {}), Path(tmp))
                    scalar, _, scalar_ok = _count(model, target, {**(knobs or {}), "simd": False}, Path(tmp))
                except aot.PlanError as err:        # does not fit the board
                    rows.append((target, label, "-", "-", "-", "-", "-", str(err)[:50]))
                    continue
                ok &= simd_ok and scalar_ok
                rows.append((target, label, f"{n_macs / 1e6:.2f}", f"{insns / 1e6:.2f}", f"{insns / n_macs:.2f}",
                             f"{scalar / 1e6:.2f}", f"{scalar / insns:.2f}x",
                             "ok" if simd_ok and scalar_ok else "MISMATCH"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\ninstructions executed in the kernels under qemu (exact; not cycles):")
    for r in rows:
        print("  ".join(c.rjust(w) if 2 <= i <= 6 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return ok


def per_layer_table(label: str, model: onnx.ModelProto, target: str, knobs: dict | None = None) -> None:
    """Print instructions per kernel of one build (the SIMD one), in call order."""
    with tempfile.TemporaryDirectory() as tmp:
        artifact = aot.build(model, target=target, out_dir=Path(tmp) / "build", knobs=dict(knobs or {}))
        _, counts = count_instructions_per_kernel(artifact, reference.random_inputs(model, 0))
    graph, total = artifact.program.graph, sum(counts.values())
    rows = [("kernel", "shape out", "kMACs", "k insns", "insns/MAC", "share")]
    for call in artifact.program.calls:
        n_macs, insns = macs(graph, call.node), counts[call.kernel.name]
        shape = "x".join(map(str, graph.shape(call.node.outputs[0])))
        rows.append((call.kernel.name.removeprefix(f"{artifact.name}_"), shape, f"{n_macs / 1e3:.1f}",
                     f"{insns / 1e3:.1f}", f"{insns / n_macs:.2f}" if n_macs else "-", f"{insns / total:.1%}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\n{label} on {target}: {total:,} instructions in {len(counts)} kernels")
    for r in rows:
        print("  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def quantized(name: str) -> onnx.ModelProto:
    logging.getLogger().setLevel(logging.ERROR)     # the quantizer's notes on BatchNorm scales
    return quantize_model(zoo.ZOO[name](), "QDQ")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(TINY), help="zoo model names (default: MLPerf Tiny)")
    parser.add_argument("--target", action="append", help=f"emulated target (repeatable; default {', '.join(TARGETS)})")
    parser.add_argument("--precision", action="append", choices=["fp32", "int8"], help="default both")
    parser.add_argument("--knobs", type=Path, help="TOML knob overrides for every build")
    parser.add_argument("--per-layer", action="store_true", help="also profile each SIMD build per kernel")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in zoo.ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(zoo.ZOO)})")
    models = {f"{name} {precision}": zoo.ZOO[name]() if precision == "fp32" else quantized(name)
              for precision in args.precision or ["fp32", "int8"] for name in args.models}
    knobs = aot.load_knobs(args.knobs) if args.knobs else None
    targets = tuple(args.target or TARGETS)
    if args.per_layer:
        for target in targets:
            for label, model in models.items():
                per_layer_table(label, model, target, knobs)
    return 0 if insns_table(models, knobs, targets) else 1


if __name__ == "__main__":
    sys.exit(main())
