"""Convert a class-per-folder image dataset (ImageNet or your own) into sharded, pre-resized TFRecords.

    python -m imagenet_prep.build_tfrecords --train_dir raw/train --validation_dir raw/val \\
        --validation_labels raw/imagenet_2012_validation_synset_labels.txt --output_dir tfrecords \\
        [--bbox_dir raw/bbox] [--resize shorter:480] [--quality 90] [--num_workers 16]

Inputs: a train directory of `<class>/<image>` (ImageNet: `<synset>/*.JPEG`); a validation directory,
either in `<class>/` folders too or flat with `--validation_labels` (one synset per line in the sorted
file-name order, or `<file name> <synset>` lines); or, for a dataset without one, `--validation_fraction 0.1`
holds a tenth of each class's training images out as the validation split. Classes are the sorted folder
names unless `--synsets_file` lists them; `--metadata_file` (`<synset>\\t<text>` lines) gives human-readable
names. Bounding boxes come from ImageNet's XML annotations under `--bbox_dir` (found by image file stem).

Outputs in --output_dir: `train-00000-of-01024 ...`, `validation-00000-of-00128 ...` (ImageNet's counts; a
smaller set gets fewer shards, of about the same size: see --train_shards), each with its DALI index beside it
(`train-00000-of-01024.idx`, tfcnn.data.dali_index), `labels.txt` and `dataset.json` (see
tfcnn.data.records). Each shard is written under a temporary name and renamed when complete; a rerun skips
complete shards (writing their index if they lack one), so an interrupted build resumes where it stopped.
Unreadable images are skipped, named and counted, and never abort the build.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import glob
import multiprocessing
import os
import random
import sys
import time

from imagenet_prep.images import ResizeSpec, convert_image, parse_resize, read_bbox_xml
from tfcnn.data import dali_index, records
from tfcnn.fileio import atomic_write_text

SHUFFLE_SEED = 12345
# Shard counts when none is asked for: the NGC scripts' for ImageNet (1,024 training shards of 1,251 images, 128
# validation shards of 391); a smaller set gets shards of that size, but no fewer than a multi-node run has ranks
# (each rank reads its own training shards: 64 is eight nodes of eight GPUs), and never more shards than images.
# (A count fixed at ImageNet's wrote a file and its index per image of a set of a few thousand.)
MAX_SHARDS = {"train": 1024, "validation": 128}
SHARD_IMAGES = {"train": 1251, "validation": 391}
MIN_SHARDS = {"train": 64, "validation": 8}


def default_shards(split: str, num_images: int) -> int:
    """The shard count of a split of num_images images when no --train_shards / --validation_shards is given
    (plan_shards then caps it at the images)."""
    return min(MAX_SHARDS[split], max(MIN_SHARDS[split], -(-num_images // SHARD_IMAGES[split])))


def shards_help(split: str) -> str:
    return (f"number of {'training' if split == 'train' else split} shards (default: one per "
            f"{SHARD_IMAGES[split]:,} images, at least {MIN_SHARDS[split]} and at most {MAX_SHARDS[split]:,}, never "
            f"more than the images)")


@dataclasses.dataclass(frozen=True)
class Item:
    """One source image and what its record says about it."""
    path: str
    label: int  # 1-based; 0 is reserved for background
    synset: str
    text: str
    bbox_xml: str | None = None


@dataclasses.dataclass
class ShardResult:
    name: str
    written: int = 0
    skipped: list = dataclasses.field(default_factory=list)  # [(path, reason)]
    bbox_errors: list = dataclasses.field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    already_complete: bool = False


class BuildError(ValueError):
    """Bad input found before any work started."""


# ----------------------------------------------------------------------------------------------------
# Planning: classes, images, shards (main process, before any conversion)


def list_images(folder: str) -> list[str]:
    """Image files in `folder` and its subfolders, as torchvision's ImageFolder and Keras'
    image_dataset_from_directory take a class's images, sorted by path. Hidden files and folders (.DS_Store,
    Jupyter's .ipynb_checkpoints copies) and other extensions are ignored; links to folders are not followed."""
    paths = []
    for parent, folders, names in os.walk(folder):
        folders[:] = [n for n in folders if not n.startswith(".")]
        paths += [os.path.join(parent, n) for n in names if records.is_image_name(n)]
    return sorted(paths)


def class_folders(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if not n.startswith(".") and os.path.isdir(os.path.join(root, n)))


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def read_metadata_texts(path: str | None) -> dict[str, str]:
    """`<synset>\\t<human-readable text>` lines (ImageNet's imagenet_metadata.txt)."""
    if not path:
        return {}
    texts = {}
    for line in read_lines(path):
        synset, _, text = line.partition("\t")
        texts[synset.strip()] = text.strip()
    return texts


def resolve_classes(synsets_file, metadata_file, train_dir, validation_dir, existing) -> list[tuple[str, str]]:
    """[(synset, text)] in label order. Priority: --synsets_file, the labels.txt of an earlier build in
    the output directory, the train folders, the validation folders."""
    texts = read_metadata_texts(metadata_file)
    if synsets_file:
        synsets = read_lines(synsets_file)
        if not synsets:
            raise BuildError(f"--synsets_file {synsets_file} lists no classes")
    elif existing:
        synsets = [s for s, _ in existing]
    elif train_dir:
        synsets = class_folders(train_dir)
        if not synsets:
            raise BuildError(f"--train_dir {train_dir} has no class folders (expected <class>/<image> files)")
    elif validation_dir and class_folders(validation_dir):
        synsets = class_folders(validation_dir)
    else:
        raise BuildError("cannot tell the classes: pass --train_dir (class folders), --synsets_file, "
                         "or build the train split into this --output_dir first")
    if len(set(synsets)) != len(synsets):
        raise BuildError("the class list has duplicate names")
    existing_texts = dict(existing or [])
    return [(s, texts.get(s) or existing_texts.get(s) or s) for s in synsets]


def index_bboxes(bbox_dir: str | None) -> dict[str, str]:
    """Image file stem -> XML path, from ImageNet's annotation tree (`<synset>/<stem>.xml` or flat)."""
    if not bbox_dir:
        return {}
    if not os.path.isdir(bbox_dir):
        raise BuildError(f"--bbox_dir {bbox_dir} is not a directory")
    index = {}
    for path in glob.glob(os.path.join(bbox_dir, "**", "*.xml"), recursive=True):
        index[os.path.splitext(os.path.basename(path))[0]] = path
    return index


def collect_folder_split(root: str, flag: str, classes, bboxes) -> list[Item]:
    """Items of a `<class>/<image>` tree. Every class folder must hold images and be a known class."""
    label_of = {synset: i + 1 for i, (synset, _) in enumerate(classes)}
    text_of = dict(classes)
    items = []
    for synset in class_folders(root):
        if synset not in label_of:
            raise BuildError(f"{flag} {root}: folder {synset!r} is not one of the {len(classes)} classes")
        paths = list_images(os.path.join(root, synset))
        if not paths:
            raise BuildError(f"{flag} {root}: class folder {synset!r} holds no images")
        items += [Item(p, label_of[synset], synset, text_of[synset], bboxes.get(_stem(p))) for p in paths]
    return items


def collect_flat_validation(root: str, labels_path: str | None, classes, bboxes) -> list[Item]:
    """Items of a flat validation directory labelled by --validation_labels."""
    paths = list_images(root)
    if not labels_path:
        raise BuildError(f"--validation_dir {root} has no class folders, so it needs --validation_labels "
                         f"(one synset per line in sorted file-name order, or '<file name> <synset>' lines)")
    lines = read_lines(labels_path)
    rows = [line.replace(",", " ").split() for line in lines]
    if all(len(r) == 1 for r in rows):
        if len(rows) != len(paths):
            raise BuildError(f"--validation_labels {labels_path} has {len(rows)} lines but --validation_dir "
                             f"{root} holds {len(paths)} images")
        synset_of = {p: r[0] for p, r in zip(paths, rows)}
    else:
        by_name = {os.path.splitext(r[0])[0]: r[1] for r in rows if len(r) >= 2}
        missing = [p for p in paths if _stem(p) not in by_name]
        if missing:
            raise BuildError(f"--validation_labels {labels_path} has no label for {len(missing)} images, "
                             f"e.g. {os.path.basename(missing[0])}")
        synset_of = {p: by_name[_stem(p)] for p in paths}
    label_of = {synset: i + 1 for i, (synset, _) in enumerate(classes)}
    text_of = dict(classes)
    items = []
    for line_no, path in enumerate(paths, start=1):
        synset = synset_of[path]
        if synset not in label_of:
            raise BuildError(f"--validation_labels: label {synset!r} of {os.path.basename(path)} is not one "
                             f"of the {len(classes)} classes")
        items.append(Item(path, label_of[synset], synset, text_of[synset], bboxes.get(_stem(path))))
    return items


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def hold_out(items: list[Item], fraction: float) -> tuple[list[Item], list[Item]]:
    """(training items, validation items): `fraction` of each class's images (rounded; each class keeps at
    least one for training), picked by a shuffle seeded with the class's name, so a rerun holds out the same
    images and a class's pick does not depend on the other classes. Both keep the items' order."""
    by_class = {}
    for item in items:
        by_class.setdefault(item.synset, []).append(item.path)
    held = set()
    for synset, paths in by_class.items():
        count = min(round(fraction * len(paths)), len(paths) - 1)
        held.update(random.Random(f"{SHUFFLE_SEED}:{synset}").sample(paths, count))
    return [item for item in items if item.path not in held], [item for item in items if item.path in held]


def plan_shards(split: str, items: list[Item], num_shards: int | None) -> list[tuple[str, list[Item]]]:
    """Contiguous, near-equal slices (num_shards of them, None: default_shards); the train list is shuffled with
    a fixed seed first, so every shard mixes classes and a rerun plans exactly the same shards."""
    items = list(items)
    if split == "train":
        random.Random(SHUFFLE_SEED).shuffle(items)
    num_shards = min(num_shards or default_shards(split, len(items)), len(items))
    bounds = [round(i * len(items) / num_shards) for i in range(num_shards + 1)]
    return [(records.shard_name(split, i, num_shards), items[bounds[i]:bounds[i + 1]]) for i in range(num_shards)]


# ----------------------------------------------------------------------------------------------------
# Conversion (worker processes)


def convert_shard(output_dir: str, name: str, items: list[Item], resize: ResizeSpec, quality: int) -> ShardResult:
    """Writes one shard under a temporary name, then its DALI index (tfcnn.data.dali_index, itself written
    atomically), then renames the shard: a file with a shard's name is complete and has its index. TensorFlow
    (its TFRecord writer and Example protos) loads here, in the process that converts: with worker processes,
    the parent that plans, checks and reports never loads it (its import takes seconds)."""
    import tensorflow as tf

    result = ShardResult(name)
    final = os.path.join(output_dir, name)
    tmp = os.path.join(output_dir, f".{name}.tmp-{os.getpid()}")
    sizes = []  # the records' payload sizes: the index, without reading the shard again
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for item in items:
                example = _convert_item(item, resize, quality, result)
                if example is not None:
                    # deterministic: protobuf >= 5 writes a map's entries in a per-process order otherwise,
                    # and a rerun or another worker count must give byte-identical shards
                    serialized = example.SerializeToString(deterministic=True)
                    writer.write(serialized)
                    sizes.append(len(serialized))
                    result.written += 1
        with dali_index.atomic_index_file(dali_index.index_path(final)) as index:
            index.writelines(dali_index.index_lines(sizes))
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return result


def _convert_item(item: Item, resize: ResizeSpec, quality: int, result: ShardResult):
    try:
        with open(item.path, "rb") as f:
            data = f.read()
        image = convert_image(data, resize, quality)
    except Exception as error:  # a corrupt image must never stop the build: skip it and say so
        result.skipped.append((item.path, f"{type(error).__name__}: {error}"))
        return None
    boxes = []
    if item.bbox_xml:
        try:
            boxes = read_bbox_xml(item.bbox_xml)
        except Exception as error:
            result.bbox_errors.append((item.bbox_xml, f"{type(error).__name__}: {error}"))
    result.bytes_in += len(data)
    result.bytes_out += len(image.jpeg)
    return records.make_example(encoded=image.jpeg, height=image.height, width=image.width, label=item.label,
                                synset=item.synset, text=item.text, filename=os.path.basename(item.path),
                                boxes=boxes)


# ----------------------------------------------------------------------------------------------------
# Orchestration


def build_tfrecords(output_dir: str, train_dir: str | None = None, validation_dir: str | None = None, *,
                    validation_labels: str | None = None, bbox_dir: str | None = None,
                    synsets_file: str | None = None, metadata_file: str | None = None,
                    train_shards: int | None = None, validation_shards: int | None = None,
                    validation_fraction: float = 0.0,
                    resize: str = "shorter:480", upscale: bool = False, quality: int = 90,
                    num_workers: int | None = None, log=print) -> dict[str, dict]:
    """Builds the requested splits; returns a summary per split. Raises BuildError on bad input
    before any image is converted. train_shards, validation_shards: None sizes them (default_shards).
    validation_fraction: the validation split held out of train_dir's images (that fraction of each class),
    for a dataset without one."""
    spec = parse_resize(resize, upscale)
    _check_inputs(train_dir, validation_dir, train_shards, validation_shards, quality, num_workers,
                  validation_fraction)
    os.makedirs(output_dir, exist_ok=True)
    metadata = records.read_metadata(output_dir)
    # The split held out is part of what the shards hold: a rebuild with another fraction is another build.
    options = {"resize": str(spec), "quality": quality, **({"validation_fraction": validation_fraction}
                                                            if validation_fraction else {})}
    existing = records.read_labels(output_dir)
    classes = resolve_classes(synsets_file, metadata_file, train_dir, validation_dir, existing)
    bboxes = index_bboxes(bbox_dir)

    plans = {}
    if train_dir:
        items, held = collect_folder_split(train_dir, "--train_dir", classes, bboxes), []
        if validation_fraction:
            items, held = hold_out(items, validation_fraction)
            if not held:
                raise BuildError(f"--validation_fraction {validation_fraction:g} holds out no image: each class's "
                                 f"share of its images rounds to 0 (or to all of a class of one); pass a larger "
                                 f"fraction")
            log(f"validation: {len(held):,} of --train_dir's {len(items) + len(held):,} images held out "
                f"({validation_fraction:g} of each class)")
        plans["train"] = plan_shards("train", items, train_shards)
        if held:
            plans["validation"] = plan_shards("validation", held, validation_shards)
    if validation_dir:
        items = (collect_folder_split(validation_dir, "--validation_dir", classes, bboxes)
                 if class_folders(validation_dir)
                 else collect_flat_validation(validation_dir, validation_labels, classes, bboxes))
        if not items:
            raise BuildError(f"--validation_dir {validation_dir} holds no images")
        plans["validation"] = plan_shards("validation", items, validation_shards)
    for split, shards in plans.items():
        _check_resumable(output_dir, split, len(shards), options, metadata)

    if existing is not None and [s for s, _ in existing] != [s for s, _ in classes]:
        raise BuildError(f"{output_dir}/{records.LABELS_FILE} lists other classes than this build; "
                         f"use a new --output_dir")
    records.write_labels(output_dir, classes)
    metadata.update({"format": 1, "num_classes": len(classes), "options": options})
    metadata.setdefault("splits", {})
    num_workers = num_workers or os.cpu_count() or 1
    converters = "converting in this process" if num_workers == 1 else f"{num_workers} worker processes"
    log(f"{len(classes)} classes; resize {spec}, JPEG quality {quality}, {converters}")
    with contextlib.ExitStack() as stack:
        pools = []

        def pool():
            """One pool for every split: each worker process starts (and imports TensorFlow) once."""
            if not pools:
                pools.append(stack.enter_context(concurrent.futures.ProcessPoolExecutor(
                    max_workers=min(num_workers, sum(len(shards) for shards in plans.values())),
                    mp_context=multiprocessing.get_context("spawn"))))
            return pools[0]

        return {split: _build_split(output_dir, split, shards, spec, quality, num_workers, pool, metadata, log)
                for split, shards in plans.items()}


def _check_inputs(train_dir, validation_dir, train_shards, validation_shards, quality, num_workers,
                  validation_fraction):
    if not train_dir and not validation_dir:
        raise BuildError("nothing to build: pass --train_dir and/or --validation_dir")
    if not 0 <= validation_fraction < 1:
        raise BuildError(f"--validation_fraction must be at least 0 and below 1, received: {validation_fraction}")
    if validation_fraction and (validation_dir or not train_dir):
        raise BuildError("--validation_fraction holds the validation split out of --train_dir: pass it with "
                         "--train_dir and without --validation_dir")
    for flag, path in (("--train_dir", train_dir), ("--validation_dir", validation_dir)):
        if path and not os.path.isdir(path):
            raise BuildError(f"{flag} {path} does not exist or is not a directory")
        if path and not os.listdir(path):
            raise BuildError(f"{flag} {path} is empty")
    for flag, value in (("--train_shards", train_shards), ("--validation_shards", validation_shards)):
        if value is not None and not 1 <= value <= 99999:
            raise BuildError(f"{flag} must be between 1 and 99999, received: {value}")
    if not 1 <= quality <= 100:
        raise BuildError(f"--quality must be between 1 and 100, received: {quality}")
    if num_workers is not None and num_workers < 1:
        raise BuildError(f"--num_workers must be >= 1, received: {num_workers}")


def _check_resumable(output_dir, split, num_shards, options, metadata):
    """Refuses to mix shards of another build (other options or shard count) into this one."""
    present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(output_dir, records.shard_pattern(split))))
    if not present:
        return
    other_counts = sorted({p[-5:] for p in present} - {f"{num_shards:05d}"})
    if other_counts:
        raise BuildError(f"{output_dir} already holds {split} shards of another build (...-of-{other_counts[0]}); "
                         f"this build makes {num_shards} shards: use a new --output_dir or delete them")
    previous = metadata.get("options")
    if previous and previous != options:
        raise BuildError(f"{output_dir} holds {split} shards built with {previous}, not {options}: "
                         f"use a new --output_dir or delete them")


def _build_split(output_dir, split, shards, spec, quality, num_workers, pool, metadata, log) -> dict:
    for stale in glob.glob(os.path.join(output_dir, f".{split}-*.tmp-*")):
        os.remove(stale)  # left by a run that was killed
    split_meta = metadata["splits"].setdefault(split, {})
    if split_meta.get("num_shards") != len(shards):
        split_meta.update(num_shards=len(shards), shards={})
    todo, results = [], []
    for name, items in shards:
        if os.path.exists(os.path.join(output_dir, name)):
            if name not in split_meta["shards"]:  # killed between the rename and the metadata update
                split_meta["shards"][name] = _count_records(os.path.join(output_dir, name))
            if not dali_index.is_current(os.path.join(output_dir, name)):  # a shard of a tfcnn without indexes
                dali_index.write_index(os.path.join(output_dir, name))
            results.append(ShardResult(name, written=split_meta["shards"][name], already_complete=True))
        else:
            todo.append((name, items))
    total_images = sum(len(items) for _, items in shards)
    log(f"{split}: {total_images:,} images into {len(shards)} shard{'s' * (len(shards) != 1)} "
        f"({len(shards) - len(todo)} already complete)")
    progress = _Progress(split, total_images, total_images - sum(len(items) for _, items in todo), log)
    shard_sizes = {name: len(items) for name, items in shards}

    def finished(result):
        results.append(result)
        split_meta["shards"][result.name] = result.written
        atomic_write_text(os.path.join(output_dir, records.METADATA_FILE), _json(metadata))
        progress.update(shard_sizes[result.name])

    start = time.time()
    if num_workers == 1 or len(todo) <= 1:
        for name, items in todo:
            finished(convert_shard(output_dir, name, items, spec, quality))
    else:
        workers = pool()
        futures = [workers.submit(convert_shard, output_dir, name, items, spec, quality) for name, items in todo]
        try:
            for future in concurrent.futures.as_completed(futures):
                finished(future.result())
        except BaseException:
            workers.shutdown(wait=True, cancel_futures=True)
            raise
    split_meta["num_records"] = sum(split_meta["shards"].values())
    split_meta["complete"] = len(split_meta["shards"]) == len(shards)
    atomic_write_text(os.path.join(output_dir, records.METADATA_FILE), _json(metadata))
    return _summarize(split, results, time.time() - start, log)


def _count_records(path: str) -> int:
    return sum(1 for _ in dali_index.record_sizes(path))  # the records' headers only: no TensorFlow


def _json(obj) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


class _Progress:
    """One line per update on a terminal (rewritten in place), at most one line per 10 s in a log."""

    def __init__(self, split, total, done, log):
        self.split, self.total, self.done, self.log = split, total, done, log
        self.start = time.time()
        self.last = 0.0
        self.new = 0
        self.tty = sys.stdout.isatty() and log is print

    def update(self, images):
        self.done += images
        self.new += images
        now = time.time()
        if not self.tty and now - self.last < 10 and self.done < self.total:
            return
        self.last = now
        rate = self.new / max(now - self.start, 1e-9)
        eta = (self.total - self.done) / rate if rate else 0
        line = (f"{self.split}: {self.done:,}/{self.total:,} images ({100 * self.done / max(self.total, 1):.0f}%), "
                f"{rate:,.0f} img/s, ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}")
        if self.tty:
            print("\r" + line, end="\n" if self.done >= self.total else "", flush=True)
        else:
            self.log(line)


def _summarize(split, results, seconds, log) -> dict:
    new = [r for r in results if not r.already_complete]
    written = sum(r.written for r in new)
    skipped = [s for r in new for s in r.skipped]
    bbox_errors = [e for r in new for e in r.bbox_errors]
    bytes_in, bytes_out = sum(r.bytes_in for r in new), sum(r.bytes_out for r in new)
    summary = {
        "split": split, "shards": len(results), "shards_already_complete": len(results) - len(new),
        "images_written": written, "images_skipped": len(skipped), "skipped": skipped,
        "bbox_errors": bbox_errors, "bytes_in": bytes_in, "bytes_out": bytes_out,
        "size_reduction": 1 - bytes_out / bytes_in if bytes_in else 0.0,
        "seconds": seconds, "images_per_sec": written / seconds if seconds > 0 else 0.0,
    }
    log(f"{split} done: {written:,} images written, {len(skipped)} skipped, "
        f"{summary['shards_already_complete']} of {len(results)} shards already complete; "
        f"{bytes_in / 1e6:,.1f} MB in -> {bytes_out / 1e6:,.1f} MB out "
        f"({100 * summary['size_reduction']:.0f}% smaller); {summary['images_per_sec']:,.1f} images/s")
    for path, reason in skipped:
        log(f"  skipped {path}: {reason}")
    for path, reason in bbox_errors:
        log(f"  unreadable bounding boxes {path} (image kept without boxes): {reason}")
    return summary


def main(argv):
    from absl import flags

    FLAGS = flags.FLAGS
    try:
        summaries = build_tfrecords(
            FLAGS.output_dir, FLAGS.train_dir, FLAGS.validation_dir, validation_labels=FLAGS.validation_labels,
            bbox_dir=FLAGS.bbox_dir, synsets_file=FLAGS.synsets_file, metadata_file=FLAGS.metadata_file,
            train_shards=FLAGS.train_shards, validation_shards=FLAGS.validation_shards,
            validation_fraction=FLAGS.validation_fraction, resize=FLAGS.resize,
            upscale=FLAGS.upscale, quality=FLAGS.quality, num_workers=FLAGS.num_workers)
    except (BuildError, ValueError) as error:
        sys.exit(f"build_tfrecords: error: {error}")
    except KeyboardInterrupt:
        sys.exit("build_tfrecords: interrupted; complete shards are kept: rerun the same command to resume")
    print(f"wrote {sum(s['images_written'] for s in summaries.values()):,} images to {FLAGS.output_dir}")


def define_flags(flag_values=None):
    """The command's flags, in absl's global FLAGS (or flag_values: docs/generate.py tables them from here)."""
    from absl import flags

    fv = dict(flag_values=flags.FLAGS if flag_values is None else flag_values)  # an empty FlagValues is falsy
    flags.DEFINE_string("train_dir", None, "training images: <class>/<image> folders (a class's images may sit in "
                        "subfolders; hidden files and folders and other extensions are ignored)", **fv)
    flags.DEFINE_string("validation_dir", None, "validation images: <class>/ folders, or flat with "
                        "--validation_labels (either this or --train_dir may be omitted)", **fv)
    flags.DEFINE_string("validation_labels", None, "for a flat --validation_dir: one synset per line in sorted "
                        "file-name order, or '<file name> <synset>' lines", **fv)
    flags.DEFINE_float("validation_fraction", 0.0, "without --validation_dir: hold this share of each class's "
                       "--train_dir images out as the validation split (rounded; one at least stays for training), "
                       "the same images on every rerun (e.g. 0.1)", **fv)
    flags.DEFINE_string("output_dir", None, "where the shards, labels.txt and dataset.json go (required)", **fv)
    flags.DEFINE_string("bbox_dir", None, "ImageNet's XML bounding boxes, searched recursively, matched by image "
                        "file stem", **fv)
    flags.DEFINE_string("synsets_file", None, "class list, one synset per line (default: the sorted --train_dir "
                        "folders)", **fv)
    flags.DEFINE_string("metadata_file", None, "human-readable class names: '<synset>\\t<text>' lines", **fv)
    flags.DEFINE_integer("train_shards", None, shards_help("train"), **fv)
    flags.DEFINE_integer("validation_shards", None, shards_help("validation"), **fv)
    flags.DEFINE_string("resize", "shorter:480", "pre-resize: 'shorter:N' caps the shorter side, keeping the aspect "
                        "ratio; 'stretch:WxH' stretches to a fixed size (as older scripts did); 'none'", **fv)
    flags.DEFINE_boolean("upscale", False, "with shorter:N, also enlarge images whose shorter side is below N "
                         "(never done otherwise)", **fv)
    flags.DEFINE_integer("quality", 90, "JPEG quality of re-encoded images", **fv)
    flags.DEFINE_integer("num_workers", None, "worker processes (default: all cores)", **fv)
    flags.mark_flag_as_required("output_dir", **fv)


if __name__ == "__main__":
    from absl import app, flags

    define_flags()
    if any(arg in ("-h", "--help", "-?", "--helpshort") for arg in sys.argv[1:]):  # absl's own exits with status 1
        print(__doc__ + "\nflags:\n" + flags.FLAGS.module_help(__name__))
        sys.exit(0)
    app.run(main)
