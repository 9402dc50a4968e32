"""AlexNet in torchvision's form: the "one weird trick" variant (Krizhevsky, https://arxiv.org/abs/1404.5997).

Five convolutions with biases (64, 192, 384, 256, 256 filters; the first 11x11 with stride 4), ReLU, three
3x3 stride-2 max pools without padding, no normalization; an adaptive average pool onto the 6x6 grid the
classifier was trained on (so any input from 63 px up works), then dropout -> 4096 -> dropout -> 4096 ->
logits. Parameter count, layer order and padding equal torchvision's `alexnet`, whose state dicts load.

`ngc_alexnet` is the same builder as NVIDIA's NGC script nvidia-examples/cnn/alexnet.py (20.10-tf1) builds
AlexNet-OWT: 227 px, the first convolution unpadded ("VALID requires padding the images by 3"), the others
padded 'same' (as here), and each dropout after a hidden dense layer's ReLU instead of before the layer. At
227 px the maps before the classifier are 6x6, where the adaptive pool is the identity, as the script
flattens them.
"""
from __future__ import annotations

import tensorflow as tf

from tfcnn.models.layers import AdaptiveAveragePooling2D, conv_init, dense_classifier
from tfcnn.models.registry import ModelInfo, register_model
from tfcnn.models.weights import (IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DATA, WeightMap, flattened_nchw,
                                  sequential_conv_modules)
from tfcnn.options import EVAL_CROPS, NGC_MEAN, NGC_STD

layers = tf.keras.layers

# (filters, kernel, stride, padding, max pool after it) of each convolution, in torchvision's order.
CONVS = ((64, 11, 4, 2, True), (192, 5, 1, 2, True), (384, 3, 1, 1, False), (256, 3, 1, 1, False),
         (256, 3, 1, 1, True))
POOLED_GRID = 6  # the classifier reads 256 x 6 x 6 features
HIDDEN = 4096


def alexnet(*, num_classes, input_shape, name, conv1_padding=2, dropout_after=False, dropout_rate=0.5):
    """The AlexNet builder. dropout_rate: of the dropout before each of the two hidden dense layers, or after
    each (dropout_after; training only). conv1_padding: of the first convolution (torchvision's 2, the NGC
    script's 0)."""
    inputs = tf.keras.Input(input_shape, name="images")
    x = inputs
    for index, (filters, kernel, stride, padding, pool) in enumerate(CONVS, start=1):
        padding = conv1_padding if index == 1 else padding
        prefix = f"features_conv{index}"
        # Explicit symmetric padding then a 'valid' conv: TF's 'same' would pad the strided 11x11
        # conv asymmetrically (and 'same' is not even this padding for it).
        x = layers.ZeroPadding2D(padding, name=f"{prefix}_pad")(x)
        x = layers.Conv2D(filters, kernel, strides=stride, padding="valid", kernel_initializer=conv_init(),
                          name=f"{prefix}_conv")(x)
        x = layers.ReLU(name=f"{prefix}_relu")(x)
        if pool:
            x = layers.MaxPool2D(3, strides=2, padding="valid", name=f"{prefix}_pool")(x)
    # 6x6x256 at 224 (conv1 55x55, pools 27, 13, 6)
    x = AdaptiveAveragePooling2D((POOLED_GRID, POOLED_GRID), name="avgpool")(x)
    x = layers.Flatten(name="flatten")(x)  # NHWC order: see _adapt
    logits = dense_classifier(x, (HIDDEN, HIDDEN), num_classes, dropout_rate, dropout_after)
    return tf.keras.Model(inputs, logits, name=name)


# classifier: Dropout(0), Linear(1), ReLU, Dropout, Linear(4), ReLU, Linear(6).
_MODULES = {**sequential_conv_modules([pool for *_, pool in CONVS]), "classifier_fc1": "classifier.1",
            "classifier_fc2": "classifier.4", "head_fc": "classifier.6"}


def reference_module(layer_name):
    """tfcnn layer -> torchvision module: features_conv3_conv -> features.6, classifier_fc2 -> classifier.4."""
    return _MODULES.get(layer_name)


register_model(
    "alexnet", alexnet,
    # min_size 63: the 11x11 stride-4 conv (padding 2) and three 3x3 stride-2 pools need 63 px to leave
    # at least one pixel: 63 -> 15 -> 7 -> 7 -> 3 -> 3 -> 1 (torchvision's min_size too).
    ModelInfo(name="alexnet", input_size=224, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD,
              top1=56.522, params=61_100_840, gmacs=0.714, min_size=63, interpolation="bilinear",
              reference="torchvision alexnet"),
    WeightMap(reference_module, "torchvision alexnet", classifier="classifier.6", data_config=TORCHVISION_DATA,
              adapt=flattened_nchw(("classifier_fc1",), POOLED_GRID)))

register_model(
    "ngc_alexnet", alexnet,
    # min_size 67: without the first convolution's padding, (15 - 1) x 4 + 11 px leave 15 -> 7 -> 7 -> 3 -> 3 -> 1.
    ModelInfo(name="ngc_alexnet", input_size=227, crop_fraction=EVAL_CROPS["ngc"], mean=NGC_MEAN, std=NGC_STD,
              top1=0.0, params=61_100_840, gmacs=0.714, min_size=67, interpolation="bilinear",
              reference="NGC nvidia-examples/cnn alexnet.py", eval_crop="ngc"),
    conv1_padding=0, dropout_after=True)
