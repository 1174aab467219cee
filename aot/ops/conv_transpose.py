"""ConvTranspose as a convolution per output phase, then an interleave: no scatter, no zero-stuffing.

Along one axis with stride s, dilation d and kernel K, the full output is
    full[y] = sum over (i, k) with i*s + k*d = y of x[i] * w[k].
Write y = q*s + r (phase r < s): the taps k with k*d = r (mod s) reach x[q - t] with t = (k*d - r) / s, so
each phase is an ordinary correlation of x with a small kernel of T = (K-1)*d // s + 1 taps (flipped, zero
where no tap lands). All sh*sw phases are the output channels of ONE convolution (aot's register-blocked
Conv, weights packed at compile time, bias and groups included), whose output PhaseInterleave
(rearrange.py) writes to every s-th row and column, cropping the pads. A stride-1 transposed
convolution is a single phase: just the flipped convolution.
"""

from __future__ import annotations

import numpy as np

from aot.errors import ModelError
from aot.graph.ir import Node, Rewriter
from aot.ops.conv_volume import add_volume_conv_transpose
from aot.ops.registry import define
from aot.ops.rewrite import const_input, refuse, view


def _axis(size: int, k: int, s: int, d: int, begin: int, out: int) -> dict:
    """One spatial axis: taps per phase, the convolution's pads and length, the interleave offset."""
    taps = (k - 1) * d // s + 1
    q0 = min(begin // s, taps - 1)              # first phase row the output needs, within the padding
    q_last = (begin + out - 1) // s
    length = q_last - q0 + 1
    pad_begin = taps - 1 - q0
    pad_end = max(0, length - size - pad_begin + taps - 1)
    return {"taps": taps, "pads": (pad_begin, pad_end), "length": length, "offset": begin - q0 * s}


def _phase_weights(w: np.ndarray, groups: int, strides, dilations, taps) -> np.ndarray:
    """(C, M/g, kh, kw) transposed-conv weights -> (g*sh*sw*M/g, C/g, th, tw) convolution weights,
    output channels ordered (group, row phase, column phase, channel)."""
    c, mg, kh, kw = w.shape
    cg = c // groups
    (sh, sw), (dh, dw), (th, tw) = strides, dilations, taps
    out = np.zeros((groups, sh, sw, mg, cg, th, tw), np.float32)
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


def _check_channels(rw: Rewriter, node: Node, weight: tuple[int, ...], groups: int) -> None:
    """The weight's first axis spans the input channels, which `group` divides (onnx's inference checks
    neither)."""
    channels = rw.values[node.inputs[0]].shape[1]
    if groups < 1 or weight[0] != channels or channels % groups:
        raise ModelError(f"node '{node.name}' (ConvTranspose): a weight of shape {list(weight)} with group {groups} "
                         f"does not fit {channels} input channels")


def canonical_conv_transpose(rw: Rewriter, node: Node) -> None:
    w = const_input(rw, node, 1, "the weight")
    rank = w.ndim - 2
    if rank not in (1, 2, 3):
        raise refuse(node, f"{rank}-D transposed convolution is not supported (1-D to 3-D are)")
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = rw.values[x].shape, rw.values[y].shape
    kernel = tuple(w.shape[2:])
    strides = tuple(node.attrs.get("strides", (1,) * rank))
    dilations = tuple(node.attrs.get("dilations", (1,) * rank))
    groups = int(node.attrs.get("group", 1))
    _check_channels(rw, node, w.shape, groups)
    begins = _begin_pads(rw, node, xs[2:], kernel, strides, dilations)
    if any(p < 0 for p in begins):
        raise refuse(node, "negative pads are not supported")
    bias = const_input(rw, node, 2, "the bias")
    if rank == 3:       # direct loops over NCDHW
        add_volume_conv_transpose(rw, node, strides, dilations, begins, groups)
        return
    if rank == 1:       # as 2-D over a height of 1
        xs, ys, kernel, strides, dilations, begins = ((xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2]),
                                                      (1,) + kernel, (1,) + strides, (1,) + dilations, [0] + begins)
        x = view(rw, node, x, xs)
        w = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2])
    axes = [_axis(n, k, s, d, b, o) for n, k, s, d, b, o in zip(xs[2:], kernel, strides, dilations, begins, ys[2:])]
    weight = _phase_weights(w.astype(np.float32), groups, strides, dilations, [a["taps"] for a in axes])
    phases = strides[0] * strides[1]
    mg = ys[1] // groups
    inputs = [x, rw.constant(node.name + "_phase_w", weight), ""]
    if bias is not None:
        inputs[2] = rw.constant(node.name + "_phase_b", np.tile(bias.astype(np.float32).reshape(groups, 1, mg),
                                                                 (1, phases, 1)).reshape(-1))
    z = rw.like(node.name + "_phases", y, (xs[0], groups * phases * mg, axes[0]["length"], axes[1]["length"]))
    rw.add("Conv", node.name + "_phases", inputs, [z], kernel=tuple(weight.shape[2:]), strides=(1, 1),
           dilations=(1, 1), pads=(axes[0]["pads"][0], axes[1]["pads"][0], axes[0]["pads"][1], axes[1]["pads"][1]),
           group=groups)
    y4 = y if rank == 2 else rw.like(y + "_2d", y, ys)
    rw.add("PhaseInterleave", node.name, [z], [y4], strides=strides, groups=groups,
           offset=(axes[0]["offset"], axes[1]["offset"]))
    if rank == 1:
        view(rw, node, y4, rw.values[y].shape, y)


define("ConvTranspose", canonical=canonical_conv_transpose)
