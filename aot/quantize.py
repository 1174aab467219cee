"""`aot quantize`: a float ONNX model to integer QDQ with onnxruntime's quantizer, calibrated on the user's data,
and a report of what the quantization cost.

    aot quantize model.onnx --calibration DATA -o model_int8.onnx [--scheme int8|a16w8]
                            [--int16 NODE|OP ... | --auto-precision DB]
                            [--method minmax|entropy|percentile] [--per-tensor] [--exclude NODE|OP ...]
                            [--input-shape NAME=DIMS ...] [--freeze NAME=VALUE ...]
                            [--eval DATA [--labels FILE]] [--target T]
                            [--allow-random]

onnxruntime does the work (quant_pre_process, then get_qdq_config and quantize: QDQ, symmetric int8 weights,
per channel unless --per-tensor; activations int8 with a zero point, or with --scheme a16w8 symmetric int16 as
TFLite's 16x8 mode has them; --int16 promotes chosen nodes' activations to int16 in an int8 model, with
onnxruntime's mixed-precision overrides inserting the conversions). Softmax outputs get the fixed encodings
TFLite Micro expects (1/256 and zero point -128 in int8, 1/32768 in int16). aot reads the data as a user has
it, binds inputs to constants (--freeze) and fixes symbolic input dimensions (--input-shape) before
onnxruntime sees the model, and measures the result.

Data (--calibration, --eval): .npz files, directories of .npz/.npy files, ONNX test sets, or images with
--preprocess (aot/calibration.py). Random data only with --allow-random, and the report says so.

The report (OUT.quantize_report.txt and .json beside the model) compares the quantized model with the float one,
both run by onnxruntime, on the --eval samples (else the first calibration samples): per model output, the
SQNR in dB, cosine similarity, relative L2 and max abs error, and for class scores the share of samples whose
top-1 class agrees (and with --labels the accuracy of each); per tensor inside the model its SQNR, worst first
(onnxruntime's qdq_loss_debug), with what to try; and with --target the flash and RAM of aot's build of it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from aot import progress, text_table
from aot.calibration import load_calibration, random_samples, read_labels
from aot.errors import ModelError, OptionError, first_line
from aot.frontend.onnx import freeze_inputs
from aot.frontend.tflite import is_tflite
from aot.version import __version__

METHODS = ("minmax", "entropy", "percentile")
SCHEMES = {"int8": "int8 activations", "a16w8": "int16 activations (symmetric), int8 weights"}
REPORT_SAMPLES = 32     # calibration samples the report runs through both models, at most
LAYERS_SHOWN = 10       # tensors the text report lists, worst first


@dataclass(frozen=True)
class OutputError:
    """What quantization did to one model output, over the samples compared."""
    output: str
    sqnr_db: float          # 10 log10(sum f^2 / sum (f - q)^2); inf when equal
    cosine: float
    relative_l2: float      # |f - q| / |f|
    max_abs: float
    top1_agreement: float | None = None     # class scores (batch x classes): samples whose top class agrees
    float_accuracy: float | None = None     # with --labels: top-1 accuracy of the float and quantized models
    quantized_accuracy: float | None = None


@dataclass(frozen=True)
class TensorError:
    """A tensor inside the model: its SQNR in the quantized model against the float one (error accumulated up to it)."""
    tensor: str
    node: str               # the node that computes it, and its op
    op: str
    sqnr_db: float


@dataclass(frozen=True)
class WeightError:
    """A weight tensor: the SQNR of its integer codes (dequantized) against the float weights they replace."""
    weight: str
    node: str               # the node that reads it
    sqnr_db: float


@dataclass(frozen=True)
class Footprint:
    """aot's build of the quantized model for a target, from its metadata."""
    target: str
    flash: int
    ram: int
    workspace: int
    float_kernels: tuple[str, ...]      # nodes left in float between Dequantize and Quantize


@dataclass(frozen=True)
class Report:
    model: str
    scheme: str
    method: str
    per_channel: bool
    excluded: tuple[str, ...]
    samples: int            # calibration samples
    random_calibration: bool
    outputs: tuple[OutputError, ...]
    tensors: tuple[TensorError, ...] = ()      # worst first
    int16: tuple[str, ...] = ()                 # nodes promoted to int16 activations (--int16)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    compared: int = 0                           # samples the figures are over
    held_out: bool = False                      # they are --eval samples, not calibration ones
    footprint: Footprint | None = None
    weights: tuple[WeightError, ...] = ()      # worst first
    auto_precision: dict | None = None          # --auto-precision: target dB, rounds, whether reached
    unbounded: tuple[str, ...] = ()             # nodes kept in float: a value of theirs has no int8 scale

    def text(self) -> str:
        weights = "per channel" if self.per_channel else "per tensor"
        lines = [f"quantized {self.model}: {self.scheme} QDQ, {SCHEMES[self.scheme]} (onnxruntime), {self.method} "
                 f"calibration on {self.samples} sample(s), weights {weights}"]
        if self.input_shapes:
            lines.append("input shapes fixed: " + ", ".join(f"{n}={'x'.join(map(str, s))}"
                                                           for n, s in self.input_shapes.items()))
        if self.auto_precision:
            a = self.auto_precision
            lines.append(f"--auto-precision {a['target_db']:g} dB: {'reached' if a['reached'] else 'NOT reached'} "
                         f"after {a['rounds']} round(s) promoting {len(self.int16)} node(s) to int16")
        if self.int16:
            lines.append(f"int16 activations (--int16): {', '.join(self.int16)}")
        if self.excluded:
            lines.append(f"kept in float: {', '.join(self.excluded)}")
        if self.unbounded:
            lines.append(f"kept in float, their values infinite or beyond {UNBOUNDED:g} (attention masks): "
                         f"{', '.join(self.unbounded)}")
        if self.random_calibration:
            lines.append("WARNING: calibrated on random data (--allow-random): the scales fit noise, not the "
                         "model's real inputs; the errors below say little about real accuracy")
        where = "held-out (--eval)" if self.held_out else "calibration"
        lines += ["", f"against the float model on {self.compared} {where} sample(s):"]
        rows = [("output", "SQNR dB", "cosine", "rel L2", "max abs", "top-1 agree")]
        rows += [(o.output, f"{o.sqnr_db:.2f}", f"{o.cosine:.5f}", f"{o.relative_l2:.4f}", f"{o.max_abs:.4g}",
                  f"{o.top1_agreement:.1%}" if o.top1_agreement is not None else "-") for o in self.outputs]
        lines += text_table.render(rows, right=(1, 2, 3, 4, 5)).splitlines()
        for o in self.outputs:
            if o.float_accuracy is not None:
                lines.append(f"  {o.output}: accuracy against the labels: float {o.float_accuracy:.1%}, "
                             f"quantized {o.quantized_accuracy:.1%}")
        if self.tensors:
            shown = self.tensors[:LAYERS_SHOWN]
            advice = ("--int16 on its node (int16 activations there) or --exclude (float)" if self.scheme == "int8"
                      else "--exclude on its node (float)")
            lines += ["", f"the {len(shown)} tensors with the lowest SQNR of {len(self.tensors)} (all in the .json): "
                      f"where one drops well below the tensors before it, try {advice}"]
            rows = [("tensor", "node", "op", "SQNR dB")] + [(t.tensor, t.node, t.op, f"{t.sqnr_db:.2f}") for t in shown]
            lines += text_table.render(rows, right=(3,)).splitlines()
        if self.weights:
            shown = self.weights[:LAYERS_SHOWN]
            lines += ["", f"the {len(shown)} weights with the lowest SQNR of {len(self.weights)} (int8 codes against "
                      "the float weights)"]
            rows = [("weight", "node", "SQNR dB")] + [(w.weight, w.node, f"{w.sqnr_db:.2f}") for w in shown]
            lines += text_table.render(rows, right=(2,)).splitlines()
        if self.footprint is not None:
            f = self.footprint
            lines += ["", f"aot build for {f.target}: flash {f.flash:,} bytes, RAM {f.ram:,} bytes "
                      f"(workspace {f.workspace:,})"]
            if f.float_kernels:
                lines.append(f"  in float between Dequantize and Quantize: {', '.join(f.float_kernels)}")
        return "\n".join(lines) + "\n"


def quantize(model_path: str | Path, out: str | Path, calibration: str | Path | None = None,
             method: str = "minmax", per_channel: bool = True, exclude: tuple[str, ...] = (),
             allow_random: bool = False, scheme: str = "int8", int16: tuple[str, ...] = (),
             input_shapes: dict[str, tuple[int, ...]] | None = None, evaluation: str | Path | None = None,
             labels: str | Path | None = None, target=None, preprocess: str | None = None,
             freeze: dict | None = None) -> Report:
    """Quantize `model_path` to `out` (QDQ) and write the report beside it; see the module docstring. `target`
    (a name or a Target) adds the footprint of aot's build of the result."""
    model_path, out = Path(model_path), Path(out)
    _check_options(method, scheme, int16, labels, evaluation)
    _check_outputs(model_path, out)
    with tempfile.TemporaryDirectory() as work:
        tmp = Path(work)
        model, float_path = _float_model(model_path, freeze, input_shapes, tmp)
        feeds = _feeds(model, model_path)
        dtypes = _dtypes(model)
        if calibration is None and not allow_random:
            raise OptionError(f"{model_path}: give --calibration DATA (an .npz of the inputs, samples on the first "
                              "axis, a directory of .npz/.npy files or ONNX test sets), or --allow-random to "
                              "calibrate on noise")
        samples = random_samples(feeds, dtypes) if calibration is None else \
            load_calibration(Path(calibration), feeds, "--calibration", preprocess, dtypes)
        compared = samples[:REPORT_SAMPLES] if evaluation is None else \
            load_calibration(Path(evaluation), feeds, "--eval", preprocess, dtypes)
        truth = read_labels(Path(labels), compared) if labels else None
        nodes, ops = _selection(model, exclude, "--exclude")
        promoted_nodes, promoted_ops = _selection(model, int16, "--int16")
        staged = tmp / "quantized.onnx"
        with progress.phase(f"calibrating {model_path.name} on {len(samples)} sample(s) and quantizing (onnxruntime)"):
            pre, promoted, unbounded = _onnxruntime_quantize(float_path, model_path, staged, samples, scheme,
                                                             method, per_channel, nodes, ops, promoted_nodes,
                                                             promoted_ops)
        with progress.phase(f"measuring the quantized model against the float one on {len(compared)} sample(s)"), \
                _quiet():
            outputs, tensors = _errors(model, float_path, staged, compared, tmp, truth)
        weights = _weight_errors(pre, onnx.load(str(staged)))
        footprint = _footprint(staged, target) if target else None
        report = Report(model_path.name, scheme, method, per_channel, tuple(sorted(nodes | ops)), len(samples),
                        calibration is None, outputs, tensors, tuple(sorted(promoted)), dict(input_shapes or {}),
                        len(compared), evaluation is not None, footprint, weights,
                        unbounded=tuple(sorted(unbounded)))
        out.parent.mkdir(parents=True, exist_ok=True)      # only once there is something to write
        _mark(staged)
        staged.replace(out)
    _write_report(report, out)
    return report


def _write_report(report: Report, out: Path) -> None:
    """OUT.quantize_report.txt and .json beside the quantized model."""
    _, text, data = _outputs(out)
    text.write_text(report.text())
    data.write_text(json.dumps(asdict(report), indent=1) + "\n")


MARK = "aot.quantize"       # metadata key of the models aot quantize writes: a later run may replace them


def _outputs(out: Path) -> tuple[Path, Path, Path]:
    """The quantized model and its two reports."""
    stem = Path(out).with_suffix("")
    return Path(out), Path(f"{stem}.quantize_report.txt"), Path(f"{stem}.quantize_report.json")


def _check_outputs(model_path: Path, out: Path) -> None:
    """Refuse, before any work, to write over a file aot quantize did not write: the model given, a file
    of the user's that has the output's name, or its reports' (an earlier run's outputs are replaced)."""
    for path in _outputs(out):
        if path.exists() and (path.resolve() == model_path.resolve() or not _ours(path)):
            raise OptionError(f"{path}: already exists and was not written by aot quantize; it replaces only "
                              "its own outputs: give another -o, or move the file")


def _ours(path: Path) -> bool:
    try:
        if path.suffix == ".onnx":
            model = onnx.load(str(path), load_external_data=False)
            return any(p.key == MARK for p in model.metadata_props)
        if path.suffix == ".json":
            return {"model", "scheme", "outputs"} <= set(json.loads(path.read_text()))
        return path.read_text().startswith("quantized ")
    except Exception:  # noqa: BLE001 - a file that cannot be read as ours is not ours
        return False


def _mark(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    model.metadata_props.add(key=MARK, value=__version__)
    onnx.save(model, str(path))


def _float_model(path: Path, freeze: dict | None, input_shapes: dict | None, tmp: Path) -> tuple[onnx.ModelProto, Path]:
    """The float model as onnxruntime calibrates it and the report compares against: inputs bound to constants
    (--freeze, as `aot build --freeze` binds them) and symbolic dimensions fixed (--input-shape), written to
    `tmp` where either changed it; refused in one line if onnxruntime cannot load it."""
    model, float_path = _load(path), path
    if freeze:
        model = freeze_inputs(model, freeze, path.name)[0]
    if input_shapes:
        model = _fix_shapes(model, input_shapes, path)
    if freeze or input_shapes or _has_external_data(path):
        # onnxruntime's pre-processing copies the model elsewhere and loses weights kept beside it (the
        # dynamo exporter's FILE.onnx.data): a model under protobuf's 2 GB goes to it whole
        float_path = tmp / "float.onnx"
        if model.ByteSize() >= 2**31 - 2**20:
            raise OptionError(f"{path}: {model.ByteSize() / 2**30:.1f} GB with its weights: aot quantize takes "
                              "models under 2 GB (one protobuf file)")
        onnx.save(model, float_path)
    _check_loads(float_path, path)
    return model, float_path


def _onnxruntime_quantize(float_path: Path, model_path: Path, staged: Path, samples: list[dict], scheme: str,
                          method: str, per_channel: bool, nodes: set[str], ops: set[str], promoted_nodes: set[str],
                          promoted_ops: set[str]) -> tuple[onnx.ModelProto, set[str]]:
    """onnxruntime's pre-processing and quantizer, writing `staged`: the pre-processed float model (the
    weights the int8 codes stand for) and the nodes --int16 promoted in it. Its failures are one line."""
    from onnxruntime.quantization import QuantType, get_qdq_config
    from onnxruntime.quantization import quantize as ort_quantize
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre_path = staged.with_name("pre.onnx")
    try:
        quant_pre_process(str(float_path), str(pre_path), skip_symbolic_shape=True)
    except Exception as err:
        raise ModelError(f"{model_path}: onnxruntime's quant_pre_process failed: {first_line(err)}") from None
    pre = onnx.load(str(pre_path))
    unbounded = _unbounded(pre, pre_path, samples[:UNBOUNDED_SAMPLES])
    wide = scheme == "a16w8"
    activations = QuantType.QInt16 if wide else QuantType.QInt8
    promoted = _promoted(pre, promoted_nodes, promoted_ops)
    try:
        config = get_qdq_config(
            str(pre_path), _Reader(samples), calibrate_method=_method(method), activation_type=activations,
            weight_type=QuantType.QInt8, activation_symmetric=wide, weight_symmetric=True, per_channel=per_channel,
            tensor_quant_overrides=_overrides(pre, activations, wide, promoted),
            keep_removable_activations=bool(promoted),      # a signed int16 range would not clamp for Relu
            op_types_to_quantize=sorted({n.op_type for n in pre.graph.node} - ops),
            nodes_to_exclude=sorted(nodes | unbounded))
        with _quiet():
            ort_quantize(str(pre_path), str(staged), config)
    except Exception as err:    # onnxruntime's own failures: one line naming the model
        raise ModelError(f"{model_path}: onnxruntime's quantizer failed: {first_line(err)}") from None
    return pre, promoted, unbounded


# A tensor holding values this large (or infinite, or NaN) has no int8 scale: the masks attention adds
# (-inf, or float32's lowest, where a token is padding) would take every other value to one code.
UNBOUNDED = 1e30
UNBOUNDED_SAMPLES = 4       # calibration samples run to find them


def _unbounded(pre: onnx.ModelProto, pre_path: Path, samples: list[dict]) -> set[str]:
    """The nodes that read or write a float tensor with a value no int8 scale covers (UNBOUNDED), in the
    constants or in the activations of a few calibration samples: they stay in float."""
    from onnxruntime.quantization import qdq_loss_debug as debug

    def bad(array) -> bool:
        array = np.asarray(array)
        return array.dtype.kind == "f" and array.size > 0 and not bool(np.all(np.abs(array) < UNBOUNDED))

    names = {t.name for t in pre.graph.initializer if bad(onnx.numpy_helper.to_array(t))}
    augmented = pre_path.with_name("pre_tensors.onnx")
    debug.modify_model_output_intermediate_tensors(str(pre_path), str(augmented))
    with _quiet():
        activations = debug.collect_activations(str(augmented), iter(samples))
    names |= {name for name, arrays in activations.items() if any(bad(a) for a in arrays)}
    return {node.name for node in pre.graph.node if names & {*node.input, *node.output}}


class _Reader:
    """onnxruntime's calibration data reader over a list of samples."""

    def __init__(self, samples: list[dict[str, np.ndarray]]):
        self.batches = iter(samples)

    def get_next(self):
        return next(self.batches, None)


def _method(name: str):
    from onnxruntime.quantization import CalibrationMethod
    return {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile}[name]


@contextlib.contextmanager
def _quiet():
    """onnxruntime's calibrators print progress to stdout and its quantizer logs notes at WARNING (opset
    upgrades for int16, per-channel axes of 1-D weights): the report says what matters."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            # numpy's warnings from inside onnxruntime's calibration (a tensor of -inf masks, whose scale
            # onnxruntime computes even where the node stays in float)
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnxruntime\.")
            yield
    finally:
        logger.setLevel(level)


def _check_options(method: str, scheme: str, int16: tuple[str, ...], labels, evaluation) -> None:
    if method not in METHODS:
        raise OptionError(f"--method must be one of {', '.join(METHODS)}, not {method!r}")
    if scheme not in SCHEMES:
        raise OptionError(f"--scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    if int16 and scheme == "a16w8":
        raise OptionError("--int16 promotes nodes of an int8 model; with --scheme a16w8 every activation is "
                          "int16 already")
    if labels and evaluation is None:
        raise OptionError("--labels gives the classes of the --eval samples: give --eval DATA too")


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise OptionError(f"{path}: no such file")
    with open(path, "rb") as f:
        if is_tflite(f.read(8)):
            raise OptionError(f"{path}: a TFLite model: `aot quantize` quantizes ONNX models (a TFLite model is "
                              "quantized by its converter; aot build takes the quantized .tflite as it is)")
    try:
        return onnx.load(str(path))
    except Exception as err:        # onnx raises DecodeError and others: a file that is not a model
        raise ModelError(f"{path}: not an ONNX model ({err})") from None


def _has_external_data(path: Path) -> bool:
    """Whether the model keeps weights in files beside it (read without loading them)."""
    model = onnx.load(str(path), load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def _fix_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], path: Path) -> onnx.ModelProto:
    """The model with its inputs' dimensions set as --input-shape gives them (symbolic ones fixed, a static
    one only to its own value), shapes inferred again."""
    model = copy.deepcopy(model)
    inputs = {vi.name: vi for vi in model.graph.input}
    for name, dims in shapes.items():
        if name not in inputs:
            raise OptionError(f"--input-shape {name}: {path.name} has no input of that name "
                              f"(it has {', '.join(inputs)})")
        shape = inputs[name].type.tensor_type.shape
        if len(shape.dim) != len(dims):
            raise OptionError(f"--input-shape {name}: {len(dims)} dimensions given, the input has {len(shape.dim)}")
        for axis, (dim, value) in enumerate(zip(shape.dim, dims)):
            if dim.HasField("dim_value") and dim.dim_value != value:
                raise OptionError(f"--input-shape {name}: axis {axis} is {dim.dim_value} in the model, not {value}")
            dim.Clear()
            dim.dim_value = value
    del model.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as err:
        raise ModelError(f"{path}: shape inference with --input-shape failed: {first_line(err)}") from None


AUTO_ROUNDS = 8        # --auto-precision: quantizations tried at most


def quantize_to(model_path: str | Path, out: str | Path, target_db: float, **options) -> Report:
    """An int8 model whose outputs reach `target_db` of SQNR against the float model, if promoting layers to
    int16 activations gets there: quantized in int8, then again with the layers that lose the most (the
    largest drop of SQNR from their inputs to their output) in int16, a quarter of the rest more each round, until
    every output reaches the target or AUTO_ROUNDS quantizations were made. The report says how it went."""
    if options.get("scheme", "int8") != "int8" or options.pop("int16", ()):
        raise OptionError("--auto-precision chooses the int16 layers of an int8 model: drop --scheme a16w8 and "
                          "--int16")
    model = _load(Path(model_path))
    promoted: list[str] = []
    rounds = 0
    while True:
        report = quantize(model_path, out, int16=tuple(promoted), **options)
        rounds += 1
        reached = bool(min(o.sqnr_db for o in report.outputs) >= target_db)
        candidates = [] if reached else _worst_layers(model, report, set(promoted))
        if reached or not candidates or rounds == AUTO_ROUNDS:
            break
        promoted += candidates[:-(-len(candidates) // 4)]
    report = dataclasses.replace(report, auto_precision={"target_db": target_db, "rounds": rounds,
                                                         "reached": reached})
    _write_report(report, out)
    return report


def _worst_layers(model: onnx.ModelProto, report: Report, promoted: set[str]) -> list[str]:
    """Nodes of the float model not yet promoted, by how much SQNR their output loses against their inputs'
    (a BatchNormalization's tensor counts for the convolution it folds into), worst first."""
    producers = {out: node for node in model.graph.node for out in node.output}
    sqnr = {t.tensor: t.sqnr_db for t in report.tensors}
    drops: dict[str, float] = {}
    for t in report.tensors:
        node = producers[t.tensor]
        if node.op_type == "BatchNormalization" and node.input[0] in producers:
            node = producers[node.input[0]]
        inputs = [sqnr[i] for i in node.input if i in sqnr]
        drop = (min(inputs) if inputs else max(sqnr.values())) - t.sqnr_db
        if node.name not in promoted:
            drops[node.name] = max(drops.get(node.name, float("-inf")), drop)
    return sorted(drops, key=lambda name: (-drops[name], name))


def _check_loads(path: Path, model_path: Path) -> None:
    """onnxruntime must run the float model (it calibrates on it): refused here, in one line, if it cannot."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError(f"{model_path}: onnxruntime cannot load it, so cannot calibrate it: "
                         f"{first_line(err)}") from None


def _feeds(model: onnx.ModelProto, path: Path) -> dict[str, tuple[int, ...]]:
    """The model's run-time inputs and their static shapes; a symbolic dimension is refused (onnxruntime's
    quantizer needs them fixed: --input-shape does)."""
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            shown = "x".join(d.dim_param or str(d.dim_value) for d in dims)
            raise ModelError(f"{path}: input '{vi.name}' has a symbolic dimension ({shown}); onnxruntime's "
                             f"quantizer needs static shapes: give --input-shape {vi.name}=DIMS")
        feeds[vi.name] = tuple(d.dim_value for d in dims)
    return feeds


def _dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """The element type of each run-time input: token ids and masks stay integers."""
    return {vi.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
            for vi in model.graph.input}


def _selection(model: onnx.ModelProto, names: tuple[str, ...], option: str) -> tuple[set[str], set[str]]:
    """Names given to an option split into node names and op types; a name that is neither is refused."""
    nodes = {n.name for n in model.graph.node}
    types = {n.op_type for n in model.graph.node}
    chosen_nodes, chosen_ops = set(), set()
    for item in names:
        if item in nodes:
            chosen_nodes.add(item)
        elif item in types:
            chosen_ops.add(item)
        else:
            raise OptionError(f"{option} {item}: no node or op of that name in the model")
    return chosen_nodes, chosen_ops


def _promoted(pre: onnx.ModelProto, nodes: set[str], ops: set[str]) -> set[str]:
    """The nodes of the pre-processed model that --int16 names (by node or op type)."""
    present = {n.name for n in pre.graph.node}
    lost = sorted(nodes - present)
    if lost:
        raise OptionError(f"--int16 {lost[0]}: onnxruntime's pre-processing folded that node into another "
                          "(a BatchNormalization into its convolution, say): name the node it folded into")
    return nodes | {n.name for n in pre.graph.node if n.op_type in ops}


def _overrides(pre: onnx.ModelProto, activations, wide: bool, promoted: set[str]) -> dict:
    """onnxruntime tensor overrides: Softmax outputs at the fixed encoding TFLite Micro uses (its range is
    [0, 1] whatever the data), and the activations of --int16 nodes in int16, with the conversions onnxruntime's
    mixed-precision helper adds where they meet int8 ones."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.execution_providers.qnn.mixed_precision_overrides_utils import (
        MixedPrecisionTensorQuantOverridesFixer,
    )
    from onnxruntime.quantization.tensor_quant_overrides import TensorQuantOverridesHelper

    initializers = {t.name for t in pre.graph.initializer}
    overrides: dict[str, list[dict]] = {}
    for node in pre.graph.node:
        if node.name in promoted:
            for name in [*node.input, *node.output]:
                if name and name not in initializers:
                    overrides[name] = [{"quant_type": QuantType.QInt16, "symmetric": True}]
    for node in pre.graph.node:
        if node.op_type == "Softmax":
            sixteen = wide or overrides.get(node.output[0], [{}])[0].get("quant_type") == QuantType.QInt16
            fixed = {"scale": np.array(1 / 32768, np.float32), "zero_point": np.array(0, np.int16)} if sixteen else \
                {"scale": np.array(1 / 256, np.float32), "zero_point": np.array(-128, np.int8)}
            overrides[node.output[0]] = [{**overrides.get(node.output[0], [{}])[0], **fixed}]
    if not promoted:
        return overrides
    helper = TensorQuantOverridesHelper(overrides)
    fixer = MixedPrecisionTensorQuantOverridesFixer.create_from_model(helper, pre, activations)
    fixer.apply(activations, wide)
    return helper.get_dict()


def _errors(model: onnx.ModelProto, float_path: Path, quantized_path: Path, samples: list[dict],
            tmp: Path, labels: np.ndarray | None) -> tuple[tuple[OutputError, ...], tuple[TensorError, ...]]:
    """The quantized model's error against the float model on the samples: per output, and per tensor inside
    the model, worst first. Both run once, every tensor an output (onnxruntime's qdq_loss_debug)."""
    from onnxruntime.quantization import qdq_loss_debug as debug

    activations = []
    for path, name in ((float_path, "float"), (quantized_path, "quantized")):
        augmented = tmp / f"{name}_tensors.onnx"
        debug.modify_model_output_intermediate_tensors(str(path), str(augmented))
        activations.append(debug.collect_activations(str(augmented), iter(samples)))
    floats, ints = activations
    producers = {out: node for node in model.graph.node for out in node.output}
    classes = {o.name: _classes(o, producers.get(o.name), labels is not None) for o in model.graph.output}
    classifier = next((name for name, count in classes.items() if count), None)
    outputs = tuple(_output_error(o.name, floats[o.name], ints[o.name], classes[o.name],
                                  labels if o.name == classifier else None) for o in model.graph.output)
    # a tensor only the quantized model has (one the quantizer made) has nothing to be compared with, and
    # compute_activation_error fails on it (KeyError 'float')
    matching = {name: m for name, m in debug.create_activation_matching(ints, floats).items() if "float" in m}
    errors = debug.compute_activation_error(matching)
    found = [TensorError(name, producers[name].name, producers[name].op_type, float(e["xmodel_err"]))
             for name, e in errors.items() if name in producers and "xmodel_err" in e]
    return outputs, tuple(sorted(found, key=lambda t: (t.sqnr_db, t.tensor)))


def _weight_errors(pre: onnx.ModelProto, quantized: onnx.ModelProto) -> tuple[WeightError, ...]:
    """Each quantized weight (a DequantizeLinear of a constant, not a bias) against the float weight of the
    pre-processed model it stands for (onnxruntime names the codes NAME_quantized), worst first."""
    floats = {t.name: onnx.numpy_helper.to_array(t) for t in pre.graph.initializer}
    codes = {t.name: onnx.numpy_helper.to_array(t) for t in quantized.graph.initializer}
    readers = {name: node.name for node in quantized.graph.node for name in node.input}
    found = []
    for node in quantized.graph.node:
        q = node.input[0]
        original = q.removesuffix("_quantized")
        if node.op_type != "DequantizeLinear" or q not in codes or original not in floats \
                or codes[q].dtype not in (np.int8, np.uint8, np.int16):
            continue
        w = floats[original].astype(np.float64)
        scale = codes[node.input[1]].astype(np.float64)
        zero = codes[node.input[2]].astype(np.float64) if len(node.input) > 2 else np.zeros_like(scale)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) if scale.size > 1 else 0
        shape = [1] * w.ndim
        if scale.size > 1:
            shape[axis] = -1
        real = (codes[q].astype(np.float64) - zero.reshape(shape)) * scale.reshape(shape)
        noise, signal = float(np.sum((w - real) ** 2)), float(np.sum(w ** 2))
        sqnr = float("inf") if noise == 0 else 10 * np.log10(signal / noise) if signal else float("-inf")
        found.append(WeightError(original, readers.get(node.output[0], ""), sqnr))
    return tuple(sorted(found, key=lambda e: (e.sqnr_db, e.weight)))


def _classes(output: onnx.ValueInfoProto, producer: onnx.NodeProto | None, labelled: bool) -> int:
    """The number of classes of an output of class scores, else 0: batch x classes (more than one) made by
    a Softmax or LogSoftmax, or any such output when there are labels (logits; not a regression output,
    whose largest element means nothing)."""
    dims = output.type.tensor_type.shape.dim
    scores = labelled or (producer is not None and producer.op_type in ("Softmax", "LogSoftmax"))
    return dims[1].dim_value if scores and len(dims) == 2 and dims[1].dim_value > 1 else 0


def _output_error(name: str, reference: list[np.ndarray], got: list[np.ndarray], classes: int,
                  labels: np.ndarray | None) -> OutputError:
    a = np.concatenate([np.ravel(r) for r in reference]).astype(np.float64)
    b = np.concatenate([np.ravel(r) for r in got]).astype(np.float64)
    noise, signal = float(np.sum((a - b) ** 2)), float(np.sum(a ** 2))
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    scores = {}
    if classes:         # onnxruntime's collected activations drop a batch of 1: each run's scores by rows
        f_top = np.concatenate([r.reshape(-1, classes).argmax(axis=1) for r in reference])
        q_top = np.concatenate([g.reshape(-1, classes).argmax(axis=1) for g in got])
        scores["top1_agreement"] = float(np.mean(f_top == q_top))
        if labels is not None:
            scores.update(float_accuracy=float(np.mean(f_top == labels)),
                          quantized_accuracy=float(np.mean(q_top == labels)))
    return OutputError(name, float("inf") if noise == 0 else 10 * np.log10(signal / noise) if signal else float("-inf"),
                       float(a @ b / norms) if norms else float(np.array_equal(a, b)),
                       float(np.sqrt(noise / signal)) if signal else float(noise > 0), float(np.max(np.abs(a - b))),
                       **scores)


def _footprint(path: Path, target) -> Footprint:
    """aot's build of the quantized model for `target` (not written anywhere): its flash and RAM."""
    from aot.api import build

    artifact = build(path, target=target, out_dir=None)
    memory = artifact.metadata["memory"]
    floats = tuple(line for line in artifact.report.splitlines() if "in float between Dequantize" in line)
    kernels = floats[0].split(": ", 1)[1].split(", ") if floats and ": " in floats[0] else ()
    return Footprint(artifact.target.name, memory["flash"], memory["ram"], artifact.metadata["workspace"]["size"],
                     tuple(kernels))
