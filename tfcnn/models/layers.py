"""Building blocks shared by the model families (Keras functional API, NHWC)."""
from __future__ import annotations

import numpy as np
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


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class AdaptiveAveragePooling2D(layers.Layer):
    """PyTorch's AdaptiveAvgPool2d: averages [H, W] onto a fixed (out_h, out_w) grid, output cell i covering
    input rows floor(i * H / out_h) to ceil((i + 1) * H / out_h) (overlapping when H is not a multiple, and
    repeating rows when H < out_h). Lets a fixed-size classifier (VGG, AlexNet) take any input size.
    Computed as two small averaging matrices (exact, and one einsum)."""

    def __init__(self, output_size, **kwargs):
        super().__init__(**kwargs)
        self.output_size = tuple(output_size)

    @staticmethod
    def _averaging_matrix(size, out):
        matrix = np.zeros((out, size), np.float32)
        for i in range(out):
            start, end = (i * size) // out, -((-(i + 1) * size) // out)
            matrix[i, start:end] = 1.0 / (end - start)
        return matrix

    def call(self, x):
        rows = tf.constant(self._averaging_matrix(x.shape[1], self.output_size[0]), x.dtype)
        cols = tf.constant(self._averaging_matrix(x.shape[2], self.output_size[1]), x.dtype)
        return tf.einsum("oh,bhwc,pw->bopc", rows, x, cols)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.output_size, input_shape[3])

    def get_config(self):
        return {**super().get_config(), "output_size": self.output_size}


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class DropPath(layers.Layer):
    """Stochastic depth (Huang et al., https://arxiv.org/abs/1603.09382): in training, zeroes a residual
    branch for a random `rate` of the samples and scales the others by 1 / (1 - rate); the identity at
    inference."""

    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = float(rate)

    def call(self, x, training=None):
        if not training or not self.rate:
            return x
        keep = 1.0 - self.rate
        shape = tf.concat([tf.shape(x)[:1], tf.ones([tf.rank(x) - 1], tf.int32)], 0)
        mask = tf.floor(keep + tf.random.uniform(shape, dtype=x.dtype))
        return x / keep * mask

    def get_config(self):
        return {**super().get_config(), "rate": self.rate}
