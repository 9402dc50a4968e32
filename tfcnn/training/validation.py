"""Validation on data held in memory while training (tfcnn.train's val_data), as Keras' `fit(validation_data=...)`
scores it: at the end of every --validation_every-th epoch and after the last step.

Every rank evaluates its share (tfcnn.data.memory: every size-th example) of the same model (the trainer keeps
every variable alike on all ranks) and the counts are summed, so each example counts once over all ranks;
with --ema_decay the weight average is what is scored. Rank 0 prints
each result, appends it to metrics.jsonl (`step, epoch, val_top1, val_top5, val_count`) and writes it to
TensorBoard (`tensorboard/validation`: top1 and top5, beside training's top1), and every rank keeps the history.
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from tfcnn import distributed, metrics
from tfcnn.training.callbacks import METRICS_FILE
from tfcnn.training.plan import Plan
from tfcnn.training.trainer import predict


class Validator(tf.keras.callbacks.Callback):
    """Scores val_data at the end of every plan.config.validation_every-th epoch (none with 0) and, through
    `final`, after training. A step at which the ranks agreed to stop is not scored: the run is not done, and
    a time limit may be near."""

    _supports_tf_logs = True

    def __init__(self, trainer, plan: Plan, data):
        super().__init__()
        self.trainer, self.plan, self.data = trainer, plan, data
        self.history = []  # one dict per validation: step, epoch, count, top1, top5, top1_correct, top5_correct
        log_dir = plan.config.log_dir if distributed.is_chief() else None
        self.metrics_path = os.path.join(log_dir, METRICS_FILE) if log_dir else None
        self.writer = (tf.summary.create_file_writer(os.path.join(log_dir, "tensorboard", "validation"))
                       if log_dir else None)

    def on_train_batch_end(self, batch, logs=None):
        if self.trainer.stop_training:
            return
        step, every = self.plan.start_step + batch + 1, self.plan.config.validation_every
        if step == self.plan.total_steps or (every and self.plan.ends_epoch(step)
                                             and round(self.plan.epoch_at(step)) % every == 0):
            record = self.validate(step)
            if logs is not None:  # for the later callbacks, as Keras' fit adds val_ metrics to an epoch's logs
                logs.update(val_top1=record["top1"], val_top5=record["top5"])

    def final(self) -> dict:
        """The validation of the weights the model holds after training: the one made at their step, if any,
        else a new one. Every rank calls it. Their step is the trainer's: the last step trained, or an earlier
        one whose weights a callback put back (EarlyStopping's restore_best_weights, which that step's
        validation chose)."""
        step = int(self.trainer.step.numpy())
        made = [record for record in self.history if record["step"] == step]
        return made[-1] if made else self.validate(step)

    def validate(self, step: int) -> dict:
        with self.trainer.inference_weights():
            scores = predict(self.trainer, self.plan, self.data)
        record = {"step": step, "epoch": round(self.plan.epoch_at(step), 4), **scores}
        self.history.append(record)
        if distributed.is_chief():
            self._emit(record)
        return record

    def _emit(self, record):
        print(f"validation at step {record['step']} (epoch {record['epoch']:.2f}): "
              f"{metrics.scores_text(record, self.plan.num_classes)}", flush=True)
        if self.metrics_path:
            logged = {"step": record["step"], "epoch": record["epoch"], "val_top1": record["top1"],
                      "val_top5": record["top5"], "val_count": record["count"]}
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(logged) + "\n")
        if self.writer:
            with self.writer.as_default(step=record["step"]):
                tf.summary.scalar("top1", record["top1"])
                tf.summary.scalar("top5", record["top5"])
            self.writer.flush()
