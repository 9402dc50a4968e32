"""ResNet v1.5, ResNeXt and SE-ResNeXt: one builder, variants as data.

- ResNet (He et al., https://arxiv.org/abs/1512.03385) in its "v1.5" form (NVIDIA, torchvision):
  in a downsampling bottleneck the stride sits on the 3x3 conv, not the first 1x1. About 0.5% more
  top-1 than v1 for about 5% more compute.
- ResNeXt (Xie et al., https://arxiv.org/abs/1611.05431): the bottleneck's 3x3 conv is grouped;
  `32x4d` means 32 groups of width 4 in the first stage (width doubles per stage).
- SE-ResNeXt (Hu et al., https://arxiv.org/abs/1709.01507): ResNeXt with a squeeze-and-excitation
  gate (reduction 16) on each block's output before the residual add. NVIDIA's DeepLearningExamples
  define theirs with 16 units in every block's gate instead of channels / 16 (models/resnet.py:200,
  common.py:149): `nvidia_se_resnext101_32x4d`, what their published SE-ResNeXt results were trained as.
- Wide ResNet-50-2 (Zagoruyko & Komodakis, https://arxiv.org/abs/1605.07146, as torchvision defines it):
  the bottleneck's inner width doubled (width_per_group 128), the outer width unchanged.
- ResNet v1 as NVIDIA's NGC script nvidia-examples/cnn/resnet.py (20.10-tf1, `--layers 18 ... 152`) builds it
  (`ngc_resnet50`, ...): the same layers in three other places, options of this builder: the stride on a block's
  first 1x1 convolution (`stride_on="conv1"`); nvutils' shortcut rule (`shortcut="nvutils"`: a projection
  where the input's depth differs from the bottleneck depth, else the identity, or a 1x1 max pool of the
  stride: in the bottleneck networks the same shortcuts as torchvision's, as every stage's first block changes
  the depth); the stem's max pool with TensorFlow's 'same' padding (`stem_pool="same"`: windows start at the
  first pixel, where the torchvision stem pads one pixel on every side). The script compares the input with
  the bottleneck depth (4 x filters) in basic blocks too, whose output is only filters wide, so every basic
  block of its ResNet-18/34 has a projection shortcut. Batch norm epsilon 1e-4, decay 0.9 (nvutils/builder.py).
  The script's channels_first is a memory layout for GPUs, not another function.

Parameter counts equal the torchvision / timm definitions, and their state dicts load (the same
names in both: `layer3.1.conv2.weight`, SE as `se.fc1` / `se.fc2`). Layer names are hierarchical and
stable (`stage3_block2_conv2_conv`), so checkpoints stay loadable across code changes.
"""
from __future__ import annotations

import re

import tensorflow as tf

from tfcnn.models.layers import classifier_head, conv_bn, squeeze_excite
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap
from tfcnn.options import EVAL_CROPS, NGC_MEAN, NGC_README_TOP1, NGC_STD

layers = tf.keras.layers

STAGE_FILTERS = (64, 128, 256, 512)


def basic_block(x, filters, stride, *, name, zero_init_residual, bn, shortcut_rule, **_):
    """Two 3x3 convs (ResNet-18/34). Output channels: filters."""
    shortcut = _shortcut(x, filters, stride, name, bn, shortcut_rule, depth=4 * filters)
    y = conv_bn(x, filters, 3, strides=stride, name=f"{name}_conv1", **bn)
    y = conv_bn(y, filters, 3, activation=False, zero_gamma=zero_init_residual, name=f"{name}_conv2", **bn)
    return _merge(shortcut, y, name)


def bottleneck_block(x, filters, stride, *, name, zero_init_residual, bn, groups, width_per_group,
                     se_reduction, se_channels, shortcut_rule, stride_on):
    """1x1 reduce -> 3x3 (grouped) -> 1x1 expand (x4) [-> SE], strided on the 3x3 (v1.5) or on the first 1x1
    (v1, stride_on='conv1'). Output channels: 4 * filters."""
    width = int(filters * width_per_group / 64) * groups
    shortcut = _shortcut(x, 4 * filters, stride, name, bn, shortcut_rule, depth=4 * filters)
    y = conv_bn(x, width, 1, strides=stride if stride_on == "conv1" else 1, name=f"{name}_conv1", **bn)
    y = conv_bn(y, width, 3, strides=stride if stride_on == "conv2" else 1, groups=groups, name=f"{name}_conv2",
                **bn)
    y = conv_bn(y, 4 * filters, 1, activation=False, zero_gamma=zero_init_residual, name=f"{name}_conv3", **bn)
    if se_reduction or se_channels:
        y = squeeze_excite(y, se_channels or y.shape[-1] // se_reduction, name=f"{name}_se")
    return _merge(shortcut, y, name)


def _shortcut(x, channels, stride, name, bn, rule, depth):
    """The identity where the block keeps the shape, else a strided 1x1 projection to `channels`. nvutils'
    rule (nvidia-examples/cnn/resnet.py) compares the input's depth with the bottleneck depth `depth` instead,
    and keeps an equal one, subsampled by a 1x1 max pool where the block is strided."""
    if rule == "nvutils":
        if x.shape[-1] == depth:
            return x if stride == 1 else layers.MaxPool2D(1, strides=stride, name=f"{name}_downsample_pool")(x)
    elif stride == 1 and x.shape[-1] == channels:
        return x
    return conv_bn(x, channels, 1, strides=stride, activation=False, name=f"{name}_downsample", **bn)


def _merge(shortcut, y, name):
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.ReLU(name=f"{name}_out")(y)


BLOCKS = {"basic": basic_block, "bottleneck": bottleneck_block}
SHORTCUTS = ("projection", "nvutils")
STRIDES_ON = ("conv2", "conv1")
STEM_POOLS = ("padded", "same")


def resnet(*, depths, block, num_classes, input_shape, name, groups=1, width_per_group=64,
           se_reduction=None, se_channels=None, stage_filters=STAGE_FILTERS, stride_on="conv2", shortcut="projection",
           stem_pool="padded", zero_init_residual=True, dropout_rate=0.0, bn_epsilon=1e-5, bn_momentum=0.9):
    """The ResNet family builder.

    depths: blocks per stage, e.g. (3, 4, 6, 3). block: 'basic' or 'bottleneck'.
    groups, width_per_group: ResNeXt cardinality and base width (1, 64 for plain ResNet).
    se_reduction: squeeze-excitation reduction (16 for SE-ResNeXt), None for none. se_channels: a fixed
    width of every gate's bottleneck instead (NVIDIA's 16). stage_filters: each stage's base width (its
    bottleneck's output is 4x that).
    stride_on: the bottleneck conv that downsamples, 'conv2' (the 3x3: v1.5) or 'conv1' (the first 1x1: v1).
    shortcut: 'projection' (torchvision's) or 'nvutils' (nvidia-examples/cnn's; see the module docstring).
    stem_pool: the stem's 3x3 stride-2 max pool padded one pixel on every side ('padded', torchvision's) or
    with TensorFlow's 'same' padding ('same', nvutils').
    zero_init_residual: start each block's last BN gamma at 0 so every residual block begins as the
    identity (Goyal et al., https://arxiv.org/abs/1706.02677). NVIDIA's recipes do not (their
    last_bn_0_init is False); they pass model_options zero_init_residual=false.
    bn_momentum uses Keras' convention (moving = momentum * moving + (1 - momentum) * batch).
    """
    if block == "basic" and (groups != 1 or width_per_group != 64 or se_reduction or se_channels):
        raise ValueError("basic blocks support only groups=1, width_per_group=64 and no SE")
    for option, value, valid in (("stride_on", stride_on, STRIDES_ON), ("shortcut", shortcut, SHORTCUTS),
                                 ("stem_pool", stem_pool, STEM_POOLS)):
        if value not in valid:
            raise ValueError(f"{option} must be one of {', '.join(valid)}, received: {value!r}")
    block_fn = BLOCKS[block]
    bn = dict(bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv_bn(inputs, 64, 7, strides=2, name="stem", **bn)  # padded 3 on every side, as nvutils' pad2d too
    if stem_pool == "padded":
        x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
        x = layers.MaxPool2D(3, strides=2, name="stem_pool")(x)
    else:
        x = layers.MaxPool2D(3, strides=2, padding="same", name="stem_pool")(x)
    # (H/4, W/4, 64); each later stage halves the resolution.
    for stage, (depth, filters) in enumerate(zip(depths, stage_filters), start=1):
        for index in range(depth):
            stride = 2 if stage > 1 and index == 0 else 1
            x = block_fn(x, filters, stride, name=f"stage{stage}_block{index + 1}",
                         zero_init_residual=zero_init_residual, bn=bn, groups=groups,
                         width_per_group=width_per_group, se_reduction=se_reduction, se_channels=se_channels,
                         shortcut_rule=shortcut, stride_on=stride_on)
    # (H/32, W/32, 512 or 2048)
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, logits, name=name)


_BLOCK_MODULES = {"conv1_conv": "conv1", "conv1_bn": "bn1", "conv2_conv": "conv2", "conv2_bn": "bn2",
                  "conv3_conv": "conv3", "conv3_bn": "bn3", "downsample_conv": "downsample.0",
                  "downsample_bn": "downsample.1", "se_reduce": "se.fc1", "se_expand": "se.fc2"}
_OTHER_MODULES = {"stem_conv": "conv1", "stem_bn": "bn1", "head_fc": "fc"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision / timm module: stage3_block2_conv2_bn -> layer3.1.bn2."""
    match = re.fullmatch(r"stage(\d)_block(\d+)_(\w+)", layer_name)
    if match:
        part = _BLOCK_MODULES.get(match[3])
        return part and f"layer{match[1]}.{int(match[2]) - 1}.{part}"
    return _OTHER_MODULES.get(layer_name)


# timm's Gluon-trained ResNeXt / SE-ResNeXt weights: bicubic, 0.875 crop, ImageNet statistics.
TIMM_GLUON_DATA = DataConfig(224, 0.875, IMAGENET_MEAN, IMAGENET_STD, "bicubic")


def _register(name, *, depths, block, groups=1, width_per_group=64, se_reduction=None, se_channels=None, top1, params,
              gmacs, reference):
    """Every architecture argument is fixed per name, so an override cannot redefine the variant.
    reference: 'torchvision NAME' or 'timm NAME', the definition whose state dicts it loads."""
    info = ModelInfo(name=name, input_size=224, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                     top1=top1, params=params, gmacs=gmacs, min_size=32, reference=reference)
    data = TORCHVISION_DATA if reference.startswith("torchvision") else TIMM_GLUON_DATA
    register_model(name, resnet, info, WeightMap(reference_module, reference, data_config=data), depths=depths,
                   block=block, groups=groups, width_per_group=width_per_group, se_reduction=se_reduction,
                   se_channels=se_channels, stage_filters=STAGE_FILTERS)


# Reference top-1: torchvision's published figures for resnet18/34/101/152, wide_resnet50_2 and resnext50;
# NVIDIA's TensorFlow ConvNets' 90-epoch results (DGX-1) for resnet50, resnext101_32x4d and se_resnext101_32x4d
# (whose SE gate is channels / 16, as here), its PyTorch ConvNets' (DGX A100, AMP) for
# nvidia_se_resnext101_32x4d; the original SENet release for se_resnext50_32x4d.
_register("resnet18", depths=(2, 2, 2, 2), block="basic", top1=69.76, params=11_689_512, gmacs=1.814,
          reference="torchvision resnet18")
_register("resnet34", depths=(3, 4, 6, 3), block="basic", top1=73.31, params=21_797_672, gmacs=3.664,
          reference="torchvision resnet34")
_register("resnet50", depths=(3, 4, 6, 3), block="bottleneck", top1=77.0, params=25_557_032, gmacs=4.089,
          reference="torchvision resnet50")
_register("resnet101", depths=(3, 4, 23, 3), block="bottleneck", top1=77.37, params=44_549_160, gmacs=7.801,
          reference="torchvision resnet101")
_register("resnet152", depths=(3, 8, 36, 3), block="bottleneck", top1=78.31, params=60_192_808, gmacs=11.514,
          reference="torchvision resnet152")
_register("wide_resnet50_2", depths=(3, 4, 6, 3), block="bottleneck", width_per_group=128, top1=78.468,
          params=68_883_240, gmacs=11.398, reference="torchvision wide_resnet50_2")
_register("resnext50_32x4d", depths=(3, 4, 6, 3), block="bottleneck", groups=32, width_per_group=4,
          top1=77.62, params=25_028_904, gmacs=4.23, reference="torchvision resnext50_32x4d")
_register("resnext101_32x4d", depths=(3, 4, 23, 3), block="bottleneck", groups=32, width_per_group=4,
          top1=79.4, params=44_177_704, gmacs=7.97, reference="timm resnext101_32x4d")
_register("se_resnext50_32x4d", depths=(3, 4, 6, 3), block="bottleneck", groups=32, width_per_group=4,
          se_reduction=16, top1=79.08, params=27_559_896, gmacs=4.233, reference="timm seresnext50_32x4d")
_register("se_resnext101_32x4d", depths=(3, 4, 23, 3), block="bottleneck", groups=32, width_per_group=4,
          se_reduction=16, top1=79.7, params=48_955_416, gmacs=7.975, reference="timm seresnext101_32x4d")
_register("nvidia_se_resnext101_32x4d", depths=(3, 4, 23, 3), block="bottleneck", groups=32, width_per_group=4,
          se_channels=16, top1=80.03, params=45_251_128, gmacs=7.971,
          reference="timm seresnext101_32x4d(se rd_channels=16)")


# ---- NVIDIA's NGC nvidia-examples/cnn resnet.py (20.10-tf1): ResNet v1 as its `--layers` builds it.

def _register_ngc(layers_flag, *, depths, block, params, gmacs):
    """ngc_resnet{layers_flag}: resnet.py --layers N. Reference top-1: the scripts' README states ResNet-50's
    (NGC_README_TOP1)."""
    name = f"ngc_resnet{layers_flag}"
    # min_size 1: every padding is TF's 'same' or the stem's 3, so no input is too small.
    info = ModelInfo(name=name, input_size=224, crop_fraction=EVAL_CROPS["ngc"], mean=NGC_MEAN, std=NGC_STD,
                     top1=NGC_README_TOP1.get(name, 0.0), params=params, gmacs=gmacs, min_size=1,
                     reference=f"NGC nvidia-examples/cnn resnet.py --layers {layers_flag}", eval_crop="ngc")
    register_model(name, resnet, info, defaults=dict(bn_epsilon=1e-4, bn_momentum=0.9), depths=depths, block=block,
                   stage_filters=STAGE_FILTERS, stride_on="conv1", shortcut="nvutils", stem_pool="same")


_register_ngc(18, depths=(2, 2, 2, 2), block="basic", params=12_043_816, gmacs=1.878)
_register_ngc(34, depths=(3, 4, 6, 3), block="basic", params=22_716_840, gmacs=3.831)
_register_ngc(50, depths=(3, 4, 6, 3), block="bottleneck", params=25_557_032, gmacs=3.858)
_register_ngc(101, depths=(3, 4, 23, 3), block="bottleneck", params=44_549_160, gmacs=7.57)
_register_ngc(152, depths=(3, 8, 36, 3), block="bottleneck", params=60_192_808, gmacs=11.282)
