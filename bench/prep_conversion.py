"""imagenet_prep conversion speed with 1 worker process and with all of them.

    python bench/prep_conversion.py [--num_images 1200] [--workers N]

Draws --num_images full-size JPEGs (500-1000 px a side) once, then converts them twice with
pre-resizing on (shorter side capped at 480, JPEG quality 90): one worker, then --workers (default:
all cores). Reports images/s and the scaling. The timing includes starting the worker processes
(each imports TensorFlow, a few seconds), as a user's run does; on ImageNet's 1.3 M images that is
negligible, on a small folder it is not.
"""
import os
import tempfile
import time

from common import parser, refuse, report

SCRIPT = "bench/prep_conversion.py"


def convert(raw, out, workers):
    from imagenet_prep.build_tfrecords import build_tfrecords

    start = time.perf_counter()
    summary = build_tfrecords(out, raw, train_shards=16, resize="shorter:480", quality=90, num_workers=workers,
                              log=lambda *_: None)["train"]
    seconds = time.perf_counter() - start
    if summary["images_written"] == 0:
        refuse(SCRIPT, f"the {workers}-worker conversion wrote no images")
    return {"name": f"{workers} worker process(es)", "images_per_sec": summary["images_written"] / seconds,
            "size_reduction_pct": 100.0 * summary["size_reduction"]}


def main():
    p = parser(__doc__)
    p.add_argument("--num_images", type=int, default=1200)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    from imagenet_prep.demo_dataset import make_dataset

    with tempfile.TemporaryDirectory() as tmp:
        make_dataset(os.path.join(tmp, "raw"), num_classes=4, train_per_class=max(1, args.num_images // 4),
                     val_per_class=1, min_size=500, max_size=1000)
        raw = os.path.join(tmp, "raw", "train")
        rows = [convert(raw, os.path.join(tmp, "one"), 1), convert(raw, os.path.join(tmp, "all"), args.workers)]
    report(SCRIPT, f"imagenet_prep conversion, {args.num_images} images of 500-1000 px, shorter:480, quality 90",
           rows, {f"{args.workers} workers / 1 worker": rows[1]["images_per_sec"] / rows[0]["images_per_sec"]},
           args.output)


if __name__ == "__main__":
    main()
