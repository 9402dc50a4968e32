#!/usr/bin/env bash
# Refuses an install the disk cannot hold, before anything is downloaded (what `make install` runs before it
# creates a venv):
#
#   patches/check_space.sh VENV VENV_MIB DOWNLOAD_MIB
#
# pip keeps all of an install's wheels in its temporary directory until it has unpacked them into the venv, so
# the install's peak is the venv's size plus the downloads, summed where both are on one filesystem. That
# directory is Python's tempfile's ($PYTHON's, else python3's): $TMPDIR where a file can be made there, else
# /tmp, so a TMPDIR that does not exist sends pip's downloads to /tmp, and this check with them. Without this
# check a full disk shows as pip's "[Errno 28] No space left on device" after gigabytes of downloads. Exits 1
# naming each filesystem that is short, what it has and what it needs.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 VENV VENV_MIB DOWNLOAD_MIB" >&2; exit 2; }
venv=$1 venv_mib=$2 download_mib=$3
tmp=$("${PYTHON:-python3}" -c 'import tempfile; print(tempfile.gettempdir())')
parent=$(dirname "$(realpath -m "$venv")")  # the venv itself does not exist yet
while [ ! -d "$parent" ]; do parent=$(dirname "$parent"); done

free_mib() { df -Pm "$1" | awk 'NR == 2 {print $4}'; }
gib() { awk -v mib="$1" 'BEGIN {printf "%.1f", mib / 1024}'; }
short=0
need() {  # DIR MIB WHAT: says so and marks the check failed when DIR's filesystem has less than MIB free
  local have
  have=$(free_mib "$1")
  if [ "$have" -lt "$2" ]; then
    echo "tfcnn: not enough disk space to install: $1 has $(gib "$have") GiB free, $3 needs $(gib "$2") GiB" >&2
    short=1
  fi
}
if [ "$(stat -c %d "$parent")" = "$(stat -c %d "$tmp")" ]; then
  need "$parent" $((venv_mib + download_mib)) \
    "the venv ($(gib "$venv_mib") GiB) with pip's downloads ($(gib "$download_mib") GiB) while it installs"
else
  need "$parent" "$venv_mib" "the venv"
  need "$tmp" "$download_mib" "pip's downloads while it installs (TMPDIR)"
fi
[ "$short" = 0 ] || { echo "tfcnn: free some space, or put the venv elsewhere (VENV=DIR) or pip's downloads" \
  "(TMPDIR=DIR) on a disk that has it" >&2; exit 1; }
