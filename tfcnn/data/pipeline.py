"""build_dataset: TFRecord shards -> per-rank file shard -> decoded, augmented uint8 batches.

Training stream (per rank): every epoch, this rank's files in a seeded order, read interleaved and
shuffled through a buffer; each record is decoded with a stateless random crop/flip seeded by
(epoch seed, position), batched with drop_remainder across epoch boundaries, label-checked per batch
and prefetched. Batches stay uint8 (4x fewer bytes to batch and to copy to the GPU than float32);
the model's step normalizes them (`preprocessing.normalize_batch`). The stream is a pure function of
(seed, rank's files, start_step): a run resumed at step k sees exactly the batches an uninterrupted
run sees from step k on.

Validation: this rank's files in order, centre crop, every record exactly once over all ranks (the
last batch may be partial), no repeat.
"""
from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from tfcnn.data import augment as augment_ops
from tfcnn.data import preprocessing, records
from tfcnn.options import EVAL_CROPS, parse_policy

AUTOTUNE = tf.data.AUTOTUNE


LABEL_ERROR = "label out of range"
ADD_VALIDATION = ("it holds training shards only: `python -m imagenet_prep.build_tfrecords --validation_dir DIR` "
                  "adds the validation split, or a build into a new --output_dir with `--validation_fraction 0.1` "
                  "holds a tenth of the training images out as one")


class DataError(ValueError):
    """The data directory or its records cannot serve the request."""


def list_shards(data_dir: str, split: str) -> list[str]:
    """All shard files of a split, sorted; an error naming the glob when there are none."""
    if split not in records.SPLITS:
        raise DataError(f"split must be one of {', '.join(records.SPLITS)}, received: {split!r}")
    pattern = os.path.join(data_dir, records.shard_pattern(split))
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        if not tf.io.gfile.isdir(data_dir):  # a mistyped path, named as such rather than as missing shards
            raise DataError(f"--data_dir {data_dir}: no such directory")
        only_train = split == "validation" and tf.io.gfile.glob(os.path.join(data_dir, records.shard_pattern("train")))
        raise DataError(f"no {split} shards in --data_dir {data_dir}: nothing matches {pattern}; "
                        + (records.conversion_advice(data_dir) or (ADD_VALIDATION if only_train else None)
                           or "make them with `python -m imagenet_prep.build_tfrecords`"))
    return files


def shard_files(files: list[str], num_shards: int, shard_index: int) -> list[str]:
    """This rank's files: every num_shards-th file from shard_index (disjoint, together complete)."""
    if not 0 <= shard_index < num_shards:
        raise DataError(f"shard_index must be in [0, {num_shards}), received: {shard_index}")
    return files[shard_index::num_shards]


def count_records(data_dir: str, files: list[str]) -> int:
    """Records in `files`, from dataset.json when it knows them all, else by reading the files."""
    known = {}
    for split in records.read_metadata(data_dir).get("splits", {}).values():
        known.update(split.get("shards", {}))
    names = [os.path.basename(f) for f in files]
    if all(n in known for n in names):
        return sum(known[n] for n in names)
    return int(tf.data.TFRecordDataset(files).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def stored_image_size(data_dir: str, sample: int = 256) -> int | None:
    """The median shorter side of the train split's stored images (their image/height and image/width), read from
    up to `sample` records spread over up to 16 of its shards; None where the records do not say (or cannot be
    read: training then names the damage)."""
    import math

    import numpy as np

    files = list_shards(data_dir, "train")
    picked = files[::math.ceil(len(files) / 16)]
    per_file = math.ceil(sample / len(picked))
    schema = {key: records.features()[key] for key in ("image/height", "image/width")}
    first = tf.data.Dataset.from_tensor_slices(picked).interleave(
        lambda path: tf.data.TFRecordDataset(path).take(per_file), cycle_length=1)
    try:
        parsed = tf.io.parse_example(next(iter(first.batch(sample))), schema)
    except tf.errors.OpError:
        return None
    sides = np.minimum(parsed["image/height"].numpy(), parsed["image/width"].numpy())
    sides = sides[sides > 0]  # 0: a record that does not say
    return int(np.median(sides)) if sides.size else None


def num_classes_of(data_dir: str | None, default: int = 1000) -> int:
    """Number of classes from labels.txt beside the shards, else `default`."""
    labels = records.read_labels(data_dir) if data_dir else None
    return len(labels) if labels else default


def build_dataset(data_dir: str | None, split: str, batch_size: int, image_size: int, *, num_classes: int = 1000,
                  num_shards: int = 1, shard_index: int = 0, seed: int = 0, start_step: int = 0,
                  crop_fraction: float = 0.875, interpolation: str = "bilinear", eval_crop: str = "torchvision",
                  train_crop="torchvision", augment="none",
                  shuffle_buffer: int = 10_000, synthetic: bool = False, deterministic: bool = True):
    """A dataset of (images uint8 [batch, size, size, 3] RGB, labels int32 [batch]).

    split 'train': infinite, augmented, batches of exactly batch_size, starting at `start_step`.
    split 'validation': one pass, the eval_crop view (preprocessing.eval_view: torchvision's resize then
    centre crop, `interpolation` bilinear or bicubic, antialiased; or the NGC scripts' central crop resized),
    the last batch may be smaller.
    data_dir None or synthetic=True: random images generated once and repeated (benchmarks).
    num_shards / shard_index: the Horovod size / rank; each rank reads a disjoint set of files.
    train_crop: the training view, a preprocessing.TRAIN_VIEWS name or a preprocessing.TrainView.
    augment: a training image policy (tfcnn.data.augment: none, randaugment:N,M, autoaugment:imagenet),
    applied after the crop and flip, seeded by the element; validation never augments.
    """
    view = _check_args(batch_size, image_size, num_classes, start_step, train_crop, crop_fraction, interpolation,
                       eval_crop)
    policy = parse_policy(augment)
    if synthetic or data_dir is None:
        return synthetic_dataset(batch_size, image_size, num_classes, seed)
    files = shard_files(list_shards(data_dir, split), num_shards, shard_index)
    options = tf.data.Options()
    options.deterministic = deterministic
    options.experimental_optimization.map_parallelization = True
    if split == "train":
        if not files:
            raise DataError(f"{len(list_shards(data_dir, split))} train shards in {data_dir} cannot feed "
                            f"{num_shards} ranks: rebuild with at least {num_shards} --train_shards")
        per_epoch = count_records(data_dir, files)
        ds = _train_records(files, per_epoch, seed, start_step * batch_size, shuffle_buffer)

        def transform(element_seed, serialized):
            features = records.parse_example(serialized)
            image = preprocessing.train_image(features["encoded"], features["boxes"], element_seed, image_size, view)
            return augment_ops.apply_policy(image, policy, element_seed), features["label"], features["filename"]

        ds = ds.map(transform, num_parallel_calls=AUTOTUNE).batch(batch_size, drop_remainder=True)
    else:
        ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
        ds = ds.interleave(read_records, cycle_length=4, num_parallel_calls=AUTOTUNE, deterministic=True)

        def transform(serialized):
            features = records.parse_example(serialized)
            image = preprocessing.eval_image(features["encoded"], image_size, crop_fraction, interpolation, eval_crop)
            return image, features["label"], features["filename"]

        ds = ds.map(transform, num_parallel_calls=AUTOTUNE).batch(batch_size, drop_remainder=False)
    ds = ds.map(lambda images, labels, filenames: (images, _checked_labels(labels, filenames, num_classes)),
                num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE).with_options(options)


def read_records(path):
    """Records of one shard file, with a large read buffer (fewer, bigger reads)."""
    return tf.data.TFRecordDataset(path, buffer_size=8 << 20)


def _train_records(files, per_epoch, seed, start_record, shuffle_buffer):
    """(element seed [2], serialized record) over endless epochs, from record number start_record on.

    Epoch e shuffles files and records with seed + e; the element seed is (seed + e, position in the
    epoch). Skipping happens on raw records, before any decoding, so resuming mid-epoch is cheap.
    """
    if per_epoch < 1:
        raise DataError(f"the training shards {files[:3]}... hold no records")
    start_epoch, offset = divmod(start_record, per_epoch)
    num_files = len(files)
    files = tf.constant(files, tf.string)

    def epoch(e):
        # Tensor-valued shuffle seeds break when the global seed is 0 (tf.random.set_seed(0) makes
        # TF compare the tensor as a Python bool); this function graph uses explicit seeds only.
        tf.compat.v1.get_default_graph().seed = None
        epoch_seed = tf.cast(seed, tf.int64) + e
        ds = tf.data.Dataset.from_tensor_slices(files).shuffle(num_files, seed=epoch_seed)
        ds = ds.interleave(read_records, cycle_length=min(num_files, 16), block_length=1,
                           num_parallel_calls=AUTOTUNE, deterministic=True)
        ds = ds.shuffle(shuffle_buffer, seed=epoch_seed).enumerate()
        return ds.map(lambda i, record: (tf.stack([epoch_seed, i]), record))

    return tf.data.Dataset.range(start_epoch, 2**62).flat_map(epoch).skip(offset)


def _checked_labels(labels, filenames, num_classes):
    """The batch's labels; fails naming the images whose label does not fit the model's classes."""
    bad = tf.logical_or(labels < 0, labels >= num_classes)
    with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [
            LABEL_ERROR + " [1, num_classes] in records of images", tf.boolean_mask(filenames, bad),
            "labels (1-based):", tf.boolean_mask(labels, bad) + 1, "num_classes:", num_classes], summarize=8)]):
        return tf.identity(labels)


def synthetic_dataset(batch_size, image_size, num_classes, seed=0):
    """One random uint8 batch, generated once, repeated forever: input-pipeline-free benchmarking."""
    images = tf.random.stateless_uniform([batch_size, image_size, image_size, 3], seed=[seed, 1], maxval=256,
                                         dtype=tf.int32)
    labels = tf.random.stateless_uniform([batch_size], seed=[seed, 2], maxval=num_classes, dtype=tf.int32)
    return tf.data.Dataset.from_tensors((tf.cast(images, tf.uint8), labels)).repeat()


def _check_args(batch_size, image_size, num_classes, start_step, train_crop, crop_fraction, interpolation,
                eval_crop="torchvision"):
    """DataError naming the argument; returns the training view."""
    for name, value in (("batch_size", batch_size), ("image_size", image_size), ("num_classes", num_classes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DataError(f"{name} must be a positive integer, received: {value!r}")
    if start_step < 0:
        raise DataError(f"start_step must be >= 0, received: {start_step}")
    try:
        view = preprocessing.train_view(train_crop)
    except ValueError as error:
        raise DataError(str(error)) from None
    if not (0 < view.area[0] <= view.area[1] <= 1):
        raise DataError(f"the training view's area range must satisfy 0 < min <= max <= 1, received: {view.area}")
    if not (0 < view.aspect[0] <= view.aspect[1]):
        raise DataError(f"the training view's aspect range must satisfy 0 < min <= max, received: {view.aspect}")
    if not 0 < crop_fraction <= 1:
        raise DataError(f"crop_fraction must be in (0, 1], received: {crop_fraction}")
    if interpolation not in preprocessing.INTERPOLATIONS:
        raise DataError(f"interpolation must be one of {', '.join(preprocessing.INTERPOLATIONS)}, "
                        f"received: {interpolation!r}")
    if eval_crop not in EVAL_CROPS:
        raise DataError(f"eval_crop must be one of {', '.join(EVAL_CROPS)}, received: {eval_crop!r}")
    return view


def find_corrupt_record(files: list[str]) -> str | None:
    """Reads `files` one by one and returns a description of the first record that cannot be parsed
    or decoded (file, record number, error), or None. Slow: for explaining a pipeline failure."""
    for path in files:
        try:
            for index, serialized in enumerate(tf.data.TFRecordDataset(path)):
                name = ""
                try:
                    features = records.parse_example(serialized)
                    name = f" ({features['filename'].numpy().decode(errors='replace')})"
                    tf.io.decode_jpeg(features["encoded"], channels=3)
                except (tf.errors.OpError, ValueError) as error:
                    return f"{path}: record {index}{name}: {_first_line(error)}"
        except tf.errors.OpError as error:
            return f"{path}: unreadable TFRecord file: {_first_line(error)}"
    return None


def explain_failure(error, data_dir: str, split: str, num_shards: int = 1, shard_index: int = 0) -> Exception:
    """For an error the pipeline raised: a DataError naming the first corrupt record in this rank's
    files, or the error itself when every record reads fine (then the failure lies elsewhere) or when
    it already names its images (a label out of range)."""
    if LABEL_ERROR in str(error):
        return error
    found = find_corrupt_record(shard_files(list_shards(data_dir, split), num_shards, shard_index))
    return DataError(f"corrupt {split} record: {found}") if found else error


@contextlib.contextmanager
def corrupt_records_named(data_dir: str | None, split: str, num_shards: int = 1, shard_index: int = 0):
    """Around a loop over build_dataset(data_dir, split, ...): a parse or decode error leaves it as a
    DataError naming the corrupt record (see explain_failure). No-op for synthetic data."""
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        if not data_dir:
            raise
        print(f"tfcnn: reading the {split} data failed; looking for a corrupt record in this rank's shards",
              flush=True)
        raise explain_failure(error, data_dir, split, num_shards, shard_index) from error


def _first_line(error) -> str:
    return (getattr(error, "message", None) or str(error)).strip().splitlines()[0]
