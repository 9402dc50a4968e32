"""OverFeat (Sermanet et al., https://arxiv.org/abs/1312.6229), the "fast" model as NVIDIA's NGC script
nvidia-examples/cnn/overfeat.py (20.10) builds it, at 231 px:

    conv 96 11x11/4 valid -> max pool 2/2 -> conv 256 5x5 valid -> max pool 2/2 -> conv 512 3x3 same
    -> conv 1024 3x3 same -> conv 1024 3x3 same -> max pool 2/2 -> 3072 -> 4096 -> logits

Convolutions and dense layers with biases and ReLU, no normalization, no dropout (the script has none;
`dropout_rate` adds it before the two hidden dense layers). 231 px leave a 6x6x1024 map before the
classifier; an adaptive average pool onto that grid (the identity at 231 px) lets any input from 71 px
up work. There are no published weights: the reference is the script's layer list written as a PyTorch
Sequential (tests/scripts/record_reference_fixtures.py), whose state dicts load.
"""
from __future__ import annotations

import tensorflow as tf

from tfcnn.models.layers import AdaptiveAveragePooling2D, conv_init, dense_classifier
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.models.weights import (IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap, flattened_nchw,
                                  sequential_conv_modules)

layers = tf.keras.layers

# (filters, kernel, stride, padding, max pool after it) of each convolution, in the script's order.
CONVS = ((96, 11, 4, "valid", True), (256, 5, 1, "valid", True), (512, 3, 1, "same", False),
         (1024, 3, 1, "same", False), (1024, 3, 1, "same", True))
POOLED_GRID = 6  # the classifier reads 1024 x 6 x 6 features
HIDDEN = (3072, 4096)


def overfeat(*, num_classes, input_shape, name, dropout_rate=0.0):
    """The OverFeat builder. dropout_rate: before each of the two hidden dense layers (training only)."""
    inputs = tf.keras.Input(input_shape, name="images")
    x = inputs
    for index, (filters, kernel, stride, padding, pool) in enumerate(CONVS, start=1):
        prefix = f"features_conv{index}"
        # 'same' at stride 1 with an odd kernel pads k // 2 on every side, as PyTorch's padding does.
        x = layers.Conv2D(filters, kernel, strides=stride, padding=padding, kernel_initializer=conv_init(),
                          name=f"{prefix}_conv")(x)
        x = layers.ReLU(name=f"{prefix}_relu")(x)
        if pool:
            x = layers.MaxPool2D(2, strides=2, padding="valid", name=f"{prefix}_pool")(x)
    # 6x6x1024 at 231 (conv1 56, pool 28, conv2 24, pool 12, pool 6)
    x = AdaptiveAveragePooling2D((POOLED_GRID, POOLED_GRID), name="avgpool")(x)
    x = layers.Flatten(name="flatten")(x)  # NHWC order: see the WeightMap's adapt
    logits = dense_classifier(x, HIDDEN, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


# classifier: Linear(0), ReLU, Linear(2), ReLU, Linear(4).
_MODULES = {**sequential_conv_modules([pool for *_, pool in CONVS]), "classifier_fc1": "classifier.0",
            "classifier_fc2": "classifier.2", "head_fc": "classifier.4"}
REFERENCE = "nvidia-examples/cnn overfeat.py (as a PyTorch Sequential)"

register_model(
    "overfeat", overfeat,
    # min_size 71: the last 2x2 pool needs 2 px, so conv5 (5x5 valid) 4 + 4, the first pool 8 x 2, and
    # conv1 (11x11 stride 4, valid) (16 - 1) x 4 + 11.
    ModelInfo(name="overfeat", input_size=231, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD,
              top1=0.0, params=145_920_872, gmacs=2.801, min_size=71, interpolation="bilinear",
              reference=REFERENCE),
    WeightMap(_MODULES.get, REFERENCE, classifier="classifier.4", data_config=TORCHVISION_DATA.replace(input_size=231),
              adapt=flattened_nchw(("classifier_fc1",), POOLED_GRID)))
