"""TFLite → Graph: read the flatbuffer (the `tflite` package's reader), check it, map its operators onto the
graph ops the ONNX frontend makes, in the forms the later passes know.

Layout. TFLite tensors are NHWC and keep it: a graph input or output is the model's own tensor. Ops with
ONNX's NCHW semantics (convolutions, pools) read a transposed view of a 4-D tensor, made once, and leave
their result in NCHW; it is transposed back only where a reader wants TFLite's layout. The layout pass
(to_nhwc) then runs those ops channels-last and the transposes cancel: none of them moves data.

Quantization. An int8 or int16 tensor carries its QuantParams with rules "tflite": the kernels compute
TFLite's integer arithmetic on it (multipliers and shifts as TFLite derives them, its rounding, its
Softmax and pooling), not onnxruntime's. Quantized operators become the integer ops lower_quantized makes
of an ONNX QDQ model (an int8 Conv with per-channel weights and an int32 bias, the fused activation as a
clamp), so nothing later guesses at them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from aot.errors import ModelError, OptionError, UnsupportedOpError, first_line
from aot.frontend import tflite_ops
from aot.graph.ir import Graph, Node, State, Value
from aot.graph.quant import QuantParams

IDENTIFIER = b"TFL3"        # bytes 4..8 of every TFLite flatbuffer
RULES = "tflite"

# TensorType codes -> numpy dtype names (those aot reads; the others are refused by name)
_DTYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}
_TYPE_NAMES = {1: "float16", 5: "string", 8: "complex64", 10: "float64", 11: "complex128", 12: "uint64",
               13: "resource", 14: "variant", 15: "uint32", 16: "uint16", 17: "int4", 18: "bfloat16"}
_CONTROL_FLOW = {"WHILE", "IF", "CALL_ONCE", "CALL"}
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)


def is_tflite(data: bytes) -> bool:
    return len(data) >= 8 and data[4:8] == IDENTIFIER


@dataclass(frozen=True)
class TfliteFile:
    """What the reference (LiteRT or TFLite Micro) runs: the file's bytes, and its interface as the graph
    names it."""

    data: bytes
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]   # (graph name, shape, dtype) in the file's order
    outputs: tuple[str, ...]
    tensor_names: dict[str, str] = field(default_factory=dict)     # graph name -> the file's tensor name
    # the reference whose arithmetic aot's kernels follow: LiteRT's, or TFLite Micro's for a model with an
    # integer LSTM (which LiteRT computes with other sigmoid and tanh functions) or an int8-state SVDF
    runtime: str = "litert"


@dataclass(frozen=True)
class TfliteModel:
    """A checked TFLite model: its graph (TFLite shapes are static, so it is mapped at load) and its file."""

    file: TfliteFile
    graph: Graph
    label: str
    sha256: str
    frozen: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def proto(self) -> TfliteFile:
        """What reference.py reads a model's inputs from and runs (an ONNX model's proto)."""
        return self.file

    def reference(self) -> tuple[TfliteFile, dict[str, np.ndarray]]:
        return self.file, {}


ARITHMETICS = ("litert", "tflite-micro")


def check_arithmetic(choice: str | None) -> str | None:
    if choice is not None and choice not in ARITHMETICS:
        raise OptionError(f"TFLite arithmetic '{choice}' is not one of {', '.join(ARITHMETICS)}")
    return choice


def load(path: str | os.PathLike, data: bytes, input_shapes: dict[str, tuple[int, ...]] | None = None,
         freeze: dict | None = None, arithmetic: str | None = None) -> TfliteModel:
    """Check and map a TFLite file read from `path` (its bytes `data`). `arithmetic`: whose reference kernels
    the integer arithmetic follows, "litert" or "tflite-micro" (they differ in FULLY_CONNECTED's rounding);
    None: LiteRT's, unless the model has an operator only TFLite Micro computes so (an integer LSTM, an
    int8-state SVDF)."""
    label = os.path.basename(os.fspath(path))
    if freeze:
        raise OptionError(f"{label}: --freeze binds inputs of ONNX models; a TFLite model's inputs are all fed")
    model = _parse(data, label)
    importer = _Importer(model, data, label, check_arithmetic(arithmetic))
    graph, tensor_names = importer.graph()
    fed = [n for n in graph.inputs if n not in {s.read for s in graph.state}]     # (the rest is state)
    for name, shape in (input_shapes or {}).items():
        if name not in fed:
            raise OptionError(f"{label}: --input-shape names '{name}', which is not an input "
                              f"(inputs: {', '.join(fed)})")
        if tuple(shape) != graph.shape(name):
            raise OptionError(f"{label}: input '{name}' is {list(graph.shape(name))} in the file; a TFLite "
                              f"model compiles with the shapes it was converted with (given {list(shape)})")
    inputs = tuple((n, graph.shape(n), graph.values[n].dtype) for n in fed)
    outputs = tuple(n for n in graph.outputs if n not in {s.written for s in graph.state})
    file = TfliteFile(_as_litert_reads(model, data), inputs, outputs, tensor_names,
                      "tflite-micro" if importer.micro else "litert")
    return TfliteModel(file, graph, label, hashlib.sha256(data).hexdigest())


def _parse(data: bytes, label: str):
    import tflite

    if not is_tflite(data):
        raise ModelError(f"{label}: not a TFLite model (no TFL3 file identifier)")
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        count = model.SubgraphsLength()
        if count == 0:
            raise ModelError(f"{label}: not a TFLite model (no subgraph)")
        _touch_everything(model)
    except ModelError:
        raise
    except Exception as err:        # noqa: BLE001 - the flatbuffer reader's IndexError, struct.error, ...
        raise ModelError(f"{label}: not a valid TFLite file (the flatbuffer is truncated or corrupt: reading "
                         f"it failed with {type(err).__name__} {first_line(err)})") from None
    return model


def _as_litert_reads(model, data: bytes) -> bytes:
    """The file for the reference: a tensor with one scale, or of rank 1, whose quantized_dimension is not 0
    (as older converters wrote the biases of per-channel layers: TFLite Micro never reads it there) has it
    set to 0, which LiteRT otherwise refuses. The bytes aot compiles, and hashes, are the user's."""
    patched = None
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            q = tensor.Quantization()
            if q is None or q.QuantizedDimension() == 0 or (q.ScaleLength() > 1 and tensor.ShapeLength() > 1):
                continue
            patched = patched if patched is not None else bytearray(data)
            at = q._tab.Pos + q._tab.Offset(16)        # the field's int32 (see QuantizedDimension)
            patched[at:at + 4] = (0).to_bytes(4, "little")
    return bytes(patched) if patched is not None else data


def _touch_everything(model) -> None:
    """Read every table once, so a truncated or corrupt file fails here with one clear error, not later
    in the middle of the mapping."""
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.DataLength():
            buffer.DataAsNumpy()
    for i in range(model.OperatorCodesLength()):
        model.OperatorCodes(i).BuiltinCode()
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            tensor.ShapeAsNumpy() if tensor.ShapeLength() else None
            tensor.Name(), tensor.Type(), tensor.Buffer()
            q = tensor.Quantization()
            if q is not None:
                q.ScaleLength(), q.ZeroPointLength()
        for k in range(sg.OperatorsLength()):
            op = sg.Operators(k)
            op.OpcodeIndex(), op.InputsLength(), op.OutputsLength()


def _ints(vector) -> list[int]:
    """A flatbuffer int vector as a list (the reader gives 0 for an absent one)."""
    return [] if isinstance(vector, int) else [int(v) for v in vector]


@dataclass(frozen=True)
class _Tensor:
    index: int
    name: str           # the graph's (unique) name
    file_name: str
    shape: tuple[int, ...]
    dtype: str
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    quantized_dimension: int
    data: np.ndarray | None      # a constant's value
    variable: bool = False       # state kept between runs (graph.State)


class _Importer:
    """Maps one TFLite subgraph to a Graph, node by node (see the module's docstring for layouts)."""

    def __init__(self, model, data: bytes, label: str, arithmetic: str | None = None):
        import tflite

        self.tflite = tflite
        self.model, self.data, self.label = model, data, label
        self.names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
        if model.SubgraphsLength() > 1:
            users = sorted({self._op_name(model.Subgraphs(0).Operators(k))
                            for k in range(model.Subgraphs(0).OperatorsLength())} & _CONTROL_FLOW)
            why = f" (its {', '.join(users)} operators run them)" if users else ""
            raise UnsupportedOpError(f"{label}: has {model.SubgraphsLength()} subgraphs{why}; aot compiles "
                                     "models of one subgraph, without control flow")
        self.sg = model.Subgraphs(0)
        self.taken: set[str] = set()            # graph names given out
        self.tensors = [self._tensor(i) for i in range(self.sg.TensorsLength())]
        self.values: dict[str, Value] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.layout: dict[int, str] = {}        # tensor -> graph value holding it in TFLite's layout
        self.nchw: dict[int, str] = {}          # 4-D tensor -> graph value holding it transposed to NCHW
        self.state_reads: dict[int, str] = {}   # variable tensor -> the graph input of its value before the run
        self.state_writes: dict[int, str] = {}  # variable tensor -> the graph value of its value after
        # TFLite Micro's arithmetic rather than LiteRT's (they differ in FULLY_CONNECTED's requantization) when
        # asked, and for a model with an integer LSTM, which aot computes as TFLite Micro does (LiteRT's differs
        # more), or an SVDF of int8 state, which LiteRT does not run
        needs = next((k for k in range(self.sg.OperatorsLength()) if self._follows_micro(self.sg.Operators(k))), None)
        if needs is not None and arithmetic == "litert":
            raise OptionError(f"{label}: operator {needs} ({self._op_name(self.sg.Operators(needs))}) computes as "
                              "TFLite Micro does, not as LiteRT does: its arithmetic is TFLite Micro's "
                              "(--tflite-arithmetic tflite-micro, or leave it out)")
        self.micro = needs is not None or arithmetic == "tflite-micro"

    # --- reading --------------------------------------------------------------------------------------

    def _op_name(self, op) -> str:
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        return self.names.get(builtin, f"builtin {builtin}")

    def _follows_micro(self, op) -> bool:
        def tensor(i: int) -> _Tensor | None:
            return self.tensors[op.Inputs(i)] if i < op.InputsLength() and op.Inputs(i) >= 0 else None
        name, x = self._op_name(op), tensor(0)
        if name == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            return x is not None and x.dtype in ("int8", "int16") and x.scale is not None
        state = tensor(4)
        return name == "SVDF" and x is not None and x.dtype == "int8" and state is not None and state.dtype == "int8"

    def _tensor(self, index: int) -> _Tensor:
        t = self.sg.Tensors(index)
        file_name = (t.Name() or b"").decode("utf-8", "replace")
        shape = tuple(_ints(t.ShapeAsNumpy())) if t.ShapeLength() else ()
        where = f"{self.label}: tensor {index} ('{file_name}')"
        if t.Type() not in _DTYPES:
            raise UnsupportedOpError(f"{where} is {_TYPE_NAMES.get(t.Type(), f'type {t.Type()}')}, which aot "
                                     "does not compute with")
        if t.Sparsity() is not None:
            raise UnsupportedOpError(f"{where} is sparse; aot reads dense tensors only")
        if any(d < 0 for d in shape):
            raise UnsupportedOpError(f"{where} has an unknown dimension {list(shape)}")
        dtype = _DTYPES[t.Type()]
        scale = zero_point = None
        q = t.Quantization()
        if q is not None and q.ScaleLength():
            scale = q.ScaleAsNumpy().astype(np.float32)
            zero_point = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros_like(scale,
                                                                                                          np.int64)
            qdim = q.QuantizedDimension()
        else:
            qdim = 0
        # a variable's buffer is its storage: LiteRT and TFLite Micro reset it to zeros, whatever it holds
        data = None if t.IsVariable() else self._buffer(t.Buffer(), dtype, shape, where)
        # a dimension the file's signature leaves dynamic (-1) is the size it was converted with (its shape)
        # the converter names a tensor after every op fused into it, joined by ';': the first is enough
        short = file_name.split(";")[0]
        name = short if short and short not in self.taken else f"t{index}"
        self.taken.add(name)
        return _Tensor(index, name, file_name, shape, dtype, scale, zero_point, qdim, data, bool(t.IsVariable()))

    def _buffer(self, index: int, dtype: str, shape: tuple[int, ...], where: str) -> np.ndarray | None:
        if index <= 0 or index >= self.model.BuffersLength():
            return None
        buffer = self.model.Buffers(index)
        offset, size = buffer.Offset(), buffer.Size()
        if offset > 1:      # data stored after the flatbuffer (files over 2 GB)
            raw = np.frombuffer(self.data, np.uint8, size, offset) if offset + size <= len(self.data) else None
            if raw is None:
                raise ModelError(f"{where}: its data lies past the end of the file")
        elif buffer.DataLength():
            raw = buffer.DataAsNumpy()
        else:
            return None
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if raw.size != expected:
            raise ModelError(f"{where} holds {raw.size} bytes of data for shape {list(shape)} {dtype} "
                             f"({expected} bytes)")
        return np.frombuffer(raw.tobytes(), dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)

    # --- graph values ---------------------------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.taken:
            name, i = f"{hint}_{i}", i + 1
        self.taken.add(name)
        return name

    def quant(self, t: _Tensor) -> QuantParams | None:
        """A computed tensor's per-tensor encoding, or None for a float one (or a plain integer one). An int32
        one is a QUANTIZE's output."""
        if t.dtype not in ("int8", "uint8", "int16", "int32") or t.scale is None:
            return None
        if t.scale.size != 1:
            raise UnsupportedOpError(f"{self.label}: tensor '{t.file_name}' has per-channel quantization; aot "
                                     "takes it on weights only")
        return QuantParams(float(t.scale[0]), int(t.zero_point[0]), rules=RULES)

    def declare(self, name: str, shape: tuple[int, ...], dtype: str, quant: QuantParams | None = None) -> str:
        self.values[name] = Value(name, tuple(int(d) for d in shape), dtype, quant)
        return name

    def constant(self, hint: str, array: np.ndarray, quant: QuantParams | None = None) -> str:
        name = self.fresh(hint)
        self.constants[name] = np.asarray(array, order="C")
        return self.declare(name, array.shape, str(array.dtype), quant)

    def add(self, op: str, name: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        self.nodes.append(Node(op, name, tuple(inputs), tuple(outputs), attrs))

    def value(self, t: _Tensor) -> str:
        """Tensor t in TFLite's layout (a constant, an input, or a result, transposed from NCHW if it
        was made there)."""
        if t.index in self.layout:
            return self.layout[t.index]
        if t.variable:      # its value from the previous run (graph.State)
            if t.index in self.state_writes:
                raise UnsupportedOpError(f"{self.label}: variable tensor '{t.file_name}' is read after an operator "
                                         "wrote it; aot keeps state that operators read, then update")
            self.layout[t.index] = self.state_reads[t.index] = self.declare(t.name, t.shape, t.dtype, self.quant(t))
            return t.name
        if t.data is not None:
            self.constants[t.name] = t.data
            self.layout[t.index] = self.declare(t.name, t.shape, t.dtype, self.quant(t))
            return t.name
        name = t.name
        self.declare(name, t.shape, t.dtype, self.quant(t))
        self.add("Transpose", f"{name}_to_nhwc", [self.nchw[t.index]], [name], perm=TO_NHWC)
        self.layout[t.index] = name
        return name

    def write_state(self, t: _Tensor, value: str) -> None:
        """An operator's update of variable tensor t: `value` is what the next run reads."""
        if not t.variable or t.index not in self.state_reads or t.index in self.state_writes:
            raise UnsupportedOpError(f"{self.label}: tensor '{t.file_name}' is updated as state but is not a "
                                     "variable read once and written once")
        self.state_writes[t.index] = value

    def as_nchw(self, t: _Tensor) -> str:
        """4-D tensor t transposed to NCHW, as an ONNX-semantic op reads it."""
        if t.index not in self.nchw:
            source = self.value(t)
            name = self.declare(self.fresh(f"{t.name}_nchw"), tuple(t.shape[p] for p in TO_NCHW), t.dtype,
                                self.quant(t))
            self.add("Transpose", f"{t.name}_to_nchw", [source], [name], perm=TO_NCHW)
            self.nchw[t.index] = name
        return self.nchw[t.index]

    def result(self, t: _Tensor, nchw: bool = False) -> str:
        """The graph value an op writes tensor t into: in NCHW, or in TFLite's layout."""
        if nchw:
            name = self.declare(self.fresh(f"{t.name}_nchw"), tuple(t.shape[p] for p in TO_NCHW), t.dtype,
                                self.quant(t))
            self.nchw[t.index] = name
            return name
        self.layout[t.index] = self.declare(t.name, t.shape, t.dtype, self.quant(t))
        return t.name

    # --- the whole graph ------------------------------------------------------------------------------

    def graph(self) -> tuple[Graph, dict[str, str]]:
        inputs = []
        for index in _ints(self.sg.InputsAsNumpy()):
            t = self.tensors[index]
            if t.data is not None:
                continue
            self.layout[index] = self.declare(t.name, t.shape, t.dtype, self.quant(t))
            inputs.append(t.name)
        for k in range(self.sg.OperatorsLength()):
            self._operator(k, self.sg.Operators(k))
        outputs = []
        for index in _ints(self.sg.OutputsAsNumpy()):
            t = self.tensors[index]
            if index not in self.layout and index not in self.nchw:
                if t.data is None:
                    raise ModelError(f"{self.label}: output tensor '{t.file_name}' is made by no operator")
            outputs.append(self.value(t))
        if len(set(outputs)) != len(outputs) or set(outputs) & set(inputs):
            raise UnsupportedOpError(f"{self.label}: an output is also an input or another output; aot needs "
                                     "each output computed on its own")
        state = []
        for index, read in self.state_reads.items():
            t = self.tensors[index]
            if index not in self.state_writes:
                raise UnsupportedOpError(f"{self.label}: variable tensor '{t.file_name}' is read but no operator "
                                         "updates it")
            fill = float(t.zero_point[0]) if self.quant(t) is not None else 0.0
            state.append(State(read, self.state_writes[index], fill))
        name = os.path.splitext(self.label)[0]
        names = {t.name: t.file_name for t in self.tensors}
        return Graph(name, tuple(self.nodes), self.values, self.constants,
                     tuple(inputs) + tuple(s.read for s in state), tuple(outputs) + tuple(s.written for s in state),
                     state=tuple(state)), names

    def _operator(self, k: int, op) -> None:
        name = self._op_name(op)
        where = f"{self.label}: operator {k} ({name})"
        if name == "CUSTOM":
            code = self.model.OperatorCodes(op.OpcodeIndex()).CustomCode()
            raise UnsupportedOpError(f"{where}: custom operator '{(code or b'').decode('utf-8', 'replace')}' is "
                                     "not supported (only TFLite's builtin operators are)")
        mapping = tflite_ops.MAPPINGS.get(name)
        if mapping is None:
            raise UnsupportedOpError(f"{where} is not supported (the README lists the supported TFLite operators)")
        inputs = [self.tensors[i] if i >= 0 else None for i in _ints(op.InputsAsNumpy())]
        outputs = [self.tensors[i] for i in _ints(op.OutputsAsNumpy())]
        options = None
        table = op.BuiltinOptions()
        if table is not None and mapping.options is not None:
            options = getattr(self.tflite, mapping.options)()
            options.Init(table.Bytes, table.Pos)
        mapping.rule(tflite_ops.Context(self, f"{name.lower()}_{k}", where), inputs, outputs, options)
