"""Input pipeline: tfcnn's training pipeline vs a decode-only baseline and the classic pipeline.

    python bench/input_pipeline.py [--data_dir SHARDS] [--num_images 800] [--images 2000] [--batch_size 64]

Without --data_dir it draws --num_images images of typical ImageNet size (375-500 px a side, about
100 KB each) and converts them with imagenet_prep (shorter side capped at 480, JPEG quality 90) into a
temporary directory. The pipelines then read the same train shards in one process
(tfcnn.data.bench): tfcnn (fused decode-and-crop), decode_only (full decode_jpeg, no augmentation)
and classic (full decode, then sample_distorted_bounding_box crop, resize), plus tfcnn's image work in
stages (crop_decode_only, train_image_only) that shows where the time goes, and tfcnn's pipeline with
RandAugment 2,9 and AutoAugment on (tfcnn+POLICY). Reports img/s per core.
"""
import os
import tempfile

from common import parser, refuse, report

SCRIPT = "bench/input_pipeline.py"


def make_shards(directory, num_images):
    from imagenet_prep.build_tfrecords import build_tfrecords
    from imagenet_prep.demo_dataset import make_dataset

    per_class = max(1, num_images // 4)
    make_dataset(os.path.join(directory, "raw"), num_classes=4, train_per_class=per_class, val_per_class=1,
                 min_size=375, max_size=500)
    build_tfrecords(os.path.join(directory, "tf"), os.path.join(directory, "raw", "train"), train_shards=16,
                    resize="shorter:480", quality=90, log=lambda *_: None)
    return os.path.join(directory, "tf")


def main():
    p = parser(__doc__)
    p.add_argument("--data_dir", help="existing train shards (default: generate them)")
    p.add_argument("--num_images", type=int, default=800, help="images to generate when --data_dir is absent")
    p.add_argument("--images", type=int, default=2000, help="images timed per pipeline")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=3, help="timings per pipeline, rotating; their mean counts")
    args = p.parse_args()
    from tfcnn.data import bench, pipeline

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or make_shards(tmp, args.num_images)
        try:
            pipeline.list_shards(data_dir, "train")
        except pipeline.DataError as error:
            refuse(SCRIPT, str(error))
        result = bench.run(data_dir, args.batch_size, args.image_size, args.images, repeats=args.repeats)
    rows = [{"name": name, "img_per_sec": rate, "img_per_sec_per_core": result["images_per_sec_per_core"][name]}
            for name, rate in result["images_per_sec"].items()]
    ratios = {f"tfcnn / {name}": value for name, value in result["ratio_tfcnn_vs"].items()}
    report(SCRIPT, f"Training input pipeline, batch {args.batch_size}, {args.image_size} px, {result['cores']} cores",
           rows, ratios, args.output)


if __name__ == "__main__":
    main()
