"""NVIDIA DALI as the second input pipeline (tfcnn.data.dali), in CPU mode, and its index files.

The index-format tests need no DALI and always run; the others skip, naming the install command, where
DALI and its TensorFlow plugin are not installed (`make install DALI=1`).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from imagenet_prep import build_tfrecords as bt
from tfcnn.data import dali, dali_index, pipeline, records
from tfcnn.data.preprocessing import TRAIN_VIEWS, TrainView

from launchers import HOROVODRUN_GLOO
from testnet import TRAIN_PY, WITH_TESTNET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The whole image: the one candidate, or the fallback.
WHOLE_IMAGE = TrainView("distorted_box", area=(1.0, 1.0), aspect=(1.0, 1.0))
needs_dali = pytest.mark.skipif(dali.missing_reason() is not None, reason=dali.missing_reason() or "")


def write_records(path, payloads):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for payload in payloads:
            writer.write(payload)


def fingerprints(dataset):
    """(label, pixel sum) of every image: identifies a record's image in a view without randomness, and
    in a training view whose crop is the whole image (a flip keeps the sum)."""
    out = []
    for images, labels in dataset:
        sums = tf.reduce_sum(tf.cast(images, tf.int64), axis=[1, 2, 3]).numpy()
        out += [(int(label), int(total)) for label, total in zip(labels.numpy(), sums)]
    return out


# ------------------------------------------------------------------------------------- index files

def test_index_lists_offset_and_size_on_disk_of_every_record(tmp_path):
    write_records(tmp_path / "a", [b"", b"hello", b"x" * 300])
    (tmp_path / "empty").write_bytes(b"")
    assert dali_index.write_index(str(tmp_path / "a")) == 3
    # a record on disk: 8 bytes length, 4 CRC, payload, 4 CRC
    assert (tmp_path / "a.idx").read_text() == "0 16\n16 21\n37 316\n"
    assert dali_index.write_index(str(tmp_path / "empty")) == 0 and (tmp_path / "empty.idx").read_text() == ""
    assert "".join(dali_index.index_lines([0, 5, 300])) == "0 16\n16 21\n37 316\n"
    assert dali_index.indexed_records(str(tmp_path / "a")) == 3


def test_imagenet_prep_writes_each_shards_index_as_the_index_command_does(stripes, tmp_path):
    shards = dali_index.shards_in(stripes)
    assert len(shards) == 6
    for shard in shards:
        written = open(dali_index.index_path(shard)).read()
        copy = tmp_path / os.path.basename(shard)
        shutil.copy(shard, copy)
        dali_index.write_index(str(copy))
        assert (tmp_path / (copy.name + ".idx")).read_text() == written
        count = sum(1 for _ in tf.data.TFRecordDataset(shard))
        assert len(written.splitlines()) == count == records.read_metadata(stripes)["splits"][
            "train" if "train" in shard else "validation"]["shards"][os.path.basename(shard)]


@needs_dali
def test_index_files_equal_dalis_own_tfrecord2idx_byte_for_byte(stripes, tmp_path):
    script = shutil.which("tfrecord2idx", path=os.path.dirname(sys.executable))
    assert script, "DALI's wheel installs the tfrecord2idx script"
    write_records(tmp_path / "odd", [b"a" * n for n in (0, 1, 255, 256, 70000)])
    (tmp_path / "empty").write_bytes(b"")
    for shard in dali_index.shards_in(stripes) + [str(tmp_path / "odd"), str(tmp_path / "empty")]:
        if not os.path.exists(dali_index.index_path(shard)):
            dali_index.write_index(shard)
        reference = tmp_path / (os.path.basename(shard) + ".reference")
        subprocess.run([sys.executable, script, shard, str(reference)], check=True, capture_output=True, timeout=120)
        assert reference.read_bytes() == open(dali_index.index_path(shard), "rb").read(), shard


def test_index_command_writes_missing_and_stale_indexes_only(stripes, tmp_path):
    for shard in dali_index.shards_in(stripes):
        shutil.copy(shard, tmp_path)
        shutil.copy(dali_index.index_path(shard), tmp_path)
    expected = {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")}
    (tmp_path / "train-00001-of-00004.idx").unlink()  # a shard made elsewhere
    (tmp_path / "validation-00000-of-00002.idx").write_text("0 16\n")  # an index of another file
    done = subprocess.run([sys.executable, "-m", "tfcnn.data.dali_index", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "6 shards" in done.stdout and "2 indexes written, 4 already up to date" in done.stdout
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")} == expected
    assert not list(tmp_path.glob(".*"))  # no temporary file left
    (tmp_path / "train-00002-of-00004").write_bytes((tmp_path / "train-00002-of-00004").read_bytes()[:-10])
    broken = subprocess.run([sys.executable, "-m", "tfcnn.data.dali_index", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert broken.returncode != 0 and "train-00002-of-00004 is not a complete TFRecord file" in broken.stderr


def test_a_missing_or_stale_index_is_an_error_naming_the_command(stripes, tmp_path):
    shard = tmp_path / "train-00000-of-00001"
    shutil.copy(dali_index.shards_in(stripes)[0], shard)
    with pytest.raises(dali_index.IndexFileError, match=rf"no DALI index for {shard} .*`python -m "
                                                        rf"tfcnn.data.dali_index {tmp_path}`"):
        dali.rank_records(str(tmp_path), "train", 1, 0)
    (tmp_path / "train-00000-of-00001.idx").write_text("0 100\n")
    with pytest.raises(dali_index.IndexFileError, match="does not describe .*python -m tfcnn.data.dali_index"):
        dali_index.indexed_records(str(shard))


def test_a_rerun_of_imagenet_prep_indexes_shards_that_have_none(raw_tree, tmp_path):
    def build():
        return bt.build_tfrecords(str(tmp_path), str(raw_tree / "train"), train_shards=3, resize="shorter:64",
                                  num_workers=1, log=lambda *_: None)

    build()
    indexes = {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")}
    assert sorted(indexes) == [f"train-0000{i}-of-00003.idx" for i in range(3)]
    for path in tmp_path.glob("*.idx"):
        path.unlink()  # as shards from a tfcnn before indexes
    assert build()["train"]["shards_already_complete"] == 3
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")} == indexes


# ------------------------------------------------------------------------------ what DALI refuses

def test_options_dali_cannot_serve_are_refused_naming_them(stripes):
    with pytest.raises(pipeline.DataError, match=r"--augment randaugment:2,9 is not available with "
                                                 r"--data_backend dali_cpu.*--data_backend tf"):
        dali.build_dataset(stripes, "train", 4, 32, device="cpu", augment="randaugment:2,9")
    with pytest.raises(pipeline.DataError, match="--data_backend dali_cpu does not take cache_images"):
        dali.build_dataset(stripes, "train", 4, 32, device="cpu", cache_images=True)


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="this machine has a GPU")
def test_dali_gpu_without_a_gpu_is_an_error_naming_the_flag(stripes):
    with pytest.raises(pipeline.DataError, match="--data_backend dali_gpu needs an NVIDIA GPU .*dali_cpu"):
        dali.build_dataset(stripes, "train", 4, 32, device="gpu")


def test_missing_dali_is_an_error_with_the_install_command(stripes, monkeypatch):
    monkeypatch.setattr(dali, "_MISSING", ImportError("No module named 'nvidia.dali'"))
    with pytest.raises(RuntimeError, match=r"--data_backend dali_cpu: NVIDIA DALI .* not installed .*"
                                           r"`make install DALI=1`"):
        dali.build_dataset(stripes, "validation", 4, 32, device="cpu")


# ------------------------------------------------------------------------------------ the views

@needs_dali
def test_training_batches_have_the_contract_of_the_tf_backend(stripes):
    ds = dali.build_dataset(stripes, "train", 16, 40, device="cpu", num_classes=2)
    for images, labels in ds.take(15):  # 240 images: past the 192 of an epoch
        assert images.shape == (16, 40, 40, 3) and images.dtype == tf.uint8
        assert labels.shape == (16,) and labels.dtype == tf.int32
        assert set(labels.numpy()) <= {0, 1} and images.numpy().std() > 1


@needs_dali
@pytest.mark.parametrize("ranks", [2, 3])
def test_training_ranks_read_disjoint_parts_that_together_cover_the_records(stripes, ranks):
    whole = dict(train_crop=WHOLE_IMAGE)  # every crop is the whole image
    total = 192
    every = set(fingerprints(dali.build_dataset(stripes, "train", 8, 32, device="cpu", num_classes=2, **whole)
                             .take(2 * total // 8)))
    assert len(every) == total  # each record's image is told apart
    parts = []
    for rank in range(ranks):
        share = dali.records_of_rank(total, ranks, rank)
        ds = dali.build_dataset(stripes, "train", 8, 32, device="cpu", num_classes=2, num_shards=ranks,
                                shard_index=rank, seed=rank, **whole)
        parts.append(set(fingerprints(ds.take(3 * share // 8))))
        assert len(parts[-1]) == share
    assert set.union(*parts) == every and sum(map(len, parts)) == total


@needs_dali
@pytest.mark.parametrize("batch_size", [1, 5, 7])
@pytest.mark.parametrize("ranks", [1, 2, 5])
def test_validation_sees_every_record_exactly_once(stripes, batch_size, ranks):
    """48 records: 5 ranks and batch sizes 5 and 7 divide neither; DALI pads each rank's last batch, and
    the padding is never counted."""
    reference = sorted(fingerprints(pipeline.build_dataset(stripes, "validation", 16, 32, num_classes=2)))
    seen, sizes = [], []
    for rank in range(ranks):
        ds = dali.build_dataset(stripes, "validation", batch_size, 32, device="cpu", num_classes=2,
                                num_shards=ranks, shard_index=rank)
        found = fingerprints(ds)
        sizes.append(len(found))
        seen += found
    assert sizes == [dali.records_of_rank(48, ranks, r) for r in range(ranks)]
    assert sorted(label for label, _ in seen) == sorted(label for label, _ in reference) == [0] * 24 + [1] * 24
    assert len(set(seen)) == len(seen) == 48


@needs_dali
def test_more_ranks_than_validation_records_leaves_some_ranks_nothing(stripes):
    counts = [len(fingerprints(dali.build_dataset(stripes, "validation", 4, 32, device="cpu", num_classes=2,
                                                  num_shards=50, shard_index=r))) for r in (0, 1, 49)]
    assert counts == [0, 1, 1]


def _photo_like_jpeg(height, width, seed, quality=90):
    """Real JPEG bytes of a smooth random scene (blurred noise: edges and gradients, like a photo)."""
    import io

    from PIL import Image, ImageFilter

    noise = np.random.RandomState(seed).uniform(0, 255, (height, width, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).filter(ImageFilter.GaussianBlur(2)).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """A validation shard of photo-like JPEGs: landscape, portrait, and one smaller than the view (upscaled)."""
    directory = tmp_path_factory.mktemp("photos")
    path = str(directory / records.shard_name("validation", 0, 1))
    with tf.io.TFRecordWriter(path) as writer:
        for i, (height, width) in enumerate([(375, 500), (500, 333), (180, 240), (427, 640)]):
            writer.write(records.make_example(encoded=_photo_like_jpeg(height, width, i), height=height, width=width,
                                              label=1, synset="x", text="x", filename=f"{i}.jpg").SerializeToString())
    dali_index.write_index(path)
    return str(directory)


@needs_dali
@pytest.mark.parametrize("size, resize, interpolation", [(224, 256, "bilinear"), (299, 342, "bilinear"),
                                                         (224, 256, "bicubic")])
def test_eval_view_is_the_tf_backends_within_a_level(photos, size, resize, interpolation):
    """Same geometry (torchvision's), same antialiased filters, JPEGs decoded as PIL decodes them: measured
    0.000-0.003 levels apart on average (bench/dali_views.py), at most 1."""
    views = {backend: [images.numpy().astype(int) for images, _ in build(
        photos, "validation", 1, size, num_classes=1, crop_fraction=size / resize, interpolation=interpolation)]
        for backend, build in (("tf", pipeline.build_dataset),
                               ("dali", lambda *a, **k: dali.build_dataset(*a, device="cpu", **k)))}
    assert len(views["dali"]) == 4 and views["dali"][0].shape == (1, size, size, 3)
    difference = np.concatenate([np.abs(a - b).ravel() for a, b in zip(views["tf"], views["dali"])])
    assert difference.max() <= 1 and difference.mean() < 0.02


@needs_dali
def test_training_crops_follow_tensorflows_constraints_and_distribution():
    """The crops DALI samples cover at least 10% of a box (of the image without boxes), stay within the
    area and aspect ranges, and have the mean area of tf.image.sample_distorted_bounding_box's (0.39 for a
    500x375 image without boxes, 0.49 with a small box near a corner): a torchvision-style sampler
    (uniform area) would give 0.5 and more."""
    height, width = 375, 500
    for boxes, tf_mean_area in (([[], [], [], []], 0.39), ([[0.1], [0.1], [0.3], [0.3]], 0.49)):
        windows = np.array(_dali_crop_windows([height, width, 3], boxes, TRAIN_VIEWS["inception"]))  # relative
        # top, left, height, width
        area, aspect = windows[:, 2] * windows[:, 3], windows[:, 3] * width / (windows[:, 2] * height)
        assert np.all(area >= 0.08 - 1e-6) and np.all(area <= 1 + 1e-6)
        assert np.all(aspect >= 3 / 4 - 1e-4) and np.all(aspect <= 4 / 3 + 1e-4)
        assert abs(area.mean() - tf_mean_area) < 0.03, area.mean()
        if boxes[0]:
            xmin, ymin, xmax, ymax = (b[0] for b in boxes)
            inter_h = np.clip(np.minimum(windows[:, 0] + windows[:, 2], ymax) - np.maximum(windows[:, 0], ymin), 0, 1)
            inter_w = np.clip(np.minimum(windows[:, 1] + windows[:, 3], xmax) - np.maximum(windows[:, 1], xmin), 0, 1)
            assert np.all(inter_h * inter_w / ((xmax - xmin) * (ymax - ymin)) >= 0.1 - 1e-5)
        else:
            assert np.all(area >= 0.1 - 1e-6)  # TensorFlow: the whole image is the box to cover


@needs_dali
def test_torchvision_view_draws_torchvisions_distribution():
    """DALI's torchvision view against torchvision's own RandomResizedCrop draws (the fixture of
    tests/test_recipes.py): area, log-aspect and centre, a landscape image and a panorama (where the
    centre-crop fallback decides most draws). 2,000 draws: a two-sample KS bound of 0.05 (1.95 * sqrt(1/2000))."""
    from test_recipes import FIXTURES, crop_statistics, ks_distance

    with open(os.path.join(FIXTURES, "resized_crop.json")) as f:
        reference = json.load(f)["images"]
    for size, recorded in reference.items():
        height, width = map(int, size.split("x"))
        windows = np.array(_dali_crop_windows([height, width, 3], [[], [], [], []], TRAIN_VIEWS["torchvision"]))
        pixels = windows * [height, width, height, width]
        np.testing.assert_allclose(pixels, np.round(pixels), atol=1e-3)  # whole pixels, as torchvision's
        stats = crop_statistics(np.round(pixels), height, width)
        for name, quantiles in recorded["quantiles"].items():
            distance = ks_distance(stats[name], quantiles)
            assert distance < 0.05, f"{size} {name}: KS distance {distance:.4f} from torchvision's draws"


def _dali_crop_windows(shape, boxes, view, batches=10, batch_size=200):
    from nvidia.dali import fn, pipeline_def

    def constant(value, dtype):
        array = np.array(value, dtype)
        return fn.external_source(source=lambda: [array] * batch_size, batch=True)

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=5)
    def graph():
        return dali.crop_window(constant(shape, np.int64), [constant(c, np.float32) for c in boxes], view)

    pipe = graph()
    pipe.build()
    windows = []
    for _ in range(batches):
        anchors, extents = pipe.run()
        windows += [np.concatenate([np.array(anchors.at(i)), np.array(extents.at(i))]) for i in range(batch_size)]
    return windows


@needs_dali
def test_a_stream_is_a_function_of_seed_and_start_step(stripes):
    def first_batches(seed, start_step):
        ds = dali.build_dataset(stripes, "train", 8, 32, device="cpu", num_classes=2, seed=seed, start_step=start_step)
        return [images.numpy() for images, _ in ds.take(2)]

    again = first_batches(3, 0)
    np.testing.assert_array_equal(np.stack(first_batches(3, 0)), np.stack(again))
    assert not np.array_equal(np.stack(first_batches(3, 5)), np.stack(again))  # a resumed run: a fresh stream
    assert not np.array_equal(np.stack(first_batches(4, 0)), np.stack(again))


@needs_dali
def test_a_label_outside_the_model_classes_stops_the_pipeline(stripes):
    with pytest.raises(tf.errors.OpError, match=r"label out of range \[1, num_classes\](.|\n)*"
                                                r"Index 1 is out of range for axis 0 of length 1"):
        list(dali.build_dataset(stripes, "validation", 16, 32, device="cpu", num_classes=1))


# ------------------------------------------------------------------------------ real processes

@needs_dali
@pytest.mark.slow
def test_two_ranks_train_with_dali_cpu_and_evaluation_counts_exactly(stripes, tmp_path):
    log_dir = tmp_path / "run"
    train = [sys.executable, *TRAIN_PY, "--model=testnet", f"--data_dir={stripes}",
             "--data_backend=dali_cpu", "--image_size=32", "--batch_size=8", "--num_iter=10", "--lr=1.0",
             "--warmup_epochs=0", "--label_smoothing=0", "--display_every=12", f"--log_dir={log_dir}"]
    done = subprocess.run(HOROVODRUN_GLOO + train, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(12, 121, 12))  # 2 ranks x 8: 12 steps per epoch
    assert np.mean([m["loss"] for m in metrics[-2:]]) < np.mean([m["loss"] for m in metrics[:2]]) - 0.15
    results = {}
    for backend, launcher in (("dali_cpu", HOROVODRUN_GLOO), ("tf", [])):
        out = tmp_path / f"{backend}.json"
        evaluate = [sys.executable, WITH_TESTNET, "-m", "tfcnn.evaluate", f"--data_dir={stripes}",
                    f"--log_dir={log_dir}", f"--data_backend={backend}", "--batch_size=5", "--quiet", f"--output={out}"]
        done = subprocess.run(launcher + evaluate, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        results[backend] = json.loads(out.read_text())
    assert results["dali_cpu"]["count"] == results["tf"]["count"] == 48 and results["dali_cpu"]["ranks"] == 2
    assert results["dali_cpu"]["top1"] >= 0.75, results  # learned: chance is 0.5
    assert abs(results["dali_cpu"]["top1"] - results["tf"]["top1"]) <= 2 / 48  # the views differ by <= 1 level


@needs_dali
def test_data_bench_times_dali_beside_tf_data(stripes, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "tfcnn.data.bench", f"--data_dir={stripes}", "--batch_size=4",
                           "--image_size=32", "--images=16", "--repeats=1", "--policies", "--data_backend=dali_cpu",
                           "--dali_threads=1", f"--output={out}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert {"dali_cpu", "dali_cpu_decode_only", "dali_cpu_crop_decode_only", "dali_cpu_train_image_only",
            "tfcnn", "decode_only"} <= set(result["images_per_sec"])
    assert all(v > 0 for v in result["images_per_sec"].values()) and result["dali_threads"] == 1
    assert set(result["ratio_dali_cpu_vs"]) == {"tfcnn", "decode_only"}
    assert "ratio dali_cpu / tfcnn" in done.stdout
