"""Small registered models for the trainer's tests: what they check (resume, stops, accumulation, ranks
agreeing, checkpoints, export) is the trainer's, not a zoo model's, and ResNet-18 made each of them spend
most of its time in convolutions (0.65 s per step of 16 at 32 px on a 2-core AVX2 machine; this: 6 ms).
The zoo's own training is test_models.py's.

    testnet        two 3x3 stride-2 convolutions with batch norm, global pool, float32 logits
    testnet_nobn   the same without batch norm: its gradients do not depend on how a batch is split
    testnet_slow   testnet whose training steps take at least 0.1 s, as real ones do: a stop or a kill
                   then lands mid-run (its sleep is a host call, so it cannot be exported or compiled)
    testnet_grouped
                   testnet whose second convolution is tfcnn's GroupedConv2D in 4 groups: bench/grouped_conv.py's
                   smoke run (ResNeXt-50 has 16 such layers, each compiled with XLA on Keras' side)

register() adds them to tfcnn's registry (tests/scripts/ do it in their processes: with_testnet.py before
any entry point); the `testnet` fixture of conftest.py does it for one test and removes them after, so the
zoo tests see the zoo only.
"""
import os
import time

import numpy as np
import tensorflow as tf

from tfcnn.models import registry
from tfcnn.models.layers import GroupedConv2D
from tfcnn.models.weights import IMAGENET_MEAN, IMAGENET_STD

layers = tf.keras.layers
TESTS = os.path.dirname(os.path.abspath(__file__))
WITH_TESTNET = os.path.join(TESTS, "scripts", "with_testnet.py")  # runs an entry point with these models
TRAIN_PY = [WITH_TESTNET, os.path.join(os.path.dirname(TESTS), "examples", "train.py")]  # after the Python
FILTERS = (8, 16)
VARIANTS = {"testnet": dict(batch_norm=True, step_seconds=0.0, groups=1),
            "testnet_nobn": dict(batch_norm=False, step_seconds=0.0, groups=1),
            "testnet_slow": dict(batch_norm=True, step_seconds=0.1, groups=1),
            "testnet_grouped": dict(batch_norm=True, step_seconds=0.0, groups=4)}


class SleepWhileTraining(layers.Layer):
    """Identity; in training, first waits `seconds` (a step of a model this small is otherwise
    milliseconds long, too short to signal or kill a run mid-way)."""

    def __init__(self, seconds, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def call(self, inputs, training=None):
        if not training:
            return inputs
        slept = tf.numpy_function(lambda: np.float32(time.sleep(self.seconds) or 0.0), [], tf.float32, stateful=True)
        with tf.control_dependencies([slept]):
            return tf.identity(inputs)


def testnet(*, num_classes, input_shape, name, batch_norm, step_seconds, groups):
    x = inputs = tf.keras.Input(input_shape, name="images")
    if step_seconds:
        x = SleepWhileTraining(step_seconds, name="sleep")(x)
    for index, filters in enumerate(FILTERS, start=1):
        layer_groups = groups if index > 1 else 1  # the first sees 3 channels
        conv = GroupedConv2D if layer_groups > 1 else layers.Conv2D
        x = conv(filters, 3, strides=2, padding="same", use_bias=not batch_norm, groups=layer_groups,
                 name=f"conv{index}")(x)
        if batch_norm:
            x = layers.BatchNormalization(epsilon=1e-5, name=f"bn{index}")(x)
        x = layers.ReLU(name=f"relu{index}")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="head_fc")(x)  # float32 under mixed precision
    return tf.keras.Model(inputs, logits, name=name)


def register():
    for name, arch in VARIANTS.items():
        if name not in registry.list_models():
            info = registry.ModelInfo(name=name, input_size=32, crop_fraction=0.875, mean=IMAGENET_MEAN,
                                      std=IMAGENET_STD, top1=0.0, params=0, gmacs=0.0, min_size=4)
            registry.register_model(name, testnet, info, **arch)


def write_checkpoint(directory, name, num_classes=2, size=32, seed=11, **overrides) -> str:
    """A log dir holding a tfcnn checkpoint of a freshly built `name` (any registered model, with its builder
    `overrides`): --init_weights for a run that must start from known weights."""
    from tfcnn import checkpoints
    from tfcnn.models import create_model

    tf.keras.utils.set_random_seed(seed)
    model = create_model(name, num_classes=num_classes, input_shape=(size, size, 3), **overrides)
    manager = tf.train.CheckpointManager(checkpoints.make_checkpoint(model), os.path.join(directory, "checkpoints"),
                                         max_to_keep=1, checkpoint_name="ckpt")
    manager.save(checkpoint_number=0)
    return str(directory)


def unregister():
    for name in VARIANTS:
        registry._REGISTRY.pop(name, None)  # tests only: the registry offers no removal


def checkpoint_values(path) -> dict:
    """Every variable a tfcnn checkpoint holds, by name: weights, batch-norm moving statistics, optimizer
    slots and iterations, step, weight average, loss scale, run counters, the record. All but the
    checkpoint's own count of saves, which a run stopped and resumed has more of than one that was not."""
    reader = tf.train.load_checkpoint(str(path))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith("save_counter/")}


def assert_same_values(got: dict, want: dict) -> None:
    """Every variable of `want` in `got`, bit for bit; the error names those that differ, largest first."""
    assert sorted(got) == sorted(want), f"variables differ: {sorted(set(got) ^ set(want))}"
    differ = {}
    for name, value in want.items():
        if not np.array_equal(got[name], value):
            numeric = np.asarray(value).dtype.kind in "fiu"
            differ[name] = float(np.max(np.abs(got[name].astype(np.float64) - value))) if numeric else np.nan
    worst = sorted(differ.items(), key=lambda item: -np.nan_to_num(item[1], nan=np.inf))[:5]
    assert not differ, f"{len(differ)} of {len(want)} variables differ (largest: {worst})"
