"""Build TensorFlow Lite model files (flatbuffers) by code, for tests; no TensorFlow needed.

    b = ModelBuilder()
    x = b.input("x", (1, 8), "int8", scale=0.05, zero_point=-3)
    y = b.tensor("y", (1, 4), "int8", scale=0.1, zero_point=2)
    b.op("FULLY_CONNECTED", [x, b.constant("w", w_int8, scale=0.02), None], [y], fused_activation_function="RELU")
    b.output(y)
    data = b.build()

Tensors are referred to by index. Op options are the fields of the op's options table, in snake_case.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import flatbuffers
import numpy as np
import tflite

# Builtins whose options table is not named after them (the others are: CONV_2D -> Conv2DOptions, ...).
_OPTIONS_TABLES = {
    **dict.fromkeys(["AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"], "Pool2DOptions"),
    **dict.fromkeys(["MEAN", "SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL"],
                    "ReducerOptions"),
    **dict.fromkeys(["MAXIMUM", "MINIMUM"], "MaximumMinimumOptions"),
    **dict.fromkeys(["RANDOM_STANDARD_NORMAL", "RANDOM_UNIFORM", "MULTINOMIAL"], "RandomOptions"),
    "L2_NORMALIZATION": "L2NormOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
}

# Enum-valued option fields, whose values may be given by name ("SAME", "RELU6", ...). Other fields ending in
# _type or _dtype (quantized_bias_type, out_data_type, ...) hold a tflite.TensorType.
_ENUM_FIELDS = {
    "padding": tflite.Padding, "fused_activation_function": tflite.ActivationFunctionType,
    "weights_format": tflite.FullyConnectedOptionsWeightsFormat, "combiner": tflite.CombinerType,
    "type": tflite.LSHProjectionType, "kernel_type": tflite.LSTMKernelType, "mode": tflite.MirrorPadMode,
    "algorithm": tflite.RngAlgorithm, "reduce_function": tflite.ReduceWindowFunction,
    "comparison_direction": tflite.StablehloComparisonDirection, "compare_type": tflite.StablehloComparisonType,
    "composite_attributes_format": tflite.CustomOptionsFormat,
}

_ALIGNMENT = 16  # of constant data in the file, as the converter aligns it


def _tensor_type(dtype: str | np.dtype) -> int:
    """The tflite.TensorType of a numpy dtype or its name ("int8", "float32", ...)."""
    name = np.dtype(dtype).name.upper()
    if not hasattr(tflite.TensorType, name):
        raise ValueError(f"no TFLite tensor type for dtype {dtype!r}")
    return getattr(tflite.TensorType, name)


def _enum_value(op: str, field: str, value: Any) -> int:
    """An enum option given by name or int, as an int."""
    if not isinstance(value, str):
        return int(value)
    enum = _ENUM_FIELDS.get(field) or (tflite.TensorType if field.endswith(("_type", "_dtype")) else None)
    if enum is None:
        raise ValueError(f"{op}: option {field}={value!r} takes a number, not a name")
    if not hasattr(enum, value.upper()):
        names = sorted(name for name in vars(enum) if not name.startswith("_"))
        raise ValueError(f"{op}: option {field}={value!r} is not one of {names}")
    return getattr(enum, value.upper())


def _options_table(op: str) -> tuple[str, int, bool] | None:
    """(table name, union type, is it in BuiltinOptions2) of a builtin's options, or None if it has none."""
    wanted = _OPTIONS_TABLES.get(op, op.replace("_", "") + "Options").lower()
    for union, second in ((tflite.BuiltinOptions, False), (tflite.BuiltinOptions2, True)):
        for name, value in vars(union).items():
            if name.lower() == wanted and value:
                return name, value, second
    return None


class ModelBuilder:
    """A one-subgraph TFLite model, built up tensor by tensor and op by op; `build()` gives the file's bytes."""

    def __init__(self, name: str = "main", description: str = "aot test model") -> None:
        self._fb = flatbuffers.Builder(1024)  # tables are written as they are added; build() writes the rest
        self._name, self._description = name, description
        self._buffers = [self._buffer(b"")]  # buffer 0: the empty sentinel of non-constant tensors
        self._tensors: list[int] = []
        self._ops: list[int] = []
        self._codes: dict[tuple[str, str], int] = {}  # (builtin, custom code) -> OperatorCode index
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._data: bytes | None = None

    def tensor(self, name: str, shape: Sequence[int], dtype: str | np.dtype, scale: Any = None,
               zero_point: Any = None, quantized_dimension: int = 0, *, buffer: int = 0,
               variable: bool = False) -> int:
        """Add a tensor (an intermediate or output, unless `buffer` holds its data); returns its index.

        `scale` and `zero_point` are scalars or per-channel sequences; no quantization if scale is None.
        A `variable` tensor is state kept between runs (an LSTM's)."""
        name_off = self._open().CreateString(name)
        fields = [(tflite.TensorAddShape, self._ints(shape)), (tflite.TensorAddType, _tensor_type(dtype)),
                  (tflite.TensorAddBuffer, buffer), (tflite.TensorAddName, name_off)]
        if variable:
            fields.append((tflite.TensorAddIsVariable, True))
        if scale is not None:
            fields.append((tflite.TensorAddQuantization, self._quantization(scale, zero_point, quantized_dimension)))
        self._tensors.append(self._table(tflite.TensorStart, tflite.TensorEnd, fields))
        return len(self._tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: str | np.dtype, scale: Any = None,
              zero_point: Any = None, quantized_dimension: int = 0) -> int:
        """Add a model input (inputs are in call order); returns its index."""
        index = self.tensor(name, shape, dtype, scale, zero_point, quantized_dimension)
        self._inputs.append(index)
        return index

    def constant(self, name: str, data: np.ndarray, scale: Any = None, zero_point: Any = None,
                 quantized_dimension: int = 0) -> int:
        """Add a constant tensor holding `data` (its dtype and shape) in a buffer of its own; returns its index."""
        data = np.asarray(data)
        self._open()
        self._buffers.append(self._buffer(data.astype(data.dtype.newbyteorder("<")).tobytes()))
        return self.tensor(name, data.shape, data.dtype, scale, zero_point, quantized_dimension,
                           buffer=len(self._buffers) - 1)

    def output(self, index: int) -> int:
        """Mark a tensor as a model output (outputs are in call order); returns it."""
        self._open()
        self._check_tensors("output", [index])
        self._outputs.append(index)
        return index

    def op(self, name: str, inputs: Sequence[int | None], outputs: Sequence[int], **options: Any) -> int:
        """Add a builtin operator (a tflite.BuiltinOperator name); returns its index. None inputs are omitted
        optional inputs (-1). Enum options may be given by name ("SAME", "RELU6") or int."""
        self._open()
        if not hasattr(tflite.BuiltinOperator, name) or name == "CUSTOM":
            raise ValueError(f"unknown builtin operator {name!r} (custom_op adds custom operators)")
        table = _options_table(name)
        if table is None and options:
            raise ValueError(f"{name}: has no options table, so no option {next(iter(options))!r}")
        union = (table[1], table[2], self._options(name, table[0], options)) if table else None
        return self._operator(name, "", inputs, outputs, union, b"")

    def custom_op(self, name: str, inputs: Sequence[int | None], outputs: Sequence[int],
                  custom_options: bytes = b"") -> int:
        """Add a CUSTOM operator with custom_code `name`; returns its index."""
        self._open()
        return self._operator("CUSTOM", name, inputs, outputs, None, custom_options)

    def build(self) -> bytes:
        """The model as a .tflite file (identifier TFL3, schema version 3). The builder is closed afterwards."""
        if self._data is not None:
            return self._data
        fb, codes = self._fb, []
        for builtin, custom in self._codes:
            code = getattr(tflite.BuiltinOperator, builtin)
            fields = [(tflite.OperatorCodeAddDeprecatedBuiltinCode, min(code, 127)),  # as the converter fills it
                      (tflite.OperatorCodeAddBuiltinCode, code), (tflite.OperatorCodeAddVersion, 1)]
            if custom:
                fields.append((tflite.OperatorCodeAddCustomCode, fb.CreateString(custom)))
            codes.append(self._table(tflite.OperatorCodeStart, tflite.OperatorCodeEnd, fields))
        fields = [(tflite.SubGraphAddTensors, self._offsets(tflite.SubGraphStartTensorsVector, self._tensors)),
                  (tflite.SubGraphAddInputs, self._ints(self._inputs)),
                  (tflite.SubGraphAddOutputs, self._ints(self._outputs)),
                  (tflite.SubGraphAddOperators, self._offsets(tflite.SubGraphStartOperatorsVector, self._ops)),
                  (tflite.SubGraphAddName, fb.CreateString(self._name))]
        subgraph = self._table(tflite.SubGraphStart, tflite.SubGraphEnd, fields)
        fields = [(tflite.ModelAddVersion, 3),
                  (tflite.ModelAddOperatorCodes, self._offsets(tflite.ModelStartOperatorCodesVector, codes)),
                  (tflite.ModelAddSubgraphs, self._offsets(tflite.ModelStartSubgraphsVector, [subgraph])),
                  (tflite.ModelAddDescription, fb.CreateString(self._description)),
                  (tflite.ModelAddBuffers, self._offsets(tflite.ModelStartBuffersVector, self._buffers))]
        fb.Finish(self._table(tflite.ModelStart, tflite.ModelEnd, fields), file_identifier=b"TFL3")
        self._data = bytes(fb.Output())
        return self._data

    # Flatbuffer pieces.

    def _open(self) -> flatbuffers.Builder:
        if self._data is not None:
            raise RuntimeError("the model is already built")
        return self._fb

    def _check_tensors(self, what: str, indices: Sequence[int | None]) -> None:
        for index in indices:
            if index is not None and not 0 <= index < len(self._tensors):
                raise ValueError(f"{what}: no tensor {index}")

    def _table(self, start: Any, end: Any, fields: Sequence[tuple[Any, Any]]) -> int:
        start(self._fb)
        for add, value in fields:
            add(self._fb, value)
        return end(self._fb)

    def _ints(self, values: Sequence[int]) -> int:
        return self._fb.CreateNumpyVector(np.asarray(values, np.int32).reshape(-1))

    def _offsets(self, start: Any, offsets: Sequence[int]) -> int:
        start(self._fb, len(offsets))
        for off in reversed(offsets):
            self._fb.PrependUOffsetTRelative(off)
        return self._fb.EndVector()

    def _buffer(self, data: bytes) -> int:
        if not data:
            return self._table(tflite.BufferStart, tflite.BufferEnd, [])
        self._fb.Prep(_ALIGNMENT, len(data))  # so that the bytes, written next, start on a 16-byte boundary
        data_off = self._fb.CreateByteVector(data)
        return self._table(tflite.BufferStart, tflite.BufferEnd, [(tflite.BufferAddData, data_off)])

    def _quantization(self, scale: Any, zero_point: Any, quantized_dimension: int) -> int:
        scale = np.asarray(scale, np.float32).reshape(-1)
        zero_point = np.asarray(0 if zero_point is None else zero_point, np.int64).reshape(-1)
        zero_point = np.broadcast_to(zero_point, scale.shape)
        fields = [(tflite.QuantizationParametersAddScale, self._fb.CreateNumpyVector(scale)),
                  (tflite.QuantizationParametersAddZeroPoint, self._fb.CreateNumpyVector(np.array(zero_point))),
                  (tflite.QuantizationParametersAddQuantizedDimension, quantized_dimension)]
        return self._table(tflite.QuantizationParametersStart, tflite.QuantizationParametersEnd, fields)

    def _options(self, op: str, table: str, options: dict[str, Any]) -> int:
        """Build the options table `table` from snake_case fields, through the generated <Table>Add<Field>."""
        fb, reader, fields = self._fb, getattr(tflite, table), []
        for field, value in options.items():
            camel = "".join(part.capitalize() for part in field.split("_"))
            add = getattr(tflite, f"{table}Add{camel}", None)
            if add is None:
                known = [re.sub(r"(?<!^)(?=[A-Z])", "_", name[len(table) + 3:]).lower()
                         for name in dir(tflite) if name.startswith(f"{table}Add")]
                raise ValueError(f"{op}: unknown option {field!r} ({table} has {', '.join(known) or 'no fields'})")
            getter = inspect.getsource(getattr(reader, camel))  # the generated reader shows the field's type
            element = re.search(r"number_types\.(\w+)Flags, a \+", getter)
            slot = re.search(r"builder\.Prepend(\w+)Slot", inspect.getsource(add)).group(1)
            if hasattr(tflite, f"{table}Start{camel}Vector") and element:
                value = fb.CreateNumpyVector(np.asarray(value, element.group(1).lower()).reshape(-1))
            elif "self._tab.String(" in getter:
                value = fb.CreateString(value)
            elif slot == "UOffsetTRelative":
                raise ValueError(f"{op}: option {field!r} is a table, which this builder does not support")
            elif slot == "Bool":
                value = bool(value)
            elif slot.startswith("Float"):
                value = float(value)
            else:
                value = _enum_value(op, field, value)
            fields.append((add, value))
        return self._table(getattr(tflite, f"{table}Start"), getattr(tflite, f"{table}End"), fields)

    def _operator(self, builtin: str, custom: str, inputs: Sequence[int | None], outputs: Sequence[int],
                  union: tuple[int, bool, int] | None, custom_options: bytes) -> int:
        self._check_tensors(builtin, [*inputs, *outputs])
        opcode = self._codes.setdefault((builtin, custom), len(self._codes))
        fields = [(tflite.OperatorAddOpcodeIndex, opcode),
                  (tflite.OperatorAddInputs, self._ints([-1 if i is None else i for i in inputs])),
                  (tflite.OperatorAddOutputs, self._ints(outputs))]
        if union is not None:
            kind, second, off = union
            if second:
                fields += [(tflite.OperatorAddBuiltinOptions2Type, kind), (tflite.OperatorAddBuiltinOptions2, off)]
            else:
                fields += [(tflite.OperatorAddBuiltinOptionsType, kind), (tflite.OperatorAddBuiltinOptions, off)]
        if custom_options:
            fields.append((tflite.OperatorAddCustomOptions, self._fb.CreateByteVector(custom_options)))
        self._ops.append(self._table(tflite.OperatorStart, tflite.OperatorEnd, fields))
        return len(self._ops) - 1
