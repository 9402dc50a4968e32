"""An exponential moving average of a model's weights (Polyak averaging), as EfficientNet trains with.

After every step each average moves toward its weight: avg -= (1 - d) * (avg - w), with
d = min(decay, (1 + step) / (10 + step)) as TensorFlow's ExponentialMovingAverage(num_updates=step)
does, so early averages are not dominated by the random initialization. All of `model.weights` are
averaged, batch-norm moving statistics included, so the averaged model is self-consistent.

Under Horovod every weight, the batch-norm statistics included (the trainer averages them over ranks at
every step), is identical on every rank after each step, and so are their averages.
"""
from __future__ import annotations

import contextlib

import tensorflow as tf


class _Untracked:
    """Holds the model's own variables out of tf.Module's dependency tracking: a checkpoint of the
    average must not save the model a second time."""

    def __init__(self, variables):
        self.variables = list(variables)


class WeightAverage(tf.Module):
    def __init__(self, model: tf.keras.Model, decay: float):
        super().__init__(name="weight_average")
        self.decay = float(decay)
        self._model_weights = _Untracked(model.weights)
        self.averages = [tf.Variable(tf.cast(w, tf.float32), trainable=False, name=f"average_{i}")
                         for i, w in enumerate(model.weights)]

    @property
    def weights(self) -> list:
        """The averaged model variables, in the order of `averages`."""
        return self._model_weights.variables

    def update(self, step) -> None:
        """One averaging step; `step` counts the updates so far (1 after the first training step)."""
        step = tf.cast(step, tf.float32)
        decay = tf.minimum(self.decay, (1.0 + step) / (10.0 + step))
        for average, weight in zip(self.averages, self.weights):
            average.assign_sub((1.0 - decay) * (average - tf.cast(weight, tf.float32)))

    def reset(self) -> None:
        """Starts the averages at the model's current weights."""
        for average, weight in zip(self.averages, self.weights):
            average.assign(tf.cast(weight, tf.float32))

    def copy_to_model(self) -> None:
        for weight, average in zip(self.weights, self.averages):
            weight.assign(tf.cast(average, weight.dtype))

    @contextlib.contextmanager
    def swapped_in(self):
        """Within the block the model holds the averaged weights; its own come back afterwards."""
        saved = [tf.identity(w) for w in self.weights]
        self.copy_to_model()
        try:
            yield
        finally:
            for weight, value in zip(self.weights, saved):
                weight.assign(value)
