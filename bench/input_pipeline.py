"""Input pipeline: tfcnn's training pipeline vs a decode-only baseline and the classic pipeline.

    python bench/input_pipeline.py [--data_dir SHARDS] [--num_images 800] [--prep_workers N] [--images 2000]
        [--batch_size 64] [--data_backend dali_cpu [--dali_threads N]]

Without --data_dir it draws --num_images images of typical ImageNet size (375-500 px a side, about
100 KB each) and converts them with imagenet_prep (shorter side capped at 480, JPEG quality 90) into a
temporary directory. The pipelines then read the same train shards in one process
(tfcnn.data.bench): tfcnn (fused decode-and-crop), decode_only (full decode_jpeg, no augmentation)
and classic (full decode, then sample_distorted_bounding_box crop, resize), plus tfcnn's image work in
stages (crop_decode_only, train_image_only) that shows where the time goes, and tfcnn's pipeline with
RandAugment 2,9 and AutoAugment on (tfcnn+POLICY). Reports img/s per core.

--data_backend dali_cpu (or dali_gpu) times NVIDIA DALI's training pipeline and its stages instead of the
policies, beside the same tf.data rows (tfcnn.data.bench), and reports dali / tfcnn and dali / decode_only.
The generated shards come with their DALI indexes (imagenet_prep writes them); --data_dir shards need
theirs (`python -m tfcnn.data.dali_index DIR`).
"""
import os
import tempfile

from common import parser, refuse, report

SCRIPT = "bench/input_pipeline.py"


def make_shards(directory, num_images, workers):
    from imagenet_prep.build_tfrecords import build_tfrecords
    from imagenet_prep.demo_dataset import make_dataset

    per_class = max(1, num_images // 4)
    make_dataset(os.path.join(directory, "raw"), num_classes=4, train_per_class=per_class, val_per_class=1,
                 min_size=375, max_size=500)
    build_tfrecords(os.path.join(directory, "tf"), os.path.join(directory, "raw", "train"), train_shards=16,
                    resize="shorter:480", quality=90, num_workers=workers, log=lambda *_: None)
    return os.path.join(directory, "tf")


def main():
    p = parser(__doc__)
    p.add_argument("--data_dir", help="existing train shards (default: generate them)")
    p.add_argument("--num_images", type=int, default=800, help="images to generate when --data_dir is absent")
    p.add_argument("--prep_workers", type=int, help="processes converting them (default: all cores)")
    p.add_argument("--images", type=int, default=2000, help="images timed per pipeline")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=3, help="timings per pipeline, rotating; their mean counts")
    p.add_argument("--data_backend", default="tf", choices=("tf", "dali_cpu", "dali_gpu"),
                   help="dali_cpu / dali_gpu: time NVIDIA DALI's pipeline too (make install DALI=1)")
    p.add_argument("--dali_threads", type=int, help="DALI's worker threads (default: all cores)")
    args = p.parse_args()
    from tfcnn.data import bench, pipeline

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or make_shards(tmp, args.num_images, args.prep_workers)
        dali = args.data_backend != "tf"
        try:
            pipeline.list_shards(data_dir, "train")
            if dali:
                from tfcnn.data import dali as dali_module

                dali_module.rank_records(data_dir, "train", 1, 0)  # the shards' indexes
                if dali_module.missing_reason():
                    raise RuntimeError(dali_module.missing_reason())
        except (ValueError, RuntimeError) as error:
            refuse(SCRIPT, str(error))
        result = bench.run(data_dir, args.batch_size, args.image_size, args.images, repeats=args.repeats,
                           policies=() if dali else bench.POLICIES, backend=args.data_backend,
                           dali_threads=args.dali_threads)
    rows = [{"name": name, "img_per_sec": rate, "img_per_sec_per_core": result["images_per_sec_per_core"][name]}
            for name, rate in result["images_per_sec"].items()]
    ratios = {f"tfcnn / {name}": value for name, value in result["ratio_tfcnn_vs"].items()}
    ratios.update({f"{args.data_backend} / {name}": value
                   for name, value in result.get(f"ratio_{args.data_backend}_vs", {}).items()})
    threads = f", DALI {result['dali_threads']} threads" if dali else ""
    report(SCRIPT, f"Training input pipeline, batch {args.batch_size}, {args.image_size} px, {result['cores']} cores"
                   f"{threads}", rows, ratios, args.output, **({"dali_threads": result["dali_threads"]} if dali else {}))


if __name__ == "__main__":
    main()
