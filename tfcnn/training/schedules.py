"""Learning-rate schedules: linear warmup from 0, then cosine, step or polynomial decay, or constant.

Positions are optimizer steps, so a restored optimizer (its `iterations`) resumes the schedule exactly
where it stopped. With `steps_per_position` > 1 the schedule moves in whole epochs instead: the rate
is computed from the epoch a step belongs to and holds for all of that epoch's steps, as NVIDIA's
PyTorch ConvNets set it (lr_cosine_policy and its siblings read only the epoch).
"""
from __future__ import annotations

import math

import tensorflow as tf

from tfcnn.options import LR_GRANULARITIES


class WarmupDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
    """peak_lr reached linearly over warmup positions, then decayed until total positions.

    At position p < warmup: peak_lr * (p + 1) / warmup. After it, with progress = (p - warmup) /
    (total - warmup): 'cosine' peak_lr * (1 + cos(pi progress)) / 2, 'poly' peak_lr * (1 - progress) **
    power, 'step' peak_lr * factor ** (boundaries passed), 'constant' peak_lr. A position is a step, or
    with steps_per_position > 1 the floor of step / steps_per_position (an epoch).
    """

    def __init__(self, peak_lr, total_steps, warmup_steps=0, kind="cosine", boundaries=(), factor=0.1, power=2.0,
                 steps_per_position=1):
        super().__init__()
        self.peak_lr, self.total_steps, self.warmup_steps = float(peak_lr), float(total_steps), float(warmup_steps)
        self.kind, self.boundaries, self.factor, self.power = kind, tuple(float(b) for b in boundaries), factor, power
        self.steps_per_position = float(steps_per_position)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        if self.steps_per_position != 1:
            step = tf.floor(step / self.steps_per_position)
        warmup = max(self.warmup_steps, 1.0)
        decay_steps = max(self.total_steps - self.warmup_steps, 1.0)
        progress = tf.clip_by_value((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        if self.kind == "cosine":
            decayed = 0.5 * self.peak_lr * (1.0 + tf.cos(math.pi * progress))
        elif self.kind == "poly":
            decayed = self.peak_lr * tf.pow(1.0 - progress, self.power)
        elif self.kind == "step":
            passed = tf.add_n([tf.cast(step >= b, tf.float32) for b in self.boundaries]) if self.boundaries else 0.0
            decayed = self.peak_lr * tf.pow(self.factor, passed)
        else:
            decayed = tf.constant(self.peak_lr)
        if self.warmup_steps == 0:
            return decayed
        return tf.where(step < self.warmup_steps, self.peak_lr * (step + 1.0) / warmup, decayed)

    def get_config(self):
        return dict(peak_lr=self.peak_lr, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                    kind=self.kind, boundaries=self.boundaries, factor=self.factor, power=self.power,
                    steps_per_position=self.steps_per_position)


def config_schedule(config, peak_lr, total_steps, steps_per_epoch) -> WarmupDecay:
    """A run's --lr_schedule with its warmup and decay epochs, over steps of which an epoch has
    `steps_per_epoch` (fractional for an elastic run, whose steps are 256-image units), changing every
    step or, with --lr_granularity epoch, at each epoch's start."""
    if config.lr_granularity not in LR_GRANULARITIES:
        raise ValueError(f"--lr_granularity must be one of {', '.join(LR_GRANULARITIES)}, "
                         f"received: {config.lr_granularity!r}")
    common = dict(kind=config.lr_schedule, factor=config.lr_decay_factor, power=config.poly_power)
    if config.lr_granularity == "epoch":
        return WarmupDecay(peak_lr, total_steps / steps_per_epoch, warmup_steps=config.warmup_epochs,
                           boundaries=config.lr_decay_epochs, steps_per_position=steps_per_epoch, **common)
    return WarmupDecay(peak_lr, total_steps, warmup_steps=round(config.warmup_epochs * steps_per_epoch),
                       boundaries=[round(e * steps_per_epoch) for e in config.lr_decay_epochs], **common)
