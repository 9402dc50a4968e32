"""Inception-v4 (Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of Residual Connections
on Learning", https://arxiv.org/abs/1602.07261).

timm's `inception_v4` (the TF-slim network, ported with its weights): every convolution is bias-free and
followed by batch norm (eps 1e-3) and ReLU; convolutions are unpadded unless a module pads to keep the
resolution (3x3, 1x7, 7x1, 1x3, 3x1 at stride 1), so every strided convolution and max pool is 'valid'.
The 3x3 average pools inside the Inception-A/B/C modules pad by one pixel and average over the real
pixels only (timm passes count_include_pad=False), which is what Keras' 'same' average pooling does.

Layer names follow TF-slim's modules (`conv1a`, `mixed3a` ... `mixed7d`) and, inside a module, the
reference's branch names (`mixed5b_branch1_0_conv` is `features.6.branch1.0.conv`).
The stem convolutions and the Reduction-A module are shared with Inception-ResNet-v2.
"""
from __future__ import annotations

import functools
import re

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import WeightMap

layers = tf.keras.layers

# timm's IMAGENET_INCEPTION_MEAN / _STD (0.5, 0.5, 0.5) on the 0-255 scale: inputs in [-1, 1].
INCEPTION_MEAN = (127.5, 127.5, 127.5)
INCEPTION_STD = (127.5, 127.5, 127.5)


def inception_conv(bn_epsilon=1e-3, bn_momentum=0.9):
    """Conv -> BN -> ReLU, unpadded unless asked (padding='same'), as timm's conv_block for these nets."""
    return functools.partial(conv_bn, padding="valid", bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)


def stem(x, conv):
    """The first three convolutions of Inception-v4 and Inception-ResNet-v2: 299 -> 147x147x64."""
    x = conv(x, 32, 3, strides=2, name="conv1a")
    x = conv(x, 32, 3, name="conv2a")
    return conv(x, 64, 3, padding="same", name="conv2b")


def _max_pool(x, name):
    return layers.MaxPool2D(3, strides=2, name=name)(x)  # unpadded, so no padding value matters


def pool_branch(x, filters, name, conv):
    """3x3 average pool (stride 1, one pixel of padding that is not counted: count_include_pad=False, as
    Keras' 'same' average pooling divides by the real pixels of each window) -> 1x1 conv."""
    y = layers.AveragePooling2D(3, strides=1, padding="same", name=f"{name}_pool")(x)
    return conv(y, filters, 1, name=f"{name}_1")


def reduction_a(x, name, conv, k, l, m, n):
    """35x35 -> 17x17 (the paper's Reduction-A with filter banks k, l, m, n): strided 3x3 (n), 1x1 (k) ->
    3x3 (l) -> strided 3x3 (m), and a max pool -> n + m + input channels."""
    b0 = conv(x, n, 3, strides=2, name=f"{name}_branch0")
    b1 = conv(x, k, 1, name=f"{name}_branch1_0")
    b1 = conv(b1, l, 3, padding="same", name=f"{name}_branch1_1")
    b1 = conv(b1, m, 3, strides=2, name=f"{name}_branch1_2")
    return layers.Concatenate(name=name)([b0, b1, _max_pool(x, f"{name}_branch2_pool")])


def _mixed_3a(x, name, conv):
    pool = _max_pool(x, f"{name}_pool")
    return layers.Concatenate(name=name)([pool, conv(x, 96, 3, strides=2, name=f"{name}_conv")])


def _mixed_4a(x, name, conv):
    b0 = conv(conv(x, 64, 1, name=f"{name}_branch0_0"), 96, 3, name=f"{name}_branch0_1")
    b1 = conv(x, 64, 1, name=f"{name}_branch1_0")
    b1 = conv(b1, 64, (1, 7), padding="same", name=f"{name}_branch1_1")
    b1 = conv(b1, 64, (7, 1), padding="same", name=f"{name}_branch1_2")
    b1 = conv(b1, 96, 3, name=f"{name}_branch1_3")
    return layers.Concatenate(name=name)([b0, b1])


def _mixed_5a(x, name, conv):
    b0 = conv(x, 192, 3, strides=2, name=f"{name}_conv")
    return layers.Concatenate(name=name)([b0, _max_pool(x, f"{name}_pool")])


def inception_a(x, name, conv):
    """35x35x384 module: 1x1, 1x1 -> 3x3, 1x1 -> 3x3 -> 3x3 and pooled branches of 96 channels each."""
    b0 = conv(x, 96, 1, name=f"{name}_branch0")
    b1 = conv(conv(x, 64, 1, name=f"{name}_branch1_0"), 96, 3, padding="same", name=f"{name}_branch1_1")
    b2 = conv(x, 64, 1, name=f"{name}_branch2_0")
    b2 = conv(b2, 96, 3, padding="same", name=f"{name}_branch2_1")
    b2 = conv(b2, 96, 3, padding="same", name=f"{name}_branch2_2")
    return layers.Concatenate(name=name)([b0, b1, b2, pool_branch(x, 96, f"{name}_branch3", conv)])


def inception_b(x, name, conv):
    """17x17x1024 module with factorized 7x7 convolutions -> 384 + 256 + 256 + 128 channels."""
    same = functools.partial(conv, padding="same")
    b0 = conv(x, 384, 1, name=f"{name}_branch0")
    b1 = conv(x, 192, 1, name=f"{name}_branch1_0")
    b1 = same(same(b1, 224, (1, 7), name=f"{name}_branch1_1"), 256, (7, 1), name=f"{name}_branch1_2")
    b2 = conv(x, 192, 1, name=f"{name}_branch2_0")
    for i, (filters, kernel) in enumerate([(192, (7, 1)), (224, (1, 7)), (224, (7, 1)), (256, (1, 7))], start=1):
        b2 = same(b2, filters, kernel, name=f"{name}_branch2_{i}")
    return layers.Concatenate(name=name)([b0, b1, b2, pool_branch(x, 128, f"{name}_branch3", conv)])


def reduction_b(x, name, conv):
    """17x17 -> 8x8: 1x1 -> strided 3x3, 1x1 -> 1x7 -> 7x1 -> strided 3x3, max pool -> 192 + 320 + 1024."""
    b0 = conv(conv(x, 192, 1, name=f"{name}_branch0_0"), 192, 3, strides=2, name=f"{name}_branch0_1")
    b1 = conv(x, 256, 1, name=f"{name}_branch1_0")
    b1 = conv(b1, 256, (1, 7), padding="same", name=f"{name}_branch1_1")
    b1 = conv(b1, 320, (7, 1), padding="same", name=f"{name}_branch1_2")
    b1 = conv(b1, 320, 3, strides=2, name=f"{name}_branch1_3")
    return layers.Concatenate(name=name)([b0, b1, _max_pool(x, f"{name}_branch2_pool")])


def inception_c(x, name, conv):
    """8x8x1536 module with expanded 1x3 / 3x1 filter banks -> 256 * 6 channels. Its branches are
    attributes in the reference (branch1_1a ...), not sequences, and keep those names here."""
    same = functools.partial(conv, padding="same")

    def split(y, prefix):
        return [same(y, 256, (1, 3), name=f"{prefix}a"), same(y, 256, (3, 1), name=f"{prefix}b")]

    b0 = conv(x, 256, 1, name=f"{name}_branch0")
    b1 = split(conv(x, 384, 1, name=f"{name}_branch1_0"), f"{name}_branch1_1")
    b2 = conv(x, 384, 1, name=f"{name}_branch2_0")
    b2 = same(same(b2, 448, (3, 1), name=f"{name}_branch2_1"), 512, (1, 3), name=f"{name}_branch2_2")
    b2 = split(b2, f"{name}_branch2_3")
    return layers.Concatenate(name=name)([b0, *b1, *b2, pool_branch(x, 256, f"{name}_branch3", conv)])


# (tfcnn module name, module builder), in the order of timm's `features` Sequential.
_UNITS = ([("conv1a", None), ("conv2a", None), ("conv2b", None), ("mixed3a", _mixed_3a), ("mixed4a", _mixed_4a),
           ("mixed5a", _mixed_5a)]
          + [(f"mixed5{c}", inception_a) for c in "bcde"]
          + [("mixed6a", functools.partial(reduction_a, k=192, l=224, m=256, n=384))]
          + [(f"mixed6{c}", inception_b) for c in "bcdefgh"]
          + [("mixed7a", reduction_b)]
          + [(f"mixed7{c}", inception_c) for c in "bcd"])
_FEATURE_INDEX = {unit: index for index, (unit, _) in enumerate(_UNITS)}


def inception_v4(*, num_classes, input_shape, name, dropout_rate=0.2, bn_epsilon=1e-3, bn_momentum=0.9):
    """The Inception-v4 builder (299x299 inputs; 75x75 is the smallest that works).
    dropout_rate: before the classifier; 0.2 as TF-slim trained it (timm's default is 0)."""
    conv = inception_conv(bn_epsilon, bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = stem(inputs, conv)
    for unit, block in _UNITS[3:]:
        x = block(x, unit, conv)
    # 299: 35x35x384 after mixed5a, 17x17x1024 after mixed6a, 8x8x1536 after mixed7a.
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_LAYER = re.compile(r"(conv\d[ab]|mixed\d[a-h])(?:_(\w+?))?_(conv|bn)")


def reference_module(layer_name):
    """tfcnn layer -> timm module: mixed5b_branch1_0_conv -> features.6.branch1.0.conv,
    mixed7b_branch1_1a_bn -> features.19.branch1_1a.bn, conv2b_conv -> features.2.conv."""
    if layer_name == "head_fc":
        return "last_linear"
    match = _LAYER.fullmatch(layer_name)
    if not match or match[1] not in _FEATURE_INDEX:
        return None
    unit, path, part = match[1], match[2], match[3]
    if path:
        # branchN_M is item M of the Sequential branchN; Inception-C's other branches are attributes.
        is_c = unit.startswith("mixed7") and unit != "mixed7a"
        if not is_c or path == "branch3_1":
            path = re.sub(r"^(branch\d)_(\d)$", r"\1.\2", path)
        return f"features.{_FEATURE_INDEX[unit]}.{path}.{part}"
    return f"features.{_FEATURE_INDEX[unit]}.{part}"


# timm's inception_v4.tf_in1k pretrained cfg: 299 px, crop 0.875, bicubic, inputs scaled to [-1, 1].
TIMM_DATA = DataConfig(299, 0.875, INCEPTION_MEAN, INCEPTION_STD, "bicubic")

register_model(
    "inception_v4", inception_v4,
    # min_size 75: the unpadded stride-2 stem conv, 3x3 conv, stride-2 module (mixed3a), 3x3 convs (mixed4a),
    # then three stride-2 reductions (mixed5a, mixed6a, mixed7a) each need 3x3 inputs: 75 -> 37 -> 35 -> 17
    # -> 15 -> 7 -> 3 -> 1; 74 leaves the last reduction a 2x2 input.
    ModelInfo(name="inception_v4", input_size=299, crop_fraction=0.875, mean=INCEPTION_MEAN, std=INCEPTION_STD,
              top1=80.156, params=42_679_816, gmacs=12.254, min_size=75, interpolation="bicubic",
              reference="timm inception_v4"),
    WeightMap(reference_module, "timm inception_v4", classifier="last_linear", data_config=TIMM_DATA))
