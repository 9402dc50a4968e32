"""SavedModel export with serving signatures that take images and return logits and probabilities.

Signatures:
- `serving_default(images)`: float32 [N, S, S, 3] RGB pixels in 0-255 at the model's size S;
- `classify_encoded(encoded)`: string [N] of encoded images (JPEG, PNG, BMP, GIF), resized and
  centre-cropped as in evaluation (the model's data config: crop, interpolation).
Both return {"logits": float32 [N, C], "probabilities": float32 [N, C]}; normalization (the data
config's mean and std) is inside, so callers need not know them. The exported graph is float32 whatever
precision trained it (portable to CPUs). `labels.txt` and `tfcnn.json` (model, size, classes, data
config, builder options) sit beside saved_model.pb. The directory appears only when complete.
"""
from __future__ import annotations

import json
import os
import shutil

import tensorflow as tf

from tfcnn.data import preprocessing, records
from tfcnn.fileio import replace_directory
from tfcnn.models import DataConfig, create_model

EXPORT_INFO_FILE = "tfcnn.json"


class ServingModule(tf.Module):
    def __init__(self, model, data_config: DataConfig):
        super().__init__()
        self.model = model
        self.data = data_config

    def classify_images(self, images):
        logits = self.model(preprocessing.normalize_batch(images, self.data.mean, self.data.std, tf.float32),
                            training=False)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    def classify_encoded(self, encoded):
        size = self.data.input_size
        images = tf.map_fn(lambda data: preprocessing.eval_image(data, size, self.data.crop_fraction,
                                                                 self.data.interpolation),
                           encoded, fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8))
        return self.classify_images(tf.cast(images, tf.float32))


def export_saved_model(model: tf.keras.Model, export_dir: str, data_dir: str | None = None) -> str:
    """Writes the SavedModel of a zoo model (weights copied into a float32 twin built with the same
    options) to export_dir, fed as `model.data_config` says. labels.txt comes from data_dir's."""
    image_size = model.input_shape[1]
    num_classes = model.output_shape[-1]
    data = model.data_config.replace(input_size=image_size)
    policy = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("float32")
    try:
        twin = create_model(model.name, num_classes=num_classes, input_shape=(image_size, image_size, 3),
                            **model.build_options)
    finally:
        tf.keras.mixed_precision.set_global_policy(policy)
    twin.set_weights(model.get_weights())
    module = ServingModule(twin, data)
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
        json.dump({"model": model.name, "image_size": image_size, "num_classes": num_classes,
                   "data_config": data.to_dict(), "options": dict(model.build_options)}, f, indent=1)
    replace_directory(tmp, export_dir)
    return export_dir
