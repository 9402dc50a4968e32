"""Training and evaluation batches from data held in memory: `(x, y)` NumPy arrays or a tf.data.Dataset of
(image, label) examples, for `tfcnn.train(train_data=..., val_data=...)` and `tfcnn.evaluate(data=...)`.

Images are RGB, uint8 or float on the 0-255 scale, [height, width, 3] of any size (a Dataset's examples, or a
list's, may differ in size: such a list is read as the Dataset of its images); grayscale ones, [height, width] or
[height, width, 1] (keras.datasets' MNIST, scikit-learn's digits), have their grey repeated over R, G and B, as
imagenet_prep does with grayscale JPEGs, so the models (and any ImageNet weights) see RGB. Labels are 0-based
integers ([count], or [count, 1] as keras.datasets gives them). Arrays on another scale (floats on 0-1, normalized
already, or 16-bit) are refused with the way out. The batches are what the TFRecord pipeline yields (uint8 [batch,
size, size, 3], int32 [batch]), so the trainer and the evaluator never know where they came from.

Each rank takes every size-th example from its rank on (arrays: x[rank::size]; a Dataset: its
`shard(size, rank)`): the shares are disjoint and cover the data. Training mirrors the records' stream
(tfcnn.data.pipeline): every epoch reshuffles the rank's share with the run's seed + the epoch, each example
gets the training view's random crop and flip seeded by (epoch seed, position), and a run resumed at step k
starts at the example an uninterrupted run reaches at step k. So a resumed run sees the same batches as an
uninterrupted one when the data are the same arrays, or a Dataset that yields the same examples in the same
order every time it is iterated; a Dataset that draws its own randomness resumes at the right position but
not bit for bit. Evaluation takes each example exactly once over all ranks, without shuffling.
"""
from __future__ import annotations

import collections.abc
import os
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf

from tfcnn.data import augment as augment_ops
from tfcnn.data import preprocessing
from tfcnn.options import parse_policy

AUTOTUNE = tf.data.AUTOTUNE
# A Dataset is shuffled through a window of this many examples, as they come; arrays are shuffled by index, an
# exact shuffle of any size (as the records' files are).
SHUFFLE_BUFFER = 10_000
# Arrays are copied into TensorFlow's memory this many bytes at a time (converted whole, they are copied twice).
COPY_CHUNK_BYTES = 64 << 20


def check(data, what: str = "train_data", num_classes: int | None = None):
    """`data` as share() reads it ((x, y) NumPy arrays, or the Dataset unbatched), or a ValueError naming
    `what` and the problem: what can be checked without a model, before one is built or its weights load."""
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if isinstance(spec, dict):  # TensorFlow Datasets' examples, loaded without as_supervised
            keys = ", ".join(map(repr, spec))
            raise ValueError(f"{what}: a Dataset of (image, label) pairs is needed, received dicts ({keys}): "
                             f"tfds.load(..., as_supervised=True), or data.map(lambda example: (example['image'], "
                             f"example['label']))")
        if not (isinstance(spec, tuple) and len(spec) == 2):
            raise ValueError(f"{what}: a Dataset of (image, label) pairs is needed, received elements {spec}")
        image_spec, label_spec = spec
        if image_spec.shape.rank == 4:  # batched: the batches are tfcnn's to make
            data, image_spec = data.unbatch(), tf.TensorSpec(image_spec.shape[1:], image_spec.dtype)
            label_spec = tf.TensorSpec(label_spec.shape[1:], label_spec.dtype)
        if label_spec.shape.rank == 1 and label_spec.shape[0] == 1:  # keras.datasets' [count, 1] labels, sliced
            data, label_spec = data.map(lambda image, label: (image, label[0])), tf.TensorSpec([], label_spec.dtype)
        if label_spec.shape.rank == 1 and (label_spec.shape[0] or 0) > 1:  # Keras' label_mode="categorical"
            raise ValueError(f"{what}: each label is a vector of {label_spec.shape[0]} (one-hot?); pass the class "
                             f"numbers: image_dataset_from_directory(..., label_mode='int'), or "
                             f"data.map(lambda image, label: (image, tf.argmax(label, -1)))")
        if label_spec.shape.rank not in (0, None):
            raise ValueError(f"{what}: each label must be one class number, received labels of shape "
                             f"{label_spec.shape}")
        if image_spec.shape.rank == 2:  # [height, width] grayscale: given its channel axis
            data, image_spec = data.map(lambda image, label: (image[..., None], label)), \
                tf.TensorSpec([*image_spec.shape, 1], image_spec.dtype)
        if image_spec.shape.rank != 3 or image_spec.shape[-1] not in (1, 3, None):
            raise ValueError(f"{what}: images must be [height, width, 3] RGB or [height, width(, 1)] grayscale, "
                             f"received shape {image_spec.shape}")
        if not label_spec.dtype.is_integer:
            cast = ("" if label_spec.dtype == tf.string else
                    ": cast them, data.map(lambda image, label: (image, tf.cast(label, tf.int32)))")
            raise ValueError(f"{what}: labels must be integers (0-based classes), received "
                             f"{label_spec.dtype.name}{cast}")
        if int(data.cardinality()) == tf.data.INFINITE_CARDINALITY:
            raise ValueError(f"{what}: the Dataset is infinite; pass one epoch of it (tfcnn repeats it)")
        return data
    if isinstance(data, (str, os.PathLike)):  # a folder of class folders, as Keras' loaders read them
        raise ValueError(f"{what}: {os.fspath(data)!r} is a path, not data: pass the Dataset of a folder of class "
                         f"folders, tf.keras.utils.image_dataset_from_directory({os.fspath(data)!r}), or convert it "
                         f"to TFRecords (python -m imagenet_prep.build_tfrecords --train_dir ...) and pass data_dir")
    if not (isinstance(data, (tuple, list)) and len(data) == 2) or _pairs(data):
        raise ValueError(f"{what}: pass (x, y) arrays or a tf.data.Dataset of (image, label), received "
                         f"{type(data).__name__}{_kind_advice(data)}")
    if isinstance(data[0], (list, tuple)) and len({np.shape(image) for image in data[0]}) > 1:
        return _one_by_one(data[0], data[1], what, num_classes)
    try:
        y = np.asarray(data[1])
    except ValueError:
        raise ValueError(f"{what}: y must be [count] integer labels, one class number per image; received labels "
                         f"of uneven shapes") from None
    x = np.asarray(data[0])
    if x.ndim == 3 and x.shape[-1] in (1, 3):  # grayscale images 1 or 3 pixels wide are none
        raise ValueError(f"{what}: x of shape {x.shape} is one image, not a batch of them: pass x[None] for one "
                         f"([count, height, width, 3])")
    if x.ndim == 3:  # [count, height, width] grayscale: given its channel axis (a view, no copy)
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3):
        raise ValueError(f"{what}: x must be [count, height, width, 3] RGB images or [count, height, width(, 1)] "
                         f"grayscale ones, received shape {np.shape(data[0])}")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise ValueError(f"{what}: x must hold numbers on the 0-255 scale, received dtype {x.dtype}")
    _check_scale(x, what)
    if y.ndim == 2 and y.shape[1] == 1:  # [count, 1], as keras.datasets gives labels: Keras' fit takes them too
        y = y[:, 0]
    if y.ndim == 2 and y.shape == (len(x), y.shape[1]) and len(x) and np.all((y == 0) | (y == 1)) \
            and np.all(y.sum(axis=1) == 1):
        raise ValueError(f"{what}: y holds one-hot rows ([count, {y.shape[1]}]); pass the class numbers, "
                         f"y.argmax(axis=1)")
    if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{what}: y must be [count] integer labels matching x's {len(x)} images, received "
                         f"shape {y.shape}, dtype {y.dtype}{_label_advice(y) if y.shape == (len(x),) else ''}")
    if len(x) and y.min() < 0:
        raise ValueError(f"{what}: label {int(y.min())} is negative: labels are 0-based class numbers")
    if len(x) and num_classes is not None and y.max() >= num_classes:
        raise ValueError(f"{what}: label {int(y.max())} is not a 0-based class below num_classes {num_classes}")
    return x, y


def _pairs(data) -> bool:
    """Whether `data` is a list of (image, label) pairs (a list of two of them looks like (x, y) otherwise)."""
    return (isinstance(data, (tuple, list)) and len(data) > 0
            and all(isinstance(item, (tuple, list)) and len(item) == 2 and np.ndim(item[1]) == 0 for item in data))


def _kind_advice(data) -> str:
    """The way from other common holders of images and labels to (x, y) or a Dataset."""
    if _pairs(data):
        return " of (image, label) pairs: pass tuple(zip(*pairs)), their images and their labels"
    if isinstance(data, dict) and len(data) == 2:
        image, label = list(data)
        return f" of {image!r} and {label!r}: pass (data[{image!r}], data[{label!r}])"
    if isinstance(data, tf.keras.utils.Sequence):
        return (" (a Keras Sequence of batches): pass its arrays as (x, y), or its batches as a Dataset, "
                "tf.data.Dataset.from_generator(lambda: (data[i] for i in range(len(data))), output_signature=...)"
                ".unbatch()")
    if isinstance(data, collections.abc.Iterator):  # a generator: read once, where training reads every epoch
        return (" (an iterator, which can be read only once): pass tf.data.Dataset.from_generator(a function that "
                "makes it, output_signature=(tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.int64)))")
    return ""


def _one_by_one(images, labels, what: str, num_classes: int | None) -> tf.data.Dataset:
    """A list of images of different sizes (arrays, PIL images) and their labels as a Dataset of (float32 [h, w,
    channels] image, label), each image and label checked as arrays are, named by its place in the list."""
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (len(images),):
        raise ValueError(f"{what}: y must be [count] integer labels matching x's {len(images)} images, received "
                         f"shape {y.shape}")
    checked = []
    for index, image in enumerate(images):
        name = f"{what}: x[{index}]"
        x, label = check((image_array(image, name)[None], y[index:index + 1]), name, num_classes)
        checked.append((x[0], label[0]))
    return tf.data.Dataset.from_generator(
        lambda: ((image.astype(np.float32), np.int64(label)) for image, label in checked),
        output_signature=(tf.TensorSpec([None, None, None], tf.float32), tf.TensorSpec([], tf.int64)))


def image_array(image, name: str) -> np.ndarray:
    """One image (an array, or a PIL image: palette, alpha, CMYK and other modes to RGB, grey and 16-bit ones as
    they are) as a [height, width, channels] array of 1 or 3 channels, or a ValueError naming it."""
    if is_pil_image(image):
        image = image if image.mode in ("RGB", "L") or image.mode.startswith(("I", "F")) else image.convert("RGB")
    image = np.asarray(image)
    if image.ndim not in (2, 3) or image.ndim == 3 and image.shape[-1] not in (1, 3):
        raise ValueError(f"{name} must be a [height, width, 3] RGB or [height, width(, 1)] grayscale image, received "
                         f"shape {image.shape}")
    return image.reshape(*image.shape[:2], -1)


def is_pil_image(image) -> bool:
    """Whether `image` is a PIL image (told by its methods: tfcnn does not import Pillow for this)."""
    return hasattr(image, "mode") and hasattr(image, "convert") and hasattr(image, "getpixel")


def _label_advice(y: np.ndarray) -> str:
    """The way from labels of another dtype to class numbers: whole numbers as floats (a CSV's), booleans or
    Python objects are cast; names are numbered."""
    try:
        with np.errstate(invalid="ignore"):
            whole = np.array_equal(y.astype(np.int64), y)
    except (TypeError, ValueError):  # names
        whole = False
    if whole:
        return ": pass y.astype(int)"
    if y.dtype.kind in "USO":
        return ": number the classes, e.g. names, y = np.unique(y, return_inverse=True)"
    return ""


def _check_scale(x: np.ndarray, what: str):
    """Refuses images on another scale: 16-bit ones (up to 65535), floats on 0-1 (x / 255) or normalized
    already: trained on, they would give a model whose exports and evaluation, which take 0-255 pixels, see
    other inputs than it learnt from."""
    if not len(x) or x.dtype == np.uint8:
        return
    low, high, floats = float(x.min()), float(x.max()), np.issubdtype(x.dtype, np.floating)
    if low < 0:
        raise ValueError(f"{what}: x holds values from {low:.3g} to {high:.3g}: normalized images? tfcnn takes RGB "
                         f"on the 0-255 scale and normalizes them itself (with the model's mean and std)")
    # Floats a little above 255 are a bicubic resize's overshoot (the pipeline clips them); 16- and 12-bit
    # images reach 4095-65535.
    if high > (2 * 255 if floats else 255):
        raise ValueError(f"{what}: x holds values from {low:.3g} to {high:.3g}: 16-bit images? tfcnn takes RGB on "
                         f"the 0-255 scale, as its exports and evaluation do: pass x / 257 (65535 -> 255)")
    if floats and 0 < high <= 1:
        raise ValueError(f"{what}: x holds values from {low:.3g} to {high:.3g}: images on the 0-1 scale? tfcnn takes "
                         f"RGB on the 0-255 scale, as its exports and evaluation do: pass x * 255")


def _as_example(image, label):
    image = tf.cast(image, tf.float32)
    if image.shape[-1] != 3:  # grayscale, or a Dataset's channels unknown until read: the grey over R, G and B
        image = tf.broadcast_to(image, tf.concat([tf.shape(image)[:-1], [3]], 0))
    return image, tf.cast(label, tf.int32)


def count(data) -> int:
    """How many examples `data` holds: arrays by their length (not copied into TensorFlow for it), a Dataset by
    its cardinality, or one pass when TensorFlow cannot tell it."""
    data = check(data)
    return _size(data) if isinstance(data, tf.data.Dataset) else len(data[0])


def count_and_classes(data) -> tuple[int, int]:
    """(how many examples, the largest label + 1) of `data`, in the one pass that counts a Dataset."""
    data = check(data)
    if not isinstance(data, tf.data.Dataset):
        return len(data[0]), int(data[1].max()) + 1 if len(data[0]) else 0
    count, top = data.reduce((tf.constant(0, tf.int64), tf.constant(-1, tf.int32)),
                             lambda state, example: (state[0] + 1, tf.maximum(state[1], tf.cast(example[1], tf.int32))))
    return int(count), int(top) + 1


def _size(dataset) -> int:
    size = int(dataset.cardinality())
    return size if size >= 0 else int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


class Share(NamedTuple):
    """A rank's examples: `elements` (a Dataset), each made a (float32 image, int32 label) example by `example`
    (after any shuffle, through a window of `shuffle_buffer` elements)."""
    elements: tf.data.Dataset
    example: Callable
    shuffle_buffer: int


def share(data, num_shards: int, shard_index: int, what: str, num_classes: int) -> Share:
    """This rank's examples, every num_shards-th from shard_index on. Those of arrays are indices into one copy of
    the rank's share in host memory, so neither a shuffle nor TensorFlow's rewrite of the input pipeline (which
    copies the tensors it captures) copies images; those of a Dataset are its own, cast to float32 after the
    shuffle. (Examples shuffled as float32 held up to four times a uint8 array in the buffer, beside a copy.)"""
    data = check(data, what, num_classes)
    if isinstance(data, tf.data.Dataset):  # a window larger than an epoch holds the epoch
        return Share(data.shard(num_shards, shard_index), _as_example, SHUFFLE_BUFFER)
    x, y = data[0][shard_index::num_shards], data[1][shard_index::num_shards]
    images, labels = _host_copy(x), tf.convert_to_tensor(y)
    return Share(tf.data.Dataset.range(len(x)), lambda i: _as_example(tf.gather(images, i), tf.gather(labels, i)),
                 len(x))


def _host_copy(x: np.ndarray) -> tf.Variable:
    """x in a host-memory variable, as uint8 (integers, checked to be 0-255) or float32 (floats: what _as_example
    casts them to), copied a chunk at a time: converted whole, x was held twice for a while. (Through the op
    itself: `held[a:b].assign()` reads the slice first, whose hold on the buffer makes the assignment copy it all.)"""
    dtype = np.uint8 if np.issubdtype(x.dtype, np.integer) else np.float32
    with tf.device("/CPU:0"):
        held = tf.Variable(tf.zeros(x.shape, dtype), trainable=False)
    per_chunk = max(1, COPY_CHUNK_BYTES // max(1, np.dtype(dtype).itemsize * int(np.prod(x.shape[1:]))))
    for start in range(0, len(x), per_chunk):
        tf.raw_ops.ResourceStridedSliceAssign(ref=held.handle, begin=[start], end=[start + per_chunk], strides=[1],
                                              value=x[start:start + per_chunk].astype(dtype, copy=False))
    return held


def train_batches(data, *, batch_size: int, image_size: int, num_classes: int, seed: int, start_step: int = 0,
                  num_shards: int = 1, shard_index: int = 0, train_crop="torchvision", augment="none"):
    """Endless training batches of this rank's share from `start_step` on (see the module docstring)."""
    view, policy = preprocessing.train_view(train_crop), parse_policy(augment)
    mine = share(data, num_shards, shard_index, "train_data", num_classes)
    per_epoch = _size(mine.elements)  # arrays' indices: known at once
    if per_epoch < batch_size:
        raise ValueError(f"train_data: this rank's share ({per_epoch} examples of every {num_shards}th) cannot fill "
                         f"one batch of {batch_size}: pass more data or a smaller batch_size")
    start_epoch, offset = divmod(start_step * batch_size, per_epoch)

    def epoch(e):
        tf.compat.v1.get_default_graph().seed = None  # explicit seeds only (as tfcnn.data.pipeline's epochs)
        epoch_seed = tf.cast(seed, tf.int64) + e
        shuffled = mine.elements.shuffle(mine.shuffle_buffer, seed=epoch_seed).map(mine.example).enumerate()
        return shuffled.map(lambda i, example: (tf.stack([epoch_seed, i]), example))

    def transform(element_seed, example):
        image, label = example
        image = preprocessing.decoded_train_image(image, element_seed, image_size, view)
        return augment_ops.apply_policy(image, policy, element_seed), _checked(label, num_classes)

    stream = tf.data.Dataset.range(start_epoch, 2**62).flat_map(epoch).skip(offset)
    return stream.map(transform, num_parallel_calls=AUTOTUNE).batch(batch_size, drop_remainder=True).prefetch(
        AUTOTUNE)


def eval_batches(data, *, batch_size: int, image_size: int, num_classes: int, crop_fraction: float,
                 interpolation: str = "bilinear", eval_crop: str = "torchvision", num_shards: int = 1,
                 shard_index: int = 0, what: str = "val_data"):
    """One pass over this rank's share: images already image_size x image_size as they are (prepared data),
    others the evaluation view (resize, centre crop) the records get. what: the data's name in errors."""
    def transform(image, label):
        shape = tf.shape(image)
        prepared = tf.logical_and(tf.equal(shape[0], image_size), tf.equal(shape[1], image_size))
        image = tf.cond(prepared, lambda: preprocessing.to_uint8(image),
                        lambda: preprocessing.eval_view(image, image_size, crop_fraction, interpolation, eval_crop))
        return tf.ensure_shape(image, [image_size, image_size, 3]), _checked(label, num_classes)

    mine = share(data, num_shards, shard_index, what, num_classes)
    return mine.elements.map(mine.example).map(transform, num_parallel_calls=AUTOTUNE).batch(batch_size).prefetch(
        AUTOTUNE)


def _checked(label, num_classes):
    with tf.control_dependencies([tf.debugging.assert_less(
            label, num_classes, message=f"a label of the data in memory is not below num_classes {num_classes}")]):
        return tf.identity(label)
