"""Self-describing checkpoints: the weights travel with the name of the model they belong to.

Written through tf.train.CheckpointManager: data files first, then an atomic rewrite of the
`checkpoint` state file, so "latest" never points at a half-written checkpoint.
"""
from __future__ import annotations

import os

import tensorflow as tf

CHECKPOINT_SUBDIR = "checkpoints"
_NAME_KEY = "tfcnn_model/.ATTRIBUTES/VARIABLE_VALUE"
_CLASSES_KEY = "tfcnn_num_classes/.ATTRIBUTES/VARIABLE_VALUE"
_STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"


def make_checkpoint(model_name: str, model: tf.keras.Model, num_classes: int, **state) -> tf.train.Checkpoint:
    """A Checkpoint of the model (plus optimizer, step, ... in `state`) that records the model name."""
    return tf.train.Checkpoint(
        model=model, tfcnn_model=tf.Variable(model_name, trainable=False, dtype=tf.string),
        tfcnn_num_classes=tf.Variable(num_classes, trainable=False, dtype=tf.int64), **state)


def checkpoint_dir(log_dir: str) -> str:
    return os.path.join(log_dir, CHECKPOINT_SUBDIR)


def latest_checkpoint(log_dir: str) -> str | None:
    return tf.train.latest_checkpoint(checkpoint_dir(log_dir))


def describe(path: str) -> tuple[str | None, int | None]:
    """(model name, num_classes) recorded in a checkpoint; None for checkpoints made elsewhere."""
    reader = tf.train.load_checkpoint(path)
    names = reader.get_variable_to_shape_map()
    name = reader.get_tensor(_NAME_KEY).decode() if _NAME_KEY in names else None
    classes = int(reader.get_tensor(_CLASSES_KEY)) if _CLASSES_KEY in names else None
    return name, classes


def trained_steps(path: str) -> int:
    """The training step a checkpoint was written at (0 for one without a step, e.g. weights only)."""
    reader = tf.train.load_checkpoint(path)
    return int(reader.get_tensor(_STEP_KEY)) if reader.has_tensor(_STEP_KEY) else 0


def check_compatible(path: str, model_name: str, num_classes: int, where: str) -> None:
    """Raises ValueError when the checkpoint at `path` holds another model or class count."""
    name, classes = describe(path)
    if name is not None and name != model_name:
        raise ValueError(f"{where} holds a checkpoint of {name} ({os.path.basename(path)}), not of --model {model_name}")
    if classes is not None and classes != num_classes:
        raise ValueError(f"{where} holds a checkpoint with {classes} classes ({os.path.basename(path)}), "
                         f"not --num_classes {num_classes}")


def restore_model(path: str, model_name: str, model: tf.keras.Model, num_classes: int, where: str) -> None:
    """Loads only the model weights of a training checkpoint (e.g. for evaluation)."""
    check_compatible(path, model_name, num_classes, where)
    # Every model variable must come from the checkpoint; optimizer slots and counters are not needed.
    tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
