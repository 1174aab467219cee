"""DFT and STFT as matrix products: the transform of a fixed length is a constant matrix, so a DFT becomes a
Gemm (with the register-blocked micro-kernel) between transposes that bring the signal axis last.

A row of the Gemm's input holds one signal with its real/imaginary parts interleaved (n * c + j for c
components); a column of the constant matrix gives one output component (k * 2 + re/im):

    forward  X[k] = sum_n x[n] e^(-2 pi i k n / N)        inverse  x[n] = 1/N sum_k X[k] e^(+2 pi i k n / N)

Signals shorter than dft_length are zero-padded (their rows are absent), longer ones truncated. An axis
fed at run time (an input from opset 20) is read only where the shapes allow several: a DFT along each,
the one it names kept.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Kernel
from aot.ops import LowerContext
from aot.ops.movement import copy_loops
from aot.ops.rewrite import axes_from_zero, const_input, refuse, select_at_run_time, view
from aot.registry import FLOAT, define


def dft_matrix(length: int, components: int, dft_length: int, onesided: bool, inverse: bool) -> np.ndarray:
    """(length * components, outputs * 2) with outputs = dft_length // 2 + 1 if onesided else dft_length;
    an inverse onesided transform gives real signals instead, (length * 2, dft_length)."""
    if inverse and onesided:
        return _irfft_matrix(length, dft_length)
    outputs = dft_length // 2 + 1 if onesided else dft_length
    used = min(length, dft_length)
    n = np.arange(used, dtype=np.float64)[:, None]
    k = np.arange(outputs, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * n * k / dft_length
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(angle), sign * np.sin(angle)            # e^(sign i angle) = cos + i sin
    scale = 1.0 / dft_length if inverse else 1.0
    matrix = np.zeros((length, components, outputs, 2), np.float64)
    matrix[:used, 0, :, 0], matrix[:used, 0, :, 1] = cos, sin                     # real part of x
    if components == 2:
        matrix[:used, 1, :, 0], matrix[:used, 1, :, 1] = -sin, cos                # imaginary part of x
    return (matrix * scale).reshape(length * components, outputs * 2).astype(np.float32)


def _irfft_matrix(length: int, dft_length: int) -> np.ndarray:
    """The real signal of a one-sided spectrum (numpy's irfft): bins k and N - k are conjugates, so each
    bin but DC and Nyquist counts twice; their imaginary parts meet sin = 0 and drop out."""
    bins = min(length, dft_length // 2 + 1)
    k = np.arange(bins, dtype=np.float64)[:, None]
    n = np.arange(dft_length, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * k * n / dft_length
    twice = np.where((k == 0) | (2 * k == dft_length), 1.0, 2.0)
    matrix = np.zeros((length, 2, dft_length), np.float64)
    matrix[:bins, 0], matrix[:bins, 1] = twice * np.cos(angle), -twice * np.sin(angle)
    return (matrix / dft_length).reshape(length * 2, dft_length).astype(np.float32)


def canonical_dft(rw: Rewriter, node: Node) -> None:
    """The axis fed at run time (an input from opset 20): a DFT along each signal axis that gives the
    declared output shape, the one the axis names kept (select_at_run_time); the value is not read when
    the shapes allow one axis only."""
    x, out = node.inputs[0], node.outputs[0]
    shape = rw.values[x].shape
    rank = len(shape)
    if rank < 3 or shape[-1] not in (1, 2):
        raise refuse(node, "the input must be (batch, ..., signal, 1 or 2)")
    onesided, inverse = bool(node.attrs.get("onesided", 0)), bool(node.attrs.get("inverse", 0))
    if onesided and not inverse and shape[-1] == 2:
        raise refuse(node, "a onesided transform of a complex input is not defined")
    if onesided and inverse and shape[-1] != 2:
        raise ModelError(f"node '{node.name}' (DFT): an inverse one-sided transform takes a complex spectrum (last "
                         f"dimension 2, as ONNX's shape inference requires), not {shape[-1]}")
    dft_length = const_input(rw, node, 1, "dft_length")
    dft_length = int(dft_length) if dft_length is not None else None
    axis_input = node.inputs[2] if len(node.inputs) > 2 else ""
    if axis_input and axis_input not in rw.constants:
        out_shape = rw.values[out].shape
        axes = [a for a in range(rank - 1) if _dft_shape(shape, a, dft_length, onesided, inverse) == out_shape]
        if not axes:
            raise refuse(node, f"no signal axis of the input's shape {list(shape)} gives the output's shape "
                               f"{list(out_shape)}")
        choices = [(a, partial(_dft_along, rw, node, a, dft_length, onesided, inverse)) for a in axes]
        select_at_run_time(rw, node, out, choices, partial(axes_from_zero, rw, node, axis_input, rank))
        return
    axis = const_input(rw, node, 2, "axis")
    axis = int(axis) if axis is not None else int(node.attrs.get("axis", 1 if rw.graph.opset < 20 else -2))
    axis %= rank
    if axis == rank - 1:
        raise refuse(node, f"axis {axis} is the component axis, not a signal axis")
    _dft_along(rw, node, axis, dft_length, onesided, inverse, out)


def _default_length(length: int, onesided: bool, inverse: bool) -> int:
    """dft_length when not given: the signal's length, or the real signal's of a one-sided spectrum."""
    return 2 * (length - 1) if inverse and onesided else length


def _dft_shape(shape: tuple[int, ...], axis: int, dft_length: int | None, onesided: bool,
               inverse: bool) -> tuple[int, ...]:
    """The output's shape of a DFT of `shape` along `axis`."""
    n = dft_length if dft_length is not None else _default_length(shape[axis], onesided, inverse)
    if inverse and onesided:
        return shape[:axis] + (n,) + shape[axis + 1:-1] + (1,)
    return shape[:axis] + (n // 2 + 1 if onesided else n,) + shape[axis + 1:-1] + (2,)


def _dft_along(rw: Rewriter, node: Node, axis: int, dft_length: int | None, onesided: bool, inverse: bool,
               out: str) -> None:
    """`out` = the DFT of the node's input along `axis` (0..rank-2: ONNX's reference and onnxruntime
    transform the first axis too)."""
    x = node.inputs[0]
    shape = rw.values[x].shape
    rank, length, components = len(shape), shape[axis], shape[-1]
    dft_length = dft_length if dft_length is not None else _default_length(length, onesided, inverse)
    matrix = rw.constant(node.name + "_dft", dft_matrix(length, components, dft_length, onesided, inverse))
    matrix_columns = rw.constants[matrix].shape[1]
    out_components = rw.values[out].shape[-1]
    # Bring the signal axis next to the components, make rows of signals, multiply, and go back.
    perm = tuple(a for a in range(rank - 1) if a != axis) + (axis, rank - 1)
    moved = x
    if perm != tuple(range(rank)):
        moved = rw.like(x + "_signal_last", x, tuple(shape[p] for p in perm))
        rw.add("Transpose", node.name + "_to_rows", [x], [moved], perm=perm)
    batch = tuple(shape[p] for p in perm[:-2])
    rows = int(np.prod(batch, dtype=np.int64))
    flat = view(rw, node, moved, (rows, length * components))
    product = rw.value(node.name + "_product", (rows, matrix_columns))
    rw.add("Gemm", node.name, [flat, matrix, ""], [product])
    if perm == tuple(range(rank)):
        view(rw, node, product, rw.values[out].shape, out)
        return
    spectra = view(rw, node, product, batch + (matrix_columns // out_components, out_components))
    rw.add("Transpose", node.name + "_from_rows", [spectra], [out], perm=tuple(int(i) for i in np.argsort(perm)))


def canonical_stft(rw: Rewriter, node: Node) -> None:
    """STFT: the frames of each signal copied into rows (they overlap, so this is a copy, not a view),
    times one constant matrix: the window folded into the DFT of the frame length."""
    x, out = node.inputs[0], node.outputs[0]
    batch, length, components = rw.values[x].shape
    step = const_input(rw, node, 1, "frame_step")
    window = const_input(rw, node, 2, "the window")
    frame_length = const_input(rw, node, 3, "frame_length")
    if step is None:
        raise refuse(node, "frame_step is required")
    frame = int(frame_length) if frame_length is not None else (window.shape[0] if window is not None else None)
    if frame is None:
        raise refuse(node, "neither a window nor frame_length gives the frame length")
    onesided = bool(node.attrs.get("onesided", 1))
    if onesided and components == 2:
        raise refuse(node, "a onesided transform of a complex input is not defined")
    step = int(step)
    frames = (length - frame) // step + 1
    matrix = dft_matrix(frame, components, frame, onesided, inverse=False)
    if window is not None:
        matrix = matrix * np.repeat(window.astype(np.float32), components)[:, None]
    rows = rw.value(node.name + "_frames", (batch * frames, frame * components))
    rw.add("Frames", node.name + "_frames", [x], [rows], step=step, frame=frame)
    product = rw.value(node.name + "_product", (batch * frames, matrix.shape[1]))
    rw.add("Gemm", node.name, [rows, rw.constant(node.name + "_dft", matrix), ""], [product])
    view(rw, node, product, rw.values[out].shape, out)


def frames(ctx: LowerContext, node: Node, name: str) -> Kernel:
    """rows[b * frames + f] = signal[b, f * step : f * step + frame] (all components)."""
    ins, outs, params = ctx.io(node)
    batch, length, components = ctx.graph.shape(node.inputs[0])
    step, frame = node.attrs["step"], node.attrs["frame"]
    count = ctx.graph.shape(node.outputs[0])[0] // batch
    b = Builder()
    copy_loops(b, ctx.target.lanes, [batch, count, frame * components], ins[0],
               [length * components, step * components, 1], 0, outs[0],
               [count * frame * components, frame * components, 1], 0)
    return Kernel(name, params, b.block())


define("DFT", canonical=canonical_dft, dtypes=FLOAT | {"int64", "int32"})
define("STFT", canonical=canonical_stft, dtypes=FLOAT | {"int64", "int32"})
define("Frames", lower=frames)
