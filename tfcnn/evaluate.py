"""Top-1 / top-5 over a whole validation set, every image exactly once.

    python -m tfcnn.evaluate --data_dir DIR (--checkpoint PATH | --log_dir DIR | --saved_model DIR |
        --model NAME --weights FILE_OR_NAME) [--batch_size 256] [--precision fp32|fp16|bf16] [--output FILE]
        [--data_backend tf|dali_cpu|dali_gpu]
    python -m tfcnn.evaluate --log_dir DIR                     (the validation split of the dataset the run read)
    python -m tfcnn.evaluate --checkpoint DIR/checkpoints/ckpt-N                                  (the same)
    horovodrun -np 8 python -m tfcnn.evaluate ...    (ranks split the records; counts are summed)

    result = tfcnn.evaluate("runs/rn50", data_dir=DIR)         # or a checkpoint, SavedModel, zoo model
    result = tfcnn.evaluate("runs/rn50")                       # a run: its own dataset's validation split
    result = tfcnn.evaluate(model, data=(x_val, y_val))        # data in memory; result.top1, result.count

The weights say how to feed them: a tfcnn checkpoint (a path, the latest in --log_dir, or a
`python -m tfcnn.convert` output) records its model, class count, builder options and data config
(input size, crop, mean/std, interpolation); a SavedModel's tfcnn.json does the same; a timm /
torchvision file (--weights) brings timm's config.json or torchvision's known transforms.
--image_size, --crop_fraction, --interpolation and --eval_crop override what they say. Rank 0 prints progress
(its share of the images, img/s, ETA, running top-1) every --display_seconds, unless --quiet.
"""
from __future__ import annotations

import dataclasses
import json
import sys

# No TensorFlow at import: the command line's --help and flag errors answer at once (its import takes seconds).
from tfcnn import callable_module, sources
from tfcnn.options import (DATA_BACKENDS, EVAL_PRECISIONS, add_feed_flags, add_weight_sources, check_feed_flags,
                           command_parser)


@dataclasses.dataclass
class EvalResult:
    """Top-1 / top-5 of a model over a whole validation set, every image counted once over all ranks."""
    model: str
    count: int
    top1: float
    top5: float
    top1_correct: int
    top5_correct: int
    num_classes: int
    image_size: int
    ranks: int
    weights: str  # the source evaluated
    data_dir: str | None  # None for data in memory
    data_config: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_predictor(source, *, model: str | None = None, precision: str = "fp32", image_size: int | None = None,
                   crop_fraction: float | None = None, interpolation: str | None = None,
                   eval_crop: str | None = None, num_classes: int | None = None, log=print):
    """(uint8 0-255 images -> logits, run description) of a source (tfcnn.sources). Normalization included
    (a SavedModel has it inside). precision: the compute precision of a model built here."""
    import tensorflow as tf

    from tfcnn import checkpoints
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.models import DataConfig
    from tfcnn.precision import set_policy

    overrides = dict(input_size=image_size, crop_fraction=crop_fraction, interpolation=interpolation,
                     eval_crop=eval_crop)
    if sources.is_saved_model(source):
        recorded = sources.saved_model_info(source)
        if model and model != recorded["model"]:
            raise ValueError(f"the SavedModel {source} holds {recorded['model']}, not model {model}")
        if num_classes is not None and num_classes != recorded["num_classes"]:
            raise ValueError(f"the SavedModel {source} has {recorded['num_classes']} classes, not {num_classes}")
        data = DataConfig.from_dict(recorded["data_config"]).replace(**overrides)
        if data.input_size != recorded["image_size"]:
            raise ValueError(f"image_size {data.input_size}: the SavedModel takes {recorded['image_size']} px")
        loaded = tf.saved_model.load(source)  # referenced by the closure: its variables must live
        predict = lambda images: loaded.signatures["serving_default"](images=tf.cast(images, tf.float32))["logits"]
        return predict, {"model": recorded["model"], "num_classes": recorded["num_classes"], "data_config": data}
    if sources.in_memory_model(source) is None:
        set_policy(precision)
    network = sources.load_model(source, model=model, num_classes=num_classes, log=log, **{
        "image_size": image_size, "crop_fraction": crop_fraction, "interpolation": interpolation,
        "eval_crop": eval_crop})
    data = network.data_config
    if getattr(network, "includes_preprocessing", False):  # takes 0-255 pixels itself
        predict = lambda images: network(images, training=False)
    else:
        dtype = network.compute_dtype
        predict = lambda images: network(normalize_batch(images, data.mean, data.std, dtype), training=False)
    return predict, {"model": network.name, "num_classes": checkpoints.model_classes(network), "data_config": data}


def evaluate(source, *, data_dir: str | None = None, data=None, model: str | None = None, batch_size: int = 256,
             precision: str = "fp32", data_backend: str = "tf", image_size: int | None = None,
             crop_fraction: float | None = None, interpolation: str | None = None, eval_crop: str | None = None,
             num_classes: int | None = None, progress: bool = True, display_seconds: float = 30.0,
             log=print) -> EvalResult:
    """Top-1 / top-5 of `source` (a path, zoo model or RunResult: tfcnn.sources) over data_dir's validation
    records (for a training run's log directory or RunResult, by default those of the dataset it read), or over
    `data` in memory ((x, y) arrays or a Dataset of (image, label), 0-255 RGB; images already at the input size
    are taken as they are, others get the evaluation view). Every rank counts its share; the counts are summed
    over ranks. precision: of a model built here (fp32, fp16, bf16).
    progress: rank 0 prints its progress every display_seconds."""
    import tensorflow as tf

    from tfcnn import distributed
    from tfcnn.data import backends, memory, pipeline
    from tfcnn.metrics import accuracy, count_correct
    from tfcnn.precision import startup_notes

    if data_dir is not None and data is not None:
        raise ValueError("evaluate takes data_dir (validation records) or data (in memory), not both")
    runs_dataset = sources.run_data_dir(source) if data_dir is None and data is None else None
    data_dir = data_dir or runs_dataset
    if data_dir is None and data is None:
        sources.check_exists(source, model)  # a mistyped --log_dir is named as such, not as missing data
        raise ValueError("evaluate needs data_dir (validation records) or data (in memory): only a training run "
                         "that read records gives its own (its log directory, a checkpoint in it, or its RunResult)")
    if precision not in EVAL_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(EVAL_PRECISIONS)}, received: {precision!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, received: {batch_size}")
    distributed.init()
    chief = distributed.is_chief()
    log = log if chief else (lambda *_: None)
    for note in startup_notes(precision):
        log(f"tfcnn.evaluate: {note}")
    if runs_dataset:
        log(f"tfcnn.evaluate: on the validation split of {runs_dataset}, the dataset the run read")
    # Before any weights load: a clear error when the shards (or their DALI indexes) are missing, or the data
    # in memory are malformed.
    share = _rank_share(data_backend, data_dir, distributed.size(), distributed.rank()) if data is None else None
    if data is not None:
        memory.check(data, "data")
    predict, run = load_predictor(source, model=model, precision=precision, image_size=image_size,
                                  crop_fraction=crop_fraction, interpolation=interpolation, eval_crop=eval_crop,
                                  num_classes=num_classes, log=log)
    view = run["data_config"]
    options = dict(num_classes=run["num_classes"], crop_fraction=view.crop_fraction, interpolation=view.interpolation,
                   eval_crop=view.eval_crop, num_shards=distributed.size(), shard_index=distributed.rank())
    if data is None:
        dataset = backends.build_dataset(data_backend, data_dir, "validation", batch_size, view.input_size, **options)
    else:
        dataset = memory.eval_batches(data, batch_size=batch_size, image_size=view.input_size, what="data", **options)
    report = None
    if chief and progress and share is not None:
        label = "images" if distributed.size() == 1 else "images (rank 0's share)"
        report = lambda counts, seconds: _print_progress(counts, seconds, share, label)
    with pipeline.corrupt_records_named(data_dir, "validation", distributed.size(), distributed.rank()):
        local = count_correct(predict, dataset, report, display_seconds)
    keys = ("count", "top1_correct", "top5_correct")
    summed = distributed.allreduce(tf.constant([local[k] for k in keys], tf.int64), average=False,
                                   name="tfcnn_eval_counts").numpy()
    if not summed[0]:  # every rank alike: the counts are summed
        raise ValueError("data holds no images: nothing to evaluate" if data is not None else
                         f"{data_dir}: its validation records hold no images: nothing to evaluate")
    return EvalResult(model=run["model"], **accuracy(dict(zip(keys, (int(v) for v in summed)))),
                      num_classes=run["num_classes"], image_size=view.input_size, ranks=distributed.size(),
                      weights=sources.describe(source), data_dir=data_dir, data_config=view.to_dict())


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
    parser = command_parser("python -m tfcnn.evaluate", __doc__)
    parser.add_argument("--model", help="model name (default: what the checkpoint or SavedModel records)")
    parser.add_argument("--data_dir", help="directory holding validation-*-of-* shards (default, with --log_dir or a "
                                           "--checkpoint of a training run: the dataset the run read)")
    add_weight_sources(parser, "a SavedModel exported by training (--export_dir), tfcnn.convert or tfcnn.export")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--precision", choices=EVAL_PRECISIONS, default="fp32")
    parser.add_argument("--data_backend", choices=DATA_BACKENDS, default="tf",
                        help="input pipeline: tf (tf.data), dali_cpu or dali_gpu (NVIDIA DALI decoding on the CPU or "
                             "the GPU; make install DALI=1)")
    add_feed_flags(parser)
    parser.add_argument("--output", help="write the result as JSON here")
    parser.add_argument("--display_seconds", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    check_feed_flags(parser, args, ("batch_size", "image_size", "num_classes"))
    if args.data_dir is None and not (args.log_dir or args.checkpoint):
        parser.error("--data_dir is required: the directory of the validation shards (only --log_dir and a "
                     "--checkpoint of a training run default it, to the dataset the run read)")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        result = evaluate(args.saved_model or args.checkpoint or args.log_dir or args.weights, data_dir=args.data_dir,
                          model=args.model, batch_size=args.batch_size, precision=args.precision,
                          data_backend=args.data_backend, image_size=args.image_size,
                          crop_fraction=args.crop_fraction, interpolation=args.interpolation,
                          eval_crop=args.eval_crop, num_classes=args.num_classes, progress=not args.quiet,
                          display_seconds=args.display_seconds)
    except (ValueError, RuntimeError) as error:
        sys.exit(f"tfcnn.evaluate: error: {error}")
    from tfcnn import distributed
    from tfcnn.metrics import top5_text

    if distributed.is_chief():
        print(f"{'model':<22}{'images':>8}{'top-1':>9}{'top-5':>9}")
        top5 = top5_text(result.top5, result.num_classes) or "-"  # "-": 5 classes or fewer
        print(f"{result.model:<22}{result.count:>8}{100 * result.top1:>8.2f}%{top5:>9}")
        if args.output:
            from tfcnn.fileio import atomic_write_text

            atomic_write_text(args.output, json.dumps(result.to_dict(), indent=1) + "\n")


callable_module(__name__, evaluate)

if __name__ == "__main__":
    main()
