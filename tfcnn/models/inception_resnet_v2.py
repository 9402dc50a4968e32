"""Inception-ResNet-v2 (Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of Residual
Connections on Learning", https://arxiv.org/abs/1602.07261).

timm's `inception_resnet_v2` (the TF-slim network, ported with its weights). Convolutions as in
Inception-v4 (bias-free, batch norm eps 1e-3, ReLU, unpadded unless a module keeps the resolution), whose
stem convolutions and Reduction-A module (here with filter banks 256, 256, 384, 384) it shares. The residual
blocks concatenate their branches, project them back with a 1x1 convolution (with bias, no norm), scale that
and add it to the input: 10 Block35 (35x35, scale 0.17), 20 Block17 (17x17, 0.10), 9 Block8 (8x8, 0.20),
each followed by a ReLU, and a last Block8 with scale 1.0 and no ReLU before the final 1x1 conv.

Layer names follow TF-slim (`conv1a`, `mixed5b`, `block35_1` ... `block8_10`, `conv7b`) and, inside a
module, the reference's branch names (`block35_1_branch2_1_conv` is `repeat.0.branch2.1.conv`).
"""
from __future__ import annotations

import re

import tensorflow as tf

from tfcnn.models.inception_v4 import (INCEPTION_MEAN, INCEPTION_STD, inception_conv, pool_branch,
                                       reduction_a, stem)
from tfcnn.models.layers import classifier_head, conv_init
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import WeightMap

layers = tf.keras.layers

# (block, repeats, residual scale) of the three residual stages; the last Block8 is added separately.
BLOCK35, BLOCK17, BLOCK8 = ("block35", 10, 0.17), ("block17", 20, 0.10), ("block8", 9, 0.20)


def _mixed_5b(x, name, conv):
    """35x35 Inception-A style module: 192 -> 96 + 64 + 96 + 64 = 320 channels."""
    b0 = conv(x, 96, 1, name=f"{name}_branch0")
    b1 = conv(conv(x, 48, 1, name=f"{name}_branch1_0"), 64, 5, padding="same", name=f"{name}_branch1_1")
    b2 = conv(x, 64, 1, name=f"{name}_branch2_0")
    b2 = conv(b2, 96, 3, padding="same", name=f"{name}_branch2_1")
    b2 = conv(b2, 96, 3, padding="same", name=f"{name}_branch2_2")
    return layers.Concatenate(name=name)([b0, b1, b2, pool_branch(x, 64, f"{name}_branch3", conv)])


def _mixed_7a(x, name, conv):
    """17x17 -> 8x8: three strided 3x3 branches and a max pool -> 384 + 288 + 320 + 1088 = 2080 channels."""
    b0 = conv(conv(x, 256, 1, name=f"{name}_branch0_0"), 384, 3, strides=2, name=f"{name}_branch0_1")
    b1 = conv(conv(x, 256, 1, name=f"{name}_branch1_0"), 288, 3, strides=2, name=f"{name}_branch1_1")
    b2 = conv(x, 256, 1, name=f"{name}_branch2_0")
    b2 = conv(b2, 288, 3, padding="same", name=f"{name}_branch2_1")
    b2 = conv(b2, 320, 3, strides=2, name=f"{name}_branch2_2")
    pool = layers.MaxPool2D(3, strides=2, name=f"{name}_branch3_pool")(x)  # unpadded
    return layers.Concatenate(name=name)([b0, b1, b2, pool])


def _block35_branches(x, name, conv):
    b0 = conv(x, 32, 1, name=f"{name}_branch0")
    b1 = conv(conv(x, 32, 1, name=f"{name}_branch1_0"), 32, 3, padding="same", name=f"{name}_branch1_1")
    b2 = conv(x, 32, 1, name=f"{name}_branch2_0")
    b2 = conv(b2, 48, 3, padding="same", name=f"{name}_branch2_1")
    b2 = conv(b2, 64, 3, padding="same", name=f"{name}_branch2_2")
    return [b0, b1, b2]


def _block17_branches(x, name, conv):
    b0 = conv(x, 192, 1, name=f"{name}_branch0")
    b1 = conv(x, 128, 1, name=f"{name}_branch1_0")
    b1 = conv(b1, 160, (1, 7), padding="same", name=f"{name}_branch1_1")
    b1 = conv(b1, 192, (7, 1), padding="same", name=f"{name}_branch1_2")
    return [b0, b1]


def _block8_branches(x, name, conv):
    b0 = conv(x, 192, 1, name=f"{name}_branch0")
    b1 = conv(x, 192, 1, name=f"{name}_branch1_0")
    b1 = conv(b1, 224, (1, 3), padding="same", name=f"{name}_branch1_1")
    b1 = conv(b1, 256, (3, 1), padding="same", name=f"{name}_branch1_2")
    return [b0, b1]


_BRANCHES = {"block35": _block35_branches, "block17": _block17_branches, "block8": _block8_branches}


def residual_block(x, kind, name, conv, scale, relu=True):
    """x + scale * conv1x1(concat(branches(x))) [-> ReLU]; the 1x1 projection has a bias and no norm."""
    y = layers.Concatenate(name=f"{name}_concat")(_BRANCHES[kind](x, name, conv))
    y = layers.Conv2D(x.shape[-1], 1, kernel_initializer=conv_init(), name=f"{name}_conv2d")(y)
    if scale != 1.0:
        y = layers.Rescaling(scale, name=f"{name}_scale")(y)
    x = layers.Add(name=f"{name}_add")([y, x])
    return layers.ReLU(name=f"{name}_out")(x) if relu else x


def _repeat(x, stage, conv):
    kind, repeats, scale = stage
    for i in range(1, repeats + 1):
        x = residual_block(x, kind, f"{kind}_{i}", conv, scale)
    return x


def inception_resnet_v2(*, num_classes, input_shape, name, dropout_rate=0.2, bn_epsilon=1e-3, bn_momentum=0.9):
    """The Inception-ResNet-v2 builder (299x299 inputs; 75x75 is the smallest that works).
    dropout_rate: before the classifier; 0.2 as TF-slim trained it (timm's default is 0)."""
    conv = inception_conv(bn_epsilon, bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = stem(inputs, conv)
    x = layers.MaxPool2D(3, strides=2, name="pool3a")(x)
    x = conv(x, 80, 1, name="conv3b")
    x = conv(x, 192, 3, name="conv4a")
    x = layers.MaxPool2D(3, strides=2, name="pool5a")(x)
    x = _mixed_5b(x, "mixed5b", conv)  # 35x35x320 at 299
    x = _repeat(x, BLOCK35, conv)
    x = reduction_a(x, "mixed6a", conv, k=256, l=256, m=384, n=384)  # 17x17x1088
    x = _repeat(x, BLOCK17, conv)
    x = _mixed_7a(x, "mixed7a", conv)  # 8x8x2080
    x = _repeat(x, BLOCK8, conv)
    x = residual_block(x, "block8", "block8_10", conv, 1.0, relu=False)
    x = conv(x, 1536, 1, name="conv7b")
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_STEM = {"conv1a": "conv2d_1a", "conv2a": "conv2d_2a", "conv2b": "conv2d_2b", "conv3b": "conv2d_3b",
         "conv4a": "conv2d_4a", "conv7b": "conv2d_7b", "mixed5b": "mixed_5b", "mixed6a": "mixed_6a",
         "mixed7a": "mixed_7a"}
_REPEATS = {"block35": "repeat", "block17": "repeat_1", "block8": "repeat_2"}
_LAYER = re.compile(r"(conv\d[ab]|mixed\d[ab]|block(?:35|17|8)_\d+)(?:_(\w+?))?_(conv2d|conv|bn)")


def _unit_module(unit):
    if unit in _STEM:
        return _STEM[unit]
    if unit == "block8_10":  # the last Block8 (no ReLU) is a module of its own
        return "block8"
    kind, index = unit.rsplit("_", 1)
    return f"{_REPEATS[kind]}.{int(index) - 1}"


def reference_module(layer_name):
    """tfcnn layer -> timm module: block17_3_branch1_2_bn -> repeat_1.2.branch1.2.bn,
    block8_10_conv2d -> block8.conv2d, conv4a_conv -> conv2d_4a.conv."""
    if layer_name == "head_fc":
        return "classif"
    match = _LAYER.fullmatch(layer_name)
    if not match:
        return None
    unit, path, part = match[1], match[2], match[3]
    # branchN_M is item M of the Sequential branchN (every multi-conv branch of this net is one).
    path = path and re.sub(r"^(branch\d)_(\d)$", r"\1.\2", path)
    return ".".join(p for p in (_unit_module(unit), path, part) if p)


# timm's inception_resnet_v2.tf_in1k pretrained cfg: 299 px, crop 0.8975, bicubic, inputs scaled to [-1, 1].
TIMM_DATA = DataConfig(299, 0.8975, INCEPTION_MEAN, INCEPTION_STD, "bicubic")

register_model(
    "inception_resnet_v2", inception_resnet_v2,
    # min_size 75: the unpadded stride-2 conv, 3x3 conv, stride-2 max pool, 3x3 conv, stride-2 max pool and two
    # stride-2 reductions (mixed6a, mixed7a) each need 3x3 inputs: 75 -> 37 -> 35 -> 17 -> 15 -> 7 -> 3 -> 1.
    ModelInfo(name="inception_resnet_v2", input_size=299, crop_fraction=0.8975, mean=INCEPTION_MEAN,
              std=INCEPTION_STD, top1=80.462, params=55_843_464, gmacs=13.156, min_size=75,
              interpolation="bicubic", reference="timm inception_resnet_v2"),
    WeightMap(reference_module, "timm inception_resnet_v2", classifier="classif", data_config=TIMM_DATA))
