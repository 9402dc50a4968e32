"""imagenet_prep: raw image trees -> shards, read back and checked field by field."""
import glob
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from imagenet_prep import build_tfrecords as bt
from launchers import run_without_tensorflow
from imagenet_prep.images import ResizeSpec, convert_image, parse_resize, read_bbox_xml
from tfcnn.data import dali_index, records


def read_shards(output_dir, split):
    rows = []
    for path in sorted(glob.glob(os.path.join(output_dir, records.shard_pattern(split)))):
        for serialized in tf.data.TFRecordDataset(path):
            f = tf.io.parse_single_example(serialized, records.features())
            rows.append({
                "shard": os.path.basename(path),
                "encoded": f["image/encoded"].numpy(),
                "height": int(f["image/height"]), "width": int(f["image/width"]),
                "label": int(f["image/class/label"]),
                "synset": f["image/class/synset"].numpy().decode(),
                "text": f["image/class/text"].numpy().decode(),
                "filename": f["image/filename"].numpy().decode(),
                "format": f["image/format"].numpy().decode(),
                "colorspace": f["image/colorspace"].numpy().decode(),
                "channels": int(f["image/channels"]),
                "boxes": [tuple(tf.sparse.to_dense(f[f"image/object/bbox/{k}"]).numpy().tolist())
                          for k in ("xmin", "ymin", "xmax", "ymax")],
                "box_labels": tf.sparse.to_dense(f["image/object/bbox/label"]).numpy().tolist(),
            })
    return rows


def quantization_of(jpeg_bytes):
    with Image.open(io.BytesIO(jpeg_bytes)) as image:
        return image.quantization


def reference_quantization(quality):
    out = io.BytesIO()
    Image.new("RGB", (16, 16)).save(out, "JPEG", quality=quality)
    return quantization_of(out.getvalue())


def build(raw, out, **kwargs):
    args = dict(train_dir=str(raw / "train"), validation_dir=str(raw / "val"),
                validation_labels=str(raw / "val_labels.txt"), bbox_dir=str(raw / "bbox"),
                metadata_file=str(raw / "metadata.txt"), train_shards=4, validation_shards=2,
                resize="shorter:96", num_workers=1, log=lambda *_: None)
    args.update(kwargs)
    return bt.build_tfrecords(str(out), **args)


# ------------------------------------------------------------------------------------------ units

@pytest.mark.parametrize("spec, size, expected", [
    ("shorter:96", (200, 150), (128, 96)),
    ("shorter:96", (80, 60), (80, 60)),  # never upscale unless asked
    ("stretch:64x48", (200, 150), (64, 48)),
    ("none", (200, 150), (200, 150)),
])
def test_resize_target_sizes(spec, size, expected):
    assert parse_resize(spec).target_size(*size) == expected


def test_upscale_only_when_asked():
    assert parse_resize("shorter:96", upscale=True).target_size(80, 60) == (128, 96)


@pytest.mark.parametrize("spec", ["shorter", "shorter:0", "stretch:10", "big", "shorter:-3", ""])
def test_unknown_resize_spec_is_rejected(spec):
    with pytest.raises(ValueError, match="unknown resize spec"):
        parse_resize(spec)


def test_rgb_jpeg_needing_no_resize_keeps_its_bytes():
    out = io.BytesIO()
    Image.new("RGB", (50, 40), (1, 2, 3)).save(out, "JPEG", quality=75)
    converted = convert_image(out.getvalue(), parse_resize("shorter:96"), 90)
    assert converted.jpeg == out.getvalue() and not converted.reencoded


def test_png_and_cmyk_are_detected_by_content_and_become_rgb_jpeg():
    png = io.BytesIO()
    Image.new("RGBA", (40, 30), (10, 200, 30, 255)).save(png, "PNG")
    cmyk = io.BytesIO()
    Image.new("RGB", (40, 30), (220, 40, 40)).convert("CMYK").save(cmyk, "JPEG", quality=95)
    for data, source in ((png.getvalue(), "PNG"), (cmyk.getvalue(), "JPEG")):
        converted = convert_image(data, ResizeSpec("none"), 90)
        assert converted.source_format == source and converted.reencoded
        decoded = tf.io.decode_jpeg(converted.jpeg).numpy()
        assert decoded.shape == (30, 40, 3)
    assert tuple(decoded[15, 20]) == pytest.approx((220, 40, 40), abs=12)  # CMYK colours survive


def test_16_bit_grey_is_scaled_to_8_bits_not_clipped():
    """Pillow's convert('RGB') clips 16-bit grey at 255 (all but the darkest 0.4% of the range turn white)."""
    levels = np.array([[0, 16384, 49151, 65535]], np.uint16).repeat(16, axis=0).repeat(16, axis=1)  # 16 x 64
    png = io.BytesIO()
    Image.fromarray(levels).save(png, "PNG")
    assert Image.open(io.BytesIO(png.getvalue())).mode.startswith("I")
    converted = convert_image(png.getvalue(), ResizeSpec("none"), 90)
    decoded = tf.io.decode_jpeg(converted.jpeg).numpy()
    assert decoded.shape == (16, 64, 3)
    centres = decoded[8, 8::16].astype(int)  # the middle of each level's block, every channel
    np.testing.assert_allclose(centres, np.repeat([[0], [64], [191], [255]], 3, axis=1), atol=2)


def test_truncated_jpeg_raises():
    out = io.BytesIO()
    Image.effect_noise((120, 90), 50).convert("RGB").save(out, "JPEG")
    with pytest.raises(OSError):
        convert_image(out.getvalue()[:600], ResizeSpec("none"), 90)


def test_a_file_that_is_no_image_is_named_by_its_bytes():
    """Pillow's message names only its in-memory buffer (`<_io.BytesIO object at 0x...>`): the build's report of a
    skipped file gives what the bytes were instead."""
    with pytest.raises(OSError, match=r"not an image format Pillow reads \(10 bytes, starting b'notanima'\)$"):
        convert_image(b"notanimage", ResizeSpec("none"), 90)


def test_bbox_xml_is_normalized_clipped_and_ordered(tmp_path):
    path = tmp_path / "a.xml"
    path.write_text("<annotation><size><width>200</width><height>100</height></size><object><bndbox>"
                    "<xmin>150</xmin><ymin>10</ymin><xmax>50</xmax><ymax>130</ymax></bndbox></object></annotation>")
    assert read_bbox_xml(str(path)) == [(0.25, 0.1, 0.75, 1.0)]


# ------------------------------------------------------------------------------------ full builds

@pytest.fixture(scope="module")
def built(raw_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards")
    return out, build(raw_tree, out)


def test_build_writes_complete_records(built, raw_tree):
    out, summary = built
    shards = [f"train-{i:05d}-of-00004" for i in range(4)] + [f"validation-{i:05d}-of-00002" for i in range(2)]
    assert sorted(os.listdir(out)) == sorted([records.LABELS_FILE, records.METADATA_FILE] + shards
                                             + [dali_index.index_path(name) for name in shards])
    assert records.read_labels(str(out)) == [("n01", "red thing"), ("n02", "green thing"), ("n03", "blue thing")]
    rows = read_shards(out, "train")
    by_name = {r["filename"]: r for r in rows}
    # 18 readable images of uneven classes; the truncated one is skipped and named.
    assert len(rows) == 18 and "n03_truncated.JPEG" not in by_name
    assert summary["train"]["images_written"] == 18 and summary["train"]["images_skipped"] == 1
    assert summary["train"]["skipped"][0][0].endswith("n03_truncated.JPEG")
    assert {s: sum(r["synset"] == s for r in rows) for s in ("n01", "n02", "n03")} == {"n01": 6, "n02": 4, "n03": 8}
    q90 = reference_quantization(90)
    for row in rows:
        assert row["label"] == {"n01": 1, "n02": 2, "n03": 3}[row["synset"]]
        assert row["text"] == {"n01": "red thing", "n02": "green thing", "n03": "blue thing"}[row["synset"]]
        assert row["filename"].startswith(row["synset"])
        assert (row["format"], row["colorspace"], row["channels"]) == ("JPEG", "RGB", 3)
        image = tf.io.decode_jpeg(row["encoded"]).numpy()
        assert image.shape == (row["height"], row["width"], 3)  # header matches the stored image
        assert min(image.shape[:2]) == 96
        assert quantization_of(row["encoded"]) == q90
    assert (by_name["n01_0.JPEG"]["width"], by_name["n01_0.JPEG"]["height"]) == (128, 96)
    assert (by_name["n01_png.JPEG"]["width"], by_name["n01_png.JPEG"]["height"]) == (144, 96)
    assert (by_name["n03_gray.JPEG"]["width"], by_name["n03_gray.JPEG"]["height"]) == (96, 134)
    boxes = by_name["n01_0.JPEG"]["boxes"]
    assert list(zip(*boxes)) == [pytest.approx((0.1, 0.1, 0.6, 0.6)), pytest.approx((0.75, 0.0, 1.0, 0.5))]
    assert by_name["n01_0.JPEG"]["box_labels"] == [1, 1]
    assert by_name["n01_1.JPEG"]["boxes"] == [(), (), (), ()]


def test_validation_labels_follow_the_label_file(built):
    out, summary = built
    rows = sorted(read_shards(out, "validation"), key=lambda r: r["filename"])
    assert [(r["filename"], r["synset"], r["label"]) for r in rows] == [
        ("VAL_000.JPEG", "n02", 2), ("VAL_001.JPEG", "n01", 1), ("VAL_002.JPEG", "n03", 3),
        ("VAL_003.JPEG", "n03", 3), ("VAL_004.JPEG", "n01", 1)]
    assert summary["validation"]["images_written"] == 5


def test_metadata_counts_every_shard(built):
    out, _ = built
    meta = records.read_metadata(str(out))
    for split, total in (("train", 18), ("validation", 5)):
        shards = meta["splits"][split]["shards"]
        assert sum(shards.values()) == total == meta["splits"][split]["num_records"]
        for name, count in shards.items():
            assert sum(1 for _ in tf.data.TFRecordDataset(str(out / name))) == count
    assert meta["options"] == {"resize": "shorter:96", "quality": 90} and meta["num_classes"] == 3


def test_training_shuffle_is_fixed_and_mixes_classes(built, raw_tree, tmp_path):
    out, _ = built
    build(raw_tree, tmp_path, validation_dir=None)
    for name in (f"train-{i:05d}-of-00004" for i in range(4)):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes()
    first_shard = {r["synset"] for r in read_shards(out, "train") if r["shard"] == "train-00000-of-00004"}
    assert len(first_shard) > 1


def test_interrupted_build_resumes_to_identical_shards(built, raw_tree, tmp_path, monkeypatch):
    out, _ = built
    real_convert = bt.convert_shard
    calls = []

    def convert_then_interrupt(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 3:
            raise KeyboardInterrupt  # as Ctrl-C during the third shard
        return real_convert(*args, **kwargs)

    monkeypatch.setattr(bt, "convert_shard", convert_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        build(raw_tree, tmp_path)
    assert sorted(n for n in os.listdir(tmp_path) if records.is_shard_name(n)) == sorted(calls[:2])
    (tmp_path / ".train-00003-of-00004.tmp-999").write_bytes(b"partial")  # as left by a killed worker
    monkeypatch.setattr(bt, "convert_shard", real_convert)
    summary = build(raw_tree, tmp_path)
    assert summary["train"]["shards_already_complete"] == 2
    assert sorted(os.listdir(tmp_path)) == sorted(os.listdir(out))
    for name in os.listdir(out):
        if records.is_shard_name(name) or name.endswith(dali_index.INDEX_SUFFIX):
            assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name
    assert records.read_metadata(str(tmp_path))["splits"] == records.read_metadata(str(out))["splits"]


def test_validation_in_class_folders_and_own_dataset(tmp_path):
    """Any class-per-folder dataset: labels from sorted folder names, classes text defaults to the name; the
    plan's report counts its shards in words that fit the number."""
    logged = []
    for split, n in (("train", 3), ("val", 2)):
        for cls in ("zebra", "apple"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40, 30), (i * 40, 80, 20)).save(tmp_path / split / cls / f"{i}.jpg")
    # a class's images in its subfolders count, as in torchvision's ImageFolder; hidden folders' do not
    for folder, taken in (("more/deeper", True), (".ipynb_checkpoints", False)):
        (tmp_path / "train" / "zebra" / folder).mkdir(parents=True)
        Image.new("RGB", (40, 30)).save(tmp_path / "train" / "zebra" / folder / f"taken-{taken}.jpg")
    summary = bt.build_tfrecords(str(tmp_path / "out"), str(tmp_path / "train"), str(tmp_path / "val"),
                                 train_shards=2, validation_shards=1, resize="none", num_workers=1,
                                 log=logged.append)
    assert {"2 classes; resize none, JPEG quality 90, converting in this process",
            "train: 7 images into 2 shards (0 already complete)",
            "validation: 4 images into 1 shard (0 already complete)"} <= set(logged), logged
    assert records.read_labels(str(tmp_path / "out")) == [("apple", "apple"), ("zebra", "zebra")]
    rows = read_shards(tmp_path / "out", "validation")
    assert sorted((r["synset"], r["label"]) for r in rows) == [("apple", 1)] * 2 + [("zebra", 2)] * 2
    assert summary["train"]["images_written"] == 7
    assert [r["filename"] for r in read_shards(tmp_path / "out", "train") if "taken" in r["filename"]] == [
        "taken-True.jpg"]


def test_shard_counts_by_default_are_imagenets_and_the_same_size_for_a_smaller_set(tmp_path):
    """Without --train_shards / --validation_shards: ImageNet's 1,281,167 and 50,000 images get the NGC scripts'
    1,024 and 128 shards; a smaller set gets shards of that size, at least 64 and 8 of them (a file per image of a
    set of a few thousand, before), and no more than its images."""
    assert [bt.default_shards("train", n) for n in (1_281_167, 14_000_000, 80_064, 80_065, 3_303)] == [
        1024, 1024, 64, 65, 64]
    assert [bt.default_shards("validation", n) for n in (50_000, 3_519, 3_520, 367)] == [128, 9, 10, 8]
    for cls, n in (("a", 40), ("b", 30)):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8), (3 * i, 0, 0)).save(tmp_path / "photos" / cls / f"{cls}{i}.jpg")
    logged = []
    bt.build_tfrecords(str(tmp_path / "out"), str(tmp_path / "photos"), validation_fraction=0.1, resize="none",
                       num_workers=1, log=logged.append)
    assert {"train: 63 images into 63 shards (0 already complete)",
            "validation: 7 images into 7 shards (0 already complete)"} <= set(logged), logged
    bt.build_tfrecords(str(tmp_path / "more"), str(tmp_path / "photos"), resize="none", num_workers=1,
                       log=logged.append)
    assert "train: 70 images into 64 shards (0 already complete)" in logged
    assert len(glob.glob(str(tmp_path / "more" / records.shard_pattern("train")))) == 64


def test_validation_fraction_holds_each_classs_share_out_of_the_training_images(tmp_path):
    """A dataset of one folder: --validation_fraction takes that share of each class (rounded, a training image
    left to each) out of the training split, the same images on a rerun; another fraction is another build."""
    from tfcnn.data.pipeline import list_shards

    for cls, n in (("a", 10), ("b", 3), ("c", 1)):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8), (20 * i, 0, 0)).save(tmp_path / "photos" / cls / f"{cls}{i}.jpg")
    out, logged = tmp_path / "out", []
    kwargs = dict(train_shards=2, validation_shards=1, resize="none", num_workers=1)
    bt.build_tfrecords(str(out), str(tmp_path / "photos"), validation_fraction=0.2, log=logged.append, **kwargs)
    assert "validation: 3 of --train_dir's 14 images held out (0.2 of each class)" in logged
    held = sorted(r["filename"] for r in read_shards(out, "validation"))
    trained = sorted(r["filename"] for r in read_shards(out, "train"))
    assert [name[0] for name in held] == ["a", "a", "b"] and not set(held) & set(trained)
    assert sorted(held + trained) == sorted(p.name for p in (tmp_path / "photos").glob("*/*.jpg"))
    assert records.read_metadata(str(out))["options"]["validation_fraction"] == 0.2
    summary = bt.build_tfrecords(str(out), str(tmp_path / "photos"), validation_fraction=0.2, log=logged.append,
                                 **kwargs)
    assert summary["validation"]["shards_already_complete"] == 1 and summary["train"]["shards_already_complete"] == 2
    with pytest.raises(bt.BuildError, match=r"built with .*, not .*'validation_fraction': 0.3"):
        bt.build_tfrecords(str(out), str(tmp_path / "photos"), validation_fraction=0.3, **kwargs)
    with pytest.raises(bt.BuildError, match=r"^--validation_fraction 0.01 holds out no image: each class's share"):
        bt.build_tfrecords(str(tmp_path / "out2"), str(tmp_path / "photos"), validation_fraction=0.01, **kwargs)
    with pytest.raises(bt.BuildError, match=r"^--validation_fraction must be at least 0 and below 1, received: 1.0"):
        bt.build_tfrecords(str(tmp_path / "out2"), str(tmp_path / "photos"), validation_fraction=1.0, **kwargs)
    with pytest.raises(bt.BuildError, match=r"^--validation_fraction holds the validation split out of --train_dir: "
                                            r"pass it with --train_dir and without --validation_dir$"):
        bt.build_tfrecords(str(tmp_path / "out2"), str(tmp_path / "photos"), str(tmp_path / "photos"),
                           validation_fraction=0.2, **kwargs)
    # a build of training shards only: evaluation's error names both ways to a validation split
    bt.build_tfrecords(str(tmp_path / "trained"), str(tmp_path / "photos"), **kwargs)
    with pytest.raises(ValueError, match=r"it holds training shards only: .*--validation_dir DIR` adds the validation "
                                         r"split, or .*`--validation_fraction 0.1` holds"):
        list_shards(str(tmp_path / "trained"), "validation")


# ------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, match", [
    (dict(train_dir="/nonexistent/train"), "--train_dir /nonexistent/train does not exist"),
    (dict(resize="shorter:abc"), "unknown resize spec: 'shorter:abc'"),
    (dict(quality=0), "--quality must be between 1 and 100, received: 0"),
    (dict(train_shards=0), "--train_shards must be between 1 and 99999, received: 0"),
    (dict(validation_labels=None), "needs --validation_labels"),
    (dict(train_dir=None, validation_dir=None), "nothing to build"),
])
def test_bad_input_fails_before_any_work(raw_tree, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build(raw_tree, tmp_path / "out", **kwargs)
    assert not glob.glob(str(tmp_path / "out" / "*-of-*"))


def test_empty_inputs_are_clear_errors(raw_tree, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(bt.BuildError, match="is empty"):
        build(raw_tree, tmp_path / "out", train_dir=str(tmp_path / "empty"), validation_dir=None)
    (tmp_path / "t" / "a").mkdir(parents=True)
    (tmp_path / "t" / "b").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "t" / "a" / "x.jpg")
    with pytest.raises(bt.BuildError, match="class folder 'b' holds no images"):
        build(raw_tree, tmp_path / "out", train_dir=str(tmp_path / "t"), validation_dir=None)


def test_rebuild_with_other_options_is_refused(built, raw_tree):
    out, _ = built
    with pytest.raises(bt.BuildError, match="built with .*shorter:96.*not.*quality': 80"):
        build(raw_tree, out, quality=80)
    with pytest.raises(bt.BuildError, match="another build"):
        build(raw_tree, out, train_shards=3)


def test_command_line(built, raw_tree, tmp_path):
    """The command line, converting in 2 worker processes: the same shards, byte for byte, as one process built
    from the same flags (`built`); a bad flag value is an error. Only the workers load TensorFlow: the process
    the user started plans, checks and reports without it (its import takes seconds)."""
    out, _ = built
    flags = [f"--train_dir={raw_tree / 'train'}", f"--validation_dir={raw_tree / 'val'}",
             f"--validation_labels={raw_tree / 'val_labels.txt'}", f"--bbox_dir={raw_tree / 'bbox'}",
             f"--metadata_file={raw_tree / 'metadata.txt'}", f"--output_dir={tmp_path}", "--train_shards=4",
             "--validation_shards=2", "--resize=shorter:96", "--num_workers=2"]
    # what `python -m imagenet_prep.build_tfrecords` runs (its __main__ block), in a process that reports
    code = ("import sys\nfrom absl import app\nfrom imagenet_prep import build_tfrecords\n"
            f"sys.argv = ['build_tfrecords', *{flags!r}]\nbuild_tfrecords.define_flags()\n"
            "try:\n    app.run(build_tfrecords.main)\nexcept SystemExit as exit:\n    print('exit status', exit.code or 0)\n")
    lines, errors = run_without_tensorflow(code)
    assert lines[-1] == "exit status 0", errors[-3000:]
    assert "train done: 18 images written, 1 skipped" in "\n".join(lines)
    assert "n03_truncated.JPEG" in "\n".join(lines)
    shards = [name for name in os.listdir(out) if records.is_shard_name(name)]
    assert len(shards) == 6
    for name in shards:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name
    bad = subprocess.run([sys.executable, "-m", "imagenet_prep.build_tfrecords", *flags[:-3], "--resize=huge"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "unknown resize spec: 'huge'" in bad.stderr
    meta = json.loads((tmp_path / "dataset.json").read_text())
    assert meta["splits"]["train"]["num_records"] == 18


def test_labels_and_metadata_read_back_as_written(tmp_path):
    """UTF-8 both ways (fileio writes it), a class without a text, and nothing there: None and {}."""
    classes = [("n01", "café crème, ½ cup"), ("n02", "")]
    records.write_labels(str(tmp_path), classes)
    assert records.read_labels(str(tmp_path)) == classes
    assert records.read_labels(str(tmp_path / "none")) is None and records.read_metadata(str(tmp_path)) == {}
