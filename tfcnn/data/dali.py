"""NVIDIA DALI as tfcnn's second input pipeline (`--data_backend dali_cpu | dali_gpu`); every import of DALI
is in this module, as every import of Horovod is in tfcnn/distributed.py.

build_dataset yields what pipeline.build_dataset yields: (uint8 [batch, size, size, 3] RGB, int32 [batch]
0-based labels), normalized later in the model's step. DALI reads the same TFRecord shards through their
index files (tfcnn.data.dali_index: `python -m tfcnn.data.dali_index DIR` makes missing ones), and decodes
and resizes on the CPU (`dali_cpu`, DALI's own worker threads) or on the GPU (`dali_gpu`: nvJPEG, resize and
flip on device `local_rank`). DALI is optional (`make install DALI=1`); nothing imports this module unless a
DALI backend is asked for.

The views are the tf backend's (tfcnn.data.preprocessing):
- training: the --train_crop view's crop, drawn as DALI arithmetic on [attempts]-vectors with the tf
  backend's rules exactly (the random numbers are DALI's): torchvision's RandomResizedCrop (area and
  log-aspect uniform, whole-pixel sizes and offsets, the first candidate that fits, else the centre crop),
  or tf.image.sample_distorted_bounding_box's (aspect uniform, height uniform between those of the smallest
  and largest area, offsets uniform, the first candidate covering min_object_covered of one of the record's
  boxes or of the whole image, else the whole image; heights and offsets continuous where TensorFlow rounds
  them to pixels). Decoded fused (`decoders.image_slice`), resized bilinearly, antialiased when the view
  says so (DALI has no TF1 legacy resize: the ngc view resizes as NVIDIA's own DALI path did, linear
  without antialiasing), flipped at random.
- evaluation: the shorter side resized to floor(size / crop_fraction), the centre crop, as one antialiased
  resampling of the crop's window (`resize` with a ROI; bilinear or bicubic), with torchvision's geometry; or
  the ngc view: tf.image.central_crop's window resized to the square input without antialiasing (DALI samples
  at half-pixel centres, where TF1's resize_images does not: the NGC scripts evaluated with tf.data only).

Ranks: DALI's reader splits the records of the sorted shards into num_shards contiguous parts (rank r gets
records [r N / S, (r + 1) N / S)), `stick_to_shard`: a rank always reads its own part, as with the tf backend.
Training shuffles through a buffer of shuffle_buffer records, from a pipeline seed drawn from (seed,
start_step): a resumed run gets a fresh stream, not the one an uninterrupted run would have seen (DALI
cannot skip records without reading them, nor restore its reader from a Keras checkpoint). Validation pads
each rank's last batch (`pad_last_batch`) and cuts the padding off, so every record is counted exactly once.
"""
from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tfcnn import distributed
from tfcnn.data import dali_index, pipeline, preprocessing
from tfcnn.options import parse_policy

try:  # optional: a plain install has no DALI, and only building a DALI dataset needs it
    import nvidia.dali.plugin.tf as dali_tf
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali import math as dmath
    from nvidia.dali import tfrecord as tfrec
except ImportError as error:
    _MISSING = error
else:
    _MISSING = None

INSTALL = "make install DALI=1"
DEVICES = ("cpu", "gpu")
READER = "reader"
BOX_KEYS = ("xmin", "ymin", "xmax", "ymax")  # image/object/bbox/*, in DALI's "xyXY" order


def missing_reason() -> str | None:
    """Why DALI cannot be used here (with the install command), or None when it can."""
    if _MISSING is None:
        return None
    return (f"NVIDIA DALI and its TensorFlow plugin are not installed ({_MISSING}): install them with "
            f"`{INSTALL}` (or the pip commands of the README's DALI section)")


def build_dataset(data_dir: str, split: str, batch_size: int, image_size: int, *, device: str,
                  num_classes: int = 1000, num_shards: int = 1, shard_index: int = 0, seed: int = 0,
                  start_step: int = 0, crop_fraction: float = 0.875, interpolation: str = "bilinear",
                  eval_crop: str = "torchvision", augment="none", train_crop="torchvision",
                  shuffle_buffer: int = 10_000,
                  num_threads: int | None = None, deterministic: bool = True, synthetic: bool = False, **unsupported):
    """pipeline.build_dataset's batches, made by DALI on `device` ('cpu' or 'gpu'). Same arguments, plus
    num_threads: DALI's CPU worker threads (default: this process's cores divided by the local ranks).
    deterministic is accepted and changes nothing: DALI's output order never depends on its threads.
    split 'train': infinite, batches of exactly batch_size. 'validation': every record of this rank once,
    the last batch smaller when the count asks for it."""
    flag = f"--data_backend dali_{device}"
    _refuse_what_dali_cannot_do(flag, device, augment, unsupported)
    view = pipeline._check_args(batch_size, image_size, num_classes, start_step, train_crop, crop_fraction,
                                interpolation, eval_crop)
    if synthetic or data_dir is None:
        return pipeline.synthetic_dataset(batch_size, image_size, num_classes, seed)
    device_id = _device_id(flag) if device == "gpu" else None  # before DALI: installing it would not help
    if missing_reason():
        raise RuntimeError(f"{flag}: {missing_reason()}")
    files = pipeline.list_shards(data_dir, split)
    total = indexed_records(files)
    share = records_of_rank(total, num_shards, shard_index)
    training = split == "train"
    if training and total < num_shards:
        raise pipeline.DataError(f"the {total} {split} records in {data_dir} cannot feed {num_shards} ranks")
    if share == 0:  # validation on more ranks than records: this rank has nothing to count
        return _empty_dataset(image_size)
    # DALI's reader needs at least a record per part: with fewer records than ranks, each rank that has
    # one reads it as its own part of `total` parts.
    reader_part, reader_parts = (shard_index, num_shards) if total >= num_shards else (
        shard_index * total // num_shards, total)
    decoder = "mixed" if device == "gpu" else "cpu"

    def outputs():
        features = read(files, training=training, num_shards=reader_parts, shard_index=reader_part,
                        shuffle_buffer=min(shuffle_buffer, share))
        encoded = features["image/encoded"]
        if training:
            boxes = [features[f"image/object/bbox/{k}"] for k in BOX_KEYS]
            images = train_view(encoded, boxes, image_size, view, decoder)
        else:
            images = (ngc_eval_view if eval_crop == "ngc" else eval_view)(encoded, image_size, crop_fraction,
                                                                           interpolation, decoder)
        labels = checked_labels(features["image/class/label"], num_classes)
        return images, (labels.gpu() if device == "gpu" else labels)

    dataset = _dali_dataset(outputs, batch_size, ((batch_size, image_size, image_size, 3), (batch_size,)),
                            (tf.uint8, tf.int32), device_id, num_threads, stream_seed(seed, start_step))
    if training:
        return dataset  # endless; a GPU-placed DALIDataset must be the last dataset of the chain
    if device == "gpu":  # tf.data's ops are CPU-only: the padding is cut off on the host
        dataset = dataset.apply(tf.data.experimental.copy_to_device("/cpu:0"))
    return exactly_once(dataset, share, batch_size)


def _refuse_what_dali_cannot_do(flag, device, augment, unsupported):
    if device not in DEVICES:
        raise pipeline.DataError(f"device must be one of {', '.join(DEVICES)}, received: {device!r}")
    if unsupported:
        raise pipeline.DataError(f"{flag} does not take {', '.join(sorted(unsupported))} (use --data_backend tf)")
    policy = parse_policy(augment)
    if policy.kind != "none":
        raise pipeline.DataError(
            f"--augment {policy} is not available with {flag}: DALI's RandAugment and AutoAugment "
            f"(nvidia.dali.auto_aug) have other operations and magnitude scales than tfcnn's (tfcnn.data.augment); "
            f"use --data_backend tf for image policies")


def rank_records(data_dir: str, split: str, num_shards: int, shard_index: int) -> int:
    """How many records of the split this rank reads (see records_of_rank). Needs no DALI."""
    return records_of_rank(indexed_records(pipeline.list_shards(data_dir, split)), num_shards, shard_index)


def indexed_records(files) -> int:
    """The records of these shards, from their DALI indexes: an error naming the command that makes them
    when one is missing or stale."""
    return sum(dali_index.indexed_records(f) for f in files)


def records_of_rank(total: int, num_shards: int, shard_index: int) -> int:
    """How many of `total` records DALI's reader gives rank shard_index of num_shards: its part is records
    [floor(i N / S), floor((i + 1) N / S)) of the shards' concatenation."""
    if not 0 <= shard_index < num_shards:
        raise pipeline.DataError(f"shard_index must be in [0, {num_shards}), received: {shard_index}")
    return (shard_index + 1) * total // num_shards - shard_index * total // num_shards


def exactly_once(dataset, count: int, batch_size: int):
    """The first ceil(count / batch_size) batches of an endless validation stream, the last one cut to the
    records left: DALI's reader (pad_last_batch) fills it up by repeating the rank's last record."""
    batches = -(-count // batch_size)

    def cut(index, batch):
        keep = tf.minimum(tf.cast(batch_size, tf.int64), count - index * batch_size)
        return tuple(tensor[:keep] for tensor in batch)

    return dataset.take(batches).enumerate().map(cut)


def stream_seed(seed: int, start_step: int) -> int:
    """The DALI pipeline's seed for a training stream that starts at start_step: a run resumed at step k
    does not replay step 0's stream, and equal (seed, step) give equal streams."""
    return int(np.random.SeedSequence([seed % 2**32, start_step]).generate_state(1)[0] % 2**31)


def default_threads() -> int:
    """DALI worker threads per process: the cores this process may use, shared by the ranks on this host
    (as distributed.init shares them out between TensorFlow's thread pools)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // distributed.local_size())


def _device_id(flag: str) -> int:
    """The CUDA device of this rank: local_rank, as distributed.init pins TensorFlow's GPU (it makes that GPU
    TensorFlow's /gpu:0, where the DALIDataset is placed). An error naming the flag without a GPU."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise pipeline.DataError(f"{flag} needs an NVIDIA GPU that TensorFlow sees, and it sees none (a CPU-only "
                                 f"TensorFlow, or no GPU or driver): use --data_backend dali_cpu or tf")
    return distributed.local_rank() % len(gpus)


def _empty_dataset(image_size):
    images = tf.zeros([0, image_size, image_size, 3], tf.uint8)
    return tf.data.Dataset.from_tensors((images, tf.zeros([0], tf.int32))).take(0)


# ----------------------------------------------------------------------------------------------------
# The DALI graph


def _dali_dataset(outputs, batch_size, shapes, dtypes, device_id, num_threads, seed):
    """A DALIDataset of the pipeline whose graph `outputs()` builds, on the GPU device_id (TensorFlow's
    /gpu:0, see _device_id) or, device_id None, on the CPU only."""
    @pipeline_def(batch_size=batch_size, num_threads=num_threads or default_threads(), device_id=device_id,
                  seed=seed)
    def graph():
        return outputs()

    with tf.device("/cpu:0" if device_id is None else "/gpu:0"):
        return dali_tf.DALIDataset(pipeline=graph(), batch_size=batch_size, device_id=device_id,
                                   output_shapes=shapes, output_dtypes=dtypes)


def read(files, *, training, num_shards=1, shard_index=0, shuffle_buffer=1, boxes=None):
    """The features of this rank's records (DALI's TFRecord reader): shuffled through a buffer of
    shuffle_buffer records for training; in order, the last batch padded with the last record, for
    validation (see exactly_once). The boxes are read for training, unless `boxes` says otherwise."""
    features = {
        "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
        "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
    }
    if training if boxes is None else boxes:
        features.update({f"image/object/bbox/{k}": tfrec.VarLenFeature(tfrec.float32, 0.0) for k in BOX_KEYS})
    return fn.readers.tfrecord(
        path=files, index_path=[dali_index.index_path(f) for f in files], features=features,
        shard_id=shard_index, num_shards=num_shards, stick_to_shard=True, random_shuffle=training,
        initial_fill=shuffle_buffer, pad_last_batch=not training, name=READER)


def checked_labels(labels, num_classes):
    """The records' 1-based [1] int64 labels -> 0-based int32 scalars. A label outside [1, num_classes]
    stops the pipeline with DALI's "Index L is out of range for axis 0 of length num_classes" (L 0-based)
    and the line below in its traceback: DALI has no assert, and a GPU-placed DALIDataset can be followed by
    no tf.data map, so the check is a lookup in a table of the valid classes."""
    labels = fn.reshape(fn.cast(labels, dtype=types.INT32) - 1, shape=[])
    return types.Constant(np.arange(num_classes, dtype=np.int32))[labels]  # label out of range [1, num_classes]


def train_view(encoded, boxes, image_size, view, decoder):
    """The view's random crop (crop_window), decoded fused, bilinear resize to image_size (antialiased when
    the view says so), rounded to uint8, random horizontal flip. boxes: [xmin, ymin, xmax, ymax] in [0, 1].
    The 'none' view: the whole image, resized, not flipped."""
    if view.sampler == "none":
        images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
        return fn.resize(images, size=[image_size, image_size], interp_type=types.INTERP_LINEAR, antialias=view.antialias)
    anchor, extent = crop_window(fn.peek_image_shape(encoded), boxes, view)
    images = fn.decoders.image_slice(encoded, anchor, extent, device=decoder, output_type=types.RGB, axis_names="HW")
    images = fn.resize(images, size=[image_size, image_size], interp_type=types.INTERP_LINEAR, antialias=view.antialias)
    return fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5), vertical=0)


def crop_window(shape, boxes, view):
    """([top, left], [height, width]), relative to the image, of the view's random crop of an image of
    `shape` (HWC): view.attempts candidates at once, the first acceptable one, else the fallback window.

    Vectors are (y, x) throughout. Every operation is a DALI operator run per sample, so this is written
    in few of them (about 40); tfcnn.data.bench's dali_*_crop_decode_only row shows what they cost."""
    n = view.attempts
    image = fn.cast(shape[0:2], dtype=types.FLOAT)  # [height, width]
    height, width = image[0], image[1]
    pixels = height * width
    if view.sampler == "resized_crop":  # preprocessing.resized_crop_window
        target = pixels * _uniform(view.area, [n])
        ratio = dmath.exp(_uniform((float(np.log(view.aspect[0])), float(np.log(view.aspect[1]))), [n]))
        crop_w, crop_h = _round_half_even(dmath.sqrt(target * ratio)), _round_half_even(dmath.sqrt(target / ratio))
        accepted = (crop_w > 0) & (crop_w <= width) & (crop_h > 0) & (crop_h <= height)
        size = fn.stack(crop_h, crop_w, axis=1)  # [n, 2], pixels
        top_left = dmath.floor(fn.random.uniform(range=[0.0, 1.0], shape=[n, 2]) * (image - size + 1))
        top_left, size = top_left / image, size / image
        in_ratio = width / height
        narrow, wide = in_ratio < view.aspect[0], in_ratio > view.aspect[1]
        fallback_w = wide * _round_half_even(height * view.aspect[1]) + (1 - wide) * width
        fallback_h = narrow * _round_half_even(width / view.aspect[0]) + (1 - narrow) * height
        fallback = fn.stack(dmath.floor((height - fallback_h) / 2) / height,
                            dmath.floor((width - fallback_w) / 2) / width, fallback_h / height, fallback_w / width)
    else:  # tf.image.sample_distorted_bounding_box
        aspect = _uniform(view.aspect, [n])  # width / height
        # Heights from the smallest area's to the largest's, at most what fits; drawn uniformly in between.
        low = dmath.sqrt(view.area[0] * pixels / aspect)
        high = dmath.min(dmath.min(dmath.sqrt(view.area[1] * pixels / aspect), width / aspect), height)
        crop_h = low + fn.random.uniform(range=[0.0, 1.0], shape=[n]) * (high - low)
        size = fn.stack(crop_h, crop_h * aspect, axis=1) / image  # [n, 2], relative
        top_left = fn.random.uniform(range=[0.0, 1.0], shape=[n, 2]) * (1.0 - size)
        objects = boxes if view.use_boxes else [types.Constant(np.zeros([0], np.float32))] * 4
        cover = _best_cover(top_left, top_left + size, objects)
        accepted = (low <= high) & (cover >= view.min_object_covered)
        fallback = types.Constant(np.array([0, 0, 1, 1], np.float32))
    # The first accepted candidate: candidate k scores n - k when accepted, 0 when not; the top score wins,
    # and index n (all scored 0) is the row appended below, the fallback.
    first = fn.cast(n - fn.reductions.max(accepted * types.Constant(np.arange(n, 0, -1, dtype=np.float32))),
                    dtype=types.INT32)
    windows = fn.cat(fn.cat(top_left, size, axis=1), fn.reshape(fallback, shape=[1, 4]), axis=0)
    chosen = windows[first]
    return chosen[0:2], chosen[2:4]


def _uniform(bounds, shape):
    """Uniform draws in [low, high); DALI refuses an empty range, so low == high is a constant."""
    low, high = bounds
    if low == high:
        return types.Constant(np.full(shape, low, np.float32))
    return fn.random.uniform(range=[low, high], shape=shape)


def _best_cover(top_left, bottom_right, boxes):
    """[n]: for each candidate crop (relative (y, x) corners, [n, 2] each), the largest fraction of a box's
    area it covers; with no boxes, of the whole image's (tf.image.sample_distorted_bounding_box's
    use_image_if_no_bounding_boxes)."""
    xmin, ymin, xmax, ymax = boxes
    box_lo = fn.reshape(fn.stack(ymin, xmin, axis=1), shape=[1, -1, 2])  # [1, boxes, 2]
    box_hi = fn.reshape(fn.stack(ymax, xmax, axis=1), shape=[1, -1, 2])
    crop_lo, crop_hi = fn.reshape(top_left, shape=[-1, 1, 2]), fn.reshape(bottom_right, shape=[-1, 1, 2])
    overlap = dmath.max(dmath.min(crop_hi, box_hi) - dmath.max(crop_lo, box_lo), 0.0)  # [n, boxes, 2]
    box = box_hi - box_lo
    cover = overlap[:, :, 0] * overlap[:, :, 1] / dmath.max(box[:, :, 0] * box[:, :, 1], 1e-12)  # [n, boxes]
    crop = bottom_right - top_left
    no_boxes = xmin.shape()[0] == 0
    whole = fn.reshape(crop[:, 0] * crop[:, 1] * no_boxes, shape=[-1, 1])  # 0 when the record has boxes
    return fn.reductions.max(fn.cat(cover, whole, axis=1), axes=[1])


def eval_view(encoded, image_size, crop_fraction, interpolation, decoder):
    """preprocessing.eval_view in DALI: torchvision's Resize(floor(size / crop_fraction)) + CenterCrop(size)
    as one antialiased resampling of the crop's window in the decoded image, same geometry (the longer side
    truncated, crop offsets rounded half to even)."""
    shape = fn.peek_image_shape(encoded)
    height, width = fn.cast(shape[0], dtype=types.FLOAT), fn.cast(shape[1], dtype=types.FLOAT)
    short = float(preprocessing.resize_size(image_size, crop_fraction))
    long = dmath.floor(short * dmath.max(height, width) / dmath.min(height, width))
    portrait = height > width
    new_h = portrait * long + (1 - portrait) * short
    new_w = portrait * short + (1 - portrait) * long
    top, left = _round_half_even((new_h - image_size) / 2), _round_half_even((new_w - image_size) / 2)
    scale_h, scale_w = height / new_h, width / new_w  # input pixels per resized pixel
    images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
    return fn.resize(images, size=[image_size, image_size], antialias=True,
                     interp_type=types.INTERP_CUBIC if interpolation == "bicubic" else types.INTERP_LINEAR,
                     roi_start=fn.stack(top * scale_h, left * scale_w),
                     roi_end=fn.stack((top + image_size) * scale_h, (left + image_size) * scale_w))


def ngc_eval_view(encoded, image_size, crop_fraction, interpolation, decoder):
    """preprocessing.ngc_view in DALI: tf.image.central_crop's window (offsets truncated, the crop what is left
    between them) resized to image_size x image_size, not antialiased."""
    shape = fn.peek_image_shape(encoded)
    height, width = fn.cast(shape[0], dtype=types.FLOAT), fn.cast(shape[1], dtype=types.FLOAT)
    top, left = dmath.floor(height * (1 - crop_fraction) / 2), dmath.floor(width * (1 - crop_fraction) / 2)
    images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
    return fn.resize(images, size=[image_size, image_size], antialias=False,
                     interp_type=types.INTERP_CUBIC if interpolation == "bicubic" else types.INTERP_LINEAR,
                     roi_start=fn.stack(top, left), roi_end=fn.stack(height - top, width - left))


def _round_half_even(values):
    """Python's round(): halves to the even neighbour (torchvision's crop sizes and offsets)."""
    floor = dmath.floor(values)
    odd = floor - 2 * dmath.floor(floor / 2)
    return floor + (values - floor > 0.5) + (values - floor == 0.5) * odd


# ----------------------------------------------------------------------------------------------------
# The benchmark's stages (tfcnn.data.bench)

STAGES = ("decode", "crop_decode", "train_image")


def stage_dataset(data_dir: str, batch_size: int, image_size: int, stage: str, *, device: str = "cpu",
                  num_threads: int | None = None):
    """The train records read in order, through DALI's image work up to `stage`, batched: 'decode' (the
    whole image; its shape leaves the pipeline), 'crop_decode' (the sampled crop only, fused; its shape),
    'train_image' (crop, resize, flip: train_view's images). Beside the tfcnn.data.bench rows of the same
    names, they show where DALI's time goes."""
    if stage not in STAGES:
        raise pipeline.DataError(f"stage must be one of {', '.join(STAGES)}, received: {stage!r}")
    device_id = _device_id(f"--data_backend dali_{device}") if device == "gpu" else None
    if missing_reason():
        raise RuntimeError(missing_reason())
    files = pipeline.list_shards(data_dir, "train")
    rank_records(data_dir, "train", 1, 0)  # the indexes' check
    decoder = "mixed" if device == "gpu" else "cpu"

    def outputs():
        features = read(files, training=False, boxes=True)
        encoded = features["image/encoded"]
        if stage == "decode":
            return fn.decoders.image(encoded, device=decoder, output_type=types.RGB).shape()
        boxes = [features[f"image/object/bbox/{k}"] for k in BOX_KEYS]
        view = preprocessing.TRAIN_VIEWS["torchvision"]
        if stage == "train_image":
            return train_view(encoded, boxes, image_size, view, decoder)
        anchor, extent = crop_window(fn.peek_image_shape(encoded), boxes, view)
        return fn.decoders.image_slice(encoded, anchor, extent, device=decoder, output_type=types.RGB,
                                       axis_names="HW").shape()

    images = stage == "train_image"
    shape = (batch_size, image_size, image_size, 3) if images else (batch_size, 3)
    return _dali_dataset(lambda: (outputs(),), batch_size, (shape,), (tf.uint8 if images else tf.int64,), device_id,
                         num_threads, 0)
