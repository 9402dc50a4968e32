"""Xception (Chollet, "Xception: Deep Learning with Depthwise Separable Convolutions",
https://arxiv.org/abs/1610.02357).

timm's `legacy_xception` (Cadene's port of the Keras weights): two unpadded 3x3 stem convs, then 12 residual
blocks of separable convolutions (a 3x3 depthwise conv, then a 1x1 pointwise conv, both bias-free, then
batch norm, eps 1e-5), each preceded by a ReLU, except the first of block 1 (its input is already
rectified). Blocks that change width or resolution end with a 3x3 stride-2 max pool (padding 1) and
project their shortcut with a strided 1x1 conv + batch norm; the others add their input. A block's sum is
not rectified: the next block's leading ReLU rectifies the residual branch only (the shortcut takes the
unrectified sum). Block 12's sum goes straight into the exit flow: two separable convs (1536, 2048), each
with batch norm and ReLU.

Layer names follow Keras' Xception (`block2_sepconv1_dw`); `reference_module` maps them to timm's
(`block2.rep.1.conv1`).
"""
from __future__ import annotations

import re

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn, conv_init
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import WeightMap

layers = tf.keras.layers

# (output channels, separable convs, stride, grow_first) of blocks 1-12; block 1 starts without a ReLU.
BLOCKS = ([(128, 2, 2, True), (256, 2, 2, True), (728, 2, 2, True)]
          + [(728, 3, 1, True)] * 8
          + [(1024, 2, 2, False)])


def separable_conv(x, filters, name, bn):
    """3x3 depthwise (stride 1, symmetric 'same' padding) -> 1x1 pointwise -> batch norm."""
    x = layers.DepthwiseConv2D(3, padding="same", use_bias=False, depthwise_initializer=conv_init(),
                               name=f"{name}_dw")(x)
    x = layers.Conv2D(filters, 1, use_bias=False, kernel_initializer=conv_init(), name=f"{name}_pw")(x)
    return layers.BatchNormalization(**bn, name=f"{name}_bn")(x)


def max_pool_3x3_s2(x, name):
    """PyTorch's MaxPool2d(3, stride=2, padding=1): windows start one pixel before the edge and padding never wins
    (it is -inf). Keras' 'same' stride-2 pooling pads only at the bottom/right for even inputs, and zero padding
    would beat the negative pre-activation values pooled here, so: a stride-1 3x3 'same' max pool (odd kernel at
    stride 1: exactly one pixel each side, ignored by the max) gives the max of every window centred on a pixel,
    and keeping every second row and column from the first (a 1x1 stride-2 pool) keeps the windows centred on
    0, 2, 4 ...: PyTorch's windows, with its output size floor((n - 1) / 2) + 1."""
    x = layers.MaxPool2D(3, strides=1, padding="same", name=f"{name}_3x3")(x)
    return layers.MaxPool2D(1, strides=2, name=name)(x)


def xception_block(x, filters, reps, stride, grow_first, name, bn, start_with_relu=True):
    in_channels = x.shape[-1]
    shortcut = x
    if filters != in_channels or stride != 1:
        shortcut = conv_bn(x, filters, 1, strides=stride, padding="valid", activation=False, name=f"{name}_skip",
                           bn_epsilon=bn["epsilon"], bn_momentum=bn["momentum"])
    for i in range(1, reps + 1):
        if grow_first:
            width = filters
        else:
            width = in_channels if i < reps else filters
        if i > 1 or start_with_relu:
            x = layers.ReLU(name=f"{name}_sepconv{i}_act")(x)
        x = separable_conv(x, width, f"{name}_sepconv{i}", bn)
    if stride != 1:
        x = max_pool_3x3_s2(x, f"{name}_pool")
    return layers.Add(name=f"{name}_add")([x, shortcut])


def xception(*, num_classes, input_shape, name, dropout_rate=0.0, bn_epsilon=1e-5, bn_momentum=0.9):
    """The Xception builder (299x299 inputs; anything from 7x7 up works).
    dropout_rate: before the classifier (timm's default 0; the paper trained with 0.5)."""
    bn = dict(epsilon=bn_epsilon, momentum=bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv_bn(inputs, 32, 3, strides=2, padding="valid", name="conv1", bn_epsilon=bn_epsilon,
                bn_momentum=bn_momentum)
    x = conv_bn(x, 64, 3, padding="valid", name="conv2", bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    for index, (filters, reps, stride, grow_first) in enumerate(BLOCKS, start=1):
        x = xception_block(x, filters, reps, stride, grow_first, f"block{index}", bn, start_with_relu=index > 1)
    # 299: 147x147x64 stem, 74, 37, 19 after blocks 1-3, 10x10x1024 after block 12.
    x = layers.ReLU(name="conv3_relu")(separable_conv(x, 1536, "conv3", bn))
    x = layers.ReLU(name="conv4_relu")(separable_conv(x, 2048, "conv4", bn))
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_STEM = {"conv1_conv": "conv1", "conv1_bn": "bn1", "conv2_conv": "conv2", "conv2_bn": "bn2", "head_fc": "fc"}
_PARTS = {"dw": "conv1", "pw": "pointwise"}


def reference_module(layer_name):
    """tfcnn layer -> timm module: block2_sepconv1_dw -> block2.rep.1.conv1, block2_sepconv1_bn -> block2.rep.2,
    block1_sepconv1_pw -> block1.rep.0.pointwise, block3_skip_bn -> block3.skipbn, conv3_dw -> conv3.conv1."""
    if layer_name in _STEM:
        return _STEM[layer_name]
    match = re.fullmatch(r"conv([34])_(dw|pw|bn)", layer_name)
    if match:
        return f"bn{match[1]}" if match[2] == "bn" else f"conv{match[1]}.{_PARTS[match[2]]}"
    match = re.fullmatch(r"block(\d+)_skip_(conv|bn)", layer_name)
    if match:
        return f"block{match[1]}.{'skip' if match[2] == 'conv' else 'skipbn'}"
    match = re.fullmatch(r"block(\d+)_sepconv(\d)_(dw|pw|bn)", layer_name)
    if not match:
        return None
    # `rep` is [ReLU, SeparableConv2d, BatchNorm2d] per conv; block 1 drops its leading ReLU.
    index = 3 * (int(match[2]) - 1) + (0 if match[1] == "1" else 1)
    return f"block{match[1]}.rep.{index + 1}" if match[3] == "bn" else f"block{match[1]}.rep.{index}.{_PARTS[match[3]]}"


# timm's legacy_xception.tf_in1k pretrained cfg: 299 px, crop 0.8975, bicubic, inputs scaled to [-1, 1].
TIMM_DATA = DataConfig(299, 0.8975, (127.5, 127.5, 127.5), (127.5, 127.5, 127.5), "bicubic")

register_model(
    "xception", xception,
    # min_size 7: the unpadded 3x3 stride-2 conv and 3x3 conv need 7 -> 3 -> 1; every later layer is padded
    # (or a 1x1 / padded pool at stride 2), so a 1x1 map stays 1x1 through the blocks.
    ModelInfo(name="xception", input_size=299, crop_fraction=0.8975, mean=(127.5, 127.5, 127.5),
              std=(127.5, 127.5, 127.5), top1=79.04, params=22_855_952, gmacs=8.357, min_size=7,
              interpolation="bicubic", reference="timm legacy_xception"),
    WeightMap(reference_module, "timm legacy_xception", classifier="fc", data_config=TIMM_DATA))
