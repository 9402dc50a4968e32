"""GoogLeNet (Inception v1; Szegedy et al., "Going Deeper with Convolutions", https://arxiv.org/abs/1409.4842)
in torchvision's batch-normalized form.

Every convolution is torchvision's BasicConv2d: conv (no bias) -> BN (eps 1e-3) -> ReLU. Nine Inception
modules, each concatenating a 1x1 branch, a 1x1 -> 3x3 branch, a 1x1 -> "5x5" branch and a 3x3 max pool ->
1x1 projection branch. The "5x5" branch (torchvision's branch3) uses a 3x3 kernel: a known quirk of
torchvision's definition (pytorch/vision#906) that its weights were trained with, kept here so they load.
Global average pool, dropout 0.2, classifier.

The two auxiliary classifiers (on the features of inception4a and inception4d) are optional and off by
default; with `aux_logits=True` the model returns [logits, aux1, aux2] (aux1 on 4a, aux2 on 4d). Note
torchvision's training-mode output puts them the other way round: GoogLeNetOutputs(logits, aux_logits2,
aux_logits1).

The stride-2 max pools are PyTorch's `ceil_mode=True` pools: output side ceil((H - k) / s) + 1, the last
window hanging over the bottom/right edge. PyTorch fills that overhang with -inf; here it is padded with
zeros, which gives the same maximum only because every pooled tensor is post-ReLU (>= 0) and every window
still covers at least one real pixel. Parameter counts, layer order and padding equal torchvision's
`googlenet`, whose state dicts load (`inception4b.branch2.1.bn.running_var`, `aux1.fc2.weight`).
"""
from __future__ import annotations

import functools
import re

import tensorflow as tf

from tfcnn.models.layers import AdaptiveAveragePooling2D, classifier_head, conv_bn, logits_dtype
from tfcnn.models.registry import DataConfig, ModelInfo, register_model
from tfcnn.models.weights import WeightMap, flattened_nchw

layers = tf.keras.layers

# (name, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5" (a 3x3 kernel), pool projection) in torchvision's order;
# "pool" entries are the ceil-mode max pools between the stages: (name, kernel, stride).
STAGES = (
    ("inception3a", 64, 96, 128, 16, 32, 32),
    ("inception3b", 128, 128, 192, 32, 96, 64),
    ("pool3", 3, 2),
    ("inception4a", 192, 96, 208, 16, 48, 64),
    ("inception4b", 160, 112, 224, 24, 64, 64),
    ("inception4c", 128, 128, 256, 24, 64, 64),
    ("inception4d", 112, 144, 288, 32, 64, 64),
    ("inception4e", 256, 160, 320, 32, 128, 128),
    ("pool4", 2, 2),
    ("inception5a", 256, 160, 320, 32, 128, 128),
    ("inception5b", 384, 192, 384, 48, 128, 128),
)
AUX_AFTER = {"inception4a": "aux1", "inception4d": "aux2"}  # auxiliary classifier -> the module it reads
AUX_GRID = 4  # the auxiliary heads pool their input onto 4x4 (adaptively), then 1x1 conv to 128 channels
AUX_CHANNELS = 128
AUX_HIDDEN = 1024


def ceil_max_pool(x, pool_size, strides, name):
    """PyTorch's MaxPool2d(pool_size, strides, padding=0, ceil_mode=True): output side ceil((H - k) / s) + 1
    (one fewer if that last window would start past the input, PyTorch's rule). The overhang of the last
    window is zero-padded at the bottom/right where PyTorch pads with -inf: the same maximum only for
    inputs >= 0 (all of GoogLeNet's pools read ReLU outputs). The padding layer is always there (possibly
    padding nothing) so that layer names do not depend on the input size."""
    pads = []
    for size in x.shape[1:3]:
        if size is None:
            raise ValueError(f"{name}: ceil-mode pooling needs a static input size")
        out = -(-(size - pool_size) // strides) + 1
        if (out - 1) * strides >= size:
            out -= 1
        if out < 1:
            raise ValueError(f"{name}: a {size} px feature map is too small for a {pool_size}x{pool_size} pool")
        pads.append((0, max((out - 1) * strides + pool_size - size, 0)))
    x = layers.ZeroPadding2D(tuple(pads), name=f"{name}_pad")(x)
    return layers.MaxPool2D(pool_size, strides=strides, padding="valid", name=name)(x)


def inception_module(x, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj, *, name, conv):
    """Four branches concatenated: 1x1; 1x1 -> 3x3; 1x1 -> "5x5" (3x3 kernel, torchvision's branch3); 3x3 max
    pool (stride 1, pad 1) -> 1x1. Output channels: ch1x1 + ch3x3 + ch5x5 + pool_proj."""
    b1 = conv(x, ch1x1, 1, name=f"{name}_branch1")
    b2 = conv(conv(x, ch3x3red, 1, name=f"{name}_branch2_1"), ch3x3, 3, name=f"{name}_branch2_2")
    b3 = conv(conv(x, ch5x5red, 1, name=f"{name}_branch3_1"), ch5x5, 3, name=f"{name}_branch3_2")
    # MaxPool2d(3, stride=1, padding=1, ceil_mode=True): with stride 1 ceil_mode changes nothing, and Keras'
    # 'same' max pool ignores the padded border as PyTorch's -inf padding does (exact for any input).
    b4 = layers.MaxPool2D(3, strides=1, padding="same", name=f"{name}_branch4_pool")(x)
    b4 = conv(b4, pool_proj, 1, name=f"{name}_branch4_proj")
    return layers.Concatenate(name=name)([b1, b2, b3, b4])


def aux_head(x, num_classes, dropout_rate, *, name, conv):
    """torchvision's InceptionAux: adaptive average pool onto 4x4 -> 1x1 conv (128) -> flatten -> 1024 + ReLU
    -> dropout -> logits (float32). Any feature size works (the adaptive pool repeats pixels below 4x4)."""
    y = AdaptiveAveragePooling2D((AUX_GRID, AUX_GRID), name=f"{name}_pool")(x)
    y = conv(y, AUX_CHANNELS, 1, name=f"{name}_conv")
    y = layers.Flatten(name=f"{name}_flatten")(y)  # NHWC order: see _adapt
    y = layers.Dense(AUX_HIDDEN, kernel_initializer=tf.keras.initializers.TruncatedNormal(stddev=0.01),
                     name=f"{name}_fc1")(y)
    y = layers.ReLU(name=f"{name}_fc1_relu")(y)
    if dropout_rate:
        y = layers.Dropout(dropout_rate, name=f"{name}_dropout")(y)
    return layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.TruncatedNormal(stddev=0.01),
                        dtype=logits_dtype(), name=f"{name}_fc2")(y)


def googlenet(*, num_classes, input_shape, name, aux_logits=False, dropout_rate=0.2, aux_dropout_rate=0.7,
              bn_epsilon=1e-3, bn_momentum=0.9):
    """The GoogLeNet builder (224x224 inputs; anything from 15x15 up works).

    aux_logits: add the two auxiliary classifiers; the model then returns [logits, aux1, aux2].
    dropout_rate: before the classifier. aux_dropout_rate: in the auxiliary heads.
    bn_momentum uses Keras' convention (moving = momentum * moving + (1 - momentum) * batch).
    """
    conv = functools.partial(conv_bn, bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    inputs = tf.keras.Input(input_shape, name="images")
    x = conv(inputs, 64, 7, strides=2, name="conv1")  # symmetric padding 3, as torchvision's
    x = ceil_max_pool(x, 3, 2, name="pool1")
    x = conv(x, 64, 1, name="conv2")
    x = conv(x, 192, 3, name="conv3")
    x = ceil_max_pool(x, 3, 2, name="pool2")
    # 28x28x192 at 224
    aux = []
    for stage in STAGES:
        if len(stage) == 3:
            x = ceil_max_pool(x, stage[1], stage[2], name=stage[0])
            continue
        x = inception_module(x, *stage[1:], name=stage[0], conv=conv)
        if aux_logits and stage[0] in AUX_AFTER:
            aux.append(aux_head(x, num_classes, aux_dropout_rate, name=AUX_AFTER[stage[0]], conv=conv))
    # 7x7x1024
    logits = classifier_head(x, num_classes, dropout_rate)
    return tf.keras.Model(inputs, [logits, *aux] if aux_logits else logits, name=name)


_STEM_MODULES = {"conv1": "conv1", "conv2": "conv2", "conv3": "conv3"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision module: inception4b_branch2_2_bn -> inception4b.branch2.1.bn,
    inception3a_branch4_proj_conv -> inception3a.branch4.1.conv, aux1_conv_bn -> aux1.conv.bn,
    aux2_fc1 -> aux2.fc1, head_fc -> fc."""
    if layer_name == "head_fc":
        return "fc"
    match = re.fullmatch(r"(aux[12])_(fc[12])", layer_name)
    if match:
        return f"{match[1]}.{match[2]}"
    match = re.fullmatch(r"(\w+?)_(conv|bn)", layer_name)
    if not match:
        return None
    unit, part = match[1], match[2]
    if unit in _STEM_MODULES or unit in ("aux1_conv", "aux2_conv"):
        return f"{unit.replace('_', '.')}.{part}"
    module = re.fullmatch(r"(inception\d[a-e])_branch(?:(1)|([23])_([12])|(4)_proj)", unit)
    if not module:
        return None
    if module[2]:
        return f"{module[1]}.branch1.{part}"
    if module[3]:
        return f"{module[1]}.branch{module[3]}.{int(module[4]) - 1}.{part}"
    return f"{module[1]}.branch4.1.{part}"


# torchvision's weights take (x - 0.5) / 0.5 inputs (of 1.0): loading them, torchvision's googlenet()
# turns on transform_input, which maps ImageNet-normalized channels x_c = (p - m_c) / s_c back to
# x_c * s_c / 0.5 + (m_c - 0.5) / 0.5 = (p - 0.5) / 0.5. tfcnn's model has no such transform; its data
# config asks the pipeline for those inputs directly: mean = std = 127.5 on the 0-255 scale. The
# evaluation transform is torchvision's ImageClassification(crop_size=224): 256 px resize, bilinear.
TORCHVISION_GOOGLENET_DATA = DataConfig(224, 224 / 256, (127.5,) * 3, (127.5,) * 3, "bilinear")

register_model(
    "googlenet", googlenet,
    # min_size 15: the stride-2 conv and the ceil-mode pools take 15 -> 8 -> 4 -> 2 -> 1 (pool4 keeps 1);
    # from 14 px (7 -> 3 -> 1) pool3's 3x3 window no longer fits. torchvision's min_size is 15 too.
    ModelInfo(name="googlenet", input_size=224, crop_fraction=0.875, mean=(127.5, 127.5, 127.5),
              std=(127.5, 127.5, 127.5), top1=69.778, params=6_624_904, gmacs=1.498, min_size=15,
              interpolation="bilinear", reference="torchvision googlenet"),
    WeightMap(reference_module, "torchvision googlenet", auxiliary=("aux1.", "aux2."),
              data_config=TORCHVISION_GOOGLENET_DATA, adapt=flattened_nchw(("aux1_fc1", "aux2_fc1"), AUX_GRID)))
