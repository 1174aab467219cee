"""ConvTranspose as a convolution per output phase, then an interleave: no scatter, no zero-stuffing.

Along one axis with stride s, dilation d and kernel K, the full output is
    full[y] = sum over (i, k) with i*s + k*d = y of x[i] * w[k].
Write y = q*s + r (phase r < s): the taps k with k*d = r (mod s) reach x[q - t] with t = (k*d - r) / s, so
each phase is an ordinary correlation of x with a small kernel of T = (K-1)*d // s + 1 taps (flipped, zero
where no tap lands). All sh*sw phases are the output channels of ONE convolution (aot's register-blocked
Conv, weights packed at compile time, bias and groups included), whose output PhaseInterleave
(rearrange.py) writes to every s-th row and column, cropping the pads. A stride-1 transposed
convolution is a single phase: just the flipped convolution.

A weight or bias computed at run time takes the same phases: the phase weights are a permutation of
the ONNX weight with zeros where no tap lands, so a Gather with constant indices (into the flattened
weight padded with one zero) lays them out at run time as the (kh*kw*C/g, outputs) matrix that the
direct convolution reads (conv/direct.py), and another tiles the bias over the phases. The gathers
cost one pass over the weight per run; the convolution itself runs no multiplication by a stuffed zero.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Node, Rewriter
from aot.ops.conv_volume import add_volume_conv_transpose
from aot.ops.rewrite import const_input, refuse, view
from aot.registry import define


def _axis(size: int, k: int, s: int, d: int, begin: int, out: int) -> dict:
    """One spatial axis: taps per phase, the convolution's pads and length, the interleave offset."""
    taps = (k - 1) * d // s + 1
    q0 = min(begin // s, taps - 1)              # first phase row the output needs, within the padding
    q_last = (begin + out - 1) // s
    length = q_last - q0 + 1
    pad_begin = taps - 1 - q0
    pad_end = max(0, length - size - pad_begin + taps - 1)
    return {"taps": taps, "pads": (pad_begin, pad_end), "length": length, "offset": begin - q0 * s}


def _phase_weights(w: np.ndarray, groups: int, strides, dilations, taps, fill=0) -> np.ndarray:
    """(C, M/g, kh, kw) transposed-conv weights -> (g*sh*sw*M/g, C/g, th, tw) convolution weights,
    output channels ordered (group, row phase, column phase, channel); `fill` where no tap lands. Given
    the indices of w's elements instead of their values, it gives where each phase weight comes from."""
    c, mg, kh, kw = w.shape
    cg = c // groups
    (sh, sw), (dh, dw), (th, tw) = strides, dilations, taps
    out = np.full((groups, sh, sw, mg, cg, th, tw), fill, w.dtype)
    wg = w.reshape(groups, cg, mg, kh, kw).transpose(0, 2, 1, 3, 4)      # (g, mg, cg, kh, kw)
    for ky in range(kh):
        ry, ty = ky * dh % sh, ky * dh // sh
        for kx in range(kw):
            rx, tx = kx * dw % sw, kx * dw // sw
            out[:, ry, rx, :, :, th - 1 - ty, tw - 1 - tx] = wg[:, :, :, ky, kx]
    return out.reshape(groups * sh * sw * mg, cg, th, tw)


def _begin_pads(rw: Rewriter, node: Node, spatial, kernel, strides, dilations) -> list[int]:
    """Where the output starts in the full result: the begin pads, explicit or from auto_pad/output_shape
    (ONNX's rule, which onnxruntime follows: for an odd total, SAME_UPPER puts the extra pad at the end,
    SAME_LOWER and an output_shape without auto_pad at the beginning)."""
    rank = len(spatial)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    out_shape = node.attrs.get("output_shape")
    if auto_pad == "VALID":
        return [0] * rank
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or out_shape is not None:
        targets = list(out_shape)[-rank:] if out_shape is not None else [n * s for n, s in zip(spatial, strides)]
        adj = node.attrs.get("output_padding", (0,) * rank)
        begins = []
        for n, k, s, d, a, t in zip(spatial, kernel, strides, dilations, adj, targets):
            total = max(0, s * (n - 1) + a + (k - 1) * d + 1 - t)
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begins
    return list(node.attrs.get("pads", (0,) * (2 * rank))[:rank])


def _gathered(rw: Rewriter, node: Node, src: str, indices: np.ndarray, hint: str, pad: bool) -> str:
    """The computed `src`, flattened (and with one zero appended if `pad`), gathered at constant indices:
    a new value of the indices' shape."""
    size = int(np.prod(rw.values[src].shape))
    flat = view(rw, node, src, (size,))
    if pad:
        padded = rw.like(src + "_padded", src, (size + 1,))
        rw.add("Pad", node.name + "_" + hint + "_pad", [flat], [padded], pads=(0, 1), mode="constant", value=0.0)
        flat = padded
    out = rw.like(node.name + "_" + hint, src, indices.shape)
    rw.add("Gather", node.name + "_" + hint, [flat, rw.constant(node.name + "_" + hint + "_idx",
                                                                 indices.astype(np.int32))], [out], axis=0)
    return out


def _direct_operands(rw: Rewriter, node: Node, w4: tuple[int, ...], groups: int, strides, dilations, taps,
                     phases: int) -> tuple[str, str]:
    """The phase weights as the (th*tw*C/g, outputs) matrix ConvDirect reads, and the phase bias (or ''),
    each a constant when its source is one and gathered at run time otherwise."""
    w, bias = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else ""
    size = int(np.prod(w4))
    where = _phase_weights(np.arange(size).reshape(w4), groups, strides, dilations, taps, fill=size)
    where = where.transpose(2, 3, 1, 0).reshape(-1, where.shape[0])      # (th, tw, C/g, outputs)
    if w in rw.constants:
        padded = np.append(rw.constants[w].astype(np.float32).reshape(-1), np.float32(0))
        matrix = rw.constant(node.name + "_phase_w", padded[where])
    else:
        matrix = _gathered(rw, node, w, where, "phase_w", pad=True)
    if not bias:
        return matrix, ""
    mg = w4[1]
    tiled = np.tile(np.arange(groups * mg).reshape(groups, 1, mg), (1, phases, 1)).reshape(-1)
    if bias in rw.constants:
        return matrix, rw.constant(node.name + "_phase_b", rw.constants[bias].astype(np.float32).reshape(-1)[tiled])
    return matrix, _gathered(rw, node, bias, tiled, "phase_b", pad=False)


def _integer_phase_operands(rw: Rewriter, node: Node, w4: tuple[int, ...], groups: int, strides, dilations, taps,
                            phases: int) -> list[str]:
    """The phase convolution's int8 weights, their per-channel encoding and the int32 bias, tiled over the
    phases as the output channels are: each phase's sum is the transposed convolution's, every tap that
    does not land there a zero weight, so the integer results and their requantization are its own."""
    name, bias = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else ""
    wq = rw.values[name].quant
    if name not in rw.constants or wq.axis not in (None, 1) or (bias and bias not in rw.constants):
        raise refuse(node, "integer weights must be constant, quantized per tensor or per output channel, "
                           "with a constant bias")
    mg = w4[1]

    def tiled(per_channel) -> np.ndarray:
        values = np.broadcast_to(np.asarray(per_channel), (groups * mg,))
        return np.tile(values.reshape(groups, 1, mg), (1, phases, 1)).reshape(-1)

    weight = _phase_weights(rw.constants[name].reshape(w4), groups, strides, dilations, taps)
    quant = dataclasses.replace(wq, scale=tiled(wq.scale), zero_point=tiled(wq.zero_point), axis=0)
    inputs = [node.inputs[0], rw.constant(node.name + "_phase_w", weight, quant), ""]
    if bias:        # (a 16x8 layer's int64 bias carries no encoding)
        bq = rw.values[bias].quant
        tiled_quant = bq and dataclasses.replace(bq, scale=tiled(bq.scale), zero_point=tiled(bq.zero_point), axis=0)
        inputs[2] = rw.constant(node.name + "_phase_b", tiled(rw.constants[bias].reshape(-1)), tiled_quant)
    return inputs


def _check_channels(rw: Rewriter, node: Node, weight: tuple[int, ...], groups: int) -> None:
    """The weight's first axis spans the input channels, which `group` divides (onnx's inference checks
    neither)."""
    channels = rw.values[node.inputs[0]].shape[1]
    if groups < 1 or weight[0] != channels or channels % groups:
        raise ModelError(f"node '{node.name}' (ConvTranspose): a weight of shape {list(weight)} with group {groups} "
                         f"does not fit {channels} input channels")


def canonical_conv_transpose(rw: Rewriter, node: Node) -> None:
    """ConvTranspose -> Conv (constant weights, packed) or ConvDirect (a weight or bias computed at run
    time), then PhaseInterleave; 1-D as 2-D over a height of 1; 3-D as direct loops (conv_volume.py)."""
    wshape = rw.values[node.inputs[1]].shape
    rank = len(wshape) - 2
    if rank not in (1, 2, 3):
        raise refuse(node, f"{rank}-D transposed convolution is not supported (1-D to 3-D are)")
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = rw.values[x].shape, rw.values[y].shape
    kernel = tuple(wshape[2:])
    strides = tuple(node.attrs.get("strides", (1,) * rank))
    dilations = tuple(node.attrs.get("dilations", (1,) * rank))
    groups = int(node.attrs.get("group", 1))
    _check_channels(rw, node, wshape, groups)
    begins = _begin_pads(rw, node, xs[2:], kernel, strides, dilations)
    if any(p < 0 for p in begins):
        raise refuse(node, "negative pads are not supported")
    if rank == 3:       # direct loops over NCDHW
        add_volume_conv_transpose(rw, node, strides, dilations, begins, groups)
        return
    w4 = tuple(wshape)
    if rank == 1:       # as 2-D over a height of 1
        xs, ys, kernel, strides, dilations, begins = ((xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2]),
                                                      (1,) + kernel, (1,) + strides, (1,) + dilations, [0] + begins)
        x = view(rw, node, x, xs)
        w4 = (wshape[0], wshape[1], 1, wshape[2])
    axes = [_axis(n, k, s, d, b, o) for n, k, s, d, b, o in zip(xs[2:], kernel, strides, dilations, begins, ys[2:])]
    taps = [a["taps"] for a in axes]
    phases = strides[0] * strides[1]
    mg = ys[1] // groups
    z = rw.like(node.name + "_phases", y, (xs[0], groups * phases * mg, axes[0]["length"], axes[1]["length"]))
    conv_attrs = {"kernel": tuple(taps), "strides": (1, 1), "dilations": (1, 1), "group": groups,
                  "pads": (axes[0]["pads"][0], axes[1]["pads"][0], axes[0]["pads"][1], axes[1]["pads"][1])}
    wq = rw.values[node.inputs[1]].quant
    if wq is not None:      # integer weights (a TFLite TRANSPOSE_CONV): the phases of an integer Conv
        inputs = _integer_phase_operands(rw, node, w4, groups, strides, dilations, taps, phases)
        rw.add("Conv", node.name + "_phases", inputs, [z], **conv_attrs,
               **({"acts": node.attrs["acts"]} if "acts" in node.attrs else {}))
    elif all(not name or name in rw.constants for name in node.inputs[1:3]):
        w = rw.constants[node.inputs[1]].astype(np.float32).reshape(w4)
        bias = const_input(rw, node, 2, "the bias")
        weight = _phase_weights(w, groups, strides, dilations, taps)
        inputs = [x, rw.constant(node.name + "_phase_w", weight), ""]
        if bias is not None:
            inputs[2] = rw.constant(node.name + "_phase_b", np.tile(
                bias.astype(np.float32).reshape(groups, 1, mg), (1, phases, 1)).reshape(-1))
        rw.add("Conv", node.name + "_phases", inputs, [z], **conv_attrs)
    else:
        matrix, bias_name = _direct_operands(rw, node, w4, groups, strides, dilations, taps, phases)
        rw.add("ConvDirect", node.name + "_phases", [x, matrix, bias_name], [z], **conv_attrs)
    y4 = y if rank == 2 else rw.like(y + "_2d", y, ys)
    rw.add("PhaseInterleave", node.name, [z], [y4], strides=strides, groups=groups,
           offset=(axes[0]["offset"], axes[1]["offset"]))
    if rank == 1:
        view(rw, node, y4, rw.values[y].shape, y)


define("ConvTranspose", canonical=canonical_conv_transpose)
