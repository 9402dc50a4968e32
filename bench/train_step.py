"""Training step: tfcnn's trainer vs plain `model.fit`, on the same data and optimizer.

    python bench/train_step.py [--model resnet50] [--batch_size 32] [--image_size 224] [--steps 5]
        [--warmup_steps 2] [--repeats 2] [--no_xla]

Contenders, each training --model (default resnet50) on one synthetic batch generated once, fp32, SGD with
momentum 0.9, no weight decay or label smoothing, in this process, one after the other:
- keras: Keras' application of the same architecture (tf.keras.applications.ResNet50(weights=None) for
  resnet50), compiled and fitted with `model.fit`. Keras' ResNets are v1 (stride on the 1x1 conv: 3.86
  GMACs at ResNet-50); tfcnn's are v1.5 (4.09 GMACs, 6% more work);
- tfcnn_model_fit: tfcnn's model under the same plain `model.fit` (isolates the trainer's cost);
- tfcnn: tfcnn's model through tfcnn's trainer (`train()`, explicit gradient averaging, metrics).
The XLA pair (keras with compile(jit_compile=True), tfcnn with --use_xla) runs once: its compile is
slow on CPUs. Warmup steps are excluded from every figure.
"""
import time

# common first: it quiets TensorFlow's C++ logs
from common import KERAS_APPLICATIONS, add_model_flag, keras_application, parser, refuse, report

import tensorflow as tf  # noqa: E402

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


def model_fit_rate(model_name, batch_size, image_size, steps, warmup_steps, xla, architecture="keras"):
    """img/s of plain compile + fit of model_name as Keras' application ('keras') or tfcnn's ('tfcnn')."""
    from tfcnn.data.pipeline import synthetic_dataset
    from tfcnn.models import create_model

    tf.keras.mixed_precision.set_global_policy("float32")
    tf.keras.utils.set_random_seed(0)
    shape = (image_size, image_size, 3)
    if architecture == "keras":
        model = keras_application(model_name, shape)
    else:
        model = create_model(model_name, input_shape=shape)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  jit_compile=xla)
    timer = StepTimer(warmup_steps)
    data = synthetic_dataset(batch_size, image_size, 1000).map(lambda x, y: (tf.cast(x, tf.float32), y))
    model.fit(data, epochs=1, steps_per_epoch=warmup_steps + steps, callbacks=[timer], verbose=0)
    tf.keras.backend.clear_session()
    return steps * batch_size / (timer.end - timer.start)


def trainer_rate(model_name, batch_size, image_size, steps, warmup_steps, xla):
    """img/s of tfcnn's own training loop, as examples/train.py runs it on synthetic data."""
    from tfcnn.training import make_config, train

    summary = train(make_config(model=model_name, batch_size=batch_size, image_size=image_size,
                                num_iter=warmup_steps + steps, iter_unit="batch", precision="fp32", use_xla=xla,
                                optimizer="sgd", lr=0.01 * 256 / batch_size, momentum=0.9, weight_decay=0.0,
                                label_smoothing=0.0, warmup_epochs=0, lr_schedule="constant", seed=0,
                                benchmark_warmup_steps=warmup_steps, display_every=10**6))
    tf.keras.backend.clear_session()
    return summary["img_per_sec"]


# Each contender: a name (formatted with the model's tfcnn and Keras names) and its img/s function.
CONTENDERS = {
    "keras": ("keras {keras} model.fit", lambda *a: model_fit_rate(*a, architecture="keras")),
    "tfcnn_model_fit": ("tfcnn {model} model.fit", lambda *a: model_fit_rate(*a, architecture="tfcnn")),
    "tfcnn": ("tfcnn {model} trainer", trainer_rate),
}


def contender_name(kind, model_name):
    return CONTENDERS[kind][0].format(model=model_name, keras=KERAS_APPLICATIONS[model_name])


def measure(kind, model_name, sizes):
    try:
        return CONTENDERS[kind][1](model_name, *sizes)
    except Exception as error:  # every side must have run, or there is no ratio
        refuse(SCRIPT, f"{contender_name(kind, model_name)} could not run: {type(error).__name__}: {error}")


def main():
    p = parser(__doc__)
    add_model_flag(p)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup_steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="runs of each contender without XLA; their mean counts")
    p.add_argument("--no_xla", action="store_true", help="skip the XLA pair")
    args = p.parse_args()
    sizes = (args.batch_size, args.image_size, args.steps, args.warmup_steps)
    rates = {kind: [] for kind in CONTENDERS}
    order = list(CONTENDERS)
    for run in range(args.repeats):  # the order alternates, so drift hits every contender alike
        for kind in order if run % 2 == 0 else order[::-1]:
            rates[kind].append(measure(kind, args.model, sizes + (False,)))
    mean = {kind: sum(values) / len(values) for kind, values in rates.items()}
    rows = [{"name": contender_name(kind, args.model), "img_per_sec": mean[kind]} for kind in CONTENDERS]
    ratios = {"tfcnn trainer / keras model.fit": mean["tfcnn"] / mean["keras"],
              f"tfcnn trainer / model.fit of the same {args.model}": mean["tfcnn"] / mean["tfcnn_model_fit"]}
    if not args.no_xla:
        xla = {kind: measure(kind, args.model, sizes + (True,)) for kind in ("keras", "tfcnn")}
        rows += [{"name": f"{contender_name(kind, args.model)} + XLA", "img_per_sec": xla[kind]} for kind in xla]
        ratios["tfcnn trainer / keras model.fit, both XLA"] = xla["tfcnn"] / xla["keras"]
        ratios["tfcnn XLA / tfcnn"] = xla["tfcnn"] / mean["tfcnn"]
    report(SCRIPT, f"{args.model} training, batch {args.batch_size}, {args.image_size} px, fp32, SGD momentum, "
           f"{args.steps} timed steps after {args.warmup_steps} warmup", rows, ratios, args.output,
           all_runs_img_per_sec=rates)


if __name__ == "__main__":
    main()
