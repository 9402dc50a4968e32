"""Pure per-image transforms: encoded JPEG in, uint8 RGB image of the model's size out.

Training decodes only the sampled crop (`tf.image.decode_and_crop_jpeg`): libjpeg skips the unused
parts of the image, so the random crop costs less than a full decode. Randomness is stateless and
seeded per element, so a given (seed, element) always gives the same crop and flip, whatever the
parallelism; that is what lets a resumed run continue the exact same data stream.

Images leave the input pipeline as uint8: a quarter of the bytes of float32 to batch on the host and
to copy to the GPU (the batching copy of float32 images cost more than the resize). Normalization to
the compute dtype (`normalize_batch`) runs inside the model's compiled step, on the accelerator.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tfcnn.options import EVAL_CROPS


@dataclasses.dataclass(frozen=True)
class TrainView:
    """How a training image is made from its record: a random crop, decoded, resized to the model's size,
    flipped at random. The `--train_crop` presets (TRAIN_VIEWS) are instances; each element is one a
    recipe's source fixes.

    sampler: "none" (the whole image: data already prepared), "resized_crop" (torchvision's
      RandomResizedCrop: area uniform in `area` of the image's,
      log-aspect uniform in `aspect`, `attempts` tries, else the centre crop of the nearest allowed
      aspect) or "distorted_box" (tf.image.sample_distorted_bounding_box: aspect uniform, height uniform
      between those of the smallest and largest area, covering >= min_object_covered of an object, the
      record's boxes when use_boxes else the whole image; else the whole image).
    area: the crop's area as a fraction of the image's. aspect: its width / height.
    antialias: the resize filters as PIL does when it shrinks (its filter widened by the scale); else
      plain bilinear interpolation. legacy_resize: TF1's resize_images (corner-aligned, without half-pixel
      centres, no antialiasing), its floats truncated to uint8 as NVIDIA's TF1 scripts cast them; else
      rounded. dct_method, fancy_upscaling: libjpeg's decoding (INTEGER_ACCURATE is PIL's, bit for bit).
    flip: a random horizontal flip after the resize.
    """
    sampler: str
    area: tuple = (0.08, 1.0)
    aspect: tuple = (3 / 4, 4 / 3)
    attempts: int = 10
    min_object_covered: float = 0.1
    use_boxes: bool = True
    antialias: bool = False
    legacy_resize: bool = False
    dct_method: str = "INTEGER_FAST"
    fancy_upscaling: bool = True
    flip: bool = True


TRAIN_VIEWS = {
    # NVIDIA's PyTorch ConvNets (dataloaders.py, data_backend pytorch): torchvision's RandomResizedCrop on
    # PIL images, which PIL decodes with the accurate integer DCT and resizes antialiased.
    "torchvision": TrainView("resized_crop", antialias=True, dct_method="INTEGER_ACCURATE"),
    # The same crop keeping at least 80% of the image (a zoom of at most 1.12x and a shift, about what the padded
    # crops of CIFAR training do): the default for images at up to half the model's input size, where
    # torchvision's 8% is a few pixels of a small image (tfcnn.training.plan; measured against 25-100% crops in
    # CHANGELOG.md, 2026-12-04).
    "small": TrainView("resized_crop", area=(0.8, 1.0), antialias=True, dct_method="INTEGER_ACCURATE"),
    # TF-slim's Inception preprocessing with torchvision's ranges, objects from the record's boxes
    # (tfcnn's view before the recipes named theirs).
    "inception": TrainView("distorted_box"),
    # NGC's nvidia_examples/cnn (nvutils/image_processing.py, 20.10): no boxes, aspect 0.8-1.25, area
    # 0.1-1, 100 attempts; decode_jpeg(fancy_upscaling=False, dct_method='INTEGER_FAST'); resize_images
    # BILINEAR; tf.cast to uint8.
    "ngc": TrainView("distorted_box", area=(0.1, 1.0), aspect=(0.8, 1.25), attempts=100, use_boxes=False,
                     legacy_resize=True, fancy_upscaling=False),
    # Data already prepared (e.g. in-memory arrays at the model's size): resized if they are not, nothing else.
    "none": TrainView("none", flip=False),
}


def train_view(name_or_view) -> TrainView:
    """A TrainView from a --train_crop name (or a TrainView, returned as it is)."""
    if isinstance(name_or_view, TrainView):
        return name_or_view
    if name_or_view not in TRAIN_VIEWS:
        raise ValueError(f"--train_crop must be one of {', '.join(TRAIN_VIEWS)}, received: {name_or_view!r}")
    return TRAIN_VIEWS[name_or_view]


def resized_crop_window(height, width, uniforms, area=(0.08, 1.0), aspect=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, from uniform draws: int32 [..., 4] (top, left, height,
    width) for an image of height x width. uniforms: float [..., attempts, 4] in [0, 1): per attempt the
    area, the log-aspect and the two offsets (any leading shape: one image's, or many draws at once).

    Each attempt: target area = image area x U(area), aspect = exp(U(log aspect)), w = round(sqrt(target x
    aspect)), h = round(sqrt(target / aspect)) (half to even, as Python's round); the first attempt with
    0 < w <= width and 0 < h <= height wins, at offsets uniform over the valid integer positions. Else
    the centre crop of the whole image clamped to the aspect range."""
    u = tf.cast(uniforms, tf.float64)
    h_img, w_img = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    target = h_img * w_img * (area[0] + u[..., 0] * (area[1] - area[0]))
    log_low, log_high = np.log(aspect[0]), np.log(aspect[1])
    ratio = tf.exp(log_low + u[..., 1] * (log_high - log_low))
    w = tf.round(tf.sqrt(target * ratio))
    h = tf.round(tf.sqrt(target / ratio))
    fits = (w > 0) & (w <= w_img) & (h > 0) & (h <= h_img)
    top = tf.floor(u[..., 2] * (h_img - h + 1))
    left = tf.floor(u[..., 3] * (w_img - w + 1))
    candidates = tf.stack([top, left, h, w], axis=-1)  # [..., attempts, 4]
    first = tf.argmax(tf.cast(fits, tf.int32), axis=-1)  # 0 when none fits: replaced below
    chosen = tf.gather(candidates, first, axis=-2, batch_dims=len(candidates.shape) - 2)
    in_ratio = w_img / h_img
    fallback_w = tf.where(in_ratio > aspect[1], tf.round(h_img * aspect[1]), w_img)
    fallback_h = tf.where(in_ratio < aspect[0], tf.round(w_img / aspect[0]), h_img)
    fallback = tf.stack([tf.floor((h_img - fallback_h) / 2), tf.floor((w_img - fallback_w) / 2), fallback_h,
                         fallback_w])
    window = tf.where(tf.reduce_any(fits, axis=-1)[..., None], chosen, fallback)
    return tf.cast(window, tf.int32)


def random_crop_window(encoded, boxes, seed, view: TrainView = TRAIN_VIEWS["torchvision"]):
    """[offset_y, offset_x, height, width] of the view's random crop of a JPEG. boxes: float32 [N, 4]
    (ymin, xmin, ymax, xmax) in [0, 1], the objects of a distorted_box view that uses them."""
    return crop_window(tf.image.extract_jpeg_shape(encoded), boxes, seed, view)


def crop_window(shape, boxes, seed, view: TrainView):
    """random_crop_window of an image of `shape` ([height, width, ...])."""
    if view.sampler == "none":
        return tf.stack([0, 0, shape[0], shape[1]])
    if view.sampler == "resized_crop":
        return resized_crop_window(shape[0], shape[1], tf.random.stateless_uniform([view.attempts, 4], seed),
                                   view.area, view.aspect)
    if not view.use_boxes:
        boxes = tf.zeros([0, 4], tf.float32)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, bounding_boxes=tf.expand_dims(boxes, 0), seed=seed, min_object_covered=view.min_object_covered,
        aspect_ratio_range=view.aspect, area_range=view.area, max_attempts=view.attempts,
        use_image_if_no_bounding_boxes=True)
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def train_crop(encoded, boxes, seed, view: TrainView = TRAIN_VIEWS["torchvision"]):
    """The view's random crop, decoded fused (libjpeg decodes only that window): uint8 [h, w, 3]."""
    window = random_crop_window(encoded, boxes, seed, view)
    return tf.image.decode_and_crop_jpeg(encoded, window, channels=3, dct_method=view.dct_method,
                                         fancy_upscaling=view.fancy_upscaling)


def train_image(encoded, boxes, seed, image_size, view: TrainView = TRAIN_VIEWS["torchvision"]):
    """train_crop resized to image_size x image_size, random horizontal flip. seed: int32/int64 [2].
    Returns uint8 [image_size, image_size, 3]."""
    return _resized_and_flipped(train_crop(encoded, boxes, seed, view), seed, image_size, view)


def decoded_train_image(image, seed, image_size, view: TrainView = TRAIN_VIEWS["torchvision"]):
    """train_image of a decoded [H, W, 3] image (any dtype holding 0-255), its crop drawn as a JPEG's
    of the same size would be (without objects: the whole image is the object)."""
    window = crop_window(tf.shape(image), tf.zeros([0, 4], tf.float32), seed, view)
    crop = tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], 3]))
    return _resized_and_flipped(crop, seed, image_size, view)


def _resized_and_flipped(crop, seed, image_size, view):
    image = resize_to_uint8(crop, image_size, view)
    return tf.image.stateless_random_flip_left_right(image, seed=seed[::-1]) if view.flip else image


def resize_to_uint8(image, image_size, view: TrainView = TRAIN_VIEWS["torchvision"]):
    """The view's bilinear resize of an [H, W, 3] image to image_size x image_size, back to uint8 (the
    interpolated values stay within the input's 0-255): antialiased and rounded, plain and rounded, or
    TF1's and truncated."""
    if view.legacy_resize:
        image = tf.compat.v1.image.resize_bilinear(image[None], [image_size, image_size], align_corners=False,
                                                   half_pixel_centers=False)[0]
        return tf.cast(image, tf.uint8)
    return to_uint8(tf.image.resize(image, [image_size, image_size], method="bilinear", antialias=view.antialias))


def to_uint8(image):
    """Values on the 0-255 scale, rounded and clipped to uint8."""
    return tf.cast(tf.round(tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0)), tf.uint8)


# ScaleAndTranslate's kernels that, antialiased, are PIL's (and so torchvision's and timm's) filters.
INTERPOLATIONS = {"bilinear": "triangle", "bicubic": "keyscubic"}


def resize_size(image_size, crop_fraction):
    """The shorter side an image is resized to before the centre crop: floor(image_size / crop_fraction),
    as timm computes it; exact for torchvision's resize sizes too (224 / (224 / 232) -> 232)."""
    return int(image_size / crop_fraction + 1e-6)


def eval_view(image, image_size, crop_fraction, interpolation="bilinear", eval_crop="torchvision"):
    """The evaluation view of a decoded [H, W, 3] image: torchvision's Resize(shorter side to
    resize_size) then CenterCrop(image_size), as one antialiased resampling; or, with eval_crop 'ngc',
    ngc_view's. Returns uint8.

    Resize and crop are a single ScaleAndTranslate (scale the whole image, shift by the crop offset),
    with the filters PIL uses when downscaling (triangle for bilinear, Keys cubic a=-0.5 for bicubic,
    support widened by the scale). Same geometry as torchvision: the longer side truncated to
    int(resize * long / short), crop offsets rounded half to even. Measured against PIL on the same
    pixels: at most 1 level apart with bilinear (PIL rounds its two passes to uint8 in between).
    The resampling costs about 2 ms per image and core, twice the plain bilinear resize it replaces.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, received: {interpolation!r}")
    if eval_crop == "ngc":
        return ngc_view(image, image_size, crop_fraction, interpolation)
    if eval_crop != "torchvision":
        raise ValueError(f"eval_crop must be one of {', '.join(EVAL_CROPS)}, received: {eval_crop!r}")
    shape = tf.shape(image)
    height, width = tf.cast(shape[0], tf.float64), tf.cast(shape[1], tf.float64)
    short = tf.constant(float(resize_size(image_size, crop_fraction)), tf.float64)
    long = tf.floor(short * tf.maximum(height, width) / tf.minimum(height, width))
    portrait = height > width
    new_height, new_width = tf.where(portrait, long, short), tf.where(portrait, short, long)
    top, left = tf.round((new_height - image_size) / 2), tf.round((new_width - image_size) / 2)
    view = tf.raw_ops.ScaleAndTranslate(
        images=tf.cast(image[None], tf.float32), size=[image_size, image_size],
        scale=tf.cast(tf.stack([new_height / height, new_width / width]), tf.float32),
        translation=tf.cast(tf.stack([-top, -left]), tf.float32), kernel_type=INTERPOLATIONS[interpolation],
        antialias=True)
    return tf.cast(tf.round(tf.clip_by_value(view[0], 0.0, 255.0)), tf.uint8)


def ngc_view(image, image_size, crop_fraction=0.8, interpolation="bilinear"):
    """The NGC scripts' evaluation view (nvutils/image_processing.py, _crop_and_resize_image without
    random_crop): tf.image.central_crop(image, crop_fraction) (0.8 there), TF1's resize_images to image_size x
    image_size (bilinear or bicubic, corner pixels not aligned, no half-pixel centres, no antialiasing; the
    aspect ratio not kept), truncated to uint8 as the scripts cast it. Returns uint8."""
    crop = tf.image.central_crop(image, crop_fraction)
    method = {"bilinear": tf.image.ResizeMethod.BILINEAR, "bicubic": tf.image.ResizeMethod.BICUBIC}[interpolation]
    resized = tf.compat.v1.image.resize_images(tf.cast(crop, tf.float32), [image_size, image_size], method,
                                               align_corners=False)
    return tf.cast(tf.clip_by_value(resized, 0.0, 255.0), tf.uint8)


def decode_for_eval(encoded, eval_crop="torchvision"):
    """Any encoded image (JPEG, PNG, BMP, GIF) -> uint8 [H, W, 3]. JPEGs with libjpeg's accurate integer
    DCT, as PIL decodes them (bit-identical), so imported weights see their source's pixels; TensorFlow's
    default fast DCT is about 1 level off on average. (Decoding only the window the view reads saved
    nothing measurable: the resampling dominates.) The ngc view decodes as the NGC scripts do (TensorFlow's
    fast DCT, without fancy upscaling: what the ngc training view's TrainView says)."""
    ngc = TRAIN_VIEWS["ngc"]
    dct, fancy = (ngc.dct_method, ngc.fancy_upscaling) if eval_crop == "ngc" else ("INTEGER_ACCURATE", True)
    return tf.cond(tf.io.is_jpeg(encoded),
                   lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method=dct, fancy_upscaling=fancy),
                   lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False))


def eval_image(encoded, image_size, crop_fraction, interpolation="bilinear", eval_crop="torchvision"):
    """eval_view of an encoded image, decoded as the view's source decodes it."""
    return eval_view(decode_for_eval(encoded, eval_crop), image_size, crop_fraction, interpolation, eval_crop)


def normalize_batch(images, mean, std, dtype):
    """(images - mean) / std per channel on a [batch, H, W, 3] batch (any dtype holding 0-255), then
    cast to the compute dtype. Runs in the model's step, so on the accelerator when there is one.

    Computed as images * scale + offset with scale and offset materialized at [H, W, 3]: TF's CPU
    kernels broadcast a per-channel [3] vector about 3x slower than a full-size operand broadcast
    over the batch (measured: 9-13 ms vs 3 ms for 32x224x224x3 on 2 cores).
    """
    height, width = images.shape[1], images.shape[2]
    work = np.float64 if tf.as_dtype(dtype) == tf.float64 else np.float32  # float32, but for float64 models
    scale = np.broadcast_to(1.0 / np.asarray(std, work), (height, width, 3))
    offset = np.broadcast_to(-np.asarray(mean, work) / np.asarray(std, work), (height, width, 3))
    normalized = tf.cast(images, work) * tf.constant(scale) + tf.constant(offset)
    return tf.cast(normalized, dtype)
