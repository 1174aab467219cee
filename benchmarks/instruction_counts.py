"""Instructions executed per model on emulated ARM targets, against a scalar build of the same model
and against Arm's CMSIS-NN.

    python benchmarks/instruction_counts.py [MODEL ...] [--target aarch64 ...] [--precision fp32|int8|a16w8 ...]
                                            [--no-scalar] [--layers] [--records DIR [--tune 10m]]

Each model is built twice per target: with the target's knobs, and with `simd = false` (one lane, no integer
SIMD, LLVM's vectorizers off; --no-scalar skips it). Both run once under qemu with the instruction-counting
plugin (aot/run/count.py); both outputs are checked against onnxruntime. The table gives the instructions the
kernels executed, per multiply-accumulate, on the Cortex-M cores the cycles estimated from the same kind of
run (aot/run/cycles.py: LLVM's model of the core, an estimate), how many times fewer the SIMD build needs, the
ratio to CMSIS-NN's instructions and estimated cycles where there are figures (REFERENCE), and the code size
of the kernels (text bytes of the object). --layers adds the instructions (and estimated cycles) of each kernel.
--records DIR adds the build from the tuning records DIR/<model>_<precision>_<target>.json (made first with
--tune DURATION where missing: `aot tune` counting instructions per kernel) and its ratio to the default
schedules' count.
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
from aot.codegen.elf import functions  # noqa: E402
from aot.ops import macs  # noqa: E402
from aot.run import cycles  # noqa: E402
from aot.run.count import count_instructions, count_kernel_instructions  # noqa: E402
from aot.target import get_target  # noqa: E402

TARGETS = ("aarch64", "armv7-neon", "cortex-m4", "cortex-m55")
TINY = ("ds_cnn", "mobilenet_v1", "resnet8", "fc_autoencoder")
# CMSIS-NN on the same layer shapes through its public functions, one whole inference (softmax, pooling and
# adds included), under qemu-system-arm: instructions executed, and cycles estimated from the same run as
# aot's are (aot/run/cycles.py). benchmarks/cmsis_nn.py --precision s8 gives the int8 figures; --precision
# s16 --conv-bias int32 the a16w8 ones (CMSIS-NN's optional int32 bias for its convolutions, as the models
# aot compiles have it; depthwise and fully connected take int64 only; s16 softmax is not counted).
REFERENCE_VERSION = "CMSIS-NN v7.0.0-43, gcc 12 -O3"
REFERENCE = {   # (instructions, estimated cycles)
    ("cortex-m4", "ds_cnn int8"): (7_844_769, 10_182_379),
    ("cortex-m4", "mobilenet_v1 int8"): (24_711_523, 33_323_607),
    ("cortex-m4", "resnet8 int8"): (29_840_806, 42_266_388),
    ("cortex-m55", "ds_cnn int8"): (1_784_850, 2_128_837),
    ("cortex-m55", "mobilenet_v1 int8"): (6_422_798, 7_678_477),
    ("cortex-m55", "resnet8 int8"): (4_792_743, 5_384_327),
    ("cortex-m4", "ds_cnn a16w8"): (10_217_442, 14_447_517),
    ("cortex-m4", "resnet8 a16w8"): (32_505_226, 47_010_472),
    ("cortex-m55", "ds_cnn a16w8"): (3_107_086, 4_166_080),
    ("cortex-m55", "resnet8 a16w8"): (6_598_814, 7_715_071),
}


def _count(model: onnx.ModelProto, target: str, knobs: dict, tmp: Path, layers: bool = False,
           records: Path | None = None) -> dict:
    """One build, run once: instructions (and on a Cortex-M core the cycles estimated from the same profiled
    run), MACs, text bytes, whether the outputs match onnxruntime, and with `layers` the instructions and
    MACs of each kernel."""
    artifact = aot.build(model, target=target, out_dir=tmp / "build", knobs=knobs, records=records)
    feeds = reference.random_inputs(model, 0)
    per_kernel, estimated = {}, None
    if layers:
        outputs, per_kernel = count_kernel_instructions(artifact, feeds)
        insns = sum(per_kernel.values())
    elif cycles.available(artifact.target):     # the profiled run counts the instructions too
        outputs, estimate = cycles.estimate_cycles(artifact, feeds)
        insns, estimated = estimate.instructions, estimate.cycles
    else:
        outputs, insns = count_instructions(artifact, feeds)
    kernel_cycles = {}
    if layers and cycles.available(artifact.target):
        estimate = cycles.estimate_cycles(artifact, feeds)[1]
        estimated, kernel_cycles = estimate.cycles, estimate.per_kernel
    comparisons = reference.compare(outputs, reference.reference_outputs(model, feeds),
                                    quantization_steps(artifact.program))
    graph = artifact.program.graph
    kernel_macs = {c.kernel.name: macs(graph, c.node) for c in artifact.program.calls}
    text = sum(size for _, size in functions(artifact.object.read_bytes()).values())
    return {"insns": insns, "cycles": estimated, "macs": sum(kernel_macs.values()), "text": text,
            "ok": all(c.ok for c in comparisons),
            "layers": [(k, n, kernel_macs.get(k, 0), kernel_cycles.get(k)) for k, n in per_kernel.items()]}


def records_path(records: Path, label: str, target: str) -> Path:
    """Where the tuning records of a model ("resnet18 fp32") for a target are: DIR/<model>_<precision>_<target>.json."""
    return records / f"{label.replace(' ', '_')}_{target}.json"


def tune_missing(models: dict[str, onnx.ModelProto], records: Path, budget: str, target: str = "host") -> None:
    """Tune each model that has no records file in `records` yet for `target`, for `budget`."""
    from aot.tune import parse_budget, tune

    records.mkdir(parents=True, exist_ok=True)
    for label, model in models.items():
        path = records_path(records, label, get_target(target).name)
        if not path.exists():
            print(f"tuning {label} for {target} for {budget} into {path}", file=sys.stderr)
            tune(model, target, records=path, budget_s=parse_budget(budget))


def _print(title: str, rows: list[tuple[str, ...]], left: int) -> None:
    """A table with the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for r in rows:
        print("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def _layer_table(target: str, label: str, run: dict) -> None:
    total = run["insns"]
    rows = [("kernel", "MACs", "insns", "insns/MAC", "share", "est. cycles", "est. cycles/MAC")]
    for name, n, n_macs, n_cycles in run["layers"]:
        rows.append((name.split("_k", 1)[-1], f"{n_macs}", f"{n}", f"{n / n_macs:.2f}" if n_macs else "-",
                     f"{100 * n / total:.1f}%", "-" if n_cycles is None else f"{n_cycles}",
                     f"{n_cycles / n_macs:.2f}" if n_cycles is not None and n_macs else "-"))
    _print(f"{target} {label}: instructions (and on a Cortex-M core estimated cycles) per kernel", rows, 1)


def insns_table(models: dict[str, onnx.ModelProto], knobs: dict | None = None,
                targets: tuple[str, ...] = TARGETS, scalar: bool = True, layers: bool = False,
                records: Path | None = None) -> bool:
    """Print the table; True if every output matched."""
    rows = [("target", "model", "MMACs", "M insns", "insns/MAC", "est. M cycles", "scalar M insns", "scalar/SIMD",
             "CMSIS-NN M", "vs CMSIS-NN", "est. cycles vs CMSIS-NN", "text B", "check")]
    if records is not None:
        rows[0] = rows[0][:6] + ("tuned M insns", "tuned/default", "tuned vs CMSIS-NN") + rows[0][6:]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for target in targets:
            for label, model in models.items():
                try:
                    run = _count(model, target, dict(knobs or {}), Path(tmp), layers)
                    base = _count(model, target, {**(knobs or {}), "simd": False}, Path(tmp)) if scalar else None
                except aot.PlanError as err:        # does not fit the board
                    rows.append((target, label, *["-"] * 10, str(err)[:50]))
                    continue
                both_ok = run["ok"] and (base is None or base["ok"])
                insns, (ref, ref_cycles) = run["insns"], REFERENCE.get((target, label), (None, None))
                tuned: tuple[str, ...] = ()
                if records is not None:
                    log = records_path(records, label, target)
                    tuned = ("-", "-", "-")
                    if log.exists():
                        best = _count(model, target, dict(knobs or {}), Path(tmp), layers, log)
                        both_ok &= best["ok"]
                        tuned = (f"{best['insns'] / 1e6:.2f}", f"{best['insns'] / insns:.3f}",
                                 f"{best['insns'] / ref:.3f}" if ref else "-")
                        if layers:
                            _layer_table(target, f"{label} tuned", best)
                ok &= both_ok
                rows.append((target, label, f"{run['macs'] / 1e6:.2f}", f"{insns / 1e6:.2f}",
                             f"{insns / run['macs']:.2f}",
                             f"{run['cycles'] / 1e6:.2f}" if run["cycles"] is not None else "-", *tuned,
                             f"{base['insns'] / 1e6:.2f}" if base else "-",
                             f"{base['insns'] / insns:.2f}x" if base else "-", f"{ref / 1e6:.2f}" if ref else "-",
                             f"{insns / ref:.3f}" if ref else "-",
                             f"{run['cycles'] / ref_cycles:.3f}" if ref_cycles and run["cycles"] else "-",
                             f"{run['text']}",
                             "ok" if both_ok else "MISMATCH"))
                if layers:
                    _layer_table(target, label, run)
    _print("instructions executed in the kernels under qemu (exact; not cycles); est. M cycles on the Cortex-M "
           f"cores: an estimate ({cycles.ESTIMATE}); CMSIS-NN: {REFERENCE_VERSION}, its instructions and its cycles "
           "estimated the same way (benchmarks/cmsis_nn.py); text: kernel code bytes", rows, 2)
    return ok


def quantized(name: str, precision: str = "int8") -> onnx.ModelProto:
    """int8, or a16w8 (int16 activations, int8 weights) as onnxruntime's quantizer makes them."""
    logging.getLogger().setLevel(logging.ERROR)     # the quantizer's notes on BatchNorm scales
    return quantize_model(zoo.ZOO[name](), "QDQ", activations="QInt16" if precision == "a16w8" else "QInt8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(TINY), help="zoo model names (default: MLPerf Tiny)")
    parser.add_argument("--target", action="append", help=f"emulated target (repeatable; default {', '.join(TARGETS)})")
    parser.add_argument("--precision", action="append", choices=["fp32", "int8", "a16w8"],
                        help="default fp32 and int8")
    parser.add_argument("--knobs", type=Path, help="TOML knob overrides for every build")
    parser.add_argument("--no-scalar", action="store_true", help="skip the scalar (simd = false) builds")
    parser.add_argument("--layers", action="store_true",
                        help="also print the instructions (and estimated cycles) of each kernel")
    parser.add_argument("--records", type=Path, metavar="DIR", help="also count the builds from tuning records "
                        "DIR/<model>_<precision>_<target>.json")
    parser.add_argument("--tune", metavar="DURATION", help="with --records: first tune each model without a "
                        "records file for this long (e.g. 10m)")
    args = parser.parse_args()
    if args.tune and not args.records:
        parser.error("--tune needs --records DIR")
    unknown = [m for m in args.models if m not in zoo.ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(zoo.ZOO)})")
    models = {f"{name} {precision}": zoo.ZOO[name]() if precision == "fp32" else quantized(name, precision)
              for precision in args.precision or ["fp32", "int8"] for name in args.models}
    knobs = aot.load_knobs(args.knobs) if args.knobs else None
    targets = tuple(args.target or TARGETS)
    if args.tune:
        for target in targets:
            tune_missing(models, args.records, args.tune, target)
    return 0 if insns_table(models, knobs, targets, not args.no_scalar, args.layers, args.records) else 1


if __name__ == "__main__":
    sys.exit(main())
