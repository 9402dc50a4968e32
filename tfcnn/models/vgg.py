"""VGG (Simonyan & Zisserman, https://arxiv.org/abs/1409.1556): one builder, variants as data.

Five stages of 3x3 convolutions (stride 1, padding 1, with biases) and ReLU, each stage ending in a 2x2
stride-2 max pool; widths 64, 128, 256, 512, 512. A variant is its number of convs per stage (the paper's
configurations A, B, D, E: VGG-11, 13, 16, 19) and whether each conv is followed by batch norm (the conv
keeps its bias, as in torchvision). Then an adaptive average pool onto the 7x7 grid the classifier was
trained on (so any input from 32 px up works), 4096 -> dropout -> 4096 -> dropout -> logits.

Parameter counts, layer order and padding equal torchvision's `vgg11` ... `vgg19`, `vgg16_bn`, whose state
dicts load. Layer names are hierarchical and stable (`stage3_conv2_conv`, `classifier_fc1`).
"""
from __future__ import annotations

import functools

import tensorflow as tf

from tfcnn.models.layers import AdaptiveAveragePooling2D, conv_init, logits_dtype
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap, flattened_nchw

layers = tf.keras.layers

STAGE_FILTERS = (64, 128, 256, 512, 512)
POOLED_GRID = 7  # the classifier reads 512 x 7 x 7 features
HIDDEN = 4096


def vgg(*, depths, batch_norm, num_classes, input_shape, name, dropout_rate=0.5, bn_epsilon=1e-5,
        bn_momentum=0.9):
    """The VGG family builder.

    depths: 3x3 convs per stage, e.g. (2, 2, 3, 3, 3) for VGG-16. batch_norm: BN after every conv.
    dropout_rate: after each of the two hidden dense layers (training only).
    bn_momentum uses Keras' convention (0.9 = PyTorch's 0.1).
    """
    inputs = tf.keras.Input(input_shape, name="images")
    x = inputs
    for stage, (depth, filters) in enumerate(zip(depths, STAGE_FILTERS), start=1):
        for index in range(1, depth + 1):
            prefix = f"stage{stage}_conv{index}"
            # stride 1, odd kernel: TF's 'same' pads 1 on every side, as the reference's padding=1.
            x = layers.Conv2D(filters, 3, padding="same", kernel_initializer=conv_init(), name=f"{prefix}_conv")(x)
            if batch_norm:
                x = layers.BatchNormalization(epsilon=bn_epsilon, momentum=bn_momentum, name=f"{prefix}_bn")(x)
            x = layers.ReLU(name=f"{prefix}_relu")(x)
        x = layers.MaxPool2D(2, strides=2, padding="valid", name=f"stage{stage}_pool")(x)
    # (H/32, W/32, 512): 7x7 at 224
    x = AdaptiveAveragePooling2D((POOLED_GRID, POOLED_GRID), name="avgpool")(x)
    x = layers.Flatten(name="flatten")(x)  # NHWC order: see _adapt
    for index in (1, 2):
        x = layers.Dense(HIDDEN, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                         name=f"classifier_fc{index}")(x)
        x = layers.ReLU(name=f"classifier_fc{index}_relu")(x)
        if dropout_rate:
            x = layers.Dropout(dropout_rate, name=f"classifier_fc{index}_dropout")(x)
    logits = layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                          dtype=logits_dtype(), name="head_fc")(x)  # float32 logits under mixed precision
    return tf.keras.Model(inputs, logits, name=name)


@functools.lru_cache(maxsize=None)
def _feature_modules(depths, batch_norm):
    """{tfcnn layer: torchvision module} of the features: torchvision's flat Sequential holds, per conv,
    Conv2d[, BatchNorm2d], ReLU, and a MaxPool2d after each stage."""
    modules, index = {}, 0
    for stage, depth in enumerate(depths, start=1):
        for conv in range(1, depth + 1):
            prefix = f"stage{stage}_conv{conv}"
            modules[f"{prefix}_conv"] = f"features.{index}"
            if batch_norm:
                modules[f"{prefix}_bn"] = f"features.{index + 1}"
            index += 3 if batch_norm else 2
        index += 1  # the stage's max pool
    return modules


# classifier: Linear(0), ReLU, Dropout, Linear(3), ReLU, Dropout, Linear(6).
_CLASSIFIER_MODULES = {"classifier_fc1": "classifier.0", "classifier_fc2": "classifier.3", "head_fc": "classifier.6"}


def reference_module(layer_name, *, depths, batch_norm):
    """tfcnn layer -> torchvision module for the variant (depths, batch_norm): for VGG-16,
    stage3_conv2_conv -> features.12, classifier_fc2 -> classifier.3; for VGG-16-BN stage3_conv2_bn ->
    features.18."""
    return _CLASSIFIER_MODULES.get(layer_name) or _feature_modules(tuple(depths), batch_norm).get(layer_name)


def _register(name, *, depths, batch_norm=False, top1, params, gmacs):
    """Every architecture argument is fixed per name; top1 is torchvision's acc@1 of its IMAGENET1K_V1 weights."""
    reference = f"torchvision {name}"
    # min_size 32: five 2x2 stride-2 pools without padding; the fifth needs 2 px, so 32 px leave 1.
    info = ModelInfo(name=name, input_size=224, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                     top1=top1, params=params, gmacs=gmacs, min_size=32, interpolation="bilinear",
                     reference=reference)
    module_of = functools.partial(reference_module, depths=tuple(depths), batch_norm=batch_norm)
    register_model(name, vgg, info,
                   WeightMap(module_of, reference, classifier="classifier.6", data_config=TORCHVISION_DATA,
                             adapt=flattened_nchw(("classifier_fc1",), POOLED_GRID)),
                   depths=tuple(depths), batch_norm=batch_norm)


_register("vgg11", depths=(1, 1, 2, 2, 2), top1=69.02, params=132_863_336, gmacs=7.609)
_register("vgg13", depths=(2, 2, 2, 2, 2), top1=69.928, params=133_047_848, gmacs=11.308)
_register("vgg16", depths=(2, 2, 3, 3, 3), top1=71.592, params=138_357_544, gmacs=15.470)
_register("vgg19", depths=(2, 2, 4, 4, 4), top1=72.376, params=143_667_240, gmacs=19.632)
_register("vgg16_bn", depths=(2, 2, 3, 3, 3), batch_norm=True, top1=73.36, params=138_365_992, gmacs=15.470)
