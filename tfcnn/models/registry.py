"""A tiny model registry: names -> (builder, fixed architecture arguments, data config).

Variants are data: each registered name is one family builder plus the keyword arguments that
define the variant (depths, groups, SE). `create_model` adds the user's overrides, which may tune a
model (e.g. `dropout_rate`) but never redefine the architecture a name stands for.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import inspect
from typing import Callable

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the data pipeline, evaluator and benchmark need to know about a model.

    input_size: training/eval resolution (square). crop_fraction: eval centre crop, e.g. 224/256.
    mean, std: per-channel normalization on the 0-255 scale. top1: reference ImageNet top-1 (%).
    params: trainable parameters with 1000 classes. gmacs: forward conv + dense multiply-accumulates
    (billions) at input_size. min_size: the smallest input side the architecture accepts.
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


@dataclasses.dataclass(frozen=True)
class _Entry:
    builder: Callable[..., tf.keras.Model]
    arch: dict
    info: ModelInfo


_REGISTRY: dict[str, _Entry] = {}


def register_model(name: str, builder: Callable[..., tf.keras.Model], info: ModelInfo, **arch) -> None:
    """Registers `name` as `builder(**arch, ...)`. A duplicate name is a programming error."""
    if name in _REGISTRY:
        raise ValueError(f"model name already registered: {name!r}")
    if info.name != name:
        raise ValueError(f"ModelInfo.name {info.name!r} does not match the registered name {name!r}")
    _REGISTRY[name] = _Entry(builder, dict(arch), info)


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


def create_model(name: str, num_classes: int = 1000, input_shape=None, **overrides) -> tf.keras.Model:
    """Builds a registered model. Its output is float32 logits of shape (batch, num_classes).

    input_shape: (height, width, channels); None means (input_size, input_size, 3) from model_info.
    overrides: builder options such as `dropout_rate` or `zero_init_residual`; None values are dropped
    so that command-line defaults never mask the model's own defaults.
    """
    entry = _entry(name)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be an integer >= 1, received: {num_classes!r}")
    input_shape = _check_input_shape(entry.info, input_shape)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    allowed = model_overrides(name)
    for key in overrides:
        if key not in allowed:
            raise ValueError(
                f"unknown override for model {name!r}: {key!r}; valid overrides: {', '.join(allowed)}")
    return entry.builder(**entry.arch, num_classes=num_classes, input_shape=input_shape, name=name, **overrides)


def _check_input_shape(info: ModelInfo, input_shape) -> tuple[int, int, int]:
    if input_shape is None:
        return (info.input_size, info.input_size, 3)
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

