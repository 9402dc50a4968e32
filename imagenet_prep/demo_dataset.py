"""A small, learnable image-classification dataset drawn procedurally, laid out like raw ImageNet.

    python -m imagenet_prep.demo_dataset --output_dir /tmp/shapes --train_per_class 200 --val_per_class 50

Writes `train/<class>/<class>_<n>.JPEG`, `val/<class>/...` and `bbox/<class>/<stem>.xml` (ImageNet-style
annotations of where the shape was drawn). Each class is a shape (circle, square, triangle, ...) of
random size, position and colour on a noisy background, so a small CNN can learn it in minutes on a
CPU while the pipeline still sees varied image sizes and real bounding boxes.
"""
from __future__ import annotations

import os
import random

import numpy as np
from PIL import Image, ImageDraw

from tfcnn.options import command_parser

CLASSES = ("circle", "square", "triangle", "cross", "hstripes", "vstripes", "ring", "diamond")
_BBOX_XML = """<annotation><filename>{stem}</filename><size><width>{w}</width><height>{h}</height><depth>3</depth></size>
<object><name>{synset}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>
</annotation>
"""


def draw_shape(shape: str, width: int, height: int, rng: random.Random) -> tuple[Image.Image, tuple]:
    """An RGB image of `shape` and its (xmin, ymin, xmax, ymax) box in pixels."""
    noise = np.random.default_rng(rng.randrange(2**32)).integers(0, 60, (height, width, 3), dtype=np.uint8)
    base = np.array([rng.randrange(40, 140) for _ in range(3)], dtype=np.uint8)
    image = Image.fromarray(noise + base)
    draw = ImageDraw.Draw(image)
    side = rng.randint(min(width, height) // 3, int(min(width, height) * 0.8))
    x0, y0 = rng.randint(0, width - side), rng.randint(0, height - side)
    x1, y1 = x0 + side, y0 + side
    color = tuple(rng.randrange(160, 256) for _ in range(3))
    line = max(2, side // 8)
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=color)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=color)
    elif shape == "triangle":
        draw.polygon([(x0, y1), (x1, y1), ((x0 + x1) // 2, y0)], fill=color)
    elif shape == "cross":
        draw.rectangle((x0, (y0 + y1) // 2 - line, x1, (y0 + y1) // 2 + line), fill=color)
        draw.rectangle(((x0 + x1) // 2 - line, y0, (x0 + x1) // 2 + line, y1), fill=color)
    elif shape == "hstripes":
        for y in range(y0, y1, 2 * line):
            draw.rectangle((x0, y, x1, min(y + line, y1)), fill=color)
    elif shape == "vstripes":
        for x in range(x0, x1, 2 * line):
            draw.rectangle((x, y0, min(x + line, x1), y1), fill=color)
    elif shape == "ring":
        draw.ellipse((x0, y0, x1, y1), outline=color, width=line)
    elif shape == "diamond":
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)
    else:
        raise ValueError(f"unknown shape {shape!r}; valid shapes: {', '.join(CLASSES)}")
    return image, (x0, y0, x1, y1)


def make_dataset(output_dir: str, num_classes: int = 4, train_per_class: int = 100, val_per_class: int = 25,
                 min_size: int = 64, max_size: int = 160, quality: int = 95, seed: int = 0,
                 classes: tuple[str, ...] | None = None) -> dict[str, str]:
    """Writes the tree; returns {'train': dir, 'val': dir, 'bbox': dir}. classes: shape names to draw
    (default: the first num_classes of CLASSES)."""
    if not 2 <= num_classes <= len(CLASSES):
        raise ValueError(f"num_classes must be between 2 and {len(CLASSES)}, received: {num_classes}")
    classes = tuple(classes or CLASSES[:num_classes])
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise ValueError(f"unknown shape(s) {unknown}; valid shapes: {', '.join(CLASSES)}")
    if min_size < 16 or max_size < min_size:
        raise ValueError(f"need 16 <= min_size <= max_size, received: {min_size}, {max_size}")
    rng = random.Random(seed)
    dirs = {split: os.path.join(output_dir, split) for split in ("train", "val", "bbox")}
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for shape in classes:
            for folder in (os.path.join(dirs[split], shape), os.path.join(dirs["bbox"], shape)):
                os.makedirs(folder, exist_ok=True)
            for n in range(count):
                width, height = rng.randint(min_size, max_size), rng.randint(min_size, max_size)
                image, (x0, y0, x1, y1) = draw_shape(shape, width, height, rng)
                stem = f"{shape}_{split}_{n:05d}"
                image.save(os.path.join(dirs[split], shape, f"{stem}.JPEG"), "JPEG", quality=quality)
                with open(os.path.join(dirs["bbox"], shape, f"{stem}.xml"), "w") as f:
                    f.write(_BBOX_XML.format(stem=stem, w=width, h=height, synset=shape, x0=x0, y0=y0, x1=x1, y1=y1))
    return dirs


def main(argv=None):
    parser = command_parser("python -m imagenet_prep.demo_dataset", __doc__)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_classes", type=int, default=4)
    parser.add_argument("--train_per_class", type=int, default=100)
    parser.add_argument("--val_per_class", type=int, default=25)
    parser.add_argument("--min_size", type=int, default=64)
    parser.add_argument("--max_size", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        dirs = make_dataset(args.output_dir, args.num_classes, args.train_per_class, args.val_per_class,
                            args.min_size, args.max_size, seed=args.seed)
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {args.num_classes} classes x ({args.train_per_class} train + {args.val_per_class} val) "
          f"images under {args.output_dir} ({', '.join(f'{k}/' for k in dirs)})")


if __name__ == "__main__":
    main()
