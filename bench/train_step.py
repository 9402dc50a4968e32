"""Training step: tfcnn's trainer vs tf.keras.applications.ResNet50 fitted with plain model.fit.

    python bench/train_step.py [--batch_size 32] [--image_size 224] [--steps 6] [--warmup_steps 2] [--no_xla]

Both train ResNet-50 on the same synthetic batch (generated once), fp32, SGD with momentum 0.9, no
weight decay or label smoothing, in the same process, one after the other; the XLA pair compiles
both (tfcnn --use_xla, Keras compile(jit_compile=True)). Warmup steps are excluded. Note the baseline
is ResNet-50 v1 (stride on the 1x1 conv: 3.9 GMACs) while tfcnn's is v1.5 (4.1 GMACs, +5% work).
"""
import time

import tensorflow as tf

from common import parser, refuse, report

SCRIPT = "bench/train_step.py"


class StepTimer(tf.keras.callbacks.Callback):
    """Wall time from the end of the last warmup step to the end of the last step, synced on both."""
    _supports_tf_logs = True

    def __init__(self, warmup_steps):
        super().__init__()
        self.warmup_steps, self.start, self.end = warmup_steps, None, None

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == self.warmup_steps:
            float(logs["loss"])
            self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        self.end = time.perf_counter()


def keras_fit_rate(batch_size, image_size, steps, warmup_steps, xla):
    from tfcnn.data.pipeline import synthetic_dataset

    tf.keras.mixed_precision.set_global_policy("float32")
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3), classes=1000,
                                           classifier_activation=None)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  jit_compile=xla)
    timer = StepTimer(warmup_steps)
    model.fit(synthetic_dataset(batch_size, image_size, 1000), epochs=1, steps_per_epoch=warmup_steps + steps,
              callbacks=[timer], verbose=0)
    tf.keras.backend.clear_session()
    return steps * batch_size / (timer.end - timer.start)


def tfcnn_rate(batch_size, image_size, steps, warmup_steps, xla):
    from tfcnn.training import make_config, train

    summary = train(make_config(model="resnet50", batch_size=batch_size, image_size=image_size,
                                num_iter=warmup_steps + steps, iter_unit="batch", precision="fp32", use_xla=xla,
                                optimizer="sgd", lr=0.01 * 256 / batch_size, momentum=0.9, weight_decay=0.0,
                                label_smoothing=0.0, warmup_epochs=0, lr_schedule="constant", seed=0,
                                benchmark_warmup_steps=warmup_steps, display_every=10**6))
    tf.keras.backend.clear_session()
    return summary["img_per_sec"]


def main():
    p = parser(__doc__)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup_steps", type=int, default=2)
    p.add_argument("--no_xla", action="store_true", help="skip the XLA pair")
    args = p.parse_args()
    rows, ratios = [], {}
    for xla in (False,) if args.no_xla else (False, True):
        suffix = " + XLA" if xla else ""
        sizes = (args.batch_size, args.image_size, args.steps, args.warmup_steps, xla)
        try:
            baseline = keras_fit_rate(*sizes)
        except Exception as error:  # the baseline must have run, or there is no ratio
            refuse(SCRIPT, f"the Keras baseline{suffix} could not run: {type(error).__name__}: {error}")
        ours = tfcnn_rate(*sizes)
        rows += [{"name": f"keras ResNet50 model.fit{suffix}", "img_per_sec": baseline},
                 {"name": f"tfcnn resnet50 trainer{suffix}", "img_per_sec": ours}]
        ratios[f"tfcnn / keras{suffix}"] = ours / baseline
    if not args.no_xla:
        ratios["tfcnn XLA / tfcnn"] = rows[3]["img_per_sec"] / rows[1]["img_per_sec"]
    report(SCRIPT, f"ResNet-50 training, batch {args.batch_size}, {args.image_size} px, fp32, SGD momentum, "
           f"{args.steps} timed steps after {args.warmup_steps} warmup", rows, ratios, args.output)


if __name__ == "__main__":
    main()
