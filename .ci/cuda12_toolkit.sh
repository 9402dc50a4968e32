#!/usr/bin/env bash
# A CUDA 12 toolkit for CI's GPU build check, on a machine without one (no GPU, no NVIDIA installer):
#
#   .ci/cuda12_toolkit.sh DIR      then   make install HAS_GPU=1 CUDA_HOME=DIR
#
# Debian 13 (trixie) non-free packages NVIDIA's CUDA 12.4.1 (its own binaries): nvcc, cicc, ptxas and the
# rest in nvidia-cuda-toolkit, the headers and libcudart_static.a in nvidia-cuda-dev, with libcu++ (CCCL)
# from main. They are unpacked
# (not installed: no package of this machine changes) into NVIDIA's layout, as /usr/local/cuda has it,
# with an nvcc.profile for that layout. 12.4 is the CUDA 12 compiler nearest to TensorFlow 2.21's 12.5
# that this machine can get: pip's nvidia-cuda-nvcc-cu12 holds only ptxas, pip's CUDA 13 compiler is another
# major version, bookworm's package is CUDA 11.8. The packages are checked against trixie's Release file,
# itself checked with Debian's archive keyring (gpgv). Kept in DIR: a second run with DIR complete returns
# at once. About 1 GB to download, 2.5 GB unpacked; the unpacked toolkit keeps what a build needs.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dest=$1
[ -x "$dest/bin/nvcc" ] && [ -f "$dest/lib64/libcudart_static.a" ] && [ -e "$dest/lib64/libcudart.so" ] && { echo "ci: CUDA 12.4 toolkit in $dest"; exit 0; }
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
version=12.4.127~12.4.1-2
compiler_version=12.4.131~12.4.1-2
work=$(mktemp -d "${TMPDIR:-/tmp}/tfcnn-cuda.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

echo "ci: CUDA 12.4.1 from Debian trixie non-free ($mirror), about 1 GB"
curl -fsS -o InRelease "$mirror/dists/trixie/InRelease"
gpgv --keyring "$keyring" InRelease 2>/dev/null || { echo "ci: trixie's InRelease does not verify with $keyring" >&2; exit 1; }
for component in main non-free; do  # each index's hash must be the one InRelease's SHA256 section signs
  index=$component/binary-amd64/Packages.xz
  curl -fsS -o "$component.xz" "$mirror/dists/trixie/$index"
  grep -A100000 '^SHA256:' InRelease | awk -v p="$index" -v f="$component.xz" '$3 == p {print $1 "  " f}' |
    sha256sum -c --quiet
  xz -d "$component.xz"
done

fetch() {  # INDEX PACKAGE VERSION [PATH...]: the .deb, its SHA256 checked against the signed index, unpacked
  local index=$1 package=$2 version=$3 entry file sum
  shift 3
  entry=$(awk -v p="Package: $package" -v v="Version: $version" 'BEGIN {RS = ""; FS = "\n"}
    {found = 0; for (i = 1; i <= NF; i++) found += ($i == p) + ($i == v)} found == 2' "$index")
  file=$(sed -n 's/^Filename: //p' <<< "$entry")
  sum=$(sed -n 's/^SHA256: //p' <<< "$entry")
  [ -n "$file" ] && [ -n "$sum" ] || { echo "ci: $package $version is not in trixie's $index index" >&2; exit 1; }
  curl -fsS -o "$package.deb" "$mirror/$file"
  echo "$sum  $package.deb" | sha256sum -c --quiet
  mkdir -p root
  dpkg-deb --fsys-tarfile "$package.deb" | tar -x -C root "${@:-.}"  # only the parts named, if any
  rm "$package.deb"
}
fetch non-free nvidia-cuda-toolkit "$compiler_version"
fetch non-free nvidia-cuda-dev "$version" ./usr/include ./usr/lib/x86_64-linux-gnu/libcudart_static.a \
  ./usr/lib/x86_64-linux-gnu/libcudadevrt.a ./usr/lib/x86_64-linux-gnu/libcudart.so
fetch non-free libcudart12 "$version"  # the shared runtime, which CMake's FindCUDAToolkit requires
fetch main libcu++-dev 2.3.2-2  # libcu++ (CCCL 2.3.2, CUDA 12.4's), which cuda_fp16.h includes

rm -rf "$dest.partial"
mkdir -p "$dest.partial"/{bin,nvvm/bin,nvvm/libdevice,lib64}
for tool in bin2c cudafe++ fatbinary nvlink ptxas cuobjdump nvdisasm nvprune cu++filt; do
  cp root/usr/bin/$tool "$dest.partial/bin/"
done
cp root/usr/lib/nvidia-cuda-toolkit/bin/nvcc "$dest.partial/bin/"
cp -r root/usr/lib/nvidia-cuda-toolkit/bin/crt "$dest.partial/bin/"
cp root/usr/lib/nvidia-cuda-toolkit/bin/cicc "$dest.partial/nvvm/bin/"
cp root/usr/lib/nvidia-cuda-toolkit/libdevice/* "$dest.partial/nvvm/libdevice/"
# The headers, without the libraries' (cuBLAS, cuFFT, NPP, ...), which nothing here compiles against.
cp -r root/usr/include "$dest.partial/include"
cp -P root/usr/lib/x86_64-linux-gnu/libcudart* root/usr/lib/x86_64-linux-gnu/libcudadevrt.a "$dest.partial/lib64/"
# NVIDIA's own nvcc.profile for this layout (Debian's points into /usr).
cat > "$dest.partial/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
rm -rf "$dest"
mv "$dest.partial" "$dest"
"$dest/bin/nvcc" --version | tail -n 2
