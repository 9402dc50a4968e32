"""Training curves and model-comparison charts from tfcnn's own measurements.

    python -m tfcnn.plots --log_dir runs/a [runs/b ...] --output_dir DIR
    python -m tfcnn.plots --benchmark DIR/benchmark.json [--eval FILE ...] --output_dir DIR

    tfcnn.plots("plots", log_dirs=["runs/a"], benchmark=tfcnn.benchmark("resnet18"), evaluations=[scores])

- training_curves.png/.svg: of each run (its --log_dir's metrics.jsonl), the training loss, the training and
  validation top-1, and the learning rate against the epoch; several runs overlaid, each named by its
  directory and model.
- accuracy_vs_flops.png/.svg: top-1 against forward GMACs, bubble area proportional to parameters.
  Accuracy comes from the evaluation JSONs (`python -m tfcnn.evaluate --output`) where given, else the
  model's reference figure, drawn hollow and labelled "reference".
- latency_vs_throughput.png/.svg: for each model, p50 latency against throughput over the batch sizes
  of the benchmark, each point labelled with its batch size.
"""
from __future__ import annotations

import json
import os
import sys

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tfcnn import callable_module
from tfcnn.options import command_parser

# Figures made without pyplot, their settings given at each save: a notebook's own backend and rcParams stay
# as they were (pyplot's Agg switch would turn its inline plots off). SVG text stays text: smaller, searchable.
SAVE_SETTINGS = {"svg.fonttype": "none"}


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read {what} {path}: {error}") from None


def accuracy_points(models, evaluations):
    """[(model, gmacs, params, top1 %, measured?)] for the models, measured accuracy first."""
    from tfcnn.models import model_info  # the zoo loads TensorFlow: --help and bad flags answer without it

    measured = {e["model"]: 100 * e["top1"] for e in evaluations}
    return [(m, model_info(m).gmacs, model_info(m).params, measured.get(m, model_info(m).top1), m in measured)
            for m in models]


def read_run(log_dir) -> dict:
    """A training run's records: {"label", "train": [...], "validation": [...], "unreadable": lines left out}."""
    from tfcnn.fileio import read_jsonl
    from tfcnn.training.callbacks import METRICS_FILE
    from tfcnn.training.plan import CONFIG_FILE, previous_config

    path = os.path.join(log_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"--log_dir {log_dir} holds no {METRICS_FILE}: name a training run's --log_dir")
    records, unreadable = read_jsonl(path)
    train, validation = [r for r in records if "loss" in r], [r for r in records if "val_top1" in r]
    if not train and not validation:
        raise ValueError(f"{path} holds no training or validation record yet")
    model = (previous_config(log_dir) or {}).get("model") or f"no {CONFIG_FILE}"
    return {"label": f"{os.path.basename(os.path.normpath(log_dir))} ({model})", "train": train,
            "validation": validation, "unreadable": unreadable}


def plot_training_curves(runs, output_dir):
    fig = Figure(figsize=(15, 4.6), dpi=120)
    loss_ax, top1_ax, lr_ax = fig.subplots(1, 3)
    for index, run in enumerate(runs):
        color, train = matplotlib.colormaps["tab10"](index % 10), run["train"]
        epochs = [r["epoch"] for r in train]
        # a run that logged one step (display_every past its end) is a point: a line through one point draws nothing
        style = dict(color=color, **(dict(marker="o", markersize=4) if len(train) == 1 else {}))
        loss_ax.plot(epochs, [r["loss"] for r in train], label=run["label"], **style)
        top1_ax.plot(epochs, [100 * r["top1"] for r in train], **style)
        top1_ax.plot([r["epoch"] for r in run["validation"]], [100 * r["val_top1"] for r in run["validation"]],
                     color=color, linestyle="--", marker="o", markersize=4)
        lr_ax.plot(epochs, [r["lr"] for r in train], **style)
    for ax, label in ((loss_ax, "training loss"), (top1_ax, "top-1 (%)"), (lr_ax, "learning rate")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    loss_ax.legend(title="run (model)", fontsize=8)
    kinds = [Line2D([], [], color="gray", label="training (since the last logged step)")]
    if any(run["validation"] for run in runs):
        kinds.append(Line2D([], [], color="gray", linestyle="--", marker="o", label="validation"))
    top1_ax.legend(handles=kinds, fontsize=8)
    fig.suptitle("Training curves (metrics.jsonl)", fontsize=11)
    return _save(fig, output_dir, "training_curves")


def plot_accuracy_vs_flops(points, output_dir):
    fig = Figure(figsize=(9, 6), dpi=120)
    ax = fig.subplots()
    scale = 1200 / max(p[2] for p in points)
    for name, gmacs, params, top1, measured in points:
        ax.scatter(gmacs, top1, s=params * scale, alpha=0.45 if measured else 1.0,
                   facecolors=None if measured else "none", edgecolors="C0" if not measured else None,
                   color="C0" if measured else None, linewidths=1.5)
        ax.annotate(f"{name}{'' if measured else ' (reference)'}", (gmacs, top1), xytext=(6, 6),
                    textcoords="offset points", fontsize=8)
    ax.set_xscale("log")  # the zoo spans 0.3 (MobileNetV2) to 20 GMACs (VGG-19)
    ax.set_xlabel("forward GMACs per image (log scale)")
    ax.set_ylabel("top-1 (%)")
    ax.margins(x=0.15, y=0.12)
    ax.set_title("Accuracy vs compute (bubble area: parameters)", fontsize=11)
    kinds = {p[4] for p in points}
    handles = []
    if True in kinds:
        handles.append(ax.scatter([], [], color="C0", alpha=0.45, label="measured (tfcnn.evaluate)"))
    if False in kinds:
        handles.append(ax.scatter([], [], facecolors="none", edgecolors="C0", label="reference accuracy"))
    ax.legend(handles=handles, loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, output_dir, "accuracy_vs_flops")


def plot_latency_vs_throughput(benchmark, output_dir):
    rows = [r for r in benchmark["results"] if r.get("status") == "ok"]
    if not rows:
        raise ValueError("the benchmark holds no finished measurement to plot")
    fig = Figure(figsize=(12, 7), dpi=120)
    ax = fig.subplots()
    for index, model in enumerate(dict.fromkeys(r["model"] for r in rows)):
        series = sorted((r for r in rows if r["model"] == model), key=lambda r: r["batch_size"])
        xs, ys = [r["img_per_sec"] for r in series], [r["latency_ms_p50"] for r in series]
        # 20 colours times 3 marker/line styles: up to 60 models stay distinguishable
        variant = index // 20 % 3
        style = dict(color=matplotlib.colormaps["tab20"](index % 20), marker="os^"[variant],
                     linestyle=("-", "--", ":")[variant])
        ax.plot(xs, ys, label=model, **style)
        for r, x, y in zip(series, xs, ys):
            ax.annotate(str(r["batch_size"]), (x, y), xytext=(4, -10), textcoords="offset points", fontsize=7)
    ax.set_xlabel("throughput (images/s, log scale)")
    ax.set_ylabel("latency p50 (ms per batch)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    mode = f"{benchmark.get('mode', '')}, {benchmark.get('precision', '')}{' + XLA' if benchmark.get('use_xla') else ''}"
    ax.set_title(f"Latency vs throughput over batch sizes ({mode})\n{benchmark.get('device', '')}", fontsize=11)
    ax.legend(title="model (points: batch size)", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              ncol=1 + len(ax.get_lines()) // 25)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, output_dir, "latency_vs_throughput")


def _save(fig, output_dir, name):
    os.makedirs(output_dir, exist_ok=True)
    fig.tight_layout()
    paths = [os.path.join(output_dir, f"{name}.{ext}") for ext in ("png", "svg")]
    with matplotlib.rc_context(SAVE_SETTINGS):
        for path in paths:
            fig.savefig(path)
    return paths


def make_plots(output_dir, *, log_dirs=(), benchmark=None, evaluations=(), log=print) -> list[str]:
    """The charts (module docstring) into output_dir: of the training runs in log_dirs; of a benchmark (its
    benchmark.json, or the rows tfcnn.benchmark returned); of evaluations (tfcnn.evaluate's --output JSONs,
    or the EvalResults it returned); one run or evaluation may come alone. Returns the files written; a
    ValueError names what cannot be drawn."""
    log_dirs = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else list(log_dirs)  # not its letters
    alone = isinstance(evaluations, (str, os.PathLike, dict)) or hasattr(evaluations, "to_dict")
    evaluations = [evaluations] if alone else list(evaluations)
    if not benchmark and not evaluations and not log_dirs:
        raise ValueError("give --log_dir runs, or --benchmark and/or --eval files, to plot")
    runs = [read_run(d) for d in log_dirs]
    for log_dir, run in zip(log_dirs, runs):
        if run["unreadable"]:
            log(f"note: {log_dir}: {run['unreadable']} line(s) of its metrics were cut short, left out")
    written = plot_training_curves(runs, output_dir) if runs else []
    if not benchmark and not evaluations:
        return written
    benchmark = _benchmark(benchmark) if benchmark else None
    scores = [_evaluation(e) for e in evaluations]
    names = [r["model"] for r in benchmark["results"]] if benchmark else []
    from tfcnn.models import list_models

    names = [n for n in dict.fromkeys(names + [e["model"] for e in scores]) if n in list_models()]
    points = accuracy_points(names, scores)
    # A model registered without its counts (params, GMACs 0) or an accuracy has no place on those axes.
    drawable = [p for p in points if p[1] > 0 and p[2] > 0 and p[3] is not None]
    if drawable:
        written += plot_accuracy_vs_flops(drawable, output_dir)
    left_out = [p[0] for p in points if p not in drawable]
    if left_out:
        log(f"note: accuracy_vs_flops leaves out {', '.join(left_out)}: registered without parameter and GMAC "
            f"counts or an accuracy")
    if benchmark:
        written += plot_latency_vs_throughput(benchmark, output_dir)
    return written


def _benchmark(source) -> dict:
    """A benchmark.json's content, from its path or from tfcnn.benchmark's rows (their settings in each row)."""
    if isinstance(source, (str, os.PathLike)):
        return load_json(source, "benchmark")
    rows = list(source)
    return {"results": rows, **{key: rows[0].get(key) for key in ("mode", "precision", "use_xla") if rows}}


def _evaluation(source) -> dict:
    """An evaluation's result, from its --output JSON's path, or tfcnn.evaluate's EvalResult (or its dict)."""
    if isinstance(source, (str, os.PathLike)):
        score, what = load_json(source, "evaluation"), f"evaluation {source}"
    else:
        score, what = (source.to_dict() if hasattr(source, "to_dict") else dict(source)), "an evaluation given"
    if not {"model", "top1"} <= set(score):
        raise ValueError(f"{what} lacks 'model' and 'top1' (write it with tfcnn.evaluate --output)")
    return score


def main(argv=None):
    parser = command_parser("python -m tfcnn.plots", __doc__)
    parser.add_argument("--log_dir", nargs="*", default=[], help="training runs' --log_dir: their curves")
    parser.add_argument("--benchmark", help="benchmark.json written by python -m tfcnn.benchmark")
    parser.add_argument("--eval", nargs="*", default=[], help="JSONs written by python -m tfcnn.evaluate --output")
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    try:
        for path in make_plots(args.output_dir, log_dirs=args.log_dir, benchmark=args.benchmark,
                               evaluations=args.eval):
            print(f"wrote {path}")
    except ValueError as error:
        sys.exit(f"tfcnn.plots: error: {error}")


callable_module(__name__, make_plots)

if __name__ == "__main__":
    main()
