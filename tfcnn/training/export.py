"""SavedModel export with serving signatures that take images and return logits and probabilities.

Signatures:
- `serving_default(images)`: float32 [N, S, S, 3] RGB pixels in 0-255 at the model's size S;
- `classify_encoded(encoded)`: string [N] of encoded images (JPEG, PNG, BMP, GIF), centre-cropped and
  resized as in evaluation.
Both return {"logits": float32 [N, C], "probabilities": float32 [N, C]}; normalization is inside, so
callers need not know the model's mean and std. The exported graph is float32 whatever precision
trained it (portable to CPUs). `labels.txt` and `tfcnn.json` (model, size, classes) sit beside
saved_model.pb. The directory appears only when complete.
"""
from __future__ import annotations

import json
import os
import shutil

import tensorflow as tf

from tfcnn.data import preprocessing, records
from tfcnn.fileio import replace_directory
from tfcnn.models import create_model, model_info

EXPORT_INFO_FILE = "tfcnn.json"


class ServingModule(tf.Module):
    def __init__(self, model, image_size, mean, std, crop_fraction):
        super().__init__()
        self.model = model
        self.image_size, self.mean, self.std, self.crop_fraction = image_size, mean, std, crop_fraction

    def classify_images(self, images):
        logits = self.model(preprocessing.normalize_batch(images, self.mean, self.std, tf.float32), training=False)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    def classify_encoded(self, encoded):
        def one(data):
            pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
            return preprocessing.eval_image_from_pixels(pixels, self.image_size, self.crop_fraction)

        size = self.image_size
        images = tf.map_fn(one, encoded, fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8))
        return self.classify_images(tf.cast(images, tf.float32))


def export_saved_model(model_name: str, model: tf.keras.Model, export_dir: str, num_classes: int,
                       image_size: int, data_dir: str | None = None) -> str:
    """Writes the SavedModel of `model` (weights copied into a float32 twin) to export_dir."""
    info = model_info(model_name)
    policy = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("float32")
    try:
        twin = create_model(model_name, num_classes=num_classes, input_shape=(image_size, image_size, 3))
    finally:
        tf.keras.mixed_precision.set_global_policy(policy)
    twin.set_weights(model.get_weights())
    module = ServingModule(twin, image_size, info.mean, info.std, info.crop_fraction)
    images_fn = tf.function(module.classify_images,
                            input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32, "images")])
    encoded_fn = tf.function(module.classify_encoded, input_signature=[tf.TensorSpec([None], tf.string, "encoded")])
    export_dir = os.path.abspath(export_dir)
    tmp = f"{export_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tf.saved_model.save(module, tmp, signatures={"serving_default": images_fn.get_concrete_function(),
                                                  "classify_encoded": encoded_fn.get_concrete_function()})
    labels = records.read_labels(data_dir) if data_dir else None
    if labels and len(labels) == num_classes:
        records.write_labels(tmp, labels)
    with open(os.path.join(tmp, EXPORT_INFO_FILE), "w") as f:
        json.dump({"model": model_name, "image_size": image_size, "num_classes": num_classes,
                   "crop_fraction": info.crop_fraction, "mean": info.mean, "std": info.std}, f, indent=1)
    replace_directory(tmp, export_dir)
    return export_dir
