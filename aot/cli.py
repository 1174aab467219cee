"""The `aot` command: a thin layer over the Python API. User errors print one line and exit 1."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aot import api, progress, text_table
from aot.build import build
from aot.data import shipped
from aot.errors import AotError, MismatchError, OptionError, RunError
from aot.knobs import load_knobs
from aot.reference import check_reference
from aot.target import all_targets, get_target, host_target_name, parse_size, target_text
from aot.version import __version__


def _shape_option(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.lower().split("x"))
        if any(d <= 0 for d in shape):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=DIMS (e.g. input=1x3x224x224)") from None
    return name, shape


def _freeze_option(text: str) -> tuple[str, str]:
    """NAME=VALUE; the value is parsed against the input's dtype and shape once the model is loaded."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=VALUE (e.g. sr=16000, mask=1,0,1 or x=x.npy)")
    return name, value


def _memory_option(text: str) -> dict[str, int]:
    """flash=SIZE,ram=SIZE and REGION=SIZE for the target's memory regions (checked by the build)."""
    limits = {}
    try:
        for item in text.split(","):
            kind, _, size = item.partition("=")
            kind = kind.strip()
            if kind.lower() in ("flash", "ram"):
                kind = kind.lower()
            elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kind):
                raise ValueError
            limits[kind] = parse_size(size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not flash=SIZE,ram=SIZE,REGION=SIZE (e.g. flash=1M,ram=256K "
                                         "or dtcm=64K)") from None
    return limits


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX or TFLite model file")
    p.add_argument("--target", default="host", help="target name from `aot targets`, or a target .toml file "
                   "(default: host)")
    _target_dir_option(p)
    _input_options(p)
    _knobs_option(p)


def _memory_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory", type=_memory_option, default={}, metavar="flash=SIZE,ram=SIZE,REGION=SIZE",
                   help="the device's memory (e.g. flash=1M,ram=256K; overrides the target's): over the RAM, the "
                   "leading layers run in row bands, at the cost of some MACs; the build fails if nothing fits. "
                   "REGION=SIZE resizes one of the target's memory regions (e.g. dtcm=64K)")


def _target_dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-dir", action="append", default=[], metavar="DIR",
                   help="look for target files (NAME.toml) in DIR before $AOT_TARGET_PATH and the targets "
                   "shipped with aot (repeatable)")


def _board_dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board-dir", action="append", default=[], metavar="DIR",
                   help="look for board files (NAME.toml) in DIR before $AOT_BOARD_PATH and the boards "
                   "shipped with aot (repeatable)")


def _input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", type=_shape_option, action="append", default=[], metavar="NAME=DIMS",
                   help="fix an input's dynamic dimensions, e.g. input=1x3x224x224 (repeatable)")
    p.add_argument("--tflite-arithmetic", choices=["litert", "tflite-micro"],
                   help="a TFLite model's integer arithmetic, bit for bit: LiteRT's reference kernels' (the "
                   "default) or TFLite Micro's (they differ in FULLY_CONNECTED's rounding); a model with an "
                   "integer LSTM or an int8-state SVDF has TFLite Micro's. Its reference is the same runtime")
    p.add_argument("--freeze", type=_freeze_option, action="append", default=[], metavar="NAME=VALUE",
                   help="make an input a constant of the build: a number, a comma list or a .npy file, "
                   "e.g. sr=16000 (repeatable); If and Loop nodes that depend on it fold")


def _knobs_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--knobs", metavar="FILE", help="TOML file overriding the target's schedule knobs "
                   "(tile sizes, simd; see the [knobs] table of `aot targets NAME`), and one kernel's schedule "
                   "in tables [node.NAME] or [workload.\"KEY\"] (keys: metadata.json's schedules)")
    p.add_argument("--records", metavar="FILE", help="tuning records (`aot tune -o FILE`): each workload "
                   "gets the best schedule measured for the target, the others the default")


def _knobs(args) -> dict | None:
    return load_knobs(args.knobs) if args.knobs else None


class _Parser(argparse.ArgumentParser):
    """An argument error is one line, naming the command and where its options are described (argparse
    prints the whole usage first, often six lines before the one that matters)."""

    def error(self, message: str):
        prog = self.prog
        command = next((a for a in getattr(self, "given", sys.argv[1:]) if not a.startswith("-")), None)
        if prog == "aot" and command in _COMMANDS:        # an option the command's parser left over
            prog = f"aot {command}"
        self.exit(2, f"{self.prog}: error: {message} (see {prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aot", description="Ahead-of-time compiler from ONNX models to "
                                     "object files and C wrappers.")
    parser.add_argument("--version", action="version", version=f"aot {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="compile a model into DIR: NAME.o, NAME.h, NAME.c, plan.json, "
                       "metadata.json, report.txt, report.svg")
    _common(p)
    p.add_argument("-o", "--output", help="output directory (default: build/NAME)")
    p.add_argument("--name", help="C name prefix (default: the model's file name)")
    p.add_argument("--dump-graph", action="store_true", help="print the graph after import and after each pass")
    p.add_argument("--emit", metavar="STAGES", help="also write these stages, comma-separated, "
                   "into DIR: graph (NAME.graph.txt), kir (NAME.kir.txt: the kernels' loop IR), llvm (NAME.ll and "
                   "NAME.opt.ll: LLVM IR before and after optimization), asm (NAME.s)")
    p.add_argument("--quantize", metavar="DATA", help="quantize the float model first (aot quantize, on this "
                   "calibration data) and build the result; DIR gets NAME.quantized.onnx and its report too")
    p.add_argument("--scheme", choices=["int8", "a16w8"], help="with --quantize: int8 (default) or a16w8 "
                   "(int16 activations, int8 weights)")
    p.add_argument("--board", help="build for this board (`aot boards`, or a board .toml file): its target, and a "
                   "microcontroller's flash and RAM as the limits (--memory overrides them)")
    _board_dir_option(p)
    _memory_arg(p)

    p = sub.add_parser("run", help="build, run through the C entry point, compare with onnxruntime (or "
                       "--reference)")
    _common(p)
    p.add_argument("--inputs", help=".npz file with one array per model input (default: random, seed 0: "
                   "standard-normal floats, integers in [0, 4), random bools; pass real indices, ids and "
                   "masks here)")
    p.add_argument("--outputs", help="write the compiled model's outputs to this .npz file (with --reference "
                   "none, by default MODEL.outputs.npz in the current directory)")
    p.add_argument("--reference", default="onnxruntime", metavar="onnxruntime|onnx|litert|tflite-micro|none",
                   help="what to compare with: onnxruntime (default; a model it cannot load or run goes to "
                   "onnx.reference, and the output says so; for a TFLite model: litert, or tflite-micro for one "
                   "with an integer LSTM), onnx (onnx.reference), litert (LiteRT's reference kernels, a TFLite model's "
                   "reference), tflite-micro (TFLite Micro's, the tflite-micro package), or none (run and write the "
                   "outputs only). Outputs past the tolerance are arbitrated in float64 at the first diverging "
                   "node: where aot is the closer side, the run passes")
    p.add_argument("-o", "--output", help="keep the build in this directory")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--timeout", type=float, default=600.0, help="stop the program after this many seconds")
    p.add_argument("--bisect", action="store_true", help="also compare the intermediate tensors, node by node "
                   "in the model's order, and name the first node whose result is past the tolerance")
    p.add_argument("--json", metavar="FILE", help="with --bisect: write the table of nodes to this file")
    p.add_argument("--board", help="run on this microcontroller board (name or .toml file; its target is the "
                   "target): the firmware is loaded with its loader and run through its console")
    _board_dir_option(p)
    _memory_arg(p)

    p = sub.add_parser("targets", help="list the target configs, or show one")
    p.add_argument("name", nargs="?", help="show this target's whole config")
    _target_dir_option(p)

    p = sub.add_parser("bench", help="time models on a board over SSH (or locally) and check their outputs",
                       description="Times NAME_run with TVM time_evaluator's semantics: WARMUP untimed runs, "
                       "then REPEAT measurements, each the mean of NUMBER back-to-back runs; NUMBER grows until "
                       "one measurement lasts at least MIN_REPEAT_MS.")
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument("--board", action="append", default=[], help="board name or .toml file (repeatable)")
    p.add_argument("--target", help="without --board: run here, natively or under the target's emulator")
    _target_dir_option(p)
    _board_dir_option(p)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--number", type=int, default=1)
    p.add_argument("--min-repeat-ms", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", help="write every measurement and the check to this file")
    p.add_argument("--inputs", help=".npz file with one array per model input, timed and checked (default: "
                   "random, as `aot run`'s; real token ids and attention masks go here)")
    p.add_argument("--reference", default="onnxruntime", metavar="onnxruntime|onnx|litert|tflite-micro|none",
                   help="what the outputs are compared with, as for `aot run` (a mismatch is not arbitrated "
                   "here: `aot run` does that)")
    _memory_arg(p)
    p.add_argument("--build-dir", help="build here (and keep it) instead of a temporary directory")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust and record an unknown host key")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the remote program may take")
    p.add_argument("--profile", action="store_true", help="also time each kernel call (a build with the "
                   "wrapper's profiling hooks) and print a per-node table; on a qemu microcontroller board, each "
                   "kernel's estimated cycles")
    _input_options(p)
    _knobs_option(p)

    p = sub.add_parser("tune", help="measure candidate schedules per layer and log them as records for "
                       "--records", description="Cuts each distinct workload (a convolution's template, shapes "
                       "and type) out of the model and measures the schedules its template allows, alone: "
                       "timed on the host, under the target's emulator in cycles estimated for its core "
                       "(Cortex-M0+, M4, M7, M55) or in executed instructions, or timed on --board. Every candidate's "
                       "outputs must equal the default schedule's. One "
                       "JSON record per measurement is appended to -o as it ends; a second run with the same "
                       "file skips what is measured. Then: aot build MODEL --records FILE.")
    p.add_argument("model", help="ONNX or TFLite model file")
    p.add_argument("--target", default="host", help="target name or .toml file (default: host)")
    p.add_argument("--board", action="append", default=[], help="measure on this board (its target is the target): "
                   "a Linux board over SSH, or a microcontroller board through its loader and console; repeat it "
                   "for a farm of boards of one target, each measuring one candidate at a time")
    p.add_argument("-o", "--output", default="records.json", help="records file to append to "
                   "(default: records.json)")
    p.add_argument("--budget", default="10m", help="stop after this long, e.g. 90s, 10m, 1h (default 10m)")
    p.add_argument("--trials", type=int, help="at most this many measurements per workload")
    p.add_argument("--jobs", type=int, help="measurements at once (default: 2 under an emulator, 1 when timing)")
    p.add_argument("--unit", choices=["cycles", "instructions"], help="under an emulator, rank schedules by "
                   "cycles estimated for the core (the default on the Cortex-M0+, M4, M7 and M55) or by instructions")
    p.add_argument("--search", choices=["climb", "random"], default="climb", help="climb: from the default "
                   "schedule to better neighbours (default); random: the space in a shuffled order")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust and record an unknown host key")
    _target_dir_option(p)
    _board_dir_option(p)
    _input_options(p)
    p.add_argument("--knobs", metavar="FILE", help="TOML file overriding the target's knobs for the untuned "
                   "parts")

    p = sub.add_parser("quantize", help="quantize a float model to int8 (or int16 activations) QDQ with "
                       "onnxruntime's quantizer on your calibration data, and report the error it costs")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True, help="the quantized model to write (the report goes beside it: "
                   "OUT.quantize_report.txt and .json)")
    data = (".npz with one array per model input, samples on the first axis; a directory of .npz/.npy files, one "
            "sample each; ONNX test sets (test_data_set_*/input_N.pb); or a directory of images (--preprocess)")
    p.add_argument("--calibration", metavar="DATA", help=data)
    p.add_argument("--preprocess", metavar="SPEC", help="how images become the input, as the model was trained: "
                   "mean=0.485,0.456,0.406,std=0.229,0.224,0.225,layout=nchw,size=224x224,scale=1/255 (left out: "
                   "mean 0, std 1, the input's layout and size, pixels scaled to [0, 1])")
    p.add_argument("--allow-random", action="store_true", help="without --calibration, calibrate on random data "
                   "(the report warns: the scales then fit noise)")
    p.add_argument("--scheme", default="int8", choices=["int8", "a16w8"], help="int8: int8 activations and "
                   "weights (default); a16w8: symmetric int16 activations and int8 weights, for models int8 "
                   "activations lose too much on (audio, regression)")
    p.add_argument("--int16", action="append", default=[], metavar="NODE|OP", help="int16 activations for this "
                   "node, or every node of this op type, in an int8 model (repeatable)")
    p.add_argument("--auto-precision", type=float, metavar="DB", help="promote the layers that lose the most "
                   "to int16 activations, a few at a time, until every output's SQNR reaches DB")
    p.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"],
                   help="onnxruntime's calibration method (default minmax)")
    p.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor (default: per channel)")
    p.add_argument("--exclude", action="append", default=[], metavar="NODE|OP",
                   help="keep this node, or every node of this op type, in float (repeatable)")
    p.add_argument("--input-shape", type=_shape_option, action="append", default=[], metavar="NAME=DIMS",
                   help="fix an input's symbolic dimensions, e.g. input=1x3x224x224 (repeatable)")
    p.add_argument("--freeze", type=_freeze_option, action="append", default=[], metavar="NAME=VALUE",
                   help="make an input a constant before quantizing: a number, a comma list or a .npy file "
                   "(repeatable)")
    p.add_argument("--eval", metavar="DATA", help="held-out samples the report compares the two models on "
                   "(default: the first calibration samples); same forms as --calibration")
    p.add_argument("--labels", metavar="FILE", help="the class of each --eval sample (.npy of integers, or a "
                   "text file of one per line): the report adds the accuracy of both models")
    p.add_argument("--target", help="also build the result for this target and report its flash and RAM")
    _target_dir_option(p)

    p = sub.add_parser("boards", help="list the board configs, or show or check one")
    p.add_argument("name", nargs="?")
    p.add_argument("--check", action="store_true", help="connect and compare the board's `uname -m` with its target")
    p.add_argument("--accept-new-host-key", action="store_true")
    _board_dir_option(p)
    _target_dir_option(p)

    p = sub.add_parser("validate", help="run a model over a data set on a target or board and measure every "
                       "output against the reference: l2r, cosine, MAE, RMSE, max abs error, top-1 agreement")
    _common(p)
    p.add_argument("--inputs", required=True, metavar="DATA", help="the samples: an .npz with one array per input, "
                   "the samples on the first axis; a directory of .npz/.npy files, one sample each; or ONNX test "
                   "sets (test_data_set_*/input_N.pb)")
    p.add_argument("--limit", type=int, metavar="N", help="the first N samples only")
    p.add_argument("--board", help="run on this board, built for its target: a microcontroller board flashed once, "
                   "the inputs sent over its console, within its memory; or a Linux board over SSH")
    _board_dir_option(p)
    p.add_argument("--reference", default="onnxruntime", choices=["onnxruntime", "onnx"],
                   help="what to compare with (default onnxruntime; onnx: onnx.reference)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one sample may take (default 600)")
    _memory_arg(p)

    p = sub.add_parser("schema", help="print the JSON Schema of target files or board files, for an editor to "
                       "complete and check them with")
    p.add_argument("kind", choices=["target", "board"])

    p = sub.add_parser("example", help="copy an example shipped with aot into DIR (firmware: a bare-metal "
                       "application around a build, see the README's \"Into a firmware\")")
    p.add_argument("example", choices=sorted(EXAMPLES))
    p.add_argument("dir", type=Path, help="where to copy it (made if missing; no file there is overwritten)")
    for command in sub.choices.values():
        command.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (errors still)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    parser.given = sys.argv[1:] if argv is None else argv     # what error() reads the command from
    args = parser.parse_args(argv)
    try:
        with progress.reporting(quiet=args.quiet):
            return _COMMANDS[args.command](args)
    except AotError as err:
        print(f"aot: error: {_printable(str(err), keep_lines=isinstance(err, RunError))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:             # `aot targets | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def entry() -> None:
    """The `aot` command. After a build, whose files are written and closed and which leaves nothing to
    clean up, the process ends without tearing the interpreter down (freeing a large model's kernels
    object by object took a quarter of a second); other commands may leave temporary directories to
    their finalizers, and exit as usual."""
    code = main()
    if sys.argv[1:2] == ["build"]:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:         # `aot build ... | head -0`: the reader left
            code = code or 141
        os._exit(code)
    sys.exit(code)


def _printable(text: str, keep_lines: bool) -> str:
    """The message with control characters escaped (\\n, \\x1b), so that a name from a model cannot
    split the error line or drive the terminal; a RunError keeps the lines of the tool output it quotes."""
    def shown(c: str) -> str:
        return c if c.isprintable() or (keep_lines and c == "\n") else c.encode("unicode_escape").decode()
    return "".join(map(shown, text))


def _shapes(args) -> dict[str, tuple[int, ...]]:
    return dict(args.input_shape)


def _freeze(args) -> dict[str, str]:
    frozen: dict[str, str] = {}
    for name, value in args.freeze:
        if name in frozen and frozen[name] != value:
            raise OptionError(f"--freeze {name} is given twice, as {frozen[name]} and {value}")
        frozen[name] = value
    return frozen


def _quantize(args) -> int:
    from aot.quantize import quantize, quantize_to

    options = dict(calibration=args.calibration, method=args.method, per_channel=not args.per_tensor,
                   exclude=tuple(args.exclude), allow_random=args.allow_random, scheme=args.scheme,
                   int16=tuple(args.int16), input_shapes=_shapes(args), evaluation=args.eval, labels=args.labels,
                   target=get_target(args.target, args.target_dir) if args.target else None,
                   preprocess=args.preprocess, freeze=_freeze(args))
    if args.auto_precision is not None:
        report = quantize_to(args.model, args.output, args.auto_precision, **options)
    else:
        report = quantize(args.model, args.output, **options)
    print(report.text(), end="")
    print(f"wrote {args.output} and its report {Path(args.output).with_suffix('')}.quantize_report.txt")
    return 0


def _build(args) -> int:
    def dump(name, graph) -> None:
        print(f"# after {name}\n{graph.dump()}\n")

    start = time.perf_counter()
    if args.scheme and not args.quantize:
        raise OptionError("--scheme chooses how --quantize quantizes: give --quantize DATA too")
    board, memory = None, args.memory
    if args.board:
        from aot.boards import load_board
        from aot.device.board import DeviceBoard

        board = load_board(args.board, args.board_dir)
        if isinstance(board, DeviceBoard):
            memory = board.build_memory(args.memory)
    target = get_target(board.target if board else args.target, args.target_dir)
    with tempfile.TemporaryDirectory() as tmp:
        model, name = args.model, args.name
        if args.quantize:       # the float model quantized first, built under the float model's name
            from aot.quantize import quantize

            name = name or Path(args.model).stem
            model = Path(tmp) / f"{name}.quantized.onnx"
            report = quantize(args.model, model, args.quantize, scheme=args.scheme or "int8",
                              input_shapes=_shapes(args), freeze=_freeze(args))
            worst = min(report.outputs, key=lambda o: o.sqnr_db)
            print(f"quantized {report.model} ({report.scheme}): output {worst.output} SQNR {worst.sqnr_db:.1f} dB "
                  f"against the float model on {report.compared} calibration sample(s)")
        # the quantized model and its report go beside the build, written and owned with it
        extra = {made.name: made.read_bytes() for made in Path(tmp).iterdir()} if args.quantize else {}
        artifact = build(model, target=target, out_dir=args.output, name=name, input_shapes=_shapes(args),
                         memory=memory, on_pass=dump if args.dump_graph else None, knobs=_knobs(args),
                         freeze={} if args.quantize else _freeze(args), records=args.records, emit=args.emit,
                         extra_files=extra, tflite_arithmetic=args.tflite_arithmetic)
    plan = artifact.plan
    split = " + ".join(f"{r['name']} {r['size']:,}" for r in plan.get("regions", ()))
    peak = (f"{plan['lower_bound']:,} live at the busiest step, less where results take their inputs' place"
            if plan["workspace_size"] < plan["lower_bound"] else f"{plan['lower_bound']:,} live at the busiest step")
    where = f"board {board.name} ({artifact.target.name})" if board else artifact.target.name
    print(f"built {artifact.dir}/ for {where} in {time.perf_counter() - start:.2f} s: "
          f"{artifact.name}.o {artifact.object.stat().st_size:,} bytes, workspace {plan['workspace_size']:,} "
          f"bytes{f' ({split})' if split else ''} ({peak}); "
          f"flash {artifact.metadata['memory']['flash']:,}, "
          f"RAM {artifact.metadata['memory']['ram']:,} bytes")
    missing = artifact.metadata["library"].get("missing")
    if missing:
        print(f"note: no {artifact.name}.a ({missing}): install the target's toolchain to have the library",
              file=sys.stderr)
    return 0


def _npz_inputs(path: str | None) -> dict[str, np.ndarray] | None:
    """--inputs FILE.npz: one array per model input."""
    if not path:
        return None
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise OptionError(f"--inputs {path}: cannot read it as .npz: {err}") from None


def _run(args) -> int:
    inputs = _npz_inputs(args.inputs)
    board = api.device_board(args.board, args.board_dir) if args.board else None
    target = get_target(board.target if board else args.target, args.target_dir)
    if args.json and not args.bisect:
        raise OptionError("--json writes the table of --bisect: give --bisect too")
    check_reference(args.reference)
    if args.bisect:
        if board:
            raise OptionError("--bisect runs the model node by node under the target's emulator here; drop --board "
                              f"and give --target {target.name}")
        return _bisect(args, inputs, target)
    result = api.check(args.model, inputs=inputs, target=target, input_shapes=_shapes(args),
                       out_dir=args.output, seed=args.seed, timeout=args.timeout, knobs=_knobs(args),
                       freeze=_freeze(args), memory=args.memory, records=args.records, reference=args.reference,
                       board=board, tflite_arithmetic=args.tflite_arithmetic)
    model = os.path.basename(str(args.model))
    where = f"board {board.name} ({target.name})" if board else target.name
    if not result.compared:
        return _run_only(args, result, model, where)
    if args.outputs:
        _save_outputs(args.outputs, result.outputs)
    _say_fallback(result.fallback_reason)
    ref = _reference_name(result.reference_used)
    print(f"{model} on {where} vs {ref}:")
    for c in result.comparisons:
        status = "ok" if c.ok else "MISMATCH" + (": arbitrated below" if result.arbitration else "")
        quantized = (f"; {c.off_by_one} of {c.size} elements one quantization step ({c.step:.3g}) off"
                     if c.step else "")
        print(f"  {c.output}: max abs error {c.max_abs:.3g} (output scale {c.scale:.3g}), "
              f"max rel error {c.max_rel:.3g}{quantized}{c.unmatched_text(ref)}: {status}")
    if result.arbitration is not None:
        _print_arbitration(result.arbitration)
    if not result.ok:
        raise MismatchError(_mismatch_message(ref, result.arbitration, result.not_arbitrated))
    return 0


def _reference_name(used: str) -> str:
    return "onnx.reference" if used == "onnx" else used


def _say_fallback(reason: str) -> None:
    if reason:
        print(f"note: onnxruntime cannot run the model ({_printable(reason, keep_lines=False)}); "
              "the reference is onnx.reference instead")


def _save_outputs(path: str, outputs: dict[str, np.ndarray]) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **outputs)
    except OSError as err:
        raise OptionError(f"--outputs {path}: cannot write it: {err.strerror or err}") from None


def _run_only(args, result, model: str, target: str) -> int:
    """--reference none: the outputs written and described, nothing compared."""
    path = args.outputs or f"{Path(str(args.model)).stem}.outputs.npz"
    _save_outputs(path, result.outputs)
    print(f"{model} on {target}: run, not compared (--reference none); outputs written to {path}")
    for name, value in result.outputs.items():
        stats = (f", min {np.min(value):.4g}, max {np.max(value):.4g}" if value.size and value.dtype.kind in "fiu"
                 else "")
        print(f"  {_printable(name, keep_lines=False)}: {value.dtype} {list(value.shape)}{stats}")
    return 0


def _print_arbitration(arbitration) -> None:
    from aot.arbitrate import lines

    print(f"arbitration in float64 (node by node, from the first node whose result differs from "
          f"{_reference_name(arbitration.reference)}'s):")
    for line in lines(arbitration):
        print(f"  {_printable(line, keep_lines=False)}")


def _mismatch_message(ref: str, arbitration, not_arbitrated: str) -> str:
    wrong = arbitration.wrong if arbitration is not None else None
    if wrong is not None and not wrong.unevaluated:
        return (f"outputs differ from {ref} beyond the tolerance, and at node '{wrong.node}' ({wrong.op}) "
                f"{ref} is closer to the float64 value: aot is wrong there")
    if wrong is not None:
        return (f"outputs differ from {ref} beyond the tolerance from node '{wrong.node}' ({wrong.op}) on, "
                f"which could not be arbitrated: {wrong.unevaluated}")
    why = f" (not arbitrated: {not_arbitrated})" if not_arbitrated else ""
    if ref == "litert":
        return (f"outputs differ from {ref} beyond the tolerance (bit for bit where TFLite's integer arithmetic "
                f"made them, else 1e-4 of the output's scale){why}")
    return (f"outputs differ from {ref} beyond the tolerance (1e-4 of the output's scale, or one quantization "
            f"step for quantized outputs){why}")


def _bisect(args, inputs, target) -> int:
    from aot.bisect import bisect, summary, table, write_json

    result = bisect(args.model, inputs=inputs, target=target, input_shapes=_shapes(args), out_dir=args.output,
                    seed=args.seed, timeout=args.timeout, knobs=_knobs(args), freeze=_freeze(args),
                    memory=args.memory, records=args.records, reference=args.reference)
    if args.outputs:
        _save_outputs(args.outputs, result.outputs)
    if args.json:
        write_json(result, args.json)
    _say_fallback(result.fallback_reason)
    ref = _reference_name(result.reference)
    print(f"{os.path.basename(str(args.model))} on {target.name} vs {ref}, node by node "
          "(steps: quantization steps; tolerance 1e-4 of a tensor's largest magnitude, or one step):")
    for line in table(result):
        print(f"  {_printable(line, keep_lines=False)}")
    for name in result.reference_changed:
        print(f"note: {ref}'s output '{name}' changed once intermediate tensors were made outputs too "
              "(its graph fusions differ); the table compares with that run")
    print(_printable(summary(result), keep_lines=False))
    if result.ok:
        return 0
    from aot.arbitrate import arbitrate, to_json

    arbitration = arbitrate(result)
    if args.json:
        write_json(result, args.json, {"arbitration": to_json(arbitration)})
    _print_arbitration(arbitration)
    if not arbitration.ok:
        first = result.first
        wrong = arbitration.wrong
        verdict = (f"; in float64 {ref} is closer at node '{wrong.node}': aot is wrong there"
                   if wrong is not None and not wrong.unevaluated else "")
        raise MismatchError(f"intermediate tensors differ from {ref} beyond the tolerance from node "
                            f"'{first.node}' on (its tensor is computed by aot's kernel for '{first.kernel}')"
                            f"{verdict}")
    return 0


def _tune(args) -> int:
    from aot.boards import load_board
    from aot.device.board import DeviceBoard
    from aot.tune import parse_budget, tune

    if args.trials is not None and args.trials < 1:
        raise OptionError(f"--trials must be at least 1, not {args.trials}")
    if args.jobs is not None and args.jobs < 1:
        raise OptionError(f"--jobs must be at least 1, not {args.jobs}")
    budget = parse_budget(args.budget)
    from aot.tune import Method, emulated_method

    boards = [load_board(b, args.board_dir) for b in args.board]
    target = get_target(boards[0].target if boards else args.target, args.target_dir)
    results = tune(args.model, target, boards or None, args.output, budget, args.trials, args.jobs, _shapes(args),
                   _freeze(args), _knobs(args), args.accept_new_host_key, search=args.search,
                   report=lambda line: print(f"aot: {line}", file=sys.stderr), unit=args.unit,
                   tflite_arithmetic=args.tflite_arithmetic)
    if boards:
        unit = Method("device" if isinstance(boards[0], DeviceBoard) else "time", boards[0]).unit
    else:
        unit = emulated_method(target, args.unit).unit if target.run_command else "ms"
    rows = [("workload", "nodes", "trials", f"default {unit}", f"best {unit}", "best/default", "best schedule")]
    before = after = 0.0
    for r in results:
        if r.default_cost is None:
            rows.append((r.key, str(len(r.nodes)), str(r.trials), "failed", "-", "-", "-"))
            continue
        before += r.default_cost * len(r.nodes)
        after += r.best_cost * len(r.nodes)
        rows.append((r.key, str(len(r.nodes)), str(r.trials), f"{r.default_cost:.4g}", f"{r.best_cost:.4g}",
                     f"{r.best_cost / r.default_cost:.3f}", r.best.tag))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if before:
        print(f"tuned kernels in all: {after:.4g} {unit} against {before:.4g} by default "
              f"({after / before:.3f}); records in {args.output}: aot build {args.model} --records {args.output}")
    return 0


def _bench(args) -> int:
    from aot.bench import bench
    from aot.boards import load_board

    check_reference(args.reference)
    boards = [load_board(b, args.board_dir) for b in args.board] or [None]
    if len({b.name for b in boards if b is not None}) < len(args.board):
        raise OptionError("--board names a board twice")
    if args.build_dir and len(args.models) * len(boards) > 1:
        raise OptionError("--build-dir keeps one build: give one model and one board with it")
    target = None if args.board else get_target(args.target or "host", args.target_dir)   # else the board's
    options = dict(target=target, target_dirs=args.target_dir, repeat=args.repeat, number=args.number,
                   min_repeat_ms=args.min_repeat_ms, warmup=args.warmup, build_dir=args.build_dir,
                   timeout=args.timeout, accept_new_host_key=args.accept_new_host_key, knobs=_knobs(args),
                   profile=args.profile, input_shapes=_shapes(args), freeze=_freeze(args), memory=args.memory,
                   records=args.records, reference=args.reference, tflite_arithmetic=args.tflite_arithmetic,
                   inputs=_npz_inputs(args.inputs))
    if len(boards) > 1 and all(b is not None for b in boards):
        # a farm: the boards work at once, each on its own queue of models, one measurement at a time
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=len(boards)) as pool:
            queues = [pool.submit(_bench_queue, args.models, board, options) for board in boards]
            per_board = [q.result() for q in queues]
        results = [per_board[j][i] for i in range(len(args.models)) for j in range(len(boards))]
    else:
        results = [bench(model, board=board, **options) for model in args.models for board in boards]
    timed = [r for r in results if r.device is None]
    if timed:
        rows = [("model", "board", "target", "number", "min ms", "median ms", "mean ms", "p90 ms", "stddev ms",
                 "check")]
        for r in timed:
            s = r.stats
            rows.append((r.model, r.where, r.target + (" (emulated)" if r.emulated else ""), str(r.number),
                         *(f"{v:.4f}" for v in (s.min, s.median, s.mean, s.p90, s.stddev)), _check(r)))
        _table(rows)
        if any(r.emulated for r in timed):
            print("(emulated: times come from an emulator and are not the device's real-time latency)")
    _print_device_results([r for r in results if r.device is not None])
    for r in results:
        if r.fallback_reason:
            print(f"note: {r.model}: onnxruntime cannot run it ({_printable(r.fallback_reason, keep_lines=False)}); "
                  "its outputs were compared with onnx.reference")
    for r in results if args.profile else ():
        _print_profile(r)
    if args.json:
        _write_json(args.json, results)
    if not all(r.ok for r in results):
        raise MismatchError("outputs differ from the reference beyond the tolerance (`aot run MODEL` arbitrates "
                            "in float64 which side is right)")
    return 0


def _bench_queue(models: list[str], board, options: dict) -> list:
    """One board's share of a farm: its models in turn."""
    from aot.bench import bench

    return [bench(model, board=board, **options) for model in models]


def _check(r) -> str:
    if r.reference == "none":
        return "not compared"
    return ("ok" if r.ok else "MISMATCH") + (" (vs onnx.reference)" if r.reference == "onnx" else "")


def _print_device_results(results) -> None:
    """Microcontroller boards: each run counted, in cycles (and µs at the board's clock) or, under qemu,
    in instructions, never shown as time."""
    from aot.run.cycles import ESTIMATE

    for unit in ("cycles", "instructions (emulated)"):
        group = [r for r in results if r.device.unit == unit]
        if not group:
            continue
        short = "cycles" if unit == "cycles" else "insns"
        head = ("model", "board", "target", "runs", f"min {short}", f"median {short}", f"p90 {short}", f"max {short}")
        head += ("median µs", "MHz") if unit == "cycles" else ("kernel insns", "est. kernel cycles", "est. µs", "MHz")
        rows = [head + ("timer", "check")]
        for r in group:
            d = r.device
            row = (r.model, r.where, r.target, str(len(d.per_run)),
                   *(f"{v:,.0f}" for v in (d.stats.min, d.stats.median, d.stats.p90, d.stats.max)))
            row += (f"{d.micros.median:,.1f}", f"{d.clock_hz / 1e6:g}") if unit == "cycles" else (
                f"{d.kernel_instructions:,}" if d.kernel_instructions is not None else "-",
                f"{d.estimated_cycles:,}" if d.estimated_cycles is not None else "-",
                f"{d.estimated_micros:,.1f}" if d.estimated_micros is not None else "-", f"{d.clock_hz / 1e6:g}")
            rows.append(row + (d.timer, _check(r)))
        _table(rows)
        if unit != "cycles":
            print("(emulated: qemu counts instructions, one per virtual nanosecond, not cycles or time; the timer "
                  "counts the whole run call, kernel insns the model's kernels alone; est. kernel cycles and µs are "
                  f"an estimate, not a measurement: {ESTIMATE}; - where the core has no model or llvm-19 is missing)")
    for r in results:
        if r.device.timer_note:
            print(f"note: {r.where}: {r.device.timer_note}")


def _print_profile(result) -> None:
    """A profiled run's per-kernel table: timed, or on an emulated microcontroller in estimated cycles."""
    from aot.bench import kernel_table
    from aot.run.cycles import ESTIMATE

    if result.cycle_profile:
        steps = result.cycle_profile
        what = f"estimated cycles per run (sum {sum(s.cycles for s in steps):,}; an estimate: {ESTIMATE})"
    else:
        steps = result.profile
        what = f"mean ms per run (sum {sum(s.ms for s in steps):.4f} ms; the hooks' clock reads are included)"
    print(f"\n{result.model} on {result.where} ({result.target}): per kernel call, {what}")
    print(kernel_table(steps))


def _write_json(path: str, results) -> None:
    import json

    from aot.codegen.llvm import llvm_version

    data = {"aot": __version__, "llvm": llvm_version(), "results": [
        {"model": r.model, "model_sha256": r.model_sha256, "board": r.where, "target": r.target,
         "emulated": r.emulated, "number": r.number, "repeat_ms": r.times_ms,
         "stats_ms": dataclasses.asdict(r.stats) if r.device is None or r.times_ms else None,
         "reference": r.reference,
         "check": [{"output": c.output, "max_abs": c.max_abs, "scale": c.scale, "ok": c.ok} for c in r.comparisons],
         "profile": [dataclasses.asdict(step) for step in r.profile],
         "estimated_cycles_profile": [dataclasses.asdict(step) for step in r.cycle_profile],
         **({"device": _device_json(r.device)} if r.device is not None else {})}
        for r in results]}
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def _device_json(d) -> dict:
    """A microcontroller's figures: each run in its unit, statistics, the clock and the counter."""
    micros = d.micros
    return {"unit": d.unit, "per_run": d.per_run, "stats": dataclasses.asdict(d.stats), "clock_hz": d.clock_hz,
            "timer": d.timer, "timer_note": d.timer_note, "kernel_instructions": d.kernel_instructions,
            "estimated_kernel_cycles": d.estimated_cycles,
            **({"stats_us": dataclasses.asdict(micros)} if micros is not None else {})}


def _table(rows: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> None:
    sys.stdout.flush()
    text_table.show(rows, right)


def _boards(args) -> int:
    from aot.boards import all_boards, board_text, load_board
    from aot.device.board import DeviceBoard

    if not args.name:
        rows, skipped = [("name", "target", "address", "runner", "from")], []
        for b in all_boards(args.board_dir, skipped):
            if isinstance(b, DeviceBoard):
                where = b.console.url or "qemu UART socket"
                where += f" via {b.ssh.user}@{b.ssh.host}" if b.ssh else ""
                rows.append((b.name, b.target, where, f"{b.loader.tool} loader", b.origin))
            else:
                rows.append((b.name, b.target, f"{b.user}@{b.host}:{b.port}", " ".join(b.runner) or "-", b.origin))
        _table(rows)
        _say_skipped(skipped)
        return 0
    if not args.check:
        print(board_text(args.name, args.board_dir), end="")
        load_board(args.name, args.board_dir)       # the file shown, then what is wrong with it, if anything
        return 0
    board = load_board(args.name, args.board_dir)
    if isinstance(board, DeviceBoard):
        from aot.device.check import check_board

        for line in check_board(board, get_target(board.target, args.target_dir), args.accept_new_host_key):
            print(line)
        return 0
    from aot.remote.ssh import Session

    with Session(board, args.accept_new_host_key) as session:
        rc, out, err = session.run("uname -m", 30)
    machine = out.strip()
    want = get_target(board.target, args.target_dir).triple.split("-")[0]
    family = {"x86_64": "x86_64", "aarch64": "aarch64", "armv7a": "armv7", "thumbv7em": "arm"}.get(want, want)
    print(f"board {board.name}: connected, uname -m = {machine}")
    if board.runner:
        print(f"  programs run under '{' '.join(board.runner)}' (emulated {board.target})")
    elif not machine.startswith(family):
        raise OptionError(f"board {board.name}: its machine is {machine}, but its target {board.target} is {want}")
    else:
        print(f"  matches target {board.target} ({want})")
    return 0


def _targets(args) -> int:
    if args.name:
        print(target_text(args.name, args.target_dir), end="")
        return 0
    try:
        host = host_target_name(args.target_dir)
    except AotError:
        host = None
    rows, skipped = [("name", "triple", "cpu", "vector", "from", "description")], []
    for t in all_targets(args.target_dir, skipped):
        rows.append((t.name + (" (host)" if t.name == host else ""), t.triple, t.cpu, f"{t.vector_bits}-bit",
                     t.origin, t.description))
    _table(rows)
    _say_skipped(skipped)
    return 0


def _say_skipped(errors: list[str]) -> None:
    """The user files a listing left out, each with what is wrong with it."""
    for error in errors:
        print(f"aot: warning: skipped {error}", file=sys.stderr)


# The examples `aot example` copies out: each a folder shipped with aot, and what to do with it next.
EXAMPLES = {
    "firmware": ("examples/firmware", """next: build a model for it and configure the firmware around the build:
  aot build MODEL.onnx --target cortex-m4 --name model -o build/model
  python {dir}/make_input.py MODEL.onnx build/input.h
  cmake -S {dir} -B build/app -DMODEL_DIR=build/model -DINPUT_HEADER=build/input.h \\
        -DCMAKE_TOOLCHAIN_FILE="$PWD/build/model/toolchain.cmake"
  cmake --build build/app
  qemu-system-arm -M mps2-an386 -nographic -kernel build/app/firmware.elf     # Ctrl-A X quits"""),
}


def _example(args) -> int:
    folder, next_steps = EXAMPLES[args.example]
    source = shipped(*folder.split("/"))
    names = sorted(f.name for f in source.iterdir() if f.is_file() and not f.name.startswith((".", "__")))
    taken = [n for n in names if (args.dir / n).exists()]
    if taken:
        raise OptionError(f"{args.dir}: already holds {', '.join(taken)}, which the {args.example} example has "
                          f"too: copy it into an empty or new directory")
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        for n in names:
            with open(args.dir / n, "xb") as out:       # "x": never over a file that appeared meanwhile
                out.write((source / n).read_bytes())
    except OSError as err:
        raise OptionError(f"cannot copy the {args.example} example into {args.dir}: {err.strerror or err}") from None
    print(f"copied the {args.example} example into {args.dir}/: {', '.join(names)}")
    print(next_steps.format(dir=args.dir))
    return 0


def _validate(args) -> int:
    import json

    from aot.frontend.model import load
    from aot.validate import read_samples, table, validate

    if args.limit is not None and args.limit < 1:
        raise OptionError(f"--limit {args.limit}: give a positive number of samples")
    loaded = load(args.model, _shapes(args), tflite_arithmetic=args.tflite_arithmetic)
    samples = read_samples(args.inputs, loaded.proto, loaded.label, args.limit)
    with progress.task(f"running {loaded.label} on {len(samples)} samples", len(samples)) as advance:
        result = validate(args.model, samples, target=args.target, board=args.board, board_dirs=args.board_dir,
                          input_shapes=_shapes(args), knobs=_knobs(args), memory=args.memory, records=args.records,
                          reference=args.reference, timeout=args.timeout, on_sample=lambda _: advance(),
                          tflite_arithmetic=args.tflite_arithmetic)
    ref = _reference_name(result.reference)
    print(f"{result.model} on {result.where} vs {ref}, {result.samples} sample(s):")
    _table(table(result), right=tuple(range(1, 9)))
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2) + "\n")
    if not result.ok:
        worst = min(result.metrics, key=lambda m: m.within_tolerance)
        raise MismatchError(f"{result.model}: output '{worst.output}' of {worst.samples - worst.within_tolerance} "
                            f"sample(s) past the tolerance of aot run (arbitrate one: aot run {args.model} --inputs "
                            "with that sample)")
    return 0


def _schema(args) -> int:
    import json

    from aot.config_schema import published

    print(json.dumps(published(args.kind), indent=2))
    return 0


_COMMANDS = {"build": _build, "run": _run, "targets": _targets, "bench": _bench, "boards": _boards, "tune": _tune,
             "quantize": _quantize, "example": _example, "schema": _schema, "validate": _validate}


if __name__ == "__main__":
    sys.exit(main())
