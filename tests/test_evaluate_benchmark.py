"""Evaluation counts (one process and two), the benchmark's outputs, and the comparison plots."""
import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from imagenet_prep.build_tfrecords import build_tfrecords
from imagenet_prep.demo_dataset import make_dataset
from tfcnn.data import pipeline
from tfcnn.data.preprocessing import normalize_batch
from tfcnn.models import create_model, model_info
from tfcnn import checkpoints
from tfcnn.metrics import scores_text, top5_text

from launchers import HOROVODRUN_GLOO, run_without_tensorflow
from testnet import WITH_TESTNET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES, SIZE = 10, 32


@pytest.fixture(scope="module")
def eval_setup(tmp_path_factory):
    """11 validation records in 3 shards (divisible by neither 2 ranks nor batch 4), a random
    resnet18 checkpoint, and the reference counts computed from its logits directly."""
    root = tmp_path_factory.mktemp("eval")
    make_dataset(str(root / "raw"), num_classes=3, train_per_class=1, val_per_class=4, min_size=40, max_size=60)
    for extra in sorted(os.listdir(root / "raw" / "val" / "circle"))[3:]:
        os.remove(root / "raw" / "val" / "circle" / extra)  # 3 + 4 + 4 = 11 images
    build_tfrecords(str(root / "tf"), str(root / "raw" / "train"), str(root / "raw" / "val"), train_shards=1,
                    validation_shards=3, resize="none", num_workers=1, log=lambda *_: None)
    tf.keras.utils.set_random_seed(7)
    model = create_model("resnet18", num_classes=NUM_CLASSES, input_shape=(SIZE, SIZE, 3), zero_init_residual=False)
    head = model.get_layer("head_fc")  # a random head large enough that each image ranks classes its own way
    head.kernel.assign(tf.random.stateless_normal(head.kernel.shape, seed=(3, 4), stddev=3.0))
    path = checkpoints.make_checkpoint(model).write(str(root / "ckpt" / "ckpt-1"))
    info = model_info("resnet18")
    logits, labels = [], []
    for images, batch_labels in pipeline.build_dataset(str(root / "tf"), "validation", 1, SIZE,
                                                       num_classes=NUM_CLASSES):
        logits.append(model(normalize_batch(images, info.mean, info.std, tf.float32), training=False).numpy()[0])
        labels.append(int(batch_labels[0]))
    logits = np.array(logits)
    rank_of_label = [(row > row[label]).sum() for row, label in zip(logits, labels)]
    reference = {"count": len(labels), "top1_correct": sum(r < 1 for r in rank_of_label),
                 "top5_correct": sum(r < 5 for r in rank_of_label)}
    assert reference["count"] == 11 and 0 < reference["top5_correct"] < 11  # a non-trivial case
    return str(root / "tf"), path, reference


def evaluate_args(data_dir, checkpoint, output):
    return ["--model=resnet18", f"--data_dir={data_dir}", f"--checkpoint={checkpoint}", "--batch_size=4",
            f"--image_size={SIZE}", f"--num_classes={NUM_CLASSES}", f"--output={output}"]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [pytest.param([], id="single"), pytest.param(HOROVODRUN_GLOO, id="horovodrun-2")])
def test_evaluation_counts_equal_the_hand_computed_reference(eval_setup, tmp_path, launcher, capsys):
    from tfcnn import evaluate

    data_dir, checkpoint, reference = eval_setup
    args = evaluate_args(data_dir, checkpoint, tmp_path / "eval.json")
    if launcher:  # the entry point as processes, two ranks
        done = subprocess.run(launcher + [sys.executable, "-m", "tfcnn.evaluate", *args], capture_output=True,
                              text=True, timeout=300, cwd=REPO)
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
    else:  # one rank: its main() in this process
        evaluate.main(args)
        out = capsys.readouterr().out
    result = json.loads((tmp_path / "eval.json").read_text())
    assert {k: result[k] for k in reference} == reference
    assert result["top1"] == pytest.approx(reference["top1_correct"] / 11)
    assert result["top5"] == pytest.approx(reference["top5_correct"] / 11)
    assert result["ranks"] == (2 if launcher else 1)
    assert re.search(rf"resnet18 +11 +{100 * result['top1']:.2f}% +{100 * result['top5']:.2f}%$", out, re.M), out
    # with 5 classes or fewer top-5 is 100% whatever the model: "-" in the table
    assert top5_text(result["top5"], NUM_CLASSES) == f"{100 * result['top5']:.2f}%" and top5_text(1.0, 5) is None
    # and training's validation lines: the same choice
    scores = {"top1": 0.5, "top5": 0.75, "count": 8}
    assert scores_text(scores, 10) == "top1 50.00%, top5 75.00% over 8 images"
    assert scores_text(scores, 5) == "top1 50.00% over 8 images"


def evaluate_main(data_dir, checkpoint, output):
    """The entry point's main() in this process, which must refuse: the message the process would exit with."""
    from tfcnn import evaluate

    with pytest.raises(SystemExit) as exit:
        evaluate.main(evaluate_args(data_dir, checkpoint, output))
    return str(exit.value.code)


def test_evaluation_errors(eval_setup, tmp_path):
    data_dir, checkpoint, _ = eval_setup
    wrong = subprocess.run([sys.executable, "-m", "tfcnn.evaluate", "--model=resnet34", f"--data_dir={data_dir}",
                            f"--checkpoint={checkpoint}"], capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0
    assert "holds a checkpoint of resnet18 (ckpt-1), not of model resnet34" in wrong.stderr
    # the entry point's other refusals, called in this process: an exit with the message, as above
    no_val = evaluate_main(str(tmp_path), checkpoint, tmp_path / "x.json")
    assert no_val.startswith("tfcnn.evaluate: error: ") and "no validation shards in --data_dir" in no_val
    assert not (tmp_path / "x.json").exists()
    # a mistyped log directory is named, before the data it would have given are asked for
    from tfcnn import evaluate

    with pytest.raises(SystemExit) as exit:
        evaluate.main([f"--log_dir={tmp_path / 'typo'}"])
    assert str(exit.value.code) == f"tfcnn.evaluate: error: {tmp_path / 'typo'}: no such file or directory (a weights " \
        "name or a timm / torchvision file needs model=NAME, --model)"


def test_bad_flags_are_refused_before_tensorflow_loads():
    """A bad flag answers at once: the entry point imports no TensorFlow (seconds) to say it. (--help too:
    test_python_api checks every command line's.)"""
    code = ("import runpy, sys\n"
            "for bad in (['--checkpoint=c', '--data_dir=d', '--batch_size=0'], ['--checkpoint=c', '--data_dir=d', "
            "'--precision=fp64'], ['--saved_model=c']):\n"
            "    sys.argv = ['python -m tfcnn.evaluate', *bad]\n"
            "    try:\n        runpy.run_module('tfcnn.evaluate', run_name='__main__', alter_sys=True)\n"
            "    except SystemExit as exit:\n        print('exit', exit.code)\n")
    lines, errors = run_without_tensorflow(code)
    assert lines == ["exit 2", "exit 2", "exit 2"], errors[-2000:]
    assert "--batch_size must be a positive integer, received: 0" in errors
    assert "argument --precision: invalid choice: 'fp64' (choose from 'fp32', 'fp16', 'bf16')" in errors
    assert "--data_dir is required: the directory of the validation shards (only --log_dir and a --checkpoint of a " \
        "training run default it" in errors


def test_evaluation_prints_progress_unless_quiet(eval_setup, capsys):
    import tfcnn

    data_dir, checkpoint, reference = eval_setup
    options = dict(data_dir=data_dir, batch_size=2, display_seconds=0)
    result = tfcnn.evaluate(checkpoint, **options)
    lines = [line for line in capsys.readouterr().out.splitlines() if "img/s" in line]
    assert len(lines) >= 3 and result.count == 11
    assert "/11 images" in lines[0] and "ETA" in lines[0] and "top-1 so far" in lines[0]
    assert lines[-1].split("/")[0].strip().replace(",", "").isdigit()
    tfcnn.evaluate(checkpoint, progress=False, **options)
    assert "img/s" not in capsys.readouterr().out


def test_a_corrupt_validation_record_is_named(eval_setup, tmp_path, write_corrupt_shard):
    _, checkpoint, _ = eval_setup
    path = write_corrupt_shard(tmp_path, "validation")
    assert f"corrupt validation record: {path}: record 1 (broken.jpg)" in evaluate_main(str(tmp_path), checkpoint,
                                                                                        tmp_path / "eval.json")
    assert not (tmp_path / "eval.json").exists()


@pytest.mark.slow
def test_benchmark_writes_ordered_percentiles(tmp_path, testnet):
    from tfcnn import benchmark

    args = ["--models=testnet", "--batch_sizes=1,2", "--image_size=32", "--steps=6", "--warmup_steps=1",
            f"--output_dir={tmp_path}"]
    for mode in ("train", "inference"):
        if mode == "train":  # the entry point as a process, as a user runs it
            done = subprocess.run([sys.executable, WITH_TESTNET, "-m", "tfcnn.benchmark", *args, f"--mode={mode}"],
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
        else:  # its main() in this process
            benchmark.main(args + [f"--mode={mode}"])
        result = json.loads((tmp_path / "benchmark.json").read_text())
        assert result["mode"] == mode and result["device"]
        assert [r["batch_size"] for r in result["results"]] == [1, 2]
        with open(tmp_path / "benchmark.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 2
        for row in result["results"] + rows:
            assert row["status"] == "ok"
            values = [float(row[f"latency_ms_p{p}"]) for p in (50, 90, 95, 99)]
            assert values == sorted(values) and values[0] > 0
            assert float(row["img_per_sec"]) > 0
            # throughput and latency describe the same steps: batch / mean latency
            assert float(row["img_per_sec"]) == pytest.approx(
                int(row["batch_size"]) * 1000 / float(row["latency_ms_mean"]), rel=1e-6)


def test_benchmark_with_xla_runs_and_notes_it_is_slower_without_a_gpu(tmp_path, testnet, capsys):
    from tfcnn import benchmark

    benchmark.main(["--models=testnet", "--batch_sizes=2", "--image_size=32", "--steps=2", "--warmup_steps=1",
                    "--use_xla", f"--output_dir={tmp_path}"])
    result = json.loads((tmp_path / "benchmark.json").read_text())
    assert result["use_xla"] is True and result["results"][0]["status"] == "ok"
    no_gpu = not tf.config.list_physical_devices("GPU")
    assert ("XLA's CPU convolutions are slower" in capsys.readouterr().out) == no_gpu


@pytest.mark.parametrize("args, message", [
    (["--batch_sizes="], "--batch_sizes must list at least one positive integer"),
    (["--models=resnet18,nope"], "unknown model name(s) in --models: nope"),
    (["--batch_sizes=2,x"], "--batch_sizes must be comma-separated integers"),
])
def test_benchmark_rejects_bad_arguments(args, message, capsys):
    """argparse's refusal (exit status 2, the message on stderr), in this process: test_benchmark_writes_... runs
    the entry point as a process."""
    from tfcnn import benchmark

    with pytest.raises(SystemExit) as exit:
        benchmark.main(args)
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_batch_sizes_come_alone_comma_separated_or_listed():
    """tfcnn.benchmark(..., batch_sizes=8) failed with "'int' object is not iterable"."""
    from tfcnn.benchmark import batch_size_list

    assert batch_size_list(8) == batch_size_list("8") == batch_size_list([8]) == [8]
    assert batch_size_list("8, 16") == batch_size_list((8, 16)) == [8, 16]


def test_a_warmup_that_cannot_finish_gives_no_figure(monkeypatch):
    from tfcnn import benchmark

    def failing_step():
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    with pytest.raises(benchmark.WarmupError, match="could not finish 2 warmup steps: ResourceExhaustedError: OOM"):
        benchmark.measure(failing_step, 2, 5)
    monkeypatch.setattr(benchmark, "make_step", lambda *args, **kwargs: failing_step)
    rows = benchmark.run(["resnet18"], "inference", [512], log=lambda *_: None)
    assert rows[0]["status"].startswith("could not finish") and "img_per_sec" not in rows[0]


def test_plots_are_written(tmp_path, monkeypatch):
    benchmark = {"mode": "inference", "precision": "fp32", "device": "test CPU", "results": [
        {"model": m, "batch_size": b, "status": "ok", "img_per_sec": 10.0 * b / k, "latency_ms_p50": 5.0 * b * k}
        for k, m in enumerate(("resnet18", "resnet50"), start=1) for b in (1, 2, 4)]}
    (tmp_path / "benchmark.json").write_text(json.dumps(benchmark))
    (tmp_path / "eval.json").write_text(json.dumps({"model": "resnet18", "top1": 0.7, "top5": 0.9, "count": 10}))
    # a run's metrics.jsonl (its lines as the trainer writes them; test_python_api plots a real run's) with a line
    # cut short by a crash, and a directory that is no run
    run = tmp_path / "rn18_run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": "resnet18"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 5, "epoch": 0.5, "loss": 2.0, "top1": 0.2, "lr": 0.1, "img_per_sec": 9.0},
        {"step": 10, "epoch": 1.0, "loss": 1.5, "top1": 0.4, "lr": 0.05, "img_per_sec": 9.0},
        {"step": 10, "epoch": 1.0, "val_top1": 0.5, "val_top5": 1.0, "val_count": 8})) + '{"step": 15, "ep')
    done = subprocess.run([sys.executable, "-m", "tfcnn.plots", f"--benchmark={tmp_path / 'benchmark.json'}",
                           f"--eval={tmp_path / 'eval.json'}", f"--log_dir={run}",
                           f"--output_dir={tmp_path / 'plots'}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"note: {run}: 1 line(s) of its metrics were cut short, left out" in done.stdout
    curves = (tmp_path / "plots" / "training_curves.svg").read_text()
    assert "rn18_run (resnet18)" in curves and ">validation</text>" in curves  # its validation drawn, and named
    for name in ("accuracy_vs_flops", "latency_vs_throughput", "training_curves"):
        png = (tmp_path / "plots" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert (tmp_path / "plots" / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    svg = (tmp_path / "plots" / "accuracy_vs_flops.svg").read_text()
    assert "resnet50 (reference)" in svg and "resnet18 (reference)" not in svg
    from tfcnn import plots

    with pytest.raises(SystemExit) as bad:  # in this process: the exit the command above would make
        plots.main([f"--output_dir={tmp_path}"])
    assert "give --log_dir runs, or --benchmark and/or --eval files, to plot" in str(bad.value.code)
    with pytest.raises(SystemExit) as bad:
        plots.main([f"--log_dir={tmp_path}", f"--output_dir={tmp_path}"])
    assert f"--log_dir {tmp_path} holds no metrics.jsonl: name a training run's --log_dir" in str(bad.value.code)
    # a run that logged one step is drawn as a point in each chart (a line through one point is invisible)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 3, "epoch": 1.0, "loss": 0.7, "top1": 0.3, "lr": 0.001}))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, *_: figures.append(figure) or [])
    plots.make_plots(str(tmp_path), log_dirs=[str(run)], log=lambda *_: None)
    lines = [line for ax in figures[0].axes for line in ax.get_lines()]
    assert [len(line.get_xdata()) for line in lines] == [1, 1, 0, 1]  # loss, top-1, no validation, rate
    assert all(line.get_marker() == "o" for line in lines if len(line.get_xdata()))
