"""Initialization schemes for a fresh zoo model: `--weight_init`, a training choice that recipes fix.

The builders give every family its own initializers (`model`); a scheme redraws the kernels (and the
biases) of any built model by layer type, so one rule covers every family:

- kaiming_fan_in / kaiming_fan_out: convolution kernels from N(0, 2 / fan) (untruncated), as PyTorch's
  kaiming_normal_(mode, nonlinearity='relu'), their biases 0; linear layers (dense layers, and the
  squeeze-excitation 1x1 convolutions over a 1x1 map, which are nn.Linear in NVIDIA's code) as PyTorch's
  nn.Linear leaves them: weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)). NVIDIA's PyTorch
  ConvNets use fan_in (models/common.py:42-54, conv_init 'fan_in'); torchvision's ResNet fan_out.
- glorot_uniform: every kernel from U(-sqrt(6 / (fan_in + fan_out)), +...), biases 0: TF1's get_variable
  default, which NGC's nvutils layers use (they pass no initializer).

Fans as PyTorch computes them from its weight layout (out, in / groups, kh, kw): fan_in = in / groups x kh
x kw, fan_out = out x kh x kw; a depthwise kernel is (channels x multiplier, 1, kh, kw). Batch norm keeps
what the builder gave it (gamma 1, beta 0; zero-gamma where the builder's zero_init_residual says so).
Draws are numpy's, from (seed, layer and weight name): the same on every rank and every run with the seed.
"""
from __future__ import annotations

import zlib

import numpy as np
import tensorflow as tf

from tfcnn.models.weights import weighted_layers
from tfcnn.options import WEIGHT_INITS

layers = tf.keras.layers


def build_initialized(build, scheme: str, seed: int):
    """build()'s model, initialized by `scheme` as initialize() does, each weight drawn once: the builder's
    initial values of what the scheme redraws are never drawn (they were most of a fresh run's build time:
    VGG-16 2.7 s, 0.2 s without them). What the scheme leaves is drawn as the builder says, with the same
    values: Keras' initializers take their seeds when they are created, not when they draw."""
    if scheme == "model":
        return build()
    deferred = {}

    def zeros(next_creator, **kwargs):
        shape, draw = kwargs.get("shape"), kwargs.get("initial_value")
        if kwargs.get("name") not in REDRAWN or not callable(draw) or shape is None or not shape.is_fully_defined():
            return next_creator(**kwargs)
        dtype = kwargs.get("dtype") or tf.float32
        variable = next_creator(**{**kwargs, "initial_value": lambda: tf.zeros(shape, dtype)})
        deferred[id(variable)] = (variable, draw)
        return variable

    with tf.variable_creator_scope(zeros):
        model = build()
    drawn = {id(v) for v in initialize(model, scheme, seed)}
    for key, (variable, draw) in deferred.items():
        if key not in drawn:
            variable.assign(draw())
    return model


REDRAWN = ("kernel", "bias", "depthwise_kernel", "pointwise_kernel")  # the names of what initialize() draws


def initialize(model, scheme: str, seed: int) -> list:
    """Redraws `model`'s kernels and biases by `scheme` (WEIGHT_INITS; 'model' leaves them); returns them."""
    if scheme not in WEIGHT_INITS:
        raise ValueError(f"--weight_init must be one of {', '.join(WEIGHT_INITS)}, received: {scheme!r}")
    if scheme == "model":
        return []
    drawn = []
    for layer in weighted_layers(model):
        if isinstance(layer, layers.SeparableConv2D):
            drawn += _initialize_separable(layer, scheme, seed)
            continue
        kernel = getattr(layer, "depthwise_kernel", None) if isinstance(layer, layers.DepthwiseConv2D) else \
            getattr(layer, "kernel", None)
        if kernel is None:
            continue
        fan_in, fan_out = fans(layer)
        bias = getattr(layer, "bias", None)
        rng = np.random.default_rng([seed % 2**32, zlib.crc32(layer.name.encode())])
        if scheme == "glorot_uniform":
            kernel.assign(_uniform(rng, kernel.shape, np.sqrt(6.0 / (fan_in + fan_out))))
            bias_value = np.zeros(bias.shape, np.float32) if bias is not None else None
        elif is_linear(layer):
            kernel.assign(_uniform(rng, kernel.shape, 1.0 / np.sqrt(fan_in)))
            bias_value = _uniform(rng, bias.shape, 1.0 / np.sqrt(fan_in)) if bias is not None else None
        else:
            fan = fan_in if scheme == "kaiming_fan_in" else fan_out
            normal = rng.standard_normal(kernel.shape, dtype=np.float32)
            normal *= np.float32(np.sqrt(2.0 / fan))
            kernel.assign(normal)
            bias_value = np.zeros(bias.shape, np.float32) if bias is not None else None
        if bias is not None:
            bias.assign(bias_value)
        drawn += [kernel] + ([bias] if bias is not None else [])
    return drawn


def _initialize_separable(layer, scheme, seed) -> list:
    """A separable convolution (NGC's Xception; PyTorch has none): glorot_uniform with the fans TF1's
    separable_conv2d draws its two kernels with (depthwise (kh, kw, in, multiplier): kh x kw x in and
    kh x kw x multiplier; pointwise: in and out); the kaiming schemes take the depthwise kernel as a depthwise
    convolution's and the pointwise as a 1x1 convolution's. Biases 0."""
    rng = np.random.default_rng([seed % 2**32, zlib.crc32(layer.name.encode())])
    kh, kw, channels, multiplier = layer.depthwise_kernel.shape
    fans_of = {"depthwise_kernel": (kh * kw * channels, kh * kw * multiplier) if scheme == "glorot_uniform" else
               (kh * kw, kh * kw * channels * multiplier), "pointwise_kernel": layer.pointwise_kernel.shape[-2:]}
    for attribute, (fan_in, fan_out) in fans_of.items():
        kernel = getattr(layer, attribute)
        if scheme == "glorot_uniform":
            kernel.assign(_uniform(rng, kernel.shape, np.sqrt(6.0 / (fan_in + fan_out))))
        else:
            fan = fan_in if scheme == "kaiming_fan_in" else fan_out
            kernel.assign(rng.standard_normal(kernel.shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan)))
    if layer.bias is not None:
        layer.bias.assign(np.zeros(layer.bias.shape, np.float32))
    return [layer.depthwise_kernel, layer.pointwise_kernel] + ([layer.bias] if layer.bias is not None else [])


def _uniform(rng, shape, bound) -> np.ndarray:
    """float32 numbers uniform in [-bound, bound), drawn in float32 (VGG's largest kernel holds 103 M)."""
    values = rng.random(shape, dtype=np.float32)
    values *= np.float32(2 * bound)
    values -= np.float32(bound)
    return values


def fans(layer) -> tuple[int, int]:
    """(fan_in, fan_out) of a conv, depthwise conv or dense layer, as PyTorch counts them."""
    if isinstance(layer, layers.DepthwiseConv2D):
        kh, kw, channels, multiplier = layer.depthwise_kernel.shape
        return kh * kw, channels * multiplier * kh * kw
    shape = layer.kernel.shape  # conv (kh, kw, in / groups, out), dense (in, out)
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def is_linear(layer) -> bool:
    """A dense layer, or a biased 1x1 convolution over a 1x1 map (squeeze-excitation's), which PyTorch
    models write as nn.Linear."""
    if isinstance(layer, layers.Dense):
        return True
    if type(layer) is not layers.Conv2D or layer.bias is None or tuple(layer.kernel_size) != (1, 1):
        return False
    return tuple(layer.input.shape[1:3]) == (1, 1)
