"""The TFRecord schema, shared by `imagenet_prep` (writer) and `tfcnn.data` (reader).

The features are those of TensorFlow's Inception ImageNet conversion script, so shards made by older
tools read here too. Labels are 1-based (0 is reserved for "background"); the reader shifts them to
0-based class indices. Bounding boxes are normalized to [0, 1] of the stored image.

Beside the shards, `imagenet_prep` writes:
- `labels.txt`: one line per class, `<synset>\t<human-readable text>`; line i is label i (1-based);
- `dataset.json`: the number of records in every shard, so the pipeline knows the epoch length
  without reading the data, and the options the shards were built with.
"""
from __future__ import annotations

import functools
import json
import os
import re

from tfcnn.fileio import atomic_write_text

# TensorFlow loads where a record is made or parsed, not on import: the converter's parent process and
# `python -m tfcnn.data.dali_index` use the names and files below only (TensorFlow's import takes seconds).
LABELS_FILE = "labels.txt"
METADATA_FILE = "dataset.json"
SPLITS = ("train", "validation")
# The image files imagenet_prep converts (by their content; these names pick them out of a folder).
IMAGE_EXTENSIONS = {".jpeg", ".jpg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def is_image_name(name: str) -> bool:
    """A file name imagenet_prep takes as an image: an image extension, not hidden (.DS_Store, ._x.jpg)."""
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS
_SHARD_RE = re.compile(r"^(?P<split>train|validation)-(?P<index>\d{5})-of-(?P<count>\d{5})$")


@functools.lru_cache(maxsize=None)
def features() -> dict:
    """The schema: {feature key: tf.io.FixedLenFeature or VarLenFeature}."""
    import tensorflow as tf

    return {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string, default_value="JPEG"),
        "image/height": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "image/width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "image/colorspace": tf.io.FixedLenFeature([], tf.string, default_value="RGB"),
        "image/channels": tf.io.FixedLenFeature([], tf.int64, default_value=3),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/class/text": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/label": tf.io.VarLenFeature(tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string, default_value=""),
    }


# What the reader needs of a record: parsing only these is cheaper than the whole schema.
READ_KEYS = ("image/encoded", "image/class/label", "image/filename", "image/object/bbox/ymin",
             "image/object/bbox/xmin", "image/object/bbox/ymax", "image/object/bbox/xmax")


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00000-of-01024`: the names the Inception scripts use."""
    return f"{split}-{index:05d}-of-{count:05d}"


def shard_pattern(split: str) -> str:
    return f"{split}-?????-of-?????"


def conversion_advice(data_dir: str) -> str:
    """For a directory of image class folders given where records belong: the imagenet_prep command that
    converts them (its train/ and val/ or validation/ folders, or itself as the training split); else ''."""
    def holds_images(folder):
        with os.scandir(folder) as entries:
            return any(e.is_file() and is_image_name(e.name) for e in entries)

    if not os.path.isdir(data_dir):
        return ""
    root = os.path.normpath(data_dir)
    folders = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    validation = next((n for n in ("val", "validation") if n in folders), None)
    if "train" in folders:
        flags = f"--train_dir {os.path.join(root, 'train')}" + (
            f" --validation_dir {os.path.join(root, validation)}" if validation else "")
    elif any(holds_images(os.path.join(root, n)) for n in folders):
        flags = f"--train_dir {root}"
    else:
        return ""
    return (f"{data_dir} holds folders of images, not TFRecords: convert them first, `python -m "
            f"imagenet_prep.build_tfrecords {flags} --output_dir {root}-tfrecords`, then pass that --output_dir")


def is_shard_name(name: str) -> bool:
    return _SHARD_RE.match(name) is not None


def make_example(*, encoded: bytes, height: int, width: int, label: int, synset: str, text: str,
                 filename: str, boxes=(), image_format: str = "JPEG") -> tf.train.Example:
    """One record. boxes: (xmin, ymin, xmax, ymax) tuples normalized to [0, 1]; they take the image's label."""
    import tensorflow as tf

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    def strings(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode() if isinstance(v, str) else v for v in values]))

    boxes = list(boxes)
    feature = {
        "image/encoded": strings([encoded]),
        "image/format": strings([image_format]),
        "image/height": ints([height]),
        "image/width": ints([width]),
        "image/colorspace": strings(["RGB"]),
        "image/channels": ints([3]),
        "image/class/label": ints([label]),
        "image/class/synset": strings([synset]),
        "image/class/text": strings([text]),
        "image/object/bbox/xmin": floats(b[0] for b in boxes),
        "image/object/bbox/ymin": floats(b[1] for b in boxes),
        "image/object/bbox/xmax": floats(b[2] for b in boxes),
        "image/object/bbox/ymax": floats(b[3] for b in boxes),
        "image/object/bbox/label": ints([label] * len(boxes)),
        "image/filename": strings([filename]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def parse_example(serialized: tf.Tensor) -> dict:
    """Parses one serialized record into dense tensors.

    Returns encoded (string), label (int32, 0-based), boxes (float32 [N, 4] as ymin, xmin, ymax, xmax,
    the order `tf.image.sample_distorted_bounding_box` takes) and filename.
    """
    import tensorflow as tf

    schema = features()
    f = tf.io.parse_single_example(serialized, {key: schema[key] for key in READ_KEYS})
    coords = [f[f"image/object/bbox/{k}"].values for k in ("ymin", "xmin", "ymax", "xmax")]
    return {
        "encoded": f["image/encoded"],
        "label": tf.cast(f["image/class/label"], tf.int32) - 1,
        "boxes": tf.stack(coords, axis=1),
        "filename": f["image/filename"],
    }


def write_labels(output_dir: str, classes: list[tuple[str, str]]) -> None:
    """classes: [(synset, text)] in label order (label = position + 1)."""
    lines = "".join(f"{synset}\t{text}\n" for synset, text in classes)
    atomic_write_text(os.path.join(output_dir, LABELS_FILE), lines)


def read_labels(data_dir: str) -> list[tuple[str, str]] | None:
    """[(synset, text)] from `labels.txt` beside the shards, or None when there is none."""
    return read_labels_file(os.path.join(data_dir, LABELS_FILE))


def read_labels_file(path: str) -> list[tuple[str, str]] | None:
    """[(synset, text)] from a labels.txt, or None when there is none."""
    text = _read_text(path)
    if text is None:
        return None
    rows = [line.split("\t", 1) for line in text.split("\n") if line.strip()]
    return [(row[0], row[1] if len(row) > 1 else "") for row in rows]


def read_metadata(data_dir: str) -> dict:
    """`dataset.json` beside the shards, or {} when there is none."""
    text = _read_text(os.path.join(data_dir, METADATA_FILE))
    return {} if text is None else json.loads(text)


def _read_text(path: str) -> str | None:
    """A file's text, or None when there is none. A URL (gs://...: TensorFlow's file systems, which read the
    shards too) through tf.io.gfile; a local path without TensorFlow."""
    if "://" in path:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    try:
        with open(path, encoding="utf-8") as f:  # as fileio.atomic_write_text writes them
            return f.read()
    except FileNotFoundError:
        return None
