"""ONNX Runtime fp32 and int8 against tfcnn's SavedModel on this CPU, and int8's accuracy on real images.

    python bench/onnx_inference.py [--model resnet50] [--image_size 224] [--batch_sizes 1,32,64] [--rounds 5]
        [--digits_dir DIR [--calibration_images 300] [--epochs 10]]

Speed: one model (seeded random weights: the time does not depend on their values) exported once as the
SavedModel (`serving_default`) and as model.onnx, and quantized to int8 for both targets (QDQ for TensorRT,
and for ONNX Runtime on CPUs; calibrated on random images: the ranges do not change the time either). Per
round, every contender runs every batch size in turn (rounds alternate, so a neighbour's load on a shared
machine falls on all of them alike); batch 1: the p50 of the per-call latencies, larger batches: images/s
over all their calls. Both engines use their default threads (all cores).

--digits_dir: top-1 on scikit-learn's bundled handwritten digits (1,797 8x8 scans of real handwriting,
every fifth one held out: 359 validation images), built into TFRecords by imagenet_prep (upscaled to
32 px), a ResNet-18 trained on them by tfcnn's trainer (--epochs, at 32 px), exported with int8 (both
targets) calibrated on --calibration_images of its train shards; then TensorFlow fp32 (tfcnn.evaluate),
ONNX Runtime fp32 and int8 on the same validation shards. Each step is skipped when DIR already holds its
output.
"""
import os
import tempfile
import time

from common import parser, refuse, report  # first: it quiets TensorFlow's C++ logs

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SCRIPT = "bench/onnx_inference.py"
DIGITS_SIZE = 32


def contenders(model_name, image_size, directory):
    """{name: batch -> logits} for the SavedModel, ONNX Runtime fp32 and int8 of one random-weight model."""
    from tfcnn import onnx_export
    from tfcnn.models import create_model
    from tfcnn.training.export import export_saved_model

    tf.keras.utils.set_random_seed(0)
    model = create_model(model_name, input_shape=(image_size, image_size, 3))
    saved = tf.saved_model.load(export_saved_model(model, os.path.join(directory, "saved_model")))
    serve = saved.signatures["serving_default"]
    onnx_dir = onnx_export.export_onnx(model, os.path.join(directory, "onnx"), log=lambda *_: None)
    fp32, int8 = os.path.join(onnx_dir, onnx_export.FP32_FILE), os.path.join(onnx_dir, onnx_export.INT8_FILE)
    rng = np.random.default_rng(1)
    calibration = [rng.uniform(0, 255, (8, image_size, image_size, 3)).astype(np.float32) for _ in range(2)]
    functions = {"tfcnn SavedModel (TensorFlow fp32)": lambda x: serve(images=tf.constant(x))["logits"].numpy(),
                 "ONNX Runtime fp32": onnx_export.predictor(fp32)}
    for target in onnx_export.INT8_TARGETS:
        onnx_export.quantize_int8(fp32, f"{int8}.{target}", calibration, target)
        functions[f"ONNX Runtime int8, {target} QDQ"] = onnx_export.predictor(f"{int8}.{target}")
    return functions


def alternating_times(functions, batches, rounds, calls):
    """{(name, batch): [seconds per call]}: each round runs every function on every batch, `calls` timed
    calls each after one untimed one."""
    times = {(name, len(x)): [] for name in functions for x in batches}
    for _ in range(rounds):
        for name, fn in functions.items():
            for x in batches:
                fn(x)
                for _ in range(calls):
                    start = time.perf_counter()
                    fn(x)
                    times[(name, len(x))].append(time.perf_counter() - start)
    return times


def speed_rows(functions, batch_sizes, image_size, rounds, calls):
    rng = np.random.default_rng(0)
    batches = [rng.uniform(0, 255, (b, image_size, image_size, 3)).astype(np.float32) for b in batch_sizes]
    times = alternating_times(functions, batches, rounds, calls)
    rows = []
    for name in functions:
        row = {"name": name}
        for b in batch_sizes:
            seconds = np.array(times[(name, b)])
            if b == 1:
                row["batch1_p50_ms"] = 1000 * float(np.percentile(seconds, 50))
            else:
                row[f"batch{b}_img_per_sec"] = b / float(np.mean(seconds))
        rows.append(row)
    return rows


def speed_ratios(rows):
    """Every ONNX Runtime row against the SavedModel, and every int8 row against ONNX Runtime fp32 (>1: faster)."""
    base, fp32 = rows[:2]
    ratios = {}
    for row in rows[1:]:
        pairs = [(base, "SavedModel")] + ([(fp32, "ORT fp32")] if row is not fp32 else [])
        for other, label in pairs:
            for key in (k for k in row if k != "name"):
                faster = other[key] / row[key] if key.endswith("_ms") else row[key] / other[key]
                ratios[f"{row['name']} vs {label} ({key}, >1 = faster)"] = faster
    return ratios


def digits_records(directory):
    """DIR/tfrecords: scikit-learn's digits as 8x8 grayscale PNGs in class folders (every fifth image held
    out for validation), converted by imagenet_prep to 32 px RGB JPEG shards."""
    from imagenet_prep.build_tfrecords import build_tfrecords
    from PIL import Image
    from sklearn.datasets import load_digits

    records_dir = os.path.join(directory, "tfrecords")
    if os.path.exists(os.path.join(records_dir, "dataset.json")):
        return records_dir
    digits = load_digits()
    for index, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        split = "val" if index % 5 == 4 else "train"
        folder = os.path.join(directory, "raw", split, f"digit{label}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray((pixels * (255 / 16)).round().astype(np.uint8), "L").save(f"{folder}/{index:04d}.png")
    build_tfrecords(records_dir, os.path.join(directory, "raw", "train"), os.path.join(directory, "raw", "val"),
                    train_shards=8, validation_shards=2, resize=f"shorter:{DIGITS_SIZE}", upscale=True,
                    num_workers=2, log=lambda *_: None)
    return records_dir


def digits_run(directory, records_dir, epochs):
    """DIR/run: a ResNet-18 trained by tfcnn's trainer on the digits at 32 px (resumed, or skipped when done)."""
    from tfcnn.training import make_config, train

    log_dir = os.path.join(directory, "run")
    train(make_config(model="resnet18", data_dir=records_dir, image_size=DIGITS_SIZE, batch_size=64,
                      num_iter=epochs, iter_unit="epoch", lr=0.4, warmup_epochs=1, weight_decay=5e-5,
                      label_smoothing=0.1, seed=0, log_dir=log_dir, display_every=10**6,
                      benchmark_warmup_steps=0))
    return log_dir


def digits_accuracy(directory, calibration_images, epochs):
    """Rows of top-1 on the digits' validation shards: TensorFlow fp32, ONNX Runtime fp32 and int8."""
    from tfcnn import onnx_export
    from tfcnn.data import pipeline
    from tfcnn.evaluate import evaluate
    from tfcnn.metrics import accuracy, count_correct
    from tfcnn.models import create_model

    records_dir = digits_records(directory)
    log_dir = digits_run(directory, records_dir, epochs)
    model = create_model("resnet18", weights=log_dir, log=lambda *_: None)
    files = {}
    for target in onnx_export.INT8_TARGETS:
        export = onnx_export.export_onnx(model, os.path.join(directory, f"export_{target}"), data_dir=records_dir,
                                         calibration_images=calibration_images, int8_target=target,
                                         log=lambda *_: None)
        files["ONNX Runtime fp32"] = os.path.join(export, onnx_export.FP32_FILE)
        files[f"ONNX Runtime int8, {target} QDQ"] = os.path.join(export, onnx_export.INT8_FILE)
    tf_result = evaluate(log_dir, data_dir=records_dir, progress=False)
    rows = [{"name": "TensorFlow fp32 (tfcnn.evaluate)", "images": tf_result.count, "top1_pct": 100 * tf_result.top1}]
    data = model.data_config
    for label, path in files.items():
        predict = onnx_export.predictor(path)
        dataset = pipeline.build_dataset(records_dir, "validation", 64, data.input_size, num_classes=10,
                                         crop_fraction=data.crop_fraction, interpolation=data.interpolation)
        counts = accuracy(count_correct(lambda x: tf.numpy_function(predict, [x], tf.float32), dataset))
        rows.append({"name": label, "images": counts["count"], "top1_pct": 100 * counts["top1"]})
    return rows


def main():
    p = parser(__doc__)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_sizes", default="1,32,64", help="comma-separated; 1 gives the p50 latency row")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=4, help="timed calls per batch size and round")
    p.add_argument("--digits_dir", help="also measure top-1 on scikit-learn's digits, built and trained here")
    p.add_argument("--calibration_images", type=int, default=300)
    p.add_argument("--epochs", type=int, default=10, help="digits training epochs")
    args = p.parse_args()
    try:
        from tfcnn import onnx_export

        onnx_export.require()
    except ImportError as error:
        refuse(SCRIPT, str(error))
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if 1 not in batch_sizes:
        refuse(SCRIPT, f"--batch_sizes must include 1 (the latency row), received: {args.batch_sizes}")
    extra = {}
    if args.digits_dir:
        try:
            import sklearn  # noqa: F401
        except ImportError:
            refuse(SCRIPT, "--digits_dir needs scikit-learn (its bundled digits): pip install scikit-learn")
        accuracy_rows = digits_accuracy(args.digits_dir, args.calibration_images, args.epochs)
        top1 = {row["name"]: row["top1_pct"] for row in accuracy_rows}
        names = [row["name"] for row in accuracy_rows]
        extra = {"digits_accuracy": accuracy_rows}
        report(SCRIPT, f"Top-1 on scikit-learn's digits ({accuracy_rows[0]['images']} validation images), ResNet-18 "
               f"at 32 px", accuracy_rows, {f"{name} top-1 / TensorFlow fp32 top-1": top1[name] / top1[names[0]]
                                           for name in names[1:]}, None)
    with tempfile.TemporaryDirectory() as tmp:
        functions = contenders(args.model, args.image_size, tmp)
        rows = speed_rows(functions, sorted(batch_sizes), args.image_size, args.rounds, args.calls)
    report(SCRIPT, f"{args.model} inference, {args.image_size} px: ONNX Runtime vs SavedModel", rows,
           speed_ratios(rows), args.output, **extra)


if __name__ == "__main__":
    main()
