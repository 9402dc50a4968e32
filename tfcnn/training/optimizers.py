"""Optimizers, with weight decay on kernels only (never batch-norm parameters or biases).

SGD and RMSprop use coupled L2 decay as NVIDIA's recipes do: `weight_decay / 2 * ||w||^2` joins the
loss, so its gradient `weight_decay * w` goes through momentum and through loss scaling like every
other term. AdamW and LAMB use their own decoupled decay, with 1-D variables excluded. LAMB is tfcnn's
own (tfcnn/training/lamb.py, equal to tensorflow-addons' to float tolerance, tested): tensorflow-addons
does not import on TensorFlow >= 2.16, and one implementation on every TensorFlow keeps runs comparable.
"""
from __future__ import annotations

import tensorflow as tf

from tfcnn.options import OPTIMIZERS
from tfcnn.training.lamb import LAMB


def decayed_variables(variables):
    """Kernels get weight decay; batch-norm gammas/betas and biases (all 1-D) do not."""
    return [v for v in variables if len(v.shape) > 1]


def l2_penalty(variables, weight_decay):
    """weight_decay / 2 * sum of squares, in float32 (variables are float32 under mixed precision too)."""
    return 0.5 * weight_decay * tf.add_n([tf.reduce_sum(tf.square(v)) for v in variables])


DEFAULT_EPSILON = {"rmsprop": 1e-7, "lamb": 1e-6, "adamw": 1e-6}


def build_optimizer(name, learning_rate, *, momentum=0.9, beta_2=0.999, weight_decay=0.0, variables=(),
                    loss_scale=False, epsilon=None):
    """Returns (optimizer, coupled_l2): coupled_l2 True means the trainer adds `l2_penalty` to the loss.

    momentum: SGD / RMSprop momentum, beta_1 of LAMB / AdamW. beta_2: decay of the squared-gradient
    average (RMSprop's rho). epsilon: None for each optimizer's default. loss_scale: wrap in Keras'
    dynamic LossScaleOptimizer (fp16 training).
    """
    no_decay = [v for v in variables if len(v.shape) <= 1]
    epsilon = DEFAULT_EPSILON.get(name) if epsilon is None else epsilon
    if name == "sgd":
        optimizer = tf.keras.optimizers.SGD(learning_rate, momentum=momentum)
        coupled = weight_decay > 0
    elif name == "rmsprop":
        optimizer = tf.keras.optimizers.RMSprop(learning_rate, rho=beta_2, momentum=momentum, epsilon=epsilon)
        coupled = weight_decay > 0
    elif name == "adamw":
        optimizer = tf.keras.optimizers.AdamW(learning_rate, weight_decay=weight_decay, beta_1=momentum,
                                              beta_2=beta_2, epsilon=epsilon)
        optimizer.exclude_from_weight_decay(var_list=no_decay)
        coupled = False
    elif name == "lamb":
        optimizer = LAMB(learning_rate, beta_1=momentum, beta_2=beta_2, epsilon=epsilon, weight_decay=weight_decay,
                         exclude_from_weight_decay=no_decay)
        coupled = False
    else:
        raise ValueError(f"unknown optimizer {name!r}; valid optimizers: {', '.join(OPTIMIZERS)}")
    if loss_scale:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer, coupled


def optimizer_variables(optimizer):
    """The optimizer's state variables (slots, iterations, loss scale), new or legacy Keras API."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)
