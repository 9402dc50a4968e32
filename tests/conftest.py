import importlib.util
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

# TensorFlow is imported where a fixture needs it, not here: pytest-xdist's controlling process loads this
# file too, and would import TensorFlow (2-3 CPU-s) before it starts the workers, which import their own.


def bfloat16_refused_by_an_isa_cap() -> str | None:
    """Why bfloat16 convolutions cannot run here, or None. TensorFlow hands them to oneDNN by the CPU's own
    flags (AVX512F); oneDNN held below AVX-512 by ONEDNN_MAX_CPU_ISA (the AVX2 approximation on an AVX-512
    machine, docs/performance.md) then refuses to create them. A real AVX2-only CPU never hands them over."""
    from tfcnn import precision

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if (not cap or cap.startswith(("AVX512", "AVX10", "ALL", "DEFAULT")) or precision.cpu_kernels() == "Eigen's"
            or "avx512f" not in precision.cpu_flags()):
        return None
    return (f"ONEDNN_MAX_CPU_ISA={cap} on a CPU with AVX-512: TensorFlow sends bfloat16 convolutions to oneDNN by "
            "the CPU's flags and the cap makes oneDNN refuse them (an AVX2-only CPU keeps them from oneDNN: they "
            "pass there)")


@pytest.fixture(scope="session", autouse=True)
def session_temporary_directory(tmp_path_factory):
    """This worker and the processes its tests start keep their temporary files in a directory of the
    worker's, removed when its session ends, before the worker exits. A killed process cannot remove its own
    (TensorFlow's autograph modules, dozens of files a training process, are removed at exit): the tests kill
    training processes, and pytest-xdist kills a worker that has not exited 10 s after it was told to (a
    worker's exit took 6-8 s in a run measured). A short path: OpenMPI makes its sockets there. The tests' own
    tmp_path directories stay under pytest's base directory, which keeps a failed test's files."""
    tmp_path_factory.getbasetemp()  # fixed before the temporary directory moves
    path = tempfile.mkdtemp(prefix="tfcnn-")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", path)  # the processes the tests start
        patch.setattr(tempfile, "tempdir", path)  # this worker's own, which Python read once
        yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def mixed_policy(request):
    """Runs a test under a Keras global dtype policy, restoring float32 afterwards."""
    import tensorflow as tf

    refused = request.param == "mixed_bfloat16" and bfloat16_refused_by_an_isa_cap()
    if refused:
        pytest.skip(refused)
    tf.keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    tf.keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def testnet():
    """The tests' small models (tests/testnet.py) registered for one test, then removed again."""
    import testnet as small_models

    small_models.register()
    yield small_models
    small_models.unregister()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running, run first (CI still runs them)")
    config.addinivalue_line("markers", "multihost: trains across network namespaces made by the test (root; skipped "
                                       "with the reason elsewhere)")
    # Keras' own initializers call random.randint with a float bound (thousands of times per model).
    config.addinivalue_line("filterwarnings", "ignore:non-integer arguments to randrange:DeprecationWarning")
    # matplotlib < 3.10 (Python 3.9's, so setup.py's bound) calls pyparsing 3.3's renamed functions by their old
    # names, dozens of times per chart (hidden outside tests: Python's default filters ignore DeprecationWarnings).
    # Older pyparsings warn of none and have no such class.
    if importlib.util.find_spec("pyparsing") and importlib.util.find_spec("pyparsing.warnings"):
        config.addinivalue_line("filterwarnings", "ignore::pyparsing.warnings.PyparsingDeprecationWarning")


def pytest_collection_modifyitems(items):
    """Long tests first: xdist hands tests out in this order, so no worker is left alone with a long one
    at the end while the other idles (the sort is stable: otherwise the files' order)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _jpeg(path, size, color, mode="RGB", quality=95):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, color)
    ImageDraw.Draw(image).rectangle((size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2), fill=(250, 250, 250))
    image.convert(mode).save(path, "JPEG", quality=quality)


@pytest.fixture
def write_corrupt_shard():
    """write(directory, split): one shard of two records, `ok.jpg` (8x8 black, label 1) then `broken.jpg`
    (the same JPEG cut to 40 bytes); returns the shard's path."""
    import tensorflow as tf

    from tfcnn.data import records

    def write(directory, split):
        path = os.path.join(str(directory), f"{split}-00000-of-00001")
        good = tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)).numpy()
        with tf.io.TFRecordWriter(path) as writer:
            for name, encoded in (("ok.jpg", good), ("broken.jpg", good[:40])):
                writer.write(records.make_example(encoded=encoded, height=8, width=8, label=1, synset="a", text="a",
                                                  filename=name).SerializeToString())
        return path
    return write


@pytest.fixture(scope="session")
def stripes(tmp_path_factory):
    """Horizontal vs vertical stripes: 192 train / 48 validation records, learnable in seconds."""
    from imagenet_prep.build_tfrecords import build_tfrecords
    from imagenet_prep.demo_dataset import make_dataset

    root = tmp_path_factory.mktemp("stripes")
    make_dataset(str(root / "raw"), num_classes=2, train_per_class=96, val_per_class=24, min_size=48, max_size=80,
                 classes=("hstripes", "vstripes"))
    build_tfrecords(str(root / "tf"), str(root / "raw" / "train"), str(root / "raw" / "val"), train_shards=4,
                    validation_shards=2, resize="shorter:48", num_workers=1, log=lambda *_: None)
    return str(root / "tf")


@pytest.fixture(scope="session")
def raw_tree(tmp_path_factory):
    """A small ImageNet-like tree with the awkward cases: uneven classes, a PNG named .JPEG, a CMYK
    JPEG, a grayscale JPEG, a truncated JPEG, bounding-box XMLs, and a flat validation directory with a
    synset-per-line label file."""
    from PIL import Image

    root = tmp_path_factory.mktemp("raw")
    counts = {"n01": 5, "n02": 3, "n03": 7}
    colors = {"n01": (200, 30, 30), "n02": (30, 200, 30), "n03": (30, 30, 200)}
    for synset, count in counts.items():
        (root / "train" / synset).mkdir(parents=True)
        for i in range(count):
            _jpeg(root / "train" / synset / f"{synset}_{i}.JPEG", (200 + 10 * i, 150), colors[synset])
    Image.new("RGB", (180, 120), (10, 120, 240)).save(root / "train" / "n01" / "n01_png.JPEG", "PNG")
    _jpeg(root / "train" / "n02" / "n02_cmyk.JPEG", (160, 140), (220, 40, 40), mode="CMYK")
    _jpeg(root / "train" / "n03" / "n03_gray.JPEG", (150, 210), (90, 90, 90), mode="L")
    good = (root / "train" / "n03" / "n03_0.JPEG").read_bytes()
    (root / "train" / "n03" / "n03_truncated.JPEG").write_bytes(good[: len(good) // 2])
    (root / "bbox" / "n01").mkdir(parents=True)
    (root / "bbox" / "n01" / "n01_0.xml").write_text(
        "<annotation><size><width>200</width><height>150</height></size>"
        "<object><name>n01</name><bndbox><xmin>20</xmin><ymin>15</ymin><xmax>120</xmax><ymax>90</ymax></bndbox></object>"
        "<object><name>n01</name><bndbox><xmin>150</xmin><ymin>0</ymin><xmax>240</xmax><ymax>75</ymax></bndbox></object>"
        "</annotation>")
    (root / "val").mkdir()
    val_labels = []
    for i, synset in enumerate(["n02", "n01", "n03", "n03", "n01"]):
        _jpeg(root / "val" / f"VAL_{i:03d}.JPEG", (300, 220), colors[synset])
        val_labels.append(synset)
    (root / "val_labels.txt").write_text("\n".join(val_labels) + "\n")
    (root / "metadata.txt").write_text("n01\tred thing\nn02\tgreen thing\nn03\tblue thing\nn99\tunused\n")
    return root


@pytest.fixture(scope="session")
def imagenet_cache(tmp_path_factory):
    """A weights cache (TFCNN_CACHE_DIR) holding resnet18's "imagenet" file as a download leaves it: generated
    weights of its exact keys and shapes (tests/weightgen.py), beside the hub's config.json as recorded.
    Read offline (TFCNN_OFFLINE=1), it stands for the published file without the network."""
    import json

    import weightgen
    from tfcnn.models import pretrained

    cache = tmp_path_factory.mktemp("weights-cache")
    entry = pretrained.find("resnet18", "imagenet")
    directory = cache / entry.directory
    directory.mkdir(parents=True)
    weightgen.write_safetensors(weightgen.fixture("resnet18"), directory / entry.file)
    with open(os.path.join(os.path.dirname(__file__), "fixtures", "pretrained_keys.json")) as f:
        cfg = json.load(f)["models"]["resnet18"]["files"][entry.name]["pretrained_cfg"]
    (directory / "config.json").write_text(json.dumps({"architecture": "resnet18", "pretrained_cfg": cfg}))
    return str(cache)
