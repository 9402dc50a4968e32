"""train(config): one training run from its plan to its summary, on every rank.

Resolves the plan, trains it (tfcnn.training.trainer; under --elastic through tfcnn.training.elastic,
which builds on the trainer), stops cleanly on a stop signal or the time limit (tfcnn.training.stopping),
then exports and evaluates on rank 0. Above both the trainer and the elastic driver, which import
neither this module nor each other's users.
"""
from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from tfcnn import checkpoints, distributed, metrics
from tfcnn.data import memory, records
from tfcnn.fileio import atomic_write_text
from tfcnn.precision import startup_notes
from tfcnn.training.callbacks import METRICS_FILE
from tfcnn.training.config import SCHEDULES, TrainConfig
from tfcnn.training.elastic import train_elastic
from tfcnn.training.plan import CONFIG_FILE, Plan, make_plan
from tfcnn.training.stopping import StopRequest
from tfcnn.training.trainer import build_trainer, fit_segment, predict
from tfcnn.training.validation import Validator


def checked_callbacks(callbacks) -> list:
    """`callbacks` as a list (None, or one callback alone, as Keras' fit takes them, too), or a ValueError naming
    the one tfcnn cannot run: not a tf.keras callback (Keras 3's, from `import keras`, failed deep inside Keras
    2's fit with an AttributeError), one that sets a learning rate, or BackupAndRestore."""
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    for callback in callbacks:
        kind = type(callback)
        if not isinstance(callback, tf.keras.callbacks.Callback):
            own = "subclass tf.keras.callbacks.Callback for your own"
            if kind.__module__.split(".")[0] == "keras":  # tf.keras is tf_keras (Keras 2): tfcnn is written for it
                twin = (f"use tf.keras.callbacks.{kind.__name__}" if hasattr(tf.keras.callbacks, kind.__name__)
                        else f"Keras 2 has no {kind.__name__}: {own}")
                raise ValueError(f"callbacks: {kind.__name__} is Keras 3's (keras.callbacks, from `import keras`) "
                                 f"and tfcnn trains with Keras 2 (tf.keras): {twin}")
            raise ValueError(f"callbacks: {kind.__name__} is not a Keras callback: pass tf.keras.callbacks "
                             f"instances ({own})")
        if isinstance(callback, (tf.keras.callbacks.ReduceLROnPlateau, tf.keras.callbacks.LearningRateScheduler)):
            # Measured: its changes printed, the weights bit for bit those of a run without it.
            raise ValueError(f"callbacks: {kind.__name__} sets a learning rate that tfcnn's schedule "
                             f"ignores (it would print its changes and change nothing): choose the schedule with "
                             f"lr_schedule ({', '.join(SCHEDULES)}), lr and warmup_epochs")
        if isinstance(callback, tf.keras.callbacks.BackupAndRestore):
            # Measured: it warned that the trainer was not built and restored nothing on the rerun.
            raise ValueError("callbacks: BackupAndRestore restores nothing here: tfcnn resumes a run from its own "
                             "checkpoints; pass log_dir and rerun the same call")
    return list(callbacks)


def train(config: TrainConfig, callbacks=(), *, train_data=None, val_data=None, batches=None,
          epoch_images: int | None = None) -> dict:
    """Runs (or resumes) a training run; returns its summary. Every rank calls this.

    callbacks: extra Keras callbacks, run after tfcnn's own (logging, checkpoints) at every step; their
    `self.model` is the ClassifierTrainer, whose `.model` is the zoo model. They see the run's epochs
    (callbacks.RunEpochs); one that sets model.stop_training on any rank ends the run after that step on every
    rank, checkpointed.
    train_data, val_data: data in memory instead of the config's records (tfcnn.data.memory: (x, y) arrays
    or a Dataset of (image, label)); each rank takes its share. val_data is evaluated at the end of every
    --validation_every-th epoch and after training, each example once over all ranks (training.validation);
    the summary's `validation_history` lists each result. Not with --elastic.
    batches: this rank's training batches (a tf.data.Dataset of uint8 images [rank_batch, size, size, 3]
    and int32 labels, from the run's first step on), used as they are; then epoch_images says how many
    images an epoch is. Not with --elastic.
    A run stopped by --stop_signals or --max_minutes returns with `preempted` (the step, the reason, the
    checkpoint written at that step) and without export or evaluation: it is not done.
    The summary's `model` is the zoo model as trained (its raw weights: with --ema_decay the checkpoints
    and the export hold their average), with `class_names` when a Dataset in memory named its classes (its
    exports carry them, log_dir or not).
    """
    callbacks = checked_callbacks(callbacks)
    distributed.init()
    given = batches is not None or train_data is not None
    if (given or val_data is not None) and config.elastic:
        raise ValueError("--elastic trains on --data_dir's records only, not on data given in memory")
    if batches is not None and not epoch_images:
        raise ValueError("training on given batches needs epoch_images (the images of an epoch)")
    if isinstance(train_data, tf.data.Dataset) and config.num_classes is None:
        # A Dataset shows its classes only when read: the largest label + 1, as arrays give theirs, read in the pass
        # that counts it (else ImageNet's 1000 classes for a dataset of a few).
        epoch_images, classes = memory.count_and_classes(train_data)
        config = dataclasses.replace(config, num_classes=classes) if epoch_images else config
    elif train_data is not None:
        epoch_images = memory.count(train_data)
    plan = make_plan(config, train_records=epoch_images)
    config = plan.config
    chief = distributed.is_chief()
    log = print if chief else (lambda *_: None)
    if plan.checkpoint and plan.start_step == plan.total_steps and not config.elastic:
        log(f"tfcnn: the run in --log_dir {config.log_dir} is already complete at step {plan.start_step} "
            f"of {plan.total_steps}: nothing to do. Pass a larger --num_iter to train it further, or "
            f"another --log_dir to start a new run")
        return {"complete": True, "start_step": plan.start_step, "total_steps": plan.total_steps,
                "config": dataclasses.asdict(config)}  # its log_dir: the result names the run's checkpoint
    names = class_names(train_data, plan.num_classes, log)
    if chief and config.log_dir:
        os.makedirs(config.log_dir, exist_ok=True)
        atomic_write_text(os.path.join(config.log_dir, CONFIG_FILE), config.to_json())
        if names:  # what export and predict name the classes by (tfcnn.sources.run_labels_dir)
            records.write_labels(config.log_dir, [(name, name) for name in names])
    if chief:
        _print_start(plan, f"{epoch_images:,} examples in memory" if given else None)
    validator = None
    with StopRequest(config.stop_signals, config.max_minutes) as stop:
        if config.elastic:
            model, trainer, progress = train_elastic(plan, callbacks, stop=stop)
            chief = distributed.is_chief()  # rank 0 may be another process now
        else:
            model, optimizer, trainer, checkpoint, lr = build_trainer(plan, log)
            if batches is not None:
                batches = batches.skip(plan.start_step)
            elif train_data is not None:
                batches = memory.train_batches(
                    train_data, batch_size=config.rank_batch, image_size=plan.image_size,
                    num_classes=plan.num_classes, seed=config.seed + 1_000_003 * distributed.rank(),
                    start_step=plan.start_images // plan.global_batch, num_shards=distributed.size(),
                    shard_index=distributed.rank(), train_crop=config.train_crop, augment=config.augment)
            if val_data is not None:
                validator = Validator(trainer, plan, val_data)
            progress = fit_segment(trainer, checkpoint, plan, lambda step: lr(step - 1),
                                   after=[validator] if validator is not None else [], callbacks=callbacks,
                                   stop=stop, dataset=batches)
    if names:  # set past Keras' attribute tracking, which would wrap the tuple in a trackable one
        object.__setattr__(model, "class_names", tuple(names))
    summary = {"config": dataclasses.asdict(config), "steps_per_epoch": plan.steps_per_epoch,
               "global_batch": plan.global_batch, "ranks": distributed.size(),
               "data_config": plan.data_config.to_dict(), "model": model, **progress}
    if validator is not None:
        summary["validation_history"] = validator.history
    if "stopped" in progress:
        summary["preempted"] = summary.pop("stopped")
        if chief:
            _print_stop(summary)
        return summary
    with trainer.inference_weights():
        if config.export_dir and chief:
            from tfcnn.training.export import export_saved_model

            summary["saved_model"] = export_saved_model(model, config.export_dir, config.data_dir, log)
        if config.predict and chief and validator is None:
            summary["validation"] = predict(trainer, plan)
    if validator is not None:  # every rank counts its share (the last step's validation, when it made one)
        summary["validation"] = validator.final()
    if chief:
        summary["checkpoints"] = checkpoints.checkpoint_dir(config.log_dir) if config.log_dir else None
        _print_summary(summary)
    return summary


def class_names(data, num_classes: int, log) -> list[str] | None:
    """The class names a Dataset in memory carries (`class_names`, which Keras' image_dataset_from_directory
    sets), when they name each of the run's classes once; a log line says why others are left out."""
    names = getattr(data, "class_names", None)
    if names is None:
        return None
    if (not isinstance(names, (list, tuple)) or len(names) != num_classes or len(set(names)) != len(names)
            or not all(isinstance(name, str) and name.strip() and not set(name) & set("\t\n") for name in names)):
        log(f"tfcnn: the data's class_names are left out: they do not name each of its {num_classes} classes "
            f"once (one line each): {names!r:.200}")
        return None
    return list(names)


def _print_start(plan: Plan, given_data: str | None):
    c = plan.config
    data = given_data or c.data_dir or "synthetic data"
    accumulated = f" x {c.grad_accum_steps} accumulated" if c.grad_accum_steps > 1 else ""
    print(f"tfcnn: training {c.model} ({plan.num_classes} classes, {plan.image_size} px) on {data}; "
          f"{distributed.size()} rank(s) x batch {c.batch_size}{accumulated} = global batch {plan.global_batch}; "
          f"{c.precision}{' + XLA' if c.use_xla else ''}; {c.optimizer}, lr {c.lr} per 256 -> "
          f"{c.lr * plan.global_batch / 256:g} ({c.lr_schedule}, {c.warmup_epochs:g} warmup epochs); "
          f"{plan.total_steps} steps ({plan.steps_per_epoch} per epoch)"
          + (f"; resuming from {plan.checkpoint} at step {plan.start_step}" if plan.checkpoint else "")
          + ("; --init_weights ignored: resuming takes precedence" if plan.checkpoint and c.init_weights else ""),
          flush=True)
    for note in startup_notes(c.precision, c.use_xla) + plan.notes:
        print(f"tfcnn: {note}", flush=True)


def _print_stop(s: dict):
    stop = s["preempted"]
    where = (f"its checkpoint: {stop['checkpoint']}; rerun the same command to resume from it" if stop["checkpoint"]
             else "nothing was saved (no --log_dir)")
    print(f"tfcnn: stopped at step {stop['step']} of {s['total_steps']} ({stop['reason']}), agreed by every rank; "
          f"{where}", flush=True)


def _print_summary(s: dict):
    end = s.get("end_step", s["total_steps"])
    if s["start_step"] == s["total_steps"]:  # an elastic run re-formed after its last step
        lines = [f"done: step {s['total_steps']}, nothing left to train"]
    elif end < s["total_steps"]:
        lines = [f"done: steps {s['start_step']}-{end} of {s['total_steps']} in {s['train_seconds']:.1f} s: a callback "
                 f"stopped the run (model.stop_training)"]
    else:
        lines = [f"done: steps {s['start_step']}-{s['total_steps']} in {s['train_seconds']:.1f} s"]
    if "img_per_sec" in s:
        lines.append(f"  throughput: {s['img_per_sec']:.1f} img/s (global, mean over {s['img_per_sec_steps']} steps, "
                     f"excluding {s['config']['benchmark_warmup_steps']} warmup steps)")
    else:
        lines.append(f"  throughput: not measured: the run had no more steps than its "
                     f"{s['config']['benchmark_warmup_steps']} warmup steps")
    if s["final"]:
        lines.append(f"  final loss {s['final']['loss']:.4f}, top1 {100 * s['final']['top1']:.2f}% (training batches)")
    if "validation" in s:
        lines.append(f"  validation: {metrics.scores_text(s['validation'], s['config']['num_classes'])}")
    log_dir = s["config"]["log_dir"]
    if log_dir:
        named = f", {records.LABELS_FILE}" if os.path.isfile(os.path.join(log_dir, records.LABELS_FILE)) else ""
        lines.append(f"  logs: {log_dir} ({METRICS_FILE}, tensorboard/, {CONFIG_FILE}{named}); checkpoints: "
                     f"{s['checkpoints']}")
    if "saved_model" in s:
        lines.append(f"  SavedModel: {s['saved_model']}")
    print("\n".join(lines), flush=True)
