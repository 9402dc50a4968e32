"""How far DALI's evaluation view is from tfcnn's (tf.data) and from torchvision's, on real photos.

    python bench/dali_views.py [--images a.jpg b.jpg ...] [--output FILE]

Each image goes into one validation record (its JPEG bytes as they are) and through three views of
"resize the shorter side to size / crop_fraction, centre crop": DALI's (`--data_backend dali_cpu`),
tfcnn's tf.data view (`--data_backend tf`) and torchvision's `Resize(resize) + CenterCrop(size)` on
PIL (what imported weights were scored with; its arithmetic written out, so no torch is needed). Each
image also goes through turned a quarter (a portrait, re-encoded at quality 95). Prints, per setting, the mean and largest absolute difference in levels (of 255) over all
pixels and channels, for each pair of views.

Default images: scikit-learn's china.jpg and flower.jpg and scikit-image's rocket.jpg (640x427), found
where those packages are installed; name others with --images.
"""
import io
import os
import tempfile

from common import parser, refuse  # first: it quiets TensorFlow's C++ logs

import json  # noqa: E402

import numpy as np  # noqa: E402

SCRIPT = "bench/dali_views.py"
SETTINGS = [(224, 256, "bilinear"), (224, 232, "bilinear"), (299, 342, "bilinear"), (224, 256, "bicubic")]


def default_images():
    """scikit-learn's and scikit-image's sample photos, where they are installed (their data files)."""
    found = []
    for module, names in (("sklearn.datasets", ("images/china.jpg", "images/flower.jpg")),
                          ("skimage", ("data/rocket.jpg",))):
        try:
            package = __import__(module, fromlist=["__file__"])
        except ImportError:
            continue
        found += [path for path in (os.path.join(os.path.dirname(package.__file__), n) for n in names)
                  if os.path.exists(path)]
    return found


def photo_records(paths):
    """[(name, JPEG bytes)]: each photo as it is, and turned a quarter (portrait), re-encoded."""
    from PIL import Image

    out = []
    for path in paths:
        data = open(path, "rb").read()
        out.append((os.path.basename(path), data))
        buffer = io.BytesIO()
        Image.open(io.BytesIO(data)).convert("RGB").transpose(Image.Transpose.ROTATE_90).save(buffer, "JPEG",
                                                                                              quality=95)
        out.append((os.path.basename(path) + " (portrait)", buffer.getvalue()))
    return out


def write_shard(directory, photos):
    """One validation shard of the photos, with its DALI index."""
    import tensorflow as tf

    from tfcnn.data import dali_index, records

    path = os.path.join(directory, records.shard_name("validation", 0, 1))
    with tf.io.TFRecordWriter(path) as writer:
        for name, data in photos:
            height, width = tf.io.extract_jpeg_shape(data).numpy()[:2]
            writer.write(records.make_example(encoded=data, height=int(height), width=int(width), label=1, synset="x",
                                              text="x", filename=name).SerializeToString(deterministic=True))
    dali_index.write_index(path)


def views(backend, directory, size, resize, interpolation):
    from tfcnn.data import backends

    dataset = backends.build_dataset(backend, directory, "validation", 1, size, num_classes=1,
                                     crop_fraction=size / resize, interpolation=interpolation)
    return [images[0].numpy().astype(int) for images, _ in dataset]


def torchvision_views(photos, size, resize, interpolation):
    """torchvision's Resize(resize) + CenterCrop(size) of PIL images, its arithmetic written out on PIL (no
    torch needed): the shorter side to `resize`, the longer truncated to int(resize * long / short), one
    PIL resize, crop offsets int(round((side - size) / 2))."""
    from PIL import Image

    views = []
    for _, data in photos:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        width, height = image.size
        short, long = min(width, height), max(width, height)
        new_short, new_long = resize, int(resize * long / short)
        new_width, new_height = (new_short, new_long) if width <= height else (new_long, new_short)
        image = image.resize((new_width, new_height), {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[interpolation])
        top, left = int(round((new_height - size) / 2.0)), int(round((new_width - size) / 2.0))
        views.append(np.asarray(image.crop((left, top, left + size, top + size))).astype(int))
    return views


def differences(a, b):
    diffs = np.concatenate([np.abs(x - y).ravel() for x, y in zip(a, b)])
    return float(diffs.mean()), int(diffs.max())


def main():
    p = parser(__doc__)
    p.add_argument("--images", nargs="+", help="JPEG photos (default: scikit-learn's and scikit-image's samples)")
    args = p.parse_args()
    paths = args.images or default_images()
    if not paths:
        refuse(SCRIPT, "no photos: pass --images, or install scikit-learn / scikit-image for their samples")
    from tfcnn.data import dali

    if dali.missing_reason():
        refuse(SCRIPT, dali.missing_reason())
    photos = photo_records(paths)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        write_shard(directory, photos)
        for size, resize, interpolation in SETTINGS:
            found = {"dali": views("dali_cpu", directory, size, resize, interpolation),
                     "tfcnn": views("tf", directory, size, resize, interpolation),
                     "torchvision": torchvision_views(photos, size, resize, interpolation)}
            row = {"name": f"{resize} -> {size} {interpolation}"}
            for a, b in (("dali", "tfcnn"), ("dali", "torchvision"), ("tfcnn", "torchvision")):
                row[f"{a}-{b} mean"], row[f"{a}-{b} max"] = differences(found[a], found[b])
            rows.append(row)
    from tfcnn.benchmark import environment

    print(f"\nEvaluation views: |difference| in levels (of 255) over {len(photos)} images:")
    print("  " + ", ".join(name for name, _ in photos))
    pairs = [key[:-5] for key in rows[0] if key.endswith(" mean")]
    print(f"{'setting':<26}" + "".join(f"{pair + ' mean / max':>30}" for pair in pairs))
    for row in rows:
        print(f"{row['name']:<26}" + "".join(f"{row[pair + ' mean']:>23.4f} / {row[pair + ' max']:<4}" for pair in pairs))
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"benchmark": SCRIPT, "environment": environment(), "images": [n for n, _ in photos],
                       "results": rows}, f, indent=1)

if __name__ == "__main__":
    main()
