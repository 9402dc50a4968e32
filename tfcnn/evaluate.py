"""Top-1 / top-5 over the whole validation split, every record exactly once.

    python -m tfcnn.evaluate --model resnet50 --data_dir DIR (--checkpoint PATH | --log_dir DIR | --saved_model DIR)
        [--batch_size 256] [--precision fp32|fp16|bf16] [--image_size N] [--num_classes N] [--output FILE]
    horovodrun -np 8 python -m tfcnn.evaluate ...    (ranks split the files; counts are summed)

--log_dir takes the latest checkpoint there and, unless given, the run's image size and class count
from its config.json. --saved_model takes a tfcnn export (its tfcnn.json names the model and size).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import tensorflow as tf

from tfcnn.precision import COMPUTE_DTYPES, PRECISIONS, hardware_notes, set_policy


def count_correct(predict_fn, dataset) -> dict:
    """Sums, over every batch of `dataset`, the images and how many have the label in the top 1 / top 5
    logits (a label is in the top k when fewer than k logits are strictly greater than its own)."""
    @tf.function
    def batch_counts(images, labels):
        logits = tf.cast(predict_fn(images), tf.float32)
        true_logit = tf.gather(logits, labels, axis=1, batch_dims=1)
        greater = tf.reduce_sum(tf.cast(logits > true_logit[:, None], tf.int64), axis=1)
        return tf.stack([tf.size(labels, tf.int64), tf.reduce_sum(tf.cast(greater < 1, tf.int64)),
                         tf.reduce_sum(tf.cast(greater < 5, tf.int64))])

    totals = tf.zeros([3], tf.int64)
    for images, labels in dataset:
        totals += batch_counts(images, labels)
    count, top1, top5 = (int(v) for v in totals.numpy())
    return {"count": count, "top1_correct": top1, "top5_correct": top5}


def accuracy(counts: dict) -> dict:
    """Adds top1 / top5 fractions to summed counts."""
    n = counts["count"]
    return {**counts, "top1": counts["top1_correct"] / n if n else 0.0,
            "top5": counts["top5_correct"] / n if n else 0.0}


def resolve_run(args) -> dict:
    """Model name, image size and class count: flags first, then what the weights source records."""
    from tfcnn.data import pipeline
    from tfcnn.models import list_models, model_info

    recorded = {}
    if args.saved_model:
        info_path = os.path.join(args.saved_model, "tfcnn.json")
        if not os.path.exists(info_path):
            raise ValueError(f"--saved_model {args.saved_model} is not a tfcnn export (no tfcnn.json)")
        with open(info_path) as f:
            recorded = json.load(f)
        if args.model and args.model != recorded["model"]:
            raise ValueError(f"--saved_model {args.saved_model} holds {recorded['model']}, not --model {args.model}")
    elif args.log_dir and os.path.exists(os.path.join(args.log_dir, "config.json")):
        with open(os.path.join(args.log_dir, "config.json")) as f:
            recorded = json.load(f)
    model = args.model or recorded.get("model")
    if model not in list_models():
        raise ValueError(f"unknown --model {model!r}; valid models: {', '.join(list_models())}")
    return {
        "model": model,
        "image_size": args.image_size or recorded.get("image_size") or model_info(model).input_size,
        "num_classes": args.num_classes or recorded.get("num_classes") or pipeline.num_classes_of(args.data_dir),
    }


def load_predictor(args, run):
    """uint8 0-255 images -> logits; normalization included (a SavedModel has it inside)."""
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.models import create_model, model_info
    from tfcnn import checkpoints

    if args.saved_model:
        loaded = tf.saved_model.load(args.saved_model)  # referenced by the closure: its variables must live
        return lambda images: loaded.signatures["serving_default"](images=tf.cast(images, tf.float32))["logits"]
    path = args.checkpoint or checkpoints.latest_checkpoint(args.log_dir)
    if not path:
        raise ValueError(f"--log_dir {args.log_dir} holds no checkpoint (looked in "
                         f"{checkpoints.checkpoint_dir(args.log_dir)})")
    set_policy(args.precision)
    size = run["image_size"]
    model = create_model(run["model"], num_classes=run["num_classes"], input_shape=(size, size, 3))
    where = f"--checkpoint {args.checkpoint}" if args.checkpoint else f"--log_dir {args.log_dir}"
    checkpoints.restore_model(path, run["model"], model, run["num_classes"], where)
    info = model_info(run["model"])
    return lambda images: model(normalize_batch(images, info.mean, info.std, COMPUTE_DTYPES[args.precision]),
                                training=False)


def evaluate(args) -> dict:
    """Every rank counts its share of the validation files; the counts are summed over ranks."""
    from tfcnn import distributed
    from tfcnn.data import pipeline
    from tfcnn.models import model_info

    distributed.init()
    if distributed.is_chief():
        for note in hardware_notes(args.precision):
            print(f"tfcnn.evaluate: {note}", flush=True)
    run = resolve_run(args)
    pipeline.list_shards(args.data_dir, "validation")  # a clear error before loading any weights
    predict = load_predictor(args, run)
    dataset = pipeline.build_dataset(args.data_dir, "validation", args.batch_size, run["image_size"],
                                     num_classes=run["num_classes"],
                                     crop_fraction=model_info(run["model"]).crop_fraction,
                                     num_shards=distributed.size(), shard_index=distributed.rank())
    with pipeline.corrupt_records_named(args.data_dir, "validation", distributed.size(), distributed.rank()):
        local = count_correct(predict, dataset)
    keys = ("count", "top1_correct", "top5_correct")
    summed = distributed.allreduce(tf.constant([local[k] for k in keys], tf.int64), average=False,
                                   name="tfcnn_eval_counts").numpy()
    return {**run, **accuracy(dict(zip(keys, (int(v) for v in summed)))), "ranks": distributed.size(),
            "weights": args.saved_model or args.checkpoint or args.log_dir, "data_dir": args.data_dir}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfcnn.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model name (default: what --log_dir or --saved_model records)")
    parser.add_argument("--data_dir", required=True, help="directory holding validation-*-of-* shards")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint path, e.g. runs/x/checkpoints/ckpt-1000")
    source.add_argument("--log_dir", help="a training log directory: its latest checkpoint")
    source.add_argument("--saved_model", help="a SavedModel exported by training (--export_dir)")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--image_size", type=int, help="default: the run's, else the model's")
    parser.add_argument("--num_classes", type=int, help="default: the run's, else labels.txt, else 1000")
    parser.add_argument("--output", help="write the result as JSON here")
    args = parser.parse_args(argv)
    for name in ("batch_size", "image_size", "num_classes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive integer, received: {value}")
    if args.checkpoint is None and args.log_dir is None and args.saved_model is None:
        parser.error("one of --checkpoint, --log_dir or --saved_model is required")
    if not (args.model or args.log_dir or args.saved_model):
        parser.error("--model is required with --checkpoint")
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
