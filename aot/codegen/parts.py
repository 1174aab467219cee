"""A model's kernels in parts that two processes compile at the same time, each its share one part after
another (aot/codegen/llvm.py joins their objects): two, or more where the kernels are large (LLVM holds a
part's module at a time: smaller parts, less memory), as even as the kernels' sizes allow, without
splitting what must or should stay together.

Kernels that read the same weight buffer stay in one part (each part's object holds the weights its
kernels read), and so do kernels that look alike, the same template on the same shapes: those that may
share a body, which only kernels of one module can. The groups go to the lighter part, largest first,
each weighed by the size of the bodies it may need (one per look)."""

from __future__ import annotations

from aot.kernel import ir as k

PARALLEL_KERNELS = 16       # from this many kernels a build compiles them in two processes
PART_SIZE = 20_000          # kernel IR nodes (k.size) a part holds, about: YOLOv8n's for AArch64 in 6 parts


def parts(kernels: list[k.Kernel], model: str) -> list[list[k.Kernel]]:
    """The kernels (of the model named `model`) in an even number of parts, each in call order, or in one."""
    n = len(kernels)
    if n < PARALLEL_KERNELS:
        return [kernels]
    group = list(range(n))

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i
    looks = [likeness(kernel, model) for kernel in kernels]
    first_reader: dict[object, int] = {}
    for i, kernel in enumerate(kernels):
        for key in [buf.name for buf in k.constants(kernel)] + [looks[i]]:
            j = first_reader.setdefault(key, i)
            group[root(i)] = root(j)
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(root(i), []).append(i)
    weight = {r: size([kernels[i] for i in m], model) for r, m in members.items()}
    count = 2 * max(1, -(-sum(weight.values()) // (2 * PART_SIZE)))
    split: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for r in sorted(members, key=lambda r: (-weight[r], r)):
        lighter = loads.index(min(loads))
        split[lighter] += members[r]
        loads[lighter] += weight[r]
    split = [part for part in split if part]
    if len(split) == 1:
        return [kernels]
    return [[kernels[i] for i in sorted(part)] for part in split]


def size(kernels: list[k.Kernel], model: str) -> int:
    """The IR nodes (k.size) of the bodies the kernels need: one per look, as alike kernels may share one."""
    return sum({likeness(kernel, model): k.size(kernel) for kernel in kernels}.values())


def likeness(kernel: k.Kernel, model: str) -> tuple:
    """What kernels that may share a body have in common, known before their IR is built: the template
    (the name after the model and step) and the sizes of what they read and write."""
    template = kernel.name.removeprefix(f"{model}_").partition("_")[2]
    return (template, tuple((b.dtype, b.size) for b in kernel.params),
            tuple((b.dtype, b.size) for b in k.constants(kernel)))
