"""Batch mixing (MixUp, CutMix) and label smoothing, in the train step, after normalization.

Images: float [B, H, W, 3] in the compute dtype; targets: float32 one-hot or soft labels [B, C]. Each
image is mixed with its partner in a random permutation of the batch (image i with image partner[i]),
as NVIDIA's ConvNets (mixup.py: torch.randperm) and the CutMix paper's code pair them (an image may
draw itself). One lambda per batch; for CutMix one box per batch.

Randomness is stateless, from a [2] seed (the trainer passes (seed, step)): sub-seeds are
`stateless_split(seed, 4)`: [0] MixUp's Beta, [1] CutMix's Beta, [2] three uniforms (MixUp-or-CutMix
coin, box centre row, box centre column), [3] the permutation (the argsort of B uniforms). Beta(a, a) is
sampled as the ratio of two stateless gammas, G1 / (G1 + G2). With (seed, step) every Horovod rank draws
the same lam, box and pairing for its own batch;
fold the rank in (e.g. `stateless_fold_in((seed, step), rank)`) for independent draws per rank.

XLA: `tf.random.stateless_gamma` has no XLA kernel (StatelessRandomGammaV3, TF 2.15), so the draws
(`sample_mix`: a few scalars) run outside a jit-compiled step and the pixel work (`apply_mix`: static
shapes, the box a mask from iota comparisons, no dynamic slicing) inside it. `mixup`, `cutmix` and
`mix_batch` are the two composed, for steps that are not jit-compiled.

Label smoothing: `smooth(targets, s)` = targets * (1 - s) + s / C, applied to the *mixed* targets;
it is exactly what `tf.keras.losses.CategoricalCrossentropy(label_smoothing=s)` does to its y_true, so
the trainer may keep the loss's own label_smoothing with mixed targets, or call `smooth` and build the
loss with 0 (never both).

Top-1 in training, with mixed targets: measure it against `dominant_labels(targets)`, the class of
largest weight in the mixed targets: the image's own label when its weight (lam) > 0.5, else the
partner's (for CutMix, the label of the larger visible area). Training top-1 under mixing is a rough
signal only (every image shows two classes); validation top-1 is the measure.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from tfcnn.options import check_mixing


class Mix(NamedTuple):
    """One batch's mixing draw. lam: float32 scalar, the weight of each image's own target (CutMix: 1 -
    the fraction of pixels actually pasted from the partner). box: int32 [4] (top, bottom, left, right):
    rows [top, bottom) x columns [left, right) come from the partner under CutMix. cutmix: bool scalar.
    partner: int32 [B], image i's partner."""
    lam: tf.Tensor
    box: tf.Tensor
    cutmix: tf.Tensor
    partner: tf.Tensor


def sample_beta(alpha, seed):
    """One stateless Beta(alpha, alpha) sample (float32 scalar): G1 / (G1 + G2) of two gammas. (Both
    gammas underflowing to 0, possible only for a tiny alpha, gives 0.5.)"""
    gammas = tf.random.stateless_gamma([2], seed=seed, alpha=float(alpha), dtype=tf.float32)
    total = gammas[0] + gammas[1]
    return tf.where(total > 0, gammas[0] / tf.maximum(total, 1e-30), 0.5)


def cutmix_box(lam, height, width, row_uniform, column_uniform):
    """CutMix's box (Yun et al. 2019, as timm): side ratio sqrt(1 - lam), centre uniform over the image,
    clipped to it. Returns (int32 [4] (top, bottom, left, right), lam corrected to the pasted area)."""
    ratio = tf.sqrt(1.0 - lam)
    cut_height = tf.cast(tf.cast(height, tf.float32) * ratio, tf.int32)
    cut_width = tf.cast(tf.cast(width, tf.float32) * ratio, tf.int32)
    row = tf.minimum(tf.cast(row_uniform * tf.cast(height, tf.float32), tf.int32), height - 1)
    column = tf.minimum(tf.cast(column_uniform * tf.cast(width, tf.float32), tf.int32), width - 1)
    top, bottom = tf.clip_by_value(row - cut_height // 2, 0, height), tf.clip_by_value(row + cut_height // 2, 0, height)
    left, right = (tf.clip_by_value(column - cut_width // 2, 0, width),
                   tf.clip_by_value(column + cut_width // 2, 0, width))
    area = tf.cast((bottom - top) * (right - left), tf.float32) / tf.cast(height * width, tf.float32)
    return tf.stack([top, bottom, left, right]), 1.0 - area


def sample_mix(batch, height, width, mixup_alpha, cutmix_alpha, switch_prob, seed):
    """The batch's draw (a Mix) for `batch` images of height x width: CutMix with probability switch_prob when
    both alphas are on, else whichever is on. Not XLA-compilable (stateless_gamma): call it outside a
    jit-compiled step and pass the Mix in. Both alphas 0: lam 1, nothing mixed."""
    check_mixing(mixup_alpha, cutmix_alpha, switch_prob)
    mixup_seed, cutmix_seed, uniform_seed, order_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    uniforms = tf.random.stateless_uniform([3], uniform_seed)
    if not mixup_alpha:
        switch_prob = 1.0 if cutmix_alpha else 0.0
    elif not cutmix_alpha:
        switch_prob = 0.0
    use_cutmix = uniforms[0] < switch_prob
    mixup_lam = sample_beta(mixup_alpha, mixup_seed) if mixup_alpha else tf.constant(1.0)
    if cutmix_alpha:
        box, cutmix_lam = cutmix_box(sample_beta(cutmix_alpha, cutmix_seed), height, width, uniforms[1], uniforms[2])
    else:
        box, cutmix_lam = tf.zeros([4], tf.int32), tf.constant(1.0)
    partner = tf.cast(tf.argsort(tf.random.stateless_uniform([batch], order_seed)), tf.int32)
    return Mix(lam=tf.where(use_cutmix, cutmix_lam, mixup_lam),
               box=tf.where(use_cutmix, box, tf.zeros([4], tf.int32)), cutmix=use_cutmix, partner=partner)


def _height_width(images):
    """Static height and width when known (XLA), else dynamic."""
    shape = tf.shape(images)
    return (images.shape[1] if images.shape[1] is not None else shape[1],
            images.shape[2] if images.shape[2] is not None else shape[2])


def apply_mix(images, targets, mix):
    """images * w + images[partner] * (1 - w), with w = lam (MixUp) or 0 in the box and 1 elsewhere
    (CutMix, so pixels are copied exactly); targets * lam + targets[partner] * (1 - lam). One pass,
    no branch, static shapes: XLA-compilable. Returns (images, targets, lam) with lam the label weight
    actually used: under MixUp, lam as rounded to the images' dtype (fp16 / bf16), so the targets
    weigh exactly what the pixels do."""
    height, width = _height_width(images)
    rows, columns = tf.range(height)[:, None], tf.range(width)[None, :]
    top, bottom, left, right = tf.unstack(mix.box)
    inside = (rows >= top) & (rows < bottom) & (columns >= left) & (columns < right)
    rounded_lam = tf.cast(mix.lam, images.dtype)
    weight = tf.where(mix.cutmix, 1 - tf.cast(inside, images.dtype), rounded_lam)[None, :, :, None]
    mixed = images * weight + tf.gather(images, mix.partner) * (1 - weight)
    lam = tf.where(mix.cutmix, mix.lam, tf.cast(rounded_lam, tf.float32))
    targets = tf.cast(targets, tf.float32)
    return mixed, targets * lam + tf.gather(targets, mix.partner) * (1.0 - lam), lam


def mix_batch(images, targets, mixup_alpha, cutmix_alpha, switch_prob, seed):
    """MixUp or CutMix on the batch, one per batch (CutMix with probability switch_prob when both alphas
    are on); unchanged, with lam 1, when both alphas are 0. Returns (images, targets, lam)."""
    check_mixing(mixup_alpha, cutmix_alpha, switch_prob)
    if not mixup_alpha and not cutmix_alpha:
        return images, tf.cast(targets, tf.float32), tf.constant(1.0)
    mix = sample_mix(images.shape[0], *_height_width(images), mixup_alpha, cutmix_alpha, switch_prob, seed)
    return apply_mix(images, targets, mix)


def mixup(images, targets, alpha, seed):
    """MixUp (Zhang et al. 2018): lam ~ Beta(alpha, alpha) per batch, every image blended with its
    partner. alpha 0: unchanged. Returns (images, targets, lam)."""
    return mix_batch(images, targets, alpha, 0.0, 0.0, seed)


def cutmix(images, targets, alpha, seed):
    """CutMix (Yun et al. 2019): lam ~ Beta(alpha, alpha) per batch, a box of area about (1 - lam)
    pasted from the partner, lam then corrected to the box's area after clipping to the image.
    alpha 0: unchanged. Returns (images, targets, lam)."""
    return mix_batch(images, targets, 0.0, alpha, 1.0, seed)


def smooth(targets, label_smoothing):
    """Label smoothing of (possibly mixed) targets: targets * (1 - s) + s / C; rows still sum to one.
    Same formula as Keras' CategoricalCrossentropy(label_smoothing=s): use one or the other."""
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0 <= label_smoothing < 1:
        raise ValueError(f"--label_smoothing must be in [0, 1), received: {label_smoothing!r}")
    targets = tf.cast(targets, tf.float32)
    num_classes = targets.shape[-1] if targets.shape[-1] is not None else tf.shape(targets)[-1]
    return targets * (1.0 - label_smoothing) + label_smoothing / tf.cast(num_classes, tf.float32)


def dominant_labels(targets):
    """int32 [B]: each row's class of largest weight (ties: the lowest index), what training top-1
    measures against when targets are mixed."""
    return tf.argmax(targets, axis=-1, output_type=tf.int32)
