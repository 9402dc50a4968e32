"""Learning-rate schedules: linear warmup from 0, then cosine, step or polynomial decay, or constant.

All positions are in optimizer steps, so a restored optimizer (its `iterations`) resumes the schedule
exactly where it stopped.
"""
from __future__ import annotations

import math

import tensorflow as tf


class WarmupDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
    """peak_lr reached linearly over warmup_steps, then decayed until total_steps.

    kind: 'cosine' (to 0 at total_steps), 'step' (x factor at each boundary step), 'poly'
    ((1 - progress) ** power), or 'constant'.
    """

    def __init__(self, peak_lr, total_steps, warmup_steps=0, kind="cosine", boundaries=(), factor=0.1, power=2.0):
        super().__init__()
        self.peak_lr, self.total_steps, self.warmup_steps = float(peak_lr), int(total_steps), int(warmup_steps)
        self.kind, self.boundaries, self.factor, self.power = kind, tuple(int(b) for b in boundaries), factor, power

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = float(max(self.warmup_steps, 1))
        decay_steps = float(max(self.total_steps - self.warmup_steps, 1))
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
                    kind=self.kind, boundaries=self.boundaries, factor=self.factor, power=self.power)


def config_schedule(config, peak_lr, total_steps, steps_per_epoch) -> WarmupDecay:
    """A run's --lr_schedule with its warmup and decay epochs, over steps of which an epoch has
    `steps_per_epoch` (fractional for an elastic run, whose steps are 256-image units)."""
    return WarmupDecay(peak_lr, total_steps, warmup_steps=round(config.warmup_epochs * steps_per_epoch),
                       kind=config.lr_schedule, factor=config.lr_decay_factor, power=config.poly_power,
                       boundaries=[round(e * steps_per_epoch) for e in config.lr_decay_epochs])
