"""Inference: tfcnn's exported SavedModel vs Keras' application of the same model (ResNet50 by default).

    python bench/inference.py [--model resnet50] [--image_size 224] [--large_batch 64] [--steps 20]

Latency p50 at batch 1 and throughput at --large_batch, each call timed alone (result fetched). The
baseline is called two ways: `model.predict` (the one-liner most code uses) and a direct
`model(x, training=False)` call (its floor). tfcnn's SavedModel includes its input normalization.
"""
import tempfile
import time

# common first: it quiets TensorFlow's C++ logs
from common import KERAS_APPLICATIONS, add_model_flag, keras_application, parser, refuse, report

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SCRIPT = "bench/inference.py"


def timed(fn, x, steps, warmup=3):
    for _ in range(warmup):
        np.asarray(fn(x))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        np.asarray(fn(x))
        times.append(time.perf_counter() - start)
    return np.array(times)


def exported_model(model_name, image_size, directory):
    from tfcnn.models import create_model
    from tfcnn.training.export import export_saved_model

    tf.keras.utils.set_random_seed(0)
    model = create_model(model_name, input_shape=(image_size, image_size, 3))
    export_saved_model(model, directory)
    serve = tf.saved_model.load(directory).signatures["serving_default"]
    return lambda x: serve(images=x)["logits"]


def main():
    p = parser(__doc__)
    add_model_flag(p)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--large_batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    size, keras_name = args.image_size, KERAS_APPLICATIONS[args.model]
    try:
        keras = keras_application(args.model, (size, size, 3), "softmax")  # as tfcnn's signature, probabilities too
    except Exception as error:
        refuse(SCRIPT, f"the Keras baseline could not be built: {error}")
    with tempfile.TemporaryDirectory() as tmp:
        tfcnn = exported_model(args.model, size, f"{tmp}/{args.model}")
        contenders = {f"tfcnn {args.model} SavedModel": tfcnn,
                      f"keras {keras_name} model.predict": lambda x: keras.predict(x, batch_size=len(x), verbose=0),
                      f"keras {keras_name} model(x) call": lambda x: keras(x, training=False)}
        rng = np.random.default_rng(0)
        small = tf.constant(rng.uniform(0, 255, (1, size, size, 3)), tf.float32)
        large = tf.constant(rng.uniform(0, 255, (args.large_batch, size, size, 3)), tf.float32)
        rows = []
        for name, fn in contenders.items():
            latency = timed(fn, small, args.steps)
            throughput = timed(fn, large, max(3, args.steps // 4))
            rows.append({"name": name, "batch1_p50_ms": 1000 * float(np.percentile(latency, 50)),
                         f"batch{args.large_batch}_img_per_sec": args.large_batch / float(np.mean(throughput))})
    key = f"batch{args.large_batch}_img_per_sec"
    ratios = {"keras predict p50 / tfcnn p50 (batch 1, >1 = tfcnn faster)": rows[1]["batch1_p50_ms"] / rows[0]["batch1_p50_ms"],
              "keras call p50 / tfcnn p50 (batch 1)": rows[2]["batch1_p50_ms"] / rows[0]["batch1_p50_ms"],
              f"tfcnn / keras predict ({key})": rows[0][key] / rows[1][key],
              f"tfcnn / keras call ({key})": rows[0][key] / rows[2][key]}
    report(SCRIPT, f"{args.model} inference, fp32, {size} px", rows, ratios, args.output)


if __name__ == "__main__":
    main()
