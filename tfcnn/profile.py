"""Model cost: trainable parameters and forward GMACs (conv + dense multiply-accumulates).

Counted from the built Keras graph, per image, the way the torchvision/timm tables count them
(batch norm, activations, pooling and additions are not counted).

    python -m tfcnn.profile [--models resnet50,inception_v3] [--image_size 224]
"""
from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf  # imported where a model is counted: `--help` answers before TensorFlow loads


def count_params(model: tf.keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def count_macs(model: tf.keras.Model) -> int:
    """Multiply-accumulates of one forward pass for one image."""
    import tensorflow as tf

    macs = 0
    for layer in _all_layers(model):
        if isinstance(layer, tf.keras.layers.SeparableConv2D):  # depthwise, then pointwise (not Conv2D either)
            kernel_h, kernel_w, channels, multiplier = layer.depthwise_kernel.shape
            _, out_h, out_w, out_channels = layer.output.shape
            macs += out_h * out_w * channels * multiplier * (kernel_h * kernel_w + out_channels)
        elif isinstance(layer, tf.keras.layers.DepthwiseConv2D):  # not a Conv2D subclass
            kernel_h, kernel_w, channels, multiplier = layer.depthwise_kernel.shape
            _, out_h, out_w, _ = layer.output.shape
            macs += out_h * out_w * channels * multiplier * kernel_h * kernel_w
        elif isinstance(layer, tf.keras.layers.Conv2D):
            kernel_h, kernel_w, in_per_group, out_channels = layer.kernel.shape
            _, out_h, out_w, _ = layer.output.shape
            macs += out_h * out_w * out_channels * kernel_h * kernel_w * in_per_group
        elif isinstance(layer, tf.keras.layers.Dense):
            macs += int(np.prod(layer.kernel.shape))
    return int(macs)


def smallest_batch_norm_input(model: tf.keras.Model) -> tuple[str, tuple[int, ...]] | None:
    """(name, spatial shape of its input) of the batch norm whose input has the fewest positions: in
    training it normalizes batch x those positions values per channel, the fewest of the model's batch
    norms. None for a model without batch norm."""
    import tensorflow as tf

    inputs = [(layer.name, tuple(layer.input_shape[1:-1])) for layer in _all_layers(model)
              if isinstance(layer, tf.keras.layers.BatchNormalization)]
    return min(inputs, key=lambda name_and_shape: math.prod(name_and_shape[1]), default=None)


def _all_layers(model):
    import tensorflow as tf

    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            yield from _all_layers(layer)
        else:
            yield layer


def profile_model(name: str, image_size: int | None = None, num_classes: int = 1000) -> dict:
    """Params and GMACs of a registered model at `image_size` (default: its own input size). A ValueError
    names an unknown model or a size it does not take."""
    import tensorflow as tf

    from tfcnn.models import create_model, model_info, without_initializers

    if image_size is not None and (isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1):
        raise ValueError(f"image_size must be a positive integer, received: {image_size!r}")
    size = image_size or model_info(name).input_size
    with without_initializers():  # counted, never run
        model = create_model(name, num_classes=num_classes, input_shape=(size, size, 3))
    try:
        return {"model": name, "image_size": size, "params": count_params(model),
                "gmacs": count_macs(model) / 1e9}
    finally:
        del model
        tf.keras.backend.clear_session()


def main(argv=None):
    from tfcnn.options import command_parser

    parser = command_parser("python -m tfcnn.profile", __doc__)
    parser.add_argument("--models", default="all", help="comma-separated model names, or 'all'")
    parser.add_argument("--image_size", type=int, default=None, help="default: each model's input size")
    args = parser.parse_args(argv)
    if args.image_size is not None and args.image_size < 1:
        parser.error(f"--image_size must be a positive integer, received: {args.image_size}")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names:
        parser.error(f"--models must name at least one model, or 'all'; received: {args.models!r}")
    from tfcnn.models import list_models, model_info  # loads TensorFlow: after the flags' checks

    try:
        # every name checked before the first row (the reference's GMACs: the size each was published at)
        published = {name: model_info(name).gmacs for name in (list_models() if names == ["all"] else names)}
        print(f"{'model':<22}{'size':>6}{'params':>14}{'GMACs':>9}{'reference':>11}")
        for name, gmacs in published.items():
            row = profile_model(name, args.image_size)
            print(f"{name:<22}{row['image_size']:>6}{row['params']:>14,}{row['gmacs']:>9.3f}{gmacs:>11.3f}",
                  flush=True)
    except ValueError as error:
        sys.exit(f"tfcnn.profile: error: {error}")


if __name__ == "__main__":
    main()
