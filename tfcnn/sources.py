"""What tfcnn.evaluate and tfcnn.export accept as the model to use, resolved in one place.

A source is one of:
- a zoo model (from tfcnn.create_model, or a RunResult's `.model`), or a RunResult (its model);
- a path: a tfcnn SavedModel export (a directory with tfcnn.json), a tfcnn checkpoint prefix, a training
  log directory or a `tfcnn.convert` output (their latest checkpoint; each records its model);
- with `model=NAME`: also a timm / torchvision state dict file, or a published weights name such as
  "imagenet" (tfcnn.models.weights.open_weights).
The feed overrides (image_size, crop_fraction, interpolation, eval_crop) change how the weights' recorded data config
feeds them; num_classes, their classifier's size.
"""
from __future__ import annotations

import json
import os

from tfcnn.fileio import check_output_dir

EXPORT_INFO_FILE = "tfcnn.json"  # what a tfcnn export records beside its model (tfcnn.training.export writes it)


def is_saved_model(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and os.path.isfile(os.path.join(source, EXPORT_INFO_FILE))


def check_export_dir(path, what: str = "output_dir") -> None:
    """An export goes to a new or empty directory, or replaces an older tfcnn export (one with tfcnn.json);
    anything else is refused before any work, never replaced (fileio.check_output_dir)."""
    check_output_dir(path, EXPORT_INFO_FILE, "export", what)


def saved_model_info(path) -> dict:
    with open(os.path.join(path, EXPORT_INFO_FILE)) as f:
        return json.load(f)


def describe(source) -> str:
    """The source, for results and messages: a path, or the model's name."""
    model = in_memory_model(source)
    return f"{model.name} (in memory)" if model is not None else os.fspath(_as_path(source))


def run_data_dir(source) -> str | None:
    """The dataset a training run read, from its config.json: a RunResult's, a log directory's, or that of the
    run whose log directory holds a checkpoint given by path (LOG/checkpoints/ckpt-N, or LOG/checkpoints). Its
    validation split is what evaluate scores without a data_dir. None for any other source, or a run trained on
    data in memory."""
    return _run_config(source).get("data_dir")


def run_labels_dir(source) -> str | None:
    """The folder whose labels.txt names a training run's classes: the dataset it read, or for a run on a
    Dataset in memory that had class_names (Keras' image_dataset_from_directory), its log directory, where
    training wrote them. None for any other source."""
    from tfcnn.data.records import LABELS_FILE

    config = _run_config(source)
    if config.get("data_dir"):
        return config["data_dir"]
    log_dir = config.get("log_dir")
    return log_dir if log_dir and os.path.isfile(os.path.join(log_dir, LABELS_FILE)) else None


def _run_config(source) -> dict:
    """The config of the training run `source` is (a RunResult) or names (its log directory, a checkpoint in
    it or their folder), else {}."""
    if _is_run_result(source):
        return source.summary.get("config") or {}
    if not isinstance(source, (str, os.PathLike)):
        return {}
    from tfcnn.checkpoints import CHECKPOINT_SUBDIR
    from tfcnn.training.plan import previous_config

    path = os.path.normpath(os.fspath(source))
    if not os.path.isdir(path) or os.path.basename(path) == CHECKPOINT_SUBDIR:  # a checkpoint, or their folder
        folder = path if os.path.basename(path) == CHECKPOINT_SUBDIR else os.path.dirname(path)
        if os.path.basename(folder) != CHECKPOINT_SUBDIR:
            return {}
        path = os.path.dirname(folder)  # the run's log directory
    return {**(previous_config(path) or {}), "log_dir": path}  # where it is now


def check_exists(source, model: str | None = None) -> None:
    """Refuses a path source that names nothing: without model=NAME it must be a file, a directory or a
    checkpoint prefix; with it, it may also be a weights name."""
    from tfcnn import checkpoints

    if model or not isinstance(source, (str, os.PathLike)):
        return
    path = os.fspath(source)
    if not (os.path.exists(path) or checkpoints.is_checkpoint(path)):
        raise ValueError(f"{path}: no such file or directory (a weights name or a timm / torchvision file needs "
                         f"model=NAME, --model)")


def _is_run_result(source) -> bool:
    return hasattr(source, "status") and hasattr(source, "summary")


def _as_path(source):
    """A RunResult that holds no model stands for its checkpoint: its run was found complete in its log_dir, and
    training again trained nothing (every other source is itself)."""
    return source.checkpoint if _is_run_result(source) else source


def in_memory_model(source):
    """The zoo model a source holds in memory (a Keras model or a RunResult's), else None."""
    import tensorflow as tf

    if isinstance(source, tf.keras.Model):
        if getattr(source, "data_config", None) is None:
            raise ValueError(f"model {source.name!r} is not a tfcnn zoo model (it has no data_config): build it "
                             f"with tfcnn.create_model, or pass a checkpoint path")
        return source
    if _is_run_result(source):
        if source.model is not None:
            return in_memory_model(source.model)
        if not source.checkpoint:
            raise ValueError("this RunResult holds no model and names no checkpoint: pass a checkpoint path")
    return None


def load_model(source, *, model: str | None = None, image_size: int | None = None, crop_fraction: float | None = None,
               interpolation: str | None = None, eval_crop: str | None = None, num_classes: int | None = None,
               log=print):
    """The zoo model `source` names (see the module docstring), with its data_config as the weights record
    and the overrides change it. A SavedModel is not a source here (it is no Keras model)."""
    from tfcnn import checkpoints
    from tfcnn.models import create_model, list_models
    from tfcnn.models.registry import check_model
    from tfcnn.models.weights import open_weights, tfcnn_checkpoint

    overrides = dict(input_size=image_size, crop_fraction=crop_fraction, interpolation=interpolation,
                     eval_crop=eval_crop)
    given = in_memory_model(source)
    if given is not None:
        changed = [k for k, v in {**overrides, "num_classes": num_classes, "model": model}.items() if v is not None]
        if changed:
            raise ValueError(f"a model in memory is used as it is: drop {', '.join(changed)} (or pass its "
                             f"checkpoint path to change how it is fed)")
        return given
    source = _as_path(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be a model, a RunResult or a path, received {type(source).__name__}")
    path, name = os.fspath(source), model
    if name:
        check_model(name)
    if is_saved_model(path):
        raise ValueError(f"{path} is a SavedModel export, not weights to build a model from")
    check_exists(path, model)
    if not _is_reference(path):  # a tfcnn checkpoint names its model
        recorded = checkpoints.describe(tfcnn_checkpoint(path))
        if name and recorded.model and recorded.model != name:
            raise ValueError(f"{path} holds a checkpoint of {recorded.model} "
                             f"({os.path.basename(tfcnn_checkpoint(path))}), not of model {name}")
        name = name or recorded.model
    elif not name:
        raise ValueError(f"{path}: a state dict does not name its architecture: pass model=NAME (--model)")
    if name is None:
        raise ValueError(f"{path}: the checkpoint does not record its model: pass model=NAME (--model)")
    if name not in list_models():
        raise ValueError(f"{path} records model {name!r}, which this tfcnn does not have; valid models: "
                         f"{', '.join(list_models())}")
    weights = open_weights(name, path)
    data = weights.data_config.replace(**overrides)
    return create_model(name, num_classes=num_classes, input_shape=(data.input_size, data.input_size, 3),
                        weights=weights, data_config=data, log=log)


def _is_reference(path: str) -> bool:
    """A timm / torchvision file or a published weights name, as opposed to a tfcnn checkpoint path."""
    from tfcnn import checkpoints
    from tfcnn.models import pretrained
    from tfcnn.models.weights import REFERENCE_SUFFIXES

    if pretrained.is_weights_name(path) or path.endswith(REFERENCE_SUFFIXES) and os.path.isfile(path):
        return True
    return not (os.path.exists(path) or checkpoints.is_checkpoint(path))
