"""Building blocks shared by the model families (Keras functional API, NHWC)."""
from __future__ import annotations

import tensorflow as tf

layers = tf.keras.layers


def conv_init():
    """He-normal on fan_out, as torchvision and NVIDIA initialize ResNet convolutions. A fresh
    instance per layer: Keras gives a reused unseeded initializer identical values every call."""
    return tf.keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="truncated_normal")


def conv_bn(x, filters, kernel_size, *, name, strides=1, groups=1, activation=True,
            bn_epsilon=1e-5, bn_momentum=0.9, zero_gamma=False, padding="same"):
    """Conv (no bias) -> BatchNorm -> optional ReLU.

    Strided 'same' convolutions are padded explicitly and symmetrically (k // 2 on every side), as in
    the PyTorch references: TF's own 'same' pads the bottom/right only for even inputs, which shifts
    every strided feature map by half a pixel and makes reference weights misalign.
    """
    kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if padding == "same" and strides > 1 and max(kernel_size) > 1:
        x = layers.ZeroPadding2D(tuple((k // 2, k // 2) for k in kernel_size), name=f"{name}_pad")(x)
        padding = "valid"
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, groups=groups,
                      use_bias=False, kernel_initializer=conv_init(), name=f"{name}_conv")(x)
    x = layers.BatchNormalization(epsilon=bn_epsilon, momentum=bn_momentum,
                                  gamma_initializer="zeros" if zero_gamma else "ones", name=f"{name}_bn")(x)
    if activation:
        x = layers.ReLU(name=f"{name}_relu")(x)
    return x


def squeeze_excite(x, reduction, name):
    """Squeeze-and-excitation (Hu et al., https://arxiv.org/abs/1709.01507): channel gates from
    globally pooled features through a bottleneck of channels // reduction (1x1 convs with bias)."""
    channels = x.shape[-1]
    s = layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_squeeze")(x)
    s = layers.Conv2D(channels // reduction, 1, kernel_initializer=conv_init(), name=f"{name}_reduce")(s)
    s = layers.ReLU(name=f"{name}_relu")(s)
    s = layers.Conv2D(channels, 1, activation="sigmoid", kernel_initializer=conv_init(), name=f"{name}_expand")(s)
    return layers.Multiply(name=f"{name}_scale")([x, s])


def classifier_head(x, num_classes, dropout_rate, name="head"):
    """Global average pool -> dropout -> dense logits. The dense layer runs in float32 so logits
    are float32 under mixed_float16 / mixed_bfloat16 (the loss and softmax stay stable)."""
    x = layers.GlobalAveragePooling2D(name=f"{name}_pool")(x)
    if dropout_rate:
        x = layers.Dropout(dropout_rate, name=f"{name}_dropout")(x)
    return layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                        dtype="float32", name=f"{name}_fc")(x)
