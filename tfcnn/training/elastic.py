"""Elastic training: a run that survives lost workers and takes in new ones (`--elastic` under
`horovodrun --min-np N --max-np M --host-discovery-script S`, Gloo).

The state (weights, optimizer slots and loss scale, step, images trained on, weight average) is
committed in memory every --elastic_commit_every steps and at every epoch end. A lost worker makes a
collective fail on the survivors: they roll back to the last commit, the ranks re-form, and training goes
on with fewer workers from the committed step. Workers that the discovery script offers again join at
the next commit and receive the state by broadcast.

What follows the world size: every rank keeps its --batch_size, so the global batch is batch_size x
workers, and the learning rate is scaled with it (--lr per 256 images, as always). Everything else is
counted in images, the same on every rank whatever the world size, newcomers included: the warmup and
decay run on images trained on, an epoch is the training records, and the run ends after num_iter
epochs of images (--iter_unit epoch). After a change of world size each rank reads its new share of the
files from the same position in the epoch (not the same images an uninterrupted run would have seen:
with another number of ranks there is no such run). Checkpoints to disk work as in any run; rank 0
(whichever process it is now) writes them.
"""
from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from tfcnn import distributed
from tfcnn.training.plan import Plan
from tfcnn.training.schedules import config_schedule
from tfcnn.training.trainer import build_trainer, fit_segment, training_variables


class ProgressSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """The run's schedule on images instead of steps: --lr per 256 images times the current global batch,
    warmup and decay over images trained on."""

    def __init__(self, config, epoch_images, images_seen, global_batch):
        super().__init__()
        unit = 256  # the base schedule's "steps" are 256 images
        self.base = config_schedule(config, config.lr, round(config.num_iter * epoch_images / unit),
                                    epoch_images / unit)
        self.images_seen, self.global_batch, self.unit = images_seen, global_batch, unit

    def __call__(self, step):  # the optimizer's own step count is not what elastic runs go by
        lr_per_256 = self.base(tf.cast(self.images_seen, tf.float32) / self.unit)
        return lr_per_256 * tf.cast(self.global_batch, tf.float32) / self.unit

    def at(self, images: int, global_batch: int) -> float:
        return float(self.base(images / self.unit)) * global_batch / self.unit

    def get_config(self):
        return {"base": self.base.get_config()}


class ImagesCounter(tf.keras.callbacks.Callback):
    """Counts the images trained on: the elastic schedule and the data position go by it."""

    def __init__(self, images_seen, global_batch):
        super().__init__()
        self.images_seen, self.global_batch = images_seen, global_batch

    def on_train_batch_end(self, batch, logs=None):
        self.images_seen.assign_add(self.global_batch)


class Committer(tf.keras.callbacks.Callback):
    """Commits the elastic state every `every` steps and at every epoch end, on every rank at once."""

    def __init__(self, commit, every, plan: Plan):
        super().__init__()
        self.commit, self.every, self.plan = commit, every, plan

    def on_train_batch_end(self, batch, logs=None):
        step = self.plan.start_step + batch + 1
        if (self.every and step % self.every == 0) or self.plan.ends_epoch(step):
            self.commit()


def train_elastic(launch: Plan, callbacks=(), log=print, stop=None):
    """Trains `launch` elastically. Returns (model, trainer, the progress summary of the last segment
    with `world_sizes`, the sizes it ran at). `log` is what rank 0 prints with: which process that is may
    change at every re-forming. stop: a stopping.StopRequest, as for fit_segment."""
    config = launch.config
    images_seen = tf.Variable(launch.start_images, dtype=tf.int64, trainable=False, name="images_seen")
    global_batch = tf.Variable(launch.global_batch, dtype=tf.int64, trainable=False, name="global_batch")
    seed = tf.Variable(config.seed, dtype=tf.int64, trainable=False, name="seed")  # rank 0's, once synced
    schedule = ProgressSchedule(config, launch.epoch_images, images_seen, global_batch)
    quiet = lambda *_: None  # noqa: E731
    model, _, trainer, checkpoint, _ = build_trainer(launch, log if distributed.is_chief() else quiet, lr=schedule,
                                                     state={"images_seen": images_seen}, broadcast=False)
    total_images = config.num_iter * launch.epoch_images
    sizes = []

    def run_once(commit):
        size = distributed.size()
        say = log if distributed.is_chief() else quiet
        global_batch.assign(config.rank_batch * size)
        start_images, start_step, batch = int(images_seen.numpy()), int(trainer.step.numpy()), config.rank_batch * size
        remaining = math.ceil(max(total_images - start_images, 0) / batch)
        plan = dataclasses.replace(launch, global_batch=batch, start_step=start_step, start_images=start_images,
                                   total_steps=start_step + remaining,
                                   steps_per_epoch=max(launch.epoch_images // batch, 1),
                                   config=dataclasses.replace(config, seed=int(seed.numpy())))
        if not sizes:
            say(f"tfcnn: elastic: {size} worker(s), global batch {batch}, committing every "
                f"{config.elastic_commit_every} steps and at epoch ends; {total_images} images to train on"
                + (f", {start_images} done (step {start_step})" if start_images else ""))
        else:  # after every re-forming, also one that ends at the same size (a worker replaced)
            say(f"tfcnn: elastic: world size {sizes[-1]} -> {size}: resuming at step {start_step} "
                f"(epoch {plan.epoch_at(start_step):.2f}) with global batch {batch}, "
                f"lr {schedule.at(start_images, batch):.5f}")
        sizes.append(size)
        if remaining == 0:  # workers joined at the last commit, or the last step's collective failed after it
            say(f"tfcnn: elastic: the run is complete: {total_images} images by step {start_step}")
            return {"start_step": start_step, "total_steps": start_step, "final": None, "train_seconds": 0.0,
                    "world_sizes": sizes}
        progress = fit_segment(trainer, checkpoint, plan, lambda step: schedule.at(plan.images_at(step - 1), batch),
                               before=[ImagesCounter(images_seen, global_batch)],
                               after=[Committer(commit, config.elastic_commit_every, plan)], callbacks=callbacks,
                               stop=stop)
        return {**progress, "world_sizes": sizes}

    state = training_variables(trainer) + [images_seen, seed]
    return model, trainer, distributed.run_elastic(run_once, state, log)
