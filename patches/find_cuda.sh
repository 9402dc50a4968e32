#!/usr/bin/env bash
# Finds the CUDA 12 toolkit that compiles Horovod's GPU operations (what `make install` runs on a GPU
# machine, before it downloads anything):
#
#   patches/find_cuda.sh      prints "DIR VERSION" (e.g. "/usr/local/cuda 12.5"), or says why none fits
#
# Where a user has one: $CUDA_HOME when it is set (then only there: an explicit choice is never second-
# guessed), else /usr/local/cuda (NVIDIA's installers and the CUDA devel images), else the nvcc on the
# PATH. A toolkit fits when its nvcc runs, is CUDA 12 (TensorFlow's CUDA wheels are CUDA 12: Horovod's
# kernels link a CUDA 12 runtime beside them, which any CUDA 12 driver runs) and its headers are there.
# pip's CUDA 12 wheels do not fit: nvidia-cuda-nvcc-cu12 holds ptxas but no nvcc. Where none fits, it
# lists what it found and the ways out, and exits 1.
set -euo pipefail

version_of() {  # "12.5" from nvcc --version, or nothing
  "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1
}

found=()
try() {  # DIR WHERE: prints "DIR VERSION" and exits when the toolkit in DIR fits; else notes why not
  local dir=$1 where=$2 version
  if [ ! -x "$dir/bin/nvcc" ]; then
    found+=("$where: no nvcc ($dir/bin/nvcc)"); return
  fi
  version=$(version_of "$dir/bin/nvcc")
  if [ -z "$version" ]; then
    found+=("$where: $dir/bin/nvcc does not run or print its release"); return
  fi
  if [ "${version%%.*}" != 12 ]; then
    found+=("$where: CUDA $version in $dir, not CUDA 12"); return
  fi
  if [ ! -f "$dir/include/cuda_runtime.h" ]; then
    found+=("$where: CUDA $version in $dir, without its headers ($dir/include/cuda_runtime.h)"); return
  fi
  echo "$dir $version"
  exit 0
}

if [ -n "${CUDA_HOME:-}" ]; then
  try "$CUDA_HOME" "CUDA_HOME=$CUDA_HOME"
else
  found+=("CUDA_HOME: not set")
  try /usr/local/cuda /usr/local/cuda
  if nvcc=$(command -v nvcc); then
    try "$(dirname "$(dirname "$(readlink -f "$nvcc")")")" "nvcc on the PATH ($nvcc)"
  else
    found+=("nvcc on the PATH: none")
  fi
fi

{
  echo "tfcnn: no CUDA 12 toolkit to compile Horovod's GPU operations (NCCL) with. Looked at:"
  printf '  - %s\n' "${found[@]}"
  echo "TensorFlow's CUDA wheels bring CUDA 12's libraries but no compiler (pip's nvidia-cuda-nvcc-cu12 has"
  echo "ptxas only), and a CUDA 13 nvcc would link a runtime beside TensorFlow's that needs a CUDA 13 driver."
  echo "Ways out:"
  echo "  - install NVIDIA's CUDA 12 toolkit (e.g. the cuda-toolkit-12-5 package from NVIDIA's repository),"
  echo "    or point at one: make install CUDA_HOME=/usr/local/cuda-12.5"
  echo "  - use the Docker image (docker build -t tfcnn .: CUDA 12.5 with nvcc and NCCL)"
  echo "  - make install NCCL=0: Horovod without GPU operations. It still trains on GPUs: each step's"
  echo "    gradients go to host memory, are averaged there by Gloo (or MPI) and come back, instead of"
  echo "    NCCL's GPU-to-GPU transfers; that costs most on 8-GPU servers with NVLink and on large models."
} >&2
exit 1
