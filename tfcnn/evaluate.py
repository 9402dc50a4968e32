"""Top-1 / top-5 over the whole validation split, every record exactly once.

    python -m tfcnn.evaluate --data_dir DIR (--checkpoint PATH | --log_dir DIR | --saved_model DIR |
        --model NAME --weights FILE) [--batch_size 256] [--precision fp32|fp16|bf16] [--output FILE]
        [--data_backend tf|dali_cpu|dali_gpu]
    horovodrun -np 8 python -m tfcnn.evaluate ...    (ranks split the records; counts are summed)

The weights say how to feed them: a tfcnn checkpoint (a path, the latest in --log_dir, or a
`python -m tfcnn.convert` output) records its model, class count, builder options and data config
(input size, crop, mean/std, interpolation); a SavedModel's tfcnn.json does the same; a timm /
torchvision file (--weights) brings timm's config.json or torchvision's known transforms.
--image_size, --crop_fraction and --interpolation override what they say. Rank 0 prints progress
(its share of the images, img/s, ETA, running top-1) every --display_seconds, unless --quiet.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import tensorflow as tf

from tfcnn.metrics import accuracy, count_correct
from tfcnn.options import DATA_BACKENDS, PRECISIONS, add_feed_flags, add_weight_sources, check_feed_flags
from tfcnn.precision import COMPUTE_DTYPES, set_policy, startup_notes


def load_predictor(args, log=print):
    """(uint8 0-255 images -> logits, run description). Normalization included (a SavedModel has it inside)."""
    from tfcnn import checkpoints
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.models import DataConfig, create_model, list_models
    from tfcnn.models.weights import open_weights, tfcnn_checkpoint

    overrides = dict(input_size=args.image_size, crop_fraction=args.crop_fraction, interpolation=args.interpolation)
    if args.saved_model:
        info_path = os.path.join(args.saved_model, "tfcnn.json")
        if not os.path.exists(info_path):
            raise ValueError(f"--saved_model {args.saved_model} is not a tfcnn export (no tfcnn.json)")
        with open(info_path) as f:
            recorded = json.load(f)
        if args.model and args.model != recorded["model"]:
            raise ValueError(f"--saved_model {args.saved_model} holds {recorded['model']}, not --model {args.model}")
        data = DataConfig.from_dict(recorded["data_config"]).replace(**overrides)
        if data.input_size != recorded["image_size"]:
            raise ValueError(f"--image_size {data.input_size}: the SavedModel takes {recorded['image_size']} px")
        loaded = tf.saved_model.load(args.saved_model)  # referenced by the closure: its variables must live
        predict = lambda images: loaded.signatures["serving_default"](images=tf.cast(images, tf.float32))["logits"]
        return predict, {"model": recorded["model"], "num_classes": recorded["num_classes"], "data_config": data}
    path = args.weights or (tfcnn_checkpoint(args.checkpoint) if args.checkpoint else _latest(args.log_dir))
    model_name = args.model
    if not args.weights:
        record = checkpoints.describe(path)
        where = f"--checkpoint {args.checkpoint}" if args.checkpoint else f"--log_dir {args.log_dir}"
        if model_name and record.model and record.model != model_name:
            raise ValueError(f"{where} holds a checkpoint of {record.model} ({os.path.basename(path)}), "
                             f"not of --model {model_name}")
        model_name = model_name or record.model
    if model_name not in list_models():
        raise ValueError(f"unknown --model {model_name!r} (the weights do not name one); valid models: "
                         f"{', '.join(list_models())}")
    source = open_weights(model_name, path)
    data = source.data_config.replace(**overrides)
    set_policy(args.precision)
    model = create_model(model_name, num_classes=args.num_classes, input_shape=(data.input_size, data.input_size, 3),
                         weights=source, log=log)
    dtype = COMPUTE_DTYPES[args.precision]
    predict = lambda images: model(normalize_batch(images, data.mean, data.std, dtype), training=False)
    return predict, {"model": model_name, "num_classes": checkpoints.model_classes(model), "data_config": data}


def _latest(log_dir):
    from tfcnn import checkpoints

    path = checkpoints.latest_checkpoint(log_dir)
    if not path:
        raise ValueError(f"--log_dir {log_dir} holds no checkpoint (looked in {checkpoints.checkpoint_dir(log_dir)})")
    return path


def evaluate(args) -> dict:
    """Every rank counts its share of the validation records; the counts are summed over ranks."""
    from tfcnn import distributed
    from tfcnn.data import backends, pipeline

    distributed.init()
    chief = distributed.is_chief()
    log = print if chief else (lambda *_: None)
    for note in startup_notes(args.precision):
        log(f"tfcnn.evaluate: {note}")
    # Before any weights load: a clear error when the shards (or their DALI indexes) are missing.
    share = _rank_share(args.data_backend, args.data_dir, distributed.size(), distributed.rank())
    predict, run = load_predictor(args, log)
    data = run["data_config"]
    dataset = backends.build_dataset(args.data_backend, args.data_dir, "validation", args.batch_size,
                                     data.input_size, num_classes=run["num_classes"],
                                     crop_fraction=data.crop_fraction, interpolation=data.interpolation,
                                     num_shards=distributed.size(), shard_index=distributed.rank())
    progress = None
    if chief and not args.quiet:
        label = "images" if distributed.size() == 1 else "images (rank 0's share)"
        progress = lambda counts, seconds: _print_progress(counts, seconds, share, label)
    with pipeline.corrupt_records_named(args.data_dir, "validation", distributed.size(), distributed.rank()):
        local = count_correct(predict, dataset, progress, args.display_seconds)
    keys = ("count", "top1_correct", "top5_correct")
    summed = distributed.allreduce(tf.constant([local[k] for k in keys], tf.int64), average=False,
                                   name="tfcnn_eval_counts").numpy()
    return {"model": run["model"], "image_size": data.input_size, "num_classes": run["num_classes"],
            **accuracy(dict(zip(keys, (int(v) for v in summed)))), "ranks": distributed.size(),
            "weights": args.saved_model or args.weights or args.checkpoint or args.log_dir,
            "data_dir": args.data_dir, "data_config": data.to_dict()}


def _rank_share(backend, data_dir, num_shards, shard_index) -> int:
    """The validation records this rank counts: its files' (tf.data splits the files between ranks) or
    its part of all records (DALI's reader splits the records, read from the shards' index files)."""
    from tfcnn.data import pipeline

    if backend == "tf":
        mine = pipeline.shard_files(pipeline.list_shards(data_dir, "validation"), num_shards, shard_index)
        return pipeline.count_records(data_dir, mine) if mine else 0
    from tfcnn.data import dali

    return dali.rank_records(data_dir, "validation", num_shards, shard_index)


def _print_progress(counts, seconds, total, label):
    done = counts["count"]
    rate = done / max(seconds, 1e-9)
    eta = (total - done) / rate if rate > 0 and total > done else 0.0
    print(f"  {done:,}/{total:,} {label}  {rate:.1f} img/s  ETA {eta / 60:.1f} min  "
          f"top-1 so far {100 * counts['top1_correct'] / max(done, 1):.2f}%", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfcnn.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model name (default: what the checkpoint or SavedModel records)")
    parser.add_argument("--data_dir", required=True, help="directory holding validation-*-of-* shards")
    add_weight_sources(parser, "a SavedModel exported by training (--export_dir), tfcnn.convert or tfcnn.export")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--data_backend", choices=DATA_BACKENDS, default="tf",
                        help="input pipeline: tf (tf.data), dali_cpu or dali_gpu (NVIDIA DALI decoding on the CPU or "
                             "the GPU; make install DALI=1)")
    add_feed_flags(parser)
    parser.add_argument("--output", help="write the result as JSON here")
    parser.add_argument("--display_seconds", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    check_feed_flags(parser, args, ("batch_size", "image_size", "num_classes"))
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        result = evaluate(args)
    except (ValueError, RuntimeError) as error:
        sys.exit(f"tfcnn.evaluate: error: {error}")
    from tfcnn import distributed

    if distributed.is_chief():
        print(f"{'model':<22}{'images':>8}{'top-1':>9}{'top-5':>9}")
        print(f"{result['model']:<22}{result['count']:>8}{100 * result['top1']:>8.2f}%{100 * result['top5']:>8.2f}%")
        if args.output:
            from tfcnn.fileio import atomic_write_text

            atomic_write_text(args.output, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
