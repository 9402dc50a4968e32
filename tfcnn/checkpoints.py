"""Self-describing checkpoints: the weights travel with what is needed to use them.

A tfcnn checkpoint records, beside the variables, the model's registered name, its class count, the
builder options it was built with (e.g. Inception's count_include_pad) and its DataConfig (input
size, crop, mean/std, interpolation), so evaluation, export, fine-tuning and `create_model(weights=...)`
rebuild the same function and feed it the pixels it expects without being told.

Written through tf.train.CheckpointManager: data files first, then an atomic rewrite of the
`checkpoint` state file, so "latest" never points at a half-written checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf

CHECKPOINT_SUBDIR = "checkpoints"
_NAME_KEY = "tfcnn_model/.ATTRIBUTES/VARIABLE_VALUE"
_CLASSES_KEY = "tfcnn_num_classes/.ATTRIBUTES/VARIABLE_VALUE"
_RECORD_KEY = "tfcnn_record/.ATTRIBUTES/VARIABLE_VALUE"
_STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"


@dataclasses.dataclass(frozen=True)
class Record:
    """What a checkpoint says about itself (None: a checkpoint made before tfcnn recorded it)."""
    model: str | None
    num_classes: int | None
    options: dict
    data_config: dict | None
    step: int


def make_checkpoint(model_name: str, model: tf.keras.Model, num_classes: int, *, options: dict | None = None,
                    data_config: dict | None = None, **state) -> tf.train.Checkpoint:
    """A Checkpoint of the model (plus optimizer, step, ... in `state`) that records the model name, class
    count, builder options and data config."""
    record = json.dumps({"options": options or {}, "data_config": data_config}, sort_keys=True)
    return tf.train.Checkpoint(
        model=model, tfcnn_model=tf.Variable(model_name, trainable=False, dtype=tf.string),
        tfcnn_num_classes=tf.Variable(num_classes, trainable=False, dtype=tf.int64),
        tfcnn_record=tf.Variable(record, trainable=False, dtype=tf.string), **state)


def checkpoint_dir(log_dir: str) -> str:
    return os.path.join(log_dir, CHECKPOINT_SUBDIR)


def latest_checkpoint(log_dir: str) -> str | None:
    return tf.train.latest_checkpoint(checkpoint_dir(log_dir))


def is_checkpoint(path: str) -> bool:
    """True for a checkpoint prefix (`.../ckpt-120`, whose `.index` file exists)."""
    return tf.io.gfile.exists(path + ".index")


def describe(path: str) -> Record:
    reader = tf.train.load_checkpoint(path)
    name = reader.get_tensor(_NAME_KEY).decode() if reader.has_tensor(_NAME_KEY) else None
    classes = int(reader.get_tensor(_CLASSES_KEY)) if reader.has_tensor(_CLASSES_KEY) else None
    record = json.loads(reader.get_tensor(_RECORD_KEY).decode()) if reader.has_tensor(_RECORD_KEY) else {}
    step = int(reader.get_tensor(_STEP_KEY)) if reader.has_tensor(_STEP_KEY) else 0
    return Record(name, classes, record.get("options") or {}, record.get("data_config"), step)


def check_compatible(path: str, model_name: str, num_classes: int, where: str) -> Record:
    """The checkpoint's record; ValueError when it holds another model or class count."""
    record = describe(path)
    if record.model is not None and record.model != model_name:
        raise ValueError(f"{where} holds a checkpoint of {record.model} ({os.path.basename(path)}), "
                         f"not of --model {model_name}")
    if record.num_classes is not None and record.num_classes != num_classes:
        raise ValueError(f"{where} holds a checkpoint with {record.num_classes} classes ({os.path.basename(path)}), "
                         f"not --num_classes {num_classes}")
    return record


def restore_model(path: str, model: tf.keras.Model) -> None:
    """Loads only the model weights of a checkpoint (optimizer slots and counters are not needed); every
    model variable must come from the checkpoint."""
    tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
