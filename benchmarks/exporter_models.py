"""How aot handles what PyTorch's two ONNX exporters emit today.

wild_models.py tries models that were exported once, by someone, with some exporter; this script makes
its own from code, so that each one comes both from the TorchScript exporter
(`torch.onnx.export(..., dynamo=False, opset_version=17)`) and from the dynamo exporter
(`torch.onnx.export(..., dynamo=True)`, its default opset, weights possibly as external data), and then
builds each file with aot for a target, runs it through the C API (under the target's emulator for a
cross target) and compares it with onnxruntime, reusing wild_models.py's checks (ONNX's reference
implementation and the float64 arbitration judge a difference before it is called WRONG).

The models (random weights, nothing is downloaded; BatchNorm statistics come from a few forward passes
of random data in train mode, so activations are not ~1e-9):

    torchvision   mobilenet_v2, mobilenet_v3_small, resnet18, squeezenet1_1, shufflenet_v2_x0_5,
                  efficientnet_b0 (1x3x96x96); SSDlite320-MobileNetV3's backbone and head (192x192: the
                  raw boxes and logits, decoding and NMS left to the firmware); LRASPP and DeepLabV3 on
                  MobileNetV3-Large (128x128)
    timm          mobileone_s0 and fastvit_t8 (reparameterized, as deployed), vit_tiny_patch16_224 and
                  deit_tiny_patch16_224 at img_size 96, mobilenetv4_conv_small, tf_efficientnet_lite0,
                  ghostnet_100, edgenext_xx_small (96x96), mobilevit_xxs, levit_128s (128x128)
    transformers  BERT, DistilBERT, GPT-2 (with an attention mask), GPT-2 with past key/values, T5
                  encoder (16 tokens); ViT, DeiT (64x64); the Whisper encoder (80 mel bins x 100 frames);
                  Wav2Vec2 (4,000 samples); AST (100 frames x 64 mel bins)
                  small configs: hidden 128, 2 layers, 4 heads, FFN 256

Token ids are drawn from the vocabulary, attention masks are ones with the last positions zero.

Install (torch pinned to the CPU wheel; torchvision, timm and transformers without their dependencies):

    .venv/bin/pip install torch==2.13.0
    .venv/bin/pip install --no-deps torchvision==0.28.0 timm transformers regex safetensors \\
        huggingface_hub tokenizers onnxscript
    .venv/bin/pip install httpx2 click onnx_ir

Run:

    .venv/bin/python benchmarks/exporter_models.py [/tmp/exported] [--target host] [--only REGEX]
        [--jobs 1] [--timeout 900] [--no-export] [--json out.json] [--repros /tmp/exporter_repros]
    .venv/bin/python benchmarks/exporter_models.py --no-export --target cortex-m4 --memory flash=48M,ram=16M
    .venv/bin/python benchmarks/exporter_models.py --no-export --int8 --speed --arm64 /tmp/arm64py

--int8 checks each file's `aot quantize` (FILE.int8.onnx beside it, calibrated on 16 draws of the random
inputs) instead of the file, with its SQNR against the float model and how many kernels run on integers
and how many in float. --speed times aot against onnxruntime on the host (bench.py's measurement, one
thread each, the inputs the check used); --arm64 DIR counts both sides' instructions per inference under
qemu-aarch64 for --cpu (arm_peer.py's counts: onnxruntime's aarch64 wheel in the tree arm64_python.sh makes).

(for a Cortex-M4 the image models' float weights need more than its 4 MB of flash: --memory raises the
limits of the build, which qemu's board runs)

Each model is exported in its own spawned process (a failing export is a row too); each exported file
is built and checked in its own forked worker that never imports torch. The table (markdown) gives per
file: model | exporter | nodes (top-level graph) | status | build s | max abs err | output scale, where
status is

    ok                   matched onnxruntime (or a difference that ONNX's reference implementation or
                         the float64 arbitration puts on onnxruntime's side: see the notes below the table)
    refused: REASON      aot raised one of its own errors (the first line of its message)
    WRONG                outputs differ and aot is the wrong side
    crash: ERROR         an InternalError or any other exception, or the worker died
    timeout              over --timeout seconds
    export failed: ERR   PyTorch could not export the model

`max abs err` is the largest |aot - onnxruntime| over the outputs, `output scale` the largest magnitude
of onnxruntime's outputs. Below the table, every failure is listed with a command that reproduces it
(`aot run FILE --target T --inputs FILE.npz`, the inputs the script used saved beside the model).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.connection
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import wild_models  # noqa: E402 - a sibling script, found through the path set above

EXPORTERS = ("torchscript", "dynamo")
IMAGE = 96              # side of the torchvision / timm inputs
SEQ = 16                # tokens of the transformers inputs
VOCAB = 1000            # vocabulary of the small transformers configs
PAD = 3                 # attention-mask positions at the end that are zero
PAST = 8                # cached tokens of GPT-2 with past key/values


@dataclass
class Row:
    model: str
    exporter: str
    path: str = ""
    nodes: int = 0
    opset: int = 0
    status: str = "crash"
    message: str = ""
    build_seconds: float = 0.0
    max_abs: float | None = None
    scale: float | None = None
    note: str = ""
    command: str = ""
    sqnr_db: float | None = None        # --int8: the quantized model against the float one (worst output)
    kernels: str = ""                   # --int8: integer kernels / kernels left in float
    aot_ms: float | None = None         # --speed: one inference on the host, one thread
    ort_ms: float | None = None
    aot_insns: float | None = None      # --arm64: instructions per inference under qemu-aarch64
    ort_insns: float | None = None


# --- the models (built only in the export processes: the parent never imports torch) ------------------

def _torchvision():
    import torch

    try:
        import torchvision
    except RuntimeError as err:
        # A torchvision wheel built for CUDA cannot load its C++ ops next to a CPU-only torch, and its
        # import then fails registering a fake kernel for torchvision::nms. The models need none of the
        # ops: declare the two schemas it registers unconditionally, and import again.
        if "torchvision::nms" not in str(err):
            raise
        for name in list(sys.modules):
            if name == "torchvision" or name.startswith("torchvision."):
                del sys.modules[name]
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _torchvision.keep = lib         # the schemas live as long as the library object
        import torchvision
    return torchvision


def _calibrate(model, make_input, passes: int = 4):
    """BatchNorm running statistics from random data: a few forward passes in train mode."""
    import torch

    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(*make_input())
    return model.eval()


def _image_model(build, size: int = IMAGE, outputs: tuple[str, ...] = ("output",)):
    import torch

    def make():
        torch.manual_seed(0)
        model = build()
        batch = lambda: (torch.randn(4, 3, size, size),)
        model = _calibrate(model, batch)
        return model, (torch.randn(1, 3, size, size),), ["input"], list(outputs)
    return make


def _tv(name: str):
    return _image_model(lambda: getattr(_torchvision().models, name)(weights=None))


def _tv_segmentation(name: str):
    """torchvision's MobileNetV3 segmentation heads (no auxiliary loss), the 'out' map."""
    build = lambda: _Tuple(getattr(_torchvision().models.segmentation, name)(weights=None, weights_backbone=None),
                           ["out"], return_dict=None)
    return _image_model(build, size=128)


def _ssdlite_head():
    """SSDlite320-MobileNetV3's backbone and head: the raw box regressions and class logits, as a firmware
    deploys it (anchor decoding and non-maximum suppression, whose output size depends on the data, run
    after the model)."""
    def build():
        import torch

        detector = _torchvision().models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=91)

        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone, self.head = detector.backbone, detector.head

            def forward(self, x):
                out = self.head(list(self.backbone(x).values()))
                return out["bbox_regression"], out["cls_logits"]
        return Head()
    return _image_model(build, size=192, outputs=("bbox_regression", "cls_logits"))


def _timm(name: str, reparameterize: bool = False, size: int = IMAGE, **kwargs):
    def build():
        _torchvision()
        import timm

        model = timm.create_model(name, pretrained=False, **kwargs)
        return model
    make = _image_model(build, size=size)
    if not reparameterize:
        return make

    def make_reparameterized():
        from timm.utils.model import reparameterize_model

        model, args, inputs, outputs = make()
        return reparameterize_model(model).eval(), args, inputs, outputs
    return make_reparameterized


def _tokens(batch: int = 1):
    import torch

    ids = torch.randint(0, VOCAB, (batch, SEQ), dtype=torch.int64)
    mask = torch.ones(batch, SEQ, dtype=torch.int64)
    mask[:, SEQ - PAD:] = 0
    return ids, mask


def _small(config_class, **kwargs):
    return config_class(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, **kwargs)


class _Tuple:
    """A model returning a dict (a transformers ModelOutput, torchvision's segmentation heads) as a module
    returning those entries as plain tensors; `return_dict` is passed to a transformers model."""

    def __new__(cls, model, keys, return_dict: bool | None = True):
        import torch

        options = {} if return_dict is None else {"return_dict": return_dict}

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(*args, **options)
                return tuple(out[k] for k in keys)
        return Wrapped().eval()


def _bert():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(_small(BertConfig, max_position_embeddings=64)).eval()
    return _Tuple(model, ["last_hidden_state", "pooler_output"]), _tokens(), \
        ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]


def _distilbert():
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=4, hidden_dim=256,
                              max_position_embeddings=64)
    model = DistilBertModel(config).eval()
    return _Tuple(model, ["last_hidden_state"]), _tokens(), ["input_ids", "attention_mask"], ["last_hidden_state"]


def _gpt2_config():
    from transformers import GPT2Config

    return GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, n_inner=256, n_positions=64,
                      bos_token_id=0, eos_token_id=0, use_cache=False)


def _gpt2():
    import torch
    from transformers import GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(_gpt2_config()).eval()

    class WithMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                              return_dict=True).last_hidden_state
    return WithMask().eval(), _tokens(), ["input_ids", "attention_mask"], ["last_hidden_state"]


def _gpt2_past():
    """One decoding step of 4 new tokens after PAST cached ones: the cache as plain tensors in and out."""
    import torch
    from transformers import DynamicCache, GPT2Model

    torch.manual_seed(0)
    config = _gpt2_config()
    model = GPT2Model(config).eval()
    layers, heads, dim = config.n_layer, config.n_head, config.n_embd // config.n_head
    new = 4

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                             use_cache=True, return_dict=True)
            present = out.past_key_values
            flat = []
            for i in range(layers):
                layer = present.layers[i]
                flat += [layer.keys, layer.values]
            return (out.last_hidden_state, *flat)

    ids = torch.randint(0, VOCAB, (1, new), dtype=torch.int64)
    mask = torch.ones(1, PAST + new, dtype=torch.int64)
    mask[:, PAST + new - 1:] = 0
    past = tuple(torch.randn(1, heads, PAST, dim) for _ in range(2 * layers))
    names = ["input_ids", "attention_mask"] + [f"past_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    outputs = ["last_hidden_state"] + [f"present_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    return WithPast().eval(), (ids, mask, *past), names, outputs


def _hf_image(kind: str):
    """transformers' ViT or DeiT (kind 'ViT' or 'DeiT') on 64x64 images, without the pooler."""
    def make():
        import torch
        import transformers

        torch.manual_seed(0)
        config = getattr(transformers, f"{kind}Config")(image_size=64, patch_size=16, hidden_size=128,
                                                        num_hidden_layers=2, num_attention_heads=4,
                                                        intermediate_size=256)
        model = getattr(transformers, f"{kind}Model")(config, add_pooling_layer=False).eval()
        return _Tuple(model, ["last_hidden_state"]), (torch.randn(1, 3, 64, 64),), ["pixel_values"], \
            ["last_hidden_state"]
    return make


def _whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=256,
                           num_mel_bins=80, max_source_positions=50)
    model = WhisperEncoder(config).eval()
    frames = 2 * config.max_source_positions     # the encoder takes exactly this many mel frames
    return _Tuple(model, ["last_hidden_state"]), (torch.randn(1, 80, frames),), ["input_features"], \
        ["last_hidden_state"]


def _wav2vec2():
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                            conv_dim=(64,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                            do_stable_layer_norm=True, feat_extract_norm="layer")
    model = Wav2Vec2Model(config).eval()
    return _Tuple(model, ["last_hidden_state"]), (torch.randn(1, 4000),), ["input_values"], ["last_hidden_state"]


def _t5_encoder():
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4)
    model = T5EncoderModel(config).eval()
    return _Tuple(model, ["last_hidden_state"]), _tokens(), ["input_ids", "attention_mask"], ["last_hidden_state"]


def _ast():
    import torch
    from transformers import ASTConfig, ASTModel

    torch.manual_seed(0)
    config = ASTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                       num_mel_bins=64, max_length=100)
    model = ASTModel(config).eval()
    return _Tuple(model, ["last_hidden_state"]), (torch.randn(1, 100, 64),), ["input_values"], \
        ["last_hidden_state"]


MODELS = {
    "mobilenet_v2": _tv("mobilenet_v2"),
    "mobilenet_v3_small": _tv("mobilenet_v3_small"),
    "resnet18": _tv("resnet18"),
    "squeezenet1_1": _tv("squeezenet1_1"),
    "shufflenet_v2_x0_5": _tv("shufflenet_v2_x0_5"),
    "efficientnet_b0": _tv("efficientnet_b0"),
    "timm_mobileone_s0": _timm("mobileone_s0", reparameterize=True),
    "timm_vit_tiny": _timm("vit_tiny_patch16_224", img_size=IMAGE),
    "ssdlite320_head": _ssdlite_head(),
    "lraspp_mobilenet_v3": _tv_segmentation("lraspp_mobilenet_v3_large"),
    "deeplabv3_mobilenet_v3": _tv_segmentation("deeplabv3_mobilenet_v3_large"),
    "timm_mobilenetv4_small": _timm("mobilenetv4_conv_small"),
    "timm_efficientnet_lite0": _timm("tf_efficientnet_lite0"),
    "timm_ghostnet": _timm("ghostnet_100"),
    "timm_fastvit_t8": _timm("fastvit_t8", reparameterize=True),
    "timm_edgenext_xxs": _timm("edgenext_xx_small"),
    "timm_mobilevit_xxs": _timm("mobilevit_xxs", size=128),
    "timm_levit_128s": _timm("levit_128s", size=128, img_size=128),
    "timm_deit_tiny": _timm("deit_tiny_patch16_224", img_size=IMAGE),
    "hf_bert": _bert,
    "hf_distilbert": _distilbert,
    "hf_gpt2": _gpt2,
    "hf_gpt2_past": _gpt2_past,
    "hf_vit": _hf_image("ViT"),
    "hf_deit": _hf_image("DeiT"),
    "hf_whisper_encoder": _whisper_encoder,
    "hf_wav2vec2": _wav2vec2,
    "hf_t5_encoder": _t5_encoder,
    "hf_ast": _ast,
}

# Integer inputs: (lo, hi) of the random draw, or "mask" for ones with the last positions zero.
INT_INPUTS = {"input_ids": (0, VOCAB), "attention_mask": "mask"}


# --- exporting -----------------------------------------------------------------------------------------

def _export_one(name: str, out: str, conn) -> None:
    """In a spawned process: build the model and export it both ways; send {exporter: (path, error)}."""
    import os
    import warnings

    import torch

    os.dup2(2, 1)                       # the exporters' progress lines go to stderr, not into the table
    warnings.filterwarnings("ignore")
    results = {}
    try:
        _torchvision()                  # transformers and timm import torchvision too
        model, args, inputs, outputs = MODELS[name]()
    except Exception as err:  # noqa: BLE001 - reported as the model's row
        conn.send({e: ("", f"cannot build the model: {type(err).__name__}: {wild_models.first_line(err)}")
                   for e in EXPORTERS})
        return
    for exporter in EXPORTERS:
        path = Path(out) / f"{name}.{exporter}.onnx"
        for stale in (path, path.with_name(path.name + ".data")):
            stale.unlink(missing_ok=True)
        try:
            with torch.no_grad():
                if exporter == "torchscript":
                    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17,
                                      input_names=inputs, output_names=outputs)
                else:
                    torch.onnx.export(model, args, str(path), dynamo=True, input_names=inputs,
                                      output_names=outputs)
            results[exporter] = (str(path), "")
        except Exception as err:  # noqa: BLE001 - reported as the file's row
            results[exporter] = ("", f"{type(err).__name__}: {wild_models.first_line(err)}")
    conn.send(results)


def export_all(names: list[str], out: Path, timeout: float) -> dict[tuple[str, str], tuple[str, str]]:
    """Each model in its own spawned process; (model, exporter) -> (path or '', error or '')."""
    context = multiprocessing.get_context("spawn")
    found = {}
    for name in names:
        start = time.monotonic()
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_export_one, args=(name, str(out), send), daemon=True)
        process.start()
        send.close()
        if receive.poll(timeout):
            try:
                got = receive.recv()
            except EOFError:
                got = {e: ("", f"the export process died (exit code {process.exitcode})") for e in EXPORTERS}
        else:
            process.kill()
            got = {e: ("", f"export over {timeout:g} s") for e in EXPORTERS}
        process.join()
        for exporter, value in got.items():
            found[(name, exporter)] = value
        print(f"  exported {name} ({time.monotonic() - start:.0f} s)"
              + "".join(f"; {e}: {err}" for e, (_, err) in got.items() if err), file=sys.stderr, flush=True)
    return found


def existing(names: list[str], out: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """--no-export: the files a previous run wrote."""
    found = {}
    for name in names:
        for exporter in EXPORTERS:
            path = out / f"{name}.{exporter}.onnx"
            found[(name, exporter)] = (str(path), "") if path.exists() else ("", "not exported (--no-export)")
    return found


# --- building and checking -----------------------------------------------------------------------------

def feeds_for(proto, seed: int = 0) -> dict[str, np.ndarray]:
    """wild_models' random inputs, with token ids drawn from the vocabulary and attention masks of ones
    whose last positions are zero (a padded batch)."""
    from aot.reference import input_specs

    ranges = {k: list(v) for k, v in INT_INPUTS.items() if isinstance(v, tuple)}
    feeds = wild_models.random_feeds(_Spec(proto), ranges, seed)
    for name, shape, _ in input_specs(proto):
        if INT_INPUTS.get(name) == "mask":
            mask = np.ones(shape, feeds[name].dtype)
            mask[..., -(PAD if shape[-1] == SEQ else 1):] = 0
            feeds[name] = mask
    return feeds


class _Spec:
    """What wild_models.random_feeds reads of an artifact: .model.proto."""

    def __init__(self, proto):
        self.model = self
        self.proto = proto


def parse_memory(text: str | None) -> dict[str, int] | None:
    """'flash=8M,ram=512K' -> {'flash': 8388608, 'ram': 524288}, as aot's --memory."""
    from aot.target import parse_size

    if not text:
        return None
    return {key.strip(): parse_size(value.strip()) for key, value in (part.split("=", 1) for part in text.split(","))}


CALIBRATION = 16        # --int8: samples (feeds_for's draws) onnxruntime's quantizer calibrates on


def int8_path(path: str) -> str:
    return str(Path(path).with_suffix(".int8.onnx"))


def quantize_file(path: str, proto) -> float:
    """`aot quantize` of an exported file beside it (FILE.int8.onnx), calibrated on CALIBRATION draws of
    feeds_for; the worst output's SQNR against the float model, on those samples."""
    from aot.quantize import quantize

    draws = [feeds_for(proto, seed) for seed in range(1, CALIBRATION + 1)]
    with tempfile.TemporaryDirectory(prefix="aot-exporter-calibration-") as tmp:
        calibration = Path(tmp) / "calibration.npz"
        np.savez(calibration, **{name: np.concatenate([d[name] for d in draws]) for name in draws[0]})
        report = quantize(path, int8_path(path), calibration=calibration)
    return min(o.sqnr_db for o in report.outputs)


def kernel_split(program) -> str:
    """'integer kernels/kernels in float' of a quantized build, counted as its report counts them."""
    from aot.graph.node_quant import node_quant
    from aot.registry import op_def

    graph = program.graph
    computing = [c.node for c in program.calls if not op_def(c.node.op).moves_values
                 and c.node.op not in ("Quantize", "Dequantize")]
    integer = sum(bool(node_quant(graph.values, n)) for n in computing)
    in_float = sum(not node_quant(graph.values, n) and graph.values[n.outputs[0]].dtype == "float32"
                   for n in computing)
    return f"{integer}/{in_float}"


def check_file(path: str, target: str, timeout: float, memory: dict[str, int] | None = None,
               int8: bool = False) -> dict:
    """Build for `target` (with `int8`, the file's `aot quantize` first), run through the C API and compare
    with onnxruntime; never raises."""
    import onnx

    import aot
    from aot.errors import AotError, InternalError, first_line

    got: dict = {"status": "crash"}
    try:
        proto = onnx.load(path, load_external_data=False)
        got["nodes"] = len(proto.graph.node)
        got["opset"] = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        feeds = feeds_for(proto)
        np.savez(Path(path).with_suffix(".inputs.npz"), **feeds)
        if int8:
            got["sqnr_db"] = round(quantize_file(path, proto), 2)
            path = got["path"] = int8_path(path)
        with tempfile.TemporaryDirectory(prefix="aot-exporter-") as tmp:
            start = time.monotonic()
            artifact = aot.build(path, target=target, out_dir=Path(tmp) / "build", memory=memory)
            got["build_seconds"] = round(time.monotonic() - start, 1)
            if int8:
                got["kernels"] = kernel_split(artifact.program)
            check = aot.check(artifact, feeds, timeout=timeout)
            if check.comparisons:
                got["max_abs"] = max(c.max_abs for c in check.comparisons)
                got["scale"] = max(c.scale for c in check.comparisons)
            bad = check.mismatches
            if not bad:
                got["status"] = "ok"
                return got
            worst = max(bad, key=lambda c: c.max_abs / max(c.scale, 1e-30))
            what = f"output '{worst.output}': max abs error {worst.max_abs:.3g} (scale {worst.scale:.3g})"
            if wild_models._matches_onnx_reference(artifact, check):
                got["status"], got["note"] = "ok", f"onnxruntime differs ({what}); ONNX's reference agrees with aot"
                return got
            judged = aot.check(path, feeds, target=target, timeout=timeout, memory=memory)
            if judged.ok:
                cleared = len(judged.arbitration.verdicts) if judged.arbitration else 0
                got["status"], got["note"] = "ok", (f"arbitrated in float64 ({what}): aot is right at each of "
                                                    f"the {cleared} nodes where it diverges")
            else:
                got["status"], got["message"] = "WRONG", what
                wrong = judged.arbitration.wrong if judged.arbitration is not None else None
                if wrong is not None:
                    got["message"] += f"; first wrong node {wrong.node} ({wrong.op}): {wrong.closeness()}"
                elif judged.not_arbitrated:
                    got["message"] += f"; not arbitrated: {judged.not_arbitrated}"
    except InternalError as err:
        got["status"], got["message"] = "crash", f"InternalError: {first_line(err)}"
    except AotError as err:
        got["status"], got["message"] = "refused", _reason(err)
    except Exception as err:  # noqa: BLE001 - anything else is a bug in aot, recorded, never fatal
        got["status"] = "crash"
        got["message"] = (f"{type(err).__name__}: {first_line(err)} "
                          f"(at {traceback.extract_tb(err.__traceback__)[-1].name})")
    return got


def _reason(err: Exception) -> str:
    """The error's first line; where that only introduces what follows ('compiling the harness ... failed:'),
    with the line of the tool's output that says why (a linker's 'region ... overflowed', say)."""
    from aot.errors import first_line

    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    head = first_line(err)
    if head.endswith(":") and len(lines) > 1:
        why = next((line for line in lines[1:] if re.search(r"overflow|error|undefined", line)), lines[1])
        head += " " + re.sub(r"^\S*/bin/ld: ", "ld: ", why)
    return head


def _check_worker(path: str, target: str, timeout: float, memory, int8: bool, conn) -> None:
    conn.send(check_file(path, target, timeout, memory, int8))
    conn.close()


def check_all(rows: list[Row], target: str, jobs: int, timeout: float, memory: dict[str, int] | None = None,
              int8: bool = False) -> None:
    """Fill in each exported row, every file in its own forked worker, `jobs` at a time."""
    context = multiprocessing.get_context("fork")
    pending = [r for r in rows if r.path]
    running: dict = {}                      # receiving end -> (process, row, start)

    def finish(conn, row: Row, got: dict) -> None:
        process = running.pop(conn)[0]
        process.join()
        conn.close()
        for key, value in got.items():
            setattr(row, key, value)
        print(f"  {row.status:8} {row.model} {row.exporter} ({time.monotonic() - start:.0f} s)"
              + (f": {row.message}" if row.message else ""), file=sys.stderr, flush=True)

    while pending or running:
        while pending and len(running) < jobs:
            row = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_check_worker, args=(row.path, target, timeout, memory, int8, send),
                                      daemon=True)
            process.start()
            send.close()
            running[receive] = (process, row, time.monotonic())
        for conn in multiprocessing.connection.wait(list(running), timeout=1.0):
            process, row, start = running[conn]
            try:
                got = conn.recv()
            except EOFError:
                process.join()
                got = {"status": "crash", "message": f"the worker died (exit code {process.exitcode})"}
            finish(conn, row, got)
        for conn, (process, row, start) in list(running.items()):
            if time.monotonic() - start > timeout:
                process.kill()
                finish(conn, row, {"status": "timeout", "message": f"over {timeout:g} s"})


# --- speed ----------------------------------------------------------------------------------------------

def time_rows(rows: list[Row], min_time: float) -> None:
    """--speed: each matching file's inference on the host, aot's C harness against onnxruntime (one thread
    each, bench.py's measurement), in this process, one after the other."""
    import bench
    import onnx

    from aot.bench import bench as aot_bench

    for row in rows:
        if row.status != "ok":
            continue
        feeds = dict(np.load(Path(row.path.replace(".int8.onnx", ".onnx")).with_suffix(".inputs.npz")))
        result = aot_bench(row.path, target="host", repeat=bench.REPEAT, min_repeat_ms=min_time * 1e3 / bench.REPEAT,
                           inputs=feeds)
        row.aot_ms = result.stats.median
        row.ort_ms = bench.time_onnxruntime(onnx.load(row.path), feeds, min_time)
        print(f"  timed {row.model} {row.exporter}: aot {row.aot_ms:.3f} ms, onnxruntime {row.ort_ms:.3f} ms",
              file=sys.stderr, flush=True)


def count_rows(rows: list[Row], arm64: Path, cpu: str, extra: int) -> None:
    """--arm64: instructions per inference under qemu-aarch64 for `cpu`, aot against onnxruntime's aarch64
    wheel (arm_peer.py's counts)."""
    import arm_peer
    import onnx

    from aot.run.count import build_plugin

    with tempfile.TemporaryDirectory(prefix="aot-exporter-arm-") as tmp:
        work = Path(tmp)
        plugin = build_plugin(work)
        script = work / "ort_run.py"
        script.write_text(arm_peer.ORT_SCRIPT)
        for i, row in enumerate(rows):
            if row.status != "ok":
                continue
            inputs = Path(row.path.replace(".int8.onnx", ".onnx")).with_suffix(".inputs.npz")
            run = work / str(i)
            run.mkdir()
            ours, good = arm_peer.aot_count(onnx.load(row.path), cpu, dict(np.load(inputs)), plugin, run, extra)
            if not good:
                row.status, row.message = "WRONG", f"outputs differ from onnxruntime's on {cpu}"
                continue
            theirs = arm_peer.ort_count(Path(row.path), inputs, cpu, arm64, plugin, script,
                                        max(extra, math.ceil(arm_peer.MIN_EXTRA_INSNS / ours)))
            row.aot_insns, row.ort_insns = ours, theirs
            print(f"  counted {row.model} {row.exporter} on {cpu}: aot {ours / 1e6:.1f} M, onnxruntime "
                  f"{theirs / 1e6:.1f} M", file=sys.stderr, flush=True)


def geomean(ratios: list[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")


# --- report ----------------------------------------------------------------------------------------------

def status_text(row: Row, width: int = 110) -> str:
    if row.status in ("ok", "WRONG", "timeout"):
        return row.status
    text = f"{row.status}: {row.message}".replace("|", "\\|")
    return text if len(text) <= width else text[:width - 3] + "..."


def markdown(rows: list[Row], cpu: str = "") -> str:
    int8 = any(r.sqnr_db is not None for r in rows)
    speed = any(r.aot_ms is not None for r in rows)
    arm = any(r.aot_insns is not None for r in rows)
    head = ["model", "exporter", "nodes", "status", "build s", "max abs err", "output scale"]
    head += ["SQNR dB", "int/float kernels"] if int8 else []
    head += ["aot ms", "ort ms", "aot/ort"] if speed else []
    head += [f"{cpu} aot M insns", f"{cpu} ort M insns", f"{cpu} aot/ort"] if arm else []
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|---|" + "---:|" * (len(head) - 4)]
    for r in rows:
        exporter = f"{r.exporter} (opset {r.opset})" if r.opset else r.exporter
        cells = [r.model, exporter, str(r.nodes or ""), status_text(r), str(r.build_seconds or ""),
                 "" if r.max_abs is None else f"{r.max_abs:.2g}", "" if r.scale is None else f"{r.scale:.3g}"]
        if int8:
            cells += ["" if r.sqnr_db is None else f"{r.sqnr_db:.1f}", r.kernels]
        if speed:
            cells += ["" if r.aot_ms is None else f"{r.aot_ms:.3f}", "" if r.ort_ms is None else f"{r.ort_ms:.3f}",
                      f"{r.aot_ms / r.ort_ms:.2f}" if r.aot_ms and r.ort_ms else ""]
        if arm:
            cells += ["" if r.aot_insns is None else f"{r.aot_insns / 1e6:.1f}",
                      "" if r.ort_insns is None else f"{r.ort_insns / 1e6:.1f}",
                      f"{r.aot_insns / r.ort_insns:.2f}" if r.aot_insns and r.ort_insns else ""]
        lines.append("| " + " | ".join(cells) + " |")
    if speed:
        lines.append(f"\ngeometric mean of aot/onnxruntime on the host: "
                     f"{geomean([r.aot_ms / r.ort_ms for r in rows if r.aot_ms and r.ort_ms]):.2f}")
    if arm:
        lines.append(f"geometric mean of aot/onnxruntime instructions on {cpu}: "
                     f"{geomean([r.aot_insns / r.ort_insns for r in rows if r.aot_insns and r.ort_insns]):.2f}")
    return "\n".join(lines)


def repro_command(row: Row, target: str, memory: str | None = None) -> str:
    inputs = Path(row.path.replace(".int8.onnx", ".onnx")).with_suffix(".inputs.npz")
    limits = f" --memory {memory}" if memory else ""
    return f".venv/bin/aot run {row.path} --target {target} --inputs {inputs}{limits}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=Path("/tmp/exported"),
                        help="directory for the exported files (default /tmp/exported)")
    parser.add_argument("--target", default="host", help="aot target to build for (default host)")
    parser.add_argument("--memory", help="limits passed to aot.build, as aot's --memory: flash=8M,ram=512K "
                        "(the image models' float weights exceed a Cortex-M4's 4 MB flash)")
    parser.add_argument("--only", help="only models whose name matches this regular expression")
    parser.add_argument("--exporter", choices=EXPORTERS, help="only this exporter's files")
    parser.add_argument("--jobs", type=int, default=1, help="files built and checked at once (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per export or check (default 900)")
    parser.add_argument("--no-export", action="store_true", help="check the files a previous run exported")
    parser.add_argument("--json", type=Path, help="write every row to this file")
    parser.add_argument("--repros", type=Path, help="write the failures' repro commands to DIR/README.md")
    parser.add_argument("--int8", action="store_true", help="check each file's `aot quantize` (FILE.int8.onnx, "
                        f"calibrated on {CALIBRATION} random draws) instead, with its SQNR against the float model")
    parser.add_argument("--speed", action="store_true", help="time the files that matched on the host: aot "
                        "against onnxruntime, one thread each (run on a quiet machine, --jobs 1)")
    parser.add_argument("--min-time", type=float, default=1.0, help="--speed: seconds per measurement series")
    parser.add_argument("--arm64", type=Path, help="count instructions per inference under qemu-aarch64, aot "
                        "against onnxruntime's aarch64 wheel in this arm64 Python tree (arm64_python.sh DIR)")
    parser.add_argument("--cpu", default="cortex-a76", help="--arm64: the core (arm_peer.py's CPUS; default "
                        "cortex-a76, aot's aarch64-dotprod build)")
    parser.add_argument("--extra", type=int, default=20, help="--arm64: extra inferences whose count is divided out")
    args = parser.parse_args(argv)

    wall = time.monotonic()
    names = [n for n in MODELS if not args.only or re.search(args.only, n)]
    args.out.mkdir(parents=True, exist_ok=True)
    files = existing(names, args.out) if args.no_export else export_all(names, args.out, args.timeout)
    exporters = [args.exporter] if args.exporter else list(EXPORTERS)
    rows = []
    for name in names:
        for exporter in exporters:
            path, error = files[(name, exporter)]
            rows.append(Row(name, exporter, path) if path else
                        Row(name, exporter, status="export failed", message=error))
    exported = time.monotonic()
    check_all(rows, args.target, max(1, args.jobs), args.timeout, parse_memory(args.memory), args.int8)
    if args.speed:
        time_rows(rows, args.min_time)
    if args.arm64:
        count_rows(rows, args.arm64, args.cpu, args.extra)
    for r in rows:
        if r.path and r.status not in ("ok",):
            r.command = repro_command(r, args.target, args.memory)

    import onnx
    import onnxruntime

    import aot

    print(f"aot {aot.__version__}, target {args.target}, onnx {onnx.__version__}, "
          f"onnxruntime {onnxruntime.__version__}, exported to {args.out}\n")
    print(markdown(rows, args.cpu if args.arm64 else ""))
    notes = [f"- {r.model} {r.exporter}: {r.note}" for r in rows if r.note]
    failures = [r for r in rows if r.status != "ok"]
    if notes:
        print("\nnotes:\n" + "\n".join(notes))
    if failures:
        print("\nfailures (repro):")
        for r in failures:
            print(f"- {r.model} {r.exporter}: {r.status}: {r.message}" + (f"\n  `{r.command}`" if r.command else ""))
    counts = {s: sum(r.status == s for r in rows) for s in dict.fromkeys(r.status for r in rows)}
    print(f"\n{', '.join(f'{n} {s}' for s, n in counts.items())} of {len(rows)} files; "
          f"export {exported - wall:.0f} s, build and check {time.monotonic() - exported:.0f} s, "
          f"wall {time.monotonic() - wall:.0f} s")
    if args.json:
        import json

        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    if args.repros:
        args.repros.mkdir(parents=True, exist_ok=True)
        text = [f"# Failures of `benchmarks/exporter_models.py --target {args.target}`\n"]
        for r in failures:
            text.append(f"## {r.model} ({r.exporter})\n\n- file: `{r.path or '-'}`\n- status: {r.status}\n"
                        f"- error: {r.message}\n" + (f"- repro: `{r.command}`\n" if r.command else ""))
        (args.repros / "README.md").write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
