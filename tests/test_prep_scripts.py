"""The shell entry points of imagenet_prep and the safe extractor, run as real processes."""
import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from imagenet_prep.extract import UnsafeArchiveError, safe_extract
from tfcnn.data import records

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHON": sys.executable}


def add_file(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def tar_bytes(files):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            add_file(tar, name, data)
    return out.getvalue()


@pytest.mark.parametrize("name", ["../evil.txt", "/tmp/evil-abs.txt", "a/../../evil.txt"])
def test_archive_members_outside_the_target_are_refused(tmp_path, name):
    archive = tmp_path / "bad.tar"
    archive.write_bytes(tar_bytes({"ok.txt": b"fine", name: b"bad"}))
    with pytest.raises(UnsafeArchiveError, match="outside"):
        safe_extract(str(archive), str(tmp_path / "dest"))
    assert not (tmp_path / "evil.txt").exists() and not os.path.exists("/tmp/evil-abs.txt")
    assert not (tmp_path / "dest" / "ok.txt").exists()  # nothing extracted at all


def test_links_in_archives_are_refused(tmp_path):
    archive = tmp_path / "link.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
    with pytest.raises(UnsafeArchiveError, match="link"):
        safe_extract(str(archive), str(tmp_path / "dest"))


@pytest.mark.skipif(shutil.which("curl") is None, reason="the download script needs curl, which is not installed")
def test_download_script_with_a_local_mirror(raw_tree, tmp_path):
    """The real script against file:// URLs: download, skip what is present, extract, never print the key."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    class_tars = {f"{s}.tar": tar_bytes({p.name: p.read_bytes() for p in sorted((raw_tree / "train" / s).iterdir())})
                  for s in ("n01", "n02")}
    (mirror / "ILSVRC2012_img_train.tar").write_bytes(tar_bytes(class_tars))
    (mirror / "ILSVRC2012_img_val.tar").write_bytes(
        tar_bytes({p.name: p.read_bytes() for p in sorted((raw_tree / "val").iterdir())}))
    for name in ("ILSVRC2012_bbox_train_v2.tar.gz", "ILSVRC2012_bbox_val_v3.tgz"):
        with tarfile.open(mirror / name, "w:gz") as tar:
            add_file(tar, "n01/n01_0.xml", (raw_tree / "bbox" / "n01" / "n01_0.xml").read_bytes())
    shutil.copy(raw_tree / "val_labels.txt", mirror / "imagenet_2012_validation_synset_labels.txt")
    (mirror / "imagenet_lsvrc_2015_synsets.txt").write_text("n01\nn02\nn03\n")
    shutil.copy(raw_tree / "metadata.txt", mirror / "imagenet_metadata.txt")
    env = {**ENV, "IMAGENET_BASE_URL": f"file://{mirror}", "IMAGENET_LABELS_URL": f"file://{mirror}",
           "IMAGENET_USERNAME": "someone", "IMAGENET_ACCESS_KEY": "s3cret-key-123"}
    dest = tmp_path / "imagenet"
    script = os.path.join(REPO, "imagenet_prep", "download_imagenet.sh")
    first = subprocess.run([script, str(dest)], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "s3cret-key-123" not in first.stdout + first.stderr
    assert sorted(os.listdir(dest / "train" / "n01")) == sorted(
        [".extracted"] + [p.name for p in (raw_tree / "train" / "n01").iterdir()])
    assert len([n for n in os.listdir(dest / "val") if n.endswith(".JPEG")]) == 5
    assert (dest / "bbox" / "n01" / "n01_0.xml").exists()
    assert (dest / "imagenet_lsvrc_2015_synsets.txt").read_text() == "n01\nn02\nn03\n"
    again = subprocess.run([script, str(dest)], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already downloaded") == 7 and again.stdout.count("already extracted") == 4


def test_interactive_wrapper_asks_and_converts(raw_tree, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(raw_tree / "train", raw / "train")
    shutil.copytree(raw_tree / "val", raw / "val")
    shutil.copy(raw_tree / "val_labels.txt", raw / "imagenet_2012_validation_synset_labels.txt")
    answers = f"{raw}\n{tmp_path / 'out'}\ny\n64\n80\n"
    done = subprocess.run([os.path.join(REPO, "imagenet_prep", "generate_tfrecords.sh")], input=answers,
                          env=ENV, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "--resize shorter:64 --quality 80" in done.stdout
    meta = records.read_metadata(str(tmp_path / "out"))
    assert meta["options"] == {"resize": "shorter:64", "quality": 80}
    assert meta["splits"]["train"]["num_records"] == 18 and meta["splits"]["validation"]["num_records"] == 5
    bad = subprocess.run([os.path.join(REPO, "imagenet_prep", "generate_tfrecords.sh")],
                         input=f"{raw}\n{tmp_path / 'o2'}\nmaybe\n", env=ENV, capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert bad.returncode == 2 and "answer y or n, received: maybe" in bad.stderr
