#!/usr/bin/env bash
# Installs Horovod into a venv, built against the TensorFlow installed there (what `make install` runs):
#
#   patches/build_horovod.sh VENV_PYTHON CACHE_DIR
#
# The sdist comes from PyPI (through pip, so pip's index settings apply), is unpacked, gets the patches
# of patches/horovod-VERSION/ in file-name order (each says what it fixes and where it comes from) and is
# built with `pip wheel --no-build-isolation` against the installed TensorFlow. The wheel is kept in
# CACHE_DIR, which the Makefile names after everything the build depends on (TensorFlow lane, Python,
# CPU/GPU, MPI, the patch set), so a later install of the same kind takes seconds.
#
# Environment: HOROVOD_VERSION (0.28.1), WANT_MPI and WANT_GPU (1 or 0), PIP_FLAGS (extra pip options).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VENV_PYTHON CACHE_DIR" >&2; exit 2; }
python=$1 cache=$2
version=${HOROVOD_VERSION:-0.28.1}
patches="$(cd "$(dirname "$0")" && pwd)/horovod-$version"
pip="$python -m pip --disable-pip-version-check -q ${PIP_FLAGS:-}"

wheel=$(ls "$cache"/horovod-"$version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  [ -d "$patches" ] || { echo "tfcnn: no patch set for Horovod $version ($patches)" >&2; exit 1; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/tfcnn-horovod.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
  if [ "${WANT_MPI:-0}" = 1 ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
  if [ "${WANT_GPU:-0}" = 1 ]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi
  echo "tfcnn: building horovod $version against TensorFlow (MPI ${WANT_MPI:-0}, GPU ${WANT_GPU:-0}; about" \
       "4-6 minutes on 2 cores); the wheel is kept in $cache"
  $pip install cloudpickle psutil pyyaml packaging cffi
  $pip download --no-deps --no-binary :all: "horovod==$version" -d "$work"
  tar -xzf "$work/horovod-$version.tar.gz" -C "$work"
  for patch in "$patches"/*.patch; do
    patch -d "$work/horovod-$version" -p1 --forward --batch --quiet < "$patch" ||
      { echo "tfcnn: $patch does not apply to horovod $version" >&2; exit 1; }
  done
  mkdir -p "$cache"
  # Into the work directory first: a build cut short leaves no wheel in the cache that looks complete.
  $pip wheel --no-build-isolation --no-deps -w "$work/wheel" "$work/horovod-$version"
  mv "$work"/wheel/horovod-"$version"-*.whl "$cache"/
  wheel=$(ls "$cache"/horovod-"$version"-*.whl | head -n 1)
else
  echo "tfcnn: horovod $version from the cache ($wheel)"
  $pip install cloudpickle psutil pyyaml packaging cffi
fi
$pip install --force-reinstall --no-deps "$wheel"
