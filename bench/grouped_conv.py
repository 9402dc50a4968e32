"""Grouped convolutions (ResNeXt's 3x3s): tfcnn's GroupedConv2D against Keras' own Conv2D, training a step.

    python bench/grouped_conv.py [--model resnext50_32x4d] [--image_size 224] [--batch_size 8] [--steps 2]
                                 [--repeats 1] [--output FILE]

Keras compiles every convolution with groups > 1 with XLA, on every device (tf_keras base_conv: Eigen's CPU
kernels have no grouped gradient). tfcnn's GroupedConv2D runs TensorFlow's own grouped kernels where they
train (tfcnn.models.layers.trains_grouped_natively: oneDNN's CPU kernels in float32 and bfloat16) and is
Keras' layer elsewhere. Contenders, in this process, alternating --repeats times, fp32, a bare step (forward,
gradients, SGD with momentum) on one random batch:
- keras: the model rebuilt from its config with Keras' Conv2D for every GroupedConv2D, the same weights;
- tfcnn: the model as create_model builds it.
Each row gives the first step (tracing, compiling, running) in seconds and the img/s of --steps steps after
it. On Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0) both take Keras' path: the ratios are then about 1.
"""
# common first: it quiets TensorFlow's C++ logs
from common import parser, report, step_rate

import tensorflow as tf  # noqa: E402

from tfcnn.models import create_model  # noqa: E402
from tfcnn.models.layers import GroupedConv2D, trains_grouped_natively  # noqa: E402

SCRIPT = "bench/grouped_conv.py"


def with_keras_conv2d(model: tf.keras.Model) -> tf.keras.Model:
    """`model` rebuilt from its config with Keras' Conv2D in place of every GroupedConv2D, its weights copied."""
    config = model.get_config()
    grouped = tf.keras.utils.get_registered_name(GroupedConv2D)
    conv2d = tf.keras.layers.serialize(tf.keras.layers.Conv2D(1, 1))  # how this Keras names its own class
    for layer in config["layers"]:
        if layer["registered_name"] == grouped:
            layer.update({key: conv2d[key] for key in ("module", "class_name", "registered_name")})
    twin = tf.keras.Model.from_config(config)
    twin.set_weights(model.get_weights())
    return twin


def main():
    p = parser(__doc__)
    p.add_argument("--model", default="resnext50_32x4d", help="a tfcnn model with grouped convolutions")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    tf.keras.utils.set_random_seed(0)
    model = create_model(args.model, input_shape=(args.image_size, args.image_size, 3))
    if not any(isinstance(layer, GroupedConv2D) for layer in model.layers):
        p.error(f"--model {args.model} has no grouped convolutions (resnext50_32x4d, se_resnext101_32x4d, ... have)")
    contenders = {"keras": lambda: with_keras_conv2d(model), "tfcnn": lambda: model}
    firsts, rates = {name: [] for name in contenders}, {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, build in contenders.items():
            first, rate = step_rate(build(), args.batch_size, "train", args.steps)
            firsts[name].append(first)
            rates[name].append(rate)
    labels = {"keras": f"keras Conv2D (XLA), {args.model}", "tfcnn": f"tfcnn GroupedConv2D, {args.model}"}
    rows = [{"name": labels[name], "first_step_s": min(firsts[name]), "img_per_sec": max(rates[name])}
            for name in contenders]
    ratios = {"tfcnn / keras img/s (>1 = tfcnn faster)": max(rates["tfcnn"]) / max(rates["keras"]),
              "keras / tfcnn first step (>1 = tfcnn's starts sooner)": min(firsts["keras"]) / min(firsts["tfcnn"])}
    report(SCRIPT, f"Training step with grouped convolutions, {args.model} {args.image_size}px batch "
                   f"{args.batch_size}, fp32", rows, ratios, args.output,
           native_grouped_kernels=trains_grouped_natively("float32"))


if __name__ == "__main__":
    main()
