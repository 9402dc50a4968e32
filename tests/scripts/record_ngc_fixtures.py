"""Records, per NGC network, what tests/test_ngc_models.py compares tfcnn's network with: NVIDIA's own builder
code (nvidia-examples/cnn/*.py with nvutils/builder.py, NGC TensorFlow 20.10-tf1) run on TensorFlow 2 in
TF1's graph mode, outside the project. For each network: every variable's name and shape in creation order,
the parameter count, every layer's output shape, and the logits for a fixed input on weights generated from a
seed by numpy per variable name (tests/weightgen.py). Not run by `make test`: it needs the scripts, which
tfcnn never ships. Run it in a separate venv when a network changes:

    python3.11 -m venv /work/ngcref
    /work/ngcref/bin/pip install tensorflow-cpu==2.21.0 tf_keras==2.21.0 numpy
    git clone https://github.com/dbkinghorn/NGC-TF1-nvidia-examples /work/ngc-src   # a copy of the 20.10 scripts
    /work/ngcref/bin/python tests/scripts/record_ngc_fixtures.py --cnn_dir /work/ngc-src/cnn [NAME ...]

Writes tests/fixtures/ngc/NAME.json (NAME: tfcnn's model name), recording the versions used.

The scripts run as they are, with the smallest shim TensorFlow 2 needs. Every shim:

1. `import tensorflow as tf` in the scripts and builder.py gets `tf.compat.v1` (TF1's API: tf.layers,
   tf.name_scope, tf.pad ...), with eager execution disabled, as TF1 built graphs. `tf.layers` there needs
   Keras 2 (TF_USE_LEGACY_KERAS=1, set below).
2. `tf.contrib.layers.batch_norm` (gone with tf.contrib) is `tf.compat.v1.layers.batch_normalization` with
   the same arithmetic: the channel axis of data_format, momentum = decay, epsilon, scale, fused, training =
   is_training. Its variables are named batch_normalization_N/{gamma,beta,moving_mean,moving_variance}
   instead of contrib's BatchNorm_N/...; zero_debias_moving_mean (False in the scripts) only affects training.
3. The `nvutils` package's __init__.py imports Horovod, DALI, tf.estimator and tf.contrib for training; it is
   replaced by a module holding the real LayerBuilder (nvutils/builder.py, loaded from its file) and
   stand-ins for what the scripts call at import: init() does nothing, parse_cmdline returns the script's
   default_args with predict=True and log_dir=None (so the script's own last lines neither train nor
   predict) and, for resnet.py and vgg.py, a namespace whose `layers` this script sets per network;
   train/validate/predict are never called.
4. oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS=1): TensorFlow's default CPU kernels refuse NCHW convolutions and
   pools, and the scripts run channels_first (their default image_format), as their GPUs did.

What nvutils/runner.py adds around a script's network is written here, not imported (it needs Horovod and the
estimator): the input transposed NHWC -> NCHW (runner.py:116-117) and `tf.layers.dense(top_layer, num_classes)`
for the logits (runner.py:119); its fp32_vars variable scope only prefixes the names and sets storage dtypes.
"""
import argparse
import importlib.util
import json
import os
import sys
import types

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # shim 1: tf.compat.v1.layers needs Keras 2
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1"  # shim 4: NCHW kernels on the CPU
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf2  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import weightgen  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "fixtures", "ngc")
SEED = 20261204
BATCH = 2
tf = tf2.compat.v1


# (script, its network function, --layers, the input side recorded): small inputs where the network takes
# any size; the networks whose dense layers read the flattened maps at their own size.
NETWORKS = {
    "ngc_resnet18": ("resnet", "resnet_v1", 18, 64),
    "ngc_resnet34": ("resnet", "resnet_v1", 34, 64),
    "ngc_resnet50": ("resnet", "resnet_v1", 50, 64),
    "ngc_resnet101": ("resnet", "resnet_v1", 101, 64),
    "ngc_resnet152": ("resnet", "resnet_v1", 152, 64),
    "ngc_googlenet": ("googlenet", "googlenet", None, 64),
    # 107 px leave even 2x2 maps at the end, where 'same' pads one side only.
    "ngc_inception_v3": ("inception_v3", "inception_v3", None, 107),
    "ngc_inception_v4": ("inception_v4", "inception_v4", None, 107),
    "ngc_inception_resnet_v2": ("inception_resnet_v2", "inception_resnet_v2", None, 107),
    "ngc_xception": ("xception", "xception", None, 64),
    "vgg16": ("vgg", "vgg", 16, 224),
    "ngc_alexnet": ("alexnet", "alexnet_owt", None, 227),
    "overfeat": ("overfeat", "overfeat", None, 231),
}
# Graph ops whose outputs are compared as a multiset per kind (the weight layers are compared one by one).
OP_KINDS = {"MaxPool": "max_pool", "AvgPool": "avg_pool", "ConcatV2": "concat", "AddV2": "add", "Add": "add"}
LAYER_OPS = ("Conv2D", "BiasAdd", "MatMul", "FusedBatchNormV3")


def batch_norm(inputs, is_training=False, data_format="NHWC", fused=True, decay=0.999, epsilon=0.001, scale=False,
               center=True, zero_debias_moving_mean=False):
    """Shim 2: tf.contrib.layers.batch_norm's arithmetic through tf.compat.v1.layers.batch_normalization."""
    return tf.layers.batch_normalization(inputs, axis=1 if data_format == "NCHW" else -1, momentum=decay,
                                         epsilon=epsilon, center=center, scale=scale, training=is_training,
                                         fused=fused)


def load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_scripts(cnn_dir, scripts):
    """{script: its module}, imported with the shims; and the namespace their `flags` are."""
    tf.disable_eager_execution()
    tf.contrib = types.SimpleNamespace(layers=types.SimpleNamespace(batch_norm=batch_norm))  # shim 2
    real_tensorflow = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf  # shim 1, while the scripts and builder.py import it
    flags = argparse.Namespace(layers=None)
    nvutils = types.ModuleType("nvutils")  # shim 3
    nvutils.LayerBuilder = load_file("nvutils_builder", os.path.join(cnn_dir, "nvutils", "builder.py")).LayerBuilder
    nvutils.init = lambda: None
    nvutils.parse_cmdline = lambda default_args, parser=None: (dict(default_args, predict=True, log_dir=None,
                                                                    data_dir=None), flags)
    sys.modules["nvutils"] = nvutils
    try:
        modules = {script: load_file(f"ngc_{script}", os.path.join(cnn_dir, f"{script}.py")) for script in scripts}
    finally:
        sys.modules["tensorflow"] = real_tensorflow
    return modules, flags


def computing_op(variable):
    """The op that computes with a variable: a layer's output is that of its last variable's (a bias's BiasAdd,
    a pointwise kernel's Conv2D, a moving variance's FusedBatchNormV3)."""
    for read in variable.op.outputs[0].consumers():
        for op in read.outputs[0].consumers() if read.type == "ReadVariableOp" else ():
            if op.type in LAYER_OPS:
                return op
    raise ValueError(f"no op computes with {variable.op.name}")


def nhwc(shape):
    """A channels_first tensor's shape without the batch, as NHWC's (H, W, C); a 2-D one's (C,)."""
    shape = [int(d) for d in shape[1:]]
    return [shape[1], shape[2], shape[0]] if len(shape) == 3 else shape


def record(name, scripts, flags):
    script, function, layers_flag, size = NETWORKS[name]
    module = scripts[script]
    flags.layers = layers_flag
    tf.reset_default_graph()
    images = tf.placeholder(tf.float32, [BATCH, size, size, 3])
    inputs = tf.transpose(images, [0, 3, 1, 2])  # runner.py: channels_first
    top = getattr(module, function)(inputs, training=False)
    logits = tf.layers.dense(top, 1000)  # runner.py: the logits
    graph = tf.get_default_graph()
    variables = tf.global_variables()  # in creation order
    names = [v.op.name for v in variables]
    last_variable = {v.op.name.rsplit("/", 1)[0]: v for v in variables}  # per layer, in creation order
    layer_shapes = [[layer, nhwc(computing_op(v).outputs[0].shape)] for layer, v in last_variable.items()]
    operations = graph.get_operations()
    ops = [[OP_KINDS[op.type], nhwc(op.outputs[0].shape)] for op in operations if op.type in OP_KINDS
           and "/Initializer/" not in op.name]
    x = weightgen.images(SEED, BATCH, size)
    with tf.Session() as session:
        for variable in variables:
            variable.load(weightgen.tf_variable(variable.op.name, variable.shape.as_list(), SEED), session)
        out = session.run(logits, {images: x})
    trainable = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
    fixture = {"model": name, "script": f"nvidia-examples/cnn/{script}.py" + (f" --layers {layers_flag}" if
                                                                             layers_flag else ""),
               "function": function, "seed": SEED, "input_size": size, "params": trainable,
               "variables": [[n, v.shape.as_list()] for n, v in zip(names, variables)], "layers": layer_shapes,
               "ops": ops, "logits": weightgen.encode(out), "logits_shape": list(out.shape),
               "versions": {"tensorflow": tf2.__version__, "numpy": np.__version__, "image_format": "channels_first"}}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"{name}: {len(names)} variables, {trainable:,} parameters, logits {tuple(out.shape)}, |logits| max "
          f"{float(np.abs(out).max()):.3g}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cnn_dir", required=True, help="the scripts' cnn/ folder (with nvutils/)")
    parser.add_argument("names", nargs="*", help=f"default: all of {', '.join(NETWORKS)}")
    args = parser.parse_args()
    names = args.names or list(NETWORKS)
    scripts, flags = load_scripts(args.cnn_dir, sorted({NETWORKS[name][0] for name in names}))
    for name in names:
        record(name, scripts, flags)


if __name__ == "__main__":
    main()
