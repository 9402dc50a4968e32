"""A tiny model registry: names -> (builder, fixed architecture arguments, data config).

Variants are data: each registered name is one family builder plus the keyword arguments that
define the variant (depths, groups, SE). `create_model` adds the user's overrides, which may tune a
model (e.g. `dropout_rate`) but never redefine the architecture a name stands for.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import inspect
import types
from typing import Callable

import tensorflow as tf


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
    floor(input_size / crop_fraction) and centre-crops input_size (0.875: 256 -> 224).
    mean, std: per-channel normalization on the 0-255 scale. interpolation: of that resize (bilinear
    or bicubic, antialiased as PIL does).
    """

    input_size: int
    crop_fraction: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"

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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "DataConfig":
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def replace(self, **changes) -> "DataConfig":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the data pipeline, evaluator and benchmark need to know about a model.

    input_size: training/eval resolution (square). crop_fraction: eval centre crop, e.g. 224/256.
    mean, std: per-channel normalization on the 0-255 scale. interpolation: of the eval resize.
    top1: reference ImageNet top-1 (%). params: trainable parameters with 1000 classes. gmacs: forward
    conv + dense multiply-accumulates (billions) at input_size. min_size: the smallest input side the
    architecture accepts. reference: the timm / torchvision definition whose weights it loads.
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

    @property
    def data_config(self) -> DataConfig:
        """The input tfcnn trains and evaluates this model with (its own weights)."""
        return DataConfig(self.input_size, self.crop_fraction, self.mean, self.std, self.interpolation)


@dataclasses.dataclass(frozen=True)
class _Entry:
    builder: Callable[..., tf.keras.Model]
    arch: dict
    info: ModelInfo
    weight_map: object = None  # tfcnn.models.weights.WeightMap: how reference state dicts name its weights


_REGISTRY: dict[str, _Entry] = {}


def register_model(name: str, builder: Callable[..., tf.keras.Model], info: ModelInfo, weight_map=None,
                   **arch) -> None:
    """Registers `name` as `builder(**arch, ...)`. A duplicate name is a programming error.
    weight_map: the family's WeightMap, for loading timm / torchvision state dicts."""
    if name in _REGISTRY:
        raise ValueError(f"model name already registered: {name!r}")
    if info.name != name:
        raise ValueError(f"ModelInfo.name {info.name!r} does not match the registered name {name!r}")
    _REGISTRY[name] = _Entry(builder, dict(arch), info, weight_map)


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, sorted."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern))


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown model name: {name!r}; valid names: {', '.join(list_models())}")
    return _REGISTRY[name]


def model_info(name: str) -> ModelInfo:
    """The data config and reference figures of a registered model."""
    return _entry(name).info


def model_overrides(name: str) -> list[str]:
    """The keyword arguments `create_model(name, ...)` accepts besides num_classes and input_shape."""
    entry = _entry(name)
    params = inspect.signature(entry.builder).parameters
    fixed = set(entry.arch) | {"num_classes", "input_shape", "name"}
    return sorted(p for p in params if p not in fixed)


def weight_map_of(name: str):
    """The family's WeightMap of a registered model (None: no reference weights)."""
    return _entry(name).weight_map


def create_model(name: str, num_classes: int | None = None, input_shape=None, *, weights=None, head: str = "keep",
                 data_config: DataConfig | dict | None = None, log=print, **overrides) -> tf.keras.Model:
    """Builds a registered model. Its output is float32 logits of shape (batch, num_classes).

    num_classes: default the weights' class count, else 1000.
    input_shape: (height, width, channels); None means the input size the weights (or the model) expect.
    weights: a timm / torchvision state dict (.safetensors; .pth/.pt/.bin with torch installed), a tfcnn
      checkpoint, log dir or `python -m tfcnn.convert` output, or an opened weights.Source: built with the options those weights
      need (e.g. Inception's count_include_pad) and loaded strictly (see tfcnn.models.weights).
    head: with weights, 'keep' the file's classifier or start a 'new' one (another num_classes).
    data_config: overrides (a DataConfig, or a dict of some of its fields) of what the weights expect.
    overrides: builder options such as `dropout_rate` or `zero_init_residual`; None values are dropped
      so that command-line defaults never mask the model's own defaults.

    The model carries `model.data_config` (how to feed it: its input size, and the crop, mean/std and
    interpolation its weights expect) and `model.build_options` (the builder options it was built with).
    """
    entry = _entry(name)
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ValueError(f"num_classes must be an integer >= 1, received: {num_classes!r}")
    source = None
    if weights is not None:
        from tfcnn.models.weights import Source, open_weights

        source = weights if isinstance(weights, Source) else open_weights(name, weights)
    data = source.data_config if source else entry.info.data_config
    if isinstance(data_config, DataConfig):
        data = data_config
    elif data_config:
        data = data.replace(**data_config)
    if num_classes is None:
        num_classes = source.num_classes if source and source.num_classes and head == "keep" else 1000
    input_shape = _check_input_shape(entry.info, input_shape or (data.input_size, data.input_size, 3))
    options = {**(source.options if source else {}), **{k: v for k, v in overrides.items() if v is not None}}
    allowed = model_overrides(name)
    for key in options:
        if key not in allowed:
            raise ValueError(
                f"unknown override for model {name!r}: {key!r}; valid overrides: {', '.join(allowed)}")
    # Strict loading below sets every weight (or fails): initial values drawn now would be thrown away.
    with without_initializers() if source and head == "keep" else contextlib.nullcontext():
        model = entry.builder(**entry.arch, num_classes=num_classes, input_shape=input_shape, name=name, **options)
    height, width, _ = input_shape
    model.data_config = data.replace(input_size=height) if height == width else data
    model.build_options = types.MappingProxyType(options)  # read-only, and not tracked by Keras
    if source:
        from tfcnn.models.weights import load_weights

        load_weights(model, source, head=head, log=log)
        log(f"tfcnn: {name}: loaded {source.path}; input {data.input_size} px, crop {data.crop_fraction:.4g}, "
            f"{data.interpolation}, mean/std {_fmt(data.mean)}/{_fmt(data.std)} ({source.data_origin})")
    return model


def _fmt(values):
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _check_input_shape(info: ModelInfo, input_shape) -> tuple[int, int, int]:
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

