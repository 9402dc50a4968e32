"""The GPU install: `make install` finds a CUDA 12 toolkit, and the disk space the venv and pip's downloads
take, or stops, naming what it found and the ways out, before it downloads anything (every suite); and, in a
venv made by `make check-gpu-build` (tensorflow[and-cuda] and Horovod built with or without its NCCL
operations, on a machine without a GPU), Horovod reports what it was built with and trains two ranks on CPU
tensors."""
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIND_CUDA = os.path.join(REPO, "patches", "find_cuda.sh")


def _toolkit(root, release, headers=True):
    """A directory laid out as a CUDA toolkit whose nvcc prints `release` as nvcc --version does."""
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    if headers:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime.h").write_text("")
    return root


def _find(env):
    return subprocess.run(["bash", FIND_CUDA], capture_output=True, text=True, env={**os.environ, **env})


def test_a_cuda_12_toolkit_is_found_where_cuda_home_says(tmp_path):
    found = _find({"CUDA_HOME": str(_toolkit(tmp_path / "cuda-12.5", "12.5"))})
    assert found.returncode == 0 and found.stdout.split() == [str(tmp_path / "cuda-12.5"), "12.5"], found.stderr


@pytest.mark.parametrize("release, headers, why", [
    (None, False, "no nvcc"),
    ("13.0", True, "CUDA 13.0 in .*, not CUDA 12"),
    ("12.4", False, "CUDA 12.4 in .*, without its headers"),
])
def test_no_suitable_toolkit_stops_naming_what_was_found_and_the_ways_out(tmp_path, release, headers, why):
    home = _toolkit(tmp_path / "cuda", release, headers) if release else tmp_path / "cuda"
    found = _find({"CUDA_HOME": str(home)})
    assert found.returncode == 1 and not found.stdout
    assert f"CUDA_HOME={home}: " in found.stderr
    assert re.search(why, found.stderr), found.stderr
    for way_out in ("make install CUDA_HOME=", "docker build -t tfcnn .", "make install NCCL=0"):
        assert way_out in found.stderr


def test_without_cuda_home_it_looks_in_usr_local_cuda_and_on_the_path(tmp_path):
    """CUDA_HOME unset: /usr/local/cuda (whatever this machine has there), then the nvcc on the PATH."""
    _toolkit(tmp_path / "pathcuda", "11.8")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    env["PATH"] = f"{tmp_path / 'pathcuda' / 'bin'}:/usr/bin:/bin"
    found = subprocess.run(["bash", FIND_CUDA], capture_output=True, text=True, env=env)
    usable = os.path.isfile("/usr/local/cuda/include/cuda_runtime.h") and found.stdout.startswith("/usr/local/cuda ")
    if usable:  # a machine with a CUDA 12 toolkit there: it wins over the PATH's
        assert found.stdout.split()[1].startswith("12.")
        return
    assert found.returncode == 1, found.stdout
    assert "CUDA_HOME: not set" in found.stderr and "/usr/local/cuda: " in found.stderr
    assert f"nvcc on the PATH ({tmp_path / 'pathcuda' / 'bin' / 'nvcc'}): CUDA 11.8" in found.stderr


def test_make_install_stops_before_downloading_the_gpu_stack(tmp_path):
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "-C", REPO, "--no-print-directory", "install", "HAS_GPU=1", f"VENV={venv}",
                           f"CUDA_HOME={tmp_path / 'none'}"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "tfcnn: no CUDA 12 toolkit to compile Horovod's GPU operations (NCCL) with" in done.stdout + done.stderr
    assert not venv.exists()  # stopped before the venv, let alone tensorflow[and-cuda]


CHECK_SPACE = os.path.join(REPO, "patches", "check_space.sh")


def _free_mib(path):
    return shutil.disk_usage(path).free // 2**20


def _check_space(venv, venv_mib, download_mib, tmp):
    return subprocess.run(["bash", CHECK_SPACE, str(venv), str(venv_mib), str(download_mib)], capture_output=True,
                          text=True, env={**os.environ, "TMPDIR": str(tmp), "PYTHON": sys.executable})


def test_an_install_the_disk_cannot_hold_stops_before_the_venv(tmp_path):
    """The venv and pip's downloads share tmp_path's filesystem here, so what they need adds up: this
    filesystem's free space is enough for either alone, not for both. make install runs the check before it
    makes the venv (its figures taken as given on its command line here)."""
    free, venv = _free_mib(tmp_path), tmp_path / "venv"
    fits = _check_space(venv, 1, 1, tmp_path)
    assert fits.returncode == 0 and not fits.stderr, fits.stderr
    short = _check_space(venv, free // 2 + 500, free // 2 + 500, tmp_path)
    assert short.returncode == 1, short.stderr
    assert re.search(rf"{re.escape(str(tmp_path))} has [\d.]+ GiB free, the venv \([\d.]+ GiB\) with pip's "
                     rf"downloads \([\d.]+ GiB\) while it installs needs [\d.]+ GiB", short.stderr), short.stderr
    assert "VENV=DIR" in short.stderr and "TMPDIR=DIR" in short.stderr

    done = subprocess.run(["make", "-C", REPO, "--no-print-directory", "install", f"VENV={venv}",
                           f"INSTALL_SPACE_MIB={free + 1000} 0"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode != 0 and "tfcnn: not enough disk space to install" in done.stderr, done.stderr
    assert not venv.exists()


def test_a_tmpdir_that_does_not_exist_is_checked_where_pip_downloads_instead(tmp_path):
    """Python's tempfile, which pip takes its temporary directory from, skips a TMPDIR that does not exist and
    takes /tmp: the check holds /tmp's filesystem then, where it used to fail at the missing directory."""
    missing = tmp_path / "missing"
    pips = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"], text=True,
                          capture_output=True, env={**os.environ, "TMPDIR": str(missing)}).stdout.strip()
    assert pips and pips != str(missing)
    fits = _check_space(tmp_path / "venv", 1, 1, missing)
    assert fits.returncode == 0 and not fits.stderr, fits.stderr
    short = _check_space(tmp_path / "venv", 1, _free_mib(pips) + 1000, missing)
    held = str(tmp_path) if os.stat(pips).st_dev == os.stat(tmp_path).st_dev else pips  # the downloads' filesystem
    assert short.returncode == 1 and f"tfcnn: not enough disk space to install: {held} has" in short.stderr, \
        short.stderr


def test_pip_downloads_on_another_filesystem_are_checked_there(tmp_path):
    """TMPDIR on another filesystem (a tmpfs /tmp, say): each filesystem is held to its own part."""
    other = "/dev/shm"
    if not os.path.isdir(other) or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip(f"needs a directory on another filesystem than {tmp_path} ({other})")
    shm = _free_mib(other)
    fits = _check_space(tmp_path / "venv", 1, shm // 2, other)
    assert fits.returncode == 0, fits.stderr
    short = _check_space(tmp_path / "venv", 1, shm + 1000, other)
    assert short.returncode == 1
    assert f"tfcnn: not enough disk space to install: {other} has" in short.stderr
    assert "pip's downloads while it installs (TMPDIR)" in short.stderr and str(tmp_path) not in short.stderr


# ------------------------------------------------------------------------- in the GPU stack's venv

def _gpu_stack():
    try:
        return metadata.version("tensorflow") and not _installed("tensorflow-cpu")
    except metadata.PackageNotFoundError:
        return False


def _installed(name):
    try:
        return bool(metadata.version(name))
    except metadata.PackageNotFoundError:
        return False


gpu_stack = pytest.mark.skipif(not _gpu_stack(), reason="needs the GPU stack's venv (tensorflow[and-cuda]): "
                                                       "make check-gpu-build makes one and runs these tests in it")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")


def _built_with_nccl() -> bool:
    """What this venv's Horovod was built to have: patches/build_horovod.sh records the build's key."""
    with open(os.path.join(sys.prefix, ".tfcnn-horovod")) as f:
        return "-cuda" in f.read()


@gpu_stack
def test_horovod_reports_nccl_when_built_with_it_and_gloo_always():
    check = subprocess.run([HOROVODRUN, "--check-build"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-2000:]
    operations = check.stdout.split("Available Tensor Operations:")[1]
    assert ("[X] NCCL" in operations) is _built_with_nccl() and "[X] Gloo" in operations, check.stdout
    report = subprocess.run([sys.executable, "-c", "import json, tensorflow as tf, horovod.tensorflow as hvd; "
                             "hvd.init(); print(json.dumps(dict(nccl=bool(hvd.nccl_built()), gloo=hvd.gloo_built(), "
                             "cuda=hvd.cuda_built(), tf_cuda=tf.test.is_built_with_cuda())))"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    built = json.loads(report.stdout.strip().splitlines()[-1])
    expected = _built_with_nccl()
    assert built == dict(nccl=expected, gloo=True, cuda=expected, tf_cuda=True), built


@gpu_stack
def test_two_ranks_train_on_cpu_tensors_with_the_gpu_build():
    done = subprocess.run([HOROVODRUN, "-np", "2", "-H", "localhost:2", sys.executable, "-m", "tfcnn.train",
                           "--model", "resnet18", "--image_size", "32", "--num_classes", "10", "--batch_size", "4",
                           "--num_iter", "3", "--iter_unit", "batch", "--display_every", "1"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 rank(s) x batch 4" in done.stdout and "done: steps 0-3" in done.stdout, done.stdout[-3000:]
