"""Classify image files with a SavedModel exported by training (--export_dir) or by python -m tfcnn.export:

    python examples/classify.py --saved_model runs/rn50/saved_model image1.jpg [image2.png ... photos/]

A folder stands for its image files (by name: .jpg, .png, ...; hidden files left out). Prints the top 5 classes
of each image, with names from the labels.txt saved beside the model. A file that is no image, or a damaged one,
is named on stderr, the others are still classified, and the exit status is 1.
"""
import argparse
import os
import sys

import tensorflow as tf

# The formats the signature's decoder (tf.io.decode_image) reads, by their first bytes: a file that is none of them
# is named before TensorFlow's decoder fails on it (which also logs a C++ warning)
IMAGE_STARTS = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM")
# The same formats by file name, for a folder's files (tfcnn's own list has TIFF too, which this decoder cannot read)
IMAGE_NAMES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


def is_image(data: bytes) -> bool:
    return data.startswith(IMAGE_STARTS) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def image_files(parser, path: str) -> list[str]:
    """[path], or a folder's image files by name, sorted."""
    if not os.path.isdir(path):
        return [path]
    files = [os.path.join(path, name) for name in sorted(os.listdir(path))
             if name.lower().endswith(IMAGE_NAMES) and not name.startswith(".")]
    files = [file for file in files if os.path.isfile(file)]
    if not files:
        parser.error(f"{path} is a folder without image files (of {', '.join(IMAGE_NAMES)})")
    return files


def probabilities(classify, encoded: bytes):
    """The class probabilities of one encoded image, or None and why it has none."""
    if not is_image(encoded):
        return None, "not a JPEG, PNG, GIF, BMP or WebP file"
    try:
        return classify(encoded=tf.constant([encoded]))["probabilities"][0].numpy(), None
    except tf.errors.InvalidArgumentError:
        return None, "a damaged image: TensorFlow's decoder failed on it"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--saved_model", required=True)
    parser.add_argument("images", nargs="+")
    args = parser.parse_args(argv)
    args.images = [file for path in args.images for file in image_files(parser, path)]
    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    if not tf.saved_model.contains_saved_model(args.saved_model):
        parser.error(f"--saved_model {args.saved_model}: no SavedModel there (training's --export_dir or "
                     f"python -m tfcnn.export writes one)")
    classify = tf.saved_model.load(args.saved_model).signatures["classify_encoded"]
    labels_path = os.path.join(args.saved_model, "labels.txt")
    names = [line.split("\t")[-1].strip() for line in open(labels_path)] if os.path.exists(labels_path) else None
    failed = 0
    for path in args.images:  # one at a time: a file that is no image fails only its own call
        with open(path, "rb") as f:
            encoded = f.read()
        probs, problem = probabilities(classify, encoded)
        if problem:
            print(f"{path}: {problem}", file=sys.stderr)
            failed += 1
            continue
        top = probs.argsort()[::-1][:5]
        print(path + ": " + ", ".join(f"{names[i] if names else i} {100 * probs[i]:.1f}%" for i in top))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
