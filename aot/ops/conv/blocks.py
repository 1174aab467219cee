"""Output channels in register blocks (ChannelBlock), and the weights packed in the order a block's
micro-kernel reads them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChannelBlock:
    start: int      # first output channel (within a group)
    nr: int         # vectors per tile row
    lanes: int      # lanes per vector
    count: int = 1  # identical blocks side by side, walked by a runtime loop (one code copy)

    @property
    def width(self) -> int:
        return self.nr * self.lanes


def channel_blocks(channels: int, lanes: int, nr_max: int) -> list[ChannelBlock]:
    """Cover `channels` with runs of blocks of nr_max full vectors, then one of fewer vectors, then
    narrower vectors, then scalars."""
    blocks, start = [], 0
    full = channels // (lanes * nr_max)
    if full:
        blocks.append(ChannelBlock(0, nr_max, lanes, full))
        start = full * lanes * nr_max
    if channels - start >= lanes:
        nr = (channels - start) // lanes
        blocks.append(ChannelBlock(start, nr, lanes))
        start += nr * lanes
    half = lanes // 2
    while half >= 4:
        if channels - start >= half:
            blocks.append(ChannelBlock(start, 1, half))
            start += half
        half //= 2
    if channels > start:
        blocks.append(ChannelBlock(start, channels - start, 1))
    return blocks


def _pack_dense(weight: np.ndarray, groups: int, blocks: list[ChannelBlock], group: int = 1,
                channels_inner: bool = False) -> tuple[np.ndarray, list[int]]:
    """OIHW weights -> per group, per block: [kh][kw][c / group][block width][group] panels, concatenated;
    with `channels_inner`, [kh][kw][c / group][vector][group][lanes]: each vector's output channels
    consecutive for each input channel of the group (LaneArith's order).

    Returns the packed array and the offset of each (group, block run)."""
    m, cg, kh, kw = weight.shape
    mg = m // groups
    panels, offsets, offset = [], [], 0
    for g in range(groups):
        for blk in blocks:
            offsets.append(offset)
            for r in range(blk.count):
                first = g * mg + blk.start + r * blk.width
                rows = weight[first: first + blk.width]          # (width, cg, kh, kw)
                grouped = rows.reshape(blk.width, cg // group, group, kh, kw).transpose(3, 4, 1, 0, 2)
                if channels_inner:
                    grouped = grouped.reshape(kh, kw, cg // group, blk.nr, blk.lanes, group).transpose(0, 1, 2, 3, 5, 4)
                panel = np.ascontiguousarray(grouped).reshape(-1)
                panels.append(panel)
                offset += panel.size
    return np.concatenate(panels), offsets
