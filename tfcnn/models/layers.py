"""Building blocks shared by the model families (Keras functional API, NHWC)."""
from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from tfcnn.data.preprocessing import normalize_batch
from tfcnn.precision import has_gpu, onednn_enabled

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
    conv = GroupedConv2D if groups > 1 else layers.Conv2D
    x = conv(filters, kernel_size, strides=strides, padding=padding, groups=groups, use_bias=False,
             kernel_initializer=conv_init(), name=f"{name}_conv")(x)
    x = layers.BatchNormalization(epsilon=bn_epsilon, momentum=bn_momentum,
                                  gamma_initializer="zeros" if zero_gamma else "ones", name=f"{name}_bn")(x)
    if activation:
        x = layers.ReLU(name=f"{name}_relu")(x)
    return x


@functools.lru_cache(maxsize=None)
def trains_grouped_natively(dtype: str) -> bool:
    """Whether TensorFlow's own kernels here compute a grouped convolution's gradients in `dtype`: oneDNN's
    CPU kernels do in float32, and in bfloat16 where TensorFlow hands bfloat16 to oneDNN (CPUs with AVX-512),
    not in float16 (on a 2-core AVX-512 EPYC); Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0, and float64's always)
    have none. With a GPU: False, Keras' own path (not measured here)."""
    if has_gpu() or dtype == "float64" or not onednn_enabled():
        return False  # Eigen's: known without trying (a failed try logs TensorFlow's "not supported" warning)
    # Tried once per dtype and process: the two gradient kernels themselves (a tape records nothing inside
    # init_scope), eagerly, also while a model is being traced. 2 groups of 2 channels (of 1 channel each it
    # would be a depthwise convolution, which Eigen's kernels do train).
    with tf.init_scope(), tf.device("/CPU:0"):
        kernel, gradient = tf.ones((1, 1, 2, 4), dtype), tf.ones((1, 2, 2, 4), dtype)
        try:
            tf.raw_ops.Conv2DBackpropInput(input_sizes=[1, 2, 2, 4], filter=kernel, out_backprop=gradient,
                                           strides=[1, 1, 1, 1], padding="VALID")
            tf.raw_ops.Conv2DBackpropFilter(input=gradient, filter_sizes=[1, 1, 2, 4], out_backprop=gradient,
                                            strides=[1, 1, 1, 1], padding="VALID")
        except tf.errors.OpError:
            return False
    return True


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class GroupedConv2D(layers.Conv2D):
    """Keras' Conv2D for groups > 1 (ResNeXt's 3x3 convolutions), on TensorFlow's own grouped kernels where
    they train (trains_grouped_natively): oneDNN's CPU kernels in float32 and bfloat16. Keras compiles every
    grouped convolution with XLA instead (Eigen's CPU kernels have no grouped gradient), whose CPU code for
    it is far slower: ResNeXt-50's training step at 224 px, batch 8, 54 s against 1.3 s (bench/grouped_conv.py,
    2-core AVX-512 EPYC). Elsewhere (Eigen's kernels, float16, float64, GPUs) it is Keras' layer as is.
    Conv2D's weights, checkpoints and config keys."""

    def call(self, inputs):
        if not trains_grouped_natively(self.compute_dtype):
            return super().call(inputs)
        outputs = self.convolution_op(inputs, self.kernel)
        if self.use_bias:
            outputs = tf.nn.bias_add(outputs, self.bias, data_format="NHWC" if self.data_format == "channels_last"
                                     else "NCHW")
        return outputs if self.activation is None else self.activation(outputs)

    def build_from_config(self, config):
        # Keras builds a deserialized custom layer outside its name scope: its weights would lose the layer's
        # name (kernel:0, not stage1_block1_conv2_conv/kernel:0) in a model rebuilt from its config.
        with tf.name_scope(self.name + "/"):
            super().build_from_config(config)


def grouped_convolutions_note(model) -> str | None:
    """What a CPU run should know when `model`'s grouped convolutions take Keras' XLA path, with the setting
    that avoids it; None when they run on TensorFlow's own kernels, on a GPU, or the model has none."""
    grouped = [layer for layer in model.layers if isinstance(layer, GroupedConv2D)]
    dtype = grouped[0].compute_dtype if grouped else None
    if not grouped or has_gpu() or trains_grouped_natively(dtype):
        return None
    fix = ("--precision fp32 (or bf16 on CPUs with AVX-512) keeps them on oneDNN's" if onednn_enabled() else
           "TF_ENABLE_ONEDNN_OPTS=1 selects oneDNN's CPU kernels, which have it (fp32, bf16)")
    return (f"{len(grouped)} grouped convolutions: TensorFlow's CPU kernels here have no grouped gradient in {dtype}, "
            f"so they run through XLA, tens of times slower a step (bench/grouped_conv.py); {fix}")


def squeeze_excite(x, reduced_channels, name, activation="relu"):
    """Squeeze-and-excitation (Hu et al., https://arxiv.org/abs/1709.01507): channel gates from globally
    pooled features through a bottleneck of `reduced_channels` (1x1 convs with bias, `activation` between,
    sigmoid gate). SE-ResNeXt squeezes to channels // 16 with ReLU; EfficientNet to a quarter of the
    block's input channels with SiLU."""
    s = layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_squeeze")(x)
    s = layers.Conv2D(reduced_channels, 1, kernel_initializer=conv_init(), name=f"{name}_reduce")(s)
    s = activation_layer(activation, f"{name}_{activation}")(s)
    s = layers.Conv2D(x.shape[-1], 1, activation="sigmoid", kernel_initializer=conv_init(), name=f"{name}_expand")(s)
    return layers.Multiply(name=f"{name}_scale")([x, s])


def make_divisible(value, divisor=8, round_limit=0.9):
    """Nearest multiple of `divisor` (at least `divisor`), one step up if that lost more than
    1 - round_limit of `value`: the channel rounding of TF's MobileNet / EfficientNet code, which
    torchvision (`_make_divisible`) and timm (`make_divisible`) repeat."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < round_limit * value else rounded


def activation_layer(kind, name):
    """'relu', 'silu' (x * sigmoid(x), a.k.a. swish) or 'relu6' (min(max(x, 0), 6))."""
    if kind == "relu":
        return layers.ReLU(name=name)
    if kind == "silu":
        return layers.Activation("swish", name=name)
    if kind == "relu6":
        return layers.ReLU(6.0, name=name)
    raise ValueError(f"activation must be 'relu', 'silu' or 'relu6', received: {kind!r}")


def conv_bn_act(x, filters, kernel_size, *, name, activation, strides=1, bn):
    """conv_bn (bias-free conv, symmetric padding, BN) -> `activation` (None: linear)."""
    x = conv_bn(x, filters, kernel_size, strides=strides, activation=False, name=name, **bn)
    return activation_layer(activation, f"{name}_act")(x) if activation else x


def depthwise_bn_act(x, kernel_size, *, name, activation, strides=1, bn_epsilon=1e-5, bn_momentum=0.9):
    """Depthwise kxk conv (no bias) -> BN -> activation, padded k // 2 on every side as PyTorch does
    (Keras' 'same' would pad bottom/right only when strided: see layers.conv_bn)."""
    padding = "same"
    if strides > 1:
        x = layers.ZeroPadding2D(kernel_size // 2, name=f"{name}_pad")(x)
        padding = "valid"
    x = layers.DepthwiseConv2D(kernel_size, strides=strides, padding=padding, use_bias=False,
                               depthwise_initializer=conv_init(), name=f"{name}_conv")(x)
    x = layers.BatchNormalization(epsilon=bn_epsilon, momentum=bn_momentum, name=f"{name}_bn")(x)
    return activation_layer(activation, f"{name}_act")(x)


def inverted_residual(x, out_channels, *, name, kernel_size=3, stride=1, mid_channels=None, activation,
                      se_channels=0, drop_path_rate=0.0, bn):
    """The mobile inverted bottleneck (MobileNetV2's block; EfficientNet's MBConv):

    [1x1 expand to mid_channels -> BN -> act] -> depthwise kxk (stride) -> BN -> act -> [SE] ->
    1x1 linear projection -> BN [-> drop path, + input].

    mid_channels: the expanded width; None for no expansion (the depthwise conv works on the input:
    MobileNetV2's t=1 block, EfficientNet's depthwise-separable first stage). se_channels: the SE
    bottleneck width, 0 for none. The identity shortcut exists when the shape is kept (stride 1, as
    many channels in as out); drop_path_rate is its stochastic depth (training only).
    Layers: {name}_expand_*, {name}_dw_*, {name}_se_*, {name}_project_*, {name}_drop_path, {name}_add.
    """
    shortcut = x
    if mid_channels is not None:
        x = conv_bn_act(x, mid_channels, 1, name=f"{name}_expand", activation=activation, bn=bn)
    x = depthwise_bn_act(x, kernel_size, strides=stride, name=f"{name}_dw", activation=activation, **bn)
    if se_channels:
        x = squeeze_excite(x, se_channels, f"{name}_se", activation)
    x = conv_bn_act(x, out_channels, 1, name=f"{name}_project", activation=None, bn=bn)
    if stride == 1 and shortcut.shape[-1] == out_channels:
        if drop_path_rate:
            x = DropPath(drop_path_rate, name=f"{name}_drop_path")(x)
        x = layers.Add(name=f"{name}_add")([shortcut, x])
    return x


def dense_classifier(x, hidden, num_classes, dropout_rate, dropout_after=False):
    """[dropout ->] dense -> ReLU [-> dropout] per width of `hidden` (classifier_fc1, ...), then the logits
    (head_fc, logits_dtype()): AlexNet's and OverFeat's classifier, on flattened features. The dropout comes
    before each hidden dense layer (torchvision's AlexNet), or after its ReLU with dropout_after (the NGC
    script's AlexNet-OWT)."""
    for index, units in enumerate(hidden, start=1):
        if dropout_rate and not dropout_after:
            x = layers.Dropout(dropout_rate, name=f"classifier_fc{index}_dropout")(x)
        x = layers.Dense(units, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                         name=f"classifier_fc{index}")(x)
        x = layers.ReLU(name=f"classifier_fc{index}_relu")(x)
        if dropout_rate and dropout_after:
            x = layers.Dropout(dropout_rate, name=f"classifier_fc{index}_dropout")(x)
    return layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                        dtype=logits_dtype(), name="head_fc")(x)


def logits_dtype() -> str:
    """The dtype of a model's logits layers: float32, also under mixed precision (the loss and softmax stay
    stable), float64 under a float64 policy."""
    return "float64" if tf.keras.mixed_precision.global_policy().variable_dtype == "float64" else "float32"


def classifier_head(x, num_classes, dropout_rate, name="head", kernel_initializer=None):
    """Global average pool -> dropout -> dense logits. The dense layer runs in float32 so logits
    are float32 under mixed_float16 / mixed_bfloat16 (the loss and softmax stay stable).
    kernel_initializer: default normal with std 0.01 (torchvision's)."""
    x = layers.GlobalAveragePooling2D(name=f"{name}_pool")(x)
    if dropout_rate:
        x = layers.Dropout(dropout_rate, name=f"{name}_dropout")(x)
    return layers.Dense(num_classes, kernel_initializer=kernel_initializer or tf.keras.initializers.RandomNormal(
        stddev=0.01), dtype=logits_dtype(), name=f"{name}_fc")(x)


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


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class PixelNormalization(layers.Layer):
    """0-255 RGB pixels -> (pixels - mean) / std per channel (mean, std on the 0-255 scale), in the layer's
    compute dtype: the first layer of a model built with create_model(..., include_preprocessing=True).

    It is the trainer's own normalize_batch, so such a model computes exactly what the trainer feeds the
    network: in float32 (float64 under a float64 policy), then cast to the compute dtype. Keras' autocast
    is off because it would cast float inputs to float16 before the subtraction under mixed_float16. The
    constants are config, not weights: the layer adds nothing to weight lists or checkpoints."""

    def __init__(self, mean, std, **kwargs):
        super().__init__(**{**kwargs, "autocast": False})
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"mean and std must be 3 numbers (std > 0) on the 0-255 scale, received: "
                             f"{mean!r}, {std!r}")

    def call(self, images):
        return normalize_batch(images, self.mean, self.std, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "std": self.std}
