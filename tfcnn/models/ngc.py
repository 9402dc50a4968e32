"""NVIDIA's NGC TensorFlow networks as their scripts build them (nvidia-examples/cnn, 20.10-tf1): GoogLeNet,
Inception V3, Inception v4, Inception-ResNet v2 and Xception. One builder; each network is its script's layer
list, kept as data in the scripts' own shape.

The scripts write every network in one small vocabulary, nvutils' LayerBuilder (nvutils/builder.py), and lay
the Inception modules out as lists of columns, concatenated in the columns' order. tfcnn's torchvision / timm
definitions of the same papers differ from these in ways that change the function, so they are not reused:

- Inception V3 (inception_v3.py): its reduction-A module concatenates the double-3x3 column before the 3x3
  one; the last 8x8 module pools with a max pool, not an average; no auxiliary head; batch norm epsilon 1e-4.
- Inception v4 (inception_v4.py): the pooled column first in the A, B and C modules; the stem's factorized
  7x7 runs 7x1 before 1x7.
- Inception-ResNet v2 (inception_resnet_v2.py): Inception v4's stem, its own reduction B, no ReLU after any
  residual add, residual scale 0.2 throughout.
- GoogLeNet (googlenet.py): no batch norm (convolutions with biases and ReLU), a real 5x5 in the third column,
  no local response normalization, no auxiliary heads, no dropout.
- Xception (xception.py): timm's layer list, but max pools with TensorFlow's 'same' padding (windows start at
  the first pixel on even inputs), batch norm epsilon 1e-5 and decay 0.99, dropout 0.5 before the classifier.

What nvutils' builder does, and this builder with it:

- conv / sep: a convolution (separable: depthwise then pointwise) with TensorFlow's padding ('same' pads the
  bottom/right one pixel more on even inputs, as the scripts do; tfcnn's torchvision builders pad
  symmetrically), glorot-uniform kernels and zero biases (TF1's defaults); with batch norm, bias-free, then
  batch norm (nvutils: epsilon 1e-4, decay 0.9 = Keras momentum), then ReLU; without, a bias, then ReLU.
  linear / sep_linear: the same without the ReLU.
- max / avg: pools with TensorFlow's padding ('same' average pools count only the real pixels).
- module: an Inception module: each column's layers in order, 'share' taking the previous column's tensor at
  that depth, the columns' outputs concatenated.
- residual: nvutils' residual2d: the branch, then a linear 1x1 projection of the input where the channels or
  the size differ, input + scale x branch, no activation after it (the scripts never ask for one).
- the head (nvutils/runner.py): global average pool, the script's dropout, a dense layer to the logits.

The scripts' channels_first (their default image_format) is a memory layout for GPUs, not another function:
tfcnn computes NHWC, and tests/test_ngc_models.py compares it with the scripts' builder run channels_first.
Layer names: each step of the list by kind and count (`conv3`, `incept_v3_c2`), a module's columns and layers
within it (`incept_v3_c2_c3_4_conv`: column 3, layer 4).
"""
from __future__ import annotations

import tensorflow as tf

from tfcnn.models.layers import classifier_head
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.options import EVAL_CROPS, NGC_MEAN, NGC_README_TOP1, NGC_STD

layers = tf.keras.layers

SHARE = ("share",)
RELU = ("relu",)


def conv(filters, kernel, stride=1, padding="same"):
    return ("conv", filters, kernel, stride, padding)


def linear(filters, kernel, stride=1, padding="same"):
    return ("linear", filters, kernel, stride, padding)


def sep(filters, kernel, stride=1, padding="same"):
    return ("sep", filters, kernel, stride, padding)


def sep_linear(filters, kernel, stride=1, padding="same"):
    return ("sep_linear", filters, kernel, stride, padding)


def max_pool(size, stride, padding):
    return ("max", size, stride, padding)


def avg_pool(size, stride, padding):
    return ("avg", size, stride, padding)


def module(kind, *columns):
    return ("module", kind, columns)


def residual(kind, steps, units=None, scale=1.0):
    """nvutils' residual2d(x, branch, units, scale): units is the projection's width where one is needed."""
    return ("residual", kind, tuple(steps), units, scale)


# ---- the scripts' layer lists

def _inception_v1(c1, c3_reduce, c3, c5_reduce, c5, pool):
    return module("incept_v1", (conv(c1, 1),), (conv(c3_reduce, 1), conv(c3, 3)), (conv(c5_reduce, 1), conv(c5, 5)),
                  (max_pool(3, 1, "same"), conv(pool, 1)))


GOOGLENET = (
    conv(64, 7, 2), max_pool(3, 2, "same"), conv(64, 1), conv(192, 3), max_pool(3, 2, "same"),
    _inception_v1(64, 96, 128, 16, 32, 32), _inception_v1(128, 128, 192, 32, 96, 64), max_pool(3, 2, "same"),
    _inception_v1(192, 96, 208, 16, 48, 64), _inception_v1(160, 112, 224, 24, 64, 64),
    _inception_v1(128, 128, 256, 24, 64, 64), _inception_v1(112, 144, 288, 32, 64, 64),
    _inception_v1(256, 160, 320, 32, 128, 128), max_pool(3, 2, "same"),
    _inception_v1(256, 160, 320, 32, 128, 128), _inception_v1(384, 192, 384, 48, 128, 128),
)


def _v3_a(pool):
    return module("incept_v3_a", (conv(64, 1),), (conv(48, 1), conv(64, 5)), (conv(64, 1), conv(96, 3), conv(96, 3)),
                  (avg_pool(3, 1, "same"), conv(pool, 1)))


def _v3_c(n):
    return module("incept_v3_c", (conv(192, 1),), (conv(n, 1), conv(n, (1, 7)), conv(192, (7, 1))),
                  (conv(n, 1), conv(n, (7, 1)), conv(n, (1, 7)), conv(n, (7, 1)), conv(192, (1, 7))),
                  (avg_pool(3, 1, "same"), conv(192, 1)))


def _v3_e(pool):
    return module("incept_v3_e", (conv(320, 1),), (conv(384, 1), conv(384, (1, 3))), (SHARE, conv(384, (3, 1))),
                  (conv(448, 1), conv(384, 3), conv(384, (1, 3))), (SHARE, SHARE, conv(384, (3, 1))),
                  (pool(3, 1, "same"), conv(192, 1)))


INCEPTION_V3 = (
    conv(32, 3, 2, "valid"), conv(32, 3, 1, "valid"), conv(64, 3), max_pool(3, 2, "valid"), conv(80, 1, 1, "valid"),
    conv(192, 3, 1, "valid"), max_pool(3, 2, "valid"),
    _v3_a(32), _v3_a(64), _v3_a(64),
    module("incept_v3_b", (conv(64, 1), conv(96, 3), conv(96, 3, 2, "valid")), (conv(384, 3, 2, "valid"),),
           (max_pool(3, 2, "valid"),)),
    _v3_c(128), _v3_c(160), _v3_c(160), _v3_c(192),
    module("incept_v3_d", (conv(192, 1), conv(320, 3, 2, "valid")),
           (conv(192, 1), conv(192, (1, 7)), conv(192, (7, 1)), conv(192, 3, 2, "valid")), (max_pool(3, 2, "valid"),)),
    _v3_e(avg_pool), _v3_e(max_pool),
)

# Inception v4's stem, which Inception-ResNet v2's script uses too.
V4_STEM = (
    conv(32, 3, 2, "valid"), conv(32, 3, 1, "valid"), conv(64, 3),
    module("incept_v4_sa", (max_pool(3, 2, "valid"),), (conv(96, 3, 2, "valid"),)),
    module("incept_v4_sb", (conv(64, 1), conv(96, 3, 1, "valid")),
           (conv(64, 1), conv(64, (7, 1)), conv(64, (1, 7)), conv(96, 3, 1, "valid"))),
    module("incept_v4_sc", (conv(192, 3, 2, "valid"),), (max_pool(3, 2, "valid"),)),
)


def _v4_reduction_a(k, l, m, n):
    return module("incept_v4_ra", (max_pool(3, 2, "valid"),), (conv(n, 3, 2, "valid"),),
                  (conv(k, 1), conv(l, 3), conv(m, 3, 2, "valid")))


INCEPTION_V4 = V4_STEM + (
    module("incept_v4_a", (avg_pool(3, 1, "same"), conv(96, 1)), (conv(96, 1),), (conv(64, 1), conv(96, 3)),
           (conv(64, 1), conv(96, 3), conv(96, 3))),
) * 4 + (_v4_reduction_a(192, 224, 256, 384),) + (
    module("incept_v4_b", (avg_pool(3, 1, "same"), conv(128, 1)), (conv(384, 1),),
           (conv(192, 1), conv(224, (1, 7)), conv(256, (7, 1))),
           (conv(192, 1), conv(192, (1, 7)), conv(224, (7, 1)), conv(224, (1, 7)), conv(256, (7, 1)))),
) * 7 + (
    module("incept_v4_rb", (max_pool(3, 2, "valid"),), (conv(192, 1), conv(192, 3, 2, "valid")),
           (conv(256, 1), conv(256, (1, 7)), conv(320, (7, 1)), conv(320, 3, 2, "valid"))),
) + (
    module("incept_v4_c", (avg_pool(3, 1, "same"), conv(256, 1)), (conv(256, 1),), (conv(384, 1), conv(256, (1, 3))),
           (SHARE, conv(256, (3, 1))), (conv(384, 1), conv(448, (1, 3)), conv(512, (3, 1)), conv(256, (3, 1))),
           (SHARE, SHARE, SHARE, conv(256, (1, 3)))),
) * 3

INCEPTION_RESNET_V2 = V4_STEM + (
    residual("incept_resnet_v2_a", (module("mixed", (conv(32, 1),), (conv(32, 1), conv(32, 3)),
                                           (conv(32, 1), conv(48, 3), conv(64, 3))), linear(384, 1)), scale=0.2),
) * 5 + (_v4_reduction_a(256, 256, 384, 384),) + (
    residual("incept_resnet_v2_b", (module("mixed", (conv(192, 1),), (conv(128, 1), conv(160, (1, 7)),
                                                                      conv(192, (7, 1)))), linear(1152, 1)), scale=0.2),
) * 10 + (
    module("incept_resnet_v2_rb", (max_pool(3, 2, "valid"),), (conv(256, 1), conv(384, 3, 2, "valid")),
           (conv(256, 1), conv(256, 3, 2, "valid")), (conv(256, 1), conv(256, 3), conv(256, 3, 2, "valid"))),
) + (
    residual("incept_resnet_v2_c", (module("mixed", (conv(192, 1),), (conv(192, 1), conv(224, (1, 3)),
                                                                      conv(256, (3, 1)))), linear(2048, 1)), scale=0.2),
) * 5


def _xception_entry(width, activate_first=True):
    steps = (RELU,) if activate_first else ()
    return residual("entry", steps + (sep(width, 3), sep_linear(width, 3), max_pool(3, 2, "same")), units=width)


XCEPTION = (
    conv(32, 3, 2, "valid"), conv(64, 3, 1, "valid"),
    _xception_entry(128, activate_first=False), _xception_entry(256), _xception_entry(728),
) + (residual("middle", (RELU, sep(728, 3), sep(728, 3), sep_linear(728, 3))),) * 8 + (
    residual("exit", (RELU, sep(728, 3), sep_linear(1024, 3), max_pool(3, 2, "same")), units=1024),
    sep(1536, 3), sep(2048, 3),
)


# ---- the builder

def _layer(x, step, name, bn):
    """One step of nvutils' vocabulary that is not a module or a residual."""
    kind = step[0]
    if kind == "relu":
        return layers.ReLU(name=f"{name}_relu")(x)
    if kind in ("max", "avg"):
        pool = layers.MaxPool2D if kind == "max" else layers.AveragePooling2D
        _, size, stride, padding = step
        return pool(size, strides=stride, padding=padding, name=f"{name}_pool")(x)
    _, filters, kernel, stride, padding = step
    conv_layer = layers.SeparableConv2D if kind.startswith("sep") else layers.Conv2D
    x = conv_layer(filters, kernel, strides=stride, padding=padding, use_bias=bn is None, name=f"{name}_conv")(x)
    if bn is not None:
        x = layers.BatchNormalization(**bn, name=f"{name}_bn")(x)
    if kind in ("conv", "sep"):
        x = layers.ReLU(name=f"{name}_relu")(x)
    return x


def _module(x, columns, name, bn):
    """nvutils' inception_module: the columns in order, 'share' reusing the previous column's layer output at
    the same depth; the columns' last outputs concatenated."""
    built = []
    for c, column in enumerate(columns, start=1):
        y, outputs = x, []
        for depth, step in enumerate(column):
            y = built[-1][depth] if step == SHARE else _layer(y, step, f"{name}_c{c}_{depth + 1}", bn)
            outputs.append(y)
        built.append(outputs)
    return layers.Concatenate(name=name)([outputs[-1] for outputs in built])


def _residual(x, steps, units, scale, name, bn):
    """nvutils' residual2d: the branch first, then the input projected (linear 1x1, the stride that maps its size
    onto the branch's) where the channels or the size differ; input + scale x branch."""
    y = _sequence(x, steps, name, bn)
    strides = tuple((x.shape[i] - 1) // y.shape[i] + 1 for i in (1, 2))
    if x.shape[-1] != y.shape[-1] or strides != (1, 1):
        if units is None:
            raise ValueError(f"{name}: the branch changes the shape, and the network gives no projection width")
        x = _layer(x, linear(units, 1, strides), f"{name}_shortcut", bn)
    if scale != 1.0:
        y = layers.Rescaling(scale, name=f"{name}_scale")(y)
    return layers.Add(name=f"{name}_add")([x, y])


def _sequence(x, steps, prefix, bn):
    counts = {}
    for step in steps:
        kind = step[1] if step[0] in ("module", "residual") else step[0]
        counts[kind] = counts.get(kind, 0) + 1
        name = f"{prefix}{'_' if prefix else ''}{kind}{counts[kind]}"
        if step[0] == "module":
            x = _module(x, step[2], name, bn)
        elif step[0] == "residual":
            x = _residual(x, *step[2:], name, bn)
        else:
            x = _layer(x, step, name, bn)
    return x


def ngc_network(*, layer_list, batch_norm, num_classes, input_shape, name, dropout_rate=0.0, bn_epsilon=1e-4,
                bn_momentum=0.9):
    """The builder of the NGC scripts' networks: `layer_list` (GOOGLENET, INCEPTION_V3, ...) in nvutils'
    vocabulary, with batch norm (epsilon, Keras momentum = nvutils' decay) after every convolution or none
    (convolutions with biases), then the runner's head: global average pool -> dropout -> dense logits."""
    bn = dict(epsilon=bn_epsilon, momentum=bn_momentum) if batch_norm else None
    inputs = tf.keras.Input(input_shape, name="images")
    x = _sequence(inputs, layer_list, "", bn)
    logits = classifier_head(x, num_classes, dropout_rate, kernel_initializer="glorot_uniform")
    return tf.keras.Model(inputs, logits, name=name)


def _register(script, layer_list, *, input_size, min_size, params, gmacs, batch_norm=(1e-4, 0.9), dropout=0.0):
    """ngc_{script}: nvidia-examples/cnn/{script}.py's network. batch_norm: its (epsilon, decay), None for none;
    dropout: the script's rate before the classifier. Both are the model's defaults, which overrides replace.
    Reference top-1: what the scripts' README states (NGC_README_TOP1), else none."""
    name = f"ngc_{script}"
    info = ModelInfo(name=name, input_size=input_size, crop_fraction=EVAL_CROPS["ngc"], mean=NGC_MEAN, std=NGC_STD,
                     top1=NGC_README_TOP1.get(name, 0.0), params=params, gmacs=gmacs, min_size=min_size,
                     interpolation="bilinear", reference=f"NGC nvidia-examples/cnn {script}.py", eval_crop="ngc")
    defaults = dict(dropout_rate=dropout)
    if batch_norm:
        defaults.update(bn_epsilon=batch_norm[0], bn_momentum=batch_norm[1])
    register_model(name, ngc_network, info, defaults=defaults, layer_list=layer_list, batch_norm=bool(batch_norm))


# min_size: the 'valid' stems of the Inceptions need 75 px (as torchvision's Inception V3); Xception's two valid
# 3x3 convolutions 7; GoogLeNet pads everything 'same'.
_register("googlenet", GOOGLENET, input_size=224, min_size=1, batch_norm=None, params=6_998_552, gmacs=1.583)
_register("inception_v3", INCEPTION_V3, input_size=299, min_size=75, params=23_834_568, gmacs=5.713)
# builder.dropout(x, 0.8) passes a rate to tf.layers.dropout: 80% of the features are dropped in training.
_register("inception_v4", INCEPTION_V4, input_size=299, min_size=75, dropout=0.8, params=42_679_816, gmacs=12.254)
_register("inception_resnet_v2", INCEPTION_RESNET_V2, input_size=299, min_size=75, dropout=0.8, params=31_574_440,
          gmacs=9.191)
_register("xception", XCEPTION, input_size=299, min_size=7, batch_norm=(1e-5, 0.99), dropout=0.5,
          params=22_855_952, gmacs=8.357)
