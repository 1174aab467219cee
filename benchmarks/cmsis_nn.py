"""Instructions (and estimated cycles) Arm's CMSIS-NN executes for the layers of aot's integer zoo models,
on bare-metal Cortex-M targets under qemu-system-arm: the other side of aot's int8 and a16w8 kernels.

    python benchmarks/cmsis_nn.py --cmsis-nn DIR [MODEL ...] [--precision s16|s8] [--target cortex-m4 ...]
                                  [--conv-bias int64|int32] [--functions] [--keep DIR]

DIR is a CMSIS-NN checkout (nothing is downloaded). The layers are those aot compiles to integer kernels
in the zoo models (examples/zoo.py; default ds_cnn, resnet8 and mobilenet_v1), read from the float ONNX graph
with shape inference: each Conv (depthwise when group equals the input channels), Gemm, AveragePool,
residual Add (aot fuses the Add into the convolution before it; CMSIS-NN runs it as its own kernel) and,
with s8, Softmax.

Each layer becomes one small C program per target that fills its input (int16 for s16, int8 for s8),
int8 weights, bias (s16: int64, or with --conv-bias int32 CMSIS-NN's optional int32 bias for convolutions;
s8: int32) and per-channel requantization with deterministic pseudo-random values, calls the layer's
public CMSIS-NN function once (arm_convolve_wrapper_*, arm_depthwise_conv_wrapper_*,
arm_fully_connected_*, arm_avgpool_*, arm_elementwise_add_*, arm_softmax_s8) with a scratch buffer of
the size its *_get_buffer_size function asks for, and exits non-zero unless the call returned
ARM_CMSIS_NN_SUCCESS and some output is non-zero. s8 activations have zero point -128 (offset 128) in and
out, as after a ReLU. The bias type matters on Helium: with int64 bias, arm_nn_mat_mult_nt_t_s16
requantizes each output in 64-bit scalar code and sums the columns past MAX_COL_COUNT (512) in a scalar
loop; with int32 bias it does neither.

CMSIS-NN's integer sources are compiled with the target's compiler and core flags (aot's target file)
at -O3 and linked with aot's bare-metal start-up code and the board's linker script. The program runs
under the target's qemu with aot's instruction-counting plugin (aot/run/count.py) over the address
range of CMSIS-NN's functions, profiled so that the cycles of the run are estimated exactly as aot's are
(aot/run/cycles.py). That range also holds the C library's memcpy and memset, which CMSIS-NN calls for
im2col and padding (its Helium depthwise convolution too): copies of them are linked into CMSIS-NN's
part of the program, renamed cmsis_nn_libc_memcpy and cmsis_nn_libc_memset, so the calls CMSIS-NN makes
are counted and those of the start-up code and printf are not. What runs before the layer (the
*_get_buffer_size functions, and arm_vector_sum_s8, which an interpreter's prepare step calls once) is
not counted. The table gives the instructions per layer and per multiply-accumulate, the estimated cycles,
and the sums per model; --functions adds where each layer's instructions went, by function.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import onnx  # noqa: E402
import zoo  # noqa: E402
from onnx import numpy_helper, shape_inference  # noqa: E402

from aot.codegen.elf import functions  # noqa: E402
from aot.errors import RunError  # noqa: E402
from aot.run import cycles, local  # noqa: E402
from aot.run.count import Profile, build_plugin, disassemble, functions_range, read_profile  # noqa: E402
from aot.target import Target, get_target  # noqa: E402

MODELS = ("ds_cnn", "resnet8", "mobilenet_v1")
TARGETS = ("cortex-m4", "cortex-m55")


@dataclass(frozen=True)
class Precision:
    """The C types and values of one of CMSIS-NN's integer flavours."""

    act: str                # activation C type
    in_range: int           # activations uniform in [-in_range, in_range)
    out_std: int            # requantization shifts aim at outputs of about this spread
    act_min: str
    act_max: str
    in_offset: int          # minus the input zero point
    out_offset: int         # the output zero point
    wide_bias_t: str        # the bias type of depthwise and fully connected layers
    add_args: str           # arm_elementwise_add_*'s offsets, multipliers and shifts


# Requantization as TensorFlow Lite gives an Add (CMSIS-NN's add test data): s16, both inputs scaled by
# 2^15 * 0.5 and the sum by 0.5 * 2^-14; s8, inputs offset by 128, left shift 20, as its test data has.
PRECISIONS = {
    "s16": Precision("int16_t", 4096, 4096, "INT16_MIN", "INT16_MAX", 0, 0, "int64_t",
                     "0, 1 << 30, 0, 0, 1 << 30, 0, 15, output, 0, 1 << 30, -14"),
    "s8": Precision("int8_t", 128, 32, "-128", "127", 128, -128, "int32_t",
                    "128, 1 << 30, -1, 128, 1 << 30, -1, 20, output, -128, 1 << 30, -19"),
}
# The public functions a layer program calls; the library part of each program is linked from these.
ENTRY_POINTS = tuple(f"arm_{f}_{p}{e}" for p in PRECISIONS for f in ("convolve_wrapper", "depthwise_conv_wrapper",
                                                                      "fully_connected", "avgpool")
                     for e in ("", "_get_buffer_size")) + ("arm_elementwise_add_s16", "arm_elementwise_add_s8",
                                                            "arm_softmax_s8", "arm_vector_sum_s8")
SETUP = ("_get_buffer_size", "arm_vector_sum_s8")   # called before the layer, as an interpreter's prepare step
LIBC_PREFIX = "cmsis_nn_libc_"     # C library functions CMSIS-NN calls, renamed into its part of the program
W_RANGE = 127                      # int8 weights in [-W_RANGE, W_RANGE]
TIMEOUT = 600.0
LINKED = ("conv", "depthwise", "fc")   # the kinds summed separately per model


@dataclass(frozen=True)
class Layer:
    model: str
    name: str                       # the ONNX node
    kind: str                       # conv, depthwise, fc, avgpool, add
    inp: tuple[int, int, int]       # H, W, C
    out: tuple[int, int, int]       # H, W, C
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)   # top, left (CMSIS-NN derives bottom and right from the output size)
    bias: bool = False

    @property
    def macs(self) -> int:
        if self.kind in ("conv", "fc"):
            return self.out[0] * self.out[1] * self.out[2] * self.kernel[0] * self.kernel[1] * self.inp[2]
        if self.kind == "depthwise":
            return self.out[0] * self.out[1] * self.out[2] * self.kernel[0] * self.kernel[1]
        return 0

    @property
    def shape(self) -> str:
        hwc = lambda s: "x".join(map(str, s))
        if self.kind == "fc":
            return f"{self.inp[2]} -> {self.out[2]}"
        if self.kind == "add":
            return f"{hwc(self.inp)} + {hwc(self.inp)}"
        text = f"{hwc(self.inp)} -> {hwc(self.out)} k{self.kernel[0]}x{self.kernel[1]}"
        sh, sw = self.stride
        if (sh, sw) != (1, 1):
            text += f" s{sh}" if sh == sw else f" s{sh}x{sw}"
        return text


# ---- the layers of a zoo model ------------------------------------------------------------------

def model_layers(name: str) -> list[Layer]:
    """The layers aot compiles to integer kernels in zoo model `name`, in graph order."""
    model = shape_inference.infer_shapes(zoo.ZOO[name](), strict_mode=True)
    graph = model.graph
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in (*graph.input, *graph.value_info, *graph.output)}
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for x in node.input:
            consumers.setdefault(x, []).append(node)
    layers = []
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise SystemExit(f"{name}: {node.name} uses auto_pad; give explicit pads")
        if node.op_type == "Conv":
            (_, c, h, w), (_, oc, oh, ow) = shapes[node.input[0]], shapes[node.output[0]]
            kh, kw = inits[node.input[1]].shape[2:]
            group = attrs.get("group", 1)
            if group not in (1, c):
                raise SystemExit(f"{name}: {node.name} is a grouped convolution (group {group}), not in CMSIS-NN")
            pads = attrs.get("pads", [0, 0, 0, 0])
            follow = consumers.get(node.output[0], [])
            bias = (len(node.input) > 2 and node.input[2] != "") or any(
                n.op_type == "BatchNormalization" for n in follow)
            layers.append(Layer(name, node.name, "depthwise" if group > 1 else "conv", (h, w, c), (oh, ow, oc),
                                (kh, kw), tuple(attrs.get("strides", [1, 1])), (pads[0], pads[1]), bias))
        elif node.op_type == "Gemm":
            weight = inits[node.input[1]]
            n_out, k = weight.shape if attrs.get("transB", 0) else weight.shape[::-1]
            layers.append(Layer(name, node.name, "fc", (1, 1, k), (1, 1, n_out),
                                bias=len(node.input) > 2 and node.input[2] != ""))
        elif node.op_type in ("AveragePool", "GlobalAveragePool"):
            (_, c, h, w), (_, _, oh, ow) = shapes[node.input[0]], shapes[node.output[0]]
            glob = node.op_type == "GlobalAveragePool"
            pads = attrs.get("pads", [0, 0, 0, 0])
            layers.append(Layer(name, node.name, "avgpool", (h, w, c), (oh, ow, c),
                                (h, w) if glob else tuple(attrs["kernel_shape"]),
                                (1, 1) if glob else tuple(attrs.get("strides", [1, 1])), (pads[0], pads[1])))
        elif node.op_type == "Softmax":
            layers.append(Layer(name, node.name, "softmax", (1, 1, shapes[node.input[0]][-1]),
                                (1, 1, shapes[node.output[0]][-1])))
        elif node.op_type == "Add" and not any(x in inits for x in node.input):
            shape = shapes[node.output[0]]
            hwc = (shape[2], shape[3], shape[1]) if len(shape) == 4 else (1, 1, math.prod(shape))
            layers.append(Layer(name, node.name, "add", hwc, hwc))
    return layers


# ---- the C program of a layer -------------------------------------------------------------------

PRELUDE = """\
/* One CMSIS-NN {suffix} layer: {title}. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "arm_nnfunctions.h"

static uint32_t state = {seed}u;

static int32_t rnd(int32_t lo, int32_t hi) /* uniform in [lo, hi] */
{{
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return lo + (int32_t)(state % ((uint32_t)hi - (uint32_t)lo + 1u));
}}

static void fill_act({act} *p, int32_t n)
{{
    for (int32_t i = 0; i < n; i++)
        p[i] = ({act})rnd(-{in_range}, {in_range} - 1);
}}

/* fill8 and scratch are inline: not every layer uses them. */
static inline void fill8(int8_t *p, int32_t n)
{{
    for (int32_t i = 0; i < n; i++)
        p[i] = (int8_t)rnd(-{w_range}, {w_range});
}}

static inline void *scratch(int32_t size)
{{
    void *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (size > 0 && buf == NULL) {{
        printf("no memory for a %ld-byte buffer\\n", (long)size);
        exit(6);
    }}
    return buf;
}}

/* 0 if the call succeeded and wrote something, else 4 (an error status) or 5 (all zeros). */
static int finish(arm_cmsis_nn_status status, const {act} *out, int32_t n)
{{
    int32_t nonzero = 0;
    for (int32_t i = 0; i < n; i++)
        nonzero += out[i] != 0;
    printf("status=%d nonzero=%ld/%ld\\n", (int)status, (long)nonzero, (long)n);
    if (status != ARM_CMSIS_NN_SUCCESS)
        return 4;
    return nonzero > 0 ? 0 : 5;
}}

"""

QUANT = """\
    for (int32_t c = 0; c < {n}; c++) {{
        mult[c] = rnd(1 << 30, INT32_MAX);
        shift[c] = {shift};
        bias[c] = rnd(-{bias_range}, {bias_range});
    }}
"""

# The start of a convolution's program: its buffers filled, and its per-channel requantization.
WINDOW = """\
static {act} input[{n_in}];
static int8_t filter[{n_w}];
static {bias_t} bias[{oc}];
static int32_t mult[{oc}], shift[{oc}];
static {act} output[{n_out}];

int main(void)
{{
    fill_act(input, {n_in});
    fill8(filter, {n_w});
{quant}"""

CONV = """\
{window}
    const cmsis_nn_conv_params params = {{
        .input_offset = {in_offset}, .output_offset = {out_offset}, .stride = {{.w = {sw}, .h = {sh}}},
        .padding = {{.w = {pw}, .h = {ph}}}, .dilation = {{.w = 1, .h = 1}},
        .activation = {{.min = {act_min}, .max = {act_max}}}}};
    const cmsis_nn_per_channel_quant_params quant = {{mult, shift}};
    const cmsis_nn_dims input_dims = {{1, {h}, {w}, {c}}}, filter_dims = {{{oc}, {kh}, {kw}, {c}}};
    const cmsis_nn_dims bias_dims = {{1, 1, 1, {oc}}}, output_dims = {{1, {oh}, {ow}, {oc}}};
{bias_decl}    const int32_t size = arm_convolve_wrapper_{suffix}_get_buffer_size(&params, &input_dims, &filter_dims,
                                                                        &output_dims);
    const cmsis_nn_context ctx = {{scratch(size), size}};
    return finish(arm_convolve_wrapper_{suffix}(&ctx, &params, &quant, &input_dims, input, &filter_dims, filter,
                                           &bias_dims, {bias_arg}, &output_dims, output), output, {n_out});
}}
"""

DEPTHWISE = """\
{window}
    const cmsis_nn_dw_conv_params params = {{
        .input_offset = {in_offset}, .output_offset = {out_offset}, .ch_mult = {mult},
        .stride = {{.w = {sw}, .h = {sh}}},
        .padding = {{.w = {pw}, .h = {ph}}}, .dilation = {{.w = 1, .h = 1}},
        .activation = {{.min = {act_min}, .max = {act_max}}}}};
    const cmsis_nn_per_channel_quant_params quant = {{mult, shift}};
    const cmsis_nn_dims input_dims = {{1, {h}, {w}, {c}}}, filter_dims = {{1, {kh}, {kw}, {oc}}};
    const cmsis_nn_dims bias_dims = {{1, 1, 1, {oc}}}, output_dims = {{1, {oh}, {ow}, {oc}}};
    const int32_t size = arm_depthwise_conv_wrapper_{suffix}_get_buffer_size(&params, &input_dims, &filter_dims,
                                                                        &output_dims);
    const cmsis_nn_context ctx = {{scratch(size), size}};
    return finish(arm_depthwise_conv_wrapper_{suffix}(&ctx, &params, &quant, &input_dims, input, &filter_dims, filter,
                                                 &bias_dims, {bias_ptr}, &output_dims, output), output, {n_out});
}}
"""

FC = """\
static {act} input[{k}];
static int8_t filter[{n_w}];
static {wide_bias_t} bias[{n}];
static int32_t mult[1], shift[1];
static {act} output[{n}];

int main(void)
{{
    fill_act(input, {k});
    fill8(filter, {n_w});
    for (int32_t c = 0; c < {n}; c++)
        bias[c] = rnd(-{bias_range}, {bias_range});
    mult[0] = rnd(1 << 30, INT32_MAX);
    shift[0] = {shift};
    const cmsis_nn_fc_params params = {{{in_offset}, 0, {out_offset}, {{{act_min}, {act_max}}}}};
    const cmsis_nn_per_tensor_quant_params quant = {{mult[0], shift[0]}};
    const cmsis_nn_dims input_dims = {{1, 1, 1, {k}}}, filter_dims = {{{k}, 1, 1, {n}}};
    const cmsis_nn_dims bias_dims = {{1, 1, 1, {n}}}, output_dims = {{1, 1, 1, {n}}};
    const int32_t size = arm_fully_connected_{suffix}_get_buffer_size(&filter_dims);
    const cmsis_nn_context ctx = {{scratch(size), size}};
{kernel_sums}    return finish(arm_fully_connected_{suffix}(&ctx, &params, &quant, &input_dims, input, &filter_dims,
                                                filter, &bias_dims, {bias_ptr}, &output_dims, output), output, {n});
}}
"""

AVGPOOL = """\
static {act} input[{n_in}];
static {act} output[{n_out}];

int main(void)
{{
    fill_act(input, {n_in});
    const cmsis_nn_pool_params params = {{
        .stride = {{.w = {sw}, .h = {sh}}}, .padding = {{.w = {pw}, .h = {ph}}},
        .activation = {{.min = {act_min}, .max = {act_max}}}}};
    const cmsis_nn_dims input_dims = {{1, {h}, {w}, {c}}}, filter_dims = {{1, {kh}, {kw}, 1}};
    const cmsis_nn_dims output_dims = {{1, {oh}, {ow}, {c}}};
    const int32_t size = arm_avgpool_{suffix}_get_buffer_size({ow}, {c});
    const cmsis_nn_context ctx = {{scratch(size), size}};
    return finish(arm_avgpool_{suffix}(&ctx, &params, &input_dims, input, &filter_dims, &output_dims, output),
                  output, {n_out});
}}
"""
SOFTMAX = """\
static {act} input[{n}];
static {act} output[{n}];

int main(void)
{{
    fill_act(input, {n});
    arm_softmax_s8(input, 1, {n}, 1077952640, 19, -3968, output);    /* CMSIS-NN's softmax test data */
    return finish(ARM_CMSIS_NN_SUCCESS, output, {n});
}}
"""

# Requantization as TensorFlow Lite gives an int16 Add (CMSIS-NN's add_s16 test data): both inputs
# scaled by 2^15 * 0.5, the sum by 0.5 * 2^-14.
ADD = """\
static {act} input1[{n}], input2[{n}];
static {act} output[{n}];

int main(void)
{{
    fill_act(input1, {n});
    fill_act(input2, {n});
    return finish(arm_elementwise_add_{suffix}(input1, input2, {add_args}, {act_min}, {act_max}, {n}), output, {n});
}}
"""


def requant_shift(depth: int, precision: Precision) -> int:
    """The shift that brings a sum of `depth` products of random inputs and weights (times a multiplier
    of about 0.75) to a spread of about the precision's out_std."""
    spread = math.sqrt(depth) * (precision.in_range / math.sqrt(3)) * (W_RANGE / math.sqrt(3)) * 0.75
    return -max(0, round(math.log2(spread / precision.out_std)))


def program(layer: Layer, precision: str, conv_bias: str, seed: int) -> str:
    """The C program that runs `layer` once through CMSIS-NN's `precision` (s8 or s16) functions."""
    p = PRECISIONS[precision]
    (h, w, c), (oh, ow, oc), (kh, kw) = layer.inp, layer.out, layer.kernel
    depth = kh * kw * (c if layer.kind != "depthwise" else 1)
    spread = math.sqrt(depth) * p.in_range * W_RANGE / 3
    v = dict(h=h, w=w, c=c, oh=oh, ow=ow, oc=oc, kh=kh, kw=kw, sh=layer.stride[0], sw=layer.stride[1],
             ph=layer.pad[0], pw=layer.pad[1], n_in=h * w * c, n_out=oh * ow * oc,
             shift=requant_shift(depth, p), bias_range=max(1, int(spread / 4)),
             bias_ptr="bias" if layer.bias else "NULL", suffix=precision, **dataclasses.asdict(p))
    v["quant"] = QUANT.format(n=oc, **v)
    if layer.kind == "conv":
        if precision == "s16":      # its bias is int64, or int32 when the struct says so
            bias_t = "int32_t" if conv_bias == "int32" else "int64_t"
            v.update(bias_decl=f"    const cmsis_nn_bias_data bias_data = {{{v['bias_ptr']}, "
                               f"{'true' if conv_bias == 'int32' else 'false'}}};\n", bias_arg="&bias_data")
        else:
            bias_t = "int32_t"
            v.update(bias_decl="", bias_arg=v["bias_ptr"])
        body = CONV.format(window=WINDOW.format(n_w=oc * kh * kw * c, bias_t=bias_t, **v), **v)
    elif layer.kind == "depthwise":
        body = DEPTHWISE.format(window=WINDOW.format(n_w=kh * kw * oc, bias_t=p.wide_bias_t, **v), mult=oc // c,
                                **v)
    elif layer.kind == "fc":
        # s8 on Helium wants the weights' column sums in its buffer, made once before (arm_vector_sum_s8)
        sums = (f"    if (size > 0)\n        arm_vector_sum_s8((int32_t *)ctx.buf, {c}, {oc}, filter, "
                f"{p.in_offset}, 0, {v['bias_ptr']});\n") if precision == "s8" else ""
        body = FC.format(k=c, n=oc, n_w=c * oc, kernel_sums=sums, **v)
    elif layer.kind == "avgpool":
        body = AVGPOOL.format(**v)
    elif layer.kind == "softmax":
        body = SOFTMAX.format(n=c, **v)
    else:
        body = ADD.format(n=h * w * c, **v)
    title = f"{layer.model} {layer.name} ({layer.kind} {layer.shape})"
    return PRELUDE.format(title=title, seed=seed, w_range=W_RANGE, **v) + body


# ---- building and running -----------------------------------------------------------------------

def run(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise RunError(f"{what} failed ({' '.join(cmd[:3])} ...):\n{proc.stderr.strip()[-2000:]}")
    return proc


def library_flags(tgt: Target) -> list[str]:
    """The target's core flags at -O3."""
    return [f for f in tgt.cflags if not f.startswith("-O")] + ["-O3"]


def cmsis_features(tgt: Target, cmsis: Path) -> list[str]:
    """The CMSIS-NN code paths its headers select for the target's flags."""
    proc = run([tgt.cc, *library_flags(tgt), f"-I{cmsis / 'Include'}", "-dM", "-E", "-x", "c", "-"],
               "reading CMSIS-NN's feature macros", input='#include "arm_nn_math_types.h"\n')
    return [m for m in ("ARM_MATH_DSP", "ARM_MATH_MVEI", "ARM_MATH_MVEF")
            if re.search(rf"^#define {m}\b", proc.stdout, re.M)]


def build_library(tgt: Target, cmsis: Path, work: Path) -> tuple[Path, set[str]]:
    """CMSIS-NN's functions the layer programs need, for `tgt`, as one relocatable object, with the C
    library functions they call (memcpy, memset) renamed LIBC_PREFIX + name; and the names of all the
    functions in it."""
    work.mkdir(parents=True, exist_ok=True)
    sources = sorted(s for s in cmsis.glob("Source/*/*.c") if not re.search(r"_f(16|32)\.c$", s.name))
    flags = [*library_flags(tgt), f"-I{cmsis / 'Include'}"]

    def compile_one(source: Path) -> Path:
        obj = work / f"{source.stem}.o"
        run([tgt.cc, *flags, "-c", str(source), "-o", str(obj)], f"compiling {source.name} for {tgt.name}")
        return obj

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        objects = list(pool.map(compile_one, sources))
    archive = work / "libcmsis-nn.a"
    archive.unlink(missing_ok=True)
    run([tgt.cc.replace("gcc", "ar"), "rcs", str(archive), *map(str, objects)], "archiving CMSIS-NN")
    linked = work / "cmsis-nn.o"
    run([tgt.cc, *library_flags(tgt), "-nostdlib", "-r", *(f"-Wl,-u,{e}" for e in ENTRY_POINTS), "-o", str(linked),
         str(archive), "-lc", "-lgcc"], f"linking CMSIS-NN for {tgt.name}")
    nm = tgt.cc.replace("gcc", "nm")
    symbols = [line.split() for line in run([nm, "--defined-only", str(linked)], "nm").stdout.splitlines()]
    foreign = sorted({s for _, kind, s in symbols if kind.isupper() and not s.startswith("arm_")})
    if foreign:
        renames = work / "renames.txt"
        renames.write_text("".join(f"{s} {LIBC_PREFIX}{s}\n" for s in foreign))
        run([tgt.cc.replace("gcc", "objcopy"), f"--redefine-syms={renames}", str(linked)], "renaming")
    undefined = run([nm, "--undefined-only", str(linked)], "nm").stdout.split()[1::2]
    if undefined:
        raise RunError(f"CMSIS-NN for {tgt.name} still needs {', '.join(undefined)}: they would run uncounted")
    names = set(functions(linked.read_bytes()))
    return linked, names


def count_range(exe: Path, library: set[str]) -> tuple[int, int, list[tuple[str, int, int]]]:
    """[lo, hi) of CMSIS-NN's functions in the program (nothing else may lie inside) and each of them
    as (name, lo, hi), by address."""
    lo, hi = functions_range(exe, library, "CMSIS-NN's")
    ours = {f: span for f, span in functions(exe.read_bytes()).items() if f in library and span[1]}
    spans, seen = [], set()
    for f, (a, s) in sorted(ours.items(), key=lambda item: item[1]):
        if a not in seen:
            seen.add(a)
            spans.append((f, a, a + s))
    return lo, hi, spans


def measure(tgt: Target, layer: Layer, index: int, library: Path, names: set[str], cmsis: Path, plugin: Path,
            work: Path, precision: str, conv_bias: str) -> tuple[int, dict[str, int], int | None]:
    """Instructions CMSIS-NN executes for `layer` on `tgt`, by function, and (where the core has a model) the
    cycles estimated from the same run as aot's are (aot/run/cycles.py)."""
    work.mkdir(parents=True, exist_ok=True)
    source = work / "main.c"
    source.write_text(program(layer, precision, conv_bias, seed=2463534242 + index))
    obj = work / "main.o"
    run([tgt.cc, *local.STRICT_CFLAGS, *tgt.cflags, f"-I{cmsis / 'Include'}", "-c", str(source), "-o", str(obj)],
        f"compiling the program of {layer.model} {layer.name} for {tgt.name}")
    exe = work / "prog.elf"
    local.link(tgt, [], [obj, library], work, exe, f"the program of {layer.model} {layer.name}")
    lo, hi, spans = count_range(exe, names)
    options = f"{plugin},lo={lo:#x},hi={hi:#x}" + "".join(f",range={a:#x}-{b:#x}" for _, a, b in spans)
    priced = cycles.available(tgt)
    if priced:
        options += f",profile={work / 'profile.txt'}"
    what = f"{layer.model} {layer.name} on {tgt.name}"
    try:
        proc = subprocess.run(local.run_command(tgt, exe, ("-plugin", options, "-d", "plugin")), cwd=work,
                              capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RunError(f"{what}: the program did not finish within {TIMEOUT:g} s") from None
    if proc.returncode != 0:
        meaning = {**local.EXIT_MEANING, 4: "CMSIS-NN returned an error", 5: "all outputs are zero"}
        raise RunError(f"{what}: the program exited with status {proc.returncode} "
                       f"({meaning.get(proc.returncode, '?')}): {proc.stdout.strip()[-300:]}")
    total = re.findall(r"^insns: (\d+)$", proc.stderr, re.M)
    counts = {int(i): int(n) for i, n in re.findall(r"^range (\d+): (\d+)$", proc.stderr, re.M)}
    if len(total) != 1 or len(counts) != len(spans):
        raise RunError(f"{what}: the emulator printed no instruction counts: {proc.stderr.strip()[-300:]}")
    by_function = {name: counts[i] for i, (name, _, _) in enumerate(spans) if counts[i]}
    setup = sum(n for f, n in by_function.items() if _setup(f))
    estimated = None
    if priced:
        executed, taken, split = read_profile((work / "profile.txt").read_text(), lo)
        profile = Profile(executed, taken, split, {f: (a, b - a) for f, a, b in spans}, disassemble(exe, tgt, lo, hi))
        by_kernel = cycles.price(profile, tgt).per_kernel
        estimated = sum(n for f, n in by_kernel.items() if not _setup(f))
    return int(total[0]) - setup, {f: n for f, n in by_function.items() if not _setup(f)}, estimated


def _setup(function: str) -> bool:
    """Whether a CMSIS-NN function runs before the layer (sizes its buffer, or sums its weights once)."""
    return any(part in function for part in SETUP)


# ---- the report ---------------------------------------------------------------------------------

def describe(cmsis: Path) -> str:
    """CMSIS-NN's version (git describe) and commit, if DIR is a git checkout."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(cmsis), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    commit = git("rev-parse", "HEAD")
    if not commit:
        return "unknown version (not a git checkout)"
    dirty = " (with local changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{git('describe', '--tags', '--always') or '?'} (commit {commit}){dirty}"


def table(rows: list[tuple[str, ...]], left: int) -> None:
    """Rows as columns, the first `left` of them left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(wd) if i < left else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths))).rstrip())


def per_mac(insns: int, macs: int) -> str:
    return f"{insns / macs:.2f}" if macs else "-"


def _estimate(cycles_: int | None) -> str:
    return "-" if cycles_ is None else f"{cycles_}"


def report(layers: dict[str, list[Layer]], targets: list[Target], results: dict, functions_too: bool) -> None:
    for model, model_layers_ in layers.items():
        print(f"\n{model}")
        rows = [("layer", "kind", "shape", "MACs",
                 *(col for t in targets for col in (f"{t.name} insns", "insns/MAC", "est. cycles")))]
        for layer in model_layers_:
            rows.append((layer.name, layer.kind, layer.shape, f"{layer.macs}",
                         *(col for t in targets for col in (f"{results[t.name, layer][0]}",
                                                            per_mac(results[t.name, layer][0], layer.macs),
                                                            _estimate(results[t.name, layer][2])))))
        for label, subset in ((f"total {'/'.join(LINKED)}", [x for x in model_layers_ if x.kind in LINKED]),
                              ("total all layers", model_layers_)):
            macs = sum(x.macs for x in subset)
            sums = [sum(results[t.name, x][0] for x in subset) for t in targets]
            estimates = [None if any(results[t.name, x][2] is None for x in subset)
                         else sum(results[t.name, x][2] for x in subset) for t in targets]
            rows.append((label, "", "", f"{macs}", *(col for s, e in zip(sums, estimates)
                                                     for col in (f"{s}", per_mac(s, macs), _estimate(e)))))
        table(rows, 3)
    if functions_too:
        for t in targets:
            print(f"\nwhere the instructions went on {t.name} (functions with at least 1%)")
            for model_layers_ in layers.values():
                for layer in model_layers_:
                    total, by_function, _ = results[t.name, layer]
                    parts = [f"{f} {100 * n / total:.0f}%" for f, n in sorted(by_function.items(), key=lambda i: -i[1])
                             if n >= total / 100]
                    print(f"  {layer.model} {layer.name}: {', '.join(parts)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(MODELS), help=f"zoo models (default: {' '.join(MODELS)})")
    parser.add_argument("--cmsis-nn", type=Path, required=True, metavar="DIR", help="a CMSIS-NN checkout")
    parser.add_argument("--target", action="append",
                        help=f"bare-metal target (repeatable; default {' '.join(TARGETS)})")
    parser.add_argument("--precision", choices=list(PRECISIONS), default="s16",
                        help="s16 (int16 activations, as aot's a16w8; default) or s8 (int8)")
    parser.add_argument("--conv-bias", choices=["int64", "int32"], default="int64",
                        help="s16: bias type of the convolutions (depthwise and fully connected take int64 only)")
    parser.add_argument("--functions", action="store_true", help="also print each layer's instructions by function")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build in DIR and keep the files")
    args = parser.parse_args()
    cmsis = args.cmsis_nn.resolve()
    if not (cmsis / "Include" / "arm_nnfunctions.h").is_file():
        parser.error(f"{cmsis} is not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)")
    unknown = [m for m in args.models if m not in zoo.ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(zoo.ZOO)})")
    targets = [get_target(t) for t in args.target or TARGETS]
    for t in targets:
        if t.os != "none" or not t.run_command:
            parser.error(f"target {t.name} is not a bare-metal target run under an emulator")
    # s16 softmax needs lookup tables the program does not make; aot's a16w8 models count theirs
    layers = {m: [x for x in model_layers(m) if args.precision == "s8" or x.kind != "softmax"] for m in args.models}

    print(f"CMSIS-NN {args.precision} kernels: instructions executed under qemu-system-arm (exact; not cycles), "
          f"and on the Cortex-M cores cycles estimated from the same run (an estimate: {cycles.ESTIMATE})")
    print(f"CMSIS-NN {describe(cmsis)}")
    print(f"{'conv bias ' + args.conv_bias + '; ' if args.precision == 's16' else ''}{targets[0].cc}: "
          f"{run([targets[0].cc, '--version'], 'the compiler').stdout.splitlines()[0]}")
    with tempfile.TemporaryDirectory(prefix="cmsis-nn-") as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        plugin = build_plugin(work)
        results: dict[tuple[str, Layer], tuple[int, dict[str, int], int | None]] = {}
        try:
            for t in targets:
                print(f"{t.name}: {' '.join(library_flags(t))}; {', '.join(cmsis_features(t, cmsis)) or 'plain C'}")
                library, names = build_library(t, cmsis, work / t.name / "cmsis-nn")
                jobs = [(layer, i) for i, layer in enumerate(x for m in layers.values() for x in m)]
                with ThreadPoolExecutor(os.cpu_count()) as pool:
                    found = pool.map(lambda job: measure(t, job[0], job[1], library, names, cmsis, plugin,
                                                         work / t.name / f"{job[0].model}-{job[0].name}",
                                                         args.precision, args.conv_bias), jobs)
                    results.update({(t.name, layer): r for (layer, _), r in zip(jobs, found)})
        except RunError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    report(layers, targets, results, args.functions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
