"""MobileNetV2 (Sandler et al., https://arxiv.org/abs/1801.04381).

The torchvision definition: a strided 3x3 stem, 17 inverted-residual blocks (1x1 expansion, x6 but
none in the first block -> depthwise 3x3 -> linear 1x1 projection; identity shortcut when the shape is
kept), a 1x1 conv to 1280 features, pooling, dropout 0.2 and the classifier. ReLU6 activations, batch
norm eps 1e-5, symmetric k // 2 padding. No squeeze-excitation, no stochastic depth.

The block is EfficientNet's too (tfcnn.models.layers.inverted_residual); the naming of the reference's
modules is this family's own. Parameter counts equal torchvision's, and its state dicts load
(`features.5.conv.1.0.weight`, classifier `classifier.1`). Layer names are hierarchical and stable
(`stage3_block2_dw_conv`).
"""
from __future__ import annotations

import itertools
import re
from typing import NamedTuple

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn_act, inverted_residual, make_divisible
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap


class Stage(NamedTuple):
    """One row of the paper's table 2: `repeats` blocks of expansion t, c output channels, first stride s."""
    expand_ratio: int
    channels: int
    repeats: int
    stride: int


MOBILENET_V2 = (
    Stage(1, 16, 1, 1),  # no expansion
    Stage(6, 24, 2, 2),
    Stage(6, 32, 3, 2),
    Stage(6, 64, 4, 2),
    Stage(6, 96, 3, 1),
    Stage(6, 160, 3, 2),
    Stage(6, 320, 1, 1),
)
STEM_CHANNELS, HEAD_CHANNELS = 32, 1280


def mobilenet_v2(*, num_classes, input_shape, name, width_multiplier=1.0, dropout_rate=0.2, bn_epsilon=1e-5,
                 bn_momentum=0.9):
    """The MobileNetV2 builder. width_multiplier scales every layer's channels (rounded to multiples
    of 8) but never shrinks the 1280 head features. bn_momentum uses Keras' convention (0.9 = PyTorch's 0.1)."""
    bn = dict(bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv_bn_act(inputs, make_divisible(STEM_CHANNELS * width_multiplier), 3, strides=2, name="stem",
                    activation="relu6", bn=bn)
    for stage_number, stage in enumerate(MOBILENET_V2, start=1):
        out_channels = make_divisible(stage.channels * width_multiplier)
        for block in range(stage.repeats):
            mid = int(round(x.shape[-1] * stage.expand_ratio))  # torchvision's hidden_dim
            x = inverted_residual(x, out_channels, name=f"stage{stage_number}_block{block + 1}", kernel_size=3,
                                  stride=stage.stride if block == 0 else 1,
                                  mid_channels=mid if stage.expand_ratio != 1 else None, activation="relu6", bn=bn)
    # (H/32, W/32, 320 x width)
    x = conv_bn_act(x, make_divisible(HEAD_CHANNELS * max(1.0, width_multiplier)), 1, name="top",
                    activation="relu6", bn=bn)
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


# torchvision numbers the blocks through one Sequential: features.0 is the stem, features.1 ... .17 the
# blocks in table order, features.18 the head conv.
_FEATURE_INDEX = dict(zip(
    ((stage, block) for stage, row in enumerate(MOBILENET_V2, start=1) for block in range(1, row.repeats + 1)),
    itertools.count(1)))
_HEAD_INDEX = len(_FEATURE_INDEX) + 1
# Within a block (`features.N.conv`): with expansion [pw conv-bn-relu6, dw conv-bn-relu6, pwl conv, bn];
# without [dw conv-bn-relu6, pwl conv, bn].
_EXPANDED_MODULES = {"expand_conv": "conv.0.0", "expand_bn": "conv.0.1", "dw_conv": "conv.1.0", "dw_bn": "conv.1.1",
                     "project_conv": "conv.2", "project_bn": "conv.3"}
_UNEXPANDED_MODULES = {"dw_conv": "conv.0.0", "dw_bn": "conv.0.1", "project_conv": "conv.1", "project_bn": "conv.2"}
_OTHER_MODULES = {"stem_conv": "features.0.0", "stem_bn": "features.0.1", "top_conv": f"features.{_HEAD_INDEX}.0",
                  "top_bn": f"features.{_HEAD_INDEX}.1", "head_fc": "classifier.1"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision module: stage3_block2_dw_conv -> features.5.conv.1.0,
    stage1_block1_project_bn -> features.1.conv.2 (the first block has no expansion)."""
    match = re.fullmatch(r"stage(\d)_block(\d+)_(\w+)", layer_name)
    if match:
        stage, block = int(match[1]), int(match[2])
        index = _FEATURE_INDEX.get((stage, block))
        modules = _UNEXPANDED_MODULES if MOBILENET_V2[stage - 1].expand_ratio == 1 else _EXPANDED_MODULES
        part = modules.get(match[3])
        return part and index and f"features.{index}.{part}"
    return _OTHER_MODULES.get(layer_name)


register_model(
    "mobilenet_v2", mobilenet_v2,
    # min_size 1: every conv pads k // 2, so each stride-2 layer maps n pixels to ceil(n / 2) >= 1 and any
    # input from 1x1 up builds and runs (torchvision's weights meta says min_size (1, 1)).
    ModelInfo(name="mobilenet_v2", input_size=224, crop_fraction=224 / 256, mean=IMAGENET_MEAN, std=IMAGENET_STD,
              top1=71.878, params=3_504_872, gmacs=0.301, min_size=1, reference="torchvision mobilenet_v2"),
    # torchvision's IMAGENET1K_V1 weights (mobilenet_v2-b0353104.pth): resize 256, crop 224, bilinear.
    WeightMap(reference_module, "torchvision mobilenet_v2", classifier="classifier.1", data_config=TORCHVISION_DATA),
    width_multiplier=1.0)
