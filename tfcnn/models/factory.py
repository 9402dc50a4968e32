"""create_model: a registered model built with the user's options, optionally taking 0-255 pixels and loaded
with weights.

Above both the registry (what each name is) and weights.py (reading and loading state dicts), which
import neither this module nor each other's users.
"""
from __future__ import annotations

import contextlib
import types

import tensorflow as tf

from tfcnn.models.layers import PixelNormalization
from tfcnn.models.registry import DataConfig, ZooModel, _entry, build_model, without_initializers
from tfcnn.models.weights import Source, load_weights, open_weights

PREPROCESSING_LAYER = "pixel_normalization"


def create_model(name: str, num_classes: int | None = None, input_shape=None, *, weights=None, head: str = "keep",
                 data_config: DataConfig | dict | None = None, include_preprocessing: bool = False, log=print,
                 **overrides) -> tf.keras.Model:
    """Builds a registered model. Its output is float32 logits of shape (batch, num_classes).

    num_classes: default the weights' class count, else 1000.
    input_shape: (height, width, channels); None means the input size the weights (or the model) expect.
    weights: a timm / torchvision state dict (.safetensors; .pth/.pt/.bin with torch installed), a tfcnn
      checkpoint, log dir or `python -m tfcnn.convert` output, or an opened weights.Source: built with the
      options those weights need (e.g. Inception's count_include_pad) and loaded strictly (see
      tfcnn.models.weights).
    head: with weights, 'keep' the file's classifier or start a 'new' one (another num_classes).
    data_config: overrides (a DataConfig, or a dict of some of its fields) of what the weights expect.
    include_preprocessing: the model takes 0-255 RGB pixels (uint8 or float, [N, H, W, 3] at its input size,
      e.g. from PIL or tf.io.decode_jpeg) and normalizes them itself with its data_config's mean and std, as
      Keras' applications with include_preprocessing do; its first layer after the input is then a
      PixelNormalization (`model.includes_preprocessing` is True). Without it (the default, what tfcnn's
      trainer feeds) the model expects (pixels - mean) / std, and warns once when called on values far
      outside that range. Either way the weights, checkpoints and exports are the same: the normalization
      holds no weights, and tfcnn's exporters always normalize once (their SavedModel and ONNX files take
      0-255 pixels). Resizing and cropping stay outside (data_config says how).
    overrides: builder options such as `dropout_rate` or `zero_init_residual`; None values are dropped
      so that command-line defaults never mask the model's own defaults.

    The model carries `model.data_config` (how to feed it: its input size, and the crop, mean/std and
    interpolation its weights expect) and `model.build_options` (the builder options it was built with).
    """
    entry = _entry(name)
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ValueError(f"num_classes must be an integer >= 1, received: {num_classes!r}")
    if not isinstance(include_preprocessing, bool):
        raise ValueError(f"include_preprocessing must be True or False, received: {include_preprocessing!r}")
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
    loaded = source is not None and head == "keep"
    # With preprocessing, the builder's model is only read for its config (see with_preprocessing).
    with without_initializers() if loaded or include_preprocessing else contextlib.nullcontext():
        model = build_model(name, num_classes, input_shape or (data.input_size, data.input_size, 3), options)
    if include_preprocessing:
        with without_initializers() if loaded else contextlib.nullcontext():
            model = with_preprocessing(model, data.mean, data.std)
    height, width, _ = model.input_shape[1:]
    model.data_config = data.replace(input_size=height) if height == width else data
    model.build_options = types.MappingProxyType(options)  # read-only, and not tracked by Keras
    if source:
        load_weights(model, source, head=head, log=log)
        log(f"tfcnn: {name}: loaded {source.path}; input {data.input_size} px, crop {data.crop_fraction:.4g}, "
            f"{data.interpolation}, mean/std {_fmt(data.mean)}/{_fmt(data.std)} ({source.data_origin})")
    return model


def with_preprocessing(model: tf.keras.Model, mean, std) -> ZooModel:
    """A new model (fresh variables) of `model`'s graph with PixelNormalization(mean, std) between its input
    and the layers that read it.

    One flat functional graph rather than a wrapper around the network: its layers, weights and their order
    are the plain model's plus one layer without weights, so everything that walks a zoo model (weight
    loading, reference_names, get_layer, summary, count_macs) sees the same network, and Keras' checkpoints
    number only layers with weights by their own index (`layer_with_weights-N`): a plain model's checkpoints
    restore into it and its into a plain model. A functional graph cannot take a new layer once made
    (calling the builder's layers again would give each a second node), so the layer goes into the builder's
    config, which is rebuilt: about the cost of a second build without initial values.
    """
    config = model.get_config()
    (input_name, _, _), = config["input_layers"]
    layer = PixelNormalization(mean, std, name=PREPROCESSING_LAYER)
    for spec in config["layers"]:
        spec["inbound_nodes"] = _redirect(spec["inbound_nodes"], input_name, layer.name)
    position = next(i for i, spec in enumerate(config["layers"]) if spec["name"] == input_name) + 1
    config["layers"].insert(position, {"class_name": tf.keras.utils.get_registered_name(PixelNormalization),
                                       "config": layer.get_config(), "name": layer.name,
                                       "inbound_nodes": [[[input_name, 0, 0, {}]]]})
    return ZooModel.from_config(config)


def _redirect(nodes, old: str, new: str):
    """Inbound-node specs with every reference to layer `old`'s output ([name, node, tensor(, kwargs)]) made
    to `new`'s."""
    if isinstance(nodes, dict):
        return {key: _redirect(value, old, new) for key, value in nodes.items()}
    if isinstance(nodes, (list, tuple)):
        if len(nodes) in (3, 4) and nodes[0] == old and all(isinstance(i, int) for i in nodes[1:3]):
            return [new, *nodes[1:]]
        return [_redirect(item, old, new) for item in nodes]
    return nodes


def _fmt(values):
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"
