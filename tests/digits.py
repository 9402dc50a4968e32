"""A small real image set: scikit-learn's handwritten digits (tests/fixtures/digits.npz, recorded by
tests/scripts/record_digits.py; 1,437 train / 360 validation, 10 classes), drawn at a training size as a
notebook user would: the 17 grey levels scaled to 0-255, the 8x8 pixels resized bilinearly, and (rgb=True) the
grey repeated over R, G and B. The issue-47 shape of problem (tests/test_python_api.py,
tests/scripts/measure_small_images.py)."""
import os

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "digits.npz")


def load(size: int = 32, rgb: bool = True):
    """((x_train, y_train), (x_val, y_val)): x uint8 [N, size, size, 3] (rgb=False: the grey, [N, size, size]),
    y int64 [N]."""
    import tensorflow as tf

    def draw(levels):
        grey = tf.image.resize(levels[..., None].astype(np.float32) * (255 / 16), [size, size], method="bilinear")
        grey = np.round(np.clip(grey.numpy(), 0, 255)).astype(np.uint8)
        return np.repeat(grey, 3, axis=-1) if rgb else grey[..., 0]

    with np.load(FIXTURE) as data:
        return ((draw(data["x_train"]), data["y_train"].astype(np.int64)),
                (draw(data["x_val"]), data["y_val"].astype(np.int64)))
