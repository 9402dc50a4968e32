"""Measures what the training defaults for small images and short runs were chosen by (tfcnn.training.plan;
CHANGELOG.md, 2026-12-04): issue 47's shape of problem, through the public API, `tfcnn.train(model="resnet18",
train_data=..., val_data=..., num_classes=10, image_size=32, batch_size=32, num_iter=6)` on scikit-learn's
handwritten digits (tests/digits.py: 1,437 train / 360 validation), with candidate training views and warmups
on top of the defaults, and a plain Keras `fit` beside them. Prints validation top-1 per candidate and seed, as
a Markdown table. Not run by `make test` (about 16 runs of 45 s on 2 cores):

    python tests/scripts/measure_small_images.py [--seeds 1,2] [--only "NAME;NAME"]
"""
import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import digits  # noqa: E402

SHAPE = dict(model="resnet18", num_classes=10, image_size=32, batch_size=32, num_iter=6)
# name: (the smallest crop area of the "small" view, or None for its own; options on top of the defaults)
CANDIDATES = {
    "ImageNet's (the defaults before): 8-100% crops (torchvision), 5 warmup epochs":
        (None, dict(train_crop="torchvision", warmup_epochs=5)),
    "8-100% crops, warmup a tenth of the run (0.6)": (None, dict(train_crop="torchvision")),
    "35-100% crops, 5 warmup epochs": (0.35, dict(warmup_epochs=5)),
    "25-100% crops, warmup 0.6": (0.25, {}),
    "35-100% crops, warmup 0.6": (0.35, {}),
    "50-100% crops, warmup 0.6": (0.5, {}),
    "70-100% crops, warmup 0.6": (0.7, {}),
    "80-100% crops, warmup 0.6 (the defaults now)": (None, {}),
    "the whole image, flipped (100% crops), warmup 0.6": (1.0, {}),
    "augment=False (no crop, no flip), warmup 0.6": (None, dict(augment=False)),
}
KERAS = "Keras fit, no augmentation: SGD 0.032, momentum 0.875"


def tfcnn_top1(seed, area, options, data):
    import tfcnn
    from tfcnn.data import preprocessing

    small = preprocessing.TRAIN_VIEWS["small"]
    if area is not None:
        preprocessing.TRAIN_VIEWS["small"] = dataclasses.replace(small, area=(area, 1.0))
    try:
        (x, y), val = data
        result = tfcnn.train(train_data=(x, y), val_data=val, seed=seed, display_every=1000, **SHAPE, **options)
    finally:
        preprocessing.TRAIN_VIEWS["small"] = small
    return result.validation["top1"]


def keras_top1(seed, data):
    import tensorflow as tf

    from tfcnn.models import create_model

    (x, y), (x_val, y_val) = data
    tf.keras.utils.set_random_seed(seed)
    model = create_model("resnet18", num_classes=10, input_shape=(32, 32, 3), include_preprocessing=True)
    model.compile(tf.keras.optimizers.SGD(0.032, momentum=0.875),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=6, verbose=0)
    return model.evaluate(x_val, y_val, verbose=0)[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--only", help="candidate names separated by semicolons (default: all, and Keras' fit)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.only.split(";") if args.only else [*CANDIDATES, KERAS]
    data = digits.load(32)
    rows = []
    for name in names:
        start = time.time()
        scores = [keras_top1(seed, data) if name == KERAS else tfcnn_top1(seed, *CANDIDATES[name], data)
                  for seed in seeds]
        rows.append((name, scores))
        print(f"MEASURED {name}: {scores} ({(time.time() - start) / len(seeds):.0f} s a run)", flush=True)
    print(f"\n| candidate | validation top-1, seeds {args.seeds} | mean |\n|---|---|---|")
    for name, scores in rows:
        print(f"| {name} | {' / '.join(f'{s:.3f}' for s in scores)} | {statistics.mean(scores):.3f} |")


if __name__ == "__main__":
    main()
