"""Shared by the bench/ scripts: flags, the environment record, the result table and JSON, refusals."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import tfcnn  # noqa: F401  (quiets TensorFlow's C++ INFO lines before TensorFlow loads)


# tfcnn's models that Keras has an application of, the same architecture: the baselines of train_step.py,
# memory.py and inference.py (--model). Keras' ResNets are v1, with the stride on the first 1x1 convolution;
# tfcnn's are v1.5, with it on the 3x3 (4.09 against 3.86 GMACs at ResNet-50).
KERAS_APPLICATIONS = {
    "resnet50": "ResNet50", "resnet101": "ResNet101", "resnet152": "ResNet152", "inception_v3": "InceptionV3",
    "inception_resnet_v2": "InceptionResNetV2", "xception": "Xception", "mobilenet_v2": "MobileNetV2",
    "densenet121": "DenseNet121", "vgg16": "VGG16", "vgg19": "VGG19", "efficientnet_b0": "EfficientNetB0",
    "efficientnet_b1": "EfficientNetB1", "efficientnet_b2": "EfficientNetB2", "efficientnet_b3": "EfficientNetB3",
    "efficientnet_b4": "EfficientNetB4"}


def keras_application(model: str, input_shape: tuple, classifier_activation=None):
    """Keras' own build of tfcnn's `model`, randomly initialized, 1000 outputs (logits by default)."""
    import tensorflow as tf

    build = getattr(tf.keras.applications, KERAS_APPLICATIONS[model])
    return build(weights=None, input_shape=input_shape, classifier_activation=classifier_activation)


def add_model_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="resnet50", choices=sorted(KERAS_APPLICATIONS), metavar="MODEL",
                   help="tfcnn's model, against Keras' application of it: " + ", ".join(sorted(KERAS_APPLICATIONS)))


def model_step_rate(model_name: str, image_size: int, batch_size: int, mode: str, steps: int,
                    policy: str = "float32") -> float:
    """img/s of a bare step of a tfcnn model on one random batch (step_rate), in `policy`."""
    import tensorflow as tf

    from tfcnn.models import create_model

    tf.keras.mixed_precision.set_global_policy(policy)
    tf.keras.utils.set_random_seed(0)
    model = create_model(model_name, input_shape=(image_size, image_size, 3))
    rate = step_rate(model, batch_size, mode, steps)[1]
    tf.keras.backend.clear_session()
    return rate


def step_rate(model, batch_size: int, mode: str, steps: int) -> tuple[float, float]:
    """(seconds of the first step: tracing, compiling, selecting kernels, running; img/s of the `steps` after
    it) of a bare step of `model` on one random batch: "train" (forward, gradients, SGD with momentum) or
    "infer" (forward only)."""
    import tensorflow as tf

    x = tf.random.uniform((batch_size, *model.input_shape[1:]), -1, 1)
    y = tf.random.uniform((batch_size,), 0, model.output_shape[-1], tf.int32)
    optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)

    @tf.function
    def train():
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def infer():
        return tf.reduce_sum(model(x, training=False))

    step = {"train": train, "infer": infer}[mode]
    start = time.perf_counter()
    float(step())
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        value = step()
    float(value)
    return first, steps * batch_size / (time.perf_counter() - start)


def parser(doc: str) -> argparse.ArgumentParser:
    """A bench script's flags, parsed as tfcnn's commands parse theirs (whole names, a mistyped one named)."""
    from tfcnn.options import command_parser

    p = command_parser(None, doc)  # prog: the script's file name
    p.add_argument("--output", help="write the figures as JSON here")
    return p


def refuse(script: str, message: str) -> None:
    """A baseline (or tfcnn's side) that could not run: say so, and print no ratio."""
    sys.exit(f"{script}: error: {message}; no ratio reported")


def report(script: str, title: str, rows: list[dict], ratios: dict, output: str | None, **extra) -> dict:
    """Prints rows as a table and the ratios; writes everything as JSON to `output`."""
    from tfcnn.benchmark import environment

    bad = [(r["name"], k) for r in rows for k, v in r.items() if isinstance(v, float) and not v > 0]
    if bad:
        refuse(script, f"non-positive measurement {bad[0][1]} for {bad[0][0]}")
    env = environment()
    keys = [k for k in rows[0] if k != "name"]
    widths = [max(12, len(k) + 2) for k in keys]
    print(f"\n{title}  [{env['device']}, TensorFlow {env['tensorflow']}]")
    print(f"{'':<38}" + "".join(f"{k:>{w}}" for k, w in zip(keys, widths)))
    for row in rows:
        print(f"{row['name']:<38}" + "".join(f"{_fmt(row[k]):>{w}}" for k, w in zip(keys, widths)))
    for name, value in ratios.items():
        print(f"  ratio {name}: {value:.2f}x")
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    result = {"benchmark": script, "title": title, "command": command, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "environment": env, "results": rows, "ratios": ratios, **extra}
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _fmt(value):
    return f"{value:,.1f}" if isinstance(value, float) else "" if value is None else str(value)
