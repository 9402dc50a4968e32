"""NVIDIA's recipes, proven step by step: tfcnn's real trainer against independent implementations of
NVIDIA's update rules (tests/scripts/record_recipe_fixtures.py, PyTorch, float64), and each recipe
element shown to matter: every negative control flips one element and the comparison must fail.

The families (tfcnn.recipes): `ngc` (the NGC scripts' LARC / poly / Nesterov recipe: ngc_resnet50's
rules), `dle` (DeepLearningExamples' SGD with label smoothing, per-epoch warmup and cosine: resnet50_90e's)
and `dle_mixup` (resnet50_250e's: the same with MixUp). Each runs 20 steps of a small SE-ResNeXt
(`recipenet`: tfcnn's ResNet builder, the reference timm's ResNet with the same blocks) from the same
weights on the same batches, with a learning rate that changes at every step or epoch, and compares
the per-step losses and every tensor's accumulated update (batch-norm statistics included) with the
tolerances tfcnn.recipes states. What a step test cannot see (the initialization, the crop sampler, the
resize, the loss scale, the values each recipe takes from NVIDIA's files) has its own test below.
"""
import functools
import json
import math
import os
import re
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import weightgen
from tfcnn import recipes
from tfcnn.models import create_model, registry
from tfcnn.models import resnet as resnet_family
from tfcnn.models.weights import WeightMap, reference_names
from tfcnn.training import make_config, mixing, train

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "recipes")
FAMILIES = ("ngc", "dle", "dle_mixup")


@functools.lru_cache(maxsize=None)
def scratch():
    """The weight files the cached builders read, in the session's temporary directory (tests/conftest.py),
    which is removed when the session ends."""
    return tempfile.mkdtemp(prefix="recipes-")


def fixture(family):
    with np.load(os.path.join(FIXTURES, f"{family}.npz")) as data:
        arrays = {k: data[k] for k in data.files}
    return json.loads(str(arrays.pop("setup"))), arrays


@pytest.fixture(scope="module", autouse=True)
def recipenet():
    """tfcnn's twin of the reference network: the ResNet builder with the fixture's architecture."""
    setup, _ = fixture("dle")
    arch = dict(setup["arch"], depths=tuple(setup["arch"]["depths"]),
                stage_filters=tuple(setup["arch"]["stage_filters"]))
    info = registry.ModelInfo(name="recipenet", input_size=setup["size"], crop_fraction=0.875,
                              mean=recipes.IMAGENET_MEAN, std=recipes.IMAGENET_STD, top1=0.0, params=0, gmacs=0.0,
                              min_size=32, reference="timm ResNet (record_recipe_fixtures.py)")
    registry.register_model("recipenet", resnet_family.resnet, info,
                            WeightMap(resnet_family.reference_module, info.reference, data_config=info.data_config),
                            block="bottleneck", **arch)
    yield
    registry._REGISTRY.pop("recipenet")  # tests only: the registry offers no removal


@functools.lru_cache(maxsize=None)
def initial_weights(family):
    """The fixture's starting weights (weightgen, from its seed) as a timm-named safetensors file."""
    from safetensors.numpy import save_file

    setup, _ = fixture(family)
    path = os.path.join(scratch(), f"{family}-initial.safetensors")
    save_file(weightgen.state_dict(setup["keys"], setup["seed"], setup["damped"]), path)
    return path


def batches(setup):
    """The fixture's batches, from weightgen's frozen stream as the recorder draws them."""
    images, labels = [], []
    for step in range(setup["steps"]):
        shape = (setup["batch"], setup["size"], setup["size"], 3)
        images.append(np.floor(weightgen.uniform([setup["seed"], 1, step], 0.0, 256.0, shape)).astype(np.uint8))
        labels.append(np.floor(weightgen.uniform([setup["seed"], 2, step], 0.0, setup["classes"],
                                                 (setup["batch"],))).astype(np.int32))
    return tf.data.Dataset.from_tensor_slices((np.stack(images), np.stack(labels)))


def recorded_draws(arrays, partner=None):
    """mixing.sample_mix's stand-in: the reference's lambda and partners of the step (the trainer seeds each
    draw with (seed, step)), so that the test compares everything but the random numbers."""
    lams = tf.constant(arrays["lam"], tf.float32)
    partners = tf.constant(arrays["partner"] if partner is None else partner, tf.int32)

    def sample_mix(batch, height, width, mixup_alpha, cutmix_alpha, switch_prob, seed):
        step = tf.cast(seed[1], tf.int32)
        return mixing.Mix(lam=tf.gather(lams, step), box=tf.zeros([4], tf.int32), cutmix=tf.constant(False),
                          partner=tf.gather(partners, step))
    return sample_mix


def run_recipe(family, monkeypatch, precision="fp64", steps=None, until_a_loss_differs=False, **flips):
    """tfcnn's trainer on the family's recipe at the fixture's setup (sizes, rates), with `flips` on top, in
    `precision`, stopped after `steps` (default: all), or with until_a_loss_differs after the first step whose
    loss is beyond the tolerance of the reference's (a negative control has then failed the comparison: the
    steps after it cannot make it pass). Returns (per-step losses, {reference name: accumulated update}) for
    parameters and batch-norm statistics."""
    setup, arrays = fixture(family)
    if "lam" in arrays:
        partner = flips.pop("partner", None)
        monkeypatch.setattr(mixing, "sample_mix", recorded_draws(arrays, partner))
    path = initial_weights(family)
    config = make_config(setup["recipe"], model="recipenet", num_classes=setup["classes"], image_size=setup["size"],
                         batch_size=setup["batch"], optimizer_batch_size=setup["batch"], precision=precision,
                         lr=setup["peak_lr"] * 256 / setup["batch"], weight_decay=setup["weight_decay"],
                         init_weights=path, seed=1, display_every=1, benchmark_warmup_steps=0,
                         checkpoint_every=0, stop_signals="none", **{**setup["overrides"], **flips})
    losses = []
    reference_losses = expected_updates(family)[0] if until_a_loss_differs else None

    def step_end(batch, logs):
        losses.append(float(logs["loss"]))
        done = steps is not None and len(losses) >= steps
        if reference_losses is not None:
            want = reference_losses[len(losses) - 1]
            done = done or abs(losses[-1] - want) / abs(want) > recipes.LOSS_RTOL
        capture.model.stop_training = done

    capture = tf.keras.callbacks.LambdaCallback(on_train_batch_end=step_end)
    model = {}
    keep = tf.keras.callbacks.LambdaCallback(on_train_end=lambda logs: model.setdefault("trained", keep.model.model))
    train(config, callbacks=[capture, keep], batches=batches(setup),
          epoch_images=setup["steps_per_epoch"] * setup["batch"])
    start = initial_values(family)
    updates = {name: v.numpy() - start[name] for v, name in reference_names(model["trained"])}
    return np.array(losses), updates


@functools.lru_cache(maxsize=None)
def initial_values(family):
    """{reference name: tfcnn's starting value}, in tfcnn's layout."""
    model = create_model("recipenet", num_classes=fixture(family)[0]["classes"], weights=initial_weights(family),
                         log=lambda *_: None)
    return {name: v.numpy() for v, name in reference_names(model)}


@functools.lru_cache(maxsize=None)
def expected_updates(family, early=False):
    """The reference's per-step losses and updates in tfcnn's layout: the fixture's arrays (updates, and
    batch-norm statistics minus their start) loaded through tfcnn's strict weight loader, which knows each
    layout's transpose. early: after the fixture's first early_steps steps, not all."""
    from safetensors.numpy import save_file

    setup, arrays = fixture(family)
    start = weightgen.state_dict(setup["keys"], setup["seed"], setup["damped"])
    prefix = "early_" if early else ""
    tensors = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(f"{prefix}update/")}
    tensors.update({k.split("/", 1)[1]: v - start[k.split("/", 1)[1]] for k, v in arrays.items()
                    if k.startswith(f"{prefix}buffer/")})
    path = os.path.join(scratch(), f"{family}-expected{'-early' if early else ''}.safetensors")
    save_file(tensors, path)
    model = create_model("recipenet", num_classes=setup["classes"], weights=path, log=lambda *_: None)
    return arrays[f"{prefix}losses"], {name: v.numpy() for v, name in reference_names(model)}


def disagreement(family, result, early=False):
    """(largest relative per-step loss difference, largest per-tensor update difference, that tensor). An
    update is compared relative to itself, or to a thousandth of its tensor when it is smaller than that:
    float32 holds a weight to 6e-8 of itself, so a few rounded steps leave about 1e-7 of the weight in any
    update, which is 1e-4 of an update of a thousandth (tests/scripts/record_recipe_fixtures.py measures the
    reference's own float32 against its float64 the same way).

    Under fp64, moving variances are left out: Keras' batch norm has no fused float64 kernel, and its other
    path averages the biased batch variance, where the fused kernel (fp32, fp16, bf16: every real run) and
    PyTorch average the unbiased one; the float32 comparison of the first steps covers them."""
    losses, updates = result
    expected_losses, expected = expected_updates(family, early)
    starts = initial_values(family)
    assert 0 < len(losses) <= len(expected_losses) and set(updates) == set(expected)
    reference = expected_losses[:len(losses)]
    loss_error = float(np.max(np.abs(losses - reference) / np.abs(reference)))
    if len(losses) < len(expected_losses):  # run_recipe(until_a_loss_differs=True) stopped where a loss differed
        return loss_error, math.inf, f"none compared: the run stopped after step {len(losses)}"
    errors = {name: float(np.linalg.norm(updates[name] - value) /
                          max(np.linalg.norm(value), 1e-3 * np.linalg.norm(starts[name])))
              for name, value in expected.items() if early or not name.endswith("running_var")}
    worst = max(errors, key=errors.get)
    return loss_error, errors[worst], worst


def within_tolerance(error):
    loss_error, update_error, _ = error
    return loss_error <= recipes.LOSS_RTOL and update_error <= recipes.UPDATE_RTOL


def describe(error):
    loss_error, update_error, worst = error
    return (f"loss {loss_error:.2e} (tolerance {recipes.LOSS_RTOL:g}), update {update_error:.2e} "
            f"(tolerance {recipes.UPDATE_RTOL:g}, worst {worst})")


@pytest.mark.parametrize("family", FAMILIES)
def test_steps_match_the_reference(family, monkeypatch):
    """All the steps in float64, where rounding stays far below the tolerances; the float32 trainer's first
    steps below. (Twenty float32 steps of a network are chaotic: where a ReLU or a max pool is within rounding
    of switching, one does in one run and not in the other, and the difference then grows threefold per step.
    The reference's own float32 strayed from its float64 by 1e-3 for most seeds.)"""
    error = disagreement(family, run_recipe(family, monkeypatch))
    print(f"{family}: {describe(error)}")
    assert within_tolerance(error), f"{family}: tfcnn's steps differ from NVIDIA's: {describe(error)}"


@pytest.mark.parametrize("family", FAMILIES)
def test_float32_first_steps_match_the_reference(family, monkeypatch):
    setup, _ = fixture(family)
    result = run_recipe(family, monkeypatch, precision="fp32", steps=setup["early_steps"])
    error = disagreement(family, result, early=True)
    print(f"{family}, float32, {setup['early_steps']} steps: {describe(error)}")
    assert within_tolerance(error), f"{family}: tfcnn's float32 steps differ from NVIDIA's: {describe(error)}"


# Each flips one element of the family's recipe; the comparison above must then fail.
NGC_NORMALIZATION = dict(mean=recipes.NGC_MEAN, std=recipes.NGC_STD)
CONTROLS = [
    ("ngc", "Nesterov off", dict(nesterov=False)),
    ("ngc", "Keras' momentum form", dict(momentum_form="keras")),
    ("ngc", "LARC off", dict(larc_eta=0.0)),
    ("ngc", "LARC in scale mode", dict(larc_mode="scale")),
    ("ngc", "decay on kernels only", dict(weight_decay_set="kernels")),
    ("ngc", "cosine decay", dict(lr_schedule="cosine")),
    ("dle", "Keras' momentum form", dict(momentum_form="keras")),
    ("dle", "Nesterov on", dict(nesterov=True)),
    ("dle", "no label smoothing", dict(label_smoothing=0.0)),
    ("dle", "another warmup (2 epochs)", dict(warmup_epochs=2)),
    ("dle", "the rate set every step", dict(lr_granularity="step")),
    ("dle", "decay on kernels only", dict(weight_decay_set="kernels")),
    ("dle", "NGC's normalization", NGC_NORMALIZATION),
    ("dle_mixup", "no MixUp", dict(mixup=0.0)),
    ("dle_mixup", "the batch reversed as partners", dict(partner=np.tile(np.arange(7, -1, -1), (20, 1)))),
    ("dle_mixup", "no label smoothing", dict(label_smoothing=0.0)),
]


@pytest.mark.parametrize("family, element, flip", CONTROLS, ids=[f"{f}: {e}" for f, e, _ in CONTROLS])
def test_negative_control_fails_when_one_element_is_flipped(family, element, flip, monkeypatch):
    error = disagreement(family, run_recipe(family, monkeypatch, until_a_loss_differs=True, **flip))
    print(f"{family}, {element}: {describe(error)}")
    assert not within_tolerance(error), f"{family}: flipping '{element}' went unnoticed: {describe(error)}"


# ------------------------------------------------------------------------------------------ initialization

def fresh_model(recipe, **overrides):
    """The recipe's model as a run initializes it (build_trainer, no weights given), at a small input."""
    from tfcnn.training.plan import make_plan
    from tfcnn.training.trainer import build_trainer

    config = make_config(recipe, **{**dict(image_size=32, batch_size=2, precision="fp32", seed=3), **overrides})
    return build_trainer(make_plan(config), log=lambda *_: None)[0]


def pytorch_fans(kernel):
    """(fan_in, fan_out) of a Keras kernel as torch.nn.init computes them from the PyTorch layout: a conv
    (kh, kw, in / groups, out) is (out, in / groups, kh, kw); a dense (in, out) is (out, in)."""
    shape = kernel.shape
    receptive = int(np.prod(shape[:-2])) if len(shape) == 4 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def init_violations(model, rule):
    """The weights that break `rule`, described: 'nvidia_pytorch' (NVIDIA's PyTorch ConvNets: convs
    kaiming_normal_(mode='fan_in', nonlinearity='relu'), nn.Linear's defaults for dense and SE layers, batch
    norm gamma 1 and beta 0: models/common.py:42-54, 109-121, 146-150) or 'tf1_glorot' (NGC's nvutils:
    tf.get_variable's default glorot_uniform with TF1's fans, zero biases, batch norm 1 / 0)."""
    bad = []
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            if not (np.all(layer.gamma.numpy() == 1) and np.all(layer.beta.numpy() == 0)):
                gamma, beta = layer.gamma.numpy().mean(), layer.beta.numpy().mean()
                bad.append(f"{layer.name}: gamma {gamma:.3g}, beta {beta:.3g}")
            continue
        if not isinstance(layer, (tf.keras.layers.Conv2D, tf.keras.layers.Dense)):
            continue
        w = layer.kernel.numpy().astype(np.float64)
        b = layer.bias.numpy() if getattr(layer, "bias", None) is not None else None
        fan_in, fan_out = pytorch_fans(w)
        linear = isinstance(layer, tf.keras.layers.Dense) or (b is not None and tuple(layer.input.shape[1:3]) == (1, 1))
        if rule == "tf1_glorot":
            bound = np.sqrt(6 / (fan_in + fan_out))
            std, limit, bias_bound = bound / np.sqrt(3), bound, 0.0
        elif linear:
            bound = 1 / np.sqrt(fan_in)
            std, limit, bias_bound = bound / np.sqrt(3), bound, bound
        else:
            std, limit, bias_bound = np.sqrt(2 / fan_in), None, 0.0
        if w.size >= 2000 and abs(w.std() / std - 1) > 0.06:
            bad.append(f"{layer.name}: std {w.std():.4g}, the rule's {std:.4g}")
        if limit is not None and np.abs(w).max() > limit * (1 + 1e-6):
            bad.append(f"{layer.name}: |w| up to {np.abs(w).max():.4g}, beyond the rule's {limit:.4g}")
        if limit is None and w.size >= 20000 and np.abs(w).max() < 3.5 * std:  # a normal's tails, not truncated ones
            bad.append(f"{layer.name}: |w| at most {np.abs(w).max() / std:.2f} std: truncated, not normal")
        if b is not None and (np.abs(b).max() > bias_bound * (1 + 1e-6) or (bias_bound and np.all(b == 0))):
            bad.append(f"{layer.name}: bias in [{b.min():.3g}, {b.max():.3g}], the rule's +-{bias_bound:.3g}")
    return bad


INIT_CASES = [("resnet50_90e", "nvidia_pytorch"), ("se_resnext101_32x4d_90e", "nvidia_pytorch"),
              ("ngc_resnet50", "tf1_glorot")]


@pytest.mark.parametrize("recipe, rule", INIT_CASES)
def test_initializations_follow_their_rules(recipe, rule):
    bad = init_violations(fresh_model(recipe), rule)
    assert not bad, f"{recipe}: {len(bad)} weights break NVIDIA's initialization: {bad[:5]}"


INIT_CONTROLS = [("resnet50_90e", "nvidia_pytorch", "zero-gamma on", dict(model_options="zero_init_residual=true")),
                 ("resnet50_90e", "nvidia_pytorch", "He fan_out", dict(weight_init="kaiming_fan_out")),
                 ("resnet50_90e", "nvidia_pytorch", "the model's own", dict(weight_init="model")),
                 ("ngc_resnet50", "tf1_glorot", "He fan_in", dict(weight_init="kaiming_fan_in"))]


@pytest.mark.parametrize("recipe, rule, element, flip", INIT_CONTROLS, ids=[c[2] for c in INIT_CONTROLS])
def test_initialization_controls_fail(recipe, rule, element, flip):
    bad = init_violations(fresh_model(recipe, **flip), rule)
    print(f"{recipe}, {element}: {len(bad)} weights break the rule, e.g. {bad[:2]}")
    assert bad, f"{recipe}: '{element}' went unnoticed"


@pytest.mark.parametrize("name, scheme", [("ngc_xception", "glorot_uniform"), ("mobilenet_v2", "kaiming_fan_in")])
def test_a_fresh_model_is_drawn_once_with_the_values_of_two_draws(name, scheme):
    """build_trainer's fresh model (build_initialized: what the scheme redraws is never drawn by the builder) holds
    exactly the weights of the builder's model redrawn by initialize(): separable and depthwise kernels, dense
    layers, batch norm as the builder leaves it."""
    from tfcnn.models.initializers import build_initialized, initialize

    build = functools.partial(create_model, name, num_classes=5, input_shape=(32, 32, 3))
    tf.keras.utils.set_random_seed(3)
    twice = build()
    initialize(twice, scheme, 3)
    tf.keras.utils.set_random_seed(3)
    once = build_initialized(build, scheme, 3)
    assert [w.name for w in once.weights] == [w.name for w in twice.weights]
    differ = [a.name for a, b in zip(once.weights, twice.weights) if not np.array_equal(a.numpy(), b.numpy())]
    assert not differ, f"{name}: {len(differ)} weights differ, e.g. {differ[:3]}"


# ------------------------------------------------------------------------------- the values of each recipe

def nvidia_sources():
    with open(os.path.join(FIXTURES, "nvidia_sources.json")) as f:
        return json.load(f)


# The elements that make a family's update rule: every recipe of a family has those of the recipe the step
# test runs (the values, rates and sizes come from each recipe's own NVIDIA file, checked below).
RULES = ("optimizer", "momentum_form", "nesterov", "lr_schedule", "lr_granularity", "warmup_epochs", "larc_mode",
         "weight_decay_set", "weight_init", "train_crop", "eval_crop", "label_smoothing", "mean", "std", "poly_power")
DLE_MODELS = {"resnet50": "resnet50", "resnext101_32x4d": "resnext101-32x4d",
              "nvidia_se_resnext101_32x4d": "se-resnext101-32x4d"}


def rules(config):
    return {name: getattr(config, name) for name in RULES}


@pytest.mark.parametrize("name", sorted(n for n in recipes.RECIPES if n.startswith("ngc_")))
def test_ngc_recipes_take_their_scripts_values(name):
    sources = nvidia_sources()["ngc"]
    script = re.search(r"/cnn/(\w+)\.py:", recipes.RECIPES[name].source)[1]
    args = sources["scripts"][script]
    config = make_config(name)
    global_batch = args["batch_size"] * sources["launch_ranks"]  # the README's mpiexec -np 8
    assert (config.batch_size, config.optimizer_batch_size) == (args["batch_size"], global_batch)
    assert config.lr * global_batch / 256 == pytest.approx(args["learning_rate_init"], rel=1e-12)
    assert (config.momentum, config.poly_power, config.weight_decay) == (
        args["momentum"], args["learning_rate_power"], args["weight_decay"])
    assert (config.larc_eta, config.larc_mode, float(config.loss_scale)) == (
        args["larc_eta"], args["larc_mode"], args["loss_scale"])
    assert (config.num_iter, config.iter_unit, config.precision) == (args["num_iter"], args["iter_unit"],
                                                                      args["precision"])
    assert (config.image_size or registry.model_info(config.model).input_size) == args["image_width"]
    assert (list(config.mean), list(config.std)) == (sources["mean"], sources["std"])
    assert rules(config) == rules(make_config("ngc_resnet50"))
    assert config.eval_crop == "ngc"  # nvutils/image_processing.py: central_crop(image, 0.8), resized
    shown = dict(zip(recipes.COLUMNS, next(row for row in recipes.rows() if row[0] == name)))  # the recipe table's
    assert shown["evaluation view"] == ("the scripts': the central 80% of each side resized to the input "
                                        "(--eval_crop ngc)")
    # the script's own network, proven against its builder (tests/test_ngc_models.py)
    import test_ngc_models

    assert test_ngc_models.fixture(config.model)["script"].startswith(f"nvidia-examples/cnn/{script}.py")


@pytest.mark.parametrize("name", sorted(n for n in recipes.RECIPES if n.endswith(("_90e", "_250e"))))
def test_dle_recipes_take_their_configs_values(name):
    config = make_config(name)
    entry = nvidia_sources()["dle"]["models"][DLE_MODELS[config.model]]
    nvidia = dict(entry["config"], **(entry["90e_flags"] if name.endswith("_90e") else {}))
    assert (config.batch_size, config.optimizer_batch_size) == (nvidia["batch_size"], nvidia["optimizer_batch_size"])
    assert config.optimizer_batch_size == config.batch_size * entry["gpus"]  # one optimizer step of the 8-GPU run
    assert config.lr * config.optimizer_batch_size / 256 == pytest.approx(nvidia["lr"], rel=1e-12)
    assert (config.weight_decay, config.momentum, config.warmup_epochs) == (
        nvidia["weight_decay"], nvidia["momentum"], nvidia["warmup"])
    assert (config.label_smoothing, config.mixup, config.num_iter) == (
        nvidia["label_smoothing"], nvidia["mixup"], nvidia["epochs"])
    assert (config.lr_schedule, config.image_size or 224, config.train_crop) == (nvidia["lr_schedule"],
                                                                                 nvidia["image_size"], "torchvision")
    assert nvidia["data_backend"] == "pytorch" and nvidia["interpolation"] == "bilinear"  # what the torchvision view is
    assert rules(config) == rules(make_config("resnet50_90e"))


# NVIDIA's PyTorch ConvNets' loss scaling (main.py:477-483, HEAD): GradScaler(init_scale=static_loss_scale,
# growth_factor=2, backoff_factor=0.5, growth_interval=100); Keras' dynamic scale doubles and halves.
GRADSCALER = dict(growth_factor=2, backoff_factor=0.5, growth_interval=100)


@pytest.mark.parametrize("name", ["resnet50_90e", "ngc_resnet50", "ngc_inception_v3"])
def test_loss_scaling_is_nvidias(name):
    from tfcnn.training.optimizers import build_optimizer

    config = make_config(name)
    optimizer, _ = build_optimizer("sgd", 0.1, loss_scale=config.loss_scale)
    if name.startswith("ngc_"):
        script = re.search(r"/cnn/(\w+)\.py:", recipes.RECIPES[name].source)[1]
        assert not optimizer.dynamic
        assert float(optimizer.initial_scale) == nvidia_sources()["ngc"]["scripts"][script]["loss_scale"]
    else:
        assert optimizer.dynamic and optimizer.dynamic_growth_steps == GRADSCALER["growth_interval"]
        assert float(optimizer.initial_scale) == nvidia_sources()["dle"]["models"]["resnet50"]["config"][
            "static_loss_scale"]


def test_keras_default_loss_scale_would_differ():
    """The control: Keras' own dynamic loss scale starts at 2 ** 15 and grows every 2000 steps."""
    keras_default = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())
    assert (float(keras_default.initial_scale), keras_default.dynamic_growth_steps) != (
        128.0, GRADSCALER["growth_interval"])


# ------------------------------------------------------------------------------------- the training view

def crop_statistics(boxes, height, width):
    top, left, h, w = (np.asarray(boxes, np.float64)[:, i] for i in range(4))
    return {"area": h * w / (height * width), "log_aspect": np.log(w / h), "centre_y": (top + h / 2) / height,
            "centre_x": (left + w / 2) / width}


def ks_distance(draws, quantiles):
    """The Kolmogorov-Smirnov distance between `draws` and the distribution whose 0, 0.001, ..., 1 quantiles
    are `quantiles`, at those points (ties: the CDF's jump brackets the quantile's level)."""
    draws, quantiles = np.sort(draws), np.asarray(quantiles)
    levels = np.linspace(0, 1, len(quantiles))
    below = np.searchsorted(draws, quantiles, side="left") / len(draws)
    at_or_below = np.searchsorted(draws, quantiles, side="right") / len(draws)
    return float(max(np.max(levels - at_or_below), np.max(below - levels)))


def torchvision_view_draws(height, width, count, seed=7):
    from tfcnn.data import preprocessing

    uniforms = tf.random.stateless_uniform([count, preprocessing.TRAIN_VIEWS["torchvision"].attempts, 4], [seed, 0])
    return preprocessing.resized_crop_window(height, width, uniforms).numpy()


def inception_view_draws(height, width, count, seed=7):
    """The inception view's sampler (tf.image.sample_distorted_bounding_box, no boxes) on an image of that size."""
    from tfcnn.data import preprocessing

    view = preprocessing.TRAIN_VIEWS["inception"]

    def draw(i):
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            [height, width, 3], tf.zeros([1, 0, 4]), seed=tf.stack([tf.constant(seed, tf.int64), i]),
            min_object_covered=view.min_object_covered, aspect_ratio_range=view.aspect, area_range=view.area,
            max_attempts=view.attempts, use_image_if_no_bounding_boxes=True)
        return tf.stack([begin[0], begin[1], size[0], size[1]])
    return np.stack(list(tf.data.Dataset.range(count).map(draw, num_parallel_calls=4).batch(count)))[0]


# Two-sample KS at significance 0.001 for 1e5 against 1e5 draws: 1.95 * sqrt(2e-5) = 0.0087; the quantile grid
# adds at most 0.001.
KS_BOUND = 0.01


def test_torchvision_crop_sampler_draws_torchvisions_distribution():
    """tfcnn's torchvision view against torchvision's RandomResizedCrop itself (1e5 draws each, recorded by
    tests/scripts/record_recipe_fixtures.py): area, log-aspect and centre histograms, and how often the
    centre-crop fallback decides (the panorama, where most attempts do not fit)."""
    with open(os.path.join(FIXTURES, "resized_crop.json")) as f:
        reference = json.load(f)
    for size, recorded in reference["images"].items():
        height, width = map(int, size.split("x"))
        boxes = torchvision_view_draws(height, width, reference["draws"])
        stats = crop_statistics(boxes, height, width)
        for name, quantiles in recorded["quantiles"].items():
            distance = ks_distance(stats[name], quantiles)
            assert distance < KS_BOUND, f"{size} {name}: KS distance {distance:.4f} from torchvision's draws"
        ratio = width / height  # torchvision's fallback: the centre crop of the nearest allowed aspect
        fallback_area = (width * round(width / (3 / 4)) if ratio < 3 / 4 else
                         height * round(height * 4 / 3) if ratio > 4 / 3 else height * width)
        share = np.mean(boxes[:, 2] * boxes[:, 3] == fallback_area)
        assert abs(share - recorded["fallback"]) < 0.01, f"{size}: the fallback's share {share:.4f}, torchvision's " \
                                                         f"{recorded['fallback']:.4f}"


def test_crop_sampler_control_the_inception_view_fails():
    with open(os.path.join(FIXTURES, "resized_crop.json")) as f:
        recorded = json.load(f)["images"]["375x500"]
    stats = crop_statistics(inception_view_draws(375, 500, 10_000), 375, 500)
    distances = {name: ks_distance(stats[name], q) for name, q in recorded["quantiles"].items()}
    print(f"inception view against torchvision's: KS {distances}")
    assert max(distances.values()) > 5 * KS_BOUND  # 1e4 draws: KS noise about 0.02 at most


def test_torchvision_view_decodes_and_resizes_as_pil(tmp_path):
    """The torchvision view's pixels: libjpeg's accurate DCT and an antialiased bilinear resize, as PIL
    decodes and resizes the crop (torchvision's RandomResizedCrop on PIL images); within a level or two (PIL
    rounds to uint8 between its horizontal and vertical passes). The control: the plain (not antialiased)
    bilinear resize is far off when it shrinks a detailed image."""
    from PIL import Image

    from tfcnn.data import preprocessing

    rng = np.random.default_rng(0)
    pixels = (rng.random((300, 400, 3)) * 255).astype(np.uint8)  # detail at every pixel: aliasing shows
    pixels[:150] = (pixels[:150] // 64) * 64
    path = tmp_path / "image.jpg"
    Image.fromarray(pixels).save(path, quality=95)
    encoded = tf.constant(path.read_bytes())
    top, left, height, width = 20, 30, 240, 320  # shrunk 4x to 60 x 80, then to the 56 x 56 model input
    expected = np.asarray(Image.open(path).convert("RGB").crop((left, top, left + width, top + height))
                          .resize((56, 56), Image.BILINEAR), np.int32)
    view = preprocessing.TRAIN_VIEWS["torchvision"]
    crop = tf.image.decode_and_crop_jpeg(encoded, [top, left, height, width], channels=3, dct_method=view.dct_method)
    ours = preprocessing.resize_to_uint8(crop, 56, view).numpy().astype(np.int32)
    assert np.abs(ours - expected).max() <= 2 and np.abs(ours - expected).mean() < 0.5
    plain = preprocessing.resize_to_uint8(crop, 56, preprocessing.TrainView("resized_crop")).numpy().astype(np.int32)
    assert np.abs(plain - expected).mean() > 10


# --------------------------------------------------------------------------------- the table and the CLI

def test_every_proof_names_tests_of_this_file():
    """... and, for the NGC recipes' networks, of test_ngc_models.py, each naming the recipe's model."""
    import test_ngc_models

    for name, recipe in recipes.RECIPES.items():
        if not recipe.proof:
            continue
        steps, _, network = recipe.proof.partition("; ")
        path, _, tests = steps.partition(": ")
        assert path == "tests/test_recipes.py", name
        for function in re.findall(r"test_\w+", tests):
            assert callable(globals().get(function)), f"{name}: its proof names {function}, which is not a test here"
        if "[" in tests:
            assert re.search(r"\[(\w+)\]", tests)[1] in FAMILIES
        if name.startswith("ngc_"):
            path, _, tests = network.partition(": ")
            assert path == recipes.NETWORK_TESTS, name
            for function, model in re.findall(r"(test_\w+)\[(\w+)\]", tests):
                assert callable(getattr(test_ngc_models, function)) and model == recipe.config["model"], name
                assert model in test_ngc_models.PROVEN, f"{name}: no fixture proves {model}"
        else:
            assert not network, name


def test_readme_recipe_table_is_the_generated_one():
    """The README's table is the compact one (the docs' full one is checked with the generated pages)."""
    readme = open(os.path.join(os.path.dirname(FIXTURES), "..", "..", "README.md"), encoding="utf-8").read()
    assert recipes.markdown(recipes.COMPACT) in readme, \
        "README.md's recipe table is stale: paste `python -m tfcnn.recipes --markdown --compact`"


@pytest.mark.slow
def test_examples_train_runs_a_recipe_of_each_family(tmp_path):
    """examples/train.py --recipe, as a user starts it (flags overriding the recipe's sizes), on synthetic data:
    the NGC LARC recipe and DeepLearningExamples' 250-epoch one (MixUp), fp16 with their loss scaling."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for recipe, model in (("ngc_resnet50", "resnet18"), ("resnet50_250e", "resnet18")):
        done = subprocess.run([sys.executable, os.path.join(repo, "examples", "train.py"), "--recipe", recipe,
                               "--model", model, "--image_size", "32", "--batch_size", "4", "--optimizer_batch_size",
                               "8", "--num_iter", "2", "--iter_unit", "batch", "--display_every", "1",
                               "--num_classes", "10"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "step       2/2" in done.stdout and "loss scale" in done.stdout, done.stdout[-2000:]
