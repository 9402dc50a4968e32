#!/usr/bin/env bash
# Installs NVIDIA DALI and its TensorFlow plugin into a venv (what `make install DALI=1` runs):
#
#   patches/install_dali.sh VENV_PYTHON DALI_VERSION
#
# The plugin (nvidia-dali-tf-plugin-cuda120) is an sdist that, at install time, picks a prebuilt library
# matching the installed TensorFlow or else compiles one against it with g++; it must therefore see that
# TensorFlow (--no-build-isolation). Compiling needs CUDA's runtime headers, not a GPU or a driver: those
# of $CUDA_HOME or /usr/local/cuda, else the headers of NVIDIA's CUDA 12 pip wheels, unpacked into
# VENV/cuda-headers (about 45 MB downloaded once). The plugin then runs on CPU-only machines too
# (--data_backend dali_cpu).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VENV_PYTHON DALI_VERSION" >&2; exit 2; }
python=$1 version=$2
pip="$python -m pip --disable-pip-version-check -q ${PIP_FLAGS:-}"
venv=$(dirname "$(dirname "$python")")
# The CUDA 12 release DALI's cuda120 wheels are built with; only its headers are used.
CUDA_HEADER_WHEELS="nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86"

echo "tfcnn: installing NVIDIA DALI $version and its TensorFlow plugin (the plugin may compile itself:" \
     "about 2 minutes on 2 cores)"
$pip install "nvidia-dali-cuda120==$version" packaging

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda_runtime_api.h" ]; then
  cuda_home="$venv/cuda-headers"
  if [ ! -f "$cuda_home/include/cuda_runtime_api.h" ]; then
    echo "tfcnn: no CUDA toolkit headers ($cuda_home, CUDA_HOME): unpacking those of $CUDA_HEADER_WHEELS"
    work=$(mktemp -d "${TMPDIR:-/tmp}/tfcnn-cuda-headers.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # shellcheck disable=SC2086
    $pip download --no-deps -d "$work" $CUDA_HEADER_WHEELS
    # cuda_runtime_api.h from the runtime wheel, the crt/ headers it includes from the compiler's wheel;
    # written beside the final directory and renamed, so a cut-short unpack is never taken for headers
    "$python" - "$work" "$cuda_home" <<'EOF'
import glob, os, shutil, sys, zipfile
work, target = sys.argv[1:]
staging = f"{target}.tmp"
shutil.rmtree(staging, ignore_errors=True)
for wheel in sorted(glob.glob(os.path.join(work, "*.whl"))):
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if len(parts) > 3 and parts[0] == "nvidia" and parts[2] == "include" and not name.endswith("/"):
                path = os.path.join(staging, "include", *parts[3:])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as out:
                    out.write(archive.read(name))
os.rename(staging, target)
EOF
  fi
fi
# --no-cache-dir: pip would otherwise reuse a plugin wheel it built for another TensorFlow (its wheel cache
# knows the sdist, not the TensorFlow it was compiled against), which then fails to load
CUDA_HOME=$cuda_home $pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps \
  "nvidia-dali-tf-plugin-cuda120==$version"
TF_CPP_MIN_LOG_LEVEL=3 "$python" -c "import nvidia.dali.plugin.tf" ||
  { echo "tfcnn: DALI's TensorFlow plugin installed but does not load (above)" >&2; exit 1; }
