"""ONNX export: ONNX Runtime computes TensorFlow's logits for every builder, int8 keeps a trained model's
accuracy, the CLI takes what tfcnn.evaluate takes, and what cannot be exported faithfully is refused.

Skipped as a whole where the onnx extra (tf2onnx, onnxruntime) is not installed: a plain install never needs it.
"""
import contextlib
import fcntl
import gc
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tfcnn import onnx_export

try:
    onnx_export.require()
except ImportError as error:
    pytest.skip(str(error), allow_module_level=True)

import onnx  # noqa: E402

import weightgen  # noqa: E402
from test_models import REPRESENTATIVES  # noqa: E402  (one model per builder and structural option)
from tfcnn.data.preprocessing import normalize_batch  # noqa: E402
from tfcnn.export import main as export_main  # noqa: E402
from tfcnn.models import DataConfig, create_model, list_models, model_overrides  # noqa: E402

# Adding a family's representative to test_models.REPRESENTATIVES covers it here too.
FAMILIES = REPRESENTATIVES
# The models with 60-146 M parameters in dense classifiers, and their conversion's peak resident memory in GB
# (measured, but VGG-16-BN's, taken a little above VGG-11's). Two at once on the two test workers run a 24 GB
# machine out of memory, so they take turns under an inter-process lock (xdist's loadgroup would do, but under
# pytest 9 its workers' groups are lost), and skip, naming the need, where the machine has less available (a
# run of the whole suite beside the ONNX tests can leave the other worker large).
DENSE_CLASSIFIERS = {"alexnet": 6.1, "overfeat": 10.7, "vgg11": 13.3, "vgg16_bn": 13.5}
QUIET = dict(log=lambda *_: None)


@pytest.fixture(autouse=True)
def free_models():
    """Each test's models, graphs and sessions are freed before the next (VGG's take gigabytes)."""
    yield
    tf.keras.backend.clear_session()
    gc.collect()


def builder_of(name):
    from tfcnn.models.registry import _entry

    return _entry(name).builder


def test_every_builder_is_exported():
    assert {builder_of(name) for name in FAMILIES} == {builder_of(name) for name in list_models()}


def test_the_cli_offers_the_int8_targets_the_module_has():
    from tfcnn import export

    assert export.INT8_TARGETS == onnx_export.INT8_TARGETS


def pixels(seed, batch, size):
    """float32 RGB 0-255 images, what the exported model takes."""
    return weightgen.uniform([seed, batch, size, 255], 0.0, 255.0, (batch, size, size, 3))


def reference_model(name, tmp_path):
    """The model loaded with its reference-weight fixture (non-trivial weights and batch-norm statistics),
    at the fixture's small input size; an NGC network with the weights its fixture generates."""
    import test_ngc_models

    if name in test_ngc_models.PROVEN and not os.path.exists(os.path.join(weightgen.FIXTURES, f"{name}.json")):
        return test_ngc_models.with_generated_weights(name), None
    fixture = weightgen.fixture(name)
    size = fixture["input_size"]
    path = weightgen.write_safetensors(fixture, tmp_path / "reference.safetensors")
    no_drop_path = {"drop_path_rate": 0.0} if "drop_path_rate" in model_overrides(name) else {}
    return create_model(name, weights=path, input_shape=(size, size, 3), **QUIET, **no_drop_path), path


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_onnx_runtime_logits_equal_tensorflows(name, tmp_path, tmp_path_factory):
    with one_at_a_time(tmp_path_factory, DENSE_CLASSIFIERS[name]) if name in DENSE_CLASSIFIERS else \
            contextlib.nullcontext():
        logits_agree(name, tmp_path)


def available_gb():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 2**20


@contextlib.contextmanager
def one_at_a_time(tmp_path_factory, peak_gb):
    """Holds a lock shared by every test worker of the run (their base directories' parent), skips unless
    the machine has peak_gb and 1 GB more available, and frees the test's models before the next holder
    starts."""
    with open(tmp_path_factory.getbasetemp().parent / "dense-classifiers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            available = available_gb()
            if available < peak_gb + 1:
                pytest.skip(f"the conversion peaks at {peak_gb} GB and {available:.1f} GB are available; run "
                            f"the ONNX tests alone: make test ONNX=1 TESTS=tests/test_export_onnx.py")
            yield
        finally:
            tf.keras.backend.clear_session()
            gc.collect()
            fcntl.flock(lock, fcntl.LOCK_UN)


def logits_agree(name, tmp_path):
    model, _ = reference_model(name, tmp_path)
    size, data = model.input_shape[1], model.data_config
    export = onnx_export.export_onnx(model, str(tmp_path / "onnx"), **QUIET)
    images = pixels(1, 2, size)
    expected = model(normalize_batch(images, data.mean, data.std, tf.float32), training=False).numpy()
    logits, probabilities = onnx_export.session(os.path.join(export, "model.onnx")).run(None, {"images": images})
    error = onnx_export.relative_error(logits, expected)
    assert error < 1e-4, f"{name}: ONNX Runtime's logits differ from TensorFlow's by {error:.2e} relative"
    assert np.abs(probabilities - tf.nn.softmax(expected).numpy()).max() < 1e-4
    assert onnx_export.unconverted_nodes(onnx.load(os.path.join(export, "model.onnx"))) == []


def test_export_cli_from_reference_weights_dynamic_batch_and_files(tmp_path):
    model, path = reference_model("resnet18", tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "labels.txt").write_text("".join(f"n{i:03d}\tclass {i}\n" for i in range(1000)))
    out = tmp_path / "export"
    export_main(["--format=onnx", "--model=resnet18", f"--weights={path}", "--image_size=64",
                 f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}"])
    assert sorted(os.listdir(out)) == ["labels.txt", "model.onnx", "tfcnn.json"]
    assert (out / "labels.txt").read_text() == (tmp_path / "data" / "labels.txt").read_text()
    info = json.loads((out / "tfcnn.json").read_text())
    assert (info["model"], info["format"], info["opset"], info["image_size"], info["num_classes"]) == (
        "resnet18", "onnx", 17, 64, 1000)
    assert DataConfig.from_dict(info["data_config"]) == model.data_config and info["verified_relative_error"] < 1e-4
    proto = onnx.load(str(out / "model.onnx"))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    shape = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert (proto.graph.input[0].name, shape) == ("images", ["batch", 64, 64, 3])
    assert [o.name for o in proto.graph.output] == ["logits", "probabilities"]
    run = onnx_export.predictor(str(out / "model.onnx"))
    data = model.data_config
    for batch in (1, 3):  # any batch size
        images = pixels(batch, batch, 64)
        expected = model(normalize_batch(images, data.mean, data.std, tf.float32), training=False).numpy()
        assert onnx_export.relative_error(run(images), expected) < 1e-4


def test_saved_model_export_converts_to_the_same_onnx(tmp_path):
    model, path = reference_model("mobilenet_v2", tmp_path)
    saved = tmp_path / "saved_model"
    export_main(["--format=saved_model", "--model=mobilenet_v2", f"--weights={path}", "--image_size=64",
                 f"--output_dir={saved}"])
    export_main(["--format=onnx", f"--saved_model={saved}", f"--output_dir={tmp_path / 'onnx'}"])
    images = pixels(2, 2, 64)
    served = tf.saved_model.load(str(saved)).signatures["serving_default"](images=images)["logits"].numpy()
    logits = onnx_export.predictor(str(tmp_path / "onnx" / "model.onnx"))(images)
    assert onnx_export.relative_error(logits, served) < 1e-4
    assert json.loads((tmp_path / "onnx" / "tfcnn.json").read_text())["model"] == "mobilenet_v2"


@pytest.mark.slow
def test_int8_from_a_training_run_keeps_its_accuracy(stripes, tmp_path):
    """A ResNet-18 trained on the stripes, exported from its log dir with int8 calibrated on its train shards,
    for both targets: int8's logits stay close to fp32's, and int8 classifies as fp32 every validation image
    fp32 is sure of; the TensorRT file holds only symmetric int8 activations and per-channel weights, the CPU
    one uint8 activations.

    Images near fp32's decision boundary are left out of the agreement on purpose: which ones sit there is the
    training's draw (it differs between oneDNN's and Eigen's kernels), and int8 may flip any of them (measured
    after 6 epochs: fp32 margins of 0.001-0.18 flipped, with largest logits of 4.5-6.4). 12 epochs leave fewer
    there and keep fp32 well above the 36 asked: 42-46 of 48 over 4 seeds on both kernel sets (37-44 after 6)."""
    from tfcnn.data import pipeline
    from tfcnn.training import make_config, train

    log_dir = tmp_path / "run"
    summary = train(make_config(model="resnet18", image_size=32, batch_size=16, lr=1.0, warmup_epochs=0,
                                num_iter=12, label_smoothing=0.0, seed=1, data_dir=stripes, log_dir=str(log_dir),
                                display_every=10**6, benchmark_warmup_steps=0, predict=True))
    batches = list(pipeline.build_dataset(stripes, "validation", 16, 32, num_classes=2))
    images = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    for target in ("tensorrt", "cpu"):
        out = tmp_path / target
        export_main(["--format=onnx", f"--log_dir={log_dir}", f"--data_dir={stripes}", "--int8",
                     f"--int8_target={target}", "--calibration_images=1000", f"--output_dir={out}"])
        info = json.loads((out / "tfcnn.json").read_text())
        assert info["files"] == {"fp32": "model.onnx", "int8": "model.int8.onnx"}
        assert (info["int8"]["target"], info["int8"]["calibration_images"]) == (target, 192)  # all the shards hold
        fp32, int8 = (onnx_export.predictor(str(out / file))(images) for file in ("model.onnx", "model.int8.onnx"))
        correct = int((fp32.argmax(1) == labels).sum())
        assert correct == round(48 * summary["validation"]["top1"])  # the trainer's own evaluation
        assert correct >= 36, summary["validation"]  # learned: chance is 24 of 48
        # Measured over those 8 trainings: 0.011-0.044 (0.009-0.079 after 6 epochs; TensorRT's the most).
        error = onnx_export.relative_error(int8, fp32)
        assert error < 0.15, f"{target}: int8's logits differ from fp32's by {error:.3f} of the largest"
        largest = np.abs(fp32).max()
        # int8 moved margins by at most 0.087 of the largest logit there (0.156 after 6 epochs).
        sure = np.abs(fp32[:, 1] - fp32[:, 0]) >= 0.25 * largest  # 15-38 of the 48 there
        assert sure.sum() >= 8, (target, sure.sum())
        assert (int8.argmax(1) == fp32.argmax(1))[sure].all(), (target, fp32[sure], int8[sure])
        check_quantized(onnx.load(str(out / "model.int8.onnx")).graph, np.int8 if target == "tensorrt" else np.uint8)


def check_quantized(graph, activation_dtype):
    """Every conv takes dequantized activations of activation_dtype and per-channel int8 weights (7 bits),
    zero points 0 where symmetric; the outputs are float."""
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    convs = [n for n in graph.node if n.op_type == "Conv"]
    assert len(convs) == 20
    for conv in convs:
        data_dq, weight_dq = producers[conv.input[0]], producers[conv.input[1]]
        assert data_dq.op_type == weight_dq.op_type == "DequantizeLinear", conv.name
        weight, scale, zero = (initializers[i] for i in weight_dq.input)
        assert weight.dtype == np.int8 and scale.shape == (weight.shape[0],) and not zero.any()
        assert np.abs(weight.astype(int)).max() <= 64  # 7 bits: clear of AVX2's saturating int16 sums
        data_zero = initializers[data_dq.input[2]]
        assert data_zero.dtype == activation_dtype
        assert activation_dtype == np.uint8 or not data_zero.any()  # TensorRT: zero point 0
    assert all(producers[o.name].op_type != "DequantizeLinear" for o in graph.output)


def test_an_op_tf2onnx_cannot_convert_names_its_layer(tmp_path):
    inputs = tf.keras.Input((8, 8, 3))
    x = tf.keras.layers.Conv2D(4, 3, name="stem_conv")(inputs)
    x = tf.keras.layers.Lambda(tf.math.lgamma, name="lgamma_activation")(x)
    model = tf.keras.Model(inputs, tf.keras.layers.GlobalAveragePooling2D(name="pool")(x), name="custom")
    function = tf.function(model, input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, "images")])
    with pytest.raises(ValueError, match=r"cannot convert 1 TensorFlow op\(s\) to ONNX opset 17: Lgamma in "
                                         r"layer 'lgamma_activation' .*export --format saved_model"):
        onnx_export.convert(function, [layer.name for layer in model.layers])


def test_a_failed_export_leaves_no_directory(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("the ONNX conversion computes another function")

    monkeypatch.setattr(onnx_export, "verify", broken)
    with pytest.raises(RuntimeError, match="another function"):
        onnx_export.export_onnx(create_model("resnet18", num_classes=3, input_shape=(32, 32, 3)),
                                str(tmp_path / "export"), **QUIET)
    assert os.listdir(tmp_path) == []  # neither the export nor its temporary directory


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tf2onnx", None)  # import tf2onnx now raises ImportError
    with pytest.raises(ImportError, match=r"tf2onnx and onnxruntime.*pip install -e '\.\[onnx\]' \(or make "
                                          r"install ONNX=1\); not importable: tf2onnx"):
        onnx_export.require()
    with pytest.raises(SystemExit, match=r"tfcnn.export: error: .*pip install -e '\.\[onnx\]'"):
        export_main(["--format=onnx", "--model=resnet18", "--weights=none.safetensors", "--output_dir=x"])


@pytest.mark.parametrize("argv, message", [
    (["--format=saved_model", "--int8", "--log_dir=r", "--data_dir=d"],
     "--int8 quantizes the ONNX export: add --format onnx"),
    (["--format=onnx", "--int8", "--log_dir=r"], "--int8 needs --data_dir"),
    (["--format=onnx", "--int8", "--log_dir=r", "--data_dir=d", "--calibration_images=0"],
     "--calibration_images must be a positive integer, received: 0"),
    (["--format=onnx", "--weights=w.safetensors"], "--weights needs --model"),
    (["--saved_model=s"], "--saved_model s is already a SavedModel: convert it with --format onnx"),
    (["--format=onnx", "--saved_model=s", "--image_size=64"], "--saved_model takes no --image_size"),
])
def test_bad_flags_are_refused_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit):
        export_main([*argv, "--output_dir=out"])
    assert message in capsys.readouterr().err


def test_bad_sources_are_errors_naming_them(tmp_path):
    with pytest.raises(SystemExit, match=r"unknown model 'resnet5'"):
        export_main(["--format=onnx", "--model=resnet5", f"--weights={tmp_path}", f"--output_dir={tmp_path / 'o'}"])
    with pytest.raises(SystemExit, match=r"is not a tfcnn SavedModel export \(no tfcnn.json\)"):
        export_main(["--format=onnx", f"--saved_model={tmp_path}", f"--output_dir={tmp_path / 'o'}"])
    with pytest.raises(ValueError, match=r"calibration_images=8 needs data_dir"):
        onnx_export.export_onnx(create_model("resnet18", num_classes=3, input_shape=(32, 32, 3)),
                                str(tmp_path / "o"), calibration_images=8)
