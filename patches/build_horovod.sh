#!/usr/bin/env bash
# Installs Horovod into a venv, built against the TensorFlow installed there (what `make install` runs):
#
#   patches/build_horovod.sh VENV_PYTHON CACHE_ROOT
#
# The sdist comes from PyPI (through pip, so pip's index settings apply), is unpacked, gets the patches
# of patches/horovod-VERSION/ in file-name order (each says what it fixes and where it comes from) and is
# built with `pip wheel --no-build-isolation` against the installed TensorFlow, as a release build (no
# debug information) of what tfcnn links. The wheel is kept in CACHE_ROOT/horovod-KEY, KEY naming
# everything the build depends on (Horovod, the TensorFlow package and version, Python, MPI, the GPU
# build's CUDA toolkit and NCCL, the patch set, this script), so a later install of the same kind takes
# seconds. The venv records the KEY of the Horovod it holds: run again with the same KEY this does
# nothing; with another (OpenMPI installed since, another toolkit) it installs the build that fits.
#
# Environment: HOROVOD_VERSION (0.28.1); WANT_MPI (1 or 0); WANT_GPU (1: Horovod's GPU operations with
# NCCL, compiled by the CUDA 12 toolkit patches/find_cuda.sh finds, against the NCCL of the venv's
# nvidia-nccl-cu12 wheel or, failing that, the system's; 0: none); PIP_FLAGS (extra pip options).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VENV_PYTHON CACHE_ROOT" >&2; exit 2; }
python=$1 cache_root=$2
version=${HOROVOD_VERSION:-0.28.1}
here="$(cd "$(dirname "$0")" && pwd)"
patches="$here/horovod-$version"
pip="$python -m pip --disable-pip-version-check -q ${PIP_FLAGS:-}"
venv="$(cd "$(dirname "$python")/.." && pwd)"
[ -d "$patches" ] || { echo "tfcnn: no patch set for Horovod $version ($patches)" >&2; exit 1; }

# What the build is against: the installed TensorFlow package and Python.
read -r tensorflow site <<< "$("$python" -c '
import sysconfig
from importlib import metadata
for name in ("tensorflow", "tensorflow-cpu"):
    try:
        print(f"{name}{metadata.version(name)}", sysconfig.get_paths()["purelib"]); break
    except metadata.PackageNotFoundError:
        pass
else:
    raise SystemExit("tfcnn: no TensorFlow in this venv to build Horovod against")')"
py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
gpu=
if [ "${WANT_GPU:-0}" = 1 ]; then
  read -r cuda_home cuda_version <<< "$(bash "$here/find_cuda.sh")"
  # NCCL: the user's HOROVOD_NCCL_HOME, else the venv's nvidia-nccl-cu12 wheel (the NCCL TensorFlow loads:
  # one NCCL in the process), else the system's.
  if [ -n "${HOROVOD_NCCL_HOME:-}" ]; then
    nccl_include=$HOROVOD_NCCL_HOME/include nccl_lib=$HOROVOD_NCCL_HOME/lib nccl_from="HOROVOD_NCCL_HOME"
  elif [ -f "$site/nvidia/nccl/include/nccl.h" ]; then
    nccl_include=$site/nvidia/nccl/include nccl_lib=$site/nvidia/nccl/lib nccl_from="the venv's nvidia-nccl-cu12"
    # Found at run time beside the extension, in whichever venv the wheel is installed (patch 15); the wheel
    # holds libnccl.so.2 without the libnccl.so link the linker looks for.
    export HOROVOD_NCCL_RUNPATH='$ORIGIN/../../nvidia/nccl/lib'
    [ -e "$nccl_lib/libnccl.so" ] || ln -s libnccl.so.2 "$nccl_lib/libnccl.so"
  elif [ -f /usr/include/nccl.h ]; then
    nccl_include=/usr/include nccl_lib=/usr/lib/x86_64-linux-gnu nccl_from="the system"
  else
    echo "tfcnn: no NCCL to build Horovod's GPU operations against: not in the venv (nvidia-nccl-cu12, which" \
         "tensorflow[and-cuda] brings), not in /usr/include; set HOROVOD_NCCL_HOME, or make install NCCL=0" >&2
    exit 1
  fi
  nccl_version=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH)/ {printf "%s%s", sep, $3; sep="."}' "$nccl_include/nccl.h")
  gpu="-cuda$cuda_version-nccl$nccl_version"
fi
mpi=$([ "${WANT_MPI:-0}" = 1 ] && echo -mpi || true)
# The patches' diff lines count, their '#' header lines do not; this script's flags count.
sources=$( (grep -hv '^#' "$patches"/*.patch; cat "$0") | cksum | cut -d' ' -f1)
key="$version-$tensorflow-py$py$mpi$gpu-$sources"
cache="$cache_root/horovod-$key"

if [ "$(cat "$venv/.tfcnn-horovod" 2>/dev/null)" = "$key" ]; then
  exit 0  # the venv holds this very build
fi
$pip install cloudpickle psutil pyyaml packaging cffi
wheel=$(ls "$cache"/horovod-"$version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  echo "tfcnn: horovod $version from the cache ($wheel)"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/tfcnn-horovod.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
  # Patch 13: no debug information (the same -O3 code, much less to compile and link).
  export HOROVOD_BUILD_TYPE=Release MAKEFLAGS="-j$(nproc 2>/dev/null || echo 2)"
  if [ "${WANT_MPI:-0}" = 1 ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
  what="MPI ${WANT_MPI:-0}, GPU operations ${WANT_GPU:-0}"
  if [ -n "$gpu" ]; then
    # The toolkit's nvcc first on the PATH: Horovod picks the kernels' architectures from the first nvcc it
    # finds there, before HOROVOD_CUDA_HOME (another CUDA's nvcc would name ones this one cannot compile).
    export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME=$cuda_home HOROVOD_NCCL_INCLUDE=$nccl_include \
      HOROVOD_NCCL_LIB=$nccl_lib HOROVOD_NCCL_LINK=SHARED PATH="$cuda_home/bin:$PATH"
    what="$what: CUDA $cuda_version from $cuda_home, NCCL $nccl_version from $nccl_from ($nccl_lib)"
  fi
  echo "tfcnn: building horovod $version against $tensorflow ($what; about 2-3 minutes on 2 cores, more for" \
       "the GPU operations); the wheel is kept in $cache"
  $pip download --no-deps --no-binary :all: "horovod==$version" -d "$work"
  tar -xzf "$work/horovod-$version.tar.gz" -C "$work"
  for patch in "$patches"/*.patch; do
    patch -d "$work/horovod-$version" -p1 --forward --batch --quiet < "$patch" ||
      { echo "tfcnn: $patch does not apply to horovod $version" >&2; exit 1; }
  done
  # Into the work directory first: a build cut short leaves no wheel in the cache that looks complete.
  $pip wheel --no-build-isolation --no-deps -w "$work/wheel" "$work/horovod-$version"
  mkdir -p "$cache"
  mv "$work"/wheel/horovod-"$version"-*.whl "$cache"/
  wheel=$(ls "$cache"/horovod-"$version"-*.whl | head -n 1)
fi
$pip install --force-reinstall --no-deps "$wheel"
echo "$key" > "$venv/.tfcnn-horovod"
