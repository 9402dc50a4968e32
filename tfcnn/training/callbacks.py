"""The callbacks of a training run: progress (printing, metrics.jsonl, TensorBoard, the non-finite loss
watch) and checkpoints.

Side effects happen on rank 0; the collectives around them (metric averaging, the finiteness checks) run
on every rank at the same steps, so no rank ever waits on another.
"""
from __future__ import annotations

import json
import math
import os
import time

import tensorflow as tf

from tfcnn import distributed
from tfcnn.fileio import atomic_write_text, read_jsonl
from tfcnn.profile import smallest_batch_norm_input
from tfcnn.training.plan import Plan

METRICS_FILE = "metrics.jsonl"
# Batch norm in training normalizes each channel over batch x height x width values. Below this many its
# statistics are mostly noise and one step can make the weights non-finite: with 2 values (batch 2 at 1x1),
# Xception at 16 px and MobileNetV2 at 32 px diverged within 3 steps on one kernel set or the other.
MIN_BATCH_NORM_VALUES = 8


class NonFiniteLossError(RuntimeError):
    pass


def small_batch_norm_warning(model, batch_size: int) -> str | None:
    """Why training `model` at this per-rank batch may diverge at once, or None: a batch norm with
    fewer than MIN_BATCH_NORM_VALUES values per channel."""
    smallest = smallest_batch_norm_input(model)
    if smallest is None:
        return None
    name, shape = smallest
    values = batch_size * math.prod(shape)
    if values >= MIN_BATCH_NORM_VALUES:
        return None
    return (f"batch norm {name} normalizes only {values} values per channel (--batch_size "
            f"{batch_size} x its {'x'.join(map(str, shape))} input at --image_size {model.input_shape[1]}); below "
            f"{MIN_BATCH_NORM_VALUES} its batch statistics are mostly noise and training can turn NaN within a few "
            f"steps: raise --image_size or --batch_size")


def _divergence_advice(trainer, plan: Plan) -> str:
    warning = small_batch_norm_warning(trainer.model, plan.config.batch_size)
    config = plan.config
    if warning:
        advice = f"likely cause: {warning}"
    elif config.precision == "fp16" and config.loss_scale != "dynamic":
        advice = (f"With the static --loss_scale {config.loss_scale} an fp16 overflow is applied, not skipped: try "
                  f"--loss_scale dynamic or a smaller scale, or lower --lr")
    else:
        advice = "Lower --lr or check the data"
    return f"{advice}; the last checkpoint holds the state before it"


class RunLogger(tf.keras.callbacks.Callback):
    """Every display_every steps (and at the last): metrics averaged over ranks; rank 0 prints them and
    appends them to metrics.jsonl and TensorBoard. Also stops the run at a non-finite fp32 loss."""

    _supports_tf_logs = True  # keep Keras from converting the logs to numpy (a device sync) every step

    def __init__(self, trainer, optimizer, lr_at, plan: Plan):
        """lr_at(step): the learning rate the optimizer applied at that step."""
        super().__init__()
        self.trainer, self.optimizer, self.lr_at, self.plan = trainer, optimizer, lr_at, plan
        self.chief = distributed.is_chief()
        log_dir = plan.config.log_dir if self.chief else None
        self.metrics_path = os.path.join(log_dir, METRICS_FILE) if log_dir else None
        if self.metrics_path and os.path.exists(self.metrics_path):
            _drop_records_after(self.metrics_path, plan.start_step)
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, "tensorboard")) if log_dir else None
        self.last = {}
        self.total_seconds = 0.0
        self.timed_steps = 0
        self.timed_seconds = 0.0
        self.start_time = self.mark_time = self.warmup_end_time = None
        self.mark_step = self.last_step = plan.start_step

    def on_train_begin(self, logs=None):
        self.start_time = self.mark_time = time.perf_counter()
        if self.plan.config.benchmark_warmup_steps == 0:
            self.warmup_end_time = self.start_time

    def on_train_batch_end(self, batch, logs=None):
        step = self.last_step = self.plan.start_step + batch + 1
        warmup_end = self.plan.start_step + self.plan.config.benchmark_warmup_steps
        if step == warmup_end:
            float(logs["loss"])  # wait for the step to finish before starting the clock
            self.warmup_end_time = time.perf_counter()
        if step % self.plan.config.display_every and step != self.plan.total_steps:
            return
        loss, top1, bad = distributed.allreduce(
            tf.stack([logs["loss"], logs["top1"], tf.cast(self.trainer.first_nonfinite_step >= 0, tf.float32)]),
            name="tfcnn_display").numpy()
        if bad > 0:
            first = int(self.trainer.first_nonfinite_step.numpy())
            where = f"at step {first}" if first >= 0 else f"on another rank before step {step}"
            raise NonFiniteLossError(f"the loss became NaN or infinite {where} ({self.plan.config.precision}): "
                                     f"stopping. {_divergence_advice(self.trainer, self.plan)}")
        self.trainer.loss_metric.reset_state()
        self.trainer.top1_metric.reset_state()
        now = time.perf_counter()
        rate = (step - self.mark_step) * self.plan.global_batch / max(now - self.mark_time, 1e-9)
        self.mark_step, self.mark_time = step, now
        record = {"step": step, "epoch": round(self.plan.epoch_at(step), 4), "loss": float(loss),
                  "top1": float(top1), "lr": float(self.lr_at(step)), "img_per_sec": rate}
        if self.plan.config.precision == "fp16":
            record["loss_scale"] = float(self.optimizer.loss_scale)
        self.last = record
        if self.chief:
            self._emit(record)

    def _emit(self, record):
        print(f"step {record['step']:>7}/{self.plan.total_steps}  epoch {record['epoch']:7.2f}  "
              f"loss {record['loss']:.4f}  top1 {100 * record['top1']:6.2f}%  lr {record['lr']:.5f}  "
              f"{record['img_per_sec']:9.1f} img/s" + (f"  loss scale {record['loss_scale']:g}"
                                                       if "loss_scale" in record else ""), flush=True)
        if self.metrics_path:
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.writer:
            with self.writer.as_default(step=record["step"]):
                for key, value in record.items():
                    if key != "step":
                        tf.summary.scalar(key, value)
            self.writer.flush()

    def on_train_end(self, logs=None):
        end = time.perf_counter()
        self.total_seconds = end - self.start_time
        warmup = self.plan.config.benchmark_warmup_steps
        steps = self.last_step - self.plan.start_step  # a stopped run ends before total_steps
        if steps > warmup and self.warmup_end_time is not None:
            self.timed_steps, self.timed_seconds = steps - warmup, end - self.warmup_end_time

    def summary(self) -> dict:
        out = {"final": self.last, "train_seconds": self.total_seconds}
        if self.timed_steps:
            out["img_per_sec"] = self.timed_steps * self.plan.global_batch / self.timed_seconds
            out["img_per_sec_steps"] = self.timed_steps
        return out


def _drop_records_after(path, step):
    """A resumed run repeats the steps after its checkpoint; their old lines would appear twice. (A line cut
    short goes too.)"""
    records, _ = read_jsonl(path)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records if r.get("step", 0) <= step))


class Checkpointer(tf.keras.callbacks.Callback):
    """Every checkpoint_every steps, at each epoch end and at the last step: a check that no weight is
    NaN or infinite (on all ranks, so all take the same decision), then rank 0 saves through the
    CheckpointManager (which keeps the last K). Every rank holds the same variables (the trainer keeps
    even the batch-norm statistics alike), so rank 0's checkpoint is every rank's state."""

    _supports_tf_logs = True

    def __init__(self, trainer, manager, plan: Plan):
        super().__init__()
        self.trainer, self.manager, self.plan = trainer, manager, plan
        self.saved_step = self.last_step = None

    def on_train_batch_end(self, batch, logs=None):
        step = self.last_step = self.plan.start_step + batch + 1
        every = self.plan.config.checkpoint_every
        if (every and step % every == 0) or self.plan.ends_epoch(step) or step == self.plan.total_steps:
            self.save(step)

    def on_train_end(self, logs=None):
        """A run stopped after a step (a callback's model.stop_training, or the ranks' stop agreement) keeps
        that step: saved here, before the later callbacks' on_train_end (EarlyStopping's restore_best_weights
        would put other weights in place)."""
        if self.trainer.stop_training and self.last_step is not None:
            self.save(self.last_step)

    def save(self, step: int) -> str:
        """The checkpoint of `step` (every rank calls this); its path. Written once per step."""
        if self.saved_step != step:
            if not all_finite(self.trainer.model.variables):
                raise NonFiniteLossError(f"the weights became NaN or infinite by step {step}: stopping without "
                                         f"saving them. {_divergence_advice(self.trainer, self.plan)}")
            if distributed.is_chief():
                self.manager.save(checkpoint_number=step)
            self.saved_step = step
        return os.path.join(self.manager.directory, f"ckpt-{step}")


def all_finite(variables) -> bool:
    # Eagerly: a few milliseconds per checkpoint, where a tf.function's trace and graph optimization took seconds
    # once per run (Inception v4's 900 variables: 2.6 s).
    return bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in variables]))


class RunEpochs(tf.keras.callbacks.Callback):
    """The user's Keras callbacks, told of the run's epochs. tfcnn's fit() spans the whole run as one Keras epoch
    (its steps are the run's, from start_step on), so a callback given to it as it is would see on_epoch_end
    once, after the last step, and EarlyStopping could never act. Through this they see
    on_epoch_begin(epoch) before an epoch's first step and on_epoch_end(epoch, logs) after its last, and after
    the last step of a run that ends within an epoch (a stop, or --num_iter in batches), as Keras' fit calls
    them; epochs are counted from 0 since the run's start. The epoch's logs: `loss` and `top1` (the training
    metrics since the last displayed step) averaged over ranks, so that every rank's callbacks decide alike,
    and `val_top1` and `val_top5` when val_data was scored at that step. The other events pass through.

    A stop they ask for (model.stop_training) after a step or an epoch on any rank is every rank's: one that
    stopped alone would leave the others waiting for it in their next step, for ever. (A callback may decide on
    what differs between ranks: the time, its own rank's batch. The ranks agree after every step only when a
    callback has a batch hook; after every epoch always.)"""

    _supports_tf_logs = True

    def __init__(self, callbacks, plan: Plan):
        super().__init__()
        self.callbacks = tf.keras.callbacks.CallbackList(list(callbacks))  # numpy logs for those that want them
        self.plan = plan
        self.open_epoch = self.last_logs = None
        base = tf.keras.callbacks.Callback
        self.batch_hooks = any(getattr(type(c), hook) is not getattr(base, hook) for c in callbacks
                               for hook in ("on_batch_begin", "on_batch_end", "on_train_batch_begin",
                                            "on_train_batch_end"))

    def set_model(self, model):
        super().set_model(model)
        self.callbacks.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        epochs = -(-self.plan.images_at(self.plan.total_steps) // self.plan.epoch_images)  # the last may be partial
        self.callbacks.set_params({**params, "epochs": epochs, "steps": self.plan.steps_per_epoch})

    def on_train_begin(self, logs=None):
        self.callbacks.on_train_begin(logs)

    def on_train_batch_begin(self, batch, logs=None):
        step = self.plan.start_step + batch + 1
        if self.open_epoch is None:
            self.open_epoch = self.plan.images_at(step - 1) // self.plan.epoch_images
            self.callbacks.on_epoch_begin(self.open_epoch)
        self.callbacks.on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        self.last_logs = logs
        self.callbacks.on_train_batch_end(batch, logs)
        ends_epoch = self.plan.ends_epoch(self.plan.start_step + batch + 1)
        if ends_epoch:
            self._end_epoch()
        if self.batch_hooks or ends_epoch:  # one agreement for the step's and the epoch's callbacks
            self._agree_on_stopping()

    def on_epoch_begin(self, epoch, logs=None):
        pass  # fit()'s one epoch: the run's are sent from the steps

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_end(self, logs=None):
        if self.open_epoch is not None:
            self._end_epoch()
        self.callbacks.on_train_end(logs)

    def _end_epoch(self):
        logs = self.last_logs
        loss, top1 = distributed.allreduce(tf.stack([tf.cast(logs["loss"], tf.float32),
                                                     tf.cast(logs["top1"], tf.float32)]), name="tfcnn_epoch_logs")
        epoch_logs = {"loss": float(loss), "top1": float(top1),
                      **{key: float(logs[key]) for key in ("val_top1", "val_top5") if key in logs}}
        self.callbacks.on_epoch_end(self.open_epoch, epoch_logs)
        self.open_epoch = None

    def _agree_on_stopping(self):
        if distributed.size() > 1:
            asked = distributed.allreduce(tf.constant(float(bool(self.model.stop_training))), average=False,
                                          name="tfcnn_callback_stop")
            self.model.stop_training = float(asked) > 0
