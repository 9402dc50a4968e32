"""The model zoo: golden parameter counts and GMACs, the reference's function with its weights,
forward/backward, dtypes, config round trip.

Every model: one build at full size (counts) and one at the fixture's small input size, loaded with the
reference weights (function). What depends on a builder's code rather than on a variant's numbers
(gradients reaching every variable, mixed-precision dtypes, the config round trip, a short training run
through the trainer) is checked on one model per builder and structural option (REPRESENTATIVES; a test
makes sure no builder is left out), so a new variant adds about two builds and a new family six.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import weightgen
from tfcnn.models import create_model, list_models, model_info, model_overrides, without_initializers
from tfcnn.profile import count_macs, count_params

ALL = list_models()
EXPECTED_NAMES = ["alexnet", "densenet121", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
                  "efficientnet_b4", "googlenet", "inception_resnet_v2", "inception_v3", "inception_v4",
                  "mobilenet_v2", "ngc_alexnet", "ngc_googlenet", "ngc_inception_resnet_v2", "ngc_inception_v3",
                  "ngc_inception_v4", "ngc_resnet101", "ngc_resnet152", "ngc_resnet18", "ngc_resnet34", "ngc_resnet50",
                  "ngc_xception", "nvidia_se_resnext101_32x4d", "overfeat", "resnet101", "resnet152", "resnet18",
                  "resnet34", "resnet50", "resnext101_32x4d",
                  "resnext50_32x4d", "se_resnext101_32x4d", "se_resnext50_32x4d", "vgg11", "vgg13", "vgg16",
                  "vgg16_bn", "vgg19", "wide_resnet50_2", "xception"]
# torchvision / timm definitions, 1000 classes, auxiliary heads off.
GOLDEN_PARAMS = {
    "googlenet": 6_624_904, "densenet121": 7_978_856, "inception_v4": 42_679_816,
    "inception_resnet_v2": 55_843_464, "xception": 22_855_952, "wide_resnet50_2": 68_883_240,
    "alexnet": 61_100_840, "vgg11": 132_863_336, "vgg13": 133_047_848, "vgg16": 138_357_544, "vgg19": 143_667_240,
    "vgg16_bn": 138_365_992, "efficientnet_b0": 5_288_548, "efficientnet_b1": 7_794_184,
    "efficientnet_b2": 9_109_994, "efficientnet_b3": 12_233_232, "efficientnet_b4": 19_341_616,
    "mobilenet_v2": 3_504_872,
    "resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032, "resnet101": 44_549_160,
    "resnet152": 60_192_808, "resnext50_32x4d": 25_028_904, "resnext101_32x4d": 44_177_704,
    "se_resnext50_32x4d": 27_559_896, "se_resnext101_32x4d": 48_955_416, "inception_v3": 23_834_568,
    # NVIDIA's definitions: DeepLearningExamples' SE-ResNeXt (16-unit gates); the NGC script's OverFeat
    # (overfeat.py's layer list: 34,944 + 614,656 + 1,180,160 + 4,719,616 + 9,438,208 conv, 113,249,280 +
    # 12,587,008 + 4,097,000 dense).
    "nvidia_se_resnext101_32x4d": 45_251_128, "overfeat": 145_920_872,
    # The NGC scripts' networks, as their builders count them (tests/fixtures/ngc, tests/test_ngc_models.py).
    "ngc_resnet18": 12_043_816, "ngc_resnet34": 22_716_840, "ngc_resnet50": 25_557_032, "ngc_resnet101": 44_549_160,
    "ngc_resnet152": 60_192_808, "ngc_googlenet": 6_998_552, "ngc_inception_v3": 23_834_568,
    "ngc_inception_v4": 42_679_816, "ngc_inception_resnet_v2": 31_574_440, "ngc_xception": 22_855_952,
    "ngc_alexnet": 61_100_840,
}
GOLDEN_GMACS = {
    "googlenet": 1.498, "densenet121": 2.834, "inception_v4": 12.254, "inception_resnet_v2": 13.156,
    "xception": 8.357, "wide_resnet50_2": 11.398, "alexnet": 0.714, "vgg11": 7.609, "vgg13": 11.308, "vgg16": 15.470,
    "vgg19": 19.632, "vgg16_bn": 15.470, "efficientnet_b0": 0.386, "efficientnet_b1": 0.687,
    "efficientnet_b2": 0.994, "efficientnet_b3": 1.827, "efficientnet_b4": 4.394, "mobilenet_v2": 0.301,
    "resnet18": 1.814, "resnet50": 4.089, "resnet101": 7.801, "resnet152": 11.514, "resnext50_32x4d": 4.23,
    "resnext101_32x4d": 7.97, "se_resnext50_32x4d": 4.233, "se_resnext101_32x4d": 7.975, "inception_v3": 5.713,
}


# One model per builder and per structural option of it (ResNet's basic block; bottleneck with groups and
# SE; VGG with and without batch norm), on which builder-level properties are checked. The NGC scripts' builder
# and options: its gradient and config checks are in test_ngc_models.py (BUILDER_CHECKS).
REPRESENTATIVES = ["alexnet", "densenet121", "efficientnet_b0", "googlenet", "inception_resnet_v2", "inception_v3",
                   "inception_v4", "mobilenet_v2", "ngc_googlenet", "overfeat", "resnet18", "se_resnext50_32x4d",
                   "vgg11", "vgg16_bn", "xception"]
# The models proven against a timm / torchvision reference (tests/fixtures/reference); the NGC scripts' own
# networks are proven against the scripts' builder in test_ngc_models.py.
REFERENCED = [name for name in ALL if not model_info(name).reference.startswith("NGC ")]


def small_shape(name):
    """The smallest input the model accepts: keeps CPU tests fast."""
    side = model_info(name).min_size
    return (side, side, 3)


@pytest.mark.parametrize("name", ALL)
def test_golden_params_and_gmacs(name):
    with without_initializers():  # counted, never run
        model = create_model(name)  # full input size, 1000 classes
    info = model_info(name)
    assert model.input_shape == (None, info.input_size, info.input_size, 3)
    assert count_params(model) == GOLDEN_PARAMS[name] == info.params
    if name in GOLDEN_GMACS:
        assert count_macs(model) / 1e9 == pytest.approx(GOLDEN_GMACS[name], rel=0.01)
    assert count_macs(model) / 1e9 == pytest.approx(info.gmacs, rel=0.01)


def test_every_builder_has_a_representative():
    from tfcnn.models.registry import _entry

    assert set(REPRESENTATIVES) <= set(ALL) and set(TRAIN_SIZES) == set(REPRESENTATIVES)  # each one trains too
    assert {_entry(name).builder for name in REPRESENTATIVES} == {_entry(name).builder for name in ALL}


def test_every_model_has_a_reference_fixture():
    from test_ngc_models import PROVEN

    assert sorted(n[:-5] for n in os.listdir(weightgen.FIXTURES) if n.endswith(".json")) == REFERENCED
    assert set(ALL) - set(REFERENCED) <= set(PROVEN)


@pytest.mark.parametrize("name", REFERENCED)
def test_reference_weights_gradients_and_config_round_trip(name, tmp_path):
    """One build per model, at its fixture's small input size, loaded from the reference state dict:

    1. the proof that tfcnn's model is the reference's network: same weights, same logits (fp32,
       inference mode, non-trivial batch-norm statistics), to 1e-4 of the largest logit;
    2. on the REPRESENTATIVES (whether every layer is connected is the builder's code, not a variant's
       numbers): every variable gets a gradient (the loaded weights are non-zero everywhere, unlike a
       fresh model's zero-initialized residual gammas), and the config rebuilds the same model.
    """
    fixture = weightgen.fixture(name)
    assert fixture["reference"] == model_info(name).reference
    size = fixture["input_size"]
    path = weightgen.write_safetensors(fixture, tmp_path / "reference.safetensors")
    # Stochastic depth could drop a block for both images of the training-mode pass: none here.
    no_drop_path = {"drop_path_rate": 0.0} if "drop_path_rate" in model_overrides(name) else {}
    model = create_model(name, weights=path, input_shape=(size, size, 3), log=lambda *_: None, **no_drop_path)
    images = weightgen.images(fixture["seed"], 2, size)
    expected = weightgen.decode(fixture["logits"], fixture["logits_shape"])
    logits = model(images, training=False).numpy()
    error = weightgen.relative_error(logits, expected)
    assert error < 1e-4, f"{name}: logits differ from {fixture['reference']} by {error:.2e} relative"
    if name not in REPRESENTATIVES:
        return

    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_mean(tf.square(logits))
    assert logits.shape == (2, 1000) and logits.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy()))
    grads = tape.gradient(loss, model.trainable_variables)
    no_grad = [v.name for v, g in zip(model.trainable_variables, grads)
               if g is None or not np.any(g.numpy())]
    assert not no_grad, f"variables without gradient: {no_grad[:5]}"

    with without_initializers():
        clone = tf.keras.Model.from_config(model.get_config())
    for copy, original in zip(clone.weights, model.weights):  # variable to variable: no NumPy round trip
        copy.assign(original)
    np.testing.assert_array_equal(model(images, training=False).numpy(), clone(images, training=False).numpy())
    assert [w.name for w in clone.weights] == [w.name for w in model.weights]


# The builders' code is the same under either mixed policy (each layer takes the global policy; the only
# dtype a builder names is float32, for its heads), so each representative runs under one of the two, alternating.
MIXED_POLICIES = {name: ("mixed_float16", "mixed_bfloat16")[i % 2] for i, name in enumerate(REPRESENTATIVES)}


@pytest.mark.parametrize("name, mixed_policy", sorted(MIXED_POLICIES.items()), indirect=["mixed_policy"])
def test_mixed_precision_logits_are_float32(name, mixed_policy):
    model = create_model(name, num_classes=10, input_shape=small_shape(name))
    logits = model(tf.random.uniform((1, *small_shape(name))), training=False)  # fp16 is slow on CPUs: one image
    assert logits.shape == (1, 10)
    assert logits.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy()))
    compute_dtypes = {layer.compute_dtype for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)}
    assert compute_dtypes == {mixed_policy.split("_")[1]}
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)


def test_resnet_v1_5_strides_groups_and_zero_initialized_residuals():
    model = create_model("resnet50", input_shape=(64, 64, 3))
    assert model.get_layer("stage2_block1_conv1_conv").strides == (1, 1)
    assert model.get_layer("stage2_block1_conv2_conv").strides == (2, 2)
    assert model.get_layer("stage2_block1_downsample_conv").strides == (2, 2)
    assert model.get_layer("stage4_block3_out").output.shape[1:] == (2, 2, 2048)  # stride 32
    se_resnext = create_model("se_resnext50_32x4d", input_shape=(64, 64, 3))
    assert se_resnext.get_layer("stage1_block1_conv2_conv").groups == 32
    for net in (model, se_resnext):
        last_bn = [layer for layer in net.layers if layer.name.endswith("_conv3_bn")]
        assert len(last_bn) == 16
        assert all(not np.any(layer.gamma.numpy()) for layer in last_bn)  # every block starts as the identity
        other_bn = net.get_layer("stage1_block1_conv1_bn")
        assert np.all(other_bn.gamma.numpy() == 1.0) and other_bn.epsilon == 1e-5


def test_grouped_convolutions_take_tensorflows_own_kernels_where_they_train():
    """GroupedConv2D (ResNeXt's 3x3s): trains_grouped_natively answers, dtype by dtype, what the kernels here do
    with a grouped convolution's gradients; where they train, the layer runs TensorFlow's grouped Conv2D (no XLA
    cluster; Keras' Conv2D compiles one) and computes Keras' outputs and gradients from the same weights.
    Control: the same weights with two groups' kernels swapped give other outputs."""
    from tfcnn.models.layers import GroupedConv2D, trains_grouped_natively

    for dtype in ("float32", "bfloat16", "float16", "float64"):
        images, kernel = tf.ones((1, 4, 4, 8), dtype), tf.ones((3, 3, 2, 8), dtype)  # 4 groups of 2 channels
        try:
            with tf.GradientTape() as tape:
                tape.watch([images, kernel])
                outputs = tf.nn.conv2d(images, kernel, 1, "SAME")
            [gradient.numpy() for gradient in tape.gradient(outputs, [images, kernel])]
            trains = True
        except tf.errors.OpError:
            trains = False
        assert trains_grouped_natively(dtype) == trains, dtype

    images = tf.random.stateless_normal((2, 6, 6, 8), seed=(1, 2))
    grouped = GroupedConv2D(8, 3, groups=4, name="grouped")
    keras = tf.keras.layers.Conv2D(8, 3, groups=4, name="keras")
    grouped.build(images.shape)
    keras.build(images.shape)
    grouped.bias.assign(tf.random.stateless_normal((8,), seed=(3, 4)))
    keras.set_weights(grouped.get_weights())

    def step(layer):
        @tf.function
        def run(images):
            with tf.GradientTape() as tape:
                tape.watch(images)
                outputs = layer(images)
                loss = tf.reduce_sum(tf.square(outputs))
            return [outputs, *tape.gradient(loss, [images, *layer.weights])]
        graph = run.get_concrete_function(images).graph.as_graph_def()
        compiled = any(function.attr["_XlaMustCompile"].b for function in graph.library.function)
        return [t.numpy() for t in run(images)], compiled

    (got, got_compiled), (want, want_compiled) = step(grouped), step(keras)
    assert (got_compiled, want_compiled) == (not trains_grouped_natively("float32"), True)
    for name, a, b in zip(("outputs", "input gradient", "kernel gradient", "bias gradient"), got, want):
        assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), name
    kernel = grouped.kernel.numpy()
    grouped.kernel.assign(np.concatenate([kernel[..., 2:4], kernel[..., :2], kernel[..., 4:]], axis=-1))
    assert np.abs(grouped(images).numpy() - want[0]).max() > 1e-2 * np.abs(want[0]).max()


def test_a_cpu_run_whose_grouped_convolutions_take_xla_is_told_the_setting_that_avoids_it(monkeypatch):
    """The trainer's start-up note: what it says when, and that building a run's model logs it."""
    from tfcnn.models import layers
    from tfcnn.training import make_config
    from tfcnn.training.plan import make_plan
    from tfcnn.training.trainer import build_trainer

    with without_initializers():
        resnext, resnet = (create_model(name, input_shape=(32, 32, 3)) for name in ("resnext50_32x4d", "resnet18"))
    assert (layers.grouped_convolutions_note(resnext) is None) == layers.trains_grouped_natively("float32")
    monkeypatch.setattr(layers, "has_gpu", lambda: False)
    monkeypatch.setattr(layers, "trains_grouped_natively", lambda dtype: False)
    monkeypatch.setattr(layers, "onednn_enabled", lambda: False)
    note = layers.grouped_convolutions_note(resnext)
    assert note.startswith("16 grouped convolutions: TensorFlow's CPU kernels here have no grouped gradient in float32")
    assert note.endswith("TF_ENABLE_ONEDNN_OPTS=1 selects oneDNN's CPU kernels, which have it (fp32, bf16)")
    logged = []
    build_trainer(make_plan(make_config(model="resnext50_32x4d", image_size=32, batch_size=8, num_classes=5)),
                  log=logged.append)
    assert f"tfcnn: note: {note}" in logged, logged
    monkeypatch.setattr(layers, "onednn_enabled", lambda: True)  # float16, say
    assert "--precision fp32 (or bf16 on CPUs with AVX-512)" in layers.grouped_convolutions_note(resnext)
    assert layers.grouped_convolutions_note(resnet) is None
    monkeypatch.setattr(layers, "trains_grouped_natively", lambda dtype: True)
    assert layers.grouped_convolutions_note(resnext) is None


def test_without_initializers_leaves_weights_zero_inside_only():
    with without_initializers():
        unset = create_model("resnet18", input_shape=(32, 32, 3))
    assert not any(np.any(w.numpy()) for w in unset.weights)
    drawn = create_model("resnet18", input_shape=(32, 32, 3))
    assert np.any(drawn.get_layer("stem_conv").kernel.numpy()) and np.any(drawn.get_layer("head_fc").kernel.numpy())


def test_dropout_override_and_none_overrides_are_dropped():
    model = create_model("resnet18", input_shape=(32, 32, 3), dropout_rate=0.2, zero_init_residual=None)
    assert model.get_layer("head_dropout").rate == 0.2
    assert not np.any(model.get_layer("stage1_block1_conv2_bn").gamma.numpy())  # default kept


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="resnet5"), r"unknown model 'resnet5' \(did you mean 'resnet50' or 'resnet152' or 'resnet34'\?\); valid "
                           r"models: alexnet, densenet121, .*, resnet50, .*, xception$"),
    (dict(name="ResNet-18"), r"^unknown model 'ResNet-18' \(did you mean 'resnet18'\?\); valid models: alexnet, "),
    (dict(name=tf.keras.Sequential()), r"^model takes a registered model's name \(python -m tfcnn.models lists them\), "
                                       r"received Sequential: a model of your own joins them through tfcnn.models"),
    (dict(name="resnet18", num_classes=0), r"num_classes must be an integer >= 1, received: 0"),
    (dict(name="resnet18", num_classes=2.5), r"num_classes .* received: 2.5"),
    (dict(name="resnet18", input_shape=(16, 16, 3)), r"input_shape \(16, 16, 3\) is too small for resnet18"),
    (dict(name="inception_v3", input_shape=(64, 64, 3)), r"too small for inception_v3: .* >= 75"),
    (dict(name="resnet18", input_shape=(64, 64)), r"input_shape must be \(height, width, channels\)"),
    (dict(name="resnet18", widht=3), r"unknown override for model 'resnet18': 'widht'; valid overrides: "),
    (dict(name="resnet50", groups=32), r"unknown override for model 'resnet50': 'groups'"),
])
def test_bad_arguments_raise_value_error_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        create_model(**kwargs)
    with pytest.raises(ValueError, match=r"^unknown model 'nope'; valid models: alexnet, "):  # nothing near it
        model_info("nope")


# One model per builder and structural option (the trainer's own tests train tests/testnet.py's small models),
# each at an input where training is not degenerate: at the smallest inputs the last feature maps are 1x1, so
# with batch 2 a batch norm there normalizes 2 values per channel, its variance is almost nothing, and one SGD
# step can make the weights non-finite (Xception at 16 px did so on one kernel set, by the luck of the draw on
# the other). These sizes give every batch norm at least MIN_BATCH_NORM_VALUES values, so the trainer's warning
# (tfcnn.training.callbacks.small_batch_norm_warning) stays silent.
TRAIN_SIZES = {"alexnet": 63, "densenet121": 64, "efficientnet_b0": 48, "googlenet": 48, "inception_resnet_v2": 107,
               "inception_v3": 107, "inception_v4": 107, "mobilenet_v2": 48, "ngc_googlenet": 48, "overfeat": 71,
               "resnet18": 64,
               "se_resnext50_32x4d": 64,
               "vgg11": 32, "vgg16_bn": 32, "xception": 48}


@pytest.mark.parametrize("name", sorted(TRAIN_SIZES))
def test_every_family_trains(name):
    """A short training run of each builder through tfcnn's trainer (synthetic data, small input)."""
    from tfcnn.training import make_config, train
    from tfcnn.training.callbacks import small_batch_norm_warning

    sums, batch_size, size = [], 2, TRAIN_SIZES[name]
    # Each variable's bits summed, wrapping (a variable that did not move keeps its sum; one that moved almost
    # surely changes it, and if not, is counted as still): VGG-11's 129 M weights copied out twice cost 2.5 CPU-s.
    snapshot = lambda logs: sums.append([int(tf.reduce_sum(tf.bitcast(v.read_value(), tf.uint32)))  # noqa: E731
                                         for v in record.model.model.trainable_variables])
    record = tf.keras.callbacks.LambdaCallback(on_train_begin=snapshot, on_train_end=snapshot)
    # Without ResNet's zero-initialized last gamma of each residual branch, which holds the branch's gradients
    # at 0 in the first step and so near it in the second that its other gammas' updates round away against
    # their 1.0 in float32.
    options = {"zero_init_residual": False} if "zero_init_residual" in model_overrides(name) else None
    summary = train(make_config(model=name, image_size=size, batch_size=batch_size, num_iter=2, iter_unit="batch",
                                num_classes=5, warmup_epochs=0, lr=0.1, display_every=1, benchmark_warmup_steps=0,
                                seed=1, model_options=options), callbacks=[record])
    assert small_batch_norm_warning(record.model.model, batch_size) is None
    assert np.isfinite(summary["final"]["loss"]) and summary["final"]["step"] == 2
    moved = [a != b for a, b in zip(*sums)]
    still = [v.name for v, m in zip(record.model.model.trainable_variables, moved) if not m]
    assert len(still) < 0.1 * len(moved), f"{name}: {len(still)} of {len(moved)} variables did not train: {still[:8]}"


def test_the_model_table_command(capsys):
    """python -m tfcnn.models: the table, one model's weights names and builder options (what --model_options
    takes, with the defaults), and a pattern that matches nothing refused with the names."""
    from tfcnn.models.__main__ import main

    main(["resnet50"])
    shown = capsys.readouterr().out
    assert shown.splitlines()[1].split()[:4] == ["resnet50", "224", "25,557,032", "4.089"]
    assert "weights={name} for resnet50: imagenet, torchvision," in shown
    assert "builder options (--model_options, create_model's keywords), defaults: " in shown
    assert "zero_init_residual=True" in shown and "bn_epsilon=1e-05" in shown
    main(["--markdown", "vgg1*"])
    assert [line.split(" | ")[0] for line in capsys.readouterr().out.splitlines()[2:]] == [
        "| vgg11", "| vgg13", "| vgg16", "| vgg16_bn", "| vgg19"]
    with pytest.raises(SystemExit) as refused:
        main(["resnet5"])
    assert refused.value.code == 2 and "no model matches 'resnet5'; valid names: alexnet," in capsys.readouterr().err


def test_the_profile_command(capsys):
    """python -m tfcnn.profile: a row per model at the size asked (the counts at that size, the published GMACs
    beside them); a size of 0 was taken for "the model's own" and printed 224's counts, an unknown name was a
    traceback after the table's header."""
    from tfcnn.profile import main, profile_model

    main(["--models", "resnet18", "--image_size", "64"])
    name, size, params, gmacs, published = capsys.readouterr().out.splitlines()[1].split()
    assert (name, size, params, published) == ("resnet18", "64", f"{GOLDEN_PARAMS['resnet18']:,}", "1.814")
    assert float(gmacs) == pytest.approx(GOLDEN_GMACS["resnet18"] * (64 / 224) ** 2, rel=0.05)  # 0.149 of 0.148
    for argv, message in ((["--image_size", "0"], "--image_size must be a positive integer, received: 0"),
                          (["--models", "resnet5"], "unknown model 'resnet5' (did you mean 'resnet50'"),
                          (["--models", ","], "--models must name at least one model, or 'all'")):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        printed = capsys.readouterr()
        assert message in f"{refused.value.code}{printed.err}" and not printed.out, (argv, printed)
    with pytest.raises(ValueError, match="image_size must be a positive integer, received: 0"):
        profile_model("resnet18", 0)


def test_keras_3_is_refused_with_the_way_out(monkeypatch):
    """Under Keras 3 the zoo would build and train silently differently: importing it is refused instead."""
    from tfcnn.precision import require_keras_2

    require_keras_2()  # the lane this runs on has Keras 2
    monkeypatch.setattr(tf.keras, "__version__", "3.5.0", raising=False)
    with pytest.raises(ImportError, match=r"Keras 3\.5\.0.*tf_keras.*TF_USE_LEGACY_KERAS=1.*'make install' does both"):
        require_keras_2()


def test_importing_the_zoo_under_keras_3_names_the_switch():
    """Where Keras 3 is installed (TF 2.21 lane), turning the legacy switch off fails at import, clearly."""
    import subprocess
    import sys

    env = {**os.environ, "TF_USE_LEGACY_KERAS": "0"}
    code = "import tensorflow as tf\nprint(getattr(tf.keras, '__version__', 2), flush=True)\nimport tfcnn.models"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)  # one start-up
    if result.stdout.strip().startswith("2"):
        assert result.returncode == 0, result.stderr[-2000:]
        pytest.skip("tf.keras is Keras 2 even without TF_USE_LEGACY_KERAS (TF 2.15 lane)")
    assert result.returncode != 0
    assert "tfcnn needs Keras 2, but tf.keras is Keras 3" in result.stderr
