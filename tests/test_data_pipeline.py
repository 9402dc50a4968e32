"""tfcnn.data: rank sharding, exact validation coverage, training batches, resume, bad input."""
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from imagenet_prep import build_tfrecords as bt
from tfcnn.data import pipeline, preprocessing
from tfcnn.data.preprocessing import TrainView

# The whole image: the one candidate, or the fallback.
WHOLE_IMAGE = TrainView("distorted_box", area=(1.0, 1.0), aspect=(1.0, 1.0))

MEAN, STD = (123.68, 116.78, 103.94), (58.395, 57.12, 57.375)


@pytest.fixture(scope="module")
def shards(raw_tree, tmp_path_factory):
    """18 train records in 5 shards, 5 validation records in 3 shards (uneven on purpose)."""
    out = tmp_path_factory.mktemp("pipeline_shards")
    bt.build_tfrecords(str(out), str(raw_tree / "train"), str(raw_tree / "val"),
                       validation_labels=str(raw_tree / "val_labels.txt"), bbox_dir=str(raw_tree / "bbox"),
                       train_shards=5, validation_shards=3, resize="shorter:96", num_workers=1,
                       log=lambda *_: None)
    return str(out)


@pytest.mark.parametrize("num_files, ranks", [(5, 1), (5, 2), (5, 3), (8, 8), (1024, 8), (3, 5)])
def test_rank_file_sharding_is_disjoint_and_complete(num_files, ranks):
    files = [f"f{i}" for i in range(num_files)]
    parts = [pipeline.shard_files(files, ranks, r) for r in range(ranks)]
    assert sorted(sum(parts, [])) == sorted(files)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def fingerprints(dataset):
    """(label, rounded pixel sum) of every image: identifies images across rank splits."""
    out = []
    for images, labels in dataset:
        sums = tf.reduce_sum(tf.cast(images, tf.float32), axis=[1, 2, 3]).numpy()
        out += [(int(l), round(float(s), 1)) for l, s in zip(labels.numpy(), sums)]
    return out


@pytest.mark.parametrize("batch_size", [1, 2, 4, 7])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_validation_sees_every_record_exactly_once(shards, batch_size, ranks):
    reference = sorted(fingerprints(pipeline.build_dataset(shards, "validation", 5, 64)))
    assert len(reference) == 5
    split = []
    for rank in range(ranks):
        split += fingerprints(pipeline.build_dataset(shards, "validation", batch_size, 64,
                                                     num_shards=ranks, shard_index=rank))
    assert sorted(split) == reference
    assert sorted(label for label, _ in reference) == [0, 0, 1, 2, 2]  # 1-based n01..n03 -> 0-based


def test_training_batches_have_shape_dtype_and_range(shards):
    ds = pipeline.build_dataset(shards, "train", 4, 56, num_classes=3)
    for images, labels in ds.take(10):  # 40 images: the stream crosses epoch boundaries (18 per epoch)
        assert images.shape == (4, 56, 56, 3) and images.dtype == tf.uint8
        assert labels.shape == (4,) and labels.dtype == tf.int32
        assert images.numpy().std() > 1  # real pixels, not a constant
        assert set(labels.numpy()) <= {0, 1, 2}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_normalize_batch_maps_0_255_to_standardized_values_in_the_compute_dtype(dtype):
    images = tf.constant([[[[0, 128, 255]]], [[[255, 0, 7]]]], tf.uint8)  # [2, 1, 1, 3]
    normalized = preprocessing.normalize_batch(images, MEAN, STD, dtype)
    assert normalized.dtype == dtype and normalized.shape == (2, 1, 1, 3)
    expected = (np.array([[0, 128, 255], [255, 0, 7]], np.float32) - MEAN) / STD
    tolerance = {tf.float32: 1e-6, tf.float16: 2e-3, tf.bfloat16: 2e-2}[dtype]
    np.testing.assert_allclose(tf.cast(normalized, tf.float32).numpy().reshape(2, 3), expected, rtol=tolerance,
                               atol=tolerance)


def test_resize_rounds_to_the_nearest_uint8():
    image = tf.constant([[[0, 0, 0], [1, 1, 1]]], tf.uint8)  # 1x2; a 1x4 bilinear resize gives 0, .25, .75, 1
    resized = preprocessing.resize_to_uint8(image, 4)
    assert resized.dtype == tf.uint8
    assert resized.numpy()[0, :, 0].tolist() == [0, 0, 1, 1]


def _photo_like_jpeg(height, width, seed, quality=90):
    """Real JPEG bytes of a smooth random scene (blurred noise: edges and gradients, like a photo)."""
    import io

    from PIL import Image, ImageFilter

    noise = np.random.RandomState(seed).uniform(0, 255, (height, width, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).filter(ImageFilter.GaussianBlur(2)).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _torchvision_view(pixels, size, resize, interpolation):
    """torchvision's Resize(resize) + CenterCrop(size) on a PIL image, written out (no torch here)."""
    from PIL import Image

    image = Image.fromarray(pixels)
    width, height = image.size
    if width <= height:
        new_width, new_height = resize, int(resize * height / width)
    else:
        new_width, new_height = int(resize * width / height), resize
    image = image.resize((new_width, new_height), {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[interpolation])
    top, left = int(round((new_height - size) / 2.0)), int(round((new_width - size) / 2.0))
    return np.asarray(image.crop((left, top, left + size, top + size))).astype(int)


@pytest.mark.parametrize("height, width", [(375, 500), (500, 333), (180, 240)])  # landscape, portrait, upscaled
@pytest.mark.parametrize("size, resize, interpolation", [(224, 256, "bilinear"), (224, 232, "bilinear"),
                                                         (299, 342, "bilinear"), (224, 256, "bicubic")])
def test_eval_view_is_torchvision_resize_then_centre_crop(height, width, size, resize, interpolation):
    """Imported weights must see the pixels their source was evaluated on: JPEGs decode bit-identically to
    PIL, and the one antialiased resampling matches PIL's resize + crop within 1 level with bilinear (PIL
    rounds to uint8 between its two passes; bicubic overshoot is clipped there too)."""
    import io

    from PIL import Image

    encoded = _photo_like_jpeg(height, width, seed=height + width)
    pil_pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
    np.testing.assert_array_equal(preprocessing.decode_for_eval(tf.constant(encoded)).numpy(), pil_pixels)
    view = preprocessing.eval_image(tf.constant(encoded), size, size / resize, interpolation)
    assert view.dtype == tf.uint8 and view.shape == (size, size, 3)
    difference = np.abs(view.numpy().astype(int) - _torchvision_view(pil_pixels, size, resize, interpolation))
    assert difference.mean() < 0.25
    assert difference.max() <= (1 if interpolation == "bilinear" else 4)
    assert preprocessing.resize_size(size, size / resize) == resize


def test_training_epoch_covers_every_record(shards):
    ds = pipeline.build_dataset(shards, "train", 6, 32, num_classes=3, seed=5)
    labels = np.concatenate([y.numpy() for _, y in ds.take(3)])  # 18 records = one epoch
    assert np.bincount(labels, minlength=3).tolist() == [6, 4, 8]


def test_per_rank_training_streams_are_disjoint(shards):
    per_rank = [set(fingerprints(pipeline.build_dataset(shards, "train", 1, 32, num_classes=3, num_shards=2,
                                                        shard_index=r, train_crop=WHOLE_IMAGE).take(6)))
                for r in range(2)]
    assert per_rank[0] and per_rank[1] and not per_rank[0] & per_rank[1]


def test_resumed_stream_continues_exactly(shards):
    def stream(start_step, steps):
        ds = pipeline.build_dataset(shards, "train", 4, 48, num_classes=3, seed=11,
                                    start_step=start_step)
        return [(x.numpy(), y.numpy()) for x, y in ds.take(steps)]

    full = stream(0, 12)
    resumed = stream(7, 5)  # step 7 is mid-epoch 2 (28 records in, 18 per epoch)
    for (xa, ya), (xb, yb) in zip(full[7:], resumed):
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa, xb)
    other_seed = pipeline.build_dataset(shards, "train", 4, 48, num_classes=3, seed=12)
    assert not np.array_equal(next(iter(other_seed))[0].numpy(), full[0][0])


def test_a_global_seed_of_zero_keeps_working(shards):
    tf.random.set_seed(0)  # TF compares tensor shuffle seeds with 0 then; the pipeline must not trip on it
    try:
        labels = next(iter(pipeline.build_dataset(shards, "train", 4, 32, num_classes=3)))[1]
    finally:
        tf.random.set_seed(None)
    assert labels.shape == (4,)


def test_synthetic_data_has_the_requested_shapes():
    ds = pipeline.build_dataset(None, "train", 3, 40, num_classes=7)
    (a, la), (b, lb) = list(ds.take(2))
    assert a.shape == (3, 40, 40, 3) and a.dtype == tf.uint8 and la.dtype == tf.int32
    assert a.numpy().std() > 50  # spread over 0-255
    assert np.array_equal(a.numpy(), b.numpy())  # generated once
    assert np.all((la.numpy() >= 0) & (la.numpy() < 7))


def test_number_of_classes_comes_from_labels_file(shards, tmp_path):
    assert pipeline.num_classes_of(shards) == 3
    assert pipeline.num_classes_of(str(tmp_path)) == 1000
    assert pipeline.count_records(shards, pipeline.list_shards(shards, "train")) == 18


def test_missing_shards_name_the_glob(tmp_path, raw_tree):
    with pytest.raises(pipeline.DataError, match=r"no train shards in --data_dir .*train-\?\?\?\?\?-of-\?\?\?\?\?; make "
                                                 r"them with `python -m imagenet_prep.build_tfrecords`$"):
        pipeline.build_dataset(str(tmp_path), "train", 4, 32)
    with pytest.raises(pipeline.DataError, match=r"^--data_dir \S+typo: no such directory$"):
        pipeline.list_shards(str(tmp_path / "typo"), "validation")
    # images where records belong (a user's first try): the conversion that makes them, of its splits' folders
    advice = "holds folders of images, not TFRecords: convert them first, `python -m imagenet_prep.build_tfrecords"
    for data_dir, split, flags in (
            (raw_tree, "train", f"--train_dir {raw_tree / 'train'} --validation_dir {raw_tree / 'val'}"),
            (raw_tree / "train", "validation", f"--train_dir {raw_tree / 'train'}")):
        with pytest.raises(pipeline.DataError) as missing:
            pipeline.list_shards(str(data_dir), split)
        assert str(missing.value).endswith(f"; {data_dir} {advice} {flags} --output_dir {data_dir}-tfrecords`, then "
                                           f"pass that --output_dir"), str(missing.value)
    with pytest.raises(pipeline.DataError, match="batch_size must be a positive integer, received: 0"):
        pipeline.build_dataset(str(tmp_path), "train", 0, 32)


def test_more_ranks_than_train_shards_is_an_error(shards):
    with pytest.raises(pipeline.DataError, match="5 train shards .* cannot feed 8 ranks"):
        pipeline.build_dataset(shards, "train", 2, 32, num_shards=8, shard_index=7)


def test_label_outside_the_model_classes_names_the_image(shards):
    ds = pipeline.build_dataset(shards, "validation", 5, 32, num_classes=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label out of range.*VAL_00[24]\.JPEG") as error:
        list(ds)
    assert pipeline.explain_failure(error.value, shards, "validation") is error.value  # no slow scan: it names them


def test_corrupt_record_is_found_and_named(tmp_path, write_corrupt_shard):
    path = write_corrupt_shard(tmp_path, "train")
    message = pipeline.find_corrupt_record([path])
    assert message.startswith(f"{path}: record 1 (broken.jpg): ")
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(pipeline.build_dataset(str(tmp_path), "train", 2, 8, num_classes=1).take(1))
    explained = pipeline.explain_failure(error.value, str(tmp_path), "train")
    assert isinstance(explained, pipeline.DataError) and str(explained) == f"corrupt train record: {message}"
    from tfcnn.training import make_config, train

    with pytest.raises(pipeline.DataError, match=r"corrupt train record: .*train-00000-of-00001: record 1 \(broken.jpg\)"):
        train(make_config(model="resnet18", data_dir=str(tmp_path), image_size=32, batch_size=2, num_iter=2,
                          iter_unit="batch", display_every=1))


def test_data_bench_command(shards, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "tfcnn.data.bench", f"--data_dir={shards}", "--batch_size=4",
                           "--image_size=32", "--images=16", "--repeats=1", f"--output={out}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["images_per_sec"]) == {"tfcnn", "decode_only", "classic", "crop_decode_only",
                                             "train_image_only", "tfcnn+randaugment:2,9", "tfcnn+autoaugment:imagenet"}
    assert all(v > 0 for v in result["images_per_sec"].values())
    assert "tfcnn" in done.stdout and "ratio" in done.stdout
    from tfcnn.data import bench

    with pytest.raises(SystemExit) as missing:  # in this process: the exit the command would make
        bench.main([f"--data_dir={tmp_path}"])
    message = str(missing.value.code)
    assert message.startswith("tfcnn.data.bench: error: ") and "no train shards" in message
