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
    averaged: bool = False  # holds an exponential moving average of the weights (`ema`), used for inference


def make_checkpoint(model: tf.keras.Model, **state) -> tf.train.Checkpoint:
    """A Checkpoint of a zoo model (plus optimizer, step, ... in `state`) that records the model's name,
    class count, builder options (`model.build_options`) and data config (`model.data_config`), and
    whether `state` holds an `ema` (tfcnn.ema.WeightAverage) of its weights."""
    record = json.dumps({"options": dict(model.build_options), "data_config": model.data_config.to_dict(),
                         "averaged": state.get("ema") is not None}, sort_keys=True)
    state = {k: v for k, v in state.items() if v is not None}
    return tf.train.Checkpoint(
        model=model, tfcnn_model=tf.Variable(model.name, trainable=False, dtype=tf.string),
        tfcnn_num_classes=tf.Variable(model_classes(model), trainable=False, dtype=tf.int64),
        tfcnn_record=tf.Variable(record, trainable=False, dtype=tf.string), **state)


def model_classes(model: tf.keras.Model) -> int:
    """The class count of a classifier's (first) output."""
    shape = model.output_shape[0] if isinstance(model.output_shape, list) else model.output_shape
    return int(shape[-1])


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
    return Record(name, classes, record.get("options") or {}, record.get("data_config"), step,
                  bool(record.get("averaged")))


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


def restore_model(path: str, model: tf.keras.Model, averaged: bool = False) -> None:
    """Loads only the model weights of a checkpoint (optimizer slots and counters are not needed); every
    model variable must come from the checkpoint. averaged: the moving average of the weights instead
    (a checkpoint whose record says `averaged`), as inference should use."""
    if averaged:
        from tfcnn.ema import WeightAverage

        average = WeightAverage(model, decay=0.0)
        tf.train.Checkpoint(ema=average).read(path).expect_partial().assert_existing_objects_matched()
        average.copy_to_model()
    else:
        tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
