"""Loading timm / torchvision weights: strictness, file formats, heads, the data config that travels with
them, tfcnn checkpoints as weights, the convert CLI, evaluation with the recorded preprocessing, and
fine-tuning from them. (The per-model proof of equal logits is in test_models.)"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import weightgen
from tfcnn import checkpoints
from tfcnn.models import DataConfig, create_model, load_weights
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD, read_state_dict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_TORCH = importlib.util.find_spec("torch") is not None
SIZE = 32  # resnet18 at its smallest input


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory):
    return weightgen.write_safetensors(weightgen.fixture("resnet18"),
                                       tmp_path_factory.mktemp("weights") / "resnet18.safetensors")


def stem_kernel(path):
    """The file's first conv, in Keras layout."""
    return read_state_dict(path)["conv1.weight"].transpose(2, 3, 1, 0)


def test_a_file_of_another_architecture_is_refused_naming_keys(resnet18_file):
    with pytest.raises(ValueError, match=r"these weights do not fit resnet34 \(a torchvision resnet34 state dict "
                                         r"expected\): \d+ missing: layer1\.2\.conv1\.weight"):
        create_model("resnet34", weights=resnet18_file, input_shape=(SIZE, SIZE, 3), log=quiet)
    with pytest.raises(ValueError, match=r"165 missing: layer1\.0\.downsample\.0\.weight; .* and 159 more\. 24 wrong "
                                         r"shape: layer1\.0\.conv1\.weight: file \(64, 64, 3, 3\), model "
                                         r"stage1_block1_conv1_conv \(1, 1, 64, 64\)"):
        create_model("resnet50", weights=resnet18_file, input_shape=(SIZE, SIZE, 3), log=quiet)


def test_missing_and_unexpected_tensors_are_named_and_buffers_skipped(tmp_path):
    fixture = weightgen.fixture("resnet18")
    missing = weightgen.write_safetensors(fixture, tmp_path / "missing.safetensors", drop={"layer4.1.bn2.running_var"})
    with pytest.raises(ValueError, match=r"1 missing: layer4\.1\.bn2\.running_var$"):
        create_model("resnet18", weights=missing, input_shape=(SIZE, SIZE, 3), log=quiet)
    extra = weightgen.write_safetensors(fixture, tmp_path / "extra.safetensors",
                                        extra={"head.extra.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"1 unexpected: head\.extra\.weight$"):
        create_model("resnet18", weights=extra, input_shape=(SIZE, SIZE, 3), log=quiet)
    # PyTorch's batch-count buffers mean nothing at inference: present in real files, skipped silently
    buffers = {k: np.array(7, np.int64) for k, _ in fixture["keys"] if k.endswith("num_batches_tracked")}
    assert buffers
    with_buffers = weightgen.write_safetensors(fixture, tmp_path / "buffers.safetensors", extra=buffers)
    model = create_model("resnet18", weights=with_buffers, input_shape=(SIZE, SIZE, 3), log=quiet)
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel.numpy(), stem_kernel(with_buffers))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (tfcnn never needs it; .pth files need it)")
def test_a_pth_file_loads_like_its_safetensors_twin(resnet18_file, tmp_path):
    import torch

    state = {k: torch.from_numpy(v) for k, v in read_state_dict(resnet18_file).items()}
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, tmp_path / "resnet18.pth")
    a = create_model("resnet18", weights=resnet18_file, input_shape=(SIZE, SIZE, 3), log=quiet)
    b = create_model("resnet18", weights=str(tmp_path / "resnet18.pth"), input_shape=(SIZE, SIZE, 3), log=quiet)
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed: the .pth file loads (the test above)")
def test_a_pth_file_without_torch_says_how(tmp_path):
    (tmp_path / "resnet18-f37072fd.pth").write_bytes(b"PK\x03\x04 not read without torch")
    with pytest.raises(ValueError, match=r"needs torch, which is not installed.*pip install torch.*\.safetensors"):
        create_model("resnet18", weights=str(tmp_path / "resnet18-f37072fd.pth"), log=quiet)


def test_other_classes_need_a_new_head_which_loads_all_but_the_classifier(resnet18_file, tmp_path):
    with pytest.raises(ValueError, match=r"the file's classifier has 1000 classes, the model 7: ask for a new head"):
        create_model("resnet18", num_classes=7, weights=resnet18_file, input_shape=(SIZE, SIZE, 3), log=quiet)
    said = []
    model = create_model("resnet18", num_classes=7, weights=resnet18_file, head="new", input_shape=(SIZE, SIZE, 3),
                         log=said.append)
    assert any("new head: the file's classifier (fc) was not loaded" in line for line in said)
    assert model.get_layer("head_fc").kernel.shape == (512, 7)
    assert np.any(model.get_layer("head_fc").kernel.numpy())  # drawn from its initializer, not left unset
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel.numpy(), stem_kernel(resnet18_file))
    with pytest.raises(ValueError, match="head must be one of keep, new, received: 'old'"):
        load_weights(model, resnet18_file, head="old")

    # from a tfcnn checkpoint of that model, a new head again: all but the classifier restored
    checkpoints.make_checkpoint(model).write(str(tmp_path / "ckpt" / "ckpt-0"))
    again = create_model("resnet18", num_classes=3, weights=str(tmp_path / "ckpt" / "ckpt-0"), head="new", log=quiet)
    np.testing.assert_array_equal(again.get_layer("stem_conv").kernel.numpy(), stem_kernel(resnet18_file))
    np.testing.assert_array_equal(again.get_layer("stage4_block2_conv2_bn").moving_variance.numpy(),
                                  model.get_layer("stage4_block2_conv2_bn").moving_variance.numpy())
    assert again.get_layer("head_fc").kernel.shape == (512, 3) and np.any(again.get_layer("head_fc").kernel.numpy())


@pytest.mark.slow
def test_inception_auxiliary_head_and_its_padded_pools(tmp_path):
    fixture = weightgen.fixture("inception_v3")
    path = weightgen.write_safetensors(fixture, tmp_path / "inception_v3.safetensors")
    said = []
    small = create_model("inception_v3", weights=path, input_shape=(75, 75, 3), log=said.append)
    assert any("skipped the auxiliary classifier's 12 tensors" in line for line in said)
    assert small.build_options["count_include_pad"] is True  # chosen for reference weights
    images = weightgen.images(fixture["seed"], 2, 75)
    expected = weightgen.decode(fixture["logits"], fixture["logits_shape"])
    assert weightgen.relative_error(small(images, training=False), expected) < 1e-4
    # TF-slim's pooling (tfcnn's default) is another function: the option is what makes them equal
    slim = create_model("inception_v3", weights=path, input_shape=(75, 75, 3), count_include_pad=False, log=quiet)
    assert weightgen.relative_error(slim(images, training=False), expected) > 1e-3

    aux = fixture["auxiliary"]
    full = create_model("inception_v3", weights=path, aux_logits=True, log=quiet)  # 299 px, both heads
    logits, aux_logits = full(weightgen.images(fixture["seed"] + 1, 1, aux["input_size"]), training=False)
    assert logits.shape == aux_logits.shape == (1, 1000) and aux_logits.dtype == tf.float32
    assert full.get_layer("conv1a_bn").epsilon == 1e-3
    with pytest.raises(ValueError, match="aux_logits needs 17x17 mid-level features"):
        create_model("inception_v3", input_shape=(96, 96, 3), aux_logits=True)
    assert weightgen.relative_error(logits, weightgen.decode(aux["logits"], aux["shape"])) < 1e-4
    assert weightgen.relative_error(aux_logits, weightgen.decode(aux["aux_logits"][0], aux["shape"])) < 1e-4

    # a tfcnn checkpoint keeps the pooling option and the data config, and loads to the same function
    checkpoints.make_checkpoint(small).write(str(tmp_path / "ckpt" / "ckpt-0"))
    again = create_model("inception_v3", weights=str(tmp_path / "ckpt" / "ckpt-0"), input_shape=(75, 75, 3),
                         log=quiet)
    assert again.build_options["count_include_pad"] is True and again.data_config == small.data_config
    np.testing.assert_array_equal(again(images, training=False).numpy(), small(images, training=False).numpy())


def test_googlenet_auxiliary_heads_load_when_asked_for(tmp_path):
    fixture = weightgen.fixture("googlenet")
    path = weightgen.write_safetensors(fixture, tmp_path / "googlenet.safetensors")
    aux = fixture["auxiliary"]
    size = aux["input_size"]
    model = create_model("googlenet", weights=path, aux_logits=True, input_shape=(size, size, 3), log=quiet)
    outputs = model(weightgen.images(fixture["seed"] + 1, 1, size), training=False)
    expected = [aux["logits"], *aux["aux_logits"]]  # [logits, aux1 (on 4a), aux2 (on 4d)]
    assert len(outputs) == len(expected) == 3
    for output, encoded in zip(outputs, expected):
        assert weightgen.relative_error(output, weightgen.decode(encoded, aux["shape"])) < 1e-4


def test_torchvisions_old_densenet_key_names_load(tmp_path):
    """torchvision's published DenseNet files still say `denselayer1.norm.1`; they load like current ones."""
    import re

    from safetensors.numpy import save_file

    fixture = weightgen.fixture("densenet121")
    current = weightgen.state_dict(fixture["keys"], fixture["seed"], fixture.get("damped"))
    old = {re.sub(r"(denselayer\d+\.(?:norm|conv))([12])\.", r"\1.\2.", k): v for k, v in current.items()}
    assert "features.denseblock1.denselayer1.norm.1.weight" in old
    save_file(old, str(tmp_path / "densenet121-a639ec97.safetensors"))
    size = fixture["input_size"]
    model = create_model("densenet121", weights=str(tmp_path / "densenet121-a639ec97.safetensors"),
                         input_shape=(size, size, 3), log=quiet)
    logits = model(weightgen.images(fixture["seed"], 2, size), training=False)
    assert weightgen.relative_error(logits, weightgen.decode(fixture["logits"], fixture["logits_shape"])) < 1e-4


def test_the_data_config_travels_with_the_file(resnet18_file, tmp_path):
    torchvision = DataConfig(224, 0.875, IMAGENET_MEAN, IMAGENET_STD, "bilinear")
    assert create_model("resnet18", weights=resnet18_file, log=quiet).data_config == torchvision
    hub = tmp_path / "models--timm--resnet18.a1_in1k"  # a timm hub file comes with its pretrained_cfg
    hub.mkdir()
    shutil.copy(resnet18_file, hub / "model.safetensors")
    cfg = {"input_size": [3, 160, 160], "crop_pct": 0.95, "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5],
           "std": [0.25, 0.25, 0.25]}
    (hub / "config.json").write_text(json.dumps({"architecture": "resnet18", "pretrained_cfg": cfg}))
    model = create_model("resnet18", weights=str(hub / "model.safetensors"), log=quiet)
    assert model.data_config == DataConfig(160, 0.95, (127.5,) * 3, (63.75,) * 3, "bicubic")
    assert model.input_shape == (None, 160, 160, 3)
    overridden = create_model("resnet18", weights=str(hub / "model.safetensors"), log=quiet,
                              data_config={"crop_fraction": 0.9, "input_size": 64})
    assert (overridden.data_config.crop_fraction, overridden.input_shape[1]) == (0.9, 64)
    (hub / "config.json").write_text(json.dumps({"pretrained_cfg": {**cfg, "crop_mode": "squash"}}))
    with pytest.raises(ValueError, match="crop_mode 'squash' is not supported"):
        create_model("resnet18", weights=str(hub / "model.safetensors"), log=quiet)
    # torchvision's file names say which transforms evaluated them (its second-generation weights: 232 px)
    from tfcnn.models.registry import weight_map_of
    from tfcnn.models.weights import _reference_data_config

    v2, origin = _reference_data_config("/x/resnet50-11ad3fa6.pth", weight_map_of("resnet50"))
    assert v2.crop_fraction == 224 / 232 and "torchvision" in origin
    assert _reference_data_config("/x/resnet50-0676ba61.pth", weight_map_of("resnet50"))[0] == torchvision


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    """3 classes of drawn shapes, 4 validation images each, as TFRecords (JPEG bytes as imagenet_prep writes)."""
    from imagenet_prep.build_tfrecords import build_tfrecords
    from imagenet_prep.demo_dataset import make_dataset

    root = tmp_path_factory.mktemp("shapes")
    make_dataset(str(root / "raw"), num_classes=3, train_per_class=1, val_per_class=4, min_size=40, max_size=90)
    build_tfrecords(str(root / "tf"), str(root / "raw" / "train"), str(root / "raw" / "val"), train_shards=1,
                    validation_shards=2, resize="none", num_workers=1, log=quiet)
    return str(root / "tf")


@pytest.mark.slow
def test_convert_then_evaluate_with_the_recorded_preprocessing(resnet18_file, small_dataset, tmp_path, monkeypatch):
    from tfcnn.data import pipeline
    from tfcnn.data.preprocessing import normalize_batch
    from tfcnn.evaluate import evaluate

    out = tmp_path / "converted"
    done = subprocess.run([sys.executable, "-m", "tfcnn.convert", "--model=resnet18", f"--weights={resnet18_file}",
                           f"--output_dir={out}", "--num_classes=3", "--new_head", "--image_size=48",
                           "--crop_fraction=0.9", "--interpolation=bicubic", "--export"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensors loaded" in done.stdout and "new head" in done.stdout
    summary = json.loads((out / "convert.json").read_text())
    expected = DataConfig(48, 0.9, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    assert DataConfig.from_dict(summary["data_config"]) == expected and summary["new_head"]

    # evaluation reads the recorded preprocessing: its counts are those of the pipeline built with it
    model = create_model("resnet18", weights=str(out), log=quiet)
    assert model.data_config == expected and model.input_shape[1] == 48
    dataset = pipeline.build_dataset(small_dataset, "validation", 4, 48, num_classes=3, crop_fraction=0.9,
                                     interpolation="bicubic")
    top1 = sum(int(np.sum(np.argmax(model(normalize_batch(x, expected.mean, expected.std, tf.float32)), 1) == y))
               for x, y in dataset)
    for source in (str(out), str(out / "saved_model")):
        result = evaluate(source, data_dir=small_dataset, batch_size=4, progress=False)
        assert DataConfig.from_dict(result.data_config) == expected, source
        assert (result.count, result.top1_correct) == (12, top1), source
    # the SavedModel's encoded-image signature crops and resizes as the recorded config says
    from tfcnn.data.preprocessing import eval_image

    exported = tf.saved_model.load(str(out / "saved_model"))
    jpeg = next(iter(tf.data.TFRecordDataset(pipeline.list_shards(small_dataset, "validation")[0])))
    encoded = tf.io.parse_single_example(jpeg, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"]
    by_bytes = exported.signatures["classify_encoded"](encoded=encoded[None])["logits"]
    pixels = tf.cast(eval_image(encoded, 48, 0.9, "bicubic"), tf.float32)[None]
    by_pixels = exported.signatures["serving_default"](images=pixels)["logits"]
    np.testing.assert_allclose(by_bytes.numpy(), by_pixels.numpy(), rtol=1e-5, atol=1e-5)

    # Another conversion into the directory replaces this one whole. Interrupted, it leaves this one as it was
    # (its new head's random weights not written over these); done without --export, it keeps no saved_model/
    # of this one beside its own weights.
    import tfcnn

    weights = out / "checkpoints" / "ckpt-0.data-00000-of-00001"
    first = weights.read_bytes(), (out / "convert.json").read_text()

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr("tfcnn.training.export.export_saved_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tfcnn.convert("resnet18", resnet18_file, str(out), num_classes=3, new_head=True, export=True, log=quiet)
    assert (weights.read_bytes(), (out / "convert.json").read_text()) == first
    assert [name for name in os.listdir(tmp_path) if ".tmp-" in name] == []
    summary = tfcnn.convert("resnet18", resnet18_file, str(out), num_classes=3, new_head=True, log=quiet)
    assert sorted(os.listdir(out)) == ["checkpoints", "convert.json"] and "saved_model" not in summary
    assert summary["checkpoint"] == checkpoints.latest_checkpoint(str(out)) and weights.read_bytes() != first[0]


def test_the_benchmark_runs_the_weights_at_their_input_size(resnet18_file, tmp_path):
    from tfcnn import benchmark

    (tmp_path / "model.safetensors").write_bytes(open(resnet18_file, "rb").read())
    (tmp_path / "config.json").write_text(json.dumps({"pretrained_cfg": {"input_size": [3, 48, 48]}}))
    rows = benchmark.run(["resnet18"], "inference", [2], warmup_steps=1, steps=2, log=quiet,
                         weights=str(tmp_path / "model.safetensors"))
    assert rows[0]["status"] == "ok" and rows[0]["image_size"] == 48


def test_fine_tuning_starts_from_the_weights_and_resuming_wins(resnet18_file, stripes, tmp_path, capsys):
    from tfcnn.training import make_config, train

    config = dict(model="resnet18", image_size=SIZE, batch_size=8, num_iter=3, iter_unit="batch", warmup_epochs=0,
                  lr=0.01, data_dir=stripes, init_weights=resnet18_file, log_dir=str(tmp_path / "run"), seed=1)
    summary = train(make_config(**config))
    out = capsys.readouterr().out
    assert "--init_weights has 1000 classes, this run 2: the classifier is re-initialized" in out
    assert tuple(summary["data_config"]["mean"]) == IMAGENET_MEAN  # normalized as the weights expect
    record = checkpoints.describe(checkpoints.latest_checkpoint(str(tmp_path / "run")))
    assert record.num_classes == 2 and record.data_config["mean"] == list(IMAGENET_MEAN)
    tuned = create_model("resnet18", weights=str(tmp_path / "run"), log=quiet).get_layer("stem_conv").kernel.numpy()
    start = stem_kernel(resnet18_file)
    assert 0 < np.abs(tuned - start).max() < 0.05 * np.abs(start).max()  # trained a little, from the file
    train(make_config(**{**config, "num_iter": 4}))
    assert "--init_weights ignored: resuming takes precedence" in capsys.readouterr().out
