"""Inputs for a model, the reference that runs it (onnxruntime, or the onnx package's reference
evaluator when onnxruntime cannot), and the comparison with aot's outputs."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.version_converter

from aot.errors import OptionError, RunError, first_line
from aot.frontend.tflite import TfliteFile
from aot.registry import op_def

# fp32 tolerance: max |aot - reference| <= TOLERANCE * max|reference| for each output. An output that
# comes out of quantized arithmetic may also differ by one quantization step (its `step`).
TOLERANCE = 1e-4


def input_specs(proto) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of each input of an ONNX model, or of a TFLite file (frontend/tflite.py)."""
    if isinstance(proto, TfliteFile):
        return list(proto.inputs)
    initializers = {t.name for t in proto.graph.initializer}
    specs = []
    for vi in proto.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        specs.append((vi.name, tuple(d.dim_value for d in tt.shape.dim), str(dtype)))
    return specs


# Random int32/int64 inputs are drawn from [0, INDEX_RANGE): small non-negative values, valid indices
# for any axis that long. Inputs that hold real indices, token ids or masks are best given (--inputs).
INDEX_RANGE = 4


def random_inputs(proto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal floats (and int8/uint8, as quantized models take them), small non-negative
    integers for int32/int64 (which usually hold indices or ids), and 0/1 at random for bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in input_specs(proto):
        if dtype in ("int32", "int64"):
            feeds[name] = rng.integers(0, INDEX_RANGE, shape).astype(dtype)
        elif dtype == "bool":
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def validate_inputs(proto, inputs: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    result = {}
    for name, shape, dtype in input_specs(proto):
        if name not in inputs:
            given = ", ".join(inputs) or "none"
            raise OptionError(f"{label}: no value given for input '{name}' (inputs given: {given})")
        array = np.asarray(inputs[name])
        if tuple(array.shape) != shape:
            raise OptionError(f"{label}: input '{name}' has shape {list(array.shape)}, the model expects {list(shape)}")
        result[name] = array.astype(dtype)
    return result


# What `aot run --reference` and `reference=` accept: onnxruntime (falling back to the onnx package's
# reference evaluator for a model onnxruntime cannot load or run), the onnx package's evaluator alone,
# or none (run aot and compare nothing). A TFLite model's reference is LiteRT's reference kernels
# ("litert"), or TFLite Micro's ("tflite-micro", its Python interpreter) for a model whose kernels the two
# compute differently (the integer LSTM); the default, onnxruntime, stands for that choice there.
REFERENCES = ("onnxruntime", "onnx", "litert", "tflite-micro", "none")


def check_reference(choice: str) -> str:
    if choice not in REFERENCES:
        raise OptionError(f"reference '{choice}' is not one of {', '.join(REFERENCES)}")
    return choice


@dataclass(frozen=True)
class ReferenceRun:
    """A reference's outputs, which reference computed them, and why onnxruntime did not (if it was
    asked for but could not run the model: its error, one line)."""

    outputs: dict[str, np.ndarray]
    used: str                   # "onnxruntime", "onnx", "litert" or "tflite-micro"
    fallback_reason: str = ""


def run_reference(proto: onnx.ModelProto, inputs: dict[str, np.ndarray], label: str = "the model",
                  choice: str = "onnxruntime") -> ReferenceRun:
    """The chosen reference's outputs for `inputs`. onnxruntime that cannot load or run the model
    hands it to onnx.reference, and the result says so; a model neither can run is a RunError."""
    if check_reference(choice) == "none":
        raise OptionError("reference 'none' computes no outputs to compare with")
    if isinstance(proto, TfliteFile) or choice in ("litert", "tflite-micro"):
        if not isinstance(proto, TfliteFile) or choice == "onnx":
            kind = "an ONNX" if not isinstance(proto, TfliteFile) else "a TFLite"
            raise OptionError(f"{label}: reference '{choice}' does not run {kind} model (onnxruntime and onnx run "
                              "ONNX models, litert and tflite-micro TFLite ones)")
        runtime = choice if choice in ("litert", "tflite-micro") else proto.runtime
        if runtime == "tflite-micro":
            return ReferenceRun(tflite_micro_outputs(proto, inputs, label), "tflite-micro")
        return ReferenceRun(litert_outputs(proto, inputs, label), "litert")
    if choice == "onnx":
        return ReferenceRun(onnx_reference_outputs(proto, inputs, label), "onnx")
    try:
        return ReferenceRun(reference_outputs(proto, inputs, label), "onnxruntime")
    except _OnnxruntimeFailed as err:
        try:
            return ReferenceRun(onnx_reference_outputs(proto, inputs, label), "onnx", err.reason)
        except _OnnxReferenceFailed as second:
            raise RunError(f"{label}: neither reference can run it: onnxruntime: {err.reason}; "
                           f"onnx.reference: {second.reason}") from None


def litert_outputs(file: TfliteFile, inputs: dict[str, np.ndarray], label: str = "the model"
                   ) -> dict[str, np.ndarray]:
    """LiteRT's outputs for `inputs`, from its reference kernels (TFLite Micro's arithmetic, not the
    optimized kernels of its default resolver), by the graph's names."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise RunError("LiteRT is needed for the reference check of a TFLite model: pip install ai-edge-litert "
                       "(or give --reference none)") from None
    try:
        interpreter = Interpreter(model_content=file.data,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        interpreter.allocate_tensors()
        by_file_name = {d["name"]: d for d in interpreter.get_input_details()}
        for name, _, _ in file.inputs:
            detail = by_file_name[file.tensor_names.get(name, name)]
            interpreter.set_tensor(detail["index"], np.ascontiguousarray(inputs[name]))
        interpreter.invoke()
        outputs = {d["name"]: d for d in interpreter.get_output_details()}
        return {name: interpreter.get_tensor(outputs[file.tensor_names.get(name, name)]["index"]).copy()
                for name in file.outputs}
    except Exception as err:      # noqa: BLE001 - LiteRT's own failures, reported as one line
        raise RunError(f"{label}: the reference, LiteRT, cannot run it: {first_line(err)}") from None


# TFLite Micro's interpreter runs in a child process: it prints its own errors and may crash on a graph it
# cannot prepare (seen: an SVDF and an integer LSTM in one graph), which must not take aot down with it
_TFLITE_MICRO_RUN = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
model, feeds, results, count = sys.argv[1:5]
interpreter = runtime.Interpreter.from_bytes(open(model, "rb").read(), arena_size=64 << 20)
with np.load(feeds) as given:
    for index in range(len(given.files)):
        interpreter.set_input(given[f"x{index}"], index)
interpreter.invoke()
np.savez(results, **{f"y{index}": np.array(interpreter.get_output(index)) for index in range(int(count))})
"""


def tflite_micro_outputs(file: TfliteFile, inputs: dict[str, np.ndarray], label: str = "the model"
                         ) -> dict[str, np.ndarray]:
    """TFLite Micro's outputs for `inputs`, from its reference kernels run by its Python interpreter (the
    `tflite-micro` package, in a child process), from the reset state; the file's inputs and outputs in its
    order. The arena holds every tensor that is not a constant: room for any model aot compiles for a board."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    if importlib.util.find_spec("tflite_micro") is None:
        raise RunError("TFLite Micro's interpreter is needed for the reference check of this TFLite model (its "
                       "integer LSTM is TFLite Micro's arithmetic, not LiteRT's): pip install tflite-micro (or "
                       "give --reference none)")
    with tempfile.TemporaryDirectory(prefix="aot-tflm-") as tmp:
        model, feeds, results = (os.path.join(tmp, n) for n in ("model.tflite", "x.npz", "y.npz"))
        with open(model, "wb") as f:
            f.write(file.data)
        np.savez(feeds, **{f"x{index}": np.ascontiguousarray(inputs[name])
                           for index, (name, _, _) in enumerate(file.inputs)})
        run = subprocess.run([sys.executable, "-c", _TFLITE_MICRO_RUN, model, feeds, results,
                              str(len(file.outputs))], capture_output=True, text=True)
        if run.returncode != 0:
            lines = [line for line in run.stderr.splitlines() + run.stdout.splitlines() if line.strip()]
            why = f"it crashed (signal {-run.returncode})" if run.returncode < 0 else (lines[-1] if lines else
                                                                                      f"exit {run.returncode}")
            raise RunError(f"{label}: the reference, TFLite Micro, cannot run it: {why}")
        with np.load(results) as got:
            return {name: got[f"y{index}"] for index, name in enumerate(file.outputs)}


class _ReferenceFailed(RunError):
    """A reference could not run the model; `reason` is its error's first line."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class _OnnxruntimeFailed(_ReferenceFailed):
    pass


class _OnnxReferenceFailed(_ReferenceFailed):
    pass


def reference_outputs(proto: onnx.ModelProto, inputs: dict[str, np.ndarray], label: str = "the model"
                      ) -> dict[str, np.ndarray]:
    """onnxruntime's outputs for `inputs`; a model onnxruntime cannot run is a RunError saying so."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise _OnnxruntimeFailed("onnxruntime is needed for the reference check: pip install onnxruntime",
                                 "onnxruntime is not installed") from None
    try:
        session = _session(ort, proto.SerializeToString())
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs)))
    except Exception as err:      # noqa: BLE001 - onnxruntime's own failures, reported as one line
        first = first_line(err)
        raise _OnnxruntimeFailed(f"{label}: the reference, onnxruntime, cannot run it: {first}", first) from None


def onnx_reference_outputs(proto: onnx.ModelProto, inputs: dict[str, np.ndarray], label: str = "the model"
                           ) -> dict[str, np.ndarray]:
    """The onnx package's reference evaluator's outputs (numpy, op by op as the ONNX spec reads)."""
    try:
        names = [o.name for o in proto.graph.output]
        with np.errstate(all="ignore"):     # as onnxruntime, NaN and inf without a warning
            results = reference_evaluator(proto).run(names, inputs)
    except Exception as err:      # noqa: BLE001 - the evaluator's failures, reported as one line
        first = first_line(err)
        raise _OnnxReferenceFailed(f"{label}: the reference, onnx.reference, cannot run it: {first}", first) from None
    return {name: np.asarray(value) for name, value in zip(names, results)}


# onnx.reference implements some ops only from a later opset on (DequantizeLinear from 19, say): a model
# of an older opset is converted to this one (onnx.version_converter) when that is all that stops it.
NEWER_OPSET = 21


def reference_evaluator(proto: onnx.ModelProto):
    """onnx.reference.ReferenceEvaluator for the model, converted to NEWER_OPSET if the evaluator has
    no implementation of one of its ops at the model's opset."""
    from aot.graph.evaluate import reference_evaluator as evaluator

    try:
        return evaluator(proto)
    except Exception as err:      # noqa: BLE001 - retried below, or raised as it is
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), NEWER_OPSET)
        if "No implementation for operator" not in str(err) or opset >= NEWER_OPSET:
            raise
        try:
            converted = onnx.version_converter.convert_version(proto, NEWER_OPSET)
        except Exception:         # noqa: BLE001 - the first error is the one to report
            raise err from None
        return evaluator(converted)


def _session(ort, model: bytes):
    """onnxruntime on the CPU as it computes integer models on the ARM cores we compile for, whose
    kernels we mirror bit for bit. Two x86 defaults differ, and this host may be x86:
    - int8 QDQ groups fuse into integer kernels (QLinearConv, QLinearAdd, ...) only on ARM; x86 first
      converts int8 activations to uint8 and runs what that leaves mixed in float between Dequantize and
      Quantize, a step off here and there that compounds over the layers (session.qdqisint8allowed);
    - without VNNI, x86 multiplies uint8 activations by int8 weights adding pairs of products in 16 bits
      (vpmaddubsw), which saturates where large activations meet full-range weights, tens of steps off
      (session.x64quantprecision makes those weights uint8, exact). It converts every int8 weight, even
      one meeting int8 activations, for which onnxruntime has no kernel: such a model runs without it
      (its int8 x int8 products are exact anyway).
    And one on every host: a DequantizeLinear of int8 weights into a MatMul fuses into MatMulNBits, which by
    default quantizes the activations to 8 bits on the fly (accuracy level 4), hundreds of steps off for an
    int16 activation; level 1 computes in float32 as the unfused nodes do."""
    def session(precise_uint8: bool):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4      # fatal only: an error is reported once, by us, as one line
        options.add_session_config_entry("session.qdqisint8allowed", "1")
        options.add_session_config_entry("session.x64quantprecision", "1" if precise_uint8 else "0")
        options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NoKernel
    try:
        return session(precise_uint8=True)
    except NoKernel:
        return session(precise_uint8=False)


@dataclass(frozen=True)
class Comparison:
    output: str
    max_abs: float
    max_rel: float
    scale: float            # the largest finite magnitude of the reference's
    step: float = 0.0       # quantization step of the output (0: computed in float)
    off_by_one: int = 0     # elements a whole step away from the reference
    size: int = 0
    unmatched: int = 0      # elements NaN or infinite on one side and not the same on the other
    reference_nans: int = 0     # of those, NaN in the reference where the output is finite

    @property
    def ok(self) -> bool:
        return (self.max_abs <= TOLERANCE * max(self.scale, 1e-30) or self.max_abs == 0.0
                or self.max_abs <= self.step * 1.001)

    def unmatched_text(self, reference: str = "the reference") -> str:
        """'; 10 of 40 elements NaN in onnxruntime where aot's are finite', or the like; '' if none."""
        if not self.unmatched:
            return ""
        if self.reference_nans == self.unmatched:
            return f"; {self.unmatched} of {self.size} elements NaN in {reference}, finite here"
        return f"; {self.unmatched} of {self.size} elements NaN or infinite on one side only"


def compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray],
            steps: dict[str, float] | None = None) -> list[Comparison]:
    """Each output against the reference's. NaN against NaN and an infinity against the same one count as
    equal; any other NaN or infinity on either side is an infinite error, counted in `unmatched`."""
    result = []
    for name, ref in reference.items():
        got = outputs[name].astype(np.float64)
        ref = ref.astype(np.float64)
        if got.shape != ref.shape:
            raise RunError(f"output '{name}' has shape {list(got.shape)}, the reference {list(ref.shape)}")
        finite = np.isfinite(got) & np.isfinite(ref)
        same = (np.isnan(got) & np.isnan(ref)) | (~finite & (got == ref))
        unmatched = ~finite & ~same
        with np.errstate(invalid="ignore"):     # inf - inf where both are inf: not read (not finite)
            diff = np.where(finite, np.abs(got - ref), np.where(unmatched, np.inf, 0.0))
        magnitudes = np.abs(ref[np.isfinite(ref)])
        scale = float(np.max(magnitudes)) if magnitudes.size else 0.0
        max_abs = float(np.max(diff)) if diff.size else 0.0
        with np.errstate(invalid="ignore"):
            rel = diff / np.maximum(np.abs(np.where(finite, ref, 0.0)), 1e-6 * max(scale, 1e-30))
        step = (steps or {}).get(name, 0.0)
        off = int(np.count_nonzero(diff > step * 0.5)) if step else 0
        result.append(Comparison(name, max_abs, float(np.max(rel)) if rel.size else 0.0, scale, step, off, diff.size,
                                 int(np.count_nonzero(unmatched)),
                                 int(np.count_nonzero(unmatched & np.isnan(ref) & np.isfinite(got)))))
    return result


def value_steps(graph, names) -> dict[str, float]:
    """For values of the optimized graph made by quantized arithmetic, the size of one step: 1 for a
    quantized integer tensor (its steps are its codes), the scale of the Dequantize that made a float
    one. Other values (float, and integer or bool ones such as indices and masks) are left out, and so
    are values of TFLite's integer arithmetic, which aot computes bit for bit as TFLite does."""
    def tflite(name: str) -> bool:
        quant = graph.values[name].quant
        return quant is not None and quant.rules == "tflite"

    producers = graph.producers()
    steps = {}
    for out in names:
        if graph.values[out].quant is not None:
            if not tflite(out):
                steps[out] = 1.0
            continue
        node = producers.get(out)
        while node is not None and op_def(node.op).moves_values and len(node.inputs) == 1:
            node = producers.get(node.inputs[0])
        if node is not None and node.op == "Dequantize" and not tflite(node.inputs[0]):
            steps[out] = node.attrs["scale"]
    return steps
