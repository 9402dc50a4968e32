"""tfcnn.training.mixing: MixUp / CutMix draws and pixels, exact CutMix label weights, smoothing, XLA."""
import numpy as np
import pytest
import tensorflow as tf

from tfcnn.training import mixing

NUM_CLASSES = 5


def batch(size=6, height=12, width=10, dtype=tf.float32):
    rng = np.random.default_rng(size)
    images = tf.constant(rng.normal(size=(size, height, width, 3)), dtype)
    targets = tf.one_hot(np.arange(size) % NUM_CLASSES, NUM_CLASSES)
    return images, targets


def beta_from_seed(seed, alpha, index):
    """The documented draw, recomputed: sub-seed `index` of stateless_split(seed, 4), G1 / (G1 + G2)."""
    sub_seed = tf.random.experimental.stateless_split(seed, 4)[index]
    gammas = tf.random.stateless_gamma([2], seed=sub_seed, alpha=alpha).numpy()
    return gammas[0] / (gammas[0] + gammas[1])


def partner_from_seed(seed, size):
    """The documented pairing, recomputed: the argsort of `size` uniforms from sub-seed 3."""
    return np.argsort(tf.random.stateless_uniform([size], tf.random.experimental.stateless_split(seed, 4)[3]).numpy())


def test_partners_are_a_random_permutation_of_the_batch():
    orders = [mixing.sample_mix(8, 4, 4, 0.2, 0.0, 0.0, tf.constant([5, s], tf.int64)).partner.numpy()
              for s in range(200)]
    for order in orders:
        np.testing.assert_array_equal(np.sort(order), np.arange(8))
    assert len({tuple(o) for o in orders}) == 200
    # Uniform over permutations: each image's partner is each position 1/8 of the time, itself included.
    counts = np.zeros((8, 8))
    for order in orders:
        counts[np.arange(8), order] += 1
    assert counts.min() > 8 and counts.max() < 45  # expected 25 each; a reversal would put 200 on one cell


def test_mixup_is_the_expected_mixture_for_a_fixed_seed():
    images, targets = batch()
    seed = tf.constant([3, 17], tf.int64)
    mixed, mixed_targets, lam = mixing.mixup(images, targets, 0.4, seed)
    expected = beta_from_seed(seed, 0.4, 0)
    assert 0 < expected < 1 and float(lam) == pytest.approx(expected, rel=1e-6)
    order = partner_from_seed(seed, 6)
    assert (order != np.arange(6)).any()
    x, t = images.numpy(), targets.numpy()
    np.testing.assert_allclose(mixed.numpy(), expected * x + (1 - expected) * x[order], atol=1e-5)
    np.testing.assert_allclose(mixed_targets.numpy(), expected * t + (1 - expected) * t[order], atol=1e-6)
    np.testing.assert_allclose(mixed_targets.numpy().sum(axis=1), 1.0, atol=1e-6)
    again = mixing.mixup(images, targets, 0.4, seed)
    np.testing.assert_array_equal(again[0].numpy(), mixed.numpy())
    assert float(mixing.mixup(images, targets, 0.4, tf.constant([3, 18], tf.int64))[2]) != float(lam)


def test_beta_draws_have_the_beta_mean_and_variance():
    alpha = 0.4
    draws = np.array([float(mixing.sample_beta(alpha, tf.constant([1, s], tf.int64))) for s in range(300)])
    assert ((draws >= 0) & (draws <= 1)).all()
    assert abs(draws.mean() - 0.5) < 0.06
    assert abs(draws.var() - 1 / (4 * (2 * alpha + 1))) < 0.03  # Beta(a, a): 1 / (4 (2a + 1))


def source_images(size, height, width):
    """Image i is the constant i + 1: every output pixel says which image it came from."""
    return tf.constant(np.arange(1, size + 1, dtype=np.float32)[:, None, None, None] * np.ones((1, height, width, 3),
                                                                                                np.float32))


def test_cutmix_label_weight_is_the_pasted_area_exactly():
    size, height, width = 4, 12, 10
    images, targets = source_images(size, height, width), tf.one_hot(np.arange(size), NUM_CLASSES)
    lams, clipped = [], 0
    for s in range(40):
        seed = tf.constant([9, s], tf.int64)
        mixed, mixed_targets, lam = mixing.cutmix(images, targets, 1.0, seed)
        mixed, lam = mixed.numpy(), float(lam)
        order = partner_from_seed(seed, size)
        for i in range(size):
            own, other = i + 1, order[i] + 1
            from_partner = (mixed[i] == other) & (own != other)
            assert (from_partner | (mixed[i] == own)).all()  # pixels are copied, never blended
            assert (from_partner == from_partner[..., :1]).all()  # all channels of a pixel together
            pasted = from_partner[..., 0]
            if own != other:
                assert lam == pytest.approx(1 - pasted.sum() / (height * width), abs=1e-6)
            if pasted.any():  # the pasted region is one rectangle
                rows, columns = np.nonzero(pasted)
                assert pasted.sum() == (np.ptp(rows) + 1) * (np.ptp(columns) + 1)
        np.testing.assert_allclose(mixed_targets.numpy(), lam * targets.numpy() + (1 - lam) * targets.numpy()[order],
                                   atol=1e-6)
        top, bottom, left, right = mixing.sample_mix(size, height, width, 0.0, 1.0, 1.0, seed).box.numpy()
        at_border = top == 0 or bottom == height or left == 0 or right == width
        clipped += bool(bottom > top and right > left and at_border and abs(lam - beta_from_seed(seed, 1.0, 1)) > 0.05)
        lams.append(lam)
    assert len(set(lams)) > 10 and min(lams) < 0.7 and clipped > 0


def test_mix_batch_switches_between_cutmix_and_mixup():
    size, height, width = 4, 8, 8
    images, targets = source_images(size, height, width), tf.one_hot(np.arange(size), NUM_CLASSES)

    def is_cutmix(mixed, seed):
        own = np.arange(1, size + 1)[:, None, None, None]
        return bool(((mixed == own) | (mixed == own[partner_from_seed(seed, size)])).all())

    kinds = []
    for s in range(24):
        seed = tf.constant([4, s], tf.int64)
        mixed, mixed_targets, lam = mixing.mix_batch(images, targets, 0.8, 1.0, 0.5, seed)
        np.testing.assert_allclose(mixed_targets.numpy().sum(axis=1), 1.0, atol=1e-6)
        kinds.append(is_cutmix(mixed.numpy(), seed))
    assert 3 <= sum(kinds) <= 21
    seed = tf.constant([4, 0], tf.int64)
    assert is_cutmix(mixing.mix_batch(images, targets, 0.8, 1.0, 1.0, seed)[0].numpy(), seed)
    assert not is_cutmix(mixing.mix_batch(images, targets, 0.8, 1.0, 0.0, seed)[0].numpy(), seed)
    same, same_targets, lam = mixing.mix_batch(images, targets, 0.0, 0.0, 0.5, seed)
    np.testing.assert_array_equal(same.numpy(), images.numpy())
    np.testing.assert_array_equal(same_targets.numpy(), targets.numpy())
    assert float(lam) == 1.0


@pytest.mark.parametrize("call, flag", [
    (lambda x, t, s: mixing.mixup(x, t, -0.2, s), "--mixup"),
    (lambda x, t, s: mixing.cutmix(x, t, -1.0, s), "--cutmix"),
    (lambda x, t, s: mixing.mix_batch(x, t, float("nan"), 1.0, 0.5, s), "--mixup"),
    (lambda x, t, s: mixing.mix_batch(x, t, 0.2, -0.5, 0.5, s), "--cutmix"),
    (lambda x, t, s: mixing.mix_batch(x, t, 0.2, 1.0, 1.5, s), "--mix_switch_prob"),
    (lambda x, t, s: mixing.smooth(t, 1.0), "--label_smoothing"),
    (lambda x, t, s: mixing.smooth(t, -0.1), "--label_smoothing"),
])
def test_bad_arguments_raise_naming_the_flag(call, flag):
    images, targets = batch(2)
    with pytest.raises(ValueError, match=f"^{flag} .*received: "):
        call(images, targets, tf.constant([0, 0], tf.int64))


def test_smoothing_mixed_targets_is_what_the_keras_loss_does():
    images, targets = batch()
    seed = tf.constant([3, 17], tf.int64)
    _, mixed_targets, lam = mixing.mixup(images, targets, 0.4, seed)
    smoothed = mixing.smooth(mixed_targets, 0.1)
    np.testing.assert_allclose(smoothed.numpy(), mixed_targets.numpy() * 0.9 + 0.1 / NUM_CLASSES, atol=1e-7)
    np.testing.assert_allclose(smoothed.numpy().sum(axis=1), 1.0, atol=1e-6)
    logits = tf.constant(np.random.default_rng(0).normal(size=(6, NUM_CLASSES)), tf.float32)
    keras_smoothed = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    plain = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
    assert float(plain(smoothed, logits)) == pytest.approx(float(keras_smoothed(mixed_targets, logits)), rel=1e-6)
    own = np.arange(6) % NUM_CLASSES
    dominant = own if float(lam) > 0.5 else own[partner_from_seed(seed, 6)]
    np.testing.assert_array_equal(mixing.dominant_labels(smoothed).numpy(), dominant)


def test_apply_mix_compiles_with_xla_and_matches_eager():
    images, targets = batch(4, 16, 16)
    compiled = tf.function(mixing.apply_mix, jit_compile=True)
    for seed, switch in (([1, 2], 1.0), ([1, 2], 0.0)):
        mix = mixing.sample_mix(4, 16, 16, 0.8, 1.0, switch, tf.constant(seed, tf.int64))
        for eager, xla in zip(mixing.apply_mix(images, targets, mix), compiled(images, targets, mix)):
            np.testing.assert_allclose(xla.numpy(), eager.numpy(), atol=1e-6)


def test_half_precision_images_keep_their_dtype_and_targets_weigh_like_the_pixels():
    images, targets = batch(4, dtype=tf.float16)
    seed = tf.constant([3, 17], tf.int64)
    mixed, mixed_targets, lam = mixing.mixup(images, targets, 0.4, seed)
    assert mixed.dtype == tf.float16 and mixed_targets.dtype == tf.float32
    assert float(lam) == float(np.float16(float(lam)))  # the label weight is lam as the pixels got it
    x = images.numpy().astype(np.float32)
    np.testing.assert_allclose(mixed.numpy(), float(lam) * x + (1 - float(lam)) * x[partner_from_seed(seed, 4)],
                               atol=2e-2)
