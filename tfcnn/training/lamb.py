"""LAMB (You et al. 2019, https://arxiv.org/abs/1904.00962, Algorithm 2) on the Keras 2 optimizer API.

tensorflow-addons' LAMB cannot be imported on TensorFlow >= 2.16, so tfcnn carries its own. It keeps
tfa's semantics (defaults, bias correction, where decay enters, the trust ratio and its 1.0 fallbacks,
layer adaptation excluded wherever weight decay is unless told otherwise), but takes the excluded
variables themselves rather than regexes on their names. It subclasses the same base as Keras'
AdamW and uses only what that base offers in both Keras 2.15 and tf_keras 2.17 (`build`,
`add_variable_from_reference`, `update_step`, `get_config`, `_var_key`), so its slots are built up
front, checkpoint through tf.train.Checkpoint and work under LossScaleOptimizer and XLA.
"""
from __future__ import annotations

import re

import tensorflow as tf


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class LAMB(tf.keras.optimizers.Optimizer):
    """Adam moments with bias correction, decoupled weight decay, and a per-variable trust ratio.

    For each variable w with gradient g, at step t (1-based):
        m = beta_1 m + (1 - beta_1) g            v = beta_2 v + (1 - beta_2) g^2
        r = (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)  [+ weight_decay * w]
        w -= lr * trust * r,  trust = ||w|| / ||r||  (1.0 if either norm is 0, or w is excluded)

    exclude_from_weight_decay: variables that get no weight decay (tfcnn: the 1-D ones, batch-norm
        parameters and biases). exclude_from_layer_adaptation: variables whose trust ratio is 1.0;
        None (the default) means the same variables as exclude_from_weight_decay, as in tfa (an
        explicit [] means none, where tfa would fall back too). Both can also be set (or given as name
        regexes) with the methods of the same names, before `build`. epsilon must be > 0: tfa silently
        replaces 0 with 1e-7, which hides a setting that would divide by zero.
    Other keyword arguments (clipnorm, global_clipnorm, use_ema, jit_compile, ...) go to the Keras base.

    The base class's own `weight_decay` stays None: the base would otherwise shrink every variable
    AdamW-style before `update_step`, on top of LAMB's decay. LAMB's rate is `lamb_weight_decay`.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.0,
                 exclude_from_weight_decay=None, exclude_from_layer_adaptation=None, name="LAMB", **kwargs):
        super().__init__(name=name, **kwargs)
        self.beta_1 = _checked_rate("beta_1", beta_1)
        self.beta_2 = _checked_rate("beta_2", beta_2)
        self.epsilon = _checked("epsilon", epsilon, lambda x: x > 0, "must be > 0")
        self.lamb_weight_decay = _checked("weight_decay", weight_decay, lambda x: x >= 0, "must be >= 0")
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.exclude_from_weight_decay(var_list=exclude_from_weight_decay)
        self._no_adaptation = None  # None: follow the weight-decay exclusions
        if exclude_from_layer_adaptation is not None:
            self.exclude_from_layer_adaptation(var_list=exclude_from_layer_adaptation)

    # ------------------------------------------------------------------------------ exclusions

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Sets (replaces) the variables that get no weight decay: those in var_list, and those whose
        name a regex of var_names matches (re.search, as Keras and tfa do). Before `build` only: the
        choice is made once per variable when the update is traced."""
        self._no_decay = self._selection("exclude_from_weight_decay", var_list, var_names)

    def exclude_from_layer_adaptation(self, var_list=None, var_names=None):
        """Sets (replaces) the variables whose trust ratio is 1.0, as `exclude_from_weight_decay`
        does; once called, the two sets no longer follow each other."""
        self._no_adaptation = self._selection("exclude_from_layer_adaptation", var_list, var_names)

    def _selection(self, what, var_list, var_names):
        """(variable keys, name regexes): keys rather than names, so equal names cannot collide."""
        if getattr(self, "_built", False):
            raise ValueError(f"LAMB.{what}() must be called before the optimizer is built "
                             f"(its first apply_gradients or build)")
        for item in var_list or ():
            if isinstance(item, str):
                raise TypeError(f"LAMB {what} takes variables, received the string {item!r}: pass name "
                                f"regexes as optimizer.{what}(var_names=[...])")
        return frozenset(self._var_key(v) for v in var_list or ()), tuple(var_names or ())

    def _matches(self, selection, variable):
        keys, patterns = selection
        return self._var_key(variable) in keys or any(re.search(p, variable.name) for p in patterns)

    def _decays(self, variable):
        return self.lamb_weight_decay > 0 and not self._matches(self._no_decay, variable)

    def _adapts(self, variable):
        return not self._matches(self._no_decay if self._no_adaptation is None else self._no_adaptation, variable)

    # -------------------------------------------------------------------------------- the step

    def build(self, var_list):
        """Creates the first and second moments, one pair per variable, in the variables' dtype."""
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._momentums = [self.add_variable_from_reference(v, "m") for v in var_list]
        self._velocities = [self.add_variable_from_reference(v, "v") for v in var_list]

    def update_step(self, gradient, variable):
        """One LAMB update of `variable`. Sparse gradients are made dense: LAMB's trust ratio needs the
        whole update's norm anyway, and tfa's sparse path equals the dense one."""
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        index = self._index_dict[self._var_key(variable)]
        m, v = self._momentums[index], self._velocities[index]
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        step = tf.cast(self.iterations + 1, dtype)

        m_t = m * beta_1 + gradient * (1 - beta_1)
        v_t = v * beta_2 + tf.square(gradient) * (1 - beta_2)
        m.assign(m_t)
        v.assign(v_t)
        m_hat = m_t / (1 - tf.pow(beta_1, step))
        v_hat = v_t / (1 - tf.pow(beta_2, step))
        update = m_hat / (tf.sqrt(v_hat) + tf.cast(self.epsilon, dtype))
        if self._decays(variable):
            update += tf.cast(self.lamb_weight_decay, dtype) * variable
        lr = tf.cast(self.learning_rate, dtype)
        if self._adapts(variable):
            lr = lr * trust_ratio(variable, update)
        variable.assign_sub(lr * update)

    def get_config(self):
        """Hyperparameters only: the exclusions are variables, which a config cannot hold; set them
        again on an optimizer made by from_config."""
        config = super().get_config()
        config.update(learning_rate=self._serialize_hyperparameter(self._learning_rate),
                      beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                      weight_decay=self.lamb_weight_decay)
        return config


def trust_ratio(variable, update):
    """||w|| / ||update||, or 1.0 when either norm is zero (a zero-initialized variable, or nothing to
    do): the paper's phi(||w||) = ||w|| with tfa's fallbacks."""
    w_norm = tf.norm(variable)
    u_norm = tf.norm(update)
    both = tf.logical_and(w_norm > 0, u_norm > 0)
    return tf.where(both, tf.math.divide_no_nan(w_norm, u_norm), tf.ones_like(w_norm))


def _checked(name, value, ok, rule):
    """A plain float, or a ValueError naming the hyperparameter, its rule and the value."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"LAMB {name} must be a number, received: {value!r}") from None
    if not ok(number):
        raise ValueError(f"LAMB {name} {rule}, received: {value!r}")
    return number


def _checked_rate(name, value):
    return _checked(name, value, lambda x: 0 <= x < 1, "must be in [0, 1)")
