"""aot against onnxruntime on one core: latency, throughput and the distance to the machine's peak.

    python benchmarks/bench.py [MODEL ...] [--precision fp32|int8 ...] [--min-time 1.0]
                               [--profile MODEL ...] [--insns] [--knobs FILE] [--records DIR [--tune 10m]]

For each zoo model (examples/zoo.py; int8 variants quantized by onnxruntime, examples/quantize.py) it
builds with aot for the host target and times `NAME_run` in the C timing harness, then times
onnxruntime on the same input in the same run (CPUExecutionProvider, one intra-op thread, all graph
optimizations). Both take one warm-up run, then the median of 10 measurements, each the mean of
enough back-to-back runs to last a tenth of --min-time. aot's outputs are checked against
onnxruntime's; a mismatch fails the benchmark.

The table: aot ms, onnxruntime ms, their ratio (below 1 means aot is faster) with the geometric mean,
and GFLOP/s (2 x MACs / time; integer operations for int8) beside the machine's fp32 peak,
FMA units x lanes x 2 x GHz.

--records DIR adds the build from DIR/<model>_<precision>_<target>.json (tuning records of `aot tune`,
made first with --tune DURATION where missing) beside the untuned one: its time, its ratio to onnxruntime
and to the untuned build, in the same run.

--profile MODEL builds that model with the wrapper's timing hooks and prints each kernel call's time,
and the conv/gemm layers' share of the peak. --insns counts the instructions each model's kernels
execute under qemu on AArch64 and Cortex-M, per MAC, against a build without SIMD (aot/run/count.py).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import zoo  # noqa: E402
from instruction_counts import TINY, insns_table, quantized, records_path, tune_missing  # noqa: E402

import aot  # noqa: E402
from aot import reference  # noqa: E402
from aot.bench import bench  # noqa: E402
from aot.target import get_target  # noqa: E402

REPEAT = 10


def time_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], min_time: float) -> float:
    """Median ms of REPEAT measurements, each the mean of enough runs to last min_time / REPEAT."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)                        # warm-up
    number, times = 1, []
    for _ in range(REPEAT):
        while True:
            start = time.perf_counter()
            for _ in range(number):
                session.run(None, feeds)
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / REPEAT:
                break
            number = int(number * (min_time / REPEAT) / max(elapsed, 1e-9) * 1.1) + 1
        times.append(elapsed / number * 1e3)
    return statistics.median(times)


def cpu_ghz() -> float:
    """The nominal clock from /proc/cpuinfo (what turbo or a hypervisor do to it is not visible here)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1e3
    except OSError:
        pass
    return float("nan")


def print_table(rows: list[tuple[str, ...]], right: set[int]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def _check(result) -> str:
    if result.ok:
        return "ok"
    worst = max(result.comparisons, key=lambda c: c.max_abs / (c.step or c.scale or 1.0))
    if worst.step:
        return f"MISMATCH: {worst.max_abs / worst.step:.0f} steps off at worst, {worst.off_by_one} of {worst.size}"
    return f"MISMATCH: error {worst.max_abs:.2g} of scale {worst.scale:.2g}"


def records_file(records: Path | None, label: str) -> Path | None:
    """The host's records file of a model, if there is one."""
    if records is None:
        return None
    path = records_path(records, label, get_target("host").name)
    return path if path.exists() else None


def latency_table(models: dict[str, onnx.ModelProto], min_time: float, peak: float, knobs: dict | None,
                  records: Path | None = None) -> bool:
    rows = [("model", "precision", "MMACs", "aot ms", "onnxruntime ms", "aot/ort", "aot GOP/s", "ort GOP/s",
             "% fp32 peak", "check")]
    if records is not None:
        rows[0] = rows[0][:6] + ("tuned ms", "tuned/ort", "tuned/untuned") + rows[0][6:]
    ratios, tuned_ratios, ok = [], [], True
    for label, model in models.items():
        name, precision = label.rsplit(" ", 1)
        result = bench(model, target="host", repeat=REPEAT, min_repeat_ms=min_time * 1e3 / REPEAT, knobs=knobs)
        ort_ms = time_onnxruntime(model, reference.random_inputs(model, 0), min_time)
        aot_ms = result.stats.median
        ratios.append(aot_ms / ort_ms)
        ok &= result.ok
        flops = 2 * result.macs
        tuned: tuple[str, ...] = ()
        if records is not None:
            log = records_file(records, label)
            if log is None:
                tuned = ("-", "-", "-")
            else:
                tuned_result = bench(model, target="host", repeat=REPEAT, min_repeat_ms=min_time * 1e3 / REPEAT,
                                     knobs=knobs, records=log)
                ok &= tuned_result.ok
                tuned_ms = tuned_result.stats.median
                tuned_ratios.append(tuned_ms / ort_ms)
                tuned = (f"{tuned_ms:.3f}", f"{tuned_ms / ort_ms:.2f}", f"{tuned_ms / aot_ms:.2f}")
        rows.append((name, precision, f"{result.macs / 1e6:,.1f}", f"{aot_ms:.3f}", f"{ort_ms:.3f}",
                     f"{aot_ms / ort_ms:.2f}", *tuned, f"{flops / aot_ms / 1e6:.1f}", f"{flops / ort_ms / 1e6:.1f}",
                     f"{100 * flops / aot_ms / 1e6 / peak:.0f}%" if precision == "fp32" else "",
                     _check(result)))
    print_table(rows, right=set(range(2, len(rows[0]) - 1)))
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    print(f"geometric mean of aot/onnxruntime: {geomean:.2f}; worst: {max(ratios):.2f} ({len(ratios)} models; "
          "GOP/s = 2 x MACs / time)")
    if tuned_ratios:
        geomean = math.exp(statistics.fmean(math.log(r) for r in tuned_ratios))
        print(f"tuned: geometric mean of aot/onnxruntime {geomean:.2f} ({len(tuned_ratios)} models with records)")
    return ok


def profile_table(label: str, model: onnx.ModelProto, min_time: float, peak: float, knobs: dict | None,
                  records: Path | None = None) -> None:
    log = records_file(records, label)
    result = bench(model, target="host", repeat=REPEAT, min_repeat_ms=min_time * 1e3 / REPEAT, profile=True,
                   knobs=knobs, records=log)
    total = sum(s.ms for s in result.profile)
    label += f" with {log}" if log else ""
    print(f"\nper-node profile: {label} on {result.target} (kernel times sum to {total:.3f} ms; the whole run "
          f"took {result.stats.median:.3f} ms with the hooks' clock reads)")
    rows = [("#", "op", "node", "MMACs", "ms", "%", "GFLOP/s")]
    for s in result.profile:
        rows.append((str(s.step), s.op, s.node[:40], f"{s.macs / 1e6:.2f}", f"{s.ms:.4f}",
                     f"{100 * s.ms / total:.1f}", f"{2 * s.macs / s.ms / 1e6:.1f}" if s.macs else ""))
    print_table(rows, right={0, 3, 4, 5, 6})
    heavy = [s for s in result.profile if s.op.split("+")[0].split(" ")[0] in ("Conv", "Gemm", "MatMul")]
    ms, macs = sum(s.ms for s in heavy), sum(s.macs for s in heavy)
    if ms:
        print(f"conv/gemm layers: {len(heavy)} kernels, {ms:.3f} ms ({100 * ms / total:.0f}% of the time), "
              f"{2 * macs / ms / 1e6:.1f} GFLOP/s = {100 * 2 * macs / ms / 1e6 / peak:.0f}% of peak")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(zoo.ZOO), help="zoo model names (default: all)")
    parser.add_argument("--precision", action="append", choices=["fp32", "int8"],
                        help="fp32 and/or int8 (repeatable; default both)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds each measurement series lasts")
    parser.add_argument("--profile", action="append", default=[], metavar="MODEL",
                        help="per-node times for this model ('resnet18' or 'resnet18 int8'; repeatable)")
    parser.add_argument("--insns", action="store_true", help="instruction counts under emulation (AArch64, Cortex-M) "
                        "for the MLPerf Tiny models, against scalar builds")
    parser.add_argument("--fma-units", type=int, default=2, help="FMA units per core, for the peak (default 2)")
    parser.add_argument("--knobs", type=Path, help="TOML knob overrides for every build")
    parser.add_argument("--records", type=Path, metavar="DIR", help="also time the builds from tuning records "
                        "DIR/<model>_<precision>_<target>.json, side by side")
    parser.add_argument("--tune", metavar="DURATION", help="with --records: first tune each model without a "
                        "records file for this long (e.g. 10m)")
    args = parser.parse_args()
    if args.tune and not args.records:
        parser.error("--tune needs --records DIR")
    unknown = [m for m in args.models + [p.split()[0] for p in args.profile] if m not in zoo.ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(zoo.ZOO)})")
    knobs = aot.load_knobs(args.knobs) if args.knobs else None
    host = get_target("host")
    ghz = cpu_ghz()
    peak = args.fma_units * host.lanes * 2 * ghz
    print(f"host target {host.name}; fp32 peak = {args.fma_units} FMA units x {host.lanes} lanes x 2 flops x "
          f"{ghz:.2f} GHz = {peak:.1f} GFLOP/s per core")

    def model(label: str) -> onnx.ModelProto:
        name, precision = label.split()
        return quantized(name) if precision == "int8" else zoo.ZOO[name]()

    labels = [f"{name} {precision}" for precision in args.precision or ["fp32", "int8"] for name in args.models]
    models = {label: model(label) for label in labels}
    if args.tune:
        tune_missing(models, args.records, args.tune)
    ok = latency_table(models, args.min_time, peak, knobs, args.records)
    for label in args.profile:
        key = label if " " in label else f"{label} fp32"
        profile_table(key, models.get(key) or model(key), args.min_time, peak, knobs, args.records)
    if args.insns:
        ok &= insns_table({label: m for label, m in models.items() if label.split()[0] in TINY}, knobs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
