"""create_model: a registered model built with the user's options and, optionally, loaded with weights.

Above both the registry (what each name is) and weights.py (reading and loading state dicts), which
import neither this module nor each other's users.
"""
from __future__ import annotations

import contextlib
import types

import tensorflow as tf

from tfcnn.models.registry import DataConfig, _entry, build_model, without_initializers
from tfcnn.models.weights import Source, load_weights, open_weights


def create_model(name: str, num_classes: int | None = None, input_shape=None, *, weights=None, head: str = "keep",
                 data_config: DataConfig | dict | None = None, log=print, **overrides) -> tf.keras.Model:
    """Builds a registered model. Its output is float32 logits of shape (batch, num_classes).

    num_classes: default the weights' class count, else 1000.
    input_shape: (height, width, channels); None means the input size the weights (or the model) expect.
    weights: a timm / torchvision state dict (.safetensors; .pth/.pt/.bin with torch installed), a tfcnn
      checkpoint, log dir or `python -m tfcnn.convert` output, or an opened weights.Source: built with the
      options those weights need (e.g. Inception's count_include_pad) and loaded strictly (see
      tfcnn.models.weights).
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
        source = weights if isinstance(weights, Source) else open_weights(name, weights)
    data = source.data_config if source else entry.info.data_config
    if isinstance(data_config, DataConfig):
        data = data_config
    elif data_config:
        data = data.replace(**data_config)
    if num_classes is None:
        num_classes = source.num_classes if source and source.num_classes and head == "keep" else 1000
    options = {**(source.options if source else {}), **{k: v for k, v in overrides.items() if v is not None}}
    # Strict loading below sets every weight (or fails): initial values drawn now would be thrown away.
    with without_initializers() if source and head == "keep" else contextlib.nullcontext():
        model = build_model(name, num_classes, input_shape or (data.input_size, data.input_size, 3), options)
    height, width, _ = model.input_shape[1:]
    model.data_config = data.replace(input_size=height) if height == width else data
    model.build_options = types.MappingProxyType(options)  # read-only, and not tracked by Keras
    if source:
        load_weights(model, source, head=head, log=log)
        log(f"tfcnn: {name}: loaded {source.path}; input {data.input_size} px, crop {data.crop_fraction:.4g}, "
            f"{data.interpolation}, mean/std {_fmt(data.mean)}/{_fmt(data.std)} ({source.data_origin})")
    return model


def _fmt(values):
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"
