"""Class probabilities of images in memory, each fed as tfcnn.evaluate feeds it.

    probabilities = tfcnn.predict(result, x_test)     # [N, classes]; the source: anything tfcnn.evaluate takes
    classes = probabilities.argmax(axis=1)

The images are what tfcnn.train takes in memory: 0-255 RGB (or grayscale) NumPy arrays [N, H, W(, 3)] of any
size, or a tf.data.Dataset of images (or of (image, label) pairs, the labels ignored). Each gets the evaluation
view of the weights' data config (resized and centre-cropped to the input size, unless already that size) and
their normalization. A zoo model (create_model(...), RunResult.model) takes normalized images, not pixels:
calling it on pixels gives other classes (it warns); this is the call that takes pixels. Under horovodrun each
rank predicts every image.
"""
from __future__ import annotations

from tfcnn import callable_module


def predict(source, images, *, batch_size: int = 256, model: str | None = None, precision: str = "fp32",
            image_size: int | None = None, crop_fraction: float | None = None, interpolation: str | None = None,
            eval_crop: str | None = None, log=print):
    """float32 class probabilities [N, classes] of `images` (see the module docstring), in their order.
    source, model and the feed overrides: as tfcnn.evaluate takes them. A ValueError names a bad value."""
    import numpy as np
    import tensorflow as tf

    from tfcnn.data import memory
    from tfcnn.evaluate import load_predictor

    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, received: {batch_size}")
    if isinstance(images, tf.data.Dataset):
        spec = images.element_spec
        if isinstance(spec, tuple) and len(spec) == 2:  # (image, label): the labels are not needed
            images, spec = images.map(lambda image, _: image), spec[0]
        if not isinstance(spec, tf.TensorSpec):
            raise ValueError(f"images: a Dataset of images or of (image, label) pairs is needed, received elements "
                             f"{images.element_spec}")
        # a label of 0 for each image (or each of a batch's) as evaluation's batches carry them
        data = images.map(lambda image: (image, tf.zeros(tf.shape(image)[:1], tf.int64) if image.shape.rank == 4
                                         else tf.constant(0, tf.int64)))
    else:
        x = np.asarray(images)
        data = (x, np.zeros(len(x) if x.ndim else 0, np.int64))
    memory.check(data, "images")  # before any weights load
    network, run = load_predictor(source, model=model, precision=precision, image_size=image_size,
                                  crop_fraction=crop_fraction, interpolation=interpolation, eval_crop=eval_crop,
                                  log=log)
    view = run["data_config"]
    batches = memory.eval_batches(data, batch_size=batch_size, image_size=view.input_size,
                                  num_classes=run["num_classes"], crop_fraction=view.crop_fraction,
                                  interpolation=view.interpolation, eval_crop=view.eval_crop, what="images")
    probabilities = [tf.nn.softmax(tf.cast(network(batch), tf.float32)).numpy() for batch, _ in batches]
    return np.concatenate(probabilities) if probabilities else np.zeros((0, run["num_classes"]), np.float32)


callable_module(__name__, predict)
