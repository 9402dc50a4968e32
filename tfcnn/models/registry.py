"""A tiny model registry: names -> (builder, fixed architecture arguments, data config).

Variants are data: each registered name is one family builder plus the keyword arguments that
define the variant (depths, groups, SE). `build_model` adds the user's overrides, which may tune a
model (e.g. `dropout_rate`) but never redefine the architecture a name stands for. Every model it builds
is a ZooModel: the builder's functional graph, which says whether it takes 0-255 pixels and warns once
when a model that expects normalized input is called on them. The registry is the bottom of the zoo:
weights.py reads it, factory.py's create_model (builds and loads) reads both.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fnmatch
import inspect
import os
import sys
import warnings
from typing import Callable

import numpy as np
import tensorflow as tf

from tfcnn.models.layers import PixelNormalization
from tfcnn.options import EVAL_CROPS


INTERPOLATIONS = ("bilinear", "bicubic")


@contextlib.contextmanager
def without_initializers():
    """Variables created inside start as zeros instead of drawing from their initializers: for a model
    whose every weight is loaded next, or that is only counted. Drawing initial values is most of a
    build's time for large weights (VGG-16: 1.1 of 1.2 s; 20 of 60 s for the whole zoo)."""
    def zeros(next_creator, **kwargs):
        shape = kwargs.get("shape")
        if callable(kwargs.get("initial_value")) and shape is not None and shape.is_fully_defined():
            dtype = kwargs.get("dtype") or tf.float32
            kwargs["initial_value"] = lambda: tf.zeros(shape, dtype)
        return next_creator(**kwargs)

    with tf.variable_creator_scope(zeros):
        yield


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What a model's weights expect of their input, recorded with them wherever they go.

    input_size: side of the square input. crop_fraction: evaluation resizes the shorter side to
    floor(input_size / crop_fraction) and centre-crops input_size (0.875: 256 -> 224), or, with eval_crop
    'ngc', crops that fraction of each side around the centre and resizes it to input_size x input_size.
    mean, std: per-channel normalization on the 0-255 scale. interpolation: of that resize (bilinear
    or bicubic, antialiased as PIL does; plain as TF1's resize_images with 'ngc').
    eval_crop: the evaluation view (tfcnn.data.preprocessing.eval_view): 'torchvision' or 'ngc' (the NGC
    scripts'). replace(eval_crop=...) to another view without a crop_fraction takes that view's usual one
    (options.EVAL_CROPS: 0.875, 0.8).
    """

    input_size: int
    crop_fraction: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    eval_crop: str = "torchvision"

    def __post_init__(self):
        if isinstance(self.input_size, bool) or not isinstance(self.input_size, int) or self.input_size < 1:
            raise ValueError(f"input_size must be a positive integer, received: {self.input_size!r}")
        if not 0 < self.crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], received: {self.crop_fraction!r}")
        for field in ("mean", "std"):
            value = getattr(self, field)
            if len(value) != 3 or (field == "std" and min(value) <= 0):
                raise ValueError(f"{field} must be 3 numbers (std > 0) on the 0-255 scale, received: {value!r}")
            object.__setattr__(self, field, tuple(float(v) for v in value))
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, "
                             f"received: {self.interpolation!r}")
        if self.eval_crop not in EVAL_CROPS:
            raise ValueError(f"eval_crop must be one of {', '.join(EVAL_CROPS)}, received: {self.eval_crop!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "DataConfig":
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def replace(self, **changes) -> "DataConfig":
        changes = {k: v for k, v in changes.items() if v is not None}
        if changes.get("eval_crop", self.eval_crop) != self.eval_crop and "crop_fraction" not in changes:
            changes["crop_fraction"] = EVAL_CROPS.get(changes["eval_crop"])  # an unknown view: __post_init__ says
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the data pipeline, evaluator and benchmark need to know about a model.

    input_size: training/eval resolution (square). crop_fraction: eval centre crop, e.g. 224/256.
    mean, std: per-channel normalization on the 0-255 scale. interpolation: of the eval resize.
    top1: reference ImageNet top-1 (%). params: trainable parameters with 1000 classes. gmacs: forward
    conv + dense multiply-accumulates (billions) at input_size. min_size: the smallest input side the
    architecture accepts. reference: the timm / torchvision definition whose weights it loads, or the NGC
    script that builds it. eval_crop: the evaluation view (DataConfig).
    """

    name: str
    input_size: int
    crop_fraction: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    top1: float
    params: int
    gmacs: float
    min_size: int
    interpolation: str = "bilinear"
    reference: str = ""
    eval_crop: str = "torchvision"

    @property
    def data_config(self) -> DataConfig:
        """The input tfcnn trains and evaluates this model with (its own weights)."""
        return DataConfig(self.input_size, self.crop_fraction, self.mean, self.std, self.interpolation,
                          self.eval_crop)


@dataclasses.dataclass(frozen=True)
class _Entry:
    builder: Callable[..., tf.keras.Model]
    arch: dict
    info: ModelInfo
    weight_map: object = None  # tfcnn.models.weights.WeightMap: how reference state dicts name its weights
    defaults: dict = dataclasses.field(default_factory=dict)  # the variant's own values of overridable options


_REGISTRY: dict[str, _Entry] = {}


def register_model(name: str, builder: Callable[..., tf.keras.Model], info: ModelInfo, weight_map=None,
                   defaults: dict | None = None, **arch) -> None:
    """Registers `name` as `builder(**arch, ...)`. A duplicate name is a programming error.
    weight_map: the family's WeightMap, for loading timm / torchvision state dicts. defaults: the variant's
    own values of options a user may still override (NVIDIA's batch-norm epsilon on a builder whose default
    is PyTorch's), where arch fixes what the name stands for."""
    if name in _REGISTRY:
        raise ValueError(f"model name already registered: {name!r}")
    if info.name != name:
        raise ValueError(f"ModelInfo.name {info.name!r} does not match the registered name {name!r}")
    _REGISTRY[name] = _Entry(builder, dict(arch), info, weight_map, dict(defaults or {}))


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, sorted."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern))


def check_model(name, what: str = "model") -> None:
    """A ValueError unless `name` is a registered model's, with the names it may have meant (another spelling,
    a typo), or the way a model of one's own joins them."""
    if not isinstance(name, str):
        raise ValueError(f"{what} takes a registered model's name (python -m tfcnn.models lists them), received "
                         f"{type(name).__name__}: a model of your own joins them through "
                         f"tfcnn.models.registry.register_model (docs/development.md)")
    if name in _REGISTRY:
        return
    spelled = lambda text: text.lower().replace("-", "").replace("_", "")  # noqa: E731  'ResNet-18': resnet18
    meant = [n for n in list_models() if spelled(n) == spelled(name)] or difflib.get_close_matches(
        name.lower(), list_models(), n=3)
    hint = f" (did you mean {' or '.join(map(repr, meant))}?)" if meant else ""
    raise ValueError(f"unknown {what} {name!r}{hint}; valid models: {', '.join(list_models())}")


def _entry(name: str) -> _Entry:
    check_model(name)
    return _REGISTRY[name]


def model_info(name: str) -> ModelInfo:
    """The data config and reference figures of a registered model."""
    return _entry(name).info


def model_overrides(name: str) -> list[str]:
    """The keyword arguments `create_model(name, ...)` accepts besides num_classes and input_shape."""
    return sorted(override_defaults(name))


def override_defaults(name: str) -> dict:
    """{each of model_overrides(name): the value the model is built with unless it is given}."""
    entry = _entry(name)
    fixed = set(entry.arch) | {"num_classes", "input_shape", "name"}
    return {p.name: p.default for p in inspect.signature(entry.builder).parameters.values() if p.name not in fixed}


def weight_map_of(name: str):
    """The family's WeightMap of a registered model (None: no reference weights)."""
    return _entry(name).weight_map


def build_model(name: str, num_classes: int, input_shape, options: dict) -> tf.keras.Model:
    """The registered builder of `name` with its variant's arguments and `options` (builder overrides,
    each checked against model_overrides), fresh weights. create_model is the user-facing entry."""
    entry = _entry(name)
    allowed = model_overrides(name)
    for key in options:
        if key not in allowed:
            raise ValueError(f"unknown override for model {name!r}: {key!r}; valid overrides: {', '.join(allowed)}")
    input_shape = check_input_shape(entry.info, input_shape)
    model = entry.builder(**entry.arch, num_classes=num_classes, input_shape=input_shape, name=name,
                          **{**entry.defaults, **options})
    # The builder's graph as a ZooModel: the same layers and tensors, so the same weights and checkpoints.
    return ZooModel(model.inputs, model.outputs, name=model.name) if model.outputs else model


def check_input_shape(info: ModelInfo, input_shape) -> tuple[int, int, int]:
    try:
        height, width, channels = (int(d) for d in input_shape)
    except (TypeError, ValueError):
        raise ValueError(
            f"input_shape must be (height, width, channels), received: {input_shape!r}") from None
    if min(height, width) < info.min_size or channels < 1:
        raise ValueError(
            f"input_shape {tuple(input_shape)!r} is too small for {info.name}: height and width must be "
            f">= {info.min_size} and channels >= 1")
    return (height, width, channels)


class InputRangeWarning(UserWarning):
    """A zoo model that expects normalized input was called on values far outside that range: most likely
    0-255 pixels, on which it returns confident but wrong classes."""


# Normalized ImageNet pixels stay within about +-2.7 ((0 - 124) / 59 to (255 - 104) / 57); 0-255 pixels of any
# real image go far beyond. A model whose normalization leaves pixels large (std near 1) expects large values:
# then the limit is twice the largest value a 0-255 pixel normalizes to.
INPUT_RANGE_LIMIT = 10.0
_FRAMEWORK_DIRS = tuple(os.path.dirname(path) for path in (tf.__file__, sys.modules[tf.keras.Model.__module__
                                                                                     .split(".")[0]].__file__))


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class ZooModel(tf.keras.Model):
    """The class of every zoo model (build_model makes it): Keras' functional model of its builder's graph,
    plus what tfcnn tells users about its input.

    includes_preprocessing: whether it takes 0-255 pixels (a PixelNormalization layer right after the input,
    create_model(..., include_preprocessing=True)) rather than pixels normalized with data_config's mean/std.

    Without preprocessing, a call on values far outside the normalized range warns once per model
    (InputRangeWarning), naming the fix: `model(x)` with a NumPy array or an eager tensor, and
    `model.predict` / `predict_on_batch` on a NumPy array or eager tensor. Only values Python holds are
    checked: inside a tf.function (the trainer's step, predict's own loop, an export's trace) the check is
    skipped, so training pays nothing and no traced graph gains an op.
    """

    @property
    def preprocessing_layer(self) -> PixelNormalization | None:
        return next((layer for layer in self.layers if isinstance(layer, PixelNormalization)), None)

    @property
    def includes_preprocessing(self) -> bool:
        return self.preprocessing_layer is not None

    def __call__(self, *args, **kwargs):
        self._check_input_range(args[0] if args else kwargs.get("inputs"))
        return super().__call__(*args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_input_range(x)
        return super().predict(x, *args, **kwargs)

    def predict_on_batch(self, x):
        self._check_input_range(x)
        return super().predict_on_batch(x)

    def _check_input_range(self, x) -> None:
        if getattr(self, "_input_range_warned", False) or not tf.executing_eagerly():
            return
        if self.includes_preprocessing:
            self._input_range_warned = True  # 0-255 is what it takes: never check again
            return
        if isinstance(x, np.ndarray) and x.size and np.issubdtype(x.dtype, np.number):
            peak = max(float(x.max()), -float(x.min()))  # no temporary copy of a large array
        elif isinstance(x, tf.Tensor) and (x.dtype.is_floating or x.dtype.is_integer) and x.shape.num_elements():
            peak = float(tf.reduce_max(tf.abs(tf.cast(x, tf.float32))))  # eager: the only tf.Tensor here
        else:
            return  # symbolic inputs (Keras' functional API), datasets, generators: no values to check
        data = getattr(self, "data_config", None) or (_REGISTRY[self.name].info.data_config
                                                      if self.name in _REGISTRY else None)
        bound = max(max(abs(m), abs(255 - m)) / s for m, s in zip(data.mean, data.std)) if data else 0.0
        if peak <= max(INPUT_RANGE_LIMIT, 2 * bound):
            return
        self._input_range_warned = True
        warnings.warn(
            f"tfcnn: {self.name} was called on values up to {peak:.4g} in magnitude, but it expects pixels "
            f"normalized with model.data_config's mean and std (0-255 pixels normalize to within "
            f"+-{bound:.3g}): fed 0-255 pixels it returns confident but wrong classes. Build it with "
            f"tfcnn.models.create_model({self.name!r}, ..., include_preprocessing=True) to feed 0-255 pixels, "
            f"feed (pixels - model.data_config.mean) / model.data_config.std "
            f"(tfcnn.data.preprocessing.normalize_batch), or take class probabilities of 0-255 images of any "
            f"size from tfcnn.predict(model, images). Warned once per model.",
            InputRangeWarning, stacklevel=_caller_stacklevel())


def _caller_stacklevel() -> int:
    """warnings.warn's stacklevel for the first frame outside tfcnn.models, Keras and TensorFlow: the user's
    line, where the warning should point (and by which Python's filter counts repeats)."""
    frame, level = sys._getframe(2), 2  # above _check_input_range's caller
    models_dir = os.path.dirname(__file__)
    while frame is not None and frame.f_code.co_filename.startswith((models_dir, *_FRAMEWORK_DIRS)):
        frame, level = frame.f_back, level + 1
    return level
