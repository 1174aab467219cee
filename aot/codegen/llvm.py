"""Kernel IR → LLVM IR (through llvmlite's builder) → optimized object file for a target.

Kernels whose functions differ only in the weights they read share one body (ModuleBuilder._text): for a
detector with repeated blocks that halves the code and the time LLVM takes to compile it."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from aot.codegen.elf import Blob
from aot.codegen.parts import likeness, parts, size
from aot.codegen.relocatable import CannotJoin, data_object, join
from aot.errors import InternalError
from aot.isa import INT_SIMD
from aot.kernel import ir as k
from aot.kernel import literals
from aot.kernel.verify import verify_kernel
from aot.schedule import input_pixels
from aot.target import Target

_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_SCALARS = {"f32": _F32, "f64": ir.DoubleType(), "i32": _I32, "i64": ir.IntType(64), "i16": ir.IntType(16),
            "i8": ir.IntType(8), "u8": ir.IntType(8),
            "i1": ir.IntType(1)}
_FLOAT_OPS = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
_INT_OPS = {"add": "add", "sub": "sub", "mul": "mul", "and": "and_", "or": "or_", "xor": "xor", "shl": "shl",
            "shr": "ashr"}
_UNSIGNED = {"u8"}     # uint8 and bool: compared, ordered and divided as unsigned
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


def target_machine(target: Target) -> llvm.TargetMachine:
    _init_llvm()
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, reloc=target.reloc, codemodel="default")


@dataclass(frozen=True)
class Compiled:
    """A module's object file and, as text, the stages that made it."""
    object: bytes
    ir: str             # the module as built, before optimization
    optimized_ir: str   # after the O3 pipeline, before code generation
    assembly: str       # the target assembly of the object's code


def _splat_value(ty: ir.Type, value: int):
    """A constant's payload for a scalar or vector integer type."""
    return [value] * ty.count if isinstance(ty, ir.VectorType) else value


class ModuleBuilder:
    """One LLVM module for a whole model: kernels as exported functions, weights as const globals (the
    larger ones only declared, their bytes joined to the object as data)."""

    def __init__(self, name: str, target: Target, vectorize: bool = True, opt_level: int = 3, share: bool = True,
                 float_lsr_limit: int = -1, share_numbers: bool = True):
        self.target = target
        self.vectorize = vectorize      # False: LLVM's loop and SLP vectorizers stay off (scalar builds)
        self.opt_level = opt_level      # LLVM's pipeline: O2 or O3
        self.share = share              # kernels alike share one body (_text); False: each has its own
        self.share_numbers = share_numbers  # and kernels alike but for numbers, read from a table (_twins)
        self.float_lsr_limit = float_lsr_limit      # see Knobs.float_lsr_limit
        self.data_weights = True        # larger weights declared only, joined to the object as data
        self.tm = target_machine(target)
        self.module = ir.Module(name=name)
        self.module.triple = self.tm.triple
        self.module.data_layout = str(self.tm.target_data)
        self.index_type = ir.IntType(target.pointer_bits)
        self._globals: dict[str, ir.GlobalVariable] = {}
        self._abi_sizes: dict[str, int] = {}
        self.kernels: list[k.Kernel] = []

    def scalar(self, dtype: str) -> ir.Type:
        return self.index_type if dtype == "idx" else _SCALARS[dtype]

    def abi_size(self, dtype: str) -> int:
        """Bytes of one element; asked once per dtype (llvmlite answers by parsing a module)."""
        if dtype not in self._abi_sizes:
            self._abi_sizes[dtype] = self.scalar(dtype).get_abi_size(self.tm.target_data)
        return self._abi_sizes[dtype]

    def type_of(self, dtype: str, lanes: int) -> ir.Type:
        return self.scalar(dtype) if lanes == 1 else ir.VectorType(self.scalar(dtype), lanes)

    def constant_global(self, buf: k.Buffer) -> ir.GlobalVariable:
        """The weights as an array of bytes, which kernels address with typed GEPs (pointers are opaque).
        Small ones are the module's own, their bytes in the IR (LLVM may fold a load of them); larger
        ones are declared only, their bytes joined to the object as data (emit_object): LLVM never
        holds or prints them."""
        if buf.name not in self._globals:
            arr = ir.ArrayType(ir.IntType(8), buf.data.nbytes)
            g = ir.GlobalVariable(self.module, arr, name=buf.name)
            g.global_constant = True
            g.align = self.target.align
            if self.data_weights and _joined_as_data(buf):
                g.linkage, g.storage_class = "external", "dso_local"
            else:
                g.linkage = "internal"
                g.section = f"{self.target.weights_prefix}.{buf.name}"
                g.initializer = _Bytes(arr, bytearray(_little_endian(buf)))
            self._globals[buf.name] = g
        return self._globals[buf.name]

    def _with_weights(self, code: bytes, chunked: bool = False) -> Blob:
        """The code object joined to an object of the weights its module declares, each in a section of
        its own (the target's weights prefix and its name), local to the object as the module's own are;
        `chunked`: as its chunks (elf.Blob), the weights not copied out of their arrays."""
        if not self._weights_as_data():
            return code
        blobs: dict[str, k.Buffer] = {}
        for kernel in self.kernels:
            for buf in k.constants(kernel):
                if _joined_as_data(buf):
                    blobs.setdefault(buf.name, buf)
        if not blobs:
            return code
        data = data_object(code, [(f"{self.target.weights_prefix}.{name}", name, _little_endian(buf), self.target.align)
                                  for name, buf in blobs.items()], read=True)
        try:
            return join(code, data, localize=frozenset(blobs), chunked=chunked)
        except CannotJoin as err:
            raise InternalError(f"joining the weights to the code object failed: {err}") from err

    def _weights_as_data(self) -> bool:
        """Whether the larger weights go to a data object: unless the object would hold more sections
        than an ELF object numbers without an extended index table (which the joiner does not take)."""
        sections = sum(4 + literals.TABLES + len(k.constants(kernel)) for kernel in self.kernels)
        return sections < SECTIONS_JOINED

    def intrinsic(self, name: str, ty: ir.Type, arity: int) -> ir.Function:
        """An overloaded LLVM intrinsic on `ty` (scalar or vector float), declared once."""
        return self.declare(f"{name}.{_float_suffix(ty)}", ir.FunctionType(ty, [ty] * arity))

    def declare(self, name: str, fn_type: ir.FunctionType) -> ir.Function:
        """A function (an LLVM intrinsic) declared once per module."""
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, fn_type, name=name)

    def add_kernel(self, kernel: k.Kernel) -> None:
        """A kernel for the module, verified (aot/kernel/verify.py) as its part's source is built: in the
        process that compiles it."""
        self.kernels.append(kernel)

    def _prototype(self, kernel: k.Kernel) -> ir.Function:
        fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType() for _ in kernel.params])
        fn = ir.Function(self.module, fn_type, name=kernel.name)
        fn.section = f".text.{kernel.name}"
        fn.attributes.add("nounwind")
        set.add(fn.attributes, '"no-builtins"')   # keep LLVM from turning loops into memcpy/memset calls
        for arg, buf in zip(fn.args, kernel.params):
            arg.name = buf.name
            # A kernel that may write its output over a dying input (its Reuse) is correct only in the
            # order its loops run; noalias would let LLVM move a store above a load of the same bytes
            # (the AArch64 scheduler did, in a backward depthwise convolution).
            if not kernel.reuse:
                arg.add_attribute("noalias")
        return fn

    def _function(self, kernel: k.Kernel) -> None:
        fn = self._prototype(kernel)
        emitter = _FunctionEmitter(self, fn, dict(zip(kernel.params, fn.args)))
        for buf in kernel.stack:
            slot = emitter.alloca_builder.alloca(ir.ArrayType(self.scalar(buf.dtype), buf.size), name=buf.name)
            slot.align = 64
            slot.type = ir.PointerType()        # opaque, as a parameter's: indexed by element type
            emitter.params[buf] = slot
        emitter.emit(kernel.body)

    def _source(self, kernels: list[k.Kernel]) -> str:
        """The LLVM IR text of a module of `kernels` (built in a builder of its own). A kernel of the
        structure of one before it (the same code but for its weights, and for numbers that move to a
        table: see _twins) is not built again: it calls the body the first one's function becomes (see
        _text)."""
        kernels, twins = _twins(kernels, self.module.name, self.share_numbers) if self.share else (kernels, {})
        for kernel in kernels:
            verify_kernel(kernel, self.target.pointer_bits)
        part = ModuleBuilder(self.module.name, self.target, self.vectorize, self.opt_level, self.share,
                             self.float_lsr_limit, self.share_numbers)
        part.data_weights = self._weights_as_data()
        if not self.share:
            for kernel in kernels:
                part._function(kernel)
            return str(part.module)
        alike: dict[str, k.Kernel] = {}     # a kernel not built -> the one of its structure that was
        for kernel in kernels:
            built = twins.get(kernel.name, kernel)
            if built is kernel:
                part._function(kernel)
                continue
            alike[kernel.name] = built
            for buf in k.constants(kernel):
                part.constant_global(buf)
            part._prototype(kernel)
        return part._text(kernels, alike)

    def _text(self, kernels: list[k.Kernel], alike: dict[str, k.Kernel]) -> str:
        """The module's IR text, in which kernels whose functions differ only in the weights they read
        (a network's repeated blocks) share one body: an internal function that takes the weights as
        parameters, which each kernel calls with its own. LLVM optimizes and compiles that body once,
        and the object holds it once. Built functions are compared by their IR text, so only kernels
        that compile to the same code share it; those not built (`alike`) share their twin's body."""
        texts = {kernel.name: self._texts(kernel) for kernel in kernels if kernel.name not in alike}
        groups: dict[str, list[k.Kernel]] = {}
        for kernel in kernels:
            twin = alike.get(kernel.name, kernel)
            groups.setdefault(texts[twin.name][2], []).append(kernel)
        lines = [f'; ModuleID = "{self.module.name}"', f'target triple = "{self.module.triple}"',
                 f'target datalayout = "{self.module.data_layout}"', ""]
        lines += [t.get_declaration() for t in self.module.get_identified_types().values()]
        by_name = {kernel.name: kernel for kernel in kernels}
        for name, value in self.module.globals.items():
            if name not in by_name:
                lines.append(str(value))
                continue
            kernel = by_name[name]
            twin = alike.get(name, kernel)
            head, body, shape = texts[twin.name]
            group = groups[shape]
            if len(group) == 1:
                lines.append(f"{head}{{\n{body}}}\n")
                continue
            if kernel is group[0]:
                lines.append(self._shared_body(group, shape))
            if twin is not kernel:
                prototype: list[str] = []
                value.descr_prototype(prototype)
                head = "define" + "".join(prototype).removeprefix("declare")
            args = [f"ptr {arg.get_reference()}" for arg in value.args]
            args += [f"ptr {self._globals[buf.name].get_reference()}" for buf in k.constants(kernel)]
            lines.append(f"{head}{{\nentry:\n  tail call void @\"{group[0].name}.shared\"({', '.join(args)})\n"
                         "  ret void\n}\n")
        return "\n".join(lines + self.module._get_metadata_lines())

    def _texts(self, kernel: k.Kernel) -> tuple[str, str, str]:
        """The kernel function's prototype and body as IR text, and its shape: its arguments and body
        with the weights' names replaced by the parameters a shared body takes them as (%"aot.w0", ...)."""
        fn = self.module.globals[kernel.name]
        head: list[str] = []
        body: list[str] = []
        fn.descr_prototype(head)
        fn.descr_body(body)
        text = "".join(body)
        shape = ", ".join(str(arg) for arg in fn.args) + "\n" + text
        for i, buf in enumerate(k.constants(kernel)):
            shape = shape.replace(self._globals[buf.name].get_reference(), f'%"aot.w{i}"')
        return "".join(head), text, shape

    def _shared_body(self, group: list[k.Kernel], shape: str) -> str:
        """The internal function `group`'s kernels call: their common body with the weights as parameters
        (read-only, not aliased, aligned as the globals are, as many bytes as the smallest)."""
        args, body = shape.split("\n", 1)
        for i in range(len(k.constants(group[0]))):
            size = min(self._globals[k.constants(kernel)[i].name].value_type.count for kernel in group)
            args += f', ptr noalias readonly align {self.target.align} dereferenceable({size}) %"aot.w{i}"'
        name = f"{group[0].name}.shared"
        return (f'define internal void @"{name}"({args}) "no-builtins" nounwind section ".text.{name}"\n'
                f"{{\n{body}}}\n")

    def _parts(self) -> list[tuple[list[k.Kernel], bool]]:
        """The kernels in the parts compiled apart, each with whether LLVM's loop strength reduction runs
        on it: the float kernels (but matrix-vector products: _float_kernel) in parts of their own without it
        where the kernels hold more IR nodes (parts.size) than the knob float_lsr_limit."""
        if 0 <= self.float_lsr_limit < size(self.kernels, self.module.name):
            floats: list[k.Kernel] = []
            rest: list[k.Kernel] = []
            for kernel in self.kernels:
                (floats if _float_kernel(kernel) else rest).append(kernel)
            if floats:
                return ([(part, False) for part in parts(floats, self.module.name)]
                        + [(part, True) for part in (parts(rest, self.module.name) if rest else [])])
        return [(part, True) for part in parts(self.kernels, self.module.name)]

    def _emit(self, kernels: list[k.Kernel], lsr: bool = True) -> bytes:
        """The object of a module of `kernels`, optimized and compiled; without loop strength reduction
        unless `lsr` (see _strength_reduction)."""
        with _strength_reduction(lsr):
            return self.tm.emit_object(self._optimize(self._source(kernels)))

    def _optimize(self, source: str) -> llvm.ModuleRef:
        """The module parsed, verified and optimized (O2 or O3) for the target."""
        mod = llvm.parse_assembly(source)
        mod.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
        if not self.vectorize:
            tuning.loop_vectorization = tuning.slp_vectorization = False
        pb = llvm.create_pass_builder(self.tm, tuning)
        pb.getModulePassManager().run(mod, pb)
        return mod

    def emit_object(self, chunked: bool = False) -> Blob:
        """The object. With many kernels, in parts optimized and compiled in two processes at the same time
        (every other part in a child process) and joined in order into one object
        (aot/codegen/relocatable.py); compiled whole where the parts' objects cannot be joined. `chunked`:
        as its chunks (see _with_weights)."""
        parts = self._parts()
        if len(parts) == 1:
            return self._with_weights(self._emit(*parts[0]), chunked)
        later = _forked(lambda: _packed([self._emit(*part) for part in parts[1::2]]))
        mine = [self._emit(*part) for part in parts[0::2]]
        theirs = _unpacked(later())
        objects = [(mine if i % 2 == 0 else theirs)[i // 2] for i in range(len(parts))]
        try:
            code = functools.reduce(join, objects)
        except CannotJoin:
            code = self._emit(self.kernels)
        return self._with_weights(code, chunked)

    def emit_assembly(self) -> str:
        return self.compile().assembly

    def compile(self) -> Compiled:
        """The object emit_object gives and the texts of the stages that made it, part after part: each
        part's optimized module is printed before code generation (which rewrites the IR in place) and
        a copy of it goes to the assembly printer."""
        parts = self._parts()
        try:
            return self._compile(parts)
        except CannotJoin:
            return self._compile([(self.kernels, True)])

    def _compile(self, parts: list[tuple[list[k.Kernel], bool]]) -> Compiled:
        sources, optimized, assembly, objects = [], [], [], []
        for part, lsr in parts:
            sources.append(self._source(part))
            mod = self._optimize(sources[-1])
            optimized.append(str(mod))
            copy = mod.clone()
            with _strength_reduction(lsr):
                objects.append(self.tm.emit_object(mod))
                assembly.append(self.tm.emit_assembly(copy))

        def joined(texts: list[str]) -> str:
            return texts[0] if len(texts) == 1 else "\n".join(
                f"; part {i + 1} of {len(texts)}\n{text}" for i, text in enumerate(texts))
        obj = self._with_weights(functools.reduce(join, objects))
        return Compiled(obj, joined(sources), joined(optimized), joined(assembly))


DATA_WEIGHTS = 4096         # weights of this many bytes or more are joined to the object as data
SECTIONS_JOINED = 60_000    # (at most 4 sections per kernel, its tables of numbers (literals.TABLES) and one per
                            # weight buffer; ELF numbers 65,279)


def _twins(kernels: list[k.Kernel], model: str, numbers: bool = True
           ) -> tuple[list[k.Kernel], dict[str, k.Kernel]]:
    """The kernels, those alike but for some numbers rewritten to read them from a table of their own
    (aot/kernel/literals.py; unless not `numbers`: then only kernels of one structure are alike), and for
    each kernel that need not be built, the first of its structure, which is. Only kernels that look
    alike (parts.likeness) are walked."""
    looks = [likeness(kernel, model) for kernel in kernels]
    alikes = Counter(looks)
    groups: dict[tuple, list[int]] = {}
    loose: dict[int, literals.Loose] = {}
    for i, (kernel, look) in enumerate(zip(kernels, looks)):
        if alikes[look] > 1:
            loose[i] = literals.loose_structure(kernel) if numbers else literals.Loose(k.structure(kernel), ())
            if loose[i].key is not None:
                groups.setdefault(loose[i].key, []).append(i)
    kernels = list(kernels)
    twins: dict[str, k.Kernel] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        slots = literals.differing([loose[i] for i in members])
        if slots:
            tabled = [literals.with_table(kernels[i], loose[i], slots) for i in members]
            if any(t is None for t in tabled):
                continue
            for i, t in zip(members, tabled):
                kernels[i] = t
        for i in members[1:]:
            twins[kernels[i].name] = kernels[members[0]]
    return kernels, twins


def _joined_as_data(buf: k.Buffer) -> bool:
    return buf.data.nbytes >= DATA_WEIGHTS


_CODEGEN_OPTIONS = threading.Lock()     # held while a compilation runs with LLVM's options changed


@contextlib.contextmanager
def _strength_reduction(on: bool) -> Iterator[None]:
    """Compile with LLVM's loop strength reduction on or off: a process-wide option, read as each code
    generator pipeline is built, set for one compilation under a lock against other threads' ones."""
    with _CODEGEN_OPTIONS:
        if not on:
            llvm.set_option("aot", "-disable-lsr=true")
        try:
            yield
        finally:
            if not on:
                llvm.set_option("aot", "-disable-lsr=false")


def _float_suffix(ty: ir.Type) -> str:
    """An overloaded intrinsic's suffix for a float type: f32, f64, v4f32, ..."""
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    name = "f64" if isinstance(element, ir.DoubleType) else "f32"
    return f"v{ty.count}{name}" if isinstance(ty, ir.VectorType) else name


def _float_kernel(kernel: k.Kernel) -> bool:
    """A kernel that reads or writes floats, but a matrix times a vector (the template "dense" on one input
    pixel: Gemm; LSR speeds the Cortex-M4's FC-AutoEncoder by 24 %). Integer kernels (int8 tiles) keep
    LSR: without it the Cortex-M4's int8 convolutions run 5-7 % more cycles."""
    if not any(buf.dtype == "f32" for buf in kernel.params):
        return False
    return kernel.schedule is None or kernel.schedule.schedule.template != "dense" or input_pixels(
        kernel.schedule.workload) > 1


def _little_endian(buf: k.Buffer) -> memoryview:
    """The weights' bytes, little-endian: a view of the array where it is so already (no copy)."""
    return np.ascontiguousarray(buf.data, dtype=buf.data.dtype.newbyteorder("<")).reshape(-1).view(np.uint8).data


def _packed(objects: list[bytes]) -> bytes:
    """Objects as one byte string through a pipe: each its 8-byte length, then its bytes."""
    return b"".join(len(o).to_bytes(8, "little") + o for o in objects)


def _unpacked(data: bytes) -> list[bytes]:
    objects, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at:at + 8], "little")
        objects.append(data[at + 8:at + 8 + size])
        at += 8 + size
    return objects


class _VolatileLoad(ir.LoadInstr):
    """A volatile load (k.Load.fresh): LLVM neither merges it with an equal load nor reorders it with
    another volatile access. llvmlite's loads have no volatile flag."""

    def descr(self, buf: list[str]) -> None:
        [pointer] = self.operands
        align = f", align {self.align}" if self.align is not None else ""
        buf.append(f"load volatile {self.type}, {pointer.type} {pointer.get_reference()}{align}"
                   f"{self._stringify_metadata(leading_comma=True)}\n")


def _forked(work: Callable[[], bytes]) -> Callable[[], bytes]:
    """Start `work` in a child process (fork: it inherits the built kernels); the function returned
    waits for its bytes. llvmlite serializes every call into LLVM with one lock, so threads would not
    run two optimizations at once. Without fork, or with other threads running (a child forked from
    them could inherit a lock one holds), `work` runs now."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        data = work()
        return lambda: data
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:            # the child: never returns
        os.close(read)
        status = 0
        try:
            data = work()
        except BaseException as err:    # noqa: BLE001 - the parent reports it
            status, data = 1, f"{type(err).__name__}: {err}".encode()
        with os.fdopen(write, "wb") as out:
            out.write(bytes([status]) + data)
        os._exit(0)
    os.close(write)

    def result() -> bytes:
        with os.fdopen(read, "rb") as src:
            data = src.read()
        _, code = os.waitpid(pid, 0)
        if not data or data[0]:
            why = data[1:].decode(errors="replace") if data else f"it ended with status {code}"
            raise InternalError(f"compiling the later part of the kernels in a child process failed: {why}")
        return data[1:]
    return result


_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)


class _Bytes(ir.Constant):
    """A byte array constant printed with every byte escaped (\\XX), the text built by numpy: llvmlite
    escapes byte by byte in Python, 0.6 s of a MobileNetV2 build for its 14 MB of weights."""

    def _get_reference(self) -> str:
        data = np.frombuffer(bytes(self.constant), np.uint8)
        text = np.empty((data.size, 3), np.uint8)
        text[:, 0], text[:, 1], text[:, 2] = ord("\\"), _HEX[data >> 4], _HEX[data & 15]
        return f'c"{text.tobytes().decode("ascii")}"'


class _Splat(ir.Constant):
    """A vector of one number printed as LLVM's `splat (i32 2)`, not lane by lane: a 16-lane
    requantization's constants are most of an int8 convolution's IR text, which Python prints and
    LLVM parses."""

    def _get_reference(self) -> str:
        scalar = self.constant[0]
        return f"splat ({scalar.type} {scalar.get_reference()})"


class _FunctionEmitter:
    def __init__(self, mb: ModuleBuilder, fn: ir.Function, params: dict[k.Buffer, ir.Argument]):
        self.mb = mb
        self.fn = fn
        self.params = params
        entry = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.env: dict[str, ir.Value] = {}
        self.slots: dict[str, ir.AllocaInstr] = {}
        self.memo: dict[int, ir.Value] = {}

    def emit(self, body: k.Block) -> None:
        self.stmt(body)
        self.b.ret_void()
        self.alloca_builder.branch(self.fn.blocks[1])

    # --- statements ---
    def stmt(self, s: k.Stmt) -> None:
        self.memo = {}
        if isinstance(s, k.Block):
            for inner in s.stmts:
                self.stmt(inner)
        elif isinstance(s, k.Store):
            ptr = self.address(s.buf, s.index)
            self.b.store(self.expr(s.value), ptr, align=self.align(s.buf))
        elif isinstance(s, k.For):
            self.loop(s)
        elif isinstance(s, k.Let):
            self.env[s.var.name] = self.expr(s.value)
        elif isinstance(s, k.Local):
            slot = self.alloca_builder.alloca(self.mb.type_of(s.var.dtype, s.var.lanes), name=s.var.name)
            self.slots[s.var.name] = slot
            self.b.store(self.expr(s.init), slot)
        elif isinstance(s, k.Assign):
            self.b.store(self.expr(s.value), self.slots[s.var.name])
        elif isinstance(s, k.Tile):
            self.tile(s)
        elif isinstance(s, k.PairLoop):
            self.pair_loop(s)
        else:
            raise TypeError(s)

    def tile(self, s: k.Tile) -> None:
        """An AMX instruction through LLVM's intrinsics that name tile registers by number (x86-64 only:
        indices and strides are 64-bit)."""
        i8, i64, ptr = ir.IntType(8), ir.IntType(64), ir.PointerType()
        name, types = {"config": ("ldtilecfg", [ptr]), "zero": ("tilezero", [i8]),
                       "load": ("tileloadd64", [i8, ptr, i64]), "dot": ("tdpbusd", [i8, i8, i8]),
                       "store": ("tilestored64", [i8, ptr, i64]), "release": ("tilerelease", [])}[s.op]
        args = [ir.Constant(i8, t) for t in s.tiles]
        if s.buf is not None:
            args.append(self.address(s.buf, s.index if s.index is not None else k.const(0)))
        if s.stride is not None:
            args.append(self.expr(s.stride))
        self.b.call(self.mb.declare(f"llvm.x86.{name}", ir.FunctionType(ir.VoidType(), types)), args)

    def pair_loop(self, s: k.PairLoop) -> None:
        """A loop of its own with the accumulators and both pointers as phis, one step a turn (LLVM unrolls
        it as it sees fit); each step's words loaded first, then widened and multiplied. LLVM's scheduler may
        reorder them; what this form saves is the generic loop's index arithmetic (DS-CNN's estimated
        Cortex-M4 cycles: -9.5 %). The loop ends when the weight pointer reaches the weights' end
        (`to_end`: a register fewer than a down-counter) or when a counter does (see Knobs)."""
        mr, nr = len(s.accs), len(s.accs[0])
        i8 = ir.IntType(8)
        wide = s.w.dtype == "i16"       # weights stored as their pairs (BytePairArith.weights)
        size = 8 if wide else 4         # bytes of a channel's weights per step
        accs = [v for row in s.accs for v in row]
        zero = self.expr(s.zero_pair) if s.zero_pair is not None else None
        px0, pw0 = self.address(s.x, s.pixel), self.address(s.w, s.weights)
        start = [self.b.load(self.slots[v.name]) for v in accs]
        pre = self.b.block
        body = self.fn.append_basic_block("pairs.body")
        done = self.fn.append_basic_block("pairs.done")
        self.b.branch(body)
        self.b.position_at_end(body)
        px, pw = self.b.phi(ir.PointerType()), self.b.phi(ir.PointerType())
        count = None if s.to_end else self.b.phi(_I32)
        acc = [self.b.phi(_I32) for _ in accs]
        px.add_incoming(px0, pre)
        pw.add_incoming(pw0, pre)
        if count is not None:
            count.add_incoming(ir.Constant(_I32, s.steps), pre)
        for phi, value in zip(acc, start):
            phi.add_incoming(value, pre)
        cur = list(acc)

        def word(base, offset: int):
            return self.b.load(self.b.gep(base, [ir.Constant(_I32, offset)], source_etype=i8), typ=_I32, align=1)

        smlad = self.mb.declare("llvm.arm.smlad", ir.FunctionType(_I32, [_I32] * 3))
        xs = [word(px, i * s.pixel_stride) for i in range(mr)]
        ws = [[word(pw, size * j + 4 * odd) for odd in range(size // 4)] for j in range(nr)]
        pairs = [(self._extend16(v, False, zero, s.unsigned), self._extend16(v, True, zero, s.unsigned)) for v in xs]
        for j, wv in enumerate(ws):
            for odd in (False, True):
                w = wv[odd] if wide else self._extend16(wv[0], odd, None, False)
                for i in range(mr):
                    cur[i * nr + j] = self.b.call(smlad, [pairs[i][odd], w, cur[i * nr + j]])
        nx = self.b.gep(px, [ir.Constant(_I32, 4)], source_etype=i8)
        nw = self.b.gep(pw, [ir.Constant(_I32, size * nr)], source_etype=i8)
        px.add_incoming(nx, self.b.block)
        pw.add_incoming(nw, self.b.block)
        for phi, value in zip(acc, cur):
            phi.add_incoming(value, self.b.block)
        if count is None:
            more = self.b.icmp_unsigned("!=", nw, self.b.gep(pw0, [ir.Constant(_I32, size * nr * s.steps)],
                                                             source_etype=i8))
        else:
            left = self.b.sub(count, ir.Constant(_I32, 1))
            count.add_incoming(left, self.b.block)
            more = self.b.icmp_signed("!=", left, ir.Constant(_I32, 0))
        self.b.cbranch(more, body, done)
        self.b.position_at_end(done)
        for v, value in zip(accs, cur):
            self.b.store(value, self.slots[v.name])

    def loop(self, s: k.For) -> None:
        start, stop = self.expr(s.start), self.expr(s.stop)
        pre = self.b.block
        header = self.fn.append_basic_block(f"{s.var.name}.head")
        body = self.fn.append_basic_block(f"{s.var.name}.body")
        done = self.fn.append_basic_block(f"{s.var.name}.done")
        self.b.branch(header)
        self.b.position_at_end(header)
        i = self.b.phi(self.mb.index_type, name=s.var.name)
        i.add_incoming(start, pre)
        self.b.cbranch(self.b.icmp_signed("<", i, stop), body, done)
        self.b.position_at_end(body)
        self.env[s.var.name] = i
        self.stmt(s.body)
        nxt = self.b.add(i, ir.Constant(self.mb.index_type, s.step), flags=["nsw"])
        i.add_incoming(nxt, self.b.block)
        self.b.branch(header)
        self.b.position_at_end(done)
        self.memo = {}

    # --- expressions ---
    def align(self, buf: k.Buffer) -> int:
        return self.mb.abi_size(buf.dtype) if buf.dtype != "idx" else 4

    def address(self, buf: k.Buffer, index: k.Expr) -> ir.Value:
        base = self.mb.constant_global(buf) if buf.is_const else self.params[buf]
        return self.b.gep(base, [self.expr(index)], inbounds=True, source_etype=self.mb.scalar(buf.dtype))

    def expr(self, e: k.Expr) -> ir.Value:
        key = id(e)
        if key not in self.memo:
            self.memo[key] = self._expr(e)
        return self.memo[key]

    def _expr(self, e: k.Expr) -> ir.Value:
        b = self.b
        if isinstance(e, k.Const):
            scalar = ir.Constant(self.mb.scalar(e.dtype), e.value)
            return scalar if e.lanes == 1 else _Splat(self.mb.type_of(e.dtype, e.lanes), [scalar] * e.lanes)
        if isinstance(e, k.Var):
            if e.name in self.slots:
                return b.load(self.slots[e.name])
            return self.env[e.name]
        if isinstance(e, k.Load):
            ptr = self.address(e.buf, e.index)
            if e.fresh:
                load = _VolatileLoad(b.block, ptr, typ=self.mb.type_of(e.buf.dtype, e.lanes))
                load.align = self.align(e.buf)
                b._insert(load)     # noqa: SLF001 - IRBuilder.load makes only plain loads
                return load
            return b.load(ptr, typ=self.mb.type_of(e.buf.dtype, e.lanes), align=self.align(e.buf))
        if isinstance(e, k.Broadcast):
            vt = self.mb.type_of(e.dtype, e.lanes)
            one = b.insert_element(ir.Constant(vt, ir.Undefined), self.expr(e.value), ir.Constant(_I32, 0))
            return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                    ir.Constant(ir.VectorType(_I32, e.lanes), [0] * e.lanes))
        if isinstance(e, k.Shuffle):
            value = self.expr(e.value)
            if e.lanes == 1:        # one lane is a scalar in kernel IR
                return b.extract_element(value, ir.Constant(_I32, e.picks[0]))
            return b.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                    ir.Constant(ir.VectorType(_I32, e.lanes), list(e.picks)))
        if isinstance(e, k.Sqrt):
            return self.sqrt(e)
        if isinstance(e, k.RoundInt):
            return self.round_int(e)
        if isinstance(e, k.DoublingHigh):
            return self.doubling_high(e)
        if isinstance(e, k.Bin):
            return self.binary(e.op, e.a.dtype, self.expr(e.a), self.expr(e.b))
        if isinstance(e, k.Fma):
            ty = self.mb.type_of(e.dtype, e.lanes)
            # llvm.fma forces the fused instruction; without FMA hardware it would become a libm call,
            # so there fmuladd lets LLVM pick a multiply and an add.
            fn = self.mb.intrinsic("llvm.fma" if self.mb.target.fma else "llvm.fmuladd", ty, 3)
            return b.call(fn, [self.expr(e.a), self.expr(e.b), self.expr(e.c)])
        if isinstance(e, k.Select):
            return b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))
        if isinstance(e, k.Cast):
            return self.cast(e)
        if isinstance(e, k.Reduce):
            return self.reduce(e)
        if isinstance(e, k.Reinterpret):
            return b.bitcast(self.expr(e.value), self.mb.type_of(e.dtype, e.lanes))
        if isinstance(e, k.Dot):
            return self.dot(e)
        if isinstance(e, k.MaskedLoad):
            return self.masked_load(e)
        if isinstance(e, k.RowDot):
            return self.row_dot(e)
        if isinstance(e, k.WideningDot):
            return self.widening_dot(e)
        if isinstance(e, k.MatrixDot):
            return self.matrix_dot(e)
        if isinstance(e, k.Lanes):
            if e.values[0].lanes > 1:
                return self.concat([self.expr(v) for v in e.values])
            vec = ir.Constant(self.mb.type_of(e.dtype, e.lanes), ir.Undefined)
            for i, value in enumerate(e.values):
                vec = b.insert_element(vec, self.expr(value), ir.Constant(_I32, i))
            return vec
        if isinstance(e, k.BytePairs):
            return self.byte_pairs(e)
        raise TypeError(e)

    def sqrt(self, e: k.Sqrt) -> ir.Value:
        """The FPU's square root; with soft float llvm.sqrt would become a call to libm's sqrtf, so there
        the portable expansion is emitted instead."""
        if not self.mb.target.fpu:
            return self.expr(e.portable)
        fn = self.mb.intrinsic("llvm.sqrt", self.mb.type_of(e.dtype, e.lanes), 1)
        return self.b.call(fn, [self.expr(e.value)])

    def round_int(self, e: k.RoundInt) -> ir.Value:
        """32-bit Arm VFP converts a scalar with the FPSCR rounding mode, round to nearest even unless the
        program changes it (vcvtr: one instruction, saturating). AArch64 converts with ties to even in one
        instruction too (FCVTNS: saturating, NaN to 0, as onnxruntime's NEON kernels round) on vectors of 2 or
        4 lanes (wider ones 4 at a time); a scalar keeps the portable form, which LLVM's loop vectorizer can
        widen (an AArch64 intrinsic it cannot). Everywhere else the portable form."""
        if self.mb.tm.triple.startswith("aarch64") and (e.lanes == 2 or e.lanes % 4 == 0):
            n = min(e.lanes, 4)     # wider vectors a register at a time
            f32, i32 = self.mb.type_of("f32", n), self.mb.type_of("i32", n)
            fcvtns = self.mb.declare(f"llvm.aarch64.neon.fcvtns.v{n}i32.v{n}f32", ir.FunctionType(i32, [f32]))
            value = self.expr(e.value)
            parts = [self.b.call(fcvtns, [self.b.shuffle_vector(value, value, ir.Constant(
                ir.VectorType(_I32, n), list(range(at, at + n))))]) if e.lanes > n else self.b.call(fcvtns, [value])
                for at in range(0, e.lanes, n)]
            return self.concat(parts)
        if not (e.lanes == 1 and self.mb.target.fpu and self.mb.tm.triple.startswith(("arm", "thumb"))):
            return self.expr(e.portable)
        fn = self.mb.declare("llvm.arm.vcvtr.f32", ir.FunctionType(_F32, [_F32]))
        return self.b.bitcast(self.b.call(fn, [self.expr(e.value)]), _I32)

    def doubling_high(self, e: k.DoublingHigh) -> ir.Value:
        """SQRDMULH (AArch64 NEON), VQRDMULH (32-bit NEON, Helium) on vectors of 4 int32 lanes (wider ones
        4 at a time): the saturating rounding doubling high multiply itself; else the portable form."""
        triple, simd = self.mb.tm.triple, self.mb.target.int_simd.name
        name = ("llvm.aarch64.neon.sqrdmulh.v4i32" if triple.startswith("aarch64")
                else "llvm.arm.neon.vqrdmulh.v4i32" if triple.startswith("armv7") and simd.startswith("neon")
                else "llvm.arm.mve.vqrdmulh.v4i32" if simd == "mve" else None)
        if name is None or e.lanes % 4:
            return self.expr(e.portable)
        vt = self.mb.type_of("i32", 4)
        fn = self.mb.declare(name, ir.FunctionType(vt, [vt, vt]))
        a, b = self.expr(e.a), self.expr(e.b)

        def part(value: ir.Value, at: int) -> ir.Value:
            return value if e.lanes == 4 else self.b.shuffle_vector(value, value, ir.Constant(
                ir.VectorType(_I32, 4), list(range(at, at + 4))))
        return self.concat([self.b.call(fn, [part(a, at), part(b, at)]) for at in range(0, e.lanes, 4)])

    def dot(self, e: k.Dot) -> ir.Value:
        """Group-of-G 8-bit dot products into i32 lanes: one instruction where the target's integer-SIMD
        form has it (the emitters registered for it in _DOT_EMITTERS), else widening multiplies and adds."""
        acc, a, w = self.expr(e.acc), self.expr(e.a), self.expr(e.b)
        lanes, group = e.acc.lanes, e.a.lanes // e.acc.lanes
        for emit in _DOT_EMITTERS.get(self.mb.target.int_simd, ()):
            value = emit(self, e, acc, a, w, lanes, group)
            if value is not None:
                return value
        wide = ir.VectorType(_I32, lanes * group)
        products = self.b.mul(self.b.zext(a, wide) if e.a_unsigned else self.b.sext(a, wide), self.b.sext(w, wide))
        total = acc
        if lanes == 1:      # a horizontal sum: Helium makes VMLADAV of it
            fn = self.mb.declare(f"llvm.vector.reduce.add.v{group}i32", ir.FunctionType(_I32, [wide]))
            return self.b.add(total, self.b.call(fn, [products]))
        for g in range(group):
            picked = self.b.shuffle_vector(products, products, ir.Constant(ir.VectorType(_I32, lanes),
                                                                           [i * group + g for i in range(lanes)]))
            total = self.b.add(total, picked)
        return total

    def row_dot(self, e: k.RowDot) -> ir.Value:
        """acc + a . b with only the total of acc's lanes defined (see k.RowDot)."""
        acc, a, w = self.expr(e.acc), self.expr(e.a), self.expr(e.b)
        n, lanes = e.a.lanes, e.acc.lanes
        if lanes == 1:      # sext, mul, reduce.add: Helium makes VMLADAVA of it
            wide = ir.VectorType(_I32, n)
            fn = self.mb.declare(f"llvm.vector.reduce.add.v{n}i32", ir.FunctionType(_I32, [wide]))
            return self.b.add(acc, self.b.call(fn, [self.b.mul(self.b.sext(a, wide), self.b.sext(w, wide))]))
        if lanes * 4 == n and n % 16 == 0 and self.mb.target.int_simd.row_lanes == 4:   # 32-bit NEON (acc_lanes)
            # VMULL.S8 of each half (VMLAL.S8 for the second when pairs fit in 16 bits), VPADAL.S16.
            half, i16 = ir.VectorType(ir.IntType(16), 8), ir.VectorType(ir.IntType(16), 8)
            vt = ir.VectorType(_I32, 4)
            padal = self.mb.declare("llvm.arm.neon.vpadals.v4i32.v8i16", ir.FunctionType(vt, [vt, i16]))
            for base in range(0, n, 16):
                def product(at: int) -> ir.Value:
                    pick = ir.Constant(ir.VectorType(_I32, 8), list(range(at, at + 8)))
                    return self.b.mul(self.b.sext(self.b.shuffle_vector(a, a, pick), half),
                                      self.b.sext(self.b.shuffle_vector(w, w, pick), half))
                if e.pairs_fit:
                    acc = self.b.call(padal, [acc, self.b.add(product(base), product(base + 8))])
                else:
                    acc = self.b.call(padal, [acc, product(base)])
                    acc = self.b.call(padal, [acc, product(base + 8)])
            return acc
        wide = ir.VectorType(_I32, n)
        products = self.b.mul(self.b.sext(a, wide), self.b.sext(w, wide))
        group = n // lanes
        for g in range(group):
            picked = self.b.shuffle_vector(products, products, ir.Constant(ir.VectorType(_I32, lanes),
                                                                           [i * group + g for i in range(lanes)]))
            acc = self.b.add(acc, picked)
        return acc

    def concat(self, vectors: list[ir.Value]) -> ir.Value:
        """Vectors of one type side by side: joined pairwise, an odd count made even with an undefined
        vector whose lanes are cut off at the end."""
        width = vectors[0].type.count * len(vectors)
        while len(vectors) > 1:
            if len(vectors) % 2:
                vectors.append(ir.Constant(vectors[0].type, ir.Undefined))
            n = vectors[0].type.count
            join = ir.Constant(ir.VectorType(_I32, 2 * n), list(range(2 * n)))
            vectors = [self.b.shuffle_vector(x, y, join) for x, y in zip(vectors[::2], vectors[1::2])]
        whole = vectors[0]
        if whole.type.count == width:
            return whole
        return self.b.shuffle_vector(whole, whole, ir.Constant(ir.VectorType(_I32, width), list(range(width))))

    def widening_dot(self, e: k.WideningDot) -> ir.Value:
        """Per 16-byte block: products of bytes i and i + 8 summed in 16 bits, which LLVM selects as SMULL
        and SMLAL2, then added pairwise into the block's four i32 lanes (SADALP on AArch64; elsewhere the
        same sums portably)."""
        acc, a, w = self.expr(e.acc), self.expr(e.a), self.expr(e.b)
        i16x8, i32x4 = ir.VectorType(ir.IntType(16), 8), ir.VectorType(_I32, 4)

        def pick(v: ir.Value, lanes: list[int]) -> ir.Value:
            return self.b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, len(lanes)), lanes))

        def pairwise(pairs: ir.Value) -> ir.Value:
            if self.mb.tm.triple.startswith("aarch64"):
                fn = self.mb.declare("llvm.aarch64.neon.saddlp.v4i32.v8i16", ir.FunctionType(i32x4, [i16x8]))
                return self.b.call(fn, [pairs])
            wide = self.b.sext(pairs, ir.VectorType(_I32, 8))
            return self.b.add(pick(wide, [0, 2, 4, 6]), pick(wide, [1, 3, 5, 7]))

        blocks = []
        for q in range(0, e.acc.lanes * 4, 16):
            def product(at: int) -> ir.Value:
                span = list(range(at, at + 8))
                return self.b.mul(self.b.sext(pick(a, span), i16x8), self.b.sext(pick(w, span), i16x8))
            sums = pairwise(self.b.add(product(q), product(q + 8)))
            blocks.append(self.b.add(pick(acc, list(range(q // 4, q // 4 + 4))), sums))
        return self.concat(blocks)

    def matrix_dot(self, e: k.MatrixDot) -> ir.Value:
        """Per 16-byte block of b: SMMLA where the target has the int8 matrix multiply, else the same sums
        of widened products (see k.MatrixDot)."""
        acc, a, w = self.expr(e.acc), self.expr(e.a), self.expr(e.b)
        i32x4, i8x16 = ir.VectorType(_I32, 4), ir.VectorType(ir.IntType(8), 16)

        def pick(v: ir.Value, lanes: list[int]) -> ir.Value:
            return self.b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, len(lanes)), lanes))

        smmla = self.mb.target.int_simd.matrix
        blocks = []
        for q in range(0, e.acc.lanes * 4, 16):
            block, start = pick(w, list(range(q, q + 16))), pick(acc, list(range(q // 4, q // 4 + 4)))
            if smmla:
                fn = self.mb.declare("llvm.aarch64.neon.smmla.v4i32.v16i8",
                                     ir.FunctionType(i32x4, [i32x4, i8x16, i8x16]))
                blocks.append(self.b.call(fn, [start, a, block]))
                continue
            i32x8 = ir.VectorType(_I32, 8)
            for i in range(2):          # a's row i against b's rows 0 and 1: lanes 2i and 2i + 1
                row = self.b.sext(pick(a, list(range(8 * i, 8 * i + 8))), i32x8)
                for j in range(2):
                    products = self.b.mul(row, self.b.sext(pick(block, list(range(8 * j, 8 * j + 8))), i32x8))
                    fn = self.mb.declare("llvm.vector.reduce.add.v8i32", ir.FunctionType(_I32, [i32x8]))
                    lane = ir.Constant(_I32, 2 * i + j)
                    total = self.b.add(self.b.extract_element(start, lane), self.b.call(fn, [products]))
                    start = self.b.insert_element(start, total, lane)
            blocks.append(start)
        return self.concat(blocks)

    def masked_load(self, e: k.MaskedLoad) -> ir.Value:
        """llvm.masked.load; the address is computed without `inbounds`, as the window may start
        outside the buffer (only active lanes are read)."""
        base = self.mb.constant_global(e.buf) if e.buf.is_const else self.params[e.buf]
        elem = self.mb.scalar(e.buf.dtype)
        ptr = self.b.gep(base, [self.expr(e.index)], source_etype=elem)
        ty = self.mb.type_of(e.buf.dtype, e.lanes)
        fill = ir.Constant(ty, [ir.Constant(elem, e.fill)] * e.lanes)
        count = e.hi.value if isinstance(e.hi, k.Const) and e.lo is None else 0
        if not self.mb.target.int_simd.predicated and 1 < count < e.lanes and count & (count - 1) == 0:
            # A fixed first `count` lanes without predication (NEON, x86 before AVX-512): one narrower load.
            part = self.b.load(ptr, typ=self.mb.type_of(e.buf.dtype, count), align=self.align(e.buf))
            wide = self.b.shuffle_vector(part, ir.Constant(part.type, ir.Undefined),
                                         ir.Constant(ir.VectorType(_I32, e.lanes),
                                                     list(range(count)) + [count] * (e.lanes - count)))
            keep = ir.Constant(ir.VectorType(ir.IntType(1), e.lanes), [1] * count + [0] * (e.lanes - count))
            return self.b.select(keep, wide, fill)
        mask = self.lane_mask(e.lanes, self.expr(e.hi), self.expr(e.lo) if e.lo is not None else None)
        suffix = f"{_float_suffix(ty) if e.buf.dtype in k.FLOATS else f'v{e.lanes}i{elem.width}'}.p0"
        mask_ty = ir.VectorType(ir.IntType(1), e.lanes)
        fn = self.mb.declare(f"llvm.masked.load.{suffix}",
                             ir.FunctionType(ty, [ir.PointerType(), _I32, mask_ty, ty]))
        return self.b.call(fn, [ptr, ir.Constant(_I32, self.align(e.buf)), mask, fill])

    def lane_mask(self, lanes: int, hi: ir.Value, lo: ir.Value | None) -> ir.Value:
        """<lanes x i1>: lane l is on if lo <= l < hi. A mask from 0 on a 128-bit MVE vector is one VCTP
        (which also lets LLVM turn a loop into a tail-predicated one); else lanes are compared with the
        bounds clamped to [0, lanes], in elements as narrow as the vector's (one compare instruction)."""
        if lo is None and self.mb.target.int_simd.predicated and lanes in (4, 8, 16):
            fn = self.mb.declare(f"llvm.arm.mve.vctp{128 // lanes}",
                                 ir.FunctionType(ir.VectorType(ir.IntType(1), lanes), [_I32]))
            # VCTP reads its count as unsigned: a negative one must be 0.
            count = self.b.select(self.b.icmp_signed("<", hi, ir.Constant(hi.type, 0)), ir.Constant(hi.type, 0), hi)
            return self.b.call(fn, [count])
        width = max(8, min(32, 128 // lanes))
        ty = ir.IntType(width)
        vt = ir.VectorType(ty, lanes)
        iota = ir.Constant(vt, list(range(lanes)))

        def splat(bound: ir.Value) -> ir.Value:
            zero, top = ir.Constant(bound.type, 0), ir.Constant(bound.type, lanes)
            clamped = self.b.select(self.b.icmp_signed("<", bound, zero), zero, bound)
            clamped = self.b.select(self.b.icmp_signed(">", clamped, top), top, clamped)
            one = self.b.insert_element(ir.Constant(vt, ir.Undefined), self.b.trunc(clamped, ty), ir.Constant(_I32, 0))
            return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(_I32, lanes),
                                                                                        [0] * lanes))

        mask = self.b.icmp_signed("<", iota, splat(hi))
        if lo is not None:
            mask = self.b.and_(mask, self.b.icmp_signed(">=", iota, splat(lo)))
        return mask
    def byte_pairs(self, e: k.BytePairs) -> ir.Value:
        """sxtb16/sxtab16 (uxt for unsigned), the odd bytes rotated into place (ARM folds the rotate
        into the instruction); elsewhere a shuffle, a widening and a 16-bit add."""
        word = self.expr(e.word)
        addend = self.expr(e.addend) if e.addend is not None else None
        if self.mb.target.int_simd.byte_pairs:
            return self._extend16(word, e.odd, addend, e.unsigned)
        pairs = ir.VectorType(ir.IntType(16), 2)
        picked = self.b.shuffle_vector(self.b.bitcast(word, ir.VectorType(ir.IntType(8), 4)),
                                       ir.Constant(ir.VectorType(ir.IntType(8), 4), ir.Undefined),
                                       ir.Constant(ir.VectorType(_I32, 2), [1, 3] if e.odd else [0, 2]))
        wide = self.b.zext(picked, pairs) if e.unsigned else self.b.sext(picked, pairs)
        if addend is not None:
            wide = self.b.add(wide, self.b.bitcast(addend, pairs))
        return self.b.bitcast(wide, _I32)

    def _extend16(self, word: ir.Value, odd: bool, addend: ir.Value | None, unsigned: bool) -> ir.Value:
        """sxtb16/sxtab16 (uxt when unsigned) of a word's bytes (0, 2), or (1, 3) through a folded rotate."""
        if odd:
            rotate = self.mb.declare("llvm.fshr.i32", ir.FunctionType(_I32, [_I32] * 3))
            word = self.b.call(rotate, [word, word, ir.Constant(_I32, 8)])
        kind = "u" if unsigned else "s"
        if addend is None:
            return self.b.call(self.mb.declare(f"llvm.arm.{kind}xtb16", ir.FunctionType(_I32, [_I32])), [word])
        fn = self.mb.declare(f"llvm.arm.{kind}xtab16", ir.FunctionType(_I32, [_I32, _I32]))
        return self.b.call(fn, [addend, word])

    # One instruction per dot form; each returns None when the operands are not its shape.
    def _vpdpbusd(self, e: k.Dot, acc, a, w, lanes: int, group: int) -> ir.Value | None:
        if not (e.a_unsigned and group == 4 and lanes in (8, 16)):
            return None
        vt = ir.VectorType(_I32, lanes)
        fn = self.mb.declare(f"llvm.x86.avx512.vpdpbusd.{lanes * 32}", ir.FunctionType(vt, [vt] * 3))
        return self.b.call(fn, [acc, self.b.bitcast(a, vt), self.b.bitcast(w, vt)])

    def _vpdpwssd(self, e: k.Dot, acc, a, w, lanes: int, group: int) -> ir.Value | None:
        """16-bit pairs multiplied and added into acc in one instruction (AVX-512 VNNI; wrapping, as Dot)."""
        if not (group == 2 and lanes in (8, 16) and e.a.dtype == "i16"):
            return None
        vt, ht = ir.VectorType(_I32, lanes), ir.VectorType(ir.IntType(16), lanes * 2)
        fn = self.mb.declare(f"llvm.x86.avx512.vpdpwssd.{lanes * 32}", ir.FunctionType(vt, [vt, ht, ht]))
        return self.b.call(fn, [acc, a, w])

    def _pmaddwd(self, e: k.Dot, acc, a, w, lanes: int, group: int, widths=(8, 16)) -> ir.Value | None:
        if not (group == 2 and lanes in widths and e.a.dtype == "i16"):
            return None
        vt, ht = ir.VectorType(_I32, lanes), ir.VectorType(ir.IntType(16), lanes * 2)
        name = "llvm.x86.avx2.pmadd.wd" if lanes == 8 else "llvm.x86.avx512.pmaddw.d.512"
        return self.b.add(acc, self.b.call(self.mb.declare(name, ir.FunctionType(vt, [ht, ht])), [a, w]))

    def _smlad(self, e: k.Dot, acc, a, w, lanes: int, group: int) -> ir.Value | None:
        if not (group == 2 and lanes == 1 and e.a.dtype == "i16"):
            return None
        fn = self.mb.declare("llvm.arm.smlad", ir.FunctionType(_I32, [_I32] * 3))
        return self.b.call(fn, [self.b.bitcast(a, _I32), self.b.bitcast(w, _I32), acc])

    def _sdot(self, e: k.Dot, acc, a, w, lanes: int, group: int) -> ir.Value | None:
        if not (not e.a_unsigned and group == 4 and lanes == 4):
            return None
        vt, bt = ir.VectorType(_I32, 4), ir.VectorType(ir.IntType(8), 16)
        fn = self.mb.declare("llvm.aarch64.neon.sdot.v4i32.v16i8", ir.FunctionType(vt, [vt, bt, bt]))
        return self.b.call(fn, [acc, w, a])     # the activations last: LLVM takes a lane of them by element

    def binary(self, op: str, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
        bld = self.b
        is_float = dtype in k.FLOATS
        unsigned = dtype in _UNSIGNED

        def compare(cmp: str, x: ir.Value, y: ir.Value) -> ir.Value:
            if is_float:
                return bld.fcmp_ordered(cmp, x, y)
            return bld.icmp_unsigned(cmp, x, y) if unsigned else bld.icmp_signed(cmp, x, y)

        if op in _CMP:
            return compare(_CMP[op], a, b)
        if op in ("min", "max"):
            return bld.select(compare("<" if op == "min" else ">", a, b), a, b)
        if is_float:
            return getattr(bld, _FLOAT_OPS[op])(a, b)
        if op in ("div", "rem"):
            return self.integer_division(op, unsigned, a, b)
        return getattr(bld, _INT_OPS[op])(a, b)

    def integer_division(self, op: str, unsigned: bool, a: ir.Value, b: ir.Value) -> ir.Value:
        """Quotient (truncated toward zero) or remainder (the dividend's sign) that never traps: LLVM's
        division is undefined, and x86 faults, for a zero divisor and for MIN / -1. Here x / 0 = 0,
        x rem 0 = x, MIN / -1 = MIN (wrapping) and MIN rem -1 = 0. LLVM folds the guards away when
        the divisor is a constant (all index arithmetic)."""
        bld = self.b
        zero, one = ir.Constant(b.type, _splat_value(b.type, 0)), ir.Constant(b.type, _splat_value(b.type, 1))
        is_zero = bld.icmp_unsigned("==", b, zero)
        if unsigned:
            safe = bld.select(is_zero, one, b)
            result = bld.udiv(a, safe) if op == "div" else bld.urem(a, safe)
        else:
            minus_one = ir.Constant(b.type, _splat_value(b.type, -1))
            is_minus_one = bld.icmp_signed("==", b, minus_one)
            safe = bld.select(bld.or_(is_zero, is_minus_one), one, b)
            result = bld.sdiv(a, safe) if op == "div" else bld.srem(a, safe)
            if op == "div":
                result = bld.select(is_minus_one, bld.sub(zero, a), result)
        return bld.select(is_zero, zero if op == "div" else a, result)

    def cast(self, e: k.Cast) -> ir.Value:
        """Numeric conversions. Float to integer truncates toward zero; with `saturate` it clamps to the
        integer's range and NaN gives 0 (plain fptosi makes those poison). Integer narrowing wraps; u8
        (uint8, bool) and i1 widen with zeros."""
        value = self.expr(e.value)
        src, dst = e.value.dtype, e.dtype
        ty = self.mb.type_of(dst, e.lanes)
        if e.bitcast:
            return self.b.bitcast(value, ty)
        if src in k.FLOATS and dst in k.FLOATS:
            return value if src == dst else self.b.fpext(value, ty) if dst == "f64" else self.b.fptrunc(value, ty)
        if src in k.FLOATS:
            return self.float_to_int(value, dst, e.lanes) if e.saturate else self.b.fptosi(value, ty)
        unsigned = src in _UNSIGNED or src == "i1"
        if dst in k.FLOATS:
            converted = self.b.uitofp(value, ty) if unsigned else self.b.sitofp(value, ty)
            if e.lanes > 1 and self.mb.target.int_simd.predicated:
                # Helium: LLVM folds a multiply by 2**-4 or 2**-8 after the conversion into a fixed-point VCVT
                # whose object encoding then fails an assertion inside LLVM (aborting the build); a fence keeps
                # the multiply separate (one VMUL more)
                fence = self.mb.declare(f"llvm.arithmetic.fence.{_float_suffix(ty)}", ir.FunctionType(ty, [ty]))
                converted = self.b.call(fence, [converted])
            return converted
        width_src, width_dst = self.mb.scalar(src).width, self.mb.scalar(dst).width
        if width_src == width_dst:
            return value
        if width_src > width_dst:
            return self.b.trunc(value, ty)
        return self.b.zext(value, ty) if unsigned else self.b.sext(value, ty)

    def float_to_int(self, value: ir.Value, dst: str, lanes: int) -> ir.Value:
        """llvm.fpto[su]i.sat: truncation with saturation, NaN to 0 (no libm; a libgcc helper at most)."""
        ty = self.mb.type_of(dst, lanes)
        kind = "ui" if dst in _UNSIGNED else "si"
        width = self.mb.scalar(dst).width
        suffix = f"{f'v{lanes}' if lanes > 1 else ''}i{width}.{_float_suffix(value.type)}"
        fn = self.mb.declare(f"llvm.fpto{kind}.sat.{suffix}", ir.FunctionType(ty, [value.type]))
        return self.b.call(fn, [value])

    def reduce(self, e: k.Reduce) -> ir.Value:
        """Pairwise halving with shuffles: deterministic order, no reassociation flags needed."""
        value = self.expr(e.value)
        lanes = e.value.lanes
        while lanes > 1:
            half = lanes // 2
            lo = self.b.shuffle_vector(value, value, ir.Constant(ir.VectorType(_I32, half), list(range(half))))
            hi = self.b.shuffle_vector(value, value, ir.Constant(ir.VectorType(_I32, half),
                                                                 list(range(half, lanes))))
            value = self.binary(e.op, e.dtype, lo, hi)
            lanes = half
        return self.b.extract_element(value, ir.Constant(_I32, 0)) if e.value.lanes > 1 else value


# How each registered integer-SIMD form (aot/isa.py) emits its dot products, tried in order.
_DOT_EMITTERS = {
    INT_SIMD["avx512-vnni"]: (_FunctionEmitter._vpdpbusd, _FunctionEmitter._vpdpwssd),
    INT_SIMD["amx"]: (_FunctionEmitter._vpdpbusd, _FunctionEmitter._vpdpwssd),
    INT_SIMD["avx512bw"]: (_FunctionEmitter._pmaddwd,),
    INT_SIMD["avx2"]: (functools.partial(_FunctionEmitter._pmaddwd, widths=(8,)),),
    INT_SIMD["dsp"]: (_FunctionEmitter._smlad,),
    INT_SIMD["neon-dotprod"]: (_FunctionEmitter._sdot,),
    INT_SIMD["neon-i8mm"]: (_FunctionEmitter._sdot,),
}
