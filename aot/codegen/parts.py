"""A model's kernels in two parts that two processes compile at the same time (aot/codegen/llvm.py joins
their objects): as even as the kernels' sizes allow, without splitting what must or should stay together.

Kernels that read the same weight buffer stay in one part (each part's object holds the weights its
kernels read), and so do kernels that look alike, the same template on the same shapes: those that may
share a body, which only kernels of one module can. The groups go to the lighter part, largest first,
each weighed by the size of the bodies it may need (one per look)."""

from __future__ import annotations

from aot.kernel import ir as k

PARALLEL_KERNELS = 16       # from this many kernels a build compiles them in two processes


def parts(kernels: list[k.Kernel], model: str) -> list[list[k.Kernel]]:
    """The kernels (of the model named `model`) in two parts, each in call order, or in one."""
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
    weight = {r: sum({looks[i]: k.size(kernels[i]) for i in m}.values()) for r, m in members.items()}
    split: list[list[int]] = [[], []]
    loads = [0, 0]
    for r in sorted(members, key=lambda r: (-weight[r], r)):
        lighter = 0 if loads[0] <= loads[1] else 1
        split[lighter] += members[r]
        loads[lighter] += weight[r]
    if not split[1]:
        return [kernels]
    return [[kernels[i] for i in sorted(part)] for part in split]


def likeness(kernel: k.Kernel, model: str) -> tuple:
    """What kernels that may share a body have in common, known before their IR is built: the template
    (the name after the model and step) and the sizes of what they read and write."""
    template = kernel.name.removeprefix(f"{model}_").partition("_")[2]
    return (template, tuple((b.dtype, b.size) for b in kernel.params),
            tuple((b.dtype, b.size) for b in k.constants(kernel)))
