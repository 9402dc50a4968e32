"""Classify image files with a SavedModel exported by training (--export_dir):

    python examples/classify.py --saved_model runs/rn50/saved_model image1.jpg [image2.png ...]

Prints the top 5 classes of each image, with names from the labels.txt saved beside the model.
"""
import argparse
import os

import tensorflow as tf


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved_model", required=True)
    parser.add_argument("images", nargs="+")
    args = parser.parse_args()
    classify = tf.saved_model.load(args.saved_model).signatures["classify_encoded"]
    labels_path = os.path.join(args.saved_model, "labels.txt")
    names = [line.split("\t")[-1].strip() for line in open(labels_path)] if os.path.exists(labels_path) else None
    encoded = tf.constant([open(path, "rb").read() for path in args.images])
    probabilities = classify(encoded=encoded)["probabilities"].numpy()
    for path, probs in zip(args.images, probabilities):
        top = probs.argsort()[::-1][:5]
        print(path + ": " + ", ".join(f"{names[i] if names else i} {100 * probs[i]:.1f}%" for i in top))


if __name__ == "__main__":
    main()
