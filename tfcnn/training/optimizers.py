"""Optimizers, the weight-decay sets, LARC and loss scaling: each a choice a recipe names.

SGD and RMSprop use coupled L2 decay, as NVIDIA's recipes do: `weight_decay / 2 * ||w||^2` over the
`--weight_decay_set` joins the loss, so its gradient `weight_decay * w` goes through loss scaling, the
allreduce, LARC and momentum like every other term (PyTorch's SGD(weight_decay=...) adds the same
term to the averaged gradient; in fp32 the two are the same sum). AdamW and LAMB decay the same set
their own decoupled way. LAMB is tfcnn's own (tfcnn/training/lamb.py, equal to tensorflow-addons' to
float tolerance, tested): tensorflow-addons does not import on TensorFlow >= 2.16.

SGD's momentum comes in two forms, equal at a constant learning rate and not once it changes:
- "pytorch": v = m v + g; w -= lr v (Nesterov: w -= lr (g + m v)). PyTorch's SGD and TF1's
  MomentumOptimizer, so every NVIDIA recipe. tfcnn's `MomentumSGD` below.
- "keras": v = m v - lr g; w += v (Nesterov: w += m v - lr g). Keras' SGD.
"""
from __future__ import annotations

import tensorflow as tf

from tfcnn.options import LARC_MODES, MOMENTUM_FORMS, OPTIMIZERS, WEIGHT_DECAY_SETS, parse_loss_scale
from tfcnn.training.lamb import LAMB

# What each --weight_decay_set decays (the others are left alone):
#   kernels      every variable of rank > 1: conv and dense kernels (not batch norm, not biases)
#   no_bn        every trainable variable but batch-norm gammas and betas, biases included: NGC's nvutils
#                (an l2_regularizer on every variable whose name lacks 'BatchNorm')
#   no_bn_names  every trainable variable whose torchvision / timm name does not contain 'bn': NVIDIA's
#                PyTorch ConvNets (optimizers.py, bn_weight_decay=False). So the classifier's bias, the SE
#                layers' biases and the downsample batch norm (`downsample.1`) are decayed.


def decayed_variables(model, weight_decay_set: str = "kernels") -> list:
    """The trainable variables of `model` that `weight_decay_set` decays, in model order."""
    if weight_decay_set == "kernels":
        return [v for v in model.trainable_variables if len(v.shape) > 1]
    from tfcnn.models.weights import reference_names, weighted_layers  # only these two sets need the zoo's

    if weight_decay_set == "no_bn":
        keep = {id(v) for layer in weighted_layers(model) if not isinstance(layer, tf.keras.layers.BatchNormalization)
                for v in layer.trainable_weights}
    elif weight_decay_set == "no_bn_names":
        keep = {id(v) for v, name in reference_names(model) if "bn" not in name}
    else:
        raise ValueError(f"--weight_decay_set must be one of {', '.join(WEIGHT_DECAY_SETS)}, "
                         f"received: {weight_decay_set!r}")
    return [v for v in model.trainable_variables if id(v) in keep]


def l2_penalty(variables, weight_decay):
    """weight_decay / 2 * sum of squares, in float32 (variables are float32 under mixed precision too)."""
    # l2_loss (sum(v ** 2) / 2) is one op, and its gradient one: Sum(Square) are two, with five in the gradient
    return weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in variables])


def larc(gradients, variables, learning_rate, eta, mode="clip"):
    """LARC (You et al. 2017, https://arxiv.org/abs/1708.03888, as NVIDIA's nvutils.LarcOptimizer): each
    variable's gradient times its local rate, before the optimizer sees it.

    local = eta * ||w|| / ||g||, or 1.0 when either norm is 0 (nvutils' epsilon). Clip mode: local =
    min(local / lr, 1), so the variable's effective step size is min(eta ||w|| / ||g||, lr): LARC only
    ever slows a layer down. Scale mode: the local rate as it is (LARS' trust ratio times the global
    rate). Every variable takes part, batch norm and biases too, as in nvutils. The gradients are the
    averaged, unscaled ones, weight decay included, as nvutils wraps the optimizer."""
    if mode not in LARC_MODES:
        raise ValueError(f"--larc_mode must be one of {', '.join(LARC_MODES)}, received: {mode!r}")
    # The local rates of all variables as one vector: scalar ops per variable made LARC a third of the train
    # step's graph (Inception v4: 7,600 of 24,000 ops), which every run traces, optimizes and instantiates.
    dtype = variables[0].dtype

    def norms(tensors):
        return tf.sqrt(2.0 * tf.stack([tf.nn.l2_loss(tf.cast(t, dtype)) for t in tensors]))

    w_norm, g_norm = norms(variables), norms(gradients)
    local = tf.where(tf.logical_and(w_norm > 0, g_norm > 0), eta * tf.math.divide_no_nan(w_norm, g_norm), 1.0)
    if mode == "clip":
        local = tf.minimum(local / tf.cast(learning_rate, dtype), 1.0)
    return [gradient * tf.cast(rate, gradient.dtype) for gradient, rate in zip(gradients, tf.unstack(local))]


@tf.keras.utils.register_keras_serializable(package="tfcnn")
class MomentumSGD(tf.keras.optimizers.Optimizer):
    """SGD with PyTorch's and TF1's momentum: v = m v + g, then w -= lr v, or with Nesterov
    w -= lr (g + m v). The learning rate stays outside the velocity, so a change of rate applies to the
    whole velocity at once (Keras' SGD folds each step's rate into it). The first step's velocity is g,
    as PyTorch's buffer starts as a copy of the first gradient. No dampening."""

    def __init__(self, learning_rate=0.1, momentum=0.9, nesterov=False, name="MomentumSGD", weight_decay=None,
                 **kwargs):
        # weight_decay None: with tf_keras' default 0 every step still subtracts a zero decay from every variable
        # (Inception v4: 3,100 ops to trace and run)
        super().__init__(name=name, weight_decay=weight_decay, **kwargs)
        if not 0 <= float(momentum) < 1:
            raise ValueError(f"momentum must be in [0, 1), received: {momentum!r}")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        self._learning_rate = self._build_learning_rate(learning_rate)

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._velocities = [self.add_variable_from_reference(v, "v") for v in var_list]

    def update_step(self, gradient, variable):
        # TF1's own fused kernel for this rule (tf.compat.v1.train.MomentumOptimizer's, which NVIDIA's TF
        # scripts ran): one op per variable instead of six, measured 0.55-0.65x the update's time on
        # Inception-ResNet-v2's 694 variables (2-core CPU), and fewer ops to trace and optimize.
        dtype = variable.dtype
        velocity = self._velocities[self._index_dict[self._var_key(variable)]]
        tf.raw_ops.ResourceApplyMomentum(
            var=variable.handle, accum=velocity.handle, lr=tf.cast(self.learning_rate, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype), momentum=tf.cast(self.momentum, dtype),
            use_nesterov=self.nesterov)

    def get_config(self):
        config = super().get_config()
        config.update(learning_rate=self._serialize_hyperparameter(self._learning_rate), momentum=self.momentum,
                      nesterov=self.nesterov)
        return config


DEFAULT_EPSILON = {"rmsprop": 1e-7, "lamb": 1e-6, "adamw": 1e-6}
# Dynamic loss scaling as NVIDIA's PyTorch ConvNets configure torch.cuda.amp.GradScaler: start at 128
# (their static_loss_scale), double after 100 steps without overflow, halve and skip the step on one.
DYNAMIC_INITIAL_SCALE, DYNAMIC_GROWTH_STEPS = 128.0, 100


def build_optimizer(name, learning_rate, *, momentum=0.9, beta_2=0.999, weight_decay=0.0, decayed=None,
                    variables=(), loss_scale=None, epsilon=None, nesterov=False, momentum_form="pytorch"):
    """Returns (optimizer, coupled_l2): coupled_l2 True means the trainer adds `l2_penalty` to the loss.

    momentum: SGD / RMSprop momentum, beta_1 of LAMB / AdamW. beta_2: decay of the squared-gradient
    average (RMSprop's rho). epsilon: None for each optimizer's default. decayed: the variables weight
    decay applies to (AdamW / LAMB exclude the other `variables`); None: those of rank > 1.
    loss_scale: None for no loss scaling (fp32, bf16), else --loss_scale ('dynamic' or a static scale).
    nesterov, momentum_form: SGD's (see the module docstring).
    """
    if momentum_form not in MOMENTUM_FORMS:
        raise ValueError(f"--momentum_form must be one of {', '.join(MOMENTUM_FORMS)}, received: {momentum_form!r}")
    decayed_keys = {id(v) for v in (decayed if decayed is not None else [v for v in variables if len(v.shape) > 1])}
    no_decay = [v for v in variables if id(v) not in decayed_keys]
    epsilon = DEFAULT_EPSILON.get(name) if epsilon is None else epsilon
    if name == "sgd" and momentum_form == "pytorch":
        optimizer = MomentumSGD(learning_rate, momentum=momentum, nesterov=nesterov)
        coupled = weight_decay > 0
    elif name == "sgd":
        optimizer = tf.keras.optimizers.SGD(learning_rate, momentum=momentum, nesterov=nesterov)
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
    if loss_scale is not None:
        static = parse_loss_scale(loss_scale)
        if static is None:
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
                optimizer, dynamic=True, initial_scale=DYNAMIC_INITIAL_SCALE,
                dynamic_growth_steps=DYNAMIC_GROWTH_STEPS)
        else:  # never changes, never skips a step: nvutils' LossScalingOptimizer
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=static)
    return optimizer, coupled


def optimizer_variables(optimizer):
    """The optimizer's state variables (slots, iterations, loss scale), new or legacy Keras API."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)
