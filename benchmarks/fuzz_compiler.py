"""Differential fuzzing of aot: random valid ONNX graphs compiled and run, compared with onnxruntime (or
TFLite graphs, with --format tflite, compared with LiteRT's reference kernels: tests/fuzz_tflite.py).

    .venv/bin/python benchmarks/fuzz_compiler.py --graphs 10000 [--seed S] [--target host] [--jobs 2]
        [--format onnx|tflite] [--reduce-dir DIR] [--start I] [--max-nodes N]

Graph i of seed S is always the same graph (tests/fuzz_graphs.py); each is checked as tests/fuzz_check.py
says (outcomes pass / reference-wrong / wrong / crash / refused / invalid, tolerances and why; a graph
where onnxruntime is wrong and aot right by the float64 evaluation is reference-wrong, listed, not
aot's). The run prints a table of outcomes, every refusal message with its count, each wrong or crashed
graph, and the op coverage (ops in the graphs, and the ONNX ops aot registers that no graph used). With
--reduce-dir, each wrong or crashed graph is reduced to a minimal one failing the same way and written
there as a standalone script (`seed<S>_<i>_<kind>.py`) that builds it with onnx.helper (--reduce-refused:
refused ones too).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_check import KINDS, Outcome, check  # noqa: E402
from fuzz_graphs import generate  # noqa: E402


def run_one(seed: int, index: int, target: str, max_nodes: int | None, fmt: str = "onnx"
            ) -> tuple[int, Outcome, Counter, float]:
    start = time.perf_counter()
    if fmt == "tflite":
        import fuzz_tflite

        case = fuzz_tflite.generate(seed, index, max_nodes)
        outcome = fuzz_tflite.check(case, target)
    else:
        case = generate(seed, index, max_nodes)
        outcome = check(case.model, case.inputs, target)
    return index, outcome, case.ops, time.perf_counter() - start


def reduce_one(seed: int, index: int, target: str, max_nodes: int | None, out_dir: str) -> str:
    from fuzz_reduce import reduce, script
    case = generate(seed, index, max_nodes)
    first = check(case.model, case.inputs, target)
    model, inputs = reduce(case.model, case.inputs, lambda m, x: check(m, x, target).signature == first.signature)
    final = check(model, inputs, target)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path = Path(out_dir) / f"seed{seed}_{index}_{first.kind}.py"
    title = f"Graph {index} of seed {seed} ({target}), reduced: {final.kind}: {final.detail}"
    path.write_text(script(model, inputs, title.replace('"""', "'''")))
    return str(path)


def coverage_gaps(used: Counter) -> list[str]:
    """ONNX ops aot registers (default domain) that no graph contained; aot's own ops that happen to take
    a canonical rule (Copy, Requantize) are not ONNX ops and are left out."""
    import onnx

    import aot.ops  # noqa: F401 - registers every op
    from aot.registry import REGISTRY
    onnx_ops = [name for name, d in REGISTRY.items() if d.canonical is not None and not d.domain
                and onnx.defs.has(name)]
    return sorted(op for op in onnx_ops if op not in used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first graph index")
    parser.add_argument("--target", default="host")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-nodes", type=int, default=None, help="graph size (default: 1 to 8 ops at random)")
    parser.add_argument("--format", choices=["onnx", "tflite"], default="onnx",
                        help="random ONNX graphs against onnxruntime, or TFLite graphs against LiteRT's reference "
                        "kernels (tests/fuzz_tflite.py; int8 ones compared bit for bit)")
    parser.add_argument("--reduce-dir", default=None)
    parser.add_argument("--reduce-refused", action="store_true", help="also reduce refused graphs")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    outcomes: dict[int, Outcome] = {}
    ops: Counter = Counter()
    seconds = 0.0
    indices = range(args.start, args.start + args.graphs)
    def record(i: int, outcome: Outcome, used: Counter, secs: float) -> None:
        nonlocal seconds
        outcomes[i], seconds = outcome, seconds + secs
        ops.update({op: 1 for op in used})
        if outcome.kind in ("wrong", "crash"):
            print(f"graph {i}: {outcome.kind}: {outcome.detail}", flush=True)
        if len(outcomes) % 500 == 0:
            print(f"... {len(outcomes)} graphs, {time.perf_counter() - start:.0f} s", flush=True)

    orphans = []        # graphs whose worker died, maybe because another graph killed it
    with cf.ProcessPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_one, args.seed, i, args.target, args.max_nodes, args.format): i for i in indices}
        for fut in cf.as_completed(futures):
            try:
                record(*fut.result())
            except cf.process.BrokenProcessPool:
                orphans.append(futures[fut])
            except Exception as err:      # noqa: BLE001 - a worker's exception
                record(futures[fut], Outcome("crash", f"worker: {type(err).__name__}: {err}"), Counter(), 0.0)
    for i in sorted(orphans):       # each alone: the one whose process dies again is the one that killed it
        with cf.ProcessPoolExecutor(1) as pool:
            try:
                record(*pool.submit(run_one, args.seed, i, args.target, args.max_nodes, args.format).result())
            except cf.process.BrokenProcessPool:
                record(i, Outcome("crash", "the process died (a crash in aot, LLVM or the reference's native "
                                           "code)"), Counter(), 0.0)
    report(args, outcomes, ops, time.perf_counter() - start, seconds)
    if args.reduce_dir and args.format == "tflite":
        print("--reduce-dir reduces ONNX graphs only", file=sys.stderr)
    elif args.reduce_dir:
        reduce_failures(args, outcomes)
    return 0


def report(args, outcomes: dict[int, Outcome], ops: Counter, wall: float, seconds: float) -> None:
    counts = Counter(o.kind for o in outcomes.values())
    print(f"\nseed {args.seed}, graphs {args.start}..{args.start + args.graphs - 1}, target {args.target}: "
          f"{wall:.0f} s wall, {seconds / max(1, len(outcomes)):.2f} s per graph")
    print(f"{'outcome':<16}{'graphs':>8}")
    for kind in KINDS:
        print(f"{kind:<16}{counts.get(kind, 0):>8}")
    by_kind: dict[str, Counter] = {k: Counter() for k in ("refused", "invalid")}
    for o in outcomes.values():
        if o.kind in by_kind:
            by_kind[o.kind][o.detail[:200]] += 1
    for kind, messages in by_kind.items():
        if messages:
            print(f"\n{kind}:")
            for msg, n in messages.most_common(30):
                print(f"{n:>6}  {msg}")
    blamed = sorted(i for i, o in outcomes.items() if o.kind == "reference-wrong")
    if blamed:
        print("\ngraphs where the reference is wrong and aot right, by the float64 evaluation (index: detail):")
        for i in blamed:
            print(f"  {i}: {outcomes[i].detail[:240]}")
    bad = sorted(i for i, o in outcomes.items() if o.kind in ("wrong", "crash"))
    if bad:
        print("\nwrong or crashed graphs (index: outcome):")
        for i in bad:
            print(f"  {i}: {outcomes[i].kind}: {outcomes[i].detail[:240]}")
    print(f"\nops covered ({len(ops)}), graphs containing each:")
    names = sorted(ops)
    for row in range(0, len(names), 4):
        print("  " + "".join(f"{op:<26}{ops[op]:>6}  " for op in names[row:row + 4]))
    if args.format == "tflite":
        from aot.frontend.tflite_ops import MAPPINGS

        unused = sorted(set(MAPPINGS) - set(ops))
        print(f"\nTFLite operators aot maps that no graph used ({len(unused)}): {', '.join(unused)}")
        return
    gaps = coverage_gaps(ops)
    print(f"\nONNX ops aot registers that no graph used ({len(gaps)}): {', '.join(gaps)}")


def reduce_failures(args, outcomes: dict[int, Outcome]) -> None:
    os.makedirs(args.reduce_dir, exist_ok=True)
    kinds = ("wrong", "crash", "refused") if args.reduce_refused else ("wrong", "crash")
    bad = sorted(i for i, o in outcomes.items() if o.kind in kinds)
    with cf.ProcessPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(reduce_one, args.seed, i, args.target, args.max_nodes, args.reduce_dir): i
                   for i in bad}
        for fut in cf.as_completed(futures):
            try:
                print(f"graph {futures[fut]}: reduced to {fut.result()}")
            except Exception as err:      # noqa: BLE001 - report and go on with the others
                print(f"graph {futures[fut]}: reduction failed: {type(err).__name__}: {err}")


if __name__ == "__main__":
    sys.exit(main())
