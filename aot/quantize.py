"""`aot quantize`: a float ONNX model to integer QDQ with onnxruntime's quantizer, calibrated on the user's data,
and a report of what the quantization cost at the model's outputs.

    aot quantize model.onnx --calibration calib.npz -o model_int8.onnx [--scheme int8|a16w8]
                            [--method minmax|entropy|percentile] [--per-tensor] [--exclude NODE|OP ...]
                            [--allow-random]

onnxruntime does the work (quant_pre_process, then quantize_static: QDQ, symmetric int8 weights, per channel
unless --per-tensor; activations int8 with a zero point, or with --scheme a16w8 symmetric int16 as TFLite's
16x8 mode has them); aot reads the calibration data as a user has it and measures the result.
Calibration data: an .npz of arrays named as the model's inputs with the samples on the first axis (a model
input of batch 1 takes one sample at a time; of batch N, N at a time), or a directory of .npz/.npy
files, one sample each (an .npy for a model with one input). Random data only with --allow-random, and the
report says so. The report (OUT.quantize_report.txt and .json beside the model) gives, per model output, the
SQNR in dB, cosine similarity, relative L2 and max abs error of the quantized model against the float one on
the calibration samples, both run by onnxruntime; and per tensor inside the model its SQNR, worst first
(onnxruntime's qdq_loss_debug).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from aot.errors import ModelError, OptionError

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


@dataclass(frozen=True)
class TensorError:
    """A tensor inside the model: its SQNR in the quantized model against the float one (error accumulated up to it)."""
    tensor: str
    node: str               # the node that computes it, and its op
    op: str
    sqnr_db: float


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

    def text(self) -> str:
        lines = [f"quantized {self.model}: {self.scheme} QDQ, {SCHEMES[self.scheme]} (onnxruntime quantize_static), "
                 f"{self.method} calibration on {self.samples} sample(s), weights "
                 f"{'per channel' if self.per_channel else 'per tensor'}"]
        if self.excluded:
            lines.append(f"kept in float: {', '.join(self.excluded)}")
        if self.random_calibration:
            lines.append("WARNING: calibrated on random data (--allow-random): the scales fit noise, not the "
                         "model's real inputs; the errors below say little about real accuracy")
        lines.append(f"{'output':<24} {'SQNR dB':>8} {'cosine':>8} {'rel L2':>8} {'max abs':>10}")
        for o in self.outputs:
            lines.append(f"{o.output:<24} {o.sqnr_db:>8.2f} {o.cosine:>8.5f} {o.relative_l2:>8.4f} {o.max_abs:>10.4g}")
        if self.tensors:
            shown = self.tensors[:LAYERS_SHOWN]
            lines += ["", f"the {len(shown)} tensors with the lowest SQNR of {len(self.tensors)} (all in the .json): "
                      "where one drops well below the tensors before it, try --exclude on its node",
                      f"{'tensor':<24} {'node':<24} {'op':<16} {'SQNR dB':>8}"]
            lines += [f"{t.tensor:<24} {t.node:<24} {t.op:<16} {t.sqnr_db:>8.2f}" for t in shown]
        return "\n".join(lines) + "\n"


def quantize(model_path: str | Path, out: str | Path, calibration: str | Path | None = None,
             method: str = "minmax", per_channel: bool = True, exclude: tuple[str, ...] = (),
             allow_random: bool = False, scheme: str = "int8") -> Report:
    """Quantize `model_path` to `out` (QDQ) and write the report beside it; see the module docstring."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model_path, out = Path(model_path), Path(out)
    if method not in METHODS:
        raise OptionError(f"--method must be one of {', '.join(METHODS)}, not {method!r}")
    if scheme not in SCHEMES:
        raise OptionError(f"--scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    if not model_path.is_file():
        raise OptionError(f"{model_path}: no such file")
    try:
        model = onnx.load(str(model_path))
    except Exception as err:        # onnx raises DecodeError and others: a file that is not a model
        raise ModelError(f"{model_path}: not an ONNX model ({err})") from None
    feeds = _feeds(model, model_path)
    _check_loads(model_path)
    if calibration is None and not allow_random:
        raise OptionError(f"{model_path}: give --calibration DATA (an .npz of the inputs, samples on the first "
                          "axis, or a directory of .npz/.npy files), or --allow-random to calibrate on noise")
    samples = _random_samples(feeds) if calibration is None else load_calibration(Path(calibration), feeds)
    nodes, ops = _exclusions(model, exclude)

    class Reader:
        def __init__(self):
            self.batches = iter(samples)

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        try:
            quant_pre_process(str(model_path), str(pre), skip_symbolic_shape=True)
        except Exception as err:
            raise ModelError(f"{model_path}: onnxruntime's quant_pre_process failed: {_first_line(err)}") from None
        quantized_ops = sorted({n.op_type for n in onnx.load(str(pre)).graph.node} - ops)
        staged = Path(tmp) / "quantized.onnx"
        wide = scheme == "a16w8"
        try:
            quantize_static(str(pre), str(staged), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QInt16 if wide else QuantType.QInt8,
                            weight_type=QuantType.QInt8,
                            calibrate_method={"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                                              "percentile": CalibrationMethod.Percentile}[method],
                            nodes_to_exclude=sorted(nodes), op_types_to_quantize=quantized_ops,
                            extra_options={"WeightSymmetric": True, "ActivationSymmetric": wide})
        except Exception as err:    # onnxruntime's own failures: one line naming the model
            raise ModelError(f"{model_path}: onnxruntime's quantize_static failed: {_first_line(err)}") from None
        outputs, tensors = _errors(model, model_path, staged, samples[:REPORT_SAMPLES], Path(tmp))
        report = Report(model_path.name, scheme, method, per_channel, tuple(sorted(nodes | ops)), len(samples),
                        calibration is None, outputs, tensors)
        out.parent.mkdir(parents=True, exist_ok=True)      # only once there is something to write
        staged.replace(out)
    stem = out.with_suffix("")
    Path(f"{stem}.quantize_report.txt").write_text(report.text())
    Path(f"{stem}.quantize_report.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    return report


def _check_loads(path: Path) -> None:
    """onnxruntime must run the float model (it calibrates on it): refused here, in one line, if it cannot."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError(f"{path}: onnxruntime cannot load it, so cannot calibrate it: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _feeds(model: onnx.ModelProto, path: Path) -> dict[str, tuple[int, ...]]:
    """The model's run-time inputs and their static shapes; a float model with a symbolic dimension is
    refused (onnxruntime's quantizer needs them fixed)."""
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ModelError(f"{path}: input '{vi.name}' has a symbolic dimension "
                             f"({' x '.join(d.dim_param or str(d.dim_value) for d in dims)}); onnxruntime's "
                             "quantizer needs static shapes: export the model with fixed ones")
        feeds[vi.name] = tuple(d.dim_value for d in dims)
    return feeds


def load_calibration(path: Path, feeds: dict[str, tuple[int, ...]]) -> list[dict[str, np.ndarray]]:
    """Calibration samples as onnxruntime's reader hands them out: one dict of float32 arrays per batch."""
    if not path.exists():
        raise OptionError(f"--calibration {path}: no such file or directory")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise OptionError(f"--calibration {path}: no .npz or .npy files in it")
        return [_sample(_read(f, feeds), feeds, f, batched=False) for f in files]
    arrays = _read(path, feeds)
    counts = {name: len(a) for name, a in arrays.items()}
    if len(set(counts.values())) != 1:
        raise OptionError(f"--calibration {path}: the inputs have different sample counts "
                          f"({', '.join(f'{n}: {c}' for n, c in counts.items())})")
    batch = {name: max(shape[0], 1) if shape else 1 for name, shape in feeds.items()}
    total = next(iter(counts.values()))
    step = next(iter(batch.values()))
    if total < step or total % step:
        raise OptionError(f"--calibration {path}: {total} samples do not make whole batches of {step}")
    return [_sample({n: a[i: i + step] for n, a in arrays.items()}, feeds, path, batched=True)
            for i in range(0, total, step)]


def _read(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise OptionError(f"--calibration {path}: cannot read it: {err}") from None
    if isinstance(data, np.ndarray):
        if len(feeds) != 1:
            raise OptionError(f"--calibration {path}: an .npy holds one array, the model has inputs "
                              f"{', '.join(feeds)}: use an .npz with one array per input")
        return {next(iter(feeds)): data}
    arrays = {name: data[name] for name in data.files}
    missing = [name for name in feeds if name not in arrays]
    if missing:
        raise OptionError(f"--calibration {path}: no array for input(s) {', '.join(missing)} "
                          f"(it has {', '.join(arrays) or 'none'})")
    return {name: arrays[name] for name in feeds}


def _sample(arrays: dict[str, np.ndarray], feeds: dict, where: Path, batched: bool) -> dict[str, np.ndarray]:
    sample = {}
    for name, shape in feeds.items():
        a = np.asarray(arrays[name])
        if a.size != int(np.prod(shape)):
            got = "x".join(map(str, a.shape[1:] if batched else a.shape))
            raise OptionError(f"--calibration {where}: input '{name}' is {'x'.join(map(str, shape))} per batch, "
                              f"the data gives {got}{' per sample' if batched else ''}")
        sample[name] = a.reshape(shape).astype(np.float32)
    return sample


def _random_samples(feeds: dict, count: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in feeds.items()} for _ in range(count)]


def _exclusions(model: onnx.ModelProto, exclude: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """--exclude names split into node names and op types; a name that is neither is refused."""
    names = {n.name for n in model.graph.node}
    types = {n.op_type for n in model.graph.node}
    nodes, ops = set(), set()
    for item in exclude:
        if item in names:
            nodes.add(item)
        elif item in types:
            ops.add(item)
        else:
            raise OptionError(f"--exclude {item}: no node or op of that name in the model")
    return nodes, ops


def _errors(model: onnx.ModelProto, float_path: Path, quantized_path: Path, samples: list[dict],
            tmp: Path) -> tuple[tuple[OutputError, ...], tuple[TensorError, ...]]:
    """The quantized model's error against the float model on the samples: per output, and per tensor inside
    the model, worst first. Both run once, every tensor an output (onnxruntime's qdq_loss_debug)."""
    from onnxruntime.quantization import qdq_loss_debug as debug

    activations = []
    for path, name in ((float_path, "float"), (quantized_path, "quantized")):
        augmented = tmp / f"{name}_tensors.onnx"
        debug.modify_model_output_intermediate_tensors(str(path), str(augmented))
        activations.append(debug.collect_activations(str(augmented), iter(samples)))
    floats, ints = activations
    outputs = tuple(_output_error(o.name, floats[o.name], ints[o.name]) for o in model.graph.output)
    errors = debug.compute_activation_error(debug.create_activation_matching(ints, floats))
    producers = {out: node for node in model.graph.node for out in node.output}
    found = [TensorError(name, producers[name].name, producers[name].op_type, float(e["xmodel_err"]))
             for name, e in errors.items() if name in producers and "xmodel_err" in e]
    return outputs, tuple(sorted(found, key=lambda t: (t.sqnr_db, t.tensor)))


def _output_error(name: str, reference: list[np.ndarray], got: list[np.ndarray]) -> OutputError:
    a = np.concatenate([np.ravel(r) for r in reference]).astype(np.float64)
    b = np.concatenate([np.ravel(r) for r in got]).astype(np.float64)
    noise, signal = float(np.sum((a - b) ** 2)), float(np.sum(a ** 2))
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return OutputError(name, float("inf") if noise == 0 else 10 * np.log10(signal / noise) if signal else float("-inf"),
                       float(a @ b / norms) if norms else float(np.array_equal(a, b)),
                       float(np.sqrt(noise / signal)) if signal else float(noise > 0), float(np.max(np.abs(a - b))))
