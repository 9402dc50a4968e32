"""Inception V3 (Szegedy et al., "Rethinking the Inception Architecture", https://arxiv.org/abs/1512.00567).

The torchvision definition: BN with scale and centre (eps 1e-3) after every bias-free conv, factorized
7x7 (1x7 + 7x1) in the 17x17 modules, expanded 1x3 / 3x1 filter banks in the 8x8 modules, dropout 0.5
before the classifier. The auxiliary classifier on the 17x17 features is optional and off by default;
with it on, the model returns [logits, aux_logits].

The 3x3 average pools inside the modules pad by one pixel. By default they average over the real
pixels only, as the original TF-slim network; `count_include_pad=True` counts the padded zeros, as
torchvision's and timm's pools do (their default), which moves the logits by about 7e-3 relative. Loading
their weights turns it on, and checkpoints and exports keep it.
"""
from __future__ import annotations

import functools
import re

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn, logits_dtype
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import WeightMap

layers = tf.keras.layers


def _concat(branches, name):
    return layers.Concatenate(name=name)(branches)


def _pool_branch(x, filters, name, conv, count_include_pad=False):
    if count_include_pad:  # zeros padded explicitly are ordinary inputs of a 'valid' pool
        x = layers.ZeroPadding2D(1, name=f"{name}_pool_pad")(x)
        y = layers.AveragePooling2D(3, strides=1, padding="valid", name=f"{name}_pool")(x)
    else:
        y = layers.AveragePooling2D(3, strides=1, padding="same", name=f"{name}_pool")(x)
    return conv(y, filters, 1, name=f"{name}_proj")


def inception_a(x, pool_filters, name, conv, pool):
    """35x35 module: 1x1, 5x5, double 3x3 and pooled branches -> 224 + pool_filters channels."""
    b1 = conv(x, 64, 1, name=f"{name}_b1x1")
    b5 = conv(conv(x, 48, 1, name=f"{name}_b5x5_1"), 64, 5, name=f"{name}_b5x5_2")
    b3 = conv(x, 64, 1, name=f"{name}_b3x3dbl_1")
    b3 = conv(conv(b3, 96, 3, name=f"{name}_b3x3dbl_2"), 96, 3, name=f"{name}_b3x3dbl_3")
    return _concat([b1, b5, b3, pool(x, pool_filters, f"{name}_bpool", conv)], name)


def reduction_a(x, name, conv):
    """35x35 -> 17x17: strided 3x3, strided double 3x3 and max pool -> 480 + input channels."""
    b3 = conv(x, 384, 3, strides=2, padding="valid", name=f"{name}_b3x3")
    d = conv(conv(x, 64, 1, name=f"{name}_b3x3dbl_1"), 96, 3, name=f"{name}_b3x3dbl_2")
    d = conv(d, 96, 3, strides=2, padding="valid", name=f"{name}_b3x3dbl_3")
    pool = layers.MaxPool2D(3, strides=2, name=f"{name}_bpool")(x)
    return _concat([b3, d, pool], name)


def inception_c(x, c7, name, conv, pool):
    """17x17 module with factorized 7x7 convolutions -> 768 channels."""
    b1 = conv(x, 192, 1, name=f"{name}_b1x1")
    b7 = conv(x, c7, 1, name=f"{name}_b7x7_1")
    b7 = conv(conv(b7, c7, (1, 7), name=f"{name}_b7x7_2"), 192, (7, 1), name=f"{name}_b7x7_3")
    d = conv(x, c7, 1, name=f"{name}_b7x7dbl_1")
    for i, (filters, kernel) in enumerate([(c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))], start=2):
        d = conv(d, filters, kernel, name=f"{name}_b7x7dbl_{i}")
    return _concat([b1, b7, d, pool(x, 192, f"{name}_bpool", conv)], name)


def reduction_b(x, name, conv):
    """17x17 -> 8x8: 3x3 and 7x7-then-3x3 strided branches and max pool -> 512 + input channels."""
    b3 = conv(conv(x, 192, 1, name=f"{name}_b3x3_1"), 320, 3, strides=2, padding="valid", name=f"{name}_b3x3_2")
    b7 = conv(x, 192, 1, name=f"{name}_b7x7x3_1")
    b7 = conv(conv(b7, 192, (1, 7), name=f"{name}_b7x7x3_2"), 192, (7, 1), name=f"{name}_b7x7x3_3")
    b7 = conv(b7, 192, 3, strides=2, padding="valid", name=f"{name}_b7x7x3_4")
    pool = layers.MaxPool2D(3, strides=2, name=f"{name}_bpool")(x)
    return _concat([b3, b7, pool], name)


def inception_e(x, name, conv, pool):
    """8x8 module with expanded 1x3 / 3x1 filter banks -> 2048 channels."""
    def split_1x3_3x1(y, prefix):
        return _concat([conv(y, 384, (1, 3), name=f"{prefix}a"), conv(y, 384, (3, 1), name=f"{prefix}b")],
                       f"{prefix}_concat")

    b1 = conv(x, 320, 1, name=f"{name}_b1x1")
    b3 = split_1x3_3x1(conv(x, 384, 1, name=f"{name}_b3x3_1"), f"{name}_b3x3_2")
    d = conv(conv(x, 448, 1, name=f"{name}_b3x3dbl_1"), 384, 3, name=f"{name}_b3x3dbl_2")
    d = split_1x3_3x1(d, f"{name}_b3x3dbl_3")
    return _concat([b1, b3, d, pool(x, 192, f"{name}_bpool", conv)], name)


def aux_head(x, num_classes, conv):
    """Auxiliary classifier on the 17x17 features (training-time regularizer)."""
    if min(x.shape[1:3]) < 17:
        raise ValueError(f"aux_logits needs 17x17 mid-level features (inputs of about 299 px), "
                         f"received features of {x.shape[1]}x{x.shape[2]}")
    y = layers.AveragePooling2D(5, strides=3, name="aux_pool")(x)
    y = conv(y, 128, 1, name="aux_conv0")
    y = conv(y, 768, 5, padding="valid", name="aux_conv1")
    y = layers.GlobalAveragePooling2D(name="aux_gap")(y)
    return layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.TruncatedNormal(stddev=0.001),
                        dtype=logits_dtype(), name="aux_fc")(y)


def inception_v3(*, num_classes, input_shape, name, aux_logits=False, dropout_rate=0.5,
                 bn_epsilon=1e-3, bn_momentum=0.9, count_include_pad=False):
    """The Inception V3 builder (299x299 inputs; anything from 75x75 up works)."""
    conv = functools.partial(conv_bn, bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    pool = functools.partial(_pool_branch, count_include_pad=count_include_pad)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv(inputs, 32, 3, strides=2, padding="valid", name="conv1a")
    x = conv(x, 32, 3, padding="valid", name="conv2a")
    x = conv(x, 64, 3, name="conv2b")
    x = layers.MaxPool2D(3, strides=2, name="pool1")(x)
    x = conv(x, 80, 1, name="conv3b")
    x = conv(x, 192, 3, padding="valid", name="conv4a")
    x = layers.MaxPool2D(3, strides=2, name="pool2")(x)
    # 35x35x192 at 299
    for name_, pool_filters in (("mixed5b", 32), ("mixed5c", 64), ("mixed5d", 64)):
        x = inception_a(x, pool_filters, name_, conv, pool)
    x = reduction_a(x, "mixed6a", conv)
    # 17x17x768
    for name_, c7 in (("mixed6b", 128), ("mixed6c", 160), ("mixed6d", 160), ("mixed6e", 192)):
        x = inception_c(x, c7, name_, conv, pool)
    aux = aux_head(x, num_classes, conv) if aux_logits else None
    x = reduction_b(x, "mixed7a", conv)
    # 8x8x1280
    x = inception_e(x, "mixed7b", conv, pool)
    x = inception_e(x, "mixed7c", conv, pool)
    # 8x8x2048
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, [logits, aux] if aux_logits else logits, name=name)


_STEM_MODULES = {"conv1a": "Conv2d_1a_3x3", "conv2a": "Conv2d_2a_3x3", "conv2b": "Conv2d_2b_3x3",
                 "conv3b": "Conv2d_3b_1x1", "conv4a": "Conv2d_4a_3x3", "aux_conv0": "AuxLogits.conv0",
                 "aux_conv1": "AuxLogits.conv1"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision / timm module: mixed6b_b7x7dbl_2_bn -> Mixed_6b.branch7x7dbl_2.bn,
    mixed5b_bpool_proj_conv -> Mixed_5b.branch_pool.conv."""
    if layer_name in ("head_fc", "aux_fc"):
        return {"head_fc": "fc", "aux_fc": "AuxLogits.fc"}[layer_name]
    match = re.fullmatch(r"(\w+?)_(conv|bn)", layer_name)
    if not match:
        return None
    unit, part = match[1], match[2]
    mixed = re.fullmatch(r"mixed(\d[a-e])_b(\w+)", unit)
    if mixed:
        branch = "branch_pool" if mixed[2] == "pool_proj" else f"branch{mixed[2]}"
        return f"Mixed_{mixed[1]}.{branch}.{part}"
    stem = _STEM_MODULES.get(unit)
    return f"{stem}.{part}" if stem else None


register_model(
    "inception_v3", inception_v3,
    ModelInfo(name="inception_v3", input_size=299, crop_fraction=0.875, mean=(127.5, 127.5, 127.5),
              std=(127.5, 127.5, 127.5), top1=77.294, params=23_834_568, gmacs=5.713, min_size=75,
              reference="torchvision inception_v3"),  # top1: torchvision's acc@1 of IMAGENET1K_V1
    # torchvision's weights take (x - 0.5) / 0.5 inputs (its transform_input turns ImageNet-normalized
    # images into those) and are evaluated from a 342 px resize, bilinear.
    WeightMap(reference_module, "torchvision inception_v3", auxiliary=("AuxLogits.",),
              options={"count_include_pad": True},
              data_config=DataConfig(299, 299 / 342, (127.5,) * 3, (127.5,) * 3, "bilinear")))
