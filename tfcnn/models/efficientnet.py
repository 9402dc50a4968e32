"""EfficientNet B0-B4 (Tan & Le, https://arxiv.org/abs/1905.11946): one builder, variants as data.

The timm `efficientnet_b*` definition (not `tf_efficientnet_b*`): PyTorch-style symmetric padding (k // 2
on every side, also for strided convs), batch norm eps 1e-5, SiLU. B0 is a stem conv and 16 mobile
inverted-bottleneck blocks (MBConv, from MobileNetV2): 1x1 expansion (x6; none in the first stage) ->
depthwise kxk (strided) -> squeeze-and-excitation -> 1x1 linear projection, with an identity shortcut
(behind stochastic depth) when the shape is kept. A 1x1 conv to 1280 features, pooling, dropout and
the classifier follow. B1-B4 scale it: channels by a width multiplier (rounded to multiples of 8, never
more than 10% down), the blocks of each stage by a depth multiplier (rounded up), and the input size.

Parameter counts equal timm's, and its state dicts load (`blocks.2.1.conv_pwl.weight`,
`blocks.2.1.se.conv_reduce.bias`). Layer names are hierarchical and stable
(`stage3_block2_project_conv`).

The inverted-residual block (layers.inverted_residual) is MobileNetV2's too (tfcnn.models.mobilenet_v2).
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn_act, inverted_residual, make_divisible
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, WeightMap

layers = tf.keras.layers


# ------------------------------------------------------------------------------------- EfficientNet

class Stage(NamedTuple):
    """One row of the EfficientNet-B0 table: blocks of `expand_ratio`, `kernel` x `kernel` depthwise
    convs and `channels` outputs, the first with `stride`; SE squeezes to se_ratio x the block's input
    channels."""
    expand_ratio: int
    kernel: int
    stride: int
    channels: int
    repeats: int
    se_ratio: float = 0.25


EFFICIENTNET_B0 = (
    Stage(1, 3, 1, 16, 1),  # depthwise separable: no expansion
    Stage(6, 3, 2, 24, 2),
    Stage(6, 5, 2, 40, 2),
    Stage(6, 3, 2, 80, 3),
    Stage(6, 5, 1, 112, 3),
    Stage(6, 5, 2, 192, 4),
    Stage(6, 3, 1, 320, 1),
)
STEM_CHANNELS, HEAD_CHANNELS = 32, 1280
# Stages without an expansion conv: timm builds them as DepthwiseSeparableConv (other module names).
_SEPARABLE_STAGES = frozenset(i for i, stage in enumerate(EFFICIENTNET_B0, start=1) if stage.expand_ratio == 1)


def efficientnet(*, width_multiplier, depth_multiplier, num_classes, input_shape, name, default_dropout_rate=0.2,
                 dropout_rate=None, drop_path_rate=0.2, bn_epsilon=1e-5, bn_momentum=0.9):
    """The EfficientNet family builder.

    width_multiplier, depth_multiplier: B0's channels and per-stage block counts scale by these.
    dropout_rate: before the classifier; None means the variant's default_dropout_rate (0.2 for B0/B1,
    0.3 for B2/B3, 0.4 for B4, as the paper and timm train them).
    drop_path_rate: stochastic depth of the residual blocks, rising linearly with the block's index
    (block i of n drops with drop_path_rate * i / n); 0.2 as the paper, timm and NVIDIA train them.
    bn_momentum uses Keras' convention (0.9 = PyTorch's 0.1, timm's default for these models).
    """
    if dropout_rate is None:
        dropout_rate = default_dropout_rate
    channels = lambda c: make_divisible(c * width_multiplier)  # noqa: E731
    bn = dict(bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    depths = [int(math.ceil(stage.repeats * depth_multiplier)) for stage in EFFICIENTNET_B0]
    total_blocks = sum(depths)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv_bn_act(inputs, channels(STEM_CHANNELS), 3, strides=2, name="stem", activation="silu", bn=bn)
    index = 0
    for stage_number, (stage, depth) in enumerate(zip(EFFICIENTNET_B0, depths), start=1):
        for block in range(depth):
            in_channels = x.shape[-1]
            # timm: mid = make_divisible(in * e); SE reduces to round(mid * se_ratio / e) = in * se_ratio
            mid = make_divisible(in_channels * stage.expand_ratio) if stage.expand_ratio != 1 else in_channels
            x = inverted_residual(
                x, channels(stage.channels), name=f"stage{stage_number}_block{block + 1}", kernel_size=stage.kernel,
                stride=stage.stride if block == 0 else 1, mid_channels=mid if stage.expand_ratio != 1 else None,
                activation="silu", se_channels=round(mid * (stage.se_ratio / stage.expand_ratio)),
                drop_path_rate=drop_path_rate * index / total_blocks, bn=bn)
            index += 1
    # (H/32, W/32, 320 x width)
    x = conv_bn_act(x, channels(HEAD_CHANNELS), 1, name="top", activation="silu", bn=bn)
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_OTHER_MODULES = {"stem_conv": "conv_stem", "stem_bn": "bn1", "top_conv": "conv_head", "top_bn": "bn2",
                  "head_fc": "classifier"}
_SE_MODULES = {"se_reduce": "se.conv_reduce", "se_expand": "se.conv_expand"}
_INVERTED_MODULES = {"expand_conv": "conv_pw", "expand_bn": "bn1", "dw_conv": "conv_dw", "dw_bn": "bn2",
                     "project_conv": "conv_pwl", "project_bn": "bn3", **_SE_MODULES}
_SEPARABLE_MODULES = {"dw_conv": "conv_dw", "dw_bn": "bn1", "project_conv": "conv_pw", "project_bn": "bn2",
                      **_SE_MODULES}


def reference_module(layer_name):
    """tfcnn layer -> timm module: stage3_block2_project_conv -> blocks.2.1.conv_pwl,
    stage1_block1_project_conv -> blocks.0.0.conv_pw (the first stage has no expansion)."""
    match = re.fullmatch(r"stage(\d)_block(\d+)_(\w+)", layer_name)
    if match:
        stage = int(match[1])
        part = (_SEPARABLE_MODULES if stage in _SEPARABLE_STAGES else _INVERTED_MODULES).get(match[3])
        return part and f"blocks.{stage - 1}.{int(match[2]) - 1}.{part}"
    return _OTHER_MODULES.get(layer_name)


def _register(name, *, width, depth, dropout, input_size, weights_size, crop_fraction, mean=IMAGENET_MEAN,
              std=IMAGENET_STD, top1, params, gmacs):
    """input_size: the paper's resolution, at which tfcnn trains it and counts its GMACs. weights_size,
    crop_fraction, mean, std: timm's default pretrained cfg of `name` (bicubic), what its weights expect."""
    weights_data = DataConfig(weights_size, crop_fraction, mean, std, "bicubic")
    info = ModelInfo(name=name, input_size=input_size, crop_fraction=crop_fraction, mean=weights_data.mean,
                     std=weights_data.std, top1=top1, params=params, gmacs=gmacs, min_size=MIN_SIZE,
                     interpolation="bicubic", reference=f"timm {name}")
    register_model(name, efficientnet, info, WeightMap(reference_module, f"timm {name}", classifier="classifier",
                                                       data_config=weights_data),
                   width_multiplier=width, depth_multiplier=depth, default_dropout_rate=dropout)


# Every conv pads k // 2, so each stride-2 layer maps n pixels to ceil(n / 2) >= 1: any input from 1x1 up
# builds and runs (the final feature map is 1x1 up to 32 px; torchvision says min_size (1, 1) alike).
MIN_SIZE = 1

# input_size: the paper's 224/240/260/300/380 (NVIDIA trains B4 at 380); timm's weights train B2-B4
# smaller (weights_size, their default cfg). top1: timm's results-imagenet.csv for that tag, evaluated at
# the cfg's test size (B1: timm's README for ra4_e3600_r240_in1k), noted per line. gmacs: at input_size.
_register("efficientnet_b0", width=1.0, depth=1.0, dropout=0.2, input_size=224, weights_size=224, crop_fraction=0.875,
          top1=77.694, params=5_288_548, gmacs=0.386)  # ra_in1k at 224, crop 0.875
_register("efficientnet_b1", width=1.0, depth=1.1, dropout=0.2, input_size=240, weights_size=240, crop_fraction=0.9,
          mean=(127.5,) * 3, std=(127.5,) * 3,  # ra4_e3600_r240_in1k takes Inception-style (x - 0.5) / 0.5
          top1=81.44, params=7_794_184, gmacs=0.687)  # at 288, crop 1.0
_register("efficientnet_b2", width=1.1, depth=1.2, dropout=0.3, input_size=260, weights_size=256, crop_fraction=0.875,
          top1=80.61, params=9_109_994, gmacs=0.994)  # ra_in1k at 288, crop 1.0
_register("efficientnet_b3", width=1.2, depth=1.4, dropout=0.3, input_size=300, weights_size=288, crop_fraction=0.875,
          top1=82.242, params=12_233_232, gmacs=1.827)  # ra2_in1k at 320, crop 1.0
_register("efficientnet_b4", width=1.4, depth=1.8, dropout=0.4, input_size=380, weights_size=320, crop_fraction=0.875,
          top1=83.414, params=19_341_616, gmacs=4.394)  # ra2_in1k at 384, crop 1.0
