"""ONNX export of the SavedModel's `serving_default`, verified with ONNX Runtime, and its int8 twin.

    export_onnx(model, "exports/rn50")         # model.onnx, labels.txt, tfcnn.json
    export_onnx(model, "exports/rn50", data_dir="/data/imagenet/tfrecords", calibration_images=300)  # + model.int8.onnx

The one module that imports tf2onnx and onnxruntime (an optional extra: `pip install -e .[onnx]` or
`make install ONNX=1`; without them every entry point says so). model.onnx is tf2onnx's conversion of the
very function the SavedModel signs as `serving_default` (tfcnn.training.export): input `images`, float32
[batch, S, S, 3] RGB pixels in 0-255 (NHWC, any batch), normalization inside; outputs `logits` and
`probabilities`, float32 [batch, classes]. Opset 17: the newest that TensorRT 8.6 parses, and TensorRT 10,
ONNX Runtime and tf2onnx (up to 18) all take; nothing in these CNNs needs a newer one.

Nothing differs silently: an op tf2onnx cannot convert (it would leave the TensorFlow op in the graph) is
an error naming the Keras layer, and every export is run by ONNX Runtime against TensorFlow on the same
images before it is written (logits within 1e-4 of the largest).

int8: ONNX Runtime's static post-training quantization in QDQ form (QuantizeLinear/DequantizeLinear pairs
around float ops), weights symmetric per output channel (7 bits of them: REDUCE_RANGE), activations per
tensor, for TensorRT (symmetric int8, zero points 0) or for ONNX Runtime on CPUs (asymmetric uint8):
INT8_TARGETS; ranges from MinMax calibration on images of the training shards through the evaluation
view. The logits and the softmax stay float: quantizing the logits to 255 levels would only make ties.
"""
from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import tensorflow as tf

from tfcnn.data import pipeline, preprocessing, records
from tfcnn.training.export import (EXPORT_INFO_FILE, IMAGES_INPUT, OUTPUTS, export_info, serving_module,
                                   staged_directory, write_export_info)

OPSET = 17
FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
INSTALL = "pip install -e '.[onnx]' (or make install ONNX=1)"
TOLERANCE = 1e-4  # of the largest logit, as the zoo's reference-weight tests
CALIBRATION_BATCH = 16
# 7-bit weights: AVX2 CPUs without VNNI (as this project's machines) multiply u8 x s8 pairs into saturating
# int16 sums; with full-range weights a digits ResNet-18 lost 7.5 points of top-1, with 7 bits 0.3 (TensorRT
# and VNNI CPUs would not need it; the file stays symmetric int8 for them).
REDUCE_RANGE = True
# Whom the int8 file is for. TensorRT's explicit quantization takes only symmetric int8 (zero point 0);
# ONNX Runtime's x86 kernels fuse a whole conv + ReLU chain only with asymmetric uint8 activations (a ReLU
# is then folded into the range), while symmetric ones leave every ReLU as a float op between
# Dequantize/Quantize pairs (ResNet-50: 20 of 53 convs unfused, slower than fp32 on this CPU).
INT8_TARGETS = ("tensorrt", "cpu")
BATCH_DIM = "batch"


def require() -> None:
    """Imports the extra's packages; an ImportError with the install command when one is missing."""
    missing = []
    for package in ("tf2onnx", "onnxruntime", "onnx"):
        try:
            __import__(package)
        except ImportError as error:
            missing.append(f"{package} ({error})")
    if missing:
        raise ImportError(f"ONNX export needs tf2onnx and onnxruntime, which a plain install leaves out: {INSTALL}; "
                          f"not importable: {', '.join(missing)}")


def export_onnx(source, export_dir: str, data_dir: str | None = None, calibration_images: int = 0,
                int8_target: str = "tensorrt", log=print) -> str:
    """Writes export_dir/model.onnx (and, with calibration_images > 0, model.int8.onnx calibrated on that
    many images of data_dir's train shards), labels.txt (data_dir's) and tfcnn.json. The directory appears
    only when complete.

    source: a zoo model (its float32 serving function is converted), or the directory of a tfcnn SavedModel
    export (its `serving_default` is). int8_target: 'tensorrt' or 'cpu' (ONNX Runtime), see INT8_TARGETS."""
    require()
    _check_target(int8_target)
    if calibration_images and not data_dir:
        raise ValueError(f"calibration_images={calibration_images} needs data_dir (the train shards to calibrate "
                         f"int8 on)")
    function, reference, info, layer_names = _serving_functions(source)
    data = _data_config(info)
    calibration = calibration_batches(data_dir, data, calibration_images) if calibration_images else None
    serialized = convert(function, layer_names).SerializeToString()  # once: VGG's is 0.5 GB
    error = verify(serialized, reference, info["image_size"])
    log(f"tfcnn.export: ONNX Runtime's logits equal TensorFlow's within {error:.1e} of the largest")
    info = {**info, "format": "onnx", "opset": OPSET, "files": {"fp32": FP32_FILE},
            "input": {"name": IMAGES_INPUT, "dtype": "float32",
                      "shape": [BATCH_DIM, data.input_size, data.input_size, 3],
                      "pixels": "RGB 0-255, normalization inside"},
            "outputs": list(OUTPUTS), "verified_relative_error": error}
    with staged_directory(export_dir) as tmp:
        with open(os.path.join(tmp, FP32_FILE), "wb") as f:
            f.write(serialized)
        if calibration:
            count = sum(len(batch) for batch in calibration)
            quantize_int8(os.path.join(tmp, FP32_FILE), os.path.join(tmp, INT8_FILE), calibration, int8_target)
            info["files"]["int8"] = INT8_FILE
            info["int8"] = {"target": int8_target, "calibration_images": count,
                            "calibration_data": os.path.abspath(data_dir), "scheme": _scheme(int8_target)}
            log(f"tfcnn.export: int8 calibrated on {count} images of {data_dir}'s train shards"
                + (f" (they hold only {count})" if count < calibration_images else ""))
        if isinstance(source, str) and not data_dir:
            data_dir = source  # a SavedModel export keeps its labels.txt
        write_export_info(tmp, info, data_dir, log, getattr(source, "class_names", None))
    return os.path.abspath(export_dir)


def _serving_functions(source):
    """(function to convert, the SavedModel's serving_default to check it against, export info, Keras layer
    names) of a zoo model or a SavedModel export directory."""
    if isinstance(source, tf.keras.Model):
        module = serving_module(source)
        reference = module.images_function()
        reference.get_concrete_function()  # traced before the grouped convs change below
        _grouped_convs_uncompiled(module.model)
        layer_names = [layer.name for layer in module.model.layers]
        return module.images_function(), reference, export_info(module), layer_names
    info_path = os.path.join(str(source), EXPORT_INFO_FILE)
    if not os.path.exists(info_path):
        raise ValueError(f"{source} is not a tfcnn SavedModel export (no {EXPORT_INFO_FILE})")
    with open(info_path) as f:
        info = json.load(f)
    if info.get("format", "saved_model") != "saved_model":
        raise ValueError(f"{source} holds a {info['format']} export, not a SavedModel")
    loaded = tf.saved_model.load(str(source))
    size = info["image_size"]

    def serving_default(images):
        return loaded.signatures["serving_default"](images=images)  # `loaded` lives as long as the function

    function = tf.function(serving_default, input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32,
                                                                            IMAGES_INPUT)])
    return function, function, info, []


def _grouped_convs_uncompiled(model):
    """Keras runs a grouped Conv2D (ResNeXt's) as a nested XLA-compiled function, because TensorFlow's fused
    CPU kernels lack groups; that function stays a call tf2onnx cannot convert. Traced as the plain
    grouped Conv2D op instead, it becomes an ONNX Conv with `group`, the same function."""
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D) and layer.groups > 1:
            layer._jit_compiled_convolution_op = layer.convolution_op  # the instance's, not the class's


def _data_config(info):
    from tfcnn.models import DataConfig

    return DataConfig.from_dict(info["data_config"]).replace(input_size=info["image_size"])


@contextlib.contextmanager
def _lean_tf2onnx():
    """tf2onnx as the export needs it, for the duration of a conversion:

    - its optimizer passes raise instead of being skipped: by default it copies the whole graph before each
      of its ~40 passes so that a failing one can be dropped (a silently different graph), which also
      doubles the time (ResNet-18: 14 s instead of 7);
    - each node proto is rewritten into a fresh message: tf2onnx rewrites every node's attributes (so all
      the weights) after each pass, and protobuf's upb runtime keeps every earlier copy in the node's arena
      until the message is freed. AlexNet peaked at 14.3 GB instead of 5.1; VGG-11 passed 24 GB.
    """
    import onnx
    import tf2onnx.graph

    update_proto = tf2onnx.graph.Node.update_proto

    def update_fresh_proto(node, *args, **kwargs):
        fresh = onnx.NodeProto()
        fresh.CopyFrom(node._op)  # the old message and its arena go when nothing refers to them
        node._op = fresh
        return update_proto(node, *args, **kwargs)

    previous = os.environ.get("TF2ONNX_CATCH_ERRORS")
    os.environ["TF2ONNX_CATCH_ERRORS"] = "FALSE"
    tf2onnx.graph.Node.update_proto = update_fresh_proto
    try:
        yield
    finally:
        tf2onnx.graph.Node.update_proto = update_proto
        if previous is None:
            os.environ.pop("TF2ONNX_CATCH_ERRORS", None)
        else:
            os.environ["TF2ONNX_CATCH_ERRORS"] = previous


def convert(function, layer_names=()):
    """The onnx.ModelProto of a tf.function with an input signature (opset OPSET, batch dimension named
    'batch'). tf2onnx leaves an op it cannot convert in the graph as the TensorFlow op: such ops are a
    ValueError naming their Keras layers (one of layer_names) instead."""
    require()
    import tf2onnx

    with _lean_tf2onnx():
        proto, _ = tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=OPSET)
    unconverted = unconverted_nodes(proto)
    if unconverted:
        named = "; ".join(f"{node.op_type} in layer {_layer_of(node.name, layer_names)!r} (node {node.name})"
                          for node in unconverted[:5])
        raise ValueError(f"tf2onnx cannot convert {len(unconverted)} TensorFlow op(s) to ONNX opset {OPSET}: {named}. "
                         f"Build that layer from ops tf2onnx supports, or export --format saved_model")
    for value in [*proto.graph.input, *proto.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = BATCH_DIM  # tf2onnx names it unk__NNN
    return proto


def unconverted_nodes(proto) -> list:
    """Nodes that are no standard ONNX op at OPSET (a TensorFlow op tf2onnx left in place)."""
    import onnx

    def standard(node):
        if node.domain not in ("", "ai.onnx"):
            return False
        try:
            onnx.defs.get_schema(node.op_type, OPSET, "")
        except onnx.defs.SchemaError:
            return False
        return True

    return [node for node in proto.graph.node if not standard(node)]


def _layer_of(node_name: str, layer_names) -> str:
    """The Keras layer a converted node came from: the first part of its TensorFlow name that names one."""
    parts = node_name.split("/")
    return next((part for part in parts if part in set(layer_names)), "/".join(parts[:-1]) or node_name)


def session(model, threads: int | None = None):
    """An ONNX Runtime CPU session of a model file or serialized model; threads None: ONNX Runtime's
    default (one per physical core)."""
    require()
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def predictor(path: str, threads: int | None = None):
    """(0-255 images [N, S, S, 3] -> float32 logits [N, C]) of an exported model.onnx / model.int8.onnx."""
    run = session(path, threads)
    return lambda images: run.run(["logits"], {IMAGES_INPUT: np.asarray(images, np.float32)})[0]


def relative_error(actual, expected) -> float:
    return float(np.abs(np.asarray(actual) - expected).max() / np.abs(expected).max())


def verify(serialized: bytes, function, image_size: int, batch: int = 2) -> float:
    """Runs the serialized converted model in ONNX Runtime and `function` in TensorFlow on the same random images;
    the logits' largest difference relative to the largest logit, or a RuntimeError above TOLERANCE."""
    images = np.random.default_rng(0).uniform(0, 255, (batch, image_size, image_size, 3)).astype(np.float32)
    expected = function(tf.constant(images))["logits"].numpy()
    actual = session(serialized).run(["logits"], {IMAGES_INPUT: images})[0]
    error = relative_error(actual, expected)
    if not error <= TOLERANCE:
        raise RuntimeError(f"the ONNX conversion computes another function: ONNX Runtime's logits differ from "
                           f"TensorFlow's by {error:.2e} of the largest (tolerance {TOLERANCE:g}); export "
                           f"--format saved_model, and report the model to tfcnn")
    return error


def calibration_batches(data_dir: str, data, count: int, batch_size: int = CALIBRATION_BATCH) -> list[np.ndarray]:
    """Up to `count` images of data_dir's train shards through the evaluation view (data: the DataConfig),
    as float32 0-255 batches: what the exported model is fed. Read round-robin over the shards, so a
    dataset whose shards are not shuffled still gives several classes."""
    if count < 1:
        raise ValueError(f"calibration_images must be a positive integer, received: {count}")
    files = pipeline.list_shards(data_dir, "train")
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), count, 64), block_length=1)

    def view(serialized):
        encoded = records.parse_example(serialized)["encoded"]
        return preprocessing.eval_image(encoded, data.input_size, data.crop_fraction, data.interpolation,
                                        data.eval_crop)

    ds = ds.take(count).map(view, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
    with pipeline.corrupt_records_named(data_dir, "train"):
        return [batch.numpy().astype(np.float32) for batch in ds]


class _Batches:
    """ONNX Runtime's CalibrationDataReader over a list of batches: get_next (None at the end), and
    set_range / len for strided calibration (one batch at a time)."""

    def __init__(self, batches):
        self._batches = batches
        self.set_range(0, len(batches))

    def __len__(self):
        return len(self._batches)

    def set_range(self, start_index, end_index):
        self._next = iter(self._batches[start_index:end_index])

    def get_next(self):
        batch = next(self._next, None)
        return None if batch is None else {IMAGES_INPUT: batch}


def _check_target(target):
    if target not in INT8_TARGETS:
        raise ValueError(f"int8 target must be one of {', '.join(INT8_TARGETS)}, received: {target!r}")


def _scheme(target) -> str:
    activations = "int8 symmetric" if target == "tensorrt" else "uint8 asymmetric"
    return f"QDQ; {activations} activations per tensor, 7-bit symmetric int8 weights per channel; MinMax"


def quantize_int8(fp32_path: str, int8_path: str, batches: list[np.ndarray], target: str = "tensorrt") -> None:
    """Static QDQ quantization of fp32_path into int8_path, ranges calibrated (MinMax) on `batches`, weights
    symmetric int8 per output channel (7 bits: REDUCE_RANGE). target 'tensorrt': symmetric int8 activations,
    zero points 0 and one QDQ pair per consumer, the form TensorRT's explicit quantization parses; 'cpu':
    asymmetric uint8 activations, which ONNX Runtime fuses into whole quantized conv chains. The nodes
    computing the outputs stay float."""
    require()
    _check_target(target)
    symmetric = target == "tensorrt"
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = f"{int8_path}.prepared"
    try:
        # ONNX's shape inference (a tensor of unknown shape is not quantized) and ONNX Runtime's basic graph
        # optimizations; the symbolic shape inference (for transformers' shapes, and it needs sympy) is not needed
        quant_pre_process(fp32_path, prepared, skip_symbolic_shape=True)
        graph = onnx.load(prepared).graph
        outputs = {value.name for value in graph.output}
        float_nodes = [node.name for node in graph.node if outputs & set(node.output)]
        quantize_static(prepared, int8_path, _Batches(batches), quant_format=QuantFormat.QDQ, per_channel=True,
                        reduce_range=REDUCE_RANGE,
                        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                        weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=float_nodes,
                        extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True,
                                       "DedicatedQDQPair": symmetric,
                                       # ranges merged batch by batch: all activations of all images at once
                                       # would take tens of GB for ResNet-50 (and CalibMaxIntermediateOutputs,
                                       # meant for that, drops all but the last batches in onnxruntime 1.32)
                                       "CalibStridedMinMax": 1})
    finally:
        if os.path.exists(prepared):
            os.remove(prepared)
