"""Input channels padded to whole words for the Arm DSP's integer convolutions.

An int8 convolution over 3 input channels (an image network's first layer) fills no step of 4 channels:
it reads each window row's 9 bytes as 3 words (row_windows.py), at byte offsets that straddle word
boundaries three times in four (the Cortex-M4 pays a bus transfer or two for each), and a tile's two
pixels, 3 bytes apart, load separate words. With a fourth channel holding the zero point, each pixel is
one aligned word, the convolution takes the dense byte-pair kernel, and at a stride of 1 a pixel's taps
and its neighbour's load the same words: ResNet-8's first layer on the Cortex-M4 1.65 -> 1.16 M estimated
cycles, for a Pad of its 3 KB input (~8 k cycles) written over that input in place (movement._pad_rows).

The padding channel holds the input's zero point and meets zero weights (the weights' zero point where
it has one: the pass leaves those convolutions alone), so every sum is the unpadded one exactly.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from aot.graph.ir import Graph, Rewriter

WORD = 4
_BYTES = ("int8", "uint8")


def pad_channels(graph: Graph) -> Graph:
    """Each plain (group 1) quantized 2-D Conv whose input is bytes with one channel short of a whole
    word (3, 7, 11, ...), at a stride of 1 along the rows, reads that input through a Pad adding the
    zero-point channel, its weights widened with a zero input channel. Fewer channels (1, 2) stay: a
    fourth of zeros would double or quadruple their work (row_windows.py reads their window rows whole
    instead). So do strided rows, whose pixels share no words: MobileNetV1-0.25's first layer (stride 2)
    gains 0.5 % of the model's estimated cycles on the Cortex-M4 for 384 bytes more workspace."""
    if not any(_pads(graph, node) for node in graph.nodes):
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if not _pads(graph, node):
            rw.keep(node)
            continue
        x, weight = node.inputs[0], node.inputs[1]
        value = graph.values[x]
        n, h, w, c = value.shape
        padded = rw.like(f"{x}_words", x, (n, h, w, c + 1))
        rw.add("Pad", f"{node.name}_words", [x], [padded], mode="constant", value=float(value.quant.zero_point),
               pads=(0, 0, 0, 0, 0, 0, 0, 1))
        wide = np.pad(graph.constants[weight], ((0, 0), (0, 1), (0, 0), (0, 0)))
        widened = rw.constant(f"{weight}_words", wide, graph.values[weight].quant)
        rw.keep(replace(node, inputs=(padded, widened, *node.inputs[2:]),
                        attrs={**node.attrs, "padded_channels": 1}))     # not counted as MACs
    return rw.finish()


def _pads(graph: Graph, node) -> bool:
    if node.op != "Conv" or node.attrs.get("group", 1) != 1 or len(node.inputs) < 2:
        return False
    x, weight = graph.values[node.inputs[0]], graph.values.get(node.inputs[1])
    if (x.dtype not in _BYTES or x.quant is None or x.quant.axis is not None or len(x.shape) != 4
            or node.inputs[1] not in graph.constants or weight is None or weight.quant is None):
        return False
    array = graph.constants[node.inputs[1]]
    return (array.ndim == 4 and array.dtype == np.int8 and x.shape[3] % WORD == WORD - 1
            and tuple(node.attrs.get("strides", (1, 1)))[1] == 1 and not np.any(weight.quant.zero_point))
