"""The NGC scripts' networks (nvidia-examples/cnn, 20.10-tf1), proven against NVIDIA's own builder code.

tests/scripts/record_ngc_fixtures.py ran each script's network function with nvutils' LayerBuilder, outside the
project, and recorded (tests/fixtures/ngc/NAME.json, NAME tfcnn's model): its variables' names and shapes in
creation order, its parameter count, every weighted layer's output shape in creation order, its pools', concats'
and residual adds' output shapes, and its logits for a fixed input on weights generated per variable name
(tests/weightgen.py). Each test here builds tfcnn's network, loads the same generated weights and compares all
of it; the logits within 1e-4 of the largest. The name mapping is data: TensorFlow numbers its layers in
creation order (conv2d_17/kernel, batch_normalization_17/gamma), and tfcnn's builders create theirs in the
scripts' order, so the i-th variable of each kind (kernel, bias, gamma, ...) of one network is the i-th of that
kind of the other; the shapes of every pair must agree.

Each network has a negative control: the same comparison of a network with one thing the proof is about
changed (v1.5's stride, GoogLeNet with batch norm, ...) must fail.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import weightgen
from tfcnn import checkpoints
from tfcnn.models import create_model, list_models, model_info, ngc, registry, without_initializers
from tfcnn.profile import count_params

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ngc")
PROVEN = sorted(name[:-5] for name in os.listdir(FIXTURES) if name.endswith(".json"))
TOLERANCE = 1e-4
KINDS = ("kernel", "bias", "depthwise_kernel", "pointwise_kernel", "gamma", "beta", "moving_mean", "moving_variance")
POOLED = {tf.keras.layers.MaxPool2D: "max_pool", tf.keras.layers.AveragePooling2D: "avg_pool",
          tf.keras.layers.GlobalAveragePooling2D: "avg_pool", tf.keras.layers.Concatenate: "concat",
          tf.keras.layers.Add: "add"}


def fixture(name):
    import json

    with open(os.path.join(FIXTURES, f"{name}.json")) as f:
        return json.load(f)


def built_in_order(build):
    """(model, its variables in creation order): what build() creates, without drawing initial values."""
    order = []

    def record(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        order.append(variable)
        return variable

    with tf.variable_creator_scope(record), without_initializers():
        model = build()
    weights = {id(w) for w in model.weights}  # not Keras' step counters
    return model, [v for v in order if id(v) in weights]


def zoo_model(name, size):
    return built_in_order(lambda: create_model(name, input_shape=(size, size, 3), log=lambda *_: None))


def variant(name, size, **changes):
    """The registered network `name` with architecture arguments `changes`: a negative control's network."""
    entry = registry._entry(name)
    return built_in_order(lambda: entry.builder(**{**entry.arch, **entry.defaults, **changes}, num_classes=1000,
                                                input_shape=(size, size, 3), name=name))


def name_mapping(variables, recorded):
    """[(tfcnn variable, NVIDIA's name, NVIDIA's shape)]: the i-th variable of each kind with the i-th of NVIDIA's,
    or a description of why the two networks' variables do not pair."""
    ours = {kind: [v for v in variables if v.name.split("/")[-1].split(":")[0] == kind] for kind in KINDS}
    theirs = {kind: [(n, s) for n, s in recorded if n.rsplit("/", 1)[-1] == kind] for kind in KINDS}
    if sum(map(len, ours.values())) != len(variables) or sum(map(len, theirs.values())) != len(recorded):
        return "a variable of another kind"
    pairs = []
    for kind in KINDS:
        if len(ours[kind]) != len(theirs[kind]):
            return f"{len(ours[kind])} {kind} variables, NVIDIA's network {len(theirs[kind])}"
        for variable, (their_name, shape) in zip(ours[kind], theirs[kind]):
            if tuple(variable.shape) != tuple(shape):
                return f"{variable.name} {tuple(variable.shape)} pairs with {their_name} {tuple(shape)}"
            pairs.append((variable, their_name, shape))
    return pairs


def load(pairs, recorded, adapt=None):
    """Assigns each tfcnn variable of `pairs` (name_mapping's) the value generated for its NVIDIA name.
    adapt(name, value): a control's change of a loaded value."""
    for variable, their_name, shape in pairs:
        value = weightgen.tf_variable(their_name, shape, recorded["seed"])
        variable.assign(adapt(variable.name, value) if adapt else value)


def with_generated_weights(name):
    """tfcnn's network `name` at its fixture's input size, holding the weights NVIDIA's logits were recorded on."""
    recorded = fixture(name)
    model, variables = zoo_model(name, recorded["input_size"])
    load(name_mapping(variables, recorded["variables"]), recorded)
    return model


def pooled_shapes(model):
    """Sorted [kind, output shape] of the pools, concatenations and adds (a global pool as NVIDIA's (1, 1, C))."""
    out = []
    for layer in model.layers:
        kind = POOLED.get(type(layer))
        if kind:
            shape = list(layer.output.shape[1:])
            out.append([kind, [1, 1, *shape] if len(shape) == 1 else shape])
    return sorted(out)


def differences(model, variables, recorded, adapt=None):
    """What differs between tfcnn's network and NVIDIA's recorded one: {check: description}, and the logits'
    relative difference (inf when the weights cannot be loaded). adapt(name, value): a control's change of a
    loaded value."""
    found = {}
    params = count_params(model)
    if params != recorded["params"]:
        found["params"] = f"{params:,} parameters, NVIDIA's {recorded['params']:,}"
    layers = {layer.name: layer for layer in model.layers}
    weighted = dict.fromkeys(v.name.split("/")[0] for v in variables)
    if [list(layers[n].output.shape[1:]) for n in weighted] != [shape for _, shape in recorded["layers"]]:
        found["layers"] = "weighted layers' output shapes differ"
    if pooled_shapes(model) != sorted(recorded["ops"]):
        found["ops"] = "pools', concatenations' or adds' output shapes differ"
    pairs = name_mapping(variables, recorded["variables"])
    if isinstance(pairs, str):
        found["names"] = pairs
        return found, float("inf")
    load(pairs, recorded, adapt)
    images = weightgen.images(recorded["seed"], 2, recorded["input_size"])
    expected = weightgen.decode(recorded["logits"], recorded["logits_shape"])
    return found, weightgen.relative_error(model(images, training=False).numpy(), expected)


# The networks whose builder-level properties (every variable gets a gradient, the config rebuilds the same
# model) are checked here too: one per builder and structural option (test_models.py checks the others).
BUILDER_CHECKS = {"ngc_resnet18", "ngc_resnet50", "ngc_googlenet", "ngc_inception_resnet_v2", "ngc_xception",
                  "ngc_alexnet"}


def test_every_ngc_network_has_a_fixture():
    ngc_models = [n for n in list_models() if model_info(n).reference.startswith("NGC nvidia-examples/cnn")]
    assert set(ngc_models) <= set(PROVEN) and set(PROVEN) - set(ngc_models) == {"vgg16", "overfeat"}


@pytest.mark.parametrize("name", PROVEN)
def test_network_computes_nvidias(name):
    recorded = fixture(name)
    size = recorded["input_size"]
    model, variables = zoo_model(name, size)
    found, error = differences(model, variables, recorded)
    print(f"{name}: {count_params(model):,} parameters, logits {error:.2e} from {recorded['script']}")
    assert not found, f"{name} differs from {recorded['script']}: {found}"
    assert recorded["params"] == model_info(name).params  # the zoo's golden count is NVIDIA's
    assert error < TOLERANCE, f"{name}: logits differ from {recorded['script']} by {error:.2e} relative"
    if name not in BUILDER_CHECKS:
        return
    images = weightgen.images(recorded["seed"], 2, size)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(images, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    no_grad = [v.name for v, g in zip(model.trainable_variables, grads) if g is None or not np.any(g.numpy())]
    assert not no_grad, f"variables without gradient: {no_grad[:5]}"
    with without_initializers():
        clone = tf.keras.Model.from_config(model.get_config())
    for copy, original in zip(clone.weights, model.weights):
        copy.assign(original)
    np.testing.assert_array_equal(model(images, training=False).numpy(), clone(images, training=False).numpy())


def flattened_nchw(layer):
    """A control's weights: the first dense layer's rows read as if the maps were flattened NCHW (PyTorch's
    order) instead of NHWC (which nvutils' flatten2d transposes to)."""
    def adapt(variable_name, value):
        if variable_name.startswith(f"{layer}/kernel"):
            grid = int(round((value.shape[0] / FLATTENED_CHANNELS[layer]) ** 0.5))
            chw = value.reshape(grid, grid, FLATTENED_CHANNELS[layer], -1).transpose(2, 0, 1, 3)
            return chw.reshape(value.shape)
        return value
    return adapt


FLATTENED_CHANNELS = {"classifier_fc1": 1024}


def replace_steps(layer_list, old, new):
    """A layer list with every step equal to `old` replaced by `new`, inside modules and residuals too."""
    def walk(step):
        if step == old:
            return new
        if step[0] == "module":
            return (*step[:2], tuple(tuple(walk(s) for s in column) for column in step[2]))
        if step[0] == "residual":
            return (*step[:2], tuple(walk(s) for s in step[2]), *step[3:])
        return step
    return tuple(walk(step) for step in layer_list)


def rescaled_residuals(layer_list, scale):
    return tuple((*step[:4], scale) if step[0] == "residual" else step for step in layer_list)


# One per network: (what is broken, the network's architecture changes, or the loaded weights' change).
CONTROLS = {
    "ngc_resnet18": ("torchvision's shortcut rule (identity where the shape is kept)", dict(shortcut="projection")),
    "ngc_resnet34": ("torchvision's padded stem pool", dict(stem_pool="padded")),
    "ngc_resnet50": ("v1.5's stride, on the 3x3 convolution", dict(stride_on="conv2")),
    # torchvision's shortcut rule gives the same bottleneck networks: every stage's first block changes the
    # depth, so nvutils' max-pool shortcut never occurs (ngc_resnet18 shows the rule where it matters).
    "ngc_resnet101": ("torchvision's padded stem pool", dict(stem_pool="padded")),
    "ngc_resnet152": ("v1.5's stride, on the 3x3 convolution", dict(stride_on="conv2")),
    "ngc_googlenet": ("batch norm after every convolution (torchvision's GoogLeNet)", dict(batch_norm=True)),
    "ngc_inception_v3": ("an average pool in the last module (torchvision's)",
                         dict(layer_list=ngc.INCEPTION_V3[:-1] + (ngc._v3_e(ngc.avg_pool),))),
    "ngc_inception_v4": ("the stem's 1x7 before its 7x1 (timm's order)", dict(layer_list=replace_steps(
        ngc.INCEPTION_V4, ngc.INCEPTION_V4[4], ngc.module(
            "incept_v4_sb", (ngc.conv(64, 1), ngc.conv(96, 3, 1, "valid")),
            (ngc.conv(64, 1), ngc.conv(64, (1, 7)), ngc.conv(64, (7, 1)), ngc.conv(96, 3, 1, "valid")))))),
    "ngc_inception_resnet_v2": ("unscaled residuals", dict(
        layer_list=rescaled_residuals(ngc.INCEPTION_RESNET_V2, 1.0))),
    "ngc_xception": ("nvutils' default batch norm (epsilon 1e-4, decay 0.9), not the script's", dict(
        bn_epsilon=1e-4, bn_momentum=0.9)),
    "vgg16": ("batch norm after every convolution (vgg16_bn's)", dict(batch_norm=True)),
    "ngc_alexnet": ("torchvision's padding of the first convolution", dict(conv1_padding=2)),
    "overfeat": ("the maps flattened in PyTorch's NCHW order", flattened_nchw("classifier_fc1")),
}


def test_every_network_has_a_control():
    assert set(CONTROLS) == set(PROVEN)


@pytest.mark.parametrize("name", PROVEN)
def test_negative_control_fails(name):
    recorded = fixture(name)
    broken, change = CONTROLS[name]
    if callable(change):
        model, variables = zoo_model(name, recorded["input_size"])
        found, error = differences(model, variables, recorded, adapt=change)
    else:
        model, variables = variant(name, recorded["input_size"], **change)
        found, error = differences(model, variables, recorded)
    print(f"{name} with {broken}: {found or 'same shapes'}, logits {error:.2e}")
    assert found or error > TOLERANCE, f"{name}: {broken} went unnoticed"


# ------------------------------------------------------------------------------------------ the recipes

NETWORK_RECIPES = {  # every ngc_* recipe (one per network) and a small input it trains at (batch 2)
    "ngc_resnet50": 64, "ngc_inception_v3": 107, "ngc_vgg16": 32, "ngc_googlenet": 48, "ngc_inception_v4": 107,
    "ngc_inception_resnet_v2": 107, "ngc_xception": 48, "ngc_alexnet": 67, "ngc_overfeat": 71,
}
SMALL = dict(batch_size=2, optimizer_batch_size=2, num_iter=2, iter_unit="batch", num_classes=5, precision="fp32",
             display_every=1, benchmark_warmup_steps=0, seed=1)


def test_every_ngc_recipe_is_trained_here():
    from tfcnn import recipes

    assert set(NETWORK_RECIPES) == {name for name in recipes.RECIPES if name.startswith("ngc_")}


@pytest.mark.parametrize("recipe", sorted(set(NETWORK_RECIPES) - {"ngc_googlenet"}))
def test_ngc_recipes_train_their_networks_and_keep_the_scripts_view(recipe):
    """Each ngc_* recipe, two fp32 steps of batch 2 on synthetic data through tfcnn.train (what python -m
    tfcnn.train runs; ngc_googlenet's as that command below), on its script's network, which carries the
    scripts' evaluation view. Without a log dir: a checkpoint records the model's view (the command below
    reads it back), and these networks' would be 3.7 GB to write (VGG-16's and OverFeat's 1.1 GB each)."""
    import tfcnn
    from tfcnn import recipes

    size = NETWORK_RECIPES[recipe]
    result = tfcnn.train(recipe, image_size=size, **SMALL)
    model = recipes.RECIPES[recipe].config["model"]
    assert (result.status, result.step, result.model.name) == ("complete", 2, model)
    assert np.isfinite(result.metrics["loss"])
    view = result.model.data_config
    assert (view.eval_crop, view.crop_fraction, view.input_size) == ("ngc", 0.8, size)


def test_python_m_tfcnn_train_runs_an_ngc_recipe(tmp_path):
    args = [f"--{key}={value}" for key, value in SMALL.items()]
    done = subprocess.run([sys.executable, "-m", "tfcnn.train", "--recipe=ngc_googlenet", "--image_size=48",
                           f"--log_dir={tmp_path}", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "step       2/2" in done.stdout, done.stdout[-2000:]
    record = checkpoints.describe(checkpoints.latest_checkpoint(str(tmp_path)))
    view = record.data_config
    assert record.model == "ngc_googlenet" and (view["eval_crop"], view["crop_fraction"], view["input_size"]) == (
        "ngc", 0.8, 48)
