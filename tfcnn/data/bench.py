"""Input-pipeline throughput against baselines over the same records, measured in one process.

    python -m tfcnn.data.bench --data_dir DIR [--batch_size 64] [--image_size 224] [--images 3000]
        [--data_backend dali_cpu [--dali_threads N]]

Pipelines (all read the same train shards with the same tf.data parallelism):
- tfcnn: the training pipeline (fused decode-and-crop, resize, flip, uint8 batch; normalization happens
  later, in the model's step on the accelerator);
- decode_only: full `decode_jpeg` of every record, nothing else (no augmentation, no resize);
- classic: the older scripts' training path: full decode, then a distorted-bounding-box crop, resize,
  flip, float32 batch normalized on the host;
- crop_decode_only and train_image_only: tfcnn's image work in stages, over plainly read records (no
  shuffling, seeding or label checks): the fused decode of the sampled crop alone (only its shape leaves
  the map), then also the resize, rounding and flip batched as uint8. Between them and decode_only they
  show what the fused crop saves, what the resize costs, and what the training stream's bookkeeping costs.
- tfcnn+POLICY: the training pipeline with an image policy on (`--augment`: randaugment:2,9 and
  autoaugment:imagenet by default): what RandAugment / AutoAugment cost per core.
- with --data_backend dali_cpu (or dali_gpu): DALI's training pipeline (tfcnn.data.dali, --dali_threads
  worker threads, default: all cores) beside tf.data's, and DALI's image work in the same stages
  (dali_cpu_decode_only, dali_cpu_crop_decode_only, dali_cpu_train_image_only: tfcnn.data.dali.stage_dataset).
  Images/s per core divide by the process's cores for every row, whatever threads each pipeline runs.
Prints images/s (and per core) and each ratio against tfcnn; `--output FILE` writes the figures as JSON.
"""
from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf

from tfcnn.data import backends, pipeline, preprocessing, records
from tfcnn.options import DATA_BACKENDS, IMAGENET_MEAN, IMAGENET_STD, command_parser

AUTOTUNE = tf.data.AUTOTUNE


def _records(files):
    ds = tf.data.Dataset.from_tensor_slices(files).repeat()
    return ds.interleave(pipeline.read_records, cycle_length=min(len(files), 16), num_parallel_calls=AUTOTUNE)


def decode_only_dataset(files, batch_size):
    """Full decode of each record; only the decoded shape leaves the map, so nothing else is measured."""
    def decode(serialized):
        return tf.shape(tf.io.decode_jpeg(records.parse_example(serialized)["encoded"], channels=3))
    return _records(files).map(decode, num_parallel_calls=AUTOTUNE).batch(batch_size).prefetch(AUTOTUNE)


def classic_dataset(files, batch_size, image_size, mean, std):
    """Decode the whole image, then crop: what the fused decode-and-crop replaces."""
    def transform(serialized):
        features = records.parse_example(serialized)
        image = tf.io.decode_jpeg(features["encoded"], channels=3)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image), tf.expand_dims(features["boxes"], 0), min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        image = tf.slice(image, begin, size)
        image = tf.image.resize(image, [image_size, image_size])
        return tf.image.random_flip_left_right(image), features["label"]
    ds = _records(files).map(transform, num_parallel_calls=AUTOTUNE).batch(batch_size, drop_remainder=True)
    ds = ds.map(lambda x, y: (preprocessing.normalize_batch(x, mean, std, tf.float32), y))
    return ds.prefetch(AUTOTUNE)


def stage_dataset(files, batch_size, image_size, stage):
    """tfcnn's per-image work up to `stage` ('crop_decode' or 'train_image'); see the module docstring."""
    def transform(index, serialized):
        features = records.parse_example(serialized)
        encoded, boxes, seed = features["encoded"], features["boxes"], tf.stack([tf.constant(0, tf.int64), index])
        if stage == "crop_decode":
            return tf.shape(preprocessing.train_crop(encoded, boxes, seed))
        return preprocessing.train_image(encoded, boxes, seed, image_size)
    ds = _records(files).enumerate().map(transform, num_parallel_calls=AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE)


def images_per_second(dataset, batch_size, images, warmup_batches=3):
    """Mean images/s over `images` images after `warmup_batches` batches (thread-pool spin-up)."""
    batches = max(1, images // batch_size)
    iterator = iter(dataset)
    for _ in range(warmup_batches):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


POLICIES = ("randaugment:2,9", "autoaugment:imagenet")


def dali_datasets(data_dir, batch_size, image_size, backend, threads) -> dict:
    """{row name: dataset maker} of DALI's rows: its training pipeline and its stages (see the docstring)."""
    from tfcnn.data import dali

    device = backend.split("_", 1)[1]
    stage = lambda name: lambda: dali.stage_dataset(data_dir, batch_size, image_size, name, device=device,  # noqa
                                                    num_threads=threads)
    return {
        backend: lambda: backends.build_dataset(backend, data_dir, "train", batch_size, image_size,
                                                num_classes=pipeline.num_classes_of(data_dir), num_threads=threads),
        f"{backend}_decode_only": stage("decode"),
        f"{backend}_crop_decode_only": stage("crop_decode"),
        f"{backend}_train_image_only": stage("train_image"),
    }


def run(data_dir, batch_size=64, image_size=224, images=3000, mean=IMAGENET_MEAN, std=IMAGENET_STD, repeats=3,
        policies=POLICIES, backend="tf", dali_threads=None) -> dict:
    """Each pipeline is timed `repeats` times, in rotating order, and its mean counts: a shared machine
    drifts by several percent from one measurement to the next. backend dali_cpu / dali_gpu adds DALI's
    rows (dali_datasets), with dali_threads worker threads (default: all cores)."""
    if backend not in DATA_BACKENDS:
        raise ValueError(f"--data_backend must be one of {', '.join(DATA_BACKENDS)}, received: {backend!r}")
    files = pipeline.list_shards(data_dir, "train")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    def tfcnn(augment="none"):
        return lambda: pipeline.build_dataset(data_dir, "train", batch_size, image_size, augment=augment,
                                              num_classes=pipeline.num_classes_of(data_dir), deterministic=False)

    datasets = {
        "tfcnn": tfcnn(),
        "decode_only": lambda: decode_only_dataset(files, batch_size),
        "classic": lambda: classic_dataset(files, batch_size, image_size, mean, std),
        "crop_decode_only": lambda: stage_dataset(files, batch_size, image_size, "crop_decode"),
        "train_image_only": lambda: stage_dataset(files, batch_size, image_size, "train_image"),
        **{f"tfcnn+{policy}": tfcnn(policy) for policy in policies},
    }
    dali_threads = dali_threads or cores
    if backend != "tf":
        datasets.update(dali_datasets(data_dir, batch_size, image_size, backend, dali_threads))
    rates = {name: [] for name in datasets}
    names = list(datasets)
    for round_ in range(repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            rates[name].append(images_per_second(datasets[name](), batch_size, images))
    results = {name: sum(values) / len(values) for name, values in rates.items()}
    summary = {"data_dir": data_dir, "batch_size": batch_size, "image_size": image_size, "cores": cores,
               "images_per_sec": results,
               "images_per_sec_per_core": {k: v / cores for k, v in results.items()},
               "ratio_tfcnn_vs": {k: results["tfcnn"] / v for k, v in results.items() if k != "tfcnn"}}
    if backend != "tf":
        summary["dali_threads"] = dali_threads
        summary[f"ratio_{backend}_vs"] = {k: results[backend] / results[k] for k in ("tfcnn", "decode_only")}
    return summary


def main(argv=None):
    parser = command_parser("python -m tfcnn.data.bench", __doc__)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--images", type=int, default=3000, help="images timed per pipeline, after warmup")
    parser.add_argument("--repeats", type=int, default=3, help="timings per pipeline (their mean counts)")
    parser.add_argument("--policies", nargs="*", default=list(POLICIES),
                        help="image policies to time on top of tfcnn's pipeline (none: give the flag alone)")
    parser.add_argument("--data_backend", choices=DATA_BACKENDS, default="tf",
                        help="dali_cpu / dali_gpu: also time NVIDIA DALI's pipeline and stages (make install DALI=1)")
    parser.add_argument("--dali_threads", type=int, help="DALI's worker threads (default: all cores)")
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    try:
        result = run(args.data_dir, args.batch_size, args.image_size, args.images, repeats=args.repeats,
                     policies=args.policies, backend=args.data_backend, dali_threads=args.dali_threads)
    except (pipeline.DataError, ValueError, RuntimeError) as error:
        sys.exit(f"tfcnn.data.bench: error: {error}")
    threads = f", DALI: {result['dali_threads']} threads" if "dali_threads" in result else ""
    print(f"{'pipeline':<30}{'img/s':>10}{'img/s/core':>12}{'tfcnn ratio':>13}   ({result['cores']} cores, "
          f"batch {args.batch_size}, {args.image_size} px{threads})")
    for name, rate in result["images_per_sec"].items():
        ratio = result["ratio_tfcnn_vs"].get(name)
        print(f"{name:<30}{rate:>10.1f}{result['images_per_sec_per_core'][name]:>12.1f}"
              f"{(f'{ratio:.2f}x' if ratio else '-'):>13}")
    for name, value in result.get(f"ratio_{args.data_backend}_vs", {}).items():
        print(f"  ratio {args.data_backend} / {name}: {value:.2f}x")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
