"""Per-image augmentation policies (RandAugment, AutoAugment) for the training input pipeline.

uint8 [H, W, 3] in, uint8 of the same shape out, TensorFlow image ops only: they run inside
`Dataset.map(num_parallel_calls=...)`, after the random crop and flip, before batching. Randomness is
stateless, seeded by the element's [2] seed: a given (seed, image) always gives the same output,
whatever the parallelism, so a resumed run sees exactly the images an uninterrupted run sees.

Policies (the `--augment` flag, parsed by `tfcnn.options.parse_policy`):
- `none`.
- `randaugment:N,M` (Cubuk et al. 2020): N ops per image, each drawn uniformly from RANDAUGMENT_OPS
  (the TPU / Model Garden RandAugment list: 16 ops, and Identity for the reference's "no op" draw),
  all at magnitude M.
- `autoaugment:imagenet` (Cubuk et al. 2019): one of the 25 sub-policies of IMAGENET_POLICY drawn
  uniformly, its two (op, probability, magnitude) applied in turn, each with its probability.

Magnitudes use the reference's scale: level 10 is the "maximum" the references' mappings are written
for (MAX_LEVEL); RandAugment's M may go up to 30 (the paper uses M = 28 for EfficientNet-B7), where the
same linear mappings extrapolate, clamped to their valid range. Mappings (r = level / 10), as in the
TensorFlow references (TPU EfficientNet `autoaugment.py`, Model Garden `official/vision/ops/augment.py`):
  Rotate           +-30 r degrees (random sign), nearest-neighbour, gray (128) fill
  ShearX / ShearY  +-0.3 r (random sign), nearest-neighbour, gray fill
  TranslateX / Y   +-0.45 r of the image's width / height (random sign), rounded to whole pixels, gray
                   fill. The references use absolute pixels: 100 (RandAugment, i.e. 0.45 of 224) and
                   250 (AutoAugment, more than a whole 224 image); timm uses 0.45 of the image for both,
                   as here, so the shift scales with the image size.
  Cutout           a gray square of half side int(r * 40/224 * shorter side), centred uniformly at
                   random (the references: 40 px half side at 224 for RandAugment; v0 has no Cutout)
  Posterize        keep int(4 r) high bits, at least 1 (at level < 2.5 the references ask for 0 bits; TF
                   clamps the shift to 7, so they keep 1 bit; PIL-based ports turn the image black)
  Solarize         invert pixels >= int(256 r) (so level 0 inverts everything, level >= 10 nothing)
  SolarizeAdd      add int(110 r) to pixels < 128, clipped
  Color / Contrast / Brightness / Sharpness   PIL ImageEnhance factor 0.1 + 1.8 r
  AutoContrast, Equalize, Invert, Identity    no magnitude
Note the references' quirks, kept: Solarize and Posterize get weaker as the level grows, and the
enhance factors are >= 1 (always enhancing) from level 5 on.

Deviations from the TensorFlow references, all towards PIL (and so timm): Contrast blends with the mean
grey level (the TF references use the pixel count / 256); results are rounded, not truncated, to uint8.
The photometric ops match PIL's to within 1 level (Equalize, Posterize, Solarize, Invert exactly).

Seeds: apply_policy folds SEED_SALT into the element seed, then `stateless_split`s it per RandAugment
layer (or per AutoAugment choice and stage); each layer draws one uniform [4]: op choice (or apply
coin), sign, Cutout row, Cutout column.

Cost: each layer / stage is one `tf.switch_case`, so only the drawn op runs. Rotate and Shear go
through ImageProjectiveTransformV3 (uint8, nearest); Translate is a whole-pixel shift done as pad +
slice (the transform's exact output, at a fraction of its cost). Measured on 224 x 224 images on a
loaded 2-core machine, per image: randaugment:2,9 about 1.3 ms, autoaugment:imagenet about 1.5-2 ms;
the dearest ops are Equalize, Rotate, Shear (1-1.5 ms), Sharpness (1 ms).
"""
from __future__ import annotations

import functools

import tensorflow as tf

from tfcnn.options import POLICY_ERROR, parse_policy

FILL = 128  # gray: what geometric ops and Cutout leave where there is no image (the references' replace value)
MAX_LEVEL = 10.0  # the level the magnitude mappings are written for
TRANSLATE_FRACTION = 0.45  # of the side, at level 10
CUTOUT_FRACTION = 40 / 224  # half side of the Cutout square at level 10, of the shorter side
SEED_SALT = 0x61756720  # folded into the element seed, so the policy's draws differ from the crop's and flip's

def apply_policy(image, policy, seed):
    """The policy's augmentation of one uint8 [H, W, 3] image, seeded by an int32/int64 [2] seed (the
    element seed may be passed as is: it is salted first). Returns uint8 of the image's shape."""
    if isinstance(policy, str):
        policy = parse_policy(policy)
    if policy.kind == "none":
        return image
    seed = tf.random.experimental.stateless_fold_in(seed, SEED_SALT)
    if policy.kind == "randaugment":
        out = randaugment(image, policy.num_ops, policy.magnitude, seed)
    elif policy.kind == "autoaugment":
        out = autoaugment(image, IMAGENET_POLICY, seed)
    else:
        raise ValueError(f"{POLICY_ERROR}, received: {policy!r}")
    return tf.ensure_shape(out, image.shape)


def randaugment(image, num_ops, magnitude, seed):
    """num_ops ops in turn, each drawn uniformly from RANDAUGMENT_OPS, at `magnitude`. One switch_case
    per op: only the drawn op runs."""
    for layer_seed in tf.unstack(tf.random.experimental.stateless_split(seed, num_ops)):
        draws = tf.random.stateless_uniform([4], layer_seed)  # op choice, then the op's own draws
        index = _index(draws[0], len(RANDAUGMENT_OPS))
        image = tf.switch_case(index, [functools.partial(_run_op, image, name, magnitude, draws[1:])
                                       for name in RANDAUGMENT_OPS])
    return image


def autoaugment(image, table, seed):
    """One sub-policy of `table` drawn uniformly; each of its stages applies its op with its probability.

    Each stage is one switch_case over the table's ops at that stage plus Identity (branch index: the
    sub-policy's, or the last when the stage's coin says no), so only the selected op runs."""
    choice_seed, *stage_seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 1 + len(table[0])))
    chosen = _index(tf.random.stateless_uniform([], choice_seed), len(table))
    for stage, stage_seed in enumerate(stage_seeds):
        draws = tf.random.stateless_uniform([4], stage_seed)  # apply?, then the op's own draws
        probabilities = tf.constant([sub_policy[stage][1] for sub_policy in table], tf.float32)
        index = tf.where(draws[0] < tf.gather(probabilities, chosen), chosen, len(table))
        branches = [functools.partial(_run_op, image, sub_policy[stage][0], sub_policy[stage][2], draws[1:])
                    for sub_policy in table]
        image = tf.switch_case(index, branches + [functools.partial(identity, image)])
    return image


def apply_op(image, name, magnitude, seed):
    """One op of OPS at `magnitude` (the reference scale, 10 the usual maximum), its random sign or
    position drawn from `seed` ([2]). For tests and for looking at what an op does."""
    if name not in OPS:
        raise ValueError(f"augmentation op must be one of {', '.join(OPS)}, received: {name!r}")
    return _run_op(image, name, magnitude, tf.random.stateless_uniform([3], seed))


def _run_op(image, name, magnitude, draws):
    """OPS[name] on image; draws: float32 [3] uniforms in [0, 1) (sign, row, column) for its args."""
    op, to_args = OPS[name]
    return op(image, *to_args(magnitude / MAX_LEVEL, draws, tf.shape(image)))


def _index(uniform, n):
    """A uniform in [0, 1) -> an int32 index uniform in [0, n) (n: a Python int or an int32 scalar)."""
    return tf.minimum(tf.cast(uniform * tf.cast(n, tf.float32), tf.int32), n - 1)


# ---- ops: uint8 [H, W, 3] in and out --------------------------------------------------------------

def identity(image):
    return image


def invert(image):
    return 255 - image


def _to_uint8(values):
    """float -> uint8, rounded and clipped to 0-255."""
    return tf.cast(tf.clip_by_value(tf.round(values), 0.0, 255.0), tf.uint8)


def autocontrast(image):
    """PIL's ImageOps.autocontrast (no cutoff): each channel stretched linearly so its minimum becomes 0
    and its maximum 255; flat channels unchanged."""
    low = tf.cast(tf.reduce_min(image, axis=[0, 1]), tf.float32)
    high = tf.cast(tf.reduce_max(image, axis=[0, 1]), tf.float32)
    spread = high > low
    scale = tf.where(spread, 255.0 / tf.maximum(high - low, 1.0), 1.0)
    offset = tf.where(spread, -low * scale, 0.0)
    return _to_uint8(tf.cast(image, tf.float32) * scale + offset)


def equalize(image):
    """PIL's ImageOps.equalize, per channel: a lookup table from the channel's cumulative histogram.

    The three histograms are one histogram_fixed_width over values offset by 256 per channel, and the
    three tables one gather. PIL's rule: step = (pixels - count of the largest value) // 255; table[v] =
    (pixels below v + step // 2) // step, clipped to 255; a channel with step 0 (one value, or nearly)
    is unchanged."""
    values = tf.reshape(tf.cast(image, tf.int32), [-1, 3])
    shifted = values + tf.constant([0, 256, 512])
    histogram = tf.reshape(tf.histogram_fixed_width(shifted, [0, 768], nbins=768), [3, 256])
    top_count = tf.gather(histogram, tf.reduce_max(values, axis=0), batch_dims=1)
    step = (tf.reduce_sum(histogram, axis=1) - top_count) // 255
    below = tf.cumsum(histogram, axis=1, exclusive=True)
    table = (below + (step // 2)[:, None]) // tf.maximum(step, 1)[:, None]
    table = tf.where((step > 0)[:, None], tf.minimum(table, 255), tf.range(256)[None])
    return tf.reshape(tf.cast(tf.gather(tf.reshape(table, [-1]), shifted), tf.uint8), tf.shape(image))


def posterize(image, bits):
    """Keep the `bits` (1-8) most significant bits of every value."""
    return tf.bitwise.bitwise_and(image, tf.constant((0xFF << (8 - bits)) & 0xFF, tf.uint8))


def solarize(image, threshold):
    """Invert the values >= threshold (PIL's ImageOps.solarize). As x XOR 255 where selected: uint8
    arithmetic, 3x cheaper than a select on the CPU."""
    if threshold > 255:
        return image
    return tf.bitwise.bitwise_xor(image, tf.cast(image >= max(threshold, 0), tf.uint8) * 255)


def solarize_add(image, addition, threshold=128):
    """Add `addition` (>= 0) to the values < threshold, saturating at 255 (in uint8, no select)."""
    headroom = tf.minimum(255 - image, min(max(addition, 0), 255))
    return image + headroom * tf.cast(image < threshold, tf.uint8)


def blend(degenerate, image, factor):
    """degenerate + factor * (image - degenerate), rounded and clipped: PIL's ImageEnhance (factor 0
    gives the degenerate image, 1 the image, above 1 extrapolates away from the degenerate)."""
    degenerate = tf.cast(degenerate, tf.float32)
    return _to_uint8(degenerate + factor * (tf.cast(image, tf.float32) - degenerate))


_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as PIL's convert('L')


def _gray(image):
    """Luma, rounded, float32 [H, W]."""
    return tf.round(tf.linalg.matvec(tf.cast(image, tf.float32), tf.constant(_LUMA)))


def color(image, factor):
    """PIL's ImageEnhance.Color: blend with the image's grayscale version (tiled to 3 channels first:
    TF's CPU kernels broadcast [H, W, 1] against [H, W, 3] slowly)."""
    return blend(tf.tile(_gray(image)[..., None], [1, 1, 3]), image, factor)


def contrast(image, factor):
    """PIL's ImageEnhance.Contrast: blend with a flat image of the mean grey level (rounded)."""
    return blend(tf.round(tf.reduce_mean(_gray(image))), image, factor)


def brightness(image, factor):
    """PIL's ImageEnhance.Brightness: blend with black."""
    return blend(0.0, image, factor)


# PIL's ImageFilter.SMOOTH. A plain list: a tensor made at import would start TensorFlow's runtime before
# distributed.init() could set its thread counts.
_SMOOTH = [[1 / 13, 1 / 13, 1 / 13], [1 / 13, 5 / 13, 1 / 13], [1 / 13, 1 / 13, 1 / 13]]


def sharpness(image, factor):
    """PIL's ImageEnhance.Sharpness: blend with the SMOOTH-filtered image (border pixels unfiltered)."""
    values = tf.cast(image, tf.float32)
    kernel = tf.tile(tf.reshape(tf.constant(_SMOOTH, tf.float32), [3, 3, 1, 1]), [1, 1, 3, 1])
    smoothed = tf.round(tf.nn.depthwise_conv2d(values[None], kernel, [1, 1, 1, 1], "VALID")[0])
    degenerate = values + tf.pad(smoothed - values[1:-1, 1:-1], [[1, 1], [1, 1], [0, 0]])
    return blend(degenerate, image, factor)


def _transform(image, matrix):
    """ImageProjectiveTransformV3 of one uint8 image (faster on uint8 than on float): output pixel (x, y)
    takes the input at ((a0 x + a1 y + a2) / k, (a3 x + a4 y + a5) / k), k = a6 x + a7 y + 1; nearest
    neighbour, gray fill."""
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None], transforms=tf.cast(tf.stack(matrix), tf.float32)[None],
        output_shape=tf.shape(image)[:2], fill_value=float(FILL), interpolation="NEAREST",
        fill_mode="CONSTANT")[0]


def rotate(image, degrees):
    """Rotation by `degrees` about the image centre."""
    radians = tf.cast(degrees, tf.float32) * (3.141592653589793 / 180.0)
    height = tf.cast(tf.shape(image)[0] - 1, tf.float32)
    width = tf.cast(tf.shape(image)[1] - 1, tf.float32)
    cos, sin = tf.cos(radians), tf.sin(radians)
    x_offset = (width - (cos * width - sin * height)) / 2.0
    y_offset = (height - (sin * width + cos * height)) / 2.0
    return _transform(image, [cos, -sin, x_offset, sin, cos, y_offset, 0.0, 0.0])


def shear_x(image, level):
    """Row y shifted by level * y pixels (PIL's affine (1, level, 0, 0, 1, 0))."""
    return _transform(image, [1.0, level, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def shear_y(image, level):
    """Column x shifted by level * x pixels."""
    return _transform(image, [1.0, 0.0, 0.0, level, 1.0, 0.0, 0.0, 0.0])


def _shift(image, pixels, axis):
    """Content moved by -pixels (an integer) along axis 0 or 1, gray coming in: a pad and a slice, the
    output of an integer-translation ImageProjectiveTransformV3 (nearest) at a tenth of its cost."""
    pixels = tf.cast(pixels, tf.int32)
    shape = tf.shape(image)
    pixels = tf.clip_by_value(pixels, -shape[axis], shape[axis])
    margin = tf.abs(pixels)
    paddings = [[margin, margin] if a == axis else [0, 0] for a in range(3)]
    begin = [margin + pixels if a == axis else 0 for a in range(3)]
    return tf.slice(tf.pad(image, paddings, constant_values=FILL), begin, shape)


def translate_x(image, pixels):
    """Content moved left by `pixels` whole pixels (right when negative), gray fill."""
    return _shift(image, pixels, 1)


def translate_y(image, pixels):
    """Content moved up by `pixels` whole pixels (down when negative), gray fill."""
    return _shift(image, pixels, 0)


def cutout(image, half, row, column):
    """Rows [row - half, row + half) x columns [column - half, column + half), clipped to the image,
    filled gray. The box is a mask from iota comparisons (no dynamic slicing), applied in uint8
    arithmetic: x + mask * (128 - x) wraps around to exactly 128 inside, x outside."""
    shape = tf.shape(image)
    rows, columns = tf.range(shape[0])[:, None], tf.range(shape[1])[None, :]
    inside = ((rows >= row - half) & (rows < row + half)) & ((columns >= column - half) & (columns < column + half))
    mask = tf.tile(tf.cast(inside, tf.uint8)[..., None], [1, 1, 3])
    return image + mask * (FILL - image)


# ---- magnitude -> arguments: (r = level / 10, draws float32 [3] in [0, 1), image shape) -> tuple ----

def _no_args(r, draws, shape):
    return ()


def _signed(value, draws):
    """value with a random sign (draws[0])."""
    return tf.where(draws[0] < 0.5, -value, value)


def _rotate_args(r, draws, shape):
    return (_signed(tf.constant(30.0 * r), draws),)


def _shear_args(r, draws, shape):
    return (_signed(tf.constant(0.3 * r), draws),)


def _translate_args(axis):
    def to_args(r, draws, shape):
        return (_signed(tf.round(TRANSLATE_FRACTION * r * tf.cast(shape[axis], tf.float32)), draws),)
    return to_args


def _enhance_args(r, draws, shape):
    return (0.1 + 1.8 * r,)


def _posterize_args(r, draws, shape):
    return (min(max(int(4 * r), 1), 8),)


def _solarize_args(r, draws, shape):
    return (int(256 * r),)


def _solarize_add_args(r, draws, shape):
    return (int(110 * r),)


def _cutout_args(r, draws, shape):
    half = tf.cast(CUTOUT_FRACTION * r * tf.cast(tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
    return half, _index(draws[1], shape[0]), _index(draws[2], shape[1])


OPS = {
    "Identity": (identity, _no_args),
    "AutoContrast": (autocontrast, _no_args),
    "Equalize": (equalize, _no_args),
    "Invert": (invert, _no_args),
    "Rotate": (rotate, _rotate_args),
    "Posterize": (posterize, _posterize_args),
    "Solarize": (solarize, _solarize_args),
    "SolarizeAdd": (solarize_add, _solarize_add_args),
    "Color": (color, _enhance_args),
    "Contrast": (contrast, _enhance_args),
    "Brightness": (brightness, _enhance_args),
    "Sharpness": (sharpness, _enhance_args),
    "ShearX": (shear_x, _shear_args),
    "ShearY": (shear_y, _shear_args),
    "TranslateX": (translate_x, _translate_args(1)),
    "TranslateY": (translate_y, _translate_args(0)),
    "Cutout": (cutout, _cutout_args),
}

# The TPU / Model Garden RandAugment op list, in its order; Identity stands for its extra "no op" draw.
RANDAUGMENT_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color", "Contrast",
                   "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout",
                   "SolarizeAdd", "Identity")

# AutoAugment's ImageNet policy, (op, probability, level) x 2 per sub-policy: "v0", the table of the TPU
# EfficientNet `autoaugment.py` `policy_v0`, identical in TensorFlow Model Garden
# (official/vision/ops/augment.py, AutoAugment.policy_v0) and timm (auto_augment_policy_v0, which writes
# TranslateYRel for TranslateY); the one NVIDIA's TF2 EfficientNet uses.
IMAGENET_POLICY = (
    (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)),
    (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
    (("Color", 0.4, 1), ("Rotate", 0.6, 8)),
    (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
    (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)),
    (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
    (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)),
    (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
    (("Color", 0.6, 1), ("Equalize", 1.0, 2)),
    (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
    (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)),
    (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
    (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)),
    (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
    (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)),
    (("Rotate", 1.0, 7), ("TranslateY", 0.8, 9)),
    (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)),
    (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
    (("Color", 1.0, 0), ("Rotate", 0.6, 2)),
    (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
    (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)),
    (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
    (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)),
    (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
    (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
)
