"""Smoke test of every bench/ script at tiny sizes: it runs, and its JSON is well formed and positive.
No timing assertions: the figures themselves are for people, measured by `make bench`."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from launchers import CYCLE_TIME_MS
from testnet import WITH_TESTNET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# train_step.py, inference.py and memory.py on MobileNetV2, the quickest to build and trace of the models Keras
# has too (building and tracing are most of a smoke run: on ResNet-50, their default, they take up to 45% longer).
TINY = {
    # Without the XLA pair: compiling a model's step for the CPU takes a minute whatever the size (the
    # trainer's XLA path is tested against plain steps in test_training, the benchmark's in test_evaluate_benchmark).
    "train_step.py": ["--model=mobilenet_v2", "--batch_size=2", "--image_size=48", "--steps=2", "--warmup_steps=1",
                      "--repeats=1", "--no_xla"],
    # 16 images converted in this process (a worker process each would start TensorFlow for a few of them)
    "input_pipeline.py": ["--num_images=16", "--prep_workers=1", "--images=16", "--batch_size=4", "--image_size=32",
                          "--repeats=1"],
    "prep_conversion.py": ["--num_images=8", "--workers=2"],
    "inference.py": ["--model=mobilenet_v2", "--image_size=32", "--large_batch=4", "--steps=4"],
    "memory.py": ["--model=mobilenet_v2", "--batch_size=2", "--image_size=48", "--steps=2", "--repeats=1"],
    # Each rank is a process of its own: tests/testnet.py's model, built and traced in a fraction of ResNet-18's time
    # (a launch of two ranks: 10 CPU-s against 17), through the wrapper that registers it.
    "stop_agreement.py": ["--model=testnet", "--image_size=32", "--batch_size=2", "--steps=6", "--warmup_steps=2",
                          "--repeats=1", f"--train_command={shlex.quote(WITH_TESTNET)} examples/train.py"],
    "roofline.py": ["--model=resnet18", "--image_size=64", "--batch_size=2", "--steps=1", "--matmul_size=256",
                    "--matmul_seconds=0.1", "--repeats=1"],
    # One case (each measurement is a fresh process of its own): its row holds both kernel sets' figures.
    "kernels.py": ["--cases=resnet18 32px", "--batch_size=2", "--steps=1", "--repeats=1"],
    "onnx_inference.py": ["--model=resnet18", "--image_size=32", "--batch_sizes=1,2", "--rounds=1", "--calls=1"],
    # tests/testnet.py's model with one grouped convolution, through the wrapper that registers it: Keras' side
    # compiles each grouped convolution with XLA (ResNeXt-50's 16 made this smoke run 21 CPU-s; this, 4).
    "grouped_conv.py": ["--model=testnet_grouped", "--image_size=32", "--batch_size=2", "--steps=1", "--repeats=1"],
}
# Run through tests/scripts/with_testnet.py, which registers tests/testnet.py's models first.
WITH_TESTNET_MODELS = ("grouped_conv.py",)
# The smoke runs that train a model, at a size and batch where it can (see test_training_smoke_runs_...): the
# sizes test_models trains each at, with its batch of 2 (the cheapest such runs: batch 8 at 32 px costs the same
# pixels, and ResNet-18's 1x1 maps there are Eigen's slowest shape).
TRAINING = ("grouped_conv.py", "memory.py", "roofline.py", "stop_agreement.py", "train_step.py")
# Rows a smoke run reports where it is not one per contender (2): kernels.py's one case, Eigen and oneDNN in its row.
ROWS = {"kernels.py": 1}
# Scripts of an optional extra: skipped, with the install command, where it is not installed.
EXTRAS = {"onnx_inference.py": (("tf2onnx", "onnxruntime", "onnx"), "pip install -e '.[onnx]' (or make install ONNX=1)")}


def positive_numbers(obj):
    if isinstance(obj, dict):
        return [v for value in obj.values() for v in positive_numbers(value)]
    return [obj] if isinstance(obj, float) else []


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(TINY))
def test_bench_script_writes_well_formed_json(script, tmp_path):
    import importlib.util

    packages, install = EXTRAS.get(script, ((), ""))
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"{script} needs {', '.join(missing)}: {install}")
    out = tmp_path / "result.json"
    env = {**os.environ, "HOROVOD_CYCLE_TIME": CYCLE_TIME_MS}  # stop_agreement.py's ranks: as the tests' launchers
    wrapper = [WITH_TESTNET] if script in WITH_TESTNET_MODELS else []
    command = [sys.executable, *wrapper, os.path.join(REPO, "bench", script), *TINY[script], f"--output={out}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == f"bench/{script}" and result["environment"]["device"]
    assert len(result["results"]) >= ROWS.get(script, 2) and result["ratios"]
    if script == "kernels.py":
        assert all({"eigen_img_per_sec", "onednn_img_per_sec"} <= set(row) for row in result["results"])
    figures = positive_numbers({"results": {str(i): r for i, r in enumerate(result["results"])},
                                "ratios": result["ratios"]})
    assert figures and all(v > 0 for v in figures)
    assert "ratio" in done.stdout


def test_input_bench_refuses_missing_records(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "bench", "input_pipeline.py"),
                           f"--data_dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "no train shards" in done.stderr and "no ratio reported" in done.stderr


@pytest.mark.parametrize("script", TRAINING)
def test_training_smoke_runs_give_every_batch_norm_enough_values(script, testnet):
    """With batch 2 at 32 px MobileNetV2's last batch norms normalize 2 values per channel, and its loss turned
    NaN at step 3 on Eigen's kernels (AVX2 CPUs), which the draw had spared on others: the trainer's own
    check must find nothing to warn about in any smoke run."""
    from tfcnn.models import create_model
    from tfcnn.training.callbacks import small_batch_norm_warning

    flags = dict(arg[2:].split("=", 1) for arg in TINY[script] if "=" in arg)
    size = int(flags["image_size"])
    model = create_model(flags["model"], num_classes=10, input_shape=(size, size, 3))
    assert small_batch_norm_warning(model, int(flags["batch_size"])) is None
