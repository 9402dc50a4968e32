#!/usr/bin/env bash
# Interactive wrapper around `python -m imagenet_prep.build_tfrecords`: asks where the raw files are,
# where to write, whether and how much to pre-resize, and the JPEG quality, then runs the conversion.
# Answers can be piped in (one per line); an empty answer takes the default shown in brackets.
set -euo pipefail
python=${PYTHON:-python3}

ask() {  # ask VAR "question" default
  local answer
  read -r -p "$2 [$3]: " answer || true
  printf -v "$1" '%s' "${answer:-$3}"
}

ask raw "Where are the raw files (holding train/, val/, and optionally bbox/)" "${IMAGENET_HOME:-$HOME/imagenet}"
ask out "Where should the TFRecords go" "$raw/tfrecords"
ask preresize "Pre-resize the images (much less I/O, same accuracy)? y/n" "y"
resize=none
case "$preresize" in
  y|Y|yes) ask size "Cap the shorter side at how many pixels" "480"; resize="shorter:$size" ;;
  n|N|no) ;;
  *) echo "error: answer y or n, received: $preresize" >&2; exit 2 ;;
esac
ask quality "JPEG quality of re-encoded images (1-100)" "90"

args=(--output_dir "$out" --resize "$resize" --quality "$quality")
[ -d "$raw/train" ] && args+=(--train_dir "$raw/train")
[ -d "$raw/val" ] && args+=(--validation_dir "$raw/val")
[ -d "$raw/bbox" ] && args+=(--bbox_dir "$raw/bbox")
for pair in "validation_labels imagenet_2012_validation_synset_labels.txt" \
            "synsets_file imagenet_lsvrc_2015_synsets.txt" "metadata_file imagenet_metadata.txt"; do
  set -- $pair
  [ -f "$raw/$2" ] && args+=("--$1" "$raw/$2")
done
if [ ! -d "$raw/train" ] && [ ! -d "$raw/val" ]; then
  echo "error: $raw holds neither train/ nor val/" >&2
  exit 2
fi
echo "running: $python -m imagenet_prep.build_tfrecords ${args[*]}"
exec "$python" -m imagenet_prep.build_tfrecords "${args[@]}"
