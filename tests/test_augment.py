"""tfcnn.data.augment: --augment parsing, every op against PIL or geometry, seeding, tf.data determinism."""
import io
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from tfcnn.data import augment
from tfcnn.data.augment import apply_op, apply_policy
from tfcnn.options import Policy, parse_policy

SEED = tf.constant([11, 5], tf.int64)
RANDOM_OPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout")


def photo(seed, size=(80, 96)):
    """A photo-like uint8 [96, 80, 3] image: blurred, upsampled noise through JPEG (decoded by TF)."""
    rng = np.random.default_rng(seed)
    noise = (rng.random((size[1] // 4, size[0] // 4, 3)) * 255).astype(np.uint8)
    image = Image.fromarray(noise).resize(size, Image.BICUBIC).filter(ImageFilter.GaussianBlur(2))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return tf.io.decode_jpeg(buffer.getvalue(), channels=3)


@pytest.fixture(scope="module")
def image():
    return photo(0)


@pytest.mark.parametrize("text, expected", [
    ("none", Policy()),
    (" None ", Policy()),
    ("randaugment:2,9", Policy("randaugment", num_ops=2, magnitude=9.0)),
    ("RandAugment:1,0", Policy("randaugment", num_ops=1, magnitude=0.0)),
    ("randaugment:10,30", Policy("randaugment", num_ops=10, magnitude=30.0)),
    ("randaugment:3,9.5", Policy("randaugment", num_ops=3, magnitude=9.5)),
    ("autoaugment:imagenet", Policy("autoaugment", name="imagenet")),
])
def test_parse_policy_accepts_the_documented_forms(text, expected):
    policy = parse_policy(text)
    assert policy == expected
    assert parse_policy(str(policy)) == policy  # str() gives the flag back (config.json round trip)


GENERAL = re.escape("--augment must be none, randaugment:N,M or autoaugment:imagenet, received: ")


@pytest.mark.parametrize("text, message", [
    ("bogus", GENERAL + "'bogus'"),
    ("", GENERAL + "''"),
    ("randaugment2,9", GENERAL),
    ("randaugment", r"randaugment takes N,M"),
    ("randaugment:2", r"randaugment takes N,M"),
    ("randaugment:2,9,1", r"randaugment takes N,M"),
    ("randaugment:0,9", r"N an integer in \[1, 10\]"),
    ("randaugment:11,9", r"N an integer in \[1, 10\]"),
    ("randaugment:2.5,9", r"N an integer in \[1, 10\]"),
    ("randaugment:2,31", r"M a number in \[0, 30\]"),
    ("randaugment:2,-1", r"M a number in \[0, 30\]"),
    ("randaugment:2,nan", r"M a number in \[0, 30\]"),
    ("randaugment:2,x", r"M a number in \[0, 30\]"),
    ("autoaugment:cifar10", r"only the imagenet policy"),
    ("autoaugment", r"only the imagenet policy"),
])
def test_parse_policy_rejects_naming_the_flag_and_value(text, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_policy(text)
    assert str(error.value).startswith("--augment") and str(error.value).endswith(f"received: {text!r}")


def test_tables_name_known_ops_with_valid_probabilities_and_levels():
    assert len(augment.IMAGENET_POLICY) == 25 and all(len(sub) == 2 for sub in augment.IMAGENET_POLICY)
    for name, probability, level in (op for sub in augment.IMAGENET_POLICY for op in sub):
        assert name in augment.OPS and 0 <= probability <= 1 and 0 <= level <= 10
    assert len(set(augment.RANDAUGMENT_OPS)) == 17 and set(augment.RANDAUGMENT_OPS) == set(augment.OPS)


@pytest.mark.parametrize("name", list(augment.OPS))
def test_every_op_keeps_dtype_and_shape_and_changes_the_image(image, name):
    # Not magnitude 5: it maps the enhance factors to exactly 1.0 (no change, as in the reference).
    for magnitude in (3, 8, 30):
        out = apply_op(image, name, magnitude, SEED)
        assert out.dtype == tf.uint8 and out.shape == image.shape
        changed = bool(np.any(out.numpy() != image.numpy()))
        if magnitude < 10 or name in RANDOM_OPS:  # at 30, Solarize/Posterize extrapolate to no-ops
            assert changed == (name != "Identity"), (name, magnitude)


def _pil(image):
    return Image.fromarray(image.numpy())


def _max_difference(ours, reference):
    return int(np.max(np.abs(ours.numpy().astype(int) - np.asarray(reference).astype(int))))


@pytest.mark.parametrize("ours, reference, tolerance", [
    (augment.equalize, ImageOps.equalize, 0),
    (augment.autocontrast, ImageOps.autocontrast, 1),
    (augment.invert, ImageOps.invert, 0),
    (lambda im: augment.posterize(im, 3), lambda p: ImageOps.posterize(p, 3), 0),
    (lambda im: augment.solarize(im, 100), lambda p: ImageOps.solarize(p, 100), 0),
    (lambda im: augment.color(im, 0.3), lambda p: ImageEnhance.Color(p).enhance(0.3), 1),
    (lambda im: augment.color(im, 1.9), lambda p: ImageEnhance.Color(p).enhance(1.9), 1),
    (lambda im: augment.contrast(im, 0.3), lambda p: ImageEnhance.Contrast(p).enhance(0.3), 1),
    (lambda im: augment.contrast(im, 1.9), lambda p: ImageEnhance.Contrast(p).enhance(1.9), 1),
    (lambda im: augment.brightness(im, 0.3), lambda p: ImageEnhance.Brightness(p).enhance(0.3), 1),
    (lambda im: augment.brightness(im, 1.9), lambda p: ImageEnhance.Brightness(p).enhance(1.9), 1),
    (lambda im: augment.sharpness(im, 0.3), lambda p: ImageEnhance.Sharpness(p).enhance(0.3), 1),
    (lambda im: augment.sharpness(im, 1.9), lambda p: ImageEnhance.Sharpness(p).enhance(1.9), 1),
    (lambda im: augment.translate_x(im, 7.0),
     lambda p: p.transform(p.size, Image.AFFINE, (1, 0, 7, 0, 1, 0), Image.NEAREST, fillcolor=(128,) * 3), 0),
    (lambda im: augment.translate_y(im, -5.0),
     lambda p: p.transform(p.size, Image.AFFINE, (1, 0, 0, 0, 1, -5), Image.NEAREST, fillcolor=(128,) * 3), 0),
], ids=["equalize", "autocontrast", "invert", "posterize", "solarize", "color-", "color+", "contrast-",
        "contrast+", "brightness-", "brightness+", "sharpness-", "sharpness+", "translate_x", "translate_y"])
def test_ops_match_pil(image, ours, reference, tolerance):
    """The PIL operations the policies were searched with (bit-exact, or 1 level: we round, PIL truncates)."""
    assert _max_difference(ours(image), reference(_pil(image))) <= tolerance


@pytest.mark.parametrize("values", [[[90]], [[0], [255]], [[3], [3], [200]], [[10], [20], [30], [40]]])
def test_equalize_matches_pil_on_degenerate_histograms(values):
    """Flat and nearly flat channels: PIL leaves them unchanged (step 0) or spreads a few values."""
    image = tf.constant(np.resize(np.array(values, np.uint8), (12, 10, 3)))
    assert _max_difference(augment.equalize(image), ImageOps.equalize(_pil(image))) == 0


def test_geometric_ops_move_pixels_where_expected(image):
    square = image[:80, :80]
    np.testing.assert_array_equal(augment.rotate(square, 90.0).numpy(), np.rot90(square.numpy(), 1))
    np.testing.assert_array_equal(augment.rotate(image, 0.0).numpy(), image.numpy())
    sheared = augment.shear_x(image, 0.2).numpy()
    height, width = image.shape[:2]
    for y in (0, 10, 95):
        source = np.arange(width) + np.round(0.2 * y).astype(int)
        inside = source < width
        np.testing.assert_array_equal(sheared[y, inside], image.numpy()[y, source[inside]])
        assert (sheared[y, ~inside] == 128).all()
    # Whole-pixel translation = the projective transform's (the pad-and-slice shortcut is exact).
    for pixels in (-100, -13, 0, 13, 79, 80, 200):
        for axis, op in ((0, augment.translate_y), (1, augment.translate_x)):
            matrix = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
            matrix[2 if axis else 5] = float(pixels)
            np.testing.assert_array_equal(op(image, float(pixels)).numpy(), augment._transform(image, matrix).numpy())


def test_cutout_fills_a_clipped_square(image):
    out = augment.cutout(image, 10, 3, 75).numpy()
    gray = (out == 128).all(axis=-1) & (image.numpy() != 128).any(axis=-1)
    rows, columns = np.nonzero(gray)
    assert (rows.min(), rows.max(), columns.min(), columns.max()) == (0, 12, 65, 79)
    untouched = np.ones(image.shape[:2], bool)
    untouched[:13, 65:] = False
    np.testing.assert_array_equal(out[untouched], image.numpy()[untouched])


@pytest.mark.parametrize("name", RANDOM_OPS)
def test_random_ops_are_deterministic_per_seed_and_vary_across_seeds(image, name):
    first = apply_op(image, name, 8, SEED).numpy()
    np.testing.assert_array_equal(apply_op(image, name, 8, SEED).numpy(), first)
    outputs = {apply_op(image, name, 8, tf.constant([11, s], tf.int64)).numpy().tobytes() for s in range(8)}
    assert len(outputs) >= (6 if name == "Cutout" else 2)  # signed ops: two outputs, one per sign


@pytest.mark.parametrize("text", ["randaugment:2,9", "randaugment:3,28", "autoaugment:imagenet"])
def test_policies_are_deterministic_per_seed_and_vary_across_seeds(image, text):
    policy = parse_policy(text)
    first = apply_policy(image, policy, SEED)
    assert first.dtype == tf.uint8 and first.shape == image.shape
    np.testing.assert_array_equal(apply_policy(image, policy, SEED).numpy(), first.numpy())
    np.testing.assert_array_equal(apply_policy(image, text, tf.cast(SEED, tf.int32)).numpy(), first.numpy())
    outputs = {apply_policy(image, policy, tf.constant([11, s], tf.int64)).numpy().tobytes() for s in range(12)}
    assert len(outputs) >= 6
    assert apply_policy(image, "none", SEED) is image


@pytest.mark.parametrize("text", ["randaugment:2,9", "autoaugment:imagenet"])
def test_policy_in_a_parallel_pipeline_gives_the_same_images_every_pass(text):
    """Parallel and unordered map, two passes, and a sequential map: the same image for each element."""
    policy = parse_policy(text)
    images = tf.stack([photo(i) for i in range(4)])

    def dataset(parallel, deterministic):
        ds = tf.data.Dataset.range(16)
        ds = ds.map(lambda i: (i, apply_policy(images[i % 4], policy, tf.stack([tf.constant(7, tf.int64), i]))),
                    num_parallel_calls=parallel, deterministic=deterministic)
        assert ds.element_spec[1] == tf.TensorSpec([96, 80, 3], tf.uint8)
        return ds

    def by_element(ds):
        return {int(i): im.numpy() for i, im in ds}

    parallel = dataset(tf.data.AUTOTUNE, False)
    first = by_element(parallel)
    for other in (by_element(parallel), by_element(dataset(None, None))):
        assert other.keys() == first.keys()
        for i in first:
            np.testing.assert_array_equal(other[i], first[i])
    changed = sum(bool(np.any(first[i] != images[i % 4].numpy())) for i in first)
    assert changed >= 8


def test_autoaugment_applies_each_stage_with_its_probability(image):
    """A made-up table: sub-policy 0 always inverts, sub-policy 1 never does; both are drawn."""
    table = ((("Invert", 1.0, 0), ("Identity", 0.0, 0)), (("Identity", 1.0, 0), ("Invert", 0.0, 0)))
    outputs = [augment.autoaugment(image, table, tf.constant([3, s], tf.int64)).numpy() for s in range(16)]
    inverted = sum(np.array_equal(out, 255 - image.numpy()) for out in outputs)
    unchanged = sum(np.array_equal(out, image.numpy()) for out in outputs)
    assert inverted + unchanged == 16 and inverted >= 3 and unchanged >= 3
    coin = ((("Invert", 0.5, 0), ("Solarize", 0.0, 0)),)  # Solarize at level 0 would invert: never applied
    outputs = [augment.autoaugment(image, coin, tf.constant([3, s], tf.int64)).numpy() for s in range(16)]
    inverted = sum(np.array_equal(out, 255 - image.numpy()) for out in outputs)
    assert inverted + sum(np.array_equal(out, image.numpy()) for out in outputs) == 16 and 3 <= inverted <= 13


def test_randaugment_draws_among_all_ops(image):
    small = image[:12, :10]
    outputs = {augment.randaugment(small, 1, 8, tf.constant([5, s], tf.int64)).numpy().tobytes() for s in range(64)}
    assert len(outputs) >= 14  # 17 ops (5 of them with two signs), drawn 64 times
