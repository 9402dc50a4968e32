"""Class probabilities of images, each fed as tfcnn.evaluate feeds it.

    probabilities = tfcnn.predict(result, x_test)     # [N, classes]; the source: anything tfcnn.evaluate takes
    classes = probabilities.argmax(axis=1)
    tfcnn.predict(result, ["cat.jpg", "dog.png"])     # image files, or a list of images of different sizes

The images are what tfcnn.train takes in memory: 0-255 RGB (or grayscale) NumPy arrays [N, H, W(, 3)] of any
size, or a tf.data.Dataset of images (or of (image, label) pairs, the labels ignored); or a list of images one
by one, of any sizes: arrays, PIL images, image files (paths) or their bytes (JPEG, PNG, GIF, BMP, WebP; decoded
as evaluation decodes records), read a batch at a time. Each gets the evaluation view of the weights' data
config (resized and centre-cropped to the input size, unless already that size) and their normalization. A zoo
model (create_model(...), RunResult.model) takes normalized images, not pixels: calling it on pixels gives other
classes (it warns); this is the call that takes pixels. Under horovodrun each rank predicts every image.

The command line prints each file's most likely classes, named by the labels.txt of the run's dataset or log
directory (or of the SavedModel, or --labels); a folder given stands for its image files, by name:

    python -m tfcnn.predict --log_dir runs/flowers photo1.jpg photo2.png holiday/
    python -m tfcnn.predict --saved_model exported/rn50 --top 3 photo.jpg
    python -m tfcnn.predict --model resnet50 --weights imagenet photo.jpg
"""
from __future__ import annotations

import os
import sys

from tfcnn import callable_module


def predict(source, images, *, batch_size: int = 256, model: str | None = None, precision: str = "fp32",
            image_size: int | None = None, crop_fraction: float | None = None, interpolation: str | None = None,
            eval_crop: str | None = None, num_classes: int | None = None, log=print):
    """float32 class probabilities [N, classes] of `images` (see the module docstring), in their order.
    source, model and the feed overrides: as tfcnn.evaluate takes them. A ValueError names a bad value."""
    import numpy as np
    import tensorflow as tf

    from tfcnn.data import memory
    from tfcnn.evaluate import load_predictor

    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, received: {batch_size}")
    alone = isinstance(images, (str, bytes, os.PathLike)) or memory.is_pil_image(images)
    listed = _listed([images] if alone else images) if alone or isinstance(images, (list, tuple)) else None
    if listed is not None:
        data = None
    elif isinstance(images, tf.data.Dataset):
        spec = images.element_spec
        if isinstance(spec, tuple) and len(spec) == 2:  # (image, label): the labels are not needed
            images, spec = images.map(lambda image, _: image), spec[0]
        if not isinstance(spec, tf.TensorSpec):
            raise ValueError(f"images: a Dataset of images or of (image, label) pairs is needed, received elements "
                             f"{images.element_spec}")
        # a label of 0 for each image (or each of a batch's) as evaluation's batches carry them
        data = images.map(lambda image: (image, tf.zeros(tf.shape(image)[:1], tf.int64) if image.shape.rank == 4
                                         else tf.constant(0, tf.int64)))
    else:
        x = np.asarray(images)
        data = (x, np.zeros(len(x) if x.ndim else 0, np.int64))
    if data is not None:
        memory.check(data, "images")  # before any weights load
    network, run = load_predictor(source, model=model, precision=precision, image_size=image_size,
                                  crop_fraction=crop_fraction, interpolation=interpolation, eval_crop=eval_crop,
                                  num_classes=num_classes, log=log)
    view = run["data_config"]
    feed = dict(batch_size=batch_size, image_size=view.input_size, num_classes=run["num_classes"],
                crop_fraction=view.crop_fraction, interpolation=view.interpolation, eval_crop=view.eval_crop,
                what="images")
    if listed is None:
        batches = memory.eval_batches(data, **feed)
    else:  # a batch's files decoded at a time: a list of photos need not fit in memory at once
        batches = (batch for start in range(0, len(listed), batch_size)
                   for batch in memory.eval_batches(_decoded(listed, start, batch_size, view), **feed))
    probabilities = [tf.nn.softmax(tf.cast(network(batch), tf.float32)).numpy() for batch, _ in batches]
    return np.concatenate(probabilities) if probabilities else np.zeros((0, run["num_classes"]), np.float32)


def _listed(images) -> list:
    """The items of a list of images as `_decoded` reads them: arrays and PIL images as checked arrays
    (memory.image_array), files checked to exist; a ValueError names the item (images[i]), before any weights
    load."""
    import numpy as np

    from tfcnn.data import memory

    items = []
    for index, item in enumerate(images):
        what = f"images[{index}]"
        if isinstance(item, (str, os.PathLike)):
            if os.path.isdir(item):  # rows follow the images given: a folder's order would be the caller's guess
                raise ValueError(f"{what}: {os.fspath(item)} is a folder: pass its image files, whose order the rows "
                                 f"follow, e.g. sorted(glob.glob(os.path.join(folder, '*.jpg')))")
            if not os.path.isfile(item):
                raise ValueError(f"{what}: {os.fspath(item)}: no such file")
        elif not isinstance(item, bytes):
            if np.ndim(item) == 4:
                raise ValueError(f"{what} is {len(item)} images: pass one list of images, or their array alone "
                                 f"(predict takes no labels)")
            item = memory.check((memory.image_array(item, what)[None], np.zeros(1, np.int64)), what)[0][0]
        items.append(item)
    return items


def _decoded(items, start: int, count: int, view):
    """items[start:start + count] as a Dataset of (float32 image, label 0). Files and bytes get the evaluation
    view (`view`, a DataConfig) as a record's image and the export's classify_encoded get it, whatever their size
    (preprocessing.eval_image); a ValueError names one that is no image. Arrays are as images in memory are."""
    import numpy as np
    import tensorflow as tf

    from tfcnn.data import preprocessing

    images = []
    for index, item in enumerate(items[start:start + count], start):
        if isinstance(item, (str, os.PathLike, bytes)):
            name = os.fspath(item) if not isinstance(item, bytes) else "the bytes given"
            try:
                encoded = item if isinstance(item, bytes) else tf.io.read_file(os.fspath(item))
                item = preprocessing.eval_image(encoded, view.input_size, view.crop_fraction, view.interpolation,
                                                view.eval_crop).numpy()
            except tf.errors.OpError as error:
                raise ValueError(f"images[{index}]: {name}: not an image TensorFlow decodes (JPEG, PNG, GIF, BMP, "
                                 f"WebP), or a damaged one") from error
        images.append(item.astype(np.float32))
    return tf.data.Dataset.from_generator(lambda: ((image, 0) for image in images), output_signature=(
        tf.TensorSpec([None, None, None], tf.float32), tf.TensorSpec([], tf.int64)))


def class_names(source, labels: str | None, num_classes: int) -> list[str] | None:
    """The classes' names: from `labels` (a labels.txt), or the labels.txt of the run (sources.run_labels_dir) or
    beside a SavedModel; None when there is none, or it names another number of classes."""
    from tfcnn import sources
    from tfcnn.data import records

    if labels is None:
        folder = sources.run_labels_dir(source) or (os.fspath(source) if isinstance(source, (str, os.PathLike)) and
                                                    os.path.isdir(source) else None)
        labels = os.path.join(folder, records.LABELS_FILE) if folder else None
    rows = records.read_labels_file(labels) if labels else None
    return [text or synset for synset, text in rows] if rows and len(rows) == num_classes else None


def parse_args(argv=None):
    from tfcnn.options import EVAL_PRECISIONS, add_feed_flags, add_weight_sources, check_feed_flags, command_parser

    parser = command_parser("python -m tfcnn.predict", __doc__)
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP or WebP, of any size), or "
                                                  "folders of them")
    parser.add_argument("--model", help="model name (default: what the checkpoint or SavedModel records)")
    add_weight_sources(parser, "a SavedModel exported by training (--export_dir), tfcnn.convert or tfcnn.export")
    parser.add_argument("--labels", help="a labels.txt naming the classes (default: the run's, or the "
                                         "SavedModel's)")
    parser.add_argument("--top", type=int, default=5, help="classes shown for each image")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--precision", choices=EVAL_PRECISIONS, default="fp32")
    add_feed_flags(parser)
    args = parser.parse_args(argv)
    check_feed_flags(parser, args, ("batch_size", "image_size", "num_classes", "top"))
    args.images = [file for path in args.images for file in _image_files(parser, path)]
    missing = [path for path in [*args.images, *filter(None, [args.labels])] if not os.path.isfile(path)]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    return args


def _image_files(parser, path: str) -> list[str]:
    """[path], or a folder's image files by name (the names imagenet_prep takes as images)."""
    if not os.path.isdir(path):
        return [path]
    from tfcnn.data import records

    files = [os.path.join(path, name) for name in sorted(os.listdir(path)) if records.is_image_name(name)]
    files = [file for file in files if os.path.isfile(file)]
    if not files:
        parser.error(f"{path} is a folder without image files (of {', '.join(sorted(records.IMAGE_EXTENSIONS))})")
    return files


def main(argv=None):
    args = parse_args(argv)
    source = args.saved_model or args.checkpoint or args.log_dir or args.weights
    try:
        probabilities = predict(source, args.images, batch_size=args.batch_size, model=args.model,
                                precision=args.precision, image_size=args.image_size, crop_fraction=args.crop_fraction,
                                interpolation=args.interpolation, eval_crop=args.eval_crop,
                                num_classes=args.num_classes)
    except ValueError as error:
        sys.exit(f"tfcnn.predict: error: {error}")
    names = class_names(source, args.labels, probabilities.shape[1])
    if args.labels and names is None:
        print(f"tfcnn.predict: note: {args.labels} does not name the model's {probabilities.shape[1]} classes: "
              f"classes are numbered", file=sys.stderr)
    for path, row in zip(args.images, probabilities):
        top = row.argsort()[::-1][:args.top]
        print(f"{path}: " + ", ".join(f"{names[k] if names else k} {100 * row[k]:.1f}%" for k in top))


callable_module(__name__, predict)

if __name__ == "__main__":
    main()
