"""Training and inference throughput and latency on synthetic data, per model and batch size.

    python -m tfcnn.benchmark --models resnet50,resnext101_32x4d --mode train|inference \\
        --batch_sizes 1,2,4,8,16,32 --precision fp32|fp16|bf16 [--use_xla] [--image_size N] [--output_dir DIR]
    python -m tfcnn.benchmark --models resnet50 --weights FILE_OR_CHECKPOINT ...   (its input size and mean/std)
    horovodrun -np 8 python -m tfcnn.benchmark --mode train --precision fp16 --use_xla --batch_sizes 256

    rows = tfcnn.benchmark("resnet50", mode="train", batch_sizes=[8, 16])   # a row per model and batch size

Each measurement runs `--warmup_steps` untimed steps (graph tracing, autotuning, allocator growth), then
times `--steps` steps one by one, synchronizing on each result. Reports the mean throughput and true
latency percentiles (p50/p90/p95/p99 of the per-step times, not a mean). Training steps are tfcnn's own
train_step (gradient averaging included); under horovodrun the figures are global and per GPU.
--output_dir receives benchmark.csv and benchmark.json. The defaults keep one model on a CPU to a
couple of minutes; pass larger --batch_sizes on GPUs.
"""
from __future__ import annotations

import csv
import json
import numbers
import os
import platform
import sys
import time

# TensorFlow (and the zoo, which needs it) load where they are used: --help and bad flags answer at once.
from tfcnn import callable_module
from tfcnn.options import PRECISIONS, command_parser

MODES = ("train", "inference")

PERCENTILES = (50, 90, 95, 99)
CSV_FIELDS = ["model", "mode", "precision", "use_xla", "image_size", "batch_size", "ranks", "status",
              "img_per_sec", "img_per_sec_per_rank", "latency_ms_mean", "latency_ms_p50", "latency_ms_p90",
              "latency_ms_p95", "latency_ms_p99", "steps", "warmup_steps"]


class WarmupError(RuntimeError):
    """The warmup could not complete (out of memory, unsupported op...): no figure is meaningful."""


def make_step(model_name, mode, batch_size, image_size, precision, use_xla, num_classes=1000, weights=None):
    """A zero-argument function running one synced step; builds everything it needs. weights: a path or an
    opened weights.Source; its data config's mean/std normalize the inputs."""
    import tensorflow as tf

    from tfcnn.data.pipeline import synthetic_dataset
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.models import create_model
    from tfcnn.precision import COMPUTE_DTYPES, set_policy
    from tfcnn.training.optimizers import build_optimizer
    from tfcnn.training.trainer import ClassifierTrainer

    set_policy(precision)
    model = create_model(model_name, num_classes=None if weights else num_classes,
                         input_shape=(image_size, image_size, 3), weights=weights, log=lambda *_: None)
    data = model.data_config
    num_classes = model.output_shape[-1]
    batches = iter(synthetic_dataset(batch_size, image_size, num_classes))
    if mode == "inference":  # 0-255 images on the compute device (no copy per step), normalized in the step
        images = tf.Variable(tf.cast(next(batches)[0], tf.float32), trainable=False)
        forward = tf.function(lambda: model(normalize_batch(images, data.mean, data.std, COMPUTE_DTYPES[precision]),
                                            training=False), jit_compile=use_xla)
        return lambda: forward().numpy()
    optimizer, _ = build_optimizer("sgd", 0.01, momentum=0.9, loss_scale="dynamic" if precision == "fp16" else None)
    trainer = ClassifierTrainer(model, num_classes, mean=data.mean, std=data.std, loss_scale=precision == "fp16",
                                use_xla=use_xla, stop_on_nonfinite=False)
    trainer.compile(optimizer=optimizer)
    trainer.keep_batch_on_device(*next(batches))
    steps = iter(tf.data.Dataset.from_tensors(0).repeat())
    train_function = trainer.make_train_function()
    return lambda: train_function(steps)["loss"].numpy()


def measure(step, warmup_steps, steps):
    """Per-step wall times (seconds) of `steps` synced steps after `warmup_steps` untimed ones."""
    import numpy as np
    import tensorflow as tf

    try:
        for _ in range(warmup_steps):
            step()
    except (tf.errors.OpError, ValueError, MemoryError) as error:
        message = (getattr(error, "message", None) or str(error)).strip().splitlines()[0][:300]
        raise WarmupError(f"could not finish {warmup_steps} warmup steps: {type(error).__name__}: {message}") from None
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return np.array(times)


def summarize(times, batch_size, ranks) -> dict:
    import numpy as np

    per_step = float(np.mean(times))
    row = {"img_per_sec": batch_size * ranks / per_step, "img_per_sec_per_rank": batch_size / per_step,
           "latency_ms_mean": 1000 * per_step}
    for p, value in zip(PERCENTILES, np.percentile(times, PERCENTILES)):
        row[f"latency_ms_p{p}"] = 1000 * float(value)
    return row


def run(models, mode, batch_sizes, precision="fp32", use_xla=False, image_size=None, warmup_steps=3, steps=10,
        log=print, weights=None) -> list[dict]:
    """weights: a weights file or checkpoint for the (single) model: its input size and normalization."""
    import tensorflow as tf

    from tfcnn import distributed
    from tfcnn.models import model_info
    from tfcnn.models.weights import open_weights

    rows = []
    ranks = distributed.size() if mode == "train" else 1
    source = open_weights(models[0], weights) if weights else None
    for name in models:
        size = image_size or (source.data_config if source else model_info(name)).input_size
        for batch_size in batch_sizes:
            row = {"model": name, "mode": mode, "precision": precision, "use_xla": use_xla, "image_size": size,
                   "batch_size": batch_size, "ranks": ranks, "steps": steps, "warmup_steps": warmup_steps}
            try:
                step = make_step(name, mode, batch_size, size, precision, use_xla, weights=source)
                times = measure(step, warmup_steps, steps)
                row.update(status="ok", **summarize(times, batch_size, ranks))
                log(f"{name:<22}{batch_size:>6}{row['img_per_sec']:>11.1f}{row['img_per_sec_per_rank']:>11.1f}"
                    + "".join(f"{row[f'latency_ms_p{p}']:>9.1f}" for p in PERCENTILES))
            except WarmupError as error:
                row["status"] = str(error)
                log(f"{name:<22}{batch_size:>6}  {error}")
            finally:
                tf.keras.backend.clear_session()
            rows.append(row)
    return rows


def environment() -> dict:
    import tensorflow as tf

    from tfcnn.precision import cpu_flags

    gpus = tf.config.list_physical_devices("GPU")
    gpu_names = [tf.config.experimental.get_device_details(g).get("device_name", "GPU") for g in gpus]
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    # Virtual machines often hide the CPU model; the vector extensions decide oneDNN's convolution speed.
    simd = next((name for name in ("avx512f", "avx2", "avx") if name in cpu_flags()), "unknown")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"tensorflow": tf.__version__, "gpus": gpu_names, "cpu": cpu, "cpu_simd": simd, "cpu_cores": cores,
            "device": ", ".join(gpu_names) if gpu_names else f"CPU ({cpu}, {cores} cores, {simd})"}


def write_outputs(output_dir, rows, meta):
    from tfcnn.fileio import atomic_write_text

    os.makedirs(output_dir, exist_ok=True)
    atomic_write_text(os.path.join(output_dir, "benchmark.json"), json.dumps({**meta, "results": rows}, indent=1) + "\n")
    tmp = os.path.join(output_dir, f".benchmark.csv.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, os.path.join(output_dir, "benchmark.csv"))


def batch_size_list(value) -> list:
    """--batch_sizes as a list: one size alone, comma-separated sizes (the command line's), or a list of them."""
    if isinstance(value, numbers.Integral):
        return [value]
    if isinstance(value, str):
        try:
            return [int(size) for size in value.split(",") if size.strip()]
        except ValueError:
            raise ValueError(f"--batch_sizes must be comma-separated integers, received: {value!r}") from None
    return list(value)


def check_options(models, *, mode, batch_sizes, precision, image_size, weights, warmup_steps, steps) -> list[str]:
    """The model names `models` stands for (a name, a list, comma-separated names or "all"), or a ValueError
    naming the bad value. The names are checked last: the zoo loads TensorFlow."""
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, received: {mode!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, received: {precision!r}")
    if not batch_sizes or not all(isinstance(b, numbers.Integral) and b >= 1 for b in batch_sizes):
        raise ValueError(f"--batch_sizes must list at least one positive integer, received: {batch_sizes!r}")
    if steps < 2 or warmup_steps < 0:
        raise ValueError(f"--steps must be >= 2 and --warmup_steps >= 0, received: {steps}, {warmup_steps}")
    if image_size is not None and image_size < 32:
        raise ValueError(f"--image_size must be >= 32, received: {image_size}")
    from tfcnn.models import list_models

    if isinstance(models, str):
        models = list_models() if models.strip() == "all" else [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in models if m not in list_models()]
    if not models or unknown:
        raise ValueError(f"unknown model name(s) in --models: {', '.join(unknown) or repr(models)}; "
                         f"valid names: {', '.join(list_models())}, or 'all'")
    if weights and len(models) != 1:
        raise ValueError(f"--weights belongs to one model; --models lists {len(models)}: {', '.join(models)}")
    return list(models)


def benchmark(models="resnet50", *, mode: str = "inference", batch_sizes=(1, 2, 4, 8, 16, 32), precision: str = "fp32",
              use_xla: bool = False, image_size: int | None = None, weights=None, warmup_steps: int = 3,
              steps: int = 10, output_dir=None, log=print) -> list[dict]:
    """Throughput and latency of `models` (a name, a list, comma-separated names or "all") at each of
    `batch_sizes` (one, a list, or comma-separated), on synthetic data: a row per model and batch size, its
    status "ok" with img_per_sec and the latency percentiles, or why no figure is meaningful; written to
    output_dir's benchmark.csv and benchmark.json when given. Under horovodrun, training figures are global.
    A ValueError names a bad value."""
    batch_sizes = batch_size_list(batch_sizes)
    models = check_options(models, mode=mode, batch_sizes=batch_sizes, precision=precision, image_size=image_size,
                           weights=weights, warmup_steps=warmup_steps, steps=steps)
    from tfcnn import distributed
    from tfcnn.precision import startup_notes

    distributed.init()
    chief = distributed.is_chief()
    log = log if chief else (lambda *_: None)
    meta = {**environment(), "mode": mode, "precision": precision, "use_xla": use_xla,
            "ranks": distributed.size() if mode == "train" else 1}
    log(f"tfcnn.benchmark: {mode}, {precision}{' + XLA' if use_xla else ''}, synthetic data, {meta['ranks']} rank(s), "
        f"on {meta['device']}; {warmup_steps} warmup + {steps} timed steps")
    for note in startup_notes(precision, use_xla):
        log(f"tfcnn.benchmark: {note}")
    log(f"{'model':<22}{'batch':>6}{'img/s':>11}{'img/s/rank':>11}" + "".join(f"{f'p{p} ms':>9}" for p in PERCENTILES))
    rows = run(models, mode, batch_sizes, precision, use_xla, image_size, warmup_steps, steps, log, weights=weights)
    if chief and output_dir:
        write_outputs(output_dir, rows, meta)
        log(f"wrote {output_dir}/benchmark.csv and benchmark.json")
    return rows


def parse_args(argv=None):
    parser = command_parser("python -m tfcnn.benchmark", __doc__)
    parser.add_argument("--models", default="resnet50", help="comma-separated names, or 'all'")
    parser.add_argument("--mode", choices=MODES, default="inference")
    parser.add_argument("--batch_sizes", default="1,2,4,8,16,32", help="comma-separated per-GPU batch sizes")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--use_xla", action="store_true")
    parser.add_argument("--image_size", type=int, help="default: each model's input size (--weights': theirs)")
    parser.add_argument("--weights", help="weights of the one model in --models (timm / torchvision file or tfcnn "
                                          "checkpoint): its input size and normalization are used")
    parser.add_argument("--warmup_steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--output_dir", help="write benchmark.csv and benchmark.json here")
    args = parser.parse_args(argv)
    try:  # a flag error, as argparse's own
        args.batch_sizes = batch_size_list(args.batch_sizes)
        args.models = check_options(args.models, mode=args.mode, batch_sizes=args.batch_sizes,
                                    precision=args.precision, image_size=args.image_size, weights=args.weights,
                                    warmup_steps=args.warmup_steps, steps=args.steps)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        rows = benchmark(args.models, mode=args.mode, batch_sizes=args.batch_sizes, precision=args.precision,
                         use_xla=args.use_xla, image_size=args.image_size, weights=args.weights,
                         warmup_steps=args.warmup_steps, steps=args.steps, output_dir=args.output_dir)
    except ValueError as error:
        sys.exit(f"tfcnn.benchmark: error: {error}")
    if not any(r["status"] == "ok" for r in rows):
        sys.exit("tfcnn.benchmark: error: no measurement finished its warmup")


callable_module(__name__, benchmark)


if __name__ == "__main__":
    main()
