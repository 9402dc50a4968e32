"""SavedModel export with serving signatures that take images and return logits and probabilities.

Signatures:
- `serving_default(images)`: float32 [N, S, S, 3] RGB pixels in 0-255 at the model's size S;
- `classify_encoded(encoded)`: string [N] of encoded images (JPEG, PNG, BMP, GIF), resized and
  centre-cropped as in evaluation (the model's data config: crop, interpolation).
Both return {"logits": float32 [N, C], "probabilities": float32 [N, C]}; normalization (the data
config's mean and std) is inside, so callers need not know them, and happens once, also for a model
built with `include_preprocessing=True` (see serving_module). The exported graph is float32 whatever
precision trained it (portable to CPUs). `labels.txt` and `tfcnn.json` (model, size, classes, data
config, builder options) sit beside saved_model.pb. The directory appears only when complete.

The ONNX export (tfcnn.onnx_export) converts the same `serving_default` function and writes the same
two files beside its model.onnx: `serving_module`, `write_export_info` and `staged_directory` are theirs.
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from tfcnn import fileio
from tfcnn.data import preprocessing, records
from tfcnn.models import DataConfig, create_model
from tfcnn.sources import EXPORT_INFO_FILE  # EXPORT_INFO_FILE: onnx_export's and the tests' too

IMAGES_INPUT = "images"
OUTPUTS = ("logits", "probabilities")


class ServingModule(tf.Module):
    def __init__(self, model, data_config: DataConfig):
        super().__init__()
        # The SavedModel keeps the model's variables and the two signatures, not the Keras model object:
        # tracked as a child, tf_keras would serialize it layer by layer, tracing every layer's call for
        # its own loader (25 of a ResNet-50 export's 26 s on a 2-core CPU), and every load would restore it.
        self.model_variables = list(model.variables)
        object.__setattr__(self, "model", model)  # untracked
        self.data = data_config

    def classify_images(self, images):
        logits = self.model(preprocessing.normalize_batch(images, self.data.mean, self.data.std, tf.float32),
                            training=False)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    def classify_encoded(self, encoded):
        size = self.data.input_size
        images = tf.map_fn(lambda data: preprocessing.eval_image(data, size, self.data.crop_fraction,
                                                                 self.data.interpolation, self.data.eval_crop),
                           encoded, fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8))
        return self.classify_images(tf.cast(images, tf.float32))

    def images_function(self, checked: bool = False) -> tf.types.experimental.GenericFunction:
        """`serving_default`: float32 [None, S, S, 3] pixels in 0-255 (any batch) -> logits, probabilities.
        The SavedModel signs it and the ONNX export converts it, so both compute one function. checked (the
        SavedModel's): images of another size are refused, naming theirs; a signature does not check the
        shapes it declares, and its graph failed deep inside, naming none of them (ONNX Runtime checks them)."""
        size = self.data.input_size

        def classify_images(images):
            if checked:
                tf.debugging.assert_equal(
                    tf.shape(images)[1:], tf.constant([size, size, 3]),
                    message=f"serving_default takes float32 [N, {size}, {size}, 3] RGB images (0-255): resize them "
                            f"to {size}x{size}, or pass image files' bytes to classify_encoded (any size); received "
                            f"[H, W, C]")
            return self.classify_images(images)

        return tf.function(classify_images,
                           input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, IMAGES_INPUT)])

    def encoded_function(self) -> tf.types.experimental.GenericFunction:
        return tf.function(self.classify_encoded, input_signature=[tf.TensorSpec([None], tf.string, "encoded")])


def serving_module(model: tf.keras.Model) -> ServingModule:
    """The serving module of a zoo model: its weights copied into a float32 twin built with the same
    options (whatever precision trained it), fed as `model.data_config` says at the model's input size.

    The twin never includes preprocessing, and the module normalizes once: a model built with
    include_preprocessing=True is exported as its network (its normalization layer holds no weights), so its
    SavedModel and ONNX files are those of the same weights without it."""
    image_size = model.input_shape[1]
    data = model.data_config.replace(input_size=image_size)
    inside = getattr(model, "preprocessing_layer", None)
    if inside is not None and (inside.mean, inside.std) != (data.mean, data.std):
        raise ValueError(f"{model.name} normalizes its 0-255 input with mean {inside.mean} and std {inside.std}, "
                         f"but its data_config says mean {data.mean} and std {data.std}: build it with "
                         f"create_model(..., include_preprocessing=True, data_config=...) instead of changing "
                         f"model.data_config")
    policy = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("float32")
    try:
        twin = create_model(model.name, num_classes=model.output_shape[-1], input_shape=(image_size, image_size, 3),
                            **model.build_options)
    finally:
        tf.keras.mixed_precision.set_global_policy(policy)
    twin.set_weights(model.get_weights())
    return ServingModule(twin, data)


def export_info(module: ServingModule) -> dict:
    """What tfcnn.json records of an export: enough for tfcnn.evaluate to feed it as the weights expect."""
    model = module.model
    return {"model": model.name, "image_size": module.data.input_size, "num_classes": model.output_shape[-1],
            "data_config": module.data.to_dict(), "options": dict(model.build_options)}


def write_export_info(directory: str, info: dict, data_dir: str | None = None, log=lambda _: None,
                      class_names=None) -> None:
    """tfcnn.json (`info`) and, when data_dir's labels.txt has one line per class, labels.txt; without data_dir,
    labels.txt of class_names (a model's: the Dataset in memory it was trained on named them). log is told what
    gave the class names, or why data_dir gave none."""
    if not data_dir and class_names and len(class_names) == info["num_classes"]:
        records.write_labels(directory, [(name, name) for name in class_names])
        log("tfcnn.export: class names from the model's class_names (those of the data it was trained on)")
    elif data_dir:
        labels, source = records.read_labels(data_dir), os.path.join(data_dir, records.LABELS_FILE)
        if labels is None:
            log(f"tfcnn.export: no labels.txt beside the export: {data_dir} has none")
        elif len(labels) != info["num_classes"]:
            log(f"tfcnn.export: no labels.txt beside the export: {source} names {len(labels)} classes, the model "
                f"has {info['num_classes']}")
        else:
            records.write_labels(directory, labels)
            log(f"tfcnn.export: class names from {source}")
    with open(os.path.join(directory, EXPORT_INFO_FILE), "w") as f:
        json.dump(info, f, indent=1)


def staged_directory(final_dir: str):
    """An export's fileio.staged_directory: final_dir new, empty or an older export (tfcnn.json)."""
    return fileio.staged_directory(final_dir, EXPORT_INFO_FILE, "export", "the export directory")


def export_saved_model(model: tf.keras.Model, export_dir: str, data_dir: str | None = None,
                       log=lambda _: None) -> str:
    """Writes the SavedModel of a zoo model (weights copied into a float32 twin built with the same
    options) to export_dir, fed as `model.data_config` says. labels.txt comes from data_dir's, or without it
    from the model's class_names (log: see write_export_info)."""
    module = serving_module(model)
    with staged_directory(export_dir) as tmp:
        signatures = {"serving_default": module.images_function(checked=True).get_concrete_function(),
                      "classify_encoded": module.encoded_function().get_concrete_function()}
        tf.saved_model.save(module, tmp, signatures=signatures)
        write_export_info(tmp, export_info(module), data_dir, log, getattr(model, "class_names", None))
    return os.path.abspath(export_dir)
