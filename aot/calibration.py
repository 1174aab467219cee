"""Calibration and evaluation data for `aot quantize`, as users have it, turned into the samples onnxruntime's
calibration reader hands out (one dict of float32 arrays per batch):

- an .npz with one array per model input, the samples on the first axis (a model input of batch 1 takes one
  sample at a time; of batch N, N at a time);
- a directory of .npz/.npy files, one sample each (an .npy for a model with one input);
- ONNX test sets (test_data_set_*/input_N.pb, as the ONNX model zoo ships them);
- a directory of images (PNG, JPEG, BMP, PPM) for a model with one image input, with the preprocessing spelled
  out (--preprocess: mean, std, layout, size, scale), as the model was trained with it.

Each problem is one line naming the option, the file and what is wrong (OptionError).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from aot.errors import OptionError, first_line
from aot.reference import INDEX_RANGE

IMAGES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm")


def load_calibration(path: Path, feeds: dict[str, tuple[int, ...]], option: str = "--calibration",
                     preprocess: str | None = None, dtypes: dict[str, np.dtype] | None = None
                     ) -> list[dict[str, np.ndarray]]:
    """The samples in `path` for a model with inputs `feeds` (name: static shape), each input of the dtype
    `dtypes` gives it (default float32); see the module docstring."""
    samples = _load(path, feeds, option, preprocess)
    return [{n: a.astype((dtypes or {}).get(n, np.float32), copy=False) for n, a in s.items()} for s in samples]


def _load(path: Path, feeds: dict[str, tuple[int, ...]], option: str, preprocess: str | None
          ) -> list[dict[str, np.ndarray]]:
    if not path.exists():
        raise OptionError(f"{option} {path}: no such file or directory")
    if path.is_dir():
        test_sets = sorted(path.glob("test_data_set_*")) or ([path] if (path / "input_0.pb").exists() else [])
        if test_sets:
            return [_sample(_test_set(d, feeds, option), feeds, d, option, batched=False) for d in test_sets]
        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGES)
        if images:
            return _images(images, feeds, path, option, preprocess)
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise OptionError(f"{option} {path}: no .npz or .npy files, images or ONNX test sets "
                              "(test_data_set_*) in it")
        return [_sample(_read(f, feeds, option), feeds, f, option, batched=False) for f in files]
    arrays = _read(path, feeds, option)
    counts = {name: len(a) for name, a in arrays.items()}
    if len(set(counts.values())) != 1:
        raise OptionError(f"{option} {path}: the inputs have different sample counts "
                          f"({', '.join(f'{n}: {c}' for n, c in counts.items())})")
    batch = {name: max(shape[0], 1) if shape else 1 for name, shape in feeds.items()}
    total = next(iter(counts.values()))
    step = next(iter(batch.values()))
    if total < step or total % step:
        raise OptionError(f"{option} {path}: {total} samples do not make whole batches of {step}")
    return [_sample({n: a[i: i + step] for n, a in arrays.items()}, feeds, path, option, batched=True)
            for i in range(0, total, step)]


def _test_set(folder: Path, feeds: dict, option: str) -> dict[str, np.ndarray]:
    """An ONNX test set's input_N.pb tensors, by the names they carry or else in the model's input order."""
    files = sorted(folder.glob("input_*.pb"), key=lambda f: int(f.stem.split("_")[-1]) if f.stem[6:].isdigit()
                   else -1)
    tensors = []
    for f in files:
        try:
            tensors.append(onnx.load_tensor(str(f)))
        except Exception as err:
            raise OptionError(f"{option} {f}: not an ONNX tensor ({first_line(err)})") from None
    if len(tensors) != len(feeds):
        raise OptionError(f"{option} {folder}: {len(tensors)} input_N.pb file(s), the model has {len(feeds)} "
                          f"input(s) ({', '.join(feeds)})")
    named = all(t.name in feeds for t in tensors) and len({t.name for t in tensors}) == len(tensors)
    names = [t.name for t in tensors] if named else list(feeds)
    return {name: onnx.numpy_helper.to_array(t) for name, t in zip(names, tensors)}


def _read(path: Path, feeds: dict, option: str) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise OptionError(f"{option} {path}: cannot read it: {err}") from None
    if isinstance(data, np.ndarray):
        if len(feeds) != 1:
            raise OptionError(f"{option} {path}: an .npy holds one array, the model has inputs "
                              f"{', '.join(feeds)}: use an .npz with one array per input")
        return {next(iter(feeds)): data}
    arrays = {name: data[name] for name in data.files}
    missing = [name for name in feeds if name not in arrays]
    if missing:
        raise OptionError(f"{option} {path}: no array for input(s) {', '.join(missing)} "
                          f"(it has {', '.join(arrays) or 'none'})")
    return {name: arrays[name] for name in feeds}


def _sample(arrays: dict[str, np.ndarray], feeds: dict, where: Path, option: str,
            batched: bool) -> dict[str, np.ndarray]:
    sample = {}
    for name, shape in feeds.items():
        a = np.asarray(arrays[name])
        if a.size != int(np.prod(shape)):
            if batched:     # samples stacked on the first axis, batch-size of them to a run
                per = "x".join(map(str, shape[1:])) or "a scalar"
                raise OptionError(f"{option} {where}: input '{name}' takes {shape[0] if shape else 1} sample(s) of "
                                  f"{per} a run; the data's samples (along its first axis) are "
                                  f"{'x'.join(map(str, a.shape[1:])) or 'scalars'}")
            raise OptionError(f"{option} {where}: input '{name}' is {'x'.join(map(str, shape))}, the data gives "
                              f"{'x'.join(map(str, a.shape))}")
        sample[name] = a.reshape(shape)
    return sample


def random_samples(feeds: dict, dtypes: dict[str, np.dtype] | None = None, count: int = 16
                   ) -> list[dict[str, np.ndarray]]:
    """--allow-random: normal noise for float inputs, small non-negative integers (as `aot run` draws them,
    valid indices and masks) for integer ones."""
    rng = np.random.default_rng(0)

    def draw(name, shape):
        dtype = np.dtype((dtypes or {}).get(name, np.float32))
        if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            return rng.integers(0, 2 if dtype == np.bool_ else INDEX_RANGE, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    return [{n: draw(n, s) for n, s in feeds.items()} for _ in range(count)]


def read_labels(path: Path, samples: list[dict[str, np.ndarray]]) -> np.ndarray:
    """--labels: one integer class per --eval sample (an .npy, or a text file of one class per line)."""
    count = sum(len(next(iter(s.values()))) if next(iter(s.values())).ndim else 1 for s in samples)
    try:
        labels = np.load(path, allow_pickle=False) if path.suffix == ".npy" else np.loadtxt(path, dtype=np.int64,
                                                                                             ndmin=1)
    except (OSError, ValueError) as err:
        raise OptionError(f"--labels {path}: cannot read it: {first_line(err)}") from None
    labels = np.asarray(labels).reshape(-1)
    if labels.size != count or not np.issubdtype(labels.dtype, np.integer):
        raise OptionError(f"--labels {path}: {labels.size} {labels.dtype} value(s), the --eval data has {count} "
                          "sample(s): give one integer class per sample")
    return labels.astype(np.int64)


@dataclass(frozen=True)
class Preprocess:
    """How images become a model's input: resized to `size` (height, width), pixels times `scale`, less
    `mean` and over `std` per channel, laid out NCHW or NHWC."""
    layout: str
    size: tuple[int, int]
    channels: int
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1 / 255

    @staticmethod
    def parse(spec: str | None, shape: tuple[int, ...]) -> Preprocess:
        """--preprocess "mean=0.485,0.456,0.406,std=0.229,0.224,0.225,layout=nchw,size=224x224,scale=1/255":
        keys with comma-separated values; what is left out follows the model's input shape (a 4-D input of 1
        or 3 channels) or the defaults (mean 0, std 1, pixels scaled to [0, 1])."""
        values: dict[str, list[str]] = {}
        key = None
        for token in (spec or "").split(","):
            name, eq, value = token.partition("=")
            if eq:
                key = name.strip()
                if key not in ("mean", "std", "layout", "size", "scale"):
                    raise OptionError(f"--preprocess: unknown key '{key}' (mean, std, layout, size, scale)")
                values[key] = [value.strip()]
            elif key is not None and token.strip():
                values[key].append(token.strip())
            elif token.strip():
                raise OptionError(f"--preprocess: '{token}' is not KEY=VALUE")
        if len(shape) != 4:
            raise OptionError(f"images need a 4-D image input, the model's is {'x'.join(map(str, shape))}")
        layout = values.get("layout", ["nchw" if shape[1] in (1, 3) else "nhwc"])[0].lower()
        if layout not in ("nchw", "nhwc"):
            raise OptionError(f"--preprocess: layout must be nchw or nhwc, not {layout}")
        channels, height, width = (shape[1], shape[2], shape[3]) if layout == "nchw" else (shape[3], shape[1],
                                                                                             shape[2])
        if channels not in (1, 3):
            raise OptionError(f"images need an input of 1 or 3 channels; in layout {layout} the model's "
                              f"{'x'.join(map(str, shape))} has {channels}")
        try:
            size = tuple(int(v) for v in values["size"][0].lower().split("x")) if "size" in values else (height,
                                                                                                          width)
            numbers = {k: tuple(float(v) for v in values[k]) for k in ("mean", "std") if k in values}
            scale = values.get("scale", ["1/255"])[0]
            factor = float(scale.split("/")[0]) / float(scale.split("/")[1]) if "/" in scale else float(scale)
        except (ValueError, ZeroDivisionError):
            raise OptionError(f"--preprocess {spec}: a value is not a number") from None
        size = size * 2 if len(size) == 1 else size
        if size != (height, width):
            raise OptionError(f"--preprocess: size {size[0]}x{size[1]}, the model's input is {height}x{width}")
        for k, v in numbers.items():
            if len(v) not in (1, channels):
                raise OptionError(f"--preprocess: {k} has {len(v)} values for {channels} channels")
        if any(v == 0 for v in numbers.get("std", ())):
            raise OptionError("--preprocess: std must not be 0")
        return Preprocess(layout, size, channels, numbers.get("mean", (0.0,)), numbers.get("std", (1.0,)), factor)

    def apply(self, image) -> np.ndarray:
        """A PIL image as one sample of the input (batch of 1)."""
        from PIL import Image

        image = image.convert("RGB" if self.channels == 3 else "L").resize(self.size[::-1], Image.BILINEAR)
        pixels = np.asarray(image, np.float32).reshape(self.size[0], self.size[1], self.channels)
        pixels = (pixels * np.float32(self.scale) - np.float32(self.mean)) / np.float32(self.std)
        return (pixels.transpose(2, 0, 1) if self.layout == "nchw" else pixels)[None].astype(np.float32)


def _images(files: list[Path], feeds: dict, folder: Path, option: str, spec: str | None) \
        -> list[dict[str, np.ndarray]]:
    """One sample per image file, preprocessed as --preprocess says (a model with one input of batch 1)."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise OptionError(f"{option} {folder}: reading images needs Pillow (pip install pillow)") from None
    if len(feeds) != 1:
        raise OptionError(f"{option} {folder}: images feed a model with one input; this one has "
                          f"{', '.join(feeds)}: give .npz files instead")
    name, shape = next(iter(feeds.items()))
    if shape[0] != 1:
        raise OptionError(f"{option} {folder}: images feed a batch of 1, the input '{name}' has batch {shape[0]}")
    if spec is None:
        raise OptionError(f"{option} {folder}: images need --preprocess (mean=..,std=..,layout=nchw|nhwc,"
                          "size=HxW,scale=1/255) as the model was trained with")
    preprocess = Preprocess.parse(spec, shape)
    samples = []
    for f in files:
        try:
            with Image.open(f) as image:
                samples.append({name: preprocess.apply(image)})
        except (OSError, UnidentifiedImageError) as err:
            raise OptionError(f"{option} {f}: not an image Pillow reads ({first_line(err)})") from None
    return samples
