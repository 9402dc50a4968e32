"""tfcnn's LAMB: step for step the same variables as tensorflow-addons' LAMB (weight decay, exclusions,
schedules, sparse gradients, loss scaling, XLA), and its slots and config survive a round trip."""
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

from tfcnn.training.lamb import LAMB

STEPS = 5
# name -> initial value: kernels of two ranks, a bias, a batch-norm gamma (ones) and beta (zeros: its
# norm is 0, so its trust ratio falls back to 1.0 until it moves).
INITIAL = {"dense/kernel": (6, 5), "conv/kernel": (3, 3, 2, 4), "dense/bias": (5,), "bn/gamma": (4,), "bn/beta": (4,)}


def import_tfa():
    """tensorflow-addons, or a skip: it cannot be imported on TensorFlow >= 2.16 (the tf_keras lane)."""
    try:
        with warnings.catch_warnings():  # its import warns that it is in maintenance mode
            warnings.simplefilter("ignore")
            import tensorflow_addons as tfa
    except Exception as error:  # ImportError, or whatever a newer TensorFlow makes its import raise
        pytest.skip(f"tensorflow_addons cannot be imported here, so there is no reference LAMB: "
                    f"{type(error).__name__}: {error}")
    return tfa


def make_variables(seed=0):
    rng = np.random.default_rng(seed)
    values = {"dense/kernel": rng.normal(size=INITIAL["dense/kernel"]),
              "conv/kernel": 0.1 * rng.normal(size=INITIAL["conv/kernel"]),
              "dense/bias": 0.1 * rng.normal(size=INITIAL["dense/bias"]),
              "bn/gamma": np.ones(INITIAL["bn/gamma"]), "bn/beta": np.zeros(INITIAL["bn/beta"])}
    return [tf.Variable(value.astype(np.float32), name=name) for name, value in values.items()]


def make_gradients(steps=STEPS, seed=1, sparse_kernel=False):
    """Random gradients, one list per step; sparse_kernel: the dense kernel's as IndexedSlices with a
    repeated row, as tf.gather produces."""
    rng = np.random.default_rng(seed)
    steps_grads = []
    for _ in range(steps):
        grads = [tf.constant(rng.normal(size=shape).astype(np.float32)) for shape in INITIAL.values()]
        if sparse_kernel:
            rows = tf.constant([0, 2, 2, 5])
            grads[0] = tf.IndexedSlices(tf.constant(rng.normal(size=(4, 5)).astype(np.float32)), rows,
                                        tf.constant(INITIAL["dense/kernel"]))
        steps_grads.append(grads)
    return steps_grads


def one_dimensional(variables):
    return [v for v in variables if len(v.shape) <= 1]


def exactly(variables):
    """tfa's exclusions: regexes searched in variable names, ':0' included."""
    return ["^" + re.escape(v.name) + "$" for v in variables]


def train(optimizer, variables, steps_grads, wrap=None):
    """Applies each step's gradients, eagerly or through wrap (tf.function)."""
    def apply(grads):
        return optimizer.apply_gradients(zip(grads, variables))
    apply = wrap(apply) if wrap else apply
    for grads in steps_grads:
        apply(grads)


def assert_same_variables(ours, theirs):
    for mine, ref in zip(ours, theirs):
        np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-5, atol=1e-7, err_msg=mine.name)


def decaying_lr():
    """Changes at every step, so an off-by-one in the step the schedule sees shows."""
    return tf.keras.optimizers.schedules.PolynomialDecay(0.02, decay_steps=STEPS, end_learning_rate=0.002)


def gpu_path(optimizer):
    """Forces Keras' per-variable XLA update (on by default only with a GPU) onto this CPU."""
    optimizer.jit_compile = True
    return optimizer


ONE_D = {2, 3, 4}  # positions of the 1-D variables in make_variables()

CASES = {
    # Defaults, no decay, float lr, eager.
    "plain": dict(
        ours=lambda vs: LAMB(0.01),
        theirs=lambda vs: dict(learning_rate=0.01),
        reference=dict(lr=lambda step: 0.01),
        wrap=None, sparse=False),
    # Decay with the 1-D variables excluded (from layer adaptation too), a schedule, other betas, graph.
    "decay-schedule": dict(
        ours=lambda vs: LAMB(decaying_lr(), beta_1=0.8, beta_2=0.99, epsilon=1e-5, weight_decay=0.05,
                             exclude_from_weight_decay=one_dimensional(vs)),
        theirs=lambda vs: dict(learning_rate=decaying_lr(), beta_1=0.8, beta_2=0.99, epsilon=1e-5,
                               weight_decay=0.05, exclude_from_weight_decay=exactly(one_dimensional(vs))),
        reference=dict(lr=lambda step: float(decaying_lr()(step)), beta_1=0.8, beta_2=0.99, epsilon=1e-5,
                       weight_decay=0.05, no_decay=ONE_D, no_adaptation=ONE_D),
        wrap=tf.function, sparse=False),
    # Layer adaptation excluded separately (the bias only), a sparse gradient, Keras' XLA update path.
    "adaptation-sparse-xla": dict(
        ours=lambda vs: gpu_path(LAMB(0.01, weight_decay=0.1, exclude_from_weight_decay=one_dimensional(vs),
                                      exclude_from_layer_adaptation=[vs[2]])),
        theirs=lambda vs: dict(learning_rate=0.01, weight_decay=0.1,
                               exclude_from_weight_decay=exactly(one_dimensional(vs)),
                               exclude_from_layer_adaptation=exactly([vs[2]])),
        reference=dict(lr=lambda step: 0.01, weight_decay=0.1, no_decay=ONE_D, no_adaptation={2}),
        wrap=None, sparse=True),
}


def reference_lamb(values, steps_grads, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.0,
                   no_decay=(), no_adaptation=()):
    """The paper's Algorithm 2 in float64 numpy, independent of TensorFlow's optimizers (and of tfa,
    so the math is checked where tfa cannot be imported too). no_*: positions of excluded variables;
    a None in steps_grads: a step skipped (an overflow under loss scaling) yet counted."""
    weights = [np.asarray(value, np.float64) for value in values]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, grads in enumerate(steps_grads, start=1):
        for i, grad in enumerate(grads or ()):  # None: a step the loss scaling skipped, but counted
            g = tf.convert_to_tensor(grad).numpy().astype(np.float64)
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            r = (m[i] / (1 - beta_1 ** t)) / (np.sqrt(v[i] / (1 - beta_2 ** t)) + epsilon)
            if i not in no_decay:
                r = r + weight_decay * weights[i]
            w_norm, r_norm = np.linalg.norm(weights[i]), np.linalg.norm(r)
            trust = w_norm / r_norm if i not in no_adaptation and w_norm > 0 and r_norm > 0 else 1.0
            weights[i] = weights[i] - lr(t - 1) * trust * r
    return weights


@pytest.mark.parametrize("case", list(CASES))
def test_matches_tensorflow_addons_lamb(case):
    tfa = import_tfa()
    spec = CASES[case]
    steps_grads = make_gradients(sparse_kernel=spec["sparse"])
    ours, theirs = make_variables(), make_variables()
    train(spec["ours"](ours), ours, steps_grads, spec["wrap"])
    train(tfa.optimizers.LAMB(**spec["theirs"](theirs)), theirs, steps_grads)
    assert_same_variables(ours, theirs)
    for variable, initial in zip(ours, make_variables()):
        assert not np.array_equal(variable.numpy(), initial.numpy()), f"{variable.name} never moved"


@pytest.mark.parametrize("case", list(CASES))
def test_matches_the_paper_in_numpy(case):
    spec = CASES[case]
    steps_grads = make_gradients(sparse_kernel=spec["sparse"])
    ours = make_variables()
    train(spec["ours"](ours), ours, steps_grads, spec["wrap"])
    expected = reference_lamb([v.numpy() for v in make_variables()], steps_grads, **spec["reference"])
    for mine, ref in zip(ours, expected):
        np.testing.assert_allclose(mine.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=mine.name)


def test_excluded_variables_are_not_decayed():
    """With the same gradients, turning weight decay on changes the kernels only: the excluded 1-D
    variables take exactly the steps they take without it."""
    steps_grads = make_gradients()
    decayed, plain = make_variables(), make_variables()
    train(LAMB(0.01, weight_decay=0.1, exclude_from_weight_decay=one_dimensional(decayed)), decayed, steps_grads)
    train(LAMB(0.01, weight_decay=0.0, exclude_from_weight_decay=one_dimensional(plain)), plain, steps_grads)
    for with_decay, without in zip(decayed, plain):
        if len(with_decay.shape) <= 1:
            np.testing.assert_array_equal(with_decay.numpy(), without.numpy(), err_msg=with_decay.name)
        else:
            assert not np.allclose(with_decay.numpy(), without.numpy()), with_decay.name


def mixed_precision_model():
    """fp16 compute, float32 variables (Keras' AutoCastVariables), as tfcnn's fp16 runs have."""
    policy = "mixed_float16"
    inputs = tf.keras.Input((6, 6, 3))
    x = tf.keras.layers.Conv2D(4, 3, dtype=policy)(inputs)
    x = tf.keras.layers.BatchNormalization(dtype=policy)(x)
    x = tf.keras.layers.GlobalAveragePooling2D(dtype=policy)(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(3, dtype=policy)(x))


@pytest.mark.parametrize("reference", ["tfa", "numpy"])
def test_matches_under_loss_scaling(reference):
    """A mixed-precision model's loss-scaled gradients, unscaled by the LossScaleOptimizer, one step
    overflowing: the step is skipped (but counted), the scale halves, and the variables match tfa's
    under its own LossScaleOptimizer, or the paper's update of the unscaled gradients."""
    tfa = import_tfa() if reference == "tfa" else None
    model = mixed_precision_model()
    twin = tf.keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    initial = [v.numpy() for v in model.trainable_variables]
    ours = tf.keras.mixed_precision.LossScaleOptimizer(
        LAMB(0.01, weight_decay=0.05, exclude_from_weight_decay=one_dimensional(model.trainable_variables)),
        initial_scale=2.0 ** 12)
    theirs = tf.keras.mixed_precision.LossScaleOptimizer(
        tfa.optimizers.LAMB(0.01, weight_decay=0.05,
                            exclude_from_weight_decay=exactly(one_dimensional(twin.trainable_variables))),
        initial_scale=2.0 ** 12) if tfa else None
    rng = np.random.default_rng(2)
    images = tf.constant(rng.normal(size=(8, 6, 6, 3)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 3, size=8))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    applied = []
    for step in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, tf.cast(model(images, training=True), tf.float32))
            scaled_loss = ours.get_scaled_loss(loss)
        scaled = tape.gradient(scaled_loss, model.trainable_variables)
        assert all(g.dtype == tf.float32 for g in scaled)
        if step == 2:
            scaled[0] = scaled[0] + np.inf
        before = [v.numpy() for v in model.trainable_variables]
        unscaled = ours.get_unscaled_gradients(scaled)
        ours.apply_gradients(zip(unscaled, model.trainable_variables))
        if theirs:
            theirs.apply_gradients(zip(theirs.get_unscaled_gradients(scaled), twin.trainable_variables))
        applied.append(None if step == 2 else unscaled)
        if step == 2:
            for variable, value in zip(model.trainable_variables, before):
                np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.name)
    assert float(ours.loss_scale) == 2.0 ** 11 and int(ours.iterations) == STEPS
    assert all(v.dtype == tf.float32 for v in ours.inner_optimizer.variables[1:])
    if theirs:
        assert float(theirs.loss_scale) == 2.0 ** 11
        assert_same_variables(model.trainable_variables, twin.trainable_variables)
    else:
        no_decay = {i for i, v in enumerate(model.trainable_variables) if len(v.shape) <= 1}
        expected = reference_lamb(initial, applied, lr=lambda step: 0.01, weight_decay=0.05,
                                  no_decay=no_decay, no_adaptation=no_decay)
        for mine, ref in zip(model.trainable_variables, expected):
            np.testing.assert_allclose(mine.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=mine.name)


def test_checkpoint_restores_slots_and_continues_identically(tmp_path):
    """Saved after 3 of 5 steps and restored into a fresh optimizer (built first, as tfcnn does): the
    slots, step and schedule come back, and the last 2 steps give bit-identical variables."""
    steps_grads = make_gradients()
    first = make_variables()
    optimizer = LAMB(decaying_lr(), weight_decay=0.05, exclude_from_weight_decay=one_dimensional(first))
    train(optimizer, first, steps_grads[:3])
    path = tf.train.Checkpoint(variables=first, optimizer=optimizer).save(str(tmp_path / "ckpt"))
    saved_state = [v.numpy() for v in optimizer.variables]
    train(optimizer, first, steps_grads[3:])

    second = make_variables(seed=7)
    restored = LAMB(decaying_lr(), weight_decay=0.05, exclude_from_weight_decay=one_dimensional(second))
    restored.build(second)
    tf.train.Checkpoint(variables=second, optimizer=restored).restore(path).assert_consumed()
    assert int(restored.iterations) == 3
    assert len(restored.variables) == len(saved_state) == 1 + 2 * len(second)  # the step, then m and v
    for variable, value in zip(restored.variables, saved_state):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.name)
    train(restored, second, steps_grads[3:])
    for mine, ref in zip(second, first):
        np.testing.assert_array_equal(mine.numpy(), ref.numpy(), err_msg=mine.name)


def test_config_round_trip():
    optimizer = LAMB(decaying_lr(), beta_1=0.8, beta_2=0.99, epsilon=1e-5, weight_decay=0.05, clipnorm=1.0)
    config = optimizer.get_config()
    assert {k: config[k] for k in ("beta_1", "beta_2", "epsilon", "weight_decay", "clipnorm")} == \
        dict(beta_1=0.8, beta_2=0.99, epsilon=1e-5, weight_decay=0.05, clipnorm=1.0)
    assert LAMB.from_config(dict(config)).get_config() == config
    again = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(optimizer))
    assert isinstance(again, LAMB) and again.get_config() == config


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(beta_1=1.0), ValueError, r"LAMB beta_1 must be in \[0, 1\), received: 1.0"),
    (dict(beta_2=-0.5), ValueError, r"LAMB beta_2 must be in \[0, 1\), received: -0.5"),
    (dict(epsilon=0.0), ValueError, "LAMB epsilon must be > 0, received: 0.0"),
    (dict(weight_decay=-1e-4), ValueError, "LAMB weight_decay must be >= 0, received: -0.0001"),
    (dict(weight_decay="l2"), TypeError, "LAMB weight_decay must be a number, received: 'l2'"),
    (dict(exclude_from_weight_decay=["bias"]), TypeError,
     r"LAMB exclude_from_weight_decay takes variables, received the string 'bias': pass name regexes as "
     r"optimizer.exclude_from_weight_decay\(var_names=\[...\]\)"),
])
def test_bad_arguments_are_rejected_naming_values(kwargs, error, match):
    with pytest.raises(error, match=match):
        LAMB(0.01, **kwargs)


def test_exclusions_by_name_and_only_before_build():
    """The Keras base's way of excluding (name regexes) works too, but only before the first step."""
    variables = make_variables()
    optimizer = LAMB(0.1, weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_names=["bias", "bn/"])
    train(optimizer, variables, [[tf.zeros_like(v) for v in variables]])
    np.testing.assert_allclose(variables[0].numpy(), 0.9 * make_variables()[0].numpy(), rtol=1e-6)
    for variable, initial in list(zip(variables, make_variables()))[2:]:
        np.testing.assert_array_equal(variable.numpy(), initial.numpy(), err_msg=variable.name)
    with pytest.raises(ValueError, match=r"LAMB.exclude_from_layer_adaptation\(\) must be called before"):
        optimizer.exclude_from_layer_adaptation(var_list=variables[2:])
