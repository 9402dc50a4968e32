"""Zoo models that take 0-255 pixels (create_model(..., include_preprocessing=True)), and the warning a plain
zoo model gives when it is fed them.

The preprocessing model must compute the plain network on normalize_batch's output (the trainer's own
normalization) with the constants its data_config carries, load and checkpoint as the plain model does, and
export to the very SavedModel of the same weights (normalized once). The warning fires once per model on
eager calls and predict with values Python holds, and never inside a tf.function (the trainer's step).
"""
import warnings

import numpy as np
import pytest
import tensorflow as tf

import weightgen
from tfcnn import checkpoints
from tfcnn.data.preprocessing import normalize_batch
from tfcnn.models import create_model, load_weights
from tfcnn.models.registry import InputRangeWarning
from tfcnn.models.weights import reference_names

SIZE = 32
# Not the zoo's ImageNet statistics: the model must use the data_config it was given.
MEAN, STD = (100.0, 110.0, 120.0), (50.0, 60.0, 70.0)
TOLERANCE = 1e-5  # relative to the largest logit
quiet = lambda *_: None  # noqa: E731


def pixels(batch=2, size=SIZE, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (batch, size, size, 3)).astype(np.uint8)


def build(include_preprocessing, **kwargs):
    # zero_init_residual off: every residual branch then carries the input's effect to the logits.
    return create_model("resnet18", num_classes=10, input_shape=(SIZE, SIZE, 3), zero_init_residual=False,
                        include_preprocessing=include_preprocessing, **kwargs)


def relative_error(actual, expected) -> float:
    return float(np.abs(np.asarray(actual) - np.asarray(expected)).max() / np.abs(np.asarray(expected)).max())


@pytest.fixture(scope="module")
def pair():
    """(model taking 0-255 pixels, the plain model with the same weights), both for MEAN / STD."""
    raw = build(True, data_config={"mean": MEAN, "std": STD})
    plain = build(False, data_config={"mean": MEAN, "std": STD})
    plain.set_weights(raw.get_weights())
    return raw, plain


def test_pixels_in_equal_the_network_on_normalized_pixels(pair):
    raw, plain = pair
    assert raw.includes_preprocessing and not plain.includes_preprocessing
    assert raw.data_config.mean == MEAN and raw.data_config.std == STD
    assert (raw.preprocessing_layer.mean, raw.preprocessing_layer.std) == (MEAN, STD)
    assert raw.layers[1] is raw.preprocessing_layer  # right after the input, in the same graph
    assert dict(raw.build_options) == dict(plain.build_options) == {"zero_init_residual": False}
    assert [w.name for w in raw.weights] == [w.name for w in plain.weights]  # the same network, one weightless layer

    images = pixels()
    expected = plain(normalize_batch(images, MEAN, STD, tf.float32), training=False).numpy()
    for fed in (images, images.astype(np.float32), tf.constant(images)):
        assert relative_error(raw(fed, training=False), expected) < TOLERANCE
    assert relative_error(raw.predict(images, verbose=0), expected) < TOLERANCE

    # Negative controls: the same pixels fed to the plain model, or normalized with the zoo's default
    # (ImageNet) statistics instead of the model's own, are far off.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputRangeWarning)
        assert relative_error(plain(images.astype(np.float32), training=False), expected) > 1000 * TOLERANCE
    default = create_model("resnet18", include_preprocessing=True).data_config
    assert default.mean != MEAN
    assert relative_error(plain(normalize_batch(images, default.mean, default.std, tf.float32), training=False),
                          expected) > 1000 * TOLERANCE


@pytest.mark.parametrize("mixed_policy", ["mixed_bfloat16"], indirect=True)
def test_mixed_precision_normalizes_in_float32_then_casts(mixed_policy):
    raw = build(True)
    data = raw.data_config
    probe = tf.keras.Model(raw.input, raw.preprocessing_layer.output)
    # Resized images hold fractions of a level, which bfloat16 rounds away (8 bits of precision).
    images = np.random.default_rng(1).uniform(0, 255, (1, SIZE, SIZE, 3)).astype(np.float32)
    normalized = probe(images)
    assert normalized.dtype == tf.bfloat16 and raw.compute_dtype == "bfloat16"
    # as the trainer feeds it: computed in float32, then cast; not from pixels cast to bfloat16 first
    np.testing.assert_array_equal(normalized.numpy(), normalize_batch(images, data.mean, data.std, tf.bfloat16))
    rounded_first = normalize_batch(tf.cast(images, tf.bfloat16), data.mean, data.std, tf.bfloat16)
    assert not np.array_equal(normalized.numpy(), rounded_first.numpy())
    logits = raw(images, training=False)
    assert logits.dtype == tf.float32 and np.all(np.isfinite(logits.numpy()))


def test_the_saved_model_is_the_plain_models_normalizing_once(pair, tmp_path):
    from tfcnn.training.export import export_saved_model

    raw, plain = pair
    served = {}
    for name, model in (("raw", raw), ("plain", plain)):
        path = export_saved_model(model, str(tmp_path / name))
        with open(f"{path}/saved_model.pb", "rb") as f:
            assert b"PyFunc" not in f.read()  # the range check left nothing in the traced graph
        loaded = tf.saved_model.load(path)
        served[name] = loaded.signatures["serving_default"](images=tf.constant(pixels(), tf.float32))["logits"].numpy()
    expected = plain(normalize_batch(pixels(), MEAN, STD, tf.float32), training=False).numpy()
    assert relative_error(served["raw"], served["plain"]) < TOLERANCE
    assert relative_error(served["raw"], expected) < TOLERANCE
    # Negative control: what an export that normalized twice (the serving function's, then the model's
    # own layer) would return.
    twice = normalize_batch(normalize_batch(pixels(), MEAN, STD, tf.float32), MEAN, STD, tf.float32)
    assert relative_error(served["raw"], plain(twice, training=False)) > 1000 * TOLERANCE


def test_the_onnx_export_normalizes_once(pair, tmp_path):
    pytest.importorskip("tf2onnx", reason="the ONNX export is an optional extra (pip install -e '.[onnx]')")
    from tfcnn import onnx_export

    raw, plain = pair
    path = onnx_export.export_onnx(raw, str(tmp_path / "onnx"), log=quiet)
    logits = onnx_export.predictor(f"{path}/model.onnx")(pixels().astype(np.float32))
    expected = plain(normalize_batch(pixels(), MEAN, STD, tf.float32), training=False).numpy()
    assert relative_error(logits, expected) < 1e-4  # the export's own check: ONNX Runtime against TensorFlow


def test_an_export_refuses_a_data_config_the_layer_does_not_compute(pair):
    from tfcnn.training.export import serving_module

    raw, _ = pair
    original = raw.data_config
    raw.data_config = original.replace(mean=(0.0, 0.0, 0.0))
    try:
        with pytest.raises(ValueError, match=r"normalizes its 0-255 input with mean \(100.0, 110.0, 120.0\)"):
            serving_module(raw)
    finally:
        raw.data_config = original


def test_reference_weights_load_into_a_model_taking_pixels(tmp_path):
    """create_model(weights=...) and load_weights on the preprocessing model: the reference's logits on its
    normalized inputs, from the same images as 0-255 pixels."""
    fixture = weightgen.fixture("resnet18")
    size = fixture["input_size"]
    path = weightgen.write_safetensors(fixture, tmp_path / "resnet18.safetensors")
    raw = create_model("resnet18", weights=path, input_shape=(size, size, 3), include_preprocessing=True, log=quiet)
    data = raw.data_config
    assert (raw.preprocessing_layer.mean, raw.preprocessing_layer.std) == (data.mean, data.std)
    normalized = weightgen.images(fixture["seed"], 2, size)
    images = normalized * np.float32(data.std) + np.float32(data.mean)  # what normalizes to the fixture's input
    expected = weightgen.decode(fixture["logits"], fixture["logits_shape"])
    assert relative_error(raw(images, training=False), expected) < 1e-4
    plain = create_model("resnet18", weights=path, input_shape=(size, size, 3), log=quiet)
    assert [name for _, name in reference_names(raw)] == [name for _, name in reference_names(plain)]

    # load_weights into a fresh one, from the file and from a tfcnn checkpoint of the plain model
    for source in (path, checkpoints.make_checkpoint(plain).write(str(tmp_path / "plain" / "ckpt-1"))):
        fresh = create_model("resnet18", input_shape=(size, size, 3), include_preprocessing=True)
        load_weights(fresh, source, log=quiet)
        assert relative_error(fresh(images, training=False), expected) < 1e-4


def test_checkpoints_are_interchangeable_with_the_plain_model(pair, tmp_path):
    raw, plain = pair
    fresh_plain, fresh_raw = build(False), build(True)
    prefix = tf.train.Checkpoint(model=raw).write(str(tmp_path / "raw"))
    tf.train.Checkpoint(model=fresh_plain).read(prefix).assert_consumed()
    prefix = tf.train.Checkpoint(model=plain).write(str(tmp_path / "plain"))
    tf.train.Checkpoint(model=fresh_raw).read(prefix).assert_consumed()
    for a, b, c in zip(raw.get_weights(), fresh_plain.get_weights(), fresh_raw.get_weights()):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def range_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, InputRangeWarning)]


def test_pixels_fed_to_a_plain_model_warn_once_naming_the_fix():
    model = build(False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        normalized = normalize_batch(pixels(), model.data_config.mean, model.data_config.std, tf.float32)
        model(normalized, training=False)
        model(normalized.numpy())
        assert not range_warnings(record)  # normalized inputs stay within about +-3
        model(pixels().astype(np.float32))
        model(tf.constant(pixels(seed=1), tf.float32))
    (warning,) = range_warnings(record)
    assert warning.filename == __file__  # points at the caller's line, not into Keras
    message = str(warning.message)
    assert "create_model('resnet18', ..., include_preprocessing=True)" in message
    assert "model.data_config.mean" in message and "up to 255" in message

    other = build(False)  # once per model: another one warns for itself, here through predict
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        other.predict(pixels(), verbose=0)
        other.predict(pixels(seed=2), verbose=0)
        other(pixels())
    assert len(range_warnings(record)) == 1


def test_no_warning_inside_tf_functions_nor_for_a_model_taking_pixels(pair):
    """The trainer's path: 0-255 uint8 batches normalized inside a tf.function to the compute dtype, then the
    model (ClassifierTrainer's step). Not even raw pixels warn there: the values are not Python's to see,
    and checking them would put ops (or a py_function) into every training step."""
    from tfcnn.training.trainer import ClassifierTrainer

    raw, _ = pair
    model = build(False)
    data = model.data_config
    trainer = ClassifierTrainer(model, 10, mean=data.mean, std=data.std)
    trainer.compile(optimizer=tf.keras.optimizers.SGD(0.01))
    labels = tf.constant([1, 2])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.train_step((tf.constant(pixels()), labels))
        trainer.fit(tf.data.Dataset.from_tensors((pixels(), labels)), verbose=0)
        traced = tf.function(lambda images: model(images, training=False))
        graph = traced.get_concrete_function(tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32)).graph
        traced(tf.constant(pixels(), tf.float32))  # raw pixels, but inside a function
        raw(pixels())
        raw.predict(pixels(), verbose=0)
    assert not range_warnings(record)
    assert not {op.type for op in graph.get_operations()} & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    assert not getattr(model, "_input_range_warned", False)  # still armed for an eager call
