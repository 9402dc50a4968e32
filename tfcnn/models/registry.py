"""A tiny model registry: names -> (builder, fixed architecture arguments, data config).

Variants are data: each registered name is one family builder plus the keyword arguments that
define the variant (depths, groups, SE). `build_model` adds the user's overrides, which may tune a
model (e.g. `dropout_rate`) but never redefine the architecture a name stands for. The registry is the
bottom of the zoo: weights.py reads it, factory.py's create_model (builds and loads) reads both.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import inspect
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


def build_model(name: str, num_classes: int, input_shape, options: dict) -> tf.keras.Model:
    """The registered builder of `name` with its variant's arguments and `options` (builder overrides,
    each checked against model_overrides), fresh weights. create_model is the user-facing entry."""
    entry = _entry(name)
    allowed = model_overrides(name)
    for key in options:
        if key not in allowed:
            raise ValueError(f"unknown override for model {name!r}: {key!r}; valid overrides: {', '.join(allowed)}")
    input_shape = check_input_shape(entry.info, input_shape)
    return entry.builder(**entry.arch, num_classes=num_classes, input_shape=input_shape, name=name, **options)


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
