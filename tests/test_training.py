"""Training: schedules, optimizers, learning, resume, export, bad input, and real multi-process runs."""
import dataclasses
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfcnn.training import NonFiniteLossError, make_config, train
from tfcnn import checkpoints, sources
from tfcnn.fileio import read_jsonl
from tfcnn.training.optimizers import build_optimizer, decayed_variables
from tfcnn.training.schedules import WarmupDecay

from testnet import TRAIN_PY, assert_same_values, checkpoint_values
from launchers import HOROVODRUN_GLOO, MPIEXEC, needs_mpi, run_without_tensorflow, wait_for, worker_processes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(REPO, "tests", "scripts", "train_probe.py")
TINY = dict(model="testnet", image_size=32, batch_size=8, display_every=4, warmup_epochs=0, lr=0.5,
            benchmark_warmup_steps=2)


pytestmark = pytest.mark.usefixtures("testnet")  # the trainer's tests train tests/testnet.py's small models


def run_probe(launcher, config, out_dir, *extra, timeout=600):
    cmd = launcher + [sys.executable, PROBE, json.dumps(config), str(out_dir), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


# ------------------------------------------------------------------------------------------- units

def test_warmup_then_cosine_schedule():
    lr = WarmupDecay(1.0, total_steps=100, warmup_steps=10, kind="cosine")
    assert [round(float(lr(s)), 4) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert float(lr(10)) == pytest.approx(1.0) and float(lr(55)) == pytest.approx(0.5, abs=1e-6)
    assert float(lr(100)) == pytest.approx(0.0, abs=1e-7)


def test_step_and_poly_schedules():
    step = WarmupDecay(0.8, total_steps=100, kind="step", boundaries=(30, 60, 80), factor=0.1)
    assert [round(float(step(s)), 6) for s in (0, 29, 30, 60, 80, 99)] == [0.8, 0.8, 0.08, 0.008, 0.0008, 0.0008]
    poly = WarmupDecay(1.0, total_steps=10, kind="poly", power=2.0)
    assert float(poly(5)) == pytest.approx(0.25)


@pytest.mark.parametrize("name", ["sgd", "rmsprop", "adamw", "lamb"])
def test_weight_decay_spares_batch_norm_and_biases(name):
    """With zero gradients only weight decay moves variables: kernels shrink, 1-D variables stay."""
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, name="dense"),
                                 tf.keras.layers.BatchNormalization(name="bn")])
    kernel, bias, gamma, beta = model.trainable_variables
    for variable in model.trainable_variables:
        variable.assign(tf.ones_like(variable))
    variables = model.trainable_variables
    decayed = decayed_variables(model)
    assert [v.name for v in decayed] == [kernel.name]
    optimizer, coupled = build_optimizer(name, 0.1, momentum=0.9, weight_decay=0.1, decayed=decayed,
                                         variables=variables)
    if coupled:  # SGD: the L2 term is part of the loss, so its gradient is the only one here
        with tf.GradientTape() as tape:
            loss = 0.5 * 0.1 * tf.reduce_sum(tf.square(kernel))
        grads = tape.gradient(loss, variables)
        grads = [g if g is not None else tf.zeros_like(v) for g, v in zip(grads, variables)]
    else:
        grads = [tf.zeros_like(v) for v in variables]
    optimizer.apply_gradients(zip(grads, variables))
    assert np.all(kernel.numpy() < 1.0)
    for spared in (bias, gamma, beta):
        np.testing.assert_array_equal(spared.numpy(), 1.0)


@pytest.mark.parametrize("overrides, match", [
    (dict(model="resnet5"), r"unknown --model 'resnet5' \(did you mean 'resnet50' or .*\?\); valid models: alexnet, "
                            r"densenet121, .*, resnet50, .*, xception$"),
    (dict(batch_size=0), "--batch_size must be a positive integer, received: 0"),
    (dict(iter_unit="steps"), "--iter_unit must be one of epoch, batch, received: 'steps'"),
    (dict(precision="fp8"), "--precision must be one of fp32, fp16, bf16, fp64, received: 'fp8'"),
    (dict(predict=True), "--predict needs --data_dir"),
    (dict(lr_decay_epochs=[60, 30]), "--lr_decay_epochs must be increasing"),
    (dict(ema_decay=1.0), r"--ema_decay must be in \[0, 1\) \(0: off\), received: 1.0"),
    (dict(optimizer="adam"), "--optimizer must be one of sgd, rmsprop, lamb, adamw, received: 'adam'"),
    (dict(augment="bogus"), "--augment must be none, randaugment:N,M or autoaugment:imagenet, received: 'bogus'"),
    (dict(augment="randaugment:0,9"), r"--augment randaugment:N,M needs N an integer in \[1, 10\]"),
    (dict(mixup=-0.2), r"--mixup \(the Beta distribution's alpha; 0: off\) must be a number >= 0, received: -0.2"),
    (dict(cutmix=-1.0), r"--cutmix .* must be a number >= 0, received: -1.0"),
    # a notebook's values of another type: named, not a TypeError inside a comparison, nor a string taken for true
    (dict(lr="0.1"), r"^--lr must be a number, received: '0.1'$"),
    (dict(predict="no"), r"^--predict must be True or False, received: 'no'$"),
    (dict(checkpoint_every=2.5), r"^--checkpoint_every must be an integer, received: 2.5$"),
    (dict(lr_decay_epochs=["a"]), r"^--lr_decay_epochs must be numbers \(epochs\), received: \['a'\]$"),
    (dict(mean=120), r"^--mean must be 3 numbers on the 0-255 scale, one per RGB channel, received: \(120,\)$"),
])
def test_bad_config_is_rejected_naming_flag_and_value(overrides, match):
    with pytest.raises(ValueError, match=match):
        make_config(**overrides)


def test_lists_come_alone_or_comma_separated_and_paths_as_pathlib():
    """One number alone or the flag's text where a list goes; a pathlib.Path where a path goes (log_dir's crashed
    writing config.json: "Object of type PosixPath is not JSON serializable")."""
    import pathlib

    assert make_config(lr_decay_epochs=30).lr_decay_epochs == (30,)
    assert make_config(lr_decay_epochs="30,60").lr_decay_epochs == (30.0, 60.0)
    config = make_config(log_dir=pathlib.Path("runs/a"), data_dir=pathlib.Path("/data"))
    assert (config.log_dir, config.data_dir) == ("runs/a", "/data")
    json.dumps(dataclasses.asdict(config))


def test_unknown_recipe_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown --recipe 'rn50'; valid recipes: efficientnet_b0_500e, "
                                         "ngc_alexnet, .*, resnet50_250e, resnet50_90e, .*_90e$"):
        make_config("rn50")


def test_recipe_values_and_flag_overrides():
    """Flags override a recipe's values, the others stay (test_recipes.py checks the values against NVIDIA's);
    builder options merge with the recipe's."""
    config = make_config("resnet50_90e", batch_size=64, lr=None, model_options="dropout_rate=0.1")
    assert (config.model, config.lr, config.momentum, config.weight_decay) == ("resnet50", 0.256, 0.875, 1 / 32768)
    assert (config.label_smoothing, config.warmup_epochs, config.num_iter, config.lr_schedule) == (0.1, 8, 90, "cosine")
    assert config.batch_size == 64 and config.precision == "fp16" and config.optimizer_batch_size == 2048
    assert config.model_options == {"zero_init_residual": False, "bn_epsilon": 1e-5, "bn_momentum": 0.9,
                                    "dropout_rate": 0.1}


@pytest.mark.parametrize("overrides, match", [
    (dict(loss_scale="auto"), r"--loss_scale must be 'dynamic' or a positive number .*received: 'auto'"),
    (dict(loss_scale="0"), r"--loss_scale must be .*received: '0'"),
    (dict(momentum_form="torch"), r"--momentum_form must be one of pytorch, keras, received: 'torch'"),
    (dict(weight_decay_set="bn"), r"--weight_decay_set must be one of kernels, no_bn, no_bn_names, received: 'bn'"),
    (dict(train_crop="random"), r"--train_crop must be one of torchvision, small, inception, ngc, none, received: "
                                r"'random'"),
    (dict(validation_every=-1), r"--validation_every must be an integer >= 0 \(epochs; 0: after the last step only\), "
                                r"received: -1"),
    (dict(larc_eta=-1.0), r"--larc_eta must be >= 0, received: -1.0"),
    (dict(mean=(1, 2)), r"--mean must be 3 numbers on the 0-255 scale, one per RGB channel, received: \(1, 2\)"),
    (dict(std=(1, 0, 1)), r"--std must be 3 numbers .*\(all > 0\), received"),
    (dict(model_options="dropout"), r"--model_options takes name=value pairs .*received: 'dropout'"),
    (dict(model_options="widht=3"), r"--model_options: resnet50 has no option widht; its options: bn_epsilon, "),
])
def test_recipe_element_flags_name_the_bad_value(overrides, match):
    with pytest.raises(ValueError, match=match):
        make_config(**overrides)


def test_missing_shards_and_foreign_log_dir_fail_before_training(stripes, tmp_path):
    with pytest.raises(ValueError, match=r"no train shards in --data_dir .*train-\?\?\?\?\?-of-\?\?\?\?\?"):
        train(make_config(**TINY, data_dir=str(tmp_path)))
    log_dir = tmp_path / "run"
    train(make_config(**TINY, data_dir=stripes, num_iter=2, iter_unit="batch", log_dir=str(log_dir)))
    with pytest.raises(ValueError, match=f"--log_dir {log_dir} holds a run with model 'testnet', not --model 'resnet34'"):
        train(make_config(**{**TINY, "model": "resnet34"}, data_dir=stripes, log_dir=str(log_dir)))
    os.remove(log_dir / "config.json")  # the checkpoint itself also names its model
    with pytest.raises(ValueError, match=f"--log_dir {log_dir} holds a checkpoint of testnet .*not of --model resnet34"):
        train(make_config(**{**TINY, "model": "resnet34"}, data_dir=stripes, log_dir=str(log_dir)))


def test_unset_warmup_and_view_fit_the_images_and_the_run_and_far_settings_are_named():
    """Unset, --warmup_epochs is 5 epochs, at most a tenth of the run, and --train_crop is small at up to half the
    model's input size, else torchvision; a value given (by the user or a recipe) is kept, with a note when it is
    far from its intended use. make_plan alone: nothing is built."""
    from tfcnn.training.plan import make_plan

    def plan(images=1437, **options):
        return make_plan(make_config(**{"model": "resnet18", "batch_size": 32, **options}), train_records=images)

    short = plan(image_size=32, num_iter=6)  # issue 47's notebook run: 44 steps an epoch
    assert (short.config.train_crop, short.config.warmup_epochs, short.notes) == ("small", 0.6, [])
    imagenet = plan(images=1_281_167, batch_size=256, image_size=224, num_iter=90)
    assert (imagenet.config.train_crop, imagenet.config.warmup_epochs, imagenet.notes) == ("torchvision", 5.0, [])
    assert plan(image_size=112, num_iter=90).config.train_crop == "small"  # half of resnet18's 224 px
    assert plan(image_size=113, num_iter=90).config.train_crop == "torchvision"
    assert plan(image_size=32, num_iter=3, iter_unit="batch").config.warmup_epochs == round(0.1 * 3 / 44, 4)

    given = plan(image_size=32, num_iter=6, train_crop="torchvision", warmup_epochs=5)
    assert (given.config.train_crop, given.config.warmup_epochs) == ("torchvision", 5)
    warmup, crop = given.notes
    assert warmup.startswith("note: --warmup_epochs 5 is more than half of this 6-epoch run")
    assert crop.startswith("note: --train_crop torchvision crops as little as 8% of an image, made for photos at the "
                           "model's 224 px; at --image_size 32 small images learn faster with --train_crop small")
    # a recipe's elements are given: kept as NVIDIA's code sets them, whatever the size and length
    recipe = make_plan(make_config("resnet50_90e", image_size=32, num_iter=6), train_records=20_480)
    assert (recipe.config.train_crop, recipe.config.warmup_epochs, len(recipe.notes)) == ("torchvision", 8.0, 2)
    assert make_plan(make_config("resnet50_90e"), train_records=1_281_167).notes == []


def test_unset_image_size_is_the_records_own_where_smaller_from_scratch(stripes, testnet, tmp_path):
    """From scratch on records of images smaller than the model's input size, a run takes theirs (the stripes:
    48 px, the shorter side), raised to the model's smallest, and says so; given a size, initial weights, or
    larger images, the model's. make_plan alone: nothing is built."""
    from tfcnn.data import pipeline
    from tfcnn.training.plan import make_plan

    def plan(**options):
        return make_plan(make_config(**{"model": "resnet18", "data_dir": stripes, "batch_size": 8, **options}))

    assert pipeline.stored_image_size(stripes) == 48
    own = plan()
    assert (own.image_size, own.config.train_crop, own.data_config.input_size) == (48, "small", 48)
    assert own.notes == ["note: image size 48 px: the training records' images are 48 px (the median shorter side "
                         "of a sample), not resnet18's 224; --image_size sets another"]
    assert (plan(image_size=64).image_size, plan(image_size=64).notes) == (64, [])
    inception = plan(model="inception_v3")
    assert inception.image_size == 75 and "48 px (the median shorter side of a sample), raised to inception_v3's " \
                                          "smallest, not inception_v3's 299" in inception.notes[0]
    assert (plan(model="testnet").image_size, plan(model="testnet").notes) == (32, [])  # its 32 px: smaller
    weights = tmp_path / "init"
    train(make_config(**{**TINY, "model": "resnet18"}, num_iter=1, iter_unit="batch", log_dir=str(weights)))
    assert plan(init_weights=str(weights)).image_size == 32  # the weights' own size (TINY's)


def test_slow_precision_and_xla_without_a_gpu_are_named(monkeypatch):
    from tfcnn import precision

    monkeypatch.setattr(precision, "has_gpu", lambda: False)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    fp16, xla = precision.hardware_notes("fp16", use_xla=True)
    assert "--precision fp16 without a GPU: TensorFlow has no fast fp16 kernels on CPUs" in fp16
    assert "use --precision fp32" in fp16 and "--use_xla without a GPU" in xla
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert "use --precision bf16" in precision.hardware_notes("fp16")[0]
    assert precision.hardware_notes("bf16") == precision.hardware_notes("fp32") == []
    monkeypatch.setattr(precision, "has_gpu", lambda: True)
    assert precision.hardware_notes("fp16", use_xla=True) == []


def test_weight_average_follows_the_weights_after_a_warmup():
    from tfcnn.ema import WeightAverage

    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,)), tf.keras.layers.BatchNormalization()])
    average = WeightAverage(model, decay=0.9)
    expected = [w.numpy() for w in model.weights]
    assert len(average.averages) == len(model.weights) == 6  # batch-norm statistics are averaged too
    for step in range(1, 5):
        for weight in model.weights:
            weight.assign_add(tf.fill(weight.shape, float(step)))
        average.update(step)
        decay = min(0.9, (1 + step) / (10 + step))  # TensorFlow's num_updates warmup
        expected = [decay * e + (1 - decay) * w.numpy() for e, w in zip(expected, model.weights)]
    for got, want in zip(average.averages, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    own = [w.numpy() for w in model.weights]
    with average.swapped_in():
        for weight, want in zip(model.weights, expected):
            np.testing.assert_allclose(weight.numpy(), want, rtol=1e-6)
    for weight, value in zip(model.weights, own):
        np.testing.assert_array_equal(weight.numpy(), value)


# ------------------------------------------------------------------------------- single process

@pytest.mark.slow
def test_learns_and_writes_logs_checkpoints_and_export(stripes, tmp_path, capsys):
    tf.keras.utils.set_random_seed(0)
    log_dir, export_dir = tmp_path / "run", tmp_path / "export"
    summary = train(make_config(**{**TINY, "batch_size": 16, "lr": 1.0, "display_every": 12}, data_dir=stripes,
                                num_iter=10, label_smoothing=0.0, seed=1, log_dir=str(log_dir),
                                export_dir=str(export_dir), predict=True, checkpoint_every=50, keep_checkpoints=3))
    records = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(12, 121, 12))
    assert {"step", "epoch", "loss", "top1", "lr", "img_per_sec"} <= set(records[0])
    assert np.mean([r["loss"] for r in records[-2:]]) < np.mean([r["loss"] for r in records[:2]]) - 0.15
    assert summary["validation"]["count"] == 48
    assert summary["validation"]["top1"] >= 0.75, summary["validation"]  # chance is 0.5
    # checkpoints: epoch ends (every 12 steps) and every 50 steps; the last 3 are kept
    assert sorted(os.listdir(log_dir / "checkpoints")) == sorted(
        ["checkpoint"] + [f"ckpt-{s}.{ext}" for s in (100, 108, 120) for ext in ("index", "data-00000-of-00001")])
    record = checkpoints.describe(str(log_dir / "checkpoints" / "ckpt-120"))
    assert (record.model, record.num_classes, record.step, record.data_config["input_size"]) == ("testnet", 2, 120, 32)
    config = json.loads((log_dir / "config.json").read_text())
    assert (config["num_classes"], config["image_size"], config["seed"]) == (2, 32, 1)
    assert os.listdir(log_dir / "tensorboard")
    assert summary["img_per_sec"] > 0 and summary["img_per_sec_steps"] == 118
    # export: both signatures agree with each other and give distributions
    loaded = tf.saved_model.load(str(export_dir))
    # the signatures and the weights, not the Keras model layer by layer (slow to write and to load again)
    assert not hasattr(loaded, "model") and loaded.model_variables
    val_jpeg = next(p for p in sorted(os.listdir(os.path.join(os.path.dirname(stripes), "raw", "val", "vstripes"))))
    data = open(os.path.join(os.path.dirname(stripes), "raw", "val", "vstripes", val_jpeg), "rb").read()
    by_bytes = loaded.signatures["classify_encoded"](encoded=tf.constant([data, data]))
    assert by_bytes["probabilities"].shape == (2, 2)
    np.testing.assert_allclose(tf.reduce_sum(by_bytes["probabilities"], axis=1).numpy(), 1.0, rtol=1e-5)
    pixels = tf.image.resize(tf.cast(tf.io.decode_jpeg(data), tf.float32)[None], [32, 32])
    by_pixels = loaded.signatures["serving_default"](images=pixels)
    assert by_pixels["logits"].shape == (1, 2) and by_pixels["logits"].dtype == tf.float32
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"serving_default takes float32 \[N, 32, 32, 3\] RGB "
                                                             r"images .* received \[H, W, C\].*\[40 36 3\]"):
        loaded.signatures["serving_default"](images=tf.zeros([1, 40, 36, 3]))
    assert (export_dir / "labels.txt").read_text() == "hstripes\thstripes\nvstripes\tvstripes\n"
    assert json.loads((export_dir / "tfcnn.json").read_text())["model"] == "testnet"
    # the SavedModel (normalization inside) scores the validation split as the trainer's own predict did
    import tfcnn

    exported = tfcnn.evaluate(str(export_dir), data_dir=stripes, batch_size=16)
    assert (exported.count, exported.top1) == (48, summary["validation"]["top1"])
    # the run scored without naming its dataset: the validation split of the one it read, said so
    logged = []
    by_run = tfcnn.evaluate(str(log_dir), batch_size=16, progress=False, log=logged.append)
    assert (by_run.count, by_run.top1, by_run.data_dir) == (48, summary["validation"]["top1"], stripes)
    assert f"tfcnn.evaluate: on the validation split of {stripes}, the dataset the run read" in logged
    # so do its checkpoints, by path (python -m tfcnn.evaluate --checkpoint DIR/checkpoints/ckpt-N)
    by_checkpoint = tfcnn.evaluate(checkpoints.latest_checkpoint(str(log_dir)), batch_size=16, progress=False,
                                   log=lambda *_: None)
    assert (by_checkpoint.top1, by_checkpoint.data_dir) == (summary["validation"]["top1"], stripes)
    assert sources.run_data_dir(str(log_dir / "checkpoints")) == stripes
    from tfcnn.train import RunResult

    in_memory = dataclasses.replace(RunResult.from_summary(summary), log_dir=None)  # a notebook's run, no log_dir
    assert sources.run_data_dir(in_memory) == stripes  # its recorded config still names the dataset
    # python -m tfcnn.export of the run without --data_dir: the class names of the dataset the run recorded
    tfcnn.export(str(log_dir), str(tmp_path / "export_again"), log=logged.append)
    assert (tmp_path / "export_again" / "labels.txt").read_text() == (export_dir / "labels.txt").read_text()
    assert f"tfcnn.export: class names from {os.path.join(stripes, 'labels.txt')}" in logged
    # examples/classify.py: a JPEG classified with the class names; a file that is no image and a damaged JPEG
    # named, the status 1; a missing file refused before the model loads
    spec = importlib.util.spec_from_file_location("classify", os.path.join(REPO, "examples", "classify.py"))
    classify = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(classify)
    jpeg, text, damaged = tmp_path / "stripes.jpg", tmp_path / "notes.jpg", tmp_path / "damaged.jpg"
    jpeg.write_bytes(data), text.write_text("not an image"), damaged.write_bytes(data[:len(data) // 3])
    trained = capsys.readouterr().out  # the training's own output: its export says where the class names came from
    assert f"tfcnn.export: class names from {os.path.join(stripes, 'labels.txt')}\n" in trained
    # 2 classes: top-5 is 100% whatever the model, so it is not printed; the results keep the number
    assert "top5" not in trained and summary["validation"]["top5"] == 1.0
    assert classify.main(["--saved_model", str(export_dir), str(jpeg), str(text), str(damaged)]) == 1
    shown = capsys.readouterr()
    assert re.fullmatch(rf"{jpeg}: [hv]stripes \d+\.\d%, [hv]stripes \d+\.\d%\n", shown.out), shown.out
    assert shown.err.splitlines() == [f"{text}: not a JPEG, PNG, GIF, BMP or WebP file",
                                      f"{damaged}: a damaged image: TensorFlow's decoder failed on it"]
    with pytest.raises(SystemExit) as refused:
        classify.main(["--saved_model", str(export_dir), str(tmp_path / "missing.jpg")])
    assert refused.value.code == 2 and f"no such file: {tmp_path / 'missing.jpg'}" in capsys.readouterr().err
    # a folder: its image files by name (not the notes beside them, not a hidden file); one without images refused
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "b.JPG").write_bytes(data), (photos / "notes.txt").write_text("x"), (photos / "._a.jpg").write_text("x")
    assert classify.main(["--saved_model", str(export_dir), str(photos)]) == 0
    assert re.fullmatch(rf"{photos / 'b.JPG'}: [hv]stripes \d+\.\d%, [hv]stripes \d+\.\d%\n", capsys.readouterr().out)
    with pytest.raises(SystemExit) as refused:
        classify.main(["--saved_model", str(export_dir), str(tmp_path / "export_again")])
    assert refused.value.code == 2 and "is a folder without image files" in capsys.readouterr().err


def test_an_export_says_which_labels_named_its_classes_or_why_none_did(tmp_path):
    """labels.txt goes beside an export only when it names one class per output: another dataset's is left
    out, and the export says so rather than leaving the user to wonder why classify.py prints numbers."""
    from tfcnn.training.export import write_export_info

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "labels.txt").write_text("n01\tcat\nn02\tdog\nn03\tfox\n")
    for classes, expected in ((3, f"class names from {dataset / 'labels.txt'}"),
                              (2, f"no labels.txt beside the export: {dataset / 'labels.txt'} names 3 classes, "
                                  f"the model has 2")):
        export, logged = tmp_path / f"export{classes}", []
        export.mkdir()
        write_export_info(str(export), {"num_classes": classes}, str(dataset), logged.append)
        assert logged == [f"tfcnn.export: {expected}"]
        assert (export / "labels.txt").exists() == (classes == 3)
        assert json.loads((export / "tfcnn.json").read_text()) == {"num_classes": classes}
    # a dataset without one (records alone): said too
    logged = []
    write_export_info(str(export), {"num_classes": 2}, str(tmp_path), logged.append)
    assert logged == [f"tfcnn.export: no labels.txt beside the export: {tmp_path} has none"]


def test_the_weight_average_is_what_checkpoints_evaluate_and_export(stripes, tmp_path):
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.models import create_model
    from tfcnn.models.weights import open_weights

    log_dir, export_dir = tmp_path / "run", tmp_path / "export"
    # Keras' ModelCheckpoint, whose self.model is the trainer, in both its forms
    keras_files = [tmp_path / "keras.weights.h5", tmp_path / "keras_model.keras"]
    keras_checkpoints = [tf.keras.callbacks.ModelCheckpoint(str(keras_files[0]), save_weights_only=True),
                         tf.keras.callbacks.ModelCheckpoint(str(keras_files[1]))]
    summary = train(make_config(**TINY, data_dir=stripes, num_iter=6, iter_unit="batch", ema_decay=0.5,
                                optimizer="rmsprop", epsilon=0.001, log_dir=str(log_dir), export_dir=str(export_dir)),
                    callbacks=keras_checkpoints)
    assert checkpoints.describe(checkpoints.latest_checkpoint(str(log_dir))).averaged
    averaged = create_model("testnet", weights=str(log_dir), log=lambda *_: None)  # what tfcnn.evaluate loads
    source = open_weights("testnet", str(log_dir))
    source.averaged = False
    raw = create_model("testnet", weights=source, log=lambda *_: None)
    assert any(not np.allclose(a, b) for a, b in zip(averaged.get_weights(), raw.get_weights()))
    # ModelCheckpoint wrote the zoo model with the average, as the checkpoint holds it: the trainer's layout
    # (which create_model's model cannot load) and the raw weights would both fail these
    by_weights = create_model("testnet", num_classes=averaged.output_shape[-1], input_shape=averaged.input_shape[1:])
    by_weights.load_weights(str(keras_files[0]))
    for loaded in (by_weights, tf.keras.models.load_model(str(keras_files[1]))):
        assert len(loaded.get_weights()) == len(averaged.get_weights())
        for a, b in zip(averaged.get_weights(), loaded.get_weights()):
            np.testing.assert_array_equal(a, b)
    pixels = tf.cast(tf.random.stateless_uniform([2, 32, 32, 3], seed=(3, 4), maxval=256, dtype=tf.int32), tf.float32)
    data = averaged.data_config
    served = tf.saved_model.load(str(export_dir)).signatures["serving_default"](images=pixels)["logits"].numpy()
    expected = averaged(normalize_batch(pixels, data.mean, data.std, tf.float32), training=False).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4)
    assert summary["config"]["ema_decay"] == 0.5


def test_trainer_feeds_the_model_normalized_images():
    from tfcnn.models import create_model
    from tfcnn.training.trainer import ClassifierTrainer

    model = create_model("testnet", num_classes=3, input_shape=(32, 32, 3))
    mean, std = (100.0, 110.0, 120.0), (50.0, 60.0, 70.0)
    trainer = ClassifierTrainer(model, 3, mean=mean, std=std)
    images = tf.cast(tf.random.stateless_uniform([2, 32, 32, 3], seed=(1, 2), maxval=256, dtype=tf.int32), tf.uint8)
    expected = model((tf.cast(images, tf.float32) - mean) / std, training=False)
    np.testing.assert_allclose(trainer(images, training=False).numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_xla_steps_match_the_plain_steps():
    """--use_xla compiles the forward and backward pass (normalization included): two SGD steps must
    leave the same weights and batch-norm statistics as without XLA. The initial weights are seeded: from
    some random draws a ReLU input lies within rounding of zero, and the two compilers' last-bit
    differences then send one gradient element down different branches (seen once: 1.1e-5 apart)."""
    from tfcnn.models import create_model
    from tfcnn.training.trainer import ClassifierTrainer

    tf.keras.utils.set_random_seed(3)
    images = tf.cast(tf.random.stateless_uniform([4, 32, 32, 3], seed=(5, 6), maxval=256, dtype=tf.int32), tf.uint8)
    labels = tf.constant([0, 1, 2, 1])
    initial = None
    finals = []
    for use_xla in (False, True):
        model = create_model("testnet", num_classes=3, input_shape=(32, 32, 3))
        initial = initial or model.get_weights()
        model.set_weights(initial)
        trainer = ClassifierTrainer(model, 3, mean=(120.0, 115.0, 100.0), std=(60.0, 57.0, 58.0), use_xla=use_xla)
        trainer.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9))
        for _ in range(2):
            trainer.train_step((images, labels))
        finals.append(model.get_weights())
    assert any(not np.allclose(a, b) for a, b in zip(initial, finals[0]))  # the steps did change the weights
    for plain, xla, variable in zip(*finals, model.weights):
        np.testing.assert_allclose(xla, plain, rtol=1e-4, atol=1e-5, err_msg=variable.name)


def test_fp16_overflow_under_a_static_loss_scale_stops_with_the_advice():
    """A static scale (NGC's recipes) applies an overflowing step, as nvutils does, so the run stops at the
    first non-finite loss and says what to change; a dynamic scale would have skipped the step."""
    with pytest.raises(NonFiniteLossError, match=r"infinite at step \d+ \(fp16\): stopping\. With the static "
                                                 r"--loss_scale 1e30 an fp16 overflow is applied, not skipped"):
        train(make_config(**{**TINY, "display_every": 1}, precision="fp16", loss_scale="1e30", num_iter=3,
                          iter_unit="batch"))


def test_nan_loss_in_fp32_stops_with_the_step(stripes, tmp_path):
    with pytest.raises(NonFiniteLossError, match=r"the loss became NaN or infinite at step \d+ \(fp32\): stopping\. "
                                                 r"Lower --lr or check the data"):
        train(make_config(**{**TINY, "lr": 1e12}, data_dir=stripes, num_iter=40, iter_unit="batch",
                          log_dir=str(tmp_path / "a")))
    with pytest.raises(NonFiniteLossError, match=r"(loss|weights) became NaN or infinite (at|by) step \d+") as error:
        train(make_config(**{**TINY, "lr": 1e12}, data_dir=stripes, num_iter=40, iter_unit="batch",
                          checkpoint_every=1, log_dir=str(tmp_path / "b")))
    bad_step = int(str(error.value).split(" step ")[1].split()[0].rstrip(":"))
    tmp_path = tmp_path / "b"
    saved = sorted(int(n.split("-")[1].split(".")[0]) for n in os.listdir(tmp_path / "checkpoints")
                   if n.endswith(".index"))
    assert saved and saved[-1] < bad_step  # checkpoints up to the divergence, none after it
    for step in saved:
        weights = tf.train.load_checkpoint(str(tmp_path / "checkpoints" / f"ckpt-{step}"))
        for name in weights.get_variable_to_shape_map():
            if name.startswith("model/") and "OPTIMIZER" not in name:
                assert np.all(np.isfinite(weights.get_tensor(name))), (step, name)


def test_a_batch_norm_over_too_few_values_is_named_at_the_start_and_as_the_likely_cause(stripes, capsys):
    """At 4 px testnet's second batch norm sees a 1x1 map: batch 2 gives it 2 values per channel. The trainer
    says so before the first step, and a divergence then names it rather than advising a lower --lr."""
    cause = r"batch norm bn2 normalizes only 2 values per channel \(--batch_size 2 x its 1x1 input"
    with pytest.raises(NonFiniteLossError, match=rf"became NaN or infinite .* likely cause: {cause}"):
        train(make_config(**{**TINY, "lr": 1e12, "image_size": 4, "batch_size": 2}, data_dir=stripes, num_iter=40,
                          iter_unit="batch"))
    assert re.search(rf"^tfcnn: warning: {cause}", capsys.readouterr().out, re.M)
    train(make_config(**{**TINY, "image_size": 8, "batch_size": 2}, data_dir=stripes, num_iter=1, iter_unit="batch"))
    assert "warning: batch norm" not in capsys.readouterr().out  # 2x2 at bn2: 8 values, enough


class Interrupted(Exception):
    pass


def _train_recording(config, interrupt_at_step=None):
    """train() in this process: (the steps it ran, its trainable weights at the end). With interrupt_at_step, an
    exception out of a callback at the end of that step interrupts it (Interrupted)."""
    steps, weights = [], []

    def after_step(batch, logs):
        steps.append(int(record.model.step.numpy()))
        if steps[-1] == interrupt_at_step:
            raise Interrupted(f"interrupted at step {steps[-1]}")

    def at_end(logs):
        weights.extend(v.numpy() for v in record.model.model.trainable_variables)

    record = tf.keras.callbacks.LambdaCallback(on_train_batch_end=after_step, on_train_end=at_end)
    train(make_config(**config), callbacks=[record])
    return steps, weights


@pytest.mark.slow
def test_resume_after_interruption_matches_uninterrupted_run(stripes, tmp_path, capsys):
    """Interrupted right after the epoch-1 checkpoint, then rerun: same final step and weights, with
    RandAugment, MixUp and CutMix on (their randomness is a function of the seed and the step)."""
    config = dict(TINY, data_dir=stripes, batch_size=16, num_iter=2, seed=3, checkpoint_every=0, display_every=100,
                  augment="randaugment:2,9", mixup=0.2, cutmix=1.0)  # their draws resume exactly too
    straight = dict(config, log_dir=str(tmp_path / "a"))
    resumed = dict(config, log_dir=str(tmp_path / "b"))
    steps_a, weights_a = _train_recording(straight)
    with pytest.raises(Interrupted):
        _train_recording(resumed, interrupt_at_step=14)  # 12 steps per epoch
    assert checkpoints.latest_checkpoint(str(tmp_path / "b")).endswith("ckpt-12")
    metrics = str(tmp_path / "b" / "metrics.jsonl")
    with open(metrics, "a") as f:  # a line cut short (a full disk, a crash) stops neither the resume nor its log
        f.write('{"step": 14, "epoch": 1.1')
    capsys.readouterr()
    steps_b, weights_b = _train_recording(resumed)
    out = capsys.readouterr().out
    assert "resuming from" in out and "at step 12" in out
    records, unreadable = read_jsonl(metrics)
    assert unreadable == 0 and [r["step"] for r in records] == sorted(r["step"] for r in records)
    assert records[-1]["step"] == 24 and "loss" in records[-1]  # the resumed run's own lines follow
    assert steps_a[-1] == steps_b[-1] == 24
    assert steps_b[0] == 13  # the resumed run continues, it does not redo the epoch
    assert len(weights_a) == len(weights_b) > 0
    for a, b in zip(weights_a, weights_b):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rerunning_a_complete_run_does_nothing_and_a_longer_one_extends_it(stripes, tmp_path, capsys):
    config = dict(TINY, data_dir=stripes, num_iter=3, iter_unit="batch", log_dir=str(tmp_path / "run"))
    train(make_config(**config))
    files = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    capsys.readouterr()
    summary = train(make_config(**config, export_dir=str(tmp_path / "export"), predict=True))
    out = capsys.readouterr().out
    assert f"the run in --log_dir {tmp_path / 'run'} is already complete at step 3 of 3: nothing to do" in out
    assert "done:" not in out and summary["complete"]
    assert not (tmp_path / "export").exists()  # nothing else: no export, no evaluation, no new files
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == files
    with pytest.raises(ValueError, match=r"--num_iter 2 --iter_unit batch \(2 steps\) is below step 3 of the "
                                         r"latest checkpoint in --log_dir .*: that run already went further"):
        train(make_config(**{**config, "num_iter": 2}))
    # a longer one extends it, saying that the schedule spans the new length
    capsys.readouterr()
    assert train(make_config(**{**config, "num_iter": 4}))["end_step"] == 4
    assert (f"note: the run in --log_dir {tmp_path / 'run'} was planned as --num_iter 3 --iter_unit batch; resumed "
            f"at step 3 to 4 steps, its cosine learning-rate schedule spans the 4: ") in capsys.readouterr().out


def test_predict_without_validation_records_fails_before_training(stripes, tmp_path):
    """--predict evaluates after the last step: records without a validation split are said before the first one
    (they were after the whole run, whose rerun, complete, then evaluated nothing)."""
    only_train = tmp_path / "only_train"
    only_train.mkdir()
    for name in os.listdir(stripes):
        if not name.startswith("validation-"):
            os.symlink(os.path.join(stripes, name), only_train / name)
    with pytest.raises(ValueError, match=r"^no validation shards in --data_dir \S+only_train: .* it holds training "
                                         r"shards only: "):
        train(make_config(**TINY, data_dir=str(only_train), num_iter=1, predict=True, log_dir=str(tmp_path / "run")))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_an_elastic_rollback_resumes_with_every_variable_of_an_uninterrupted_run(stripes, tmp_path, monkeypatch):
    """What an elastic run commits is its whole state: a collective that fails two steps after a commit (a
    lost peer) rolls the run back to it, and the run then ends with every variable of one that did not
    fail, batch-norm statistics, optimizer slots and the data position included. Horovod's elastic driver
    is played in-process (as its State does: the committed values copied aside, put back after a failure).
    Rolling back all but the batch-norm statistics ends elsewhere: the comparison sees it."""
    from tfcnn import distributed

    class PeerLost(Exception):
        pass

    def driver(keep=lambda variable: True):
        def run(run_once, variables, log=print):
            saved = [tf.identity(v) for v in variables]

            def commit():
                saved[:] = [tf.identity(v) for v in variables]

            while True:
                try:
                    return run_once(commit)
                except PeerLost:
                    for variable, value in zip(variables, saved):
                        if keep(variable):
                            variable.assign(value)
        return run

    def fail_once_at(step):
        failed = []

        def maybe_fail(batch, logs):
            if not failed and int(lose.model.step.numpy()) == step:
                failed.append(step)
                raise PeerLost()
        lose = tf.keras.callbacks.LambdaCallback(on_train_batch_end=maybe_fail)
        return [lose]

    def run(name, callbacks=(), **driven):
        monkeypatch.setattr(distributed, "run_elastic", driver(**driven))
        train(make_config(**{**TINY, "elastic_commit_every": 4}, data_dir=stripes, num_iter=1, elastic=True, seed=5,
                          log_dir=str(tmp_path / name)), callbacks=list(callbacks))
        return checkpoint_values(checkpoints.latest_checkpoint(str(tmp_path / name)))

    monkeypatch.setattr(distributed, "is_elastic", lambda: True)
    straight = run("straight")
    assert straight["step/.ATTRIBUTES/VARIABLE_VALUE"] == 24
    assert_same_values(run("rolled_back", fail_once_at(6)), straight)
    with pytest.raises(AssertionError, match="moving_"):
        assert_same_values(run("statistics_kept", fail_once_at(6), keep=lambda v: "moving_" not in v.name), straight)


def test_an_elastic_run_re_formed_after_its_last_step_ends_cleanly(stripes, tmp_path, monkeypatch, capsys):
    """Workers that join at the last commit (the epoch end of the last step) make the ranks re-form with no
    image left to train: the run ends with exit 0 and says so, as it did once in the two-host elastic test
    (a KeyError there). Horovod's elastic driver is played in-process: commits raise, as when the discovery
    script offers hosts, until the last step's; then the run goes on, as the driver does after a re-forming."""
    from tfcnn import distributed

    class HostsAdded(Exception):
        pass

    def driver(run_once, variables, log=print):
        saved = []

        def commit():
            saved[:] = [tf.identity(v) for v in variables]
            raise HostsAdded()

        while True:
            try:
                return run_once(commit)
            except HostsAdded:
                for variable, value in zip(variables, saved):
                    variable.assign(value)

    monkeypatch.setattr(distributed, "is_elastic", lambda: True)
    monkeypatch.setattr(distributed, "run_elastic", driver)
    summary = train(make_config(**{**TINY, "elastic_commit_every": 10**6}, data_dir=stripes, num_iter=2,
                                elastic=True, log_dir=str(tmp_path / "run")))
    out = capsys.readouterr().out
    assert "tfcnn: elastic: the run is complete: 384 images by step 48" in out, out
    assert "done: step 48, nothing left to train" in out, out
    assert (summary["start_step"], summary["total_steps"], summary["world_sizes"]) == (48, 48, [1, 1, 1])


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(stripes, tmp_path, capsys):
    """SIGKILL at an arbitrary moment: the latest checkpoint is complete and the rerun (in this process; the
    rerun of a command is test_stopping's) continues from it."""
    args = [sys.executable, *TRAIN_PY, "--model=testnet_slow", f"--data_dir={stripes}",
            "--image_size=32", "--batch_size=8", "--num_iter=1000", "--checkpoint_every=3", "--display_every=2",
            f"--log_dir={tmp_path}", "--warmup_epochs=0"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    deadline = time.time() + 240
    latest_step = lambda: int((checkpoints.latest_checkpoint(str(tmp_path)) or "-0").rsplit("-", 1)[1])  # noqa: E731
    while time.time() < deadline and latest_step() < 9:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    latest = checkpoints.latest_checkpoint(str(tmp_path))
    assert latest, "no checkpoint was written before the deadline"
    step = int(latest.rsplit("-", 1)[1])
    train(make_config(model="testnet_slow", data_dir=stripes, image_size=32, batch_size=8, checkpoint_every=3,
                      iter_unit="batch", num_iter=step + 4, log_dir=str(tmp_path)))
    out = capsys.readouterr().out
    assert f"at step {step}" in out and f"done: steps {step}-{step + 4}" in out
    logged = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged == sorted(set(logged)) and logged[-1] == step + 4  # no step logged twice after the resume


def test_command_line_errors_exit_nonzero_with_the_flag(tmp_path):
    train_py = os.path.join(REPO, "examples", "train.py")
    for flag, message in (("--batch_size=-4", "--batch_size must be a positive integer, received: -4"),
                          ("--iter_unit=step", "--iter_unit must be one of epoch, batch, received: 'step'"),
                          ("--augment=bogus", "--augment must be none, randaugment:N,M or autoaugment:imagenet"),
                          ("--mixup=-1", "--mixup (the Beta distribution's alpha; 0: off) must be a number >= 0"),
                          ("--elastic", "--elastic needs horovodrun's elastic mode"),
                          (f"--data_dir={tmp_path}", "no train shards in --data_dir")):
        done = subprocess.run([sys.executable, train_py, flag], capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]


def test_flags_are_checked_before_tensorflow_loads():
    """train.py's bad flags fail at once: the entry point and the configuration's checks import no
    TensorFlow (only the model name needs the zoo, and it is checked last)."""
    code = ("import runpy, sys\nfrom tfcnn.training import make_config\n"
            "for bad in ({'batch_size': 0}, {'augment': 'bogus'}, {'mixup': -1.0}, {'precision': 'fp8'}, "
            "{'optimizer': 'adam'}, {'label_smoothing': 1.0}, {'log_dir': 'README.md'}, {'export_dir': 'README.md'}, "
            "{'export_dir': 'tests'}):\n"
            "    try:\n        make_config(**bad)\n    except ValueError as error:\n        print(error)\n"
            "sys.argv = ['train.py', '--iter_unit=step']\n"
            "try:\n    runpy.run_path('examples/train.py', run_name='__main__')\n"
            "except SystemExit as exit:\n    print(exit)\n")
    lines, _ = run_without_tensorflow(code)
    assert [line.split()[0] for line in lines[:-1]] == ["--batch_size", "--augment", "--mixup", "--precision",
                                                        "--optimizer", "--label_smoothing", "--log_dir", "--export_dir",
                                                        "--export_dir"], lines
    # a file, or a directory of other files, is never made or replaced by a run's directories (tfcnn.export checks
    # its output_dir alike: test_python_api's bad calls)
    assert lines[-4:-2] == [
        "--log_dir README.md is a file: name a directory (a new one, or a run's to resume)",
        "--export_dir README.md is a file: an export is a directory; name a new one (or an older export to replace)"]
    assert re.fullmatch(r"--export_dir tests holds other files \(\S+ and \d+ more\) and no tfcnn export "
                        r"\(tfcnn.json\): an export replaces only an older export; name a new directory",
                        lines[-2]), lines
    assert lines[-1].startswith("tfcnn.train: error: --iter_unit must be one of epoch, batch"), lines


@pytest.mark.parametrize("user_level", [None, "0"], ids=["default", "user-set-0"])
def test_tensorflow_start_up_lines_are_quiet_unless_the_user_asks(user_level):
    """Not only tfcnn's entry points load TensorFlow: horovodrun's build check does, in a process of Horovod's
    own, as this plain import does. make install's tfcnn-env.pth quiets every Python of the venv before
    anything is imported, and a TF_CPP_MIN_LOG_LEVEL the user set still wins. One line is beyond it: where
    TensorFlow runs oneDNN's kernels, 2.21 logs "oneDNN custom operations are on" before its logging reads
    any level (even at 3), so that notice is set aside here; every other INFO line must follow the level."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if user_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = user_level
    done = subprocess.run([sys.executable, "-c", "import horovod.tensorflow"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # (that notice, 2.21's, is TensorFlow's own in a process that loads it without tfcnn: tfcnn's entry points
    # leave it out, test_python_api checks; 2.15's follows the level)
    from tfcnn.precision import cpu_kernels

    if cpu_kernels() is not None and tuple(int(n) for n in tf.__version__.split(".")[:2]) >= (2, 21):
        assert ("oneDNN custom operations are on" in done.stderr) == (cpu_kernels() == "oneDNN's"), done.stderr
    output = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                       if "oneDNN custom operations are on" not in line)
    info_line = re.search(r" I tensorflow/|^I\d{4} \d\d:\d\d:\d\d", output, re.M)  # TF <= 2.17; 2.21
    assert (info_line is not None) == (user_level == "0"), done.stderr[-2000:]


@pytest.mark.parametrize("user_choice", [None, "0", "1"], ids=["default", "user-set-0", "user-set-1"])
def test_onednn_kernels_are_the_default_unless_the_user_chose(user_choice, monkeypatch):
    """make install's tfcnn-env.pth turns oneDNN's CPU kernels on in every Python of the venv (TensorFlow's own
    default only on AVX-512-class CPUs), and a TF_ENABLE_ONEDNN_OPTS the user set wins; the training start-up
    note says which kernels run and who chose."""
    from tfcnn import precision

    names = ("TF_ENABLE_ONEDNN_OPTS", "TFCNN_ONEDNN_DEFAULT")
    env = {k: v for k, v in os.environ.items() if k not in names}
    if user_choice is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = user_choice
    # the environment a Python of the venv starts with (no TensorFlow needed to see it) ...
    probe = f"import json, os; print(json.dumps({{name: os.environ.get(name) for name in {names}}}))"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    started = json.loads(done.stdout.splitlines()[-1])
    assert started["TF_ENABLE_ONEDNN_OPTS"] == (user_choice or "1")
    for name, value in started.items():  # ... and the note training prints in it (the note reads nothing else)
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    note = precision.cpu_kernels_note()
    expected = {None: "CPU kernels: oneDNN's (tfcnn's default; 0.9-3.5x Eigen's speed on AVX2 CPUs); "
                      "TF_ENABLE_ONEDNN_OPTS=0 selects Eigen's",
                "0": "CPU kernels: Eigen's (TF_ENABLE_ONEDNN_OPTS=0, set in the environment)",
                "1": "CPU kernels: oneDNN's (TF_ENABLE_ONEDNN_OPTS=1, set in the environment)"}[user_choice]
    assert note == expected


# -------------------------------------------------------------------------------- multi process

@pytest.mark.slow
@pytest.mark.parametrize("launcher", [pytest.param(HOROVODRUN_GLOO, id="horovodrun-gloo"),
                                      pytest.param(MPIEXEC, id="mpiexec", marks=needs_mpi)])
def test_two_ranks_keep_identical_weights(stripes, tmp_path, launcher):
    """Also fine-tuning: rank 0 alone reads --init_weights (a checkpoint of another class count), the others
    receive it. And a callback that stops the run on one rank alone (after step 8 of 10) stops every rank there
    (before, the other went on to step 9 and waited there for ever)."""
    import testnet

    init = testnet.write_checkpoint(tmp_path / "init", "testnet", num_classes=3)
    config = dict(TINY, data_dir=stripes, num_iter=10, iter_unit="batch", lr=0.4, warmup_epochs=0.5,
                  log_dir=str(tmp_path / "run"), init_weights=init, ema_decay=0.9)
    out = run_probe(launcher, config, tmp_path / "out", "--stop_rank", "1", "--stop_step", "8")
    assert "2 rank(s) x batch 8 = global batch 16" in out
    assert "the classifier is re-initialized" in out and f"initial weights from {init}" in out
    assert "done: steps 0-8 of 10 in " in out and "a callback stopped the run (model.stop_training)" in out
    r0, r1 = np.load(tmp_path / "out" / "rank0.npz"), np.load(tmp_path / "out" / "rank1.npz")
    assert r0["steps"].tolist() == r1["steps"].tolist() == list(range(1, 9))
    weights = [k for k in r0.files if k.startswith(("w", "ema"))]
    assert any(k.startswith("ema") for k in weights)  # every rank keeps the same moving average too
    for key in weights:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
    assert not np.array_equal(r0["digests"][0], r0["digests"][-1])  # and they did train
    summary = json.loads((tmp_path / "out" / "summary0.json").read_text())
    assert summary["global_batch"] == 16 and summary["ranks"] == 2
    assert summary["steps_per_epoch"] == 192 // 16
    metrics = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    peak = 0.4 * 16 / 256  # per-256 rate scaled by the global batch
    warmup = round(0.5 * 12)
    for record in metrics:
        expected = float(WarmupDecay(peak, 10, warmup, "cosine")(record["step"] - 1))
        assert record["lr"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_fp16_overflow_on_one_rank_skips_the_step_on_all(stripes, tmp_path):
    config = dict(TINY, data_dir=stripes, num_iter=4, iter_unit="batch", precision="fp16", lr=0.2, batch_size=4,
                  image_size=32)  # fp16 steps are slow on CPUs: step 4 is the one after the skipped step
    out = run_probe(HOROVODRUN_GLOO, config, tmp_path, "--inject_inf_rank", "1", "--inject_inf_step", "3")
    assert ("TensorFlow has no fast fp16 kernels on CPUs" in out) == (not tf.config.list_physical_devices("GPU"))
    r0, r1 = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "rank1.npz")
    for rank in (r0, r1):
        assert rank["steps"].tolist() == [1, 2, 3, 4]
        assert rank["loss_scales"].tolist() == [128.0, 128.0, 64.0, 64.0]  # NVIDIA's GradScaler starts at 128
        assert rank["digests"][2] == rank["digests"][1]  # step 3 applied nothing
        assert rank["digests"][3] != rank["digests"][2]  # later steps train again
    for key in (k for k in r0.files if k.startswith("w")):
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)


@pytest.mark.slow
def test_a_killed_rank_ends_a_run_at_once_and_leaves_its_checkpoints(stripes, tmp_path):
    """Not elastic: a rank killed mid-run (as by the OOM killer or a lost machine) stops the whole job with
    a non-zero exit that names the rank, in seconds rather than at a collective timeout."""
    args = [*TRAIN_PY, "--model=testnet_slow", f"--data_dir={stripes}", "--image_size=32",
            "--batch_size=8", "--num_iter=1000", "--checkpoint_every=4", "--display_every=4", "--warmup_epochs=0",
            f"--log_dir={tmp_path}"]
    output = tmp_path / "job.log"  # a file, not a pipe: nothing blocks however much the job prints
    job = subprocess.Popen(HOROVODRUN_GLOO + [sys.executable] + args, stdout=output.open("w"),
                           stderr=subprocess.STDOUT, cwd=REPO)
    wait_for(lambda: checkpoints.latest_checkpoint(str(tmp_path)), "a first checkpoint")
    wait_for(lambda: len(worker_processes(job.pid)) == 2, "both workers")
    victim = next(p for (host, rank), p in worker_processes(job.pid).items() if rank == 1)
    victim.send_signal(signal.SIGKILL)
    job.wait(timeout=60)  # the bound README's "Many machines" gives
    out = output.read_text()
    assert job.returncode != 0
    assert "Process 1 exit with status code 137" in out, out[-2000:]
    latest = checkpoints.latest_checkpoint(str(tmp_path))
    record = checkpoints.describe(latest)  # complete and readable: written before the index pointed at it
    assert record.model == "testnet_slow" and record.step > 0
