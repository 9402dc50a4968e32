"""Train an ImageNet CNN, one process per GPU:

    python -m tfcnn.train --model resnet18 --data_dir DIR --image_size 64 --num_iter 5
    horovodrun -np 8 python -m tfcnn.train --recipe resnet50_90e --data_dir DIR --log_dir runs/rn50
    mpiexec --allow-run-as-root -np 8 tfcnn-train --recipe resnet50_90e --data_dir DIR

Without --data_dir it trains on synthetic data. Flags override the --recipe's values, which override
the defaults; the resolved configuration is written to --log_dir/config.json. Rerunning with the same
--log_dir resumes from its latest checkpoint. --flagfile FILE reads flags from a file. SIGTERM, SIGINT
or SIGUSR1 (--stop_signals) or --max_minutes stop the run after a step, with its checkpoint written,
and exit with status 75: rerun the same command to resume.

From Python (every rank calls it; the module itself is callable, so `tfcnn.train(...)` is this `train`):

    import tfcnn
    result = tfcnn.train(model="resnet18", train_data=(x, y), val_data=(x_val, y_val), image_size=32,
                         num_iter=10, batch_size=64, lr=0.1)
    result = tfcnn.train("resnet50_90e", data_dir="/data/imagenet-tfrecords", log_dir="runs/rn50")
"""
from __future__ import annotations

import dataclasses
import sys

from tfcnn import callable_module
from tfcnn.training.config import TrainConfig, make_config  # no TensorFlow yet: bad flags fail at once

FIELDS = dataclasses.fields(TrainConfig)
STATUSES = ("complete", "preempted", "stopped")


@dataclasses.dataclass
class RunResult:
    """What a training run came to (on every rank).

    status: complete (trained to its last step, or found so in log_dir); preempted (a stop signal or
      max_minutes stopped it after a step, its checkpoint written: the same call resumes it); stopped (a
      callback ended it early, e.g. keras.callbacks.EarlyStopping).
    step / total_steps: the last step trained, of the run's planned steps.
    metrics: the last logged training metrics (loss, top1 on the training batches, lr, epoch, img_per_sec).
    validation: top1, top5 and count on val_data after training (or with predict=True, on the validation
      records), if any.
    validation_history: with val_data, each validation made (at the end of every validation_every-th epoch and
      after training): step, epoch, top1, top5, count, as metrics.jsonl and TensorBoard have them.
    log_dir, checkpoint: where the run keeps its logs and its latest checkpoint (None without log_dir).
    saved_model: the SavedModel written with export_dir.
    model: the trained zoo model (its raw weights: with ema_decay, load the checkpoint for their average); None
      for a run found complete in log_dir, which trained nothing (tfcnn.evaluate and tfcnn.export then take the
      result for its checkpoint).
    summary: everything tfcnn.training.run.train reported.
    """
    status: str
    step: int
    total_steps: int
    metrics: dict
    validation: dict | None = None
    validation_history: list = dataclasses.field(default_factory=list)
    log_dir: str | None = None
    checkpoint: str | None = None
    saved_model: str | None = None
    model: object = dataclasses.field(default=None, repr=False)
    summary: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_summary(cls, summary: dict) -> "RunResult":
        total = summary["total_steps"]
        log_dir = (summary.get("config") or {}).get("log_dir")
        if "preempted" in summary:
            status, step = "preempted", summary["preempted"]["step"]
        else:
            step = summary.get("end_step", total)
            status = "complete" if step >= total else "stopped"
        checkpoint = None
        if log_dir:
            from tfcnn import checkpoints

            checkpoint = checkpoints.latest_checkpoint(log_dir)
        return cls(status, step, total, dict(summary.get("final") or {}), summary.get("validation"),
                   list(summary.get("validation_history", ())), log_dir, checkpoint, summary.get("saved_model"),
                   summary.get("model"), summary)


def train(config_or_recipe: TrainConfig | str | None = None, *, train_data=None, val_data=None, callbacks=(),
          **overrides) -> RunResult:
    """Trains (or resumes) a run on this rank and returns its RunResult. Every rank calls it alike.

    config_or_recipe: a TrainConfig, a recipe name (python -m tfcnn.recipes lists them), or None (the
      defaults). overrides: TrainConfig's fields (the command line's flags), on top of it.
    train_data / val_data: data in memory instead of data_dir's records: (x, y) NumPy arrays (x [N, H, W,
      3] RGB, uint8 or float on the 0-255 scale; y [N] 0-based labels) or a tf.data.Dataset of (image,
      label), images of any size (x may be a list of images of different sizes). The recipe's training view
      applies (train_crop; augment=False takes prepared images as they are: train_crop and augment 'none');
      each rank takes its own share (every size-th example), and val_data is evaluated at the end of every
      validation_every-th epoch and after training, each example once over all ranks.
      num_classes and image_size default to what the data show (the largest label + 1, of val_data's arrays too,
      of a training Dataset read as it is counted; the images' size when square, of a Dataset when static).
      A Dataset's class_names (Keras' image_dataset_from_directory sets them) go to log_dir's labels.txt, which
      exports and tfcnn.predict name the classes by.
      Resuming (the same log_dir) continues the exact batch stream for the same arrays, or for a Dataset
      that yields the same examples in the same order each time (see tfcnn.data.memory).
    callbacks: tf.keras (Keras 2) callbacks, or one alone, run after tfcnn's own at every step; their
      `self.model` is the trainer, whose `.model` is the zoo model. They see the run's epochs (on_epoch_end's
      logs: loss, top1 and, with val_data, val_top1 and val_top5), so EarlyStopping(monitor="val_top1",
      mode="max") works; one that sets model.stop_training ends the run after that step (status 'stopped'), on
      every rank when it did so on one, and log_dir keeps that step's checkpoint.
    Bad values raise ValueError naming the option; a NaN or infinite loss raises NonFiniteLossError.
    """
    config = _config(config_or_recipe, overrides, train_data, val_data)
    if val_data is not None and train_data is None:
        raise ValueError("val_data needs train_data (records' validation: data_dir with predict=True)")
    from tfcnn.training import run  # loads TensorFlow: after the options' checks

    summary = run.train(config, callbacks, train_data=train_data, val_data=val_data)
    return RunResult.from_summary(summary)


def _config(config_or_recipe, overrides: dict, train_data, val_data=None) -> TrainConfig:
    overrides = dict(overrides)
    if isinstance(overrides.get("augment"), bool):  # augment=False: the data are prepared, take them as they are
        if not overrides.pop("augment"):
            overrides.update(augment="none", train_crop="none")
    if isinstance(config_or_recipe, TrainConfig):
        base = config_or_recipe
        recipe, values = base.recipe, {f.name: getattr(base, f.name) for f in FIELDS if f.name != "recipe"}
    elif config_or_recipe is None or isinstance(config_or_recipe, str):
        recipe, values = config_or_recipe, {}
    else:
        raise ValueError(f"config_or_recipe must be a TrainConfig, a recipe name or None, received "
                         f"{type(config_or_recipe).__name__}")
    if train_data is not None:
        given = {**values, **{k: v for k, v in overrides.items() if v is not None}}
        if given.get("data_dir"):
            raise ValueError(f"train_data and data_dir {given['data_dir']!r} both name training data: give one")
        shown = _shown_by(train_data)
        if shown.get("num_classes") and val_data is not None:  # a class the validation arrays have, training's lack
            shown["num_classes"] = max(shown["num_classes"], _shown_by(val_data).get("num_classes") or 0)
        overrides.update({k: v for k, v in shown.items() if given.get(k) is None})
    return make_config(recipe, **{**values, **overrides})


def _shown_by(data) -> dict:
    """num_classes and image_size as in-memory arrays show them (a Dataset: its image size, when static)."""
    import numpy as np

    if isinstance(data, (tuple, list)) and len(data) == 2:
        try:
            y = np.asarray(data[1])
        except ValueError:  # labels of uneven shapes, or two (image, label) pairs: named by the data's check
            return {}
        shown = {"num_classes": int(y.max()) + 1 if y.size and np.issubdtype(y.dtype, np.integer) else None}
        try:
            x_shape = np.shape(data[0])
        except ValueError:  # a list of images of different sizes: none to show
            x_shape = ()
        shape = x_shape[1:3] if len(x_shape) in (3, 4) else None  # RGB or grayscale, with or without channels
    else:
        spec = getattr(data, "element_spec", None)
        image = spec[0] if isinstance(spec, tuple) and spec else None
        rank = image.shape.rank if image is not None else None
        shown, shape = {}, (tuple(image.shape[:2]) if rank == 2 else tuple(image.shape[-3:-1]) if rank in (3, 4)
                            else None)
    if shape and shape[0] == shape[1] and shape[0] is not None:
        shown["image_size"] = int(shape[0])
    return shown


# ---------------------------------------------------------------------------------------- command line

def define_flags():
    """One flag per TrainConfig field; default None means "not given", so a recipe value stays."""
    from absl import flags

    if "log_dir" in flags.FLAGS:
        # absl.logging defines --log_dir for its own log files, which tfcnn never writes; ours wins.
        delattr(flags.FLAGS, "log_dir")
    # The annotation says the flag's type (`float | None`: a float flag whose absence keeps the default; a
    # dict is name=value text, parsed by make_config).
    definers = (("bool", flags.DEFINE_boolean), ("float", flags.DEFINE_float), ("int", flags.DEFINE_integer),
                ("tuple", flags.DEFINE_list), ("str", flags.DEFINE_string), ("dict", flags.DEFINE_string))
    for field in FIELDS:
        define = next(define for kind, define in definers if kind in str(field.type))
        define(field.name, None, f"{field.metadata['help']} (default: {field.default})")


def main(argv):
    from absl import app, flags, logging

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO chatter (SavedModel tracing, ...) hides ours
    values = {f.name: flags.FLAGS[f.name].value for f in FIELDS if flags.FLAGS[f.name].present}
    recipe = values.pop("recipe", None)
    try:
        if "lr_decay_epochs" in values:
            values["lr_decay_epochs"] = [int(e) for e in values["lr_decay_epochs"]]
        config = make_config(recipe, **values)
    except ValueError as error:
        sys.exit(f"tfcnn.train: error: {error}")
    from tfcnn.training import NonFiniteLossError, run  # loads TensorFlow

    try:
        summary = run.train(config)
    except NonFiniteLossError as error:
        sys.exit(f"tfcnn.train: {error}")
    except (ValueError, RuntimeError) as error:
        sys.exit(f"tfcnn.train: error: {error}")
    if "preempted" in summary:  # stopped by a signal or --max_minutes, its checkpoint written: resume me
        from tfcnn.training.stopping import exit_preempted

        exit_preempted(config.stop_signals)


def cli():
    """The command line (python -m tfcnn.train, the tfcnn-train console script, examples/train.py)."""
    from absl import app, flags

    define_flags()
    if any(arg in ("-h", "--help", "-?", "--helpshort") for arg in sys.argv[1:]):
        # absl's own --help shows only the launching script's flags (none, for a console script), with status 1
        print(__doc__ + "\nflags:\n" + flags.FLAGS.module_help(__name__))
        sys.exit(0)
    app.run(main)


callable_module(__name__, train)

if __name__ == "__main__":
    cli()
