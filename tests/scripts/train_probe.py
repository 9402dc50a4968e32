"""Runs tfcnn training from a JSON config and records what the tests check, per rank.

    python tests/scripts/train_probe.py CONFIG_JSON OUT_DIR [--inject_inf_rank R --inject_inf_step S]
        [--slow_stop_save_s SECONDS] [--stop_rank R --stop_step S]

Writes OUT_DIR/rank{r}.npz: the final trainable weights (and moving averages of all weights with --ema_decay),
and per step the loss scale (fp16) and a float64 digest of the weights; OUT_DIR/summary{r}.json: train()'s
summary. CONFIG_JSON may also be a list of configurations, trained one after the other by the same processes
(one launch, one TensorFlow start-up per rank, for several runs), each recording into OUT_DIR/<its index>.
--inject_inf_* makes one rank's gradients infinite at one step (as an fp16 overflow would). --slow_stop_save_s
makes the checkpoint of a stop take that much longer on every rank (as a large model's on a slow file system
would). --stop_* adds a callback that sets model.stop_training after step S on rank R alone (as one deciding on
what only its rank sees would). A run stopped by a stop signal or --max_minutes exits with status 75, as
examples/train.py does. The tests' small models (tests/testnet.py) are registered besides the zoo.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testnet  # noqa: E402
from tfcnn import distributed
from tfcnn.training import make_config, train
from tfcnn.training.stopping import exit_preempted
from tfcnn.training.trainer import ClassifierTrainer


class Recorder(tf.keras.callbacks.Callback):
    def __init__(self, out_dir):
        super().__init__()
        self.out_dir = out_dir
        self.steps, self.loss_scales, self.digests = [], [], []

    def on_train_batch_end(self, batch, logs=None):
        trainer = self.model
        step = int(trainer.step.numpy())
        self.steps.append(step)
        scale = getattr(trainer.optimizer, "loss_scale", None)
        self.loss_scales.append(float(scale) if scale is not None else 0.0)
        self.digests.append(sum(float(np.sum(v.numpy().astype(np.float64))) for v in trainer.model.trainable_variables))

    def on_train_end(self, logs=None):
        self.save(self.model)

    def save(self, trainer):
        weights = {f"w{i}": v.numpy() for i, v in enumerate(trainer.model.trainable_variables)}
        if trainer.ema is not None:  # the moving average of every model weight (batch-norm statistics too)
            weights.update({f"ema{i}": v.numpy() for i, v in enumerate(trainer.ema.averages)})
        np.savez(os.path.join(self.out_dir, f"rank{distributed.rank()}.npz"), steps=np.array(self.steps),
                 loss_scales=np.array(self.loss_scales), digests=np.array(self.digests), **weights)


class StopOnOneRank(tf.keras.callbacks.Callback):
    def __init__(self, rank, step):
        super().__init__()
        self.rank, self.step = rank, step

    def on_train_batch_end(self, batch, logs=None):
        if distributed.rank() == self.rank and int(self.model.step.numpy()) == self.step:
            self.model.stop_training = True


def inject_inf(rank, step):
    original = ClassifierTrainer.compute_gradients

    def compute_gradients(self, *args):
        loss, logits, grads, labels = original(self, *args)
        hit = tf.logical_and(tf.equal(self.step + 1, step), tf.equal(distributed.rank(), rank))
        grads = [tf.where(hit, tf.fill(tf.shape(g), tf.constant(np.inf, g.dtype)), g) for g in grads]
        return loss, logits, grads, labels

    ClassifierTrainer.compute_gradients = compute_gradients


def slow_stop_saves(seconds):
    """A stopped run's checkpoint (Checkpointer.on_train_end, tfcnn.training.callbacks) waits `seconds` first."""
    from tfcnn.training.callbacks import Checkpointer

    on_train_end = Checkpointer.on_train_end

    def slow_on_train_end(self, logs=None):
        if self.trainer.stop_training:
            time.sleep(seconds)
        return on_train_end(self, logs)

    Checkpointer.on_train_end = slow_on_train_end


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out_dir")
    parser.add_argument("--inject_inf_rank", type=int)
    parser.add_argument("--inject_inf_step", type=int)
    parser.add_argument("--slow_stop_save_s", type=float, default=0.0)
    parser.add_argument("--stop_rank", type=int)
    parser.add_argument("--stop_step", type=int)
    args = parser.parse_args()
    testnet.register()
    if args.inject_inf_step is not None:
        inject_inf(args.inject_inf_rank, args.inject_inf_step)
    if args.slow_stop_save_s:
        slow_stop_saves(args.slow_stop_save_s)
    config = json.loads(args.config)
    runs = ([(config, args.out_dir)] if isinstance(config, dict)
            else [(one, os.path.join(args.out_dir, str(index))) for index, one in enumerate(config)])
    for config, out_dir in runs:
        os.makedirs(out_dir, exist_ok=True)
        stop = [StopOnOneRank(args.stop_rank, args.stop_step)] if args.stop_step is not None else []
        summary = train(make_config(**config), callbacks=[Recorder(out_dir), *stop])
        with open(os.path.join(out_dir, f"summary{distributed.rank()}.json"), "w") as f:
            json.dump({k: v for k, v in summary.items() if k != "model"}, f)
        if "preempted" in summary:  # as examples/train.py
            exit_preempted(summary["config"]["stop_signals"])


if __name__ == "__main__":
    main()
