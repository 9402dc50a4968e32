"""DenseNet-BC (Huang et al., "Densely Connected Convolutional Networks", https://arxiv.org/abs/1608.06993):
one builder, variants as data.

Stem: 7x7 stride-2 conv (no bias) -> BN -> ReLU -> 3x3 stride-2 max pool (padding 1). Then four dense
blocks; each dense layer is pre-activation, BN -> ReLU -> 1x1 conv (bn_size * growth_rate) -> BN -> ReLU ->
3x3 conv (growth_rate), and its output is concatenated to its input, so a block of L layers adds
L * growth_rate channels. Between blocks a transition halves channels and resolution: BN -> ReLU -> 1x1
conv -> 2x2 stride-2 average pool. Then BN -> ReLU -> global average pool -> classifier. BN eps 1e-5.

Parameter counts, layer order and padding equal torchvision's `densenet121` (and timm's), whose state dicts
load (`features.denseblock2.denselayer3.norm1.weight`, `classifier.weight`; the old `norm.1` naming of
torchvision's published files too).
Layer names are hierarchical and stable (`block2_layer3_conv1_bn` is the BN before that layer's conv1).
"""
from __future__ import annotations

import re

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn, conv_init
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap

layers = tf.keras.layers

# torchvision's DenseNet-BC variants: growth rate, layers per dense block, stem filters (bn_size 4 for all).
# Only densenet121 is registered; the others are the same builder with these arguments.
VARIANTS = {
    "densenet121": dict(growth_rate=32, block_config=(6, 12, 24, 16), num_init_features=64),
    "densenet161": dict(growth_rate=48, block_config=(6, 12, 36, 24), num_init_features=96),
    "densenet169": dict(growth_rate=32, block_config=(6, 12, 32, 32), num_init_features=64),
    "densenet201": dict(growth_rate=32, block_config=(6, 12, 48, 32), num_init_features=64),
}


def bn_relu_conv(x, filters, kernel_size, *, name, bn):
    """Pre-activation unit: BatchNorm -> ReLU -> conv (no bias, stride 1, 'same': symmetric for odd kernels)."""
    x = layers.BatchNormalization(**bn, name=f"{name}_bn")(x)
    x = layers.ReLU(name=f"{name}_relu")(x)
    return layers.Conv2D(filters, kernel_size, padding="same", use_bias=False, kernel_initializer=conv_init(),
                         name=f"{name}_conv")(x)


def dense_layer(x, growth_rate, bn_size, drop_rate, *, name, bn):
    """BN-ReLU-1x1 (bn_size * growth_rate) -> BN-ReLU-3x3 (growth_rate) [-> dropout], concatenated after the
    input (torchvision's channel order: the block's input, then each layer's new features in turn)."""
    y = bn_relu_conv(x, bn_size * growth_rate, 1, name=f"{name}_conv1", bn=bn)
    y = bn_relu_conv(y, growth_rate, 3, name=f"{name}_conv2", bn=bn)
    if drop_rate:
        y = layers.Dropout(drop_rate, name=f"{name}_dropout")(y)
    return layers.Concatenate(name=f"{name}_concat")([x, y])


def transition(x, filters, *, name, bn):
    """BN-ReLU-1x1 conv -> 2x2 stride-2 average pool (floor: an odd last row/column is dropped, as in PyTorch)."""
    x = bn_relu_conv(x, filters, 1, name=name, bn=bn)
    return layers.AveragePooling2D(2, strides=2, padding="valid", name=f"{name}_pool")(x)


def densenet(*, growth_rate, block_config, num_init_features, num_classes, input_shape, name, bn_size=4,
             drop_rate=0.0, dropout_rate=0.0, bn_epsilon=1e-5, bn_momentum=0.9):
    """The DenseNet-BC family builder (224x224 inputs; anything from 29x29 up works).

    growth_rate: channels each dense layer adds. block_config: dense layers per block. num_init_features:
    stem filters. bn_size: bottleneck width as a multiple of growth_rate.
    drop_rate: dropout on each dense layer's new features (torchvision's drop_rate; 0 for its weights).
    dropout_rate: before the classifier (torchvision has none).
    bn_momentum uses Keras' convention (moving = momentum * moving + (1 - momentum) * batch).
    """
    bn = dict(epsilon=bn_epsilon, momentum=bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv_bn(inputs, num_init_features, 7, strides=2, name="stem", bn_epsilon=bn_epsilon,
                bn_momentum=bn_momentum)
    # Zero padding equals PyTorch's -inf padding here: the pool reads ReLU outputs (>= 0).
    x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    x = layers.MaxPool2D(3, strides=2, name="stem_pool")(x)
    # (H/4, W/4, num_init_features); each transition halves the resolution and the channels.
    for block, num_layers in enumerate(block_config, start=1):
        for index in range(1, num_layers + 1):
            x = dense_layer(x, growth_rate, bn_size, drop_rate, name=f"block{block}_layer{index}", bn=bn)
        if block < len(block_config):
            x = transition(x, x.shape[-1] // 2, name=f"transition{block}", bn=bn)
    # (H/32, W/32, 1024 for densenet121)
    x = layers.BatchNormalization(**bn, name="final_bn")(x)
    x = layers.ReLU(name="final_relu")(x)
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_OTHER_MODULES = {"stem_conv": "features.conv0", "stem_bn": "features.norm0", "final_bn": "features.norm5",
                  "head_fc": "classifier"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision / timm module: block2_layer3_conv1_bn -> features.denseblock2.denselayer3.norm1,
    block2_layer3_conv2_conv -> ...conv2, transition1_bn -> features.transition1.norm."""
    match = re.fullmatch(r"block(\d)_layer(\d+)_conv([12])_(bn|conv)", layer_name)
    if match:
        part = "norm" if match[4] == "bn" else "conv"
        return f"features.denseblock{match[1]}.denselayer{match[2]}.{part}{match[3]}"
    match = re.fullmatch(r"transition(\d)_(bn|conv)", layer_name)
    if match:
        return f"features.transition{match[1]}.{'norm' if match[2] == 'bn' else 'conv'}"
    return _OTHER_MODULES.get(layer_name)


def current_key(key):
    """torchvision's DenseNet weight files predate its module renaming and say `denselayer1.norm.1.weight`
    for `denselayer1.norm1.weight` (torchvision renames them on load, so do we)."""
    return re.sub(r"(denselayer\d+\.(?:norm|relu|conv))\.([12])\.", r"\1\2.", key)


def _register(name, *, top1, params, gmacs):
    """Every architecture argument is fixed per name, so an override cannot redefine the variant."""
    # min_size 29: the stride-2 conv and max pool take 29 -> 15 -> 8, and the three 2x2 stride-2 transitions
    # 8 -> 4 -> 2 -> 1; from 28 px (14 -> 7 -> 3 -> 1) the last transition's window no longer fits.
    # torchvision's min_size is 29 too.
    info = ModelInfo(name=name, input_size=224, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                     top1=top1, params=params, gmacs=gmacs, min_size=29, interpolation="bilinear",
                     reference=f"torchvision {name}")
    register_model(name, densenet, info, WeightMap(reference_module, f"torchvision {name}", classifier="classifier",
                                                   data_config=TORCHVISION_DATA, rename=current_key),
                   **VARIANTS[name])


# torchvision's published acc@1, params and GMACs (_ops).
_register("densenet121", top1=74.434, params=7_978_856, gmacs=2.834)
