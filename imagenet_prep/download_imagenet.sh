#!/usr/bin/env bash
# Download ILSVRC2012 (ImageNet-1k) and unpack it into the layout build_tfrecords expects:
#   DEST/train/<synset>/*.JPEG   DEST/val/*.JPEG   DEST/bbox/...xml   DEST/*.txt (labels, synsets, metadata)
#
#   imagenet_prep/download_imagenet.sh DEST
#
# Credentials: IMAGENET_USERNAME and IMAGENET_ACCESS_KEY from the environment, or asked for (the key is
# read without echo). They reach curl through its stdin config, never the command line or the output.
# Tarballs already downloaded are skipped; an interrupted download resumes; archives are extracted by
# imagenet_prep.extract, which refuses members that would land outside DEST.
# IMAGENET_BASE_URL overrides where the tarballs come from (e.g. a local mirror).
set -euo pipefail

dest=${1:-}
if [ -z "$dest" ]; then
  echo "usage: $0 DEST   (about 150 GB free space needed)" >&2
  exit 2
fi
base_url=${IMAGENET_BASE_URL:-https://image-net.org/data/ILSVRC/2012}
labels_url=${IMAGENET_LABELS_URL:-https://raw.githubusercontent.com/tensorflow/models/master/research/slim/datasets}
python=${PYTHON:-python3}
command -v curl >/dev/null || { echo "error: curl is needed to download (e.g. 'apt-get install curl')" >&2; exit 2; }
mkdir -p "$dest/downloads"

user=${IMAGENET_USERNAME:-}
key=${IMAGENET_ACCESS_KEY:-}
if [ -z "$user" ]; then read -r -p "ImageNet user name: " user; fi
if [ -z "$key" ]; then read -r -s -p "ImageNet access key: " key; echo; fi
if [ -z "$user" ] || [ -z "$key" ]; then
  echo "error: an ImageNet user name and access key are needed (IMAGENET_USERNAME, IMAGENET_ACCESS_KEY)" >&2
  exit 2
fi

fetch() {  # fetch URL FILE [auth]: download to FILE.part (resuming), rename when complete
  local url=$1 file=$2 auth=${3:-}
  if [ -s "$file" ]; then echo "already downloaded: $file"; return; fi
  echo "downloading $url"
  if [ -n "$auth" ]; then
    printf 'user = "%s:%s"\n' "$user" "$key" | curl --fail --location --continue-at - --config - --output "$file.part" "$url"
  else
    curl --fail --location --continue-at - --output "$file.part" "$url"
  fi
  mv "$file.part" "$file"
}

dl=$dest/downloads
fetch "$base_url/ILSVRC2012_img_train.tar" "$dl/ILSVRC2012_img_train.tar" auth
fetch "$base_url/ILSVRC2012_img_val.tar" "$dl/ILSVRC2012_img_val.tar" auth
fetch "$base_url/ILSVRC2012_bbox_train_v2.tar.gz" "$dl/ILSVRC2012_bbox_train_v2.tar.gz" auth
fetch "$base_url/ILSVRC2012_bbox_val_v3.tgz" "$dl/ILSVRC2012_bbox_val_v3.tgz" auth
for f in imagenet_2012_validation_synset_labels.txt imagenet_lsvrc_2015_synsets.txt imagenet_metadata.txt; do
  fetch "$labels_url/$f" "$dest/$f"
done

extract() {  # extract ARCHIVE DIR [--per_member_tar]: once; a marker records completion
  local marker=$2/.extracted-$(basename "$1")
  if [ -e "$marker" ]; then echo "already extracted: $1"; return; fi
  echo "extracting $1 into $2"
  "$python" -m imagenet_prep.extract "$1" "$2" ${3:-}
  touch "$marker"
}
extract "$dl/ILSVRC2012_img_train.tar" "$dest/train" --per_member_tar
extract "$dl/ILSVRC2012_img_val.tar" "$dest/val"
extract "$dl/ILSVRC2012_bbox_train_v2.tar.gz" "$dest/bbox"
extract "$dl/ILSVRC2012_bbox_val_v3.tgz" "$dest/bbox"

cat <<MSG
done. Raw ImageNet is in $dest. Next, convert it to TFRecords:
  imagenet_prep/generate_tfrecords.sh        (asks for the options)
or directly:
  $python -m imagenet_prep.build_tfrecords --train_dir $dest/train --validation_dir $dest/val \\
      --validation_labels $dest/imagenet_2012_validation_synset_labels.txt --bbox_dir $dest/bbox \\
      --synsets_file $dest/imagenet_lsvrc_2015_synsets.txt --metadata_file $dest/imagenet_metadata.txt \\
      --output_dir $dest/tfrecords --resize shorter:480 --quality 90
MSG
