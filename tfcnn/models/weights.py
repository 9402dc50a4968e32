"""Pretrained weights for the zoo: timm / torchvision state dicts and tfcnn checkpoints, loaded strictly.

    model = create_model("resnet50", weights="imagenet")   # a published file by name: see pretrained.py
    model = create_model("resnet50", weights="resnet50-0676ba61.pth")   # or a timm model.safetensors
    model.data_config     # what those weights expect: input size, crop, mean/std, interpolation
    load_weights(model, "runs/rn50")   # a tfcnn checkpoint, log dir or `python -m tfcnn.convert` output

A reference state dict is a flat {name: array} in PyTorch's layout: conv kernels OIHW (grouped convs
(O, I/groups, kh, kw), the same grouping order as Keras), depthwise kernels (C*m, 1, kh, kw), dense
(out, in), batch norm `weight, bias, running_mean, running_var`. Each family says once, in a WeightMap,
how its Keras layer names map to the reference's module names; the one loader here does the rest,
strictly like PyTorch's `load_state_dict(strict=True)`: every model weight is set and every tensor is
used, or a ValueError names the keys and shapes. `num_batches_tracked` is skipped; an auxiliary
classifier's tensors are loaded when the model has that head and otherwise skipped and said.

Files are read without pickle: `.safetensors` through safetensors' numpy API, `.pth/.pt/.bin` through
`torch.load(weights_only=True)` when torch is installed. A weights *name* ("imagenet", "torchvision",
"timm:<arch>.<tag>", "torchvision:<enum name>") stands for a published file, which tfcnn.models.pretrained
downloads once into a verified cache (TFCNN_OFFLINE=1 forbids it); paths are never downloaded.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Callable

import numpy as np
import tensorflow as tf

from tfcnn import checkpoints
from tfcnn.models import pretrained
from tfcnn.models.registry import DataConfig, build_model, model_info, weight_map_of, without_initializers
from tfcnn.options import IMAGENET_MEAN, IMAGENET_STD  # noqa: F401 (the zoo's families import them from here)

REFERENCE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
CLASSIFIER_LAYER = "head_fc"  # every zoo model's classifier (layers.classifier_head)
SKIPPED_BUFFERS = ("num_batches_tracked",)
HEADS = ("keep", "new")

TORCHVISION_DATA = DataConfig(224, 224 / 256, IMAGENET_MEAN, IMAGENET_STD, "bilinear")
# torchvision's second-generation weights are evaluated from a 232 px resize (their file names).
TORCHVISION_V2_FILES = {"resnet50-11ad3fa6.pth", "resnet101-cd907fc2.pth", "resnet152-f82ba261.pth",
                        "resnext50_32x4d-1a0047aa.pth", "wide_resnet50_2-9ba9bcbe.pth", "mobilenet_v2-7ebf99e0.pth"}
_TORCHVISION_FILE = re.compile(r"^[a-z0-9_]+-[0-9a-f]{8}\.pth$")


@dataclasses.dataclass(frozen=True)
class WeightMap:
    """How a family's reference (timm / torchvision) names its weights.

    module_of: Keras layer name -> the reference's module path (`stage3_block2_conv2_conv` ->
      `layer3.1.conv2`), None for a layer the reference does not have.
    classifier: the reference's classifier module. auxiliary: module prefixes of auxiliary heads.
    options: builder options under which tfcnn computes the reference's function (e.g. pooling modes).
    data_config: what the reference's usual weights expect, for a file that does not say.
    adapt: (layer name, tensor suffix, array already in Keras layout) -> array, for layouts that differ
      beyond the per-type transposes (e.g. a dense layer after a flatten of NCHW features).
    rename: an old key name of the reference's files -> its current name (torchvision's DenseNet files
      still say `norm.1` for `norm1`), applied to every key read.
    """

    module_of: Callable[[str], str | None]
    reference: str
    classifier: str = "fc"
    auxiliary: tuple = ()
    options: dict = dataclasses.field(default_factory=dict)
    data_config: DataConfig = TORCHVISION_DATA
    adapt: Callable[[str, str, np.ndarray], np.ndarray] | None = None
    rename: Callable[[str], str] | None = None


def flattened_nchw(layer_names, grid: int):
    """A WeightMap.adapt for dense layers that read flattened grid x grid features: PyTorch flattens them
    NCHW (kernel row c*H*W + h*W + w), Keras NHWC (row h*W*C + w*C + c), so those kernels' input rows are
    permuted from CHW to HWC order. The kernel arrives as a transposed view of PyTorch's contiguous
    (out, CHW) array; permuting that array directly takes one copy instead of two (VGG's first classifier
    kernel holds 103 M numbers), made in blocks of output columns: one strided copy of the whole array
    reads a cache line per number and took 3-4x as long (VGG's: 0.8-1.5 s against 0.25-0.35 on a 2-core EPYC)."""
    def adapt(layer_name, suffix, value):
        if layer_name in layer_names and suffix == "weight":
            rows, out = value.shape
            chw = value.T.reshape(out, rows // grid ** 2, grid ** 2)  # PyTorch's (out, C, H*W)
            hwc = np.empty((grid ** 2, rows // grid ** 2, out), value.dtype)
            block = 32  # output columns per copy: each (h*w, c) row of the result gets 32 adjacent numbers at once
            for start in range(0, out, block):
                hwc[:, :, start:start + block] = chw[start:start + block].transpose(2, 1, 0)
            value = hwc.reshape(rows, out)
        return value
    return adapt


def sequential_conv_modules(pools) -> dict:
    """{features_convN_conv: features.I} for a reference whose features are one flat Sequential of, per
    conv, Conv2d, ReLU and a MaxPool2d where `pools[N - 1]` says (torchvision's AlexNet, the NGC OverFeat)."""
    modules, index = {}, 0
    for number, pool in enumerate(pools, start=1):
        modules[f"features_conv{number}_conv"] = f"features.{index}"
        index += 3 if pool else 2
    return modules


@dataclasses.dataclass
class Source:
    """An opened weights path: what it holds and what the model needs in order to use it."""
    path: str
    kind: str  # "reference" (a timm / torchvision state dict) or "tfcnn" (a tfcnn checkpoint)
    num_classes: int | None
    options: dict
    data_config: DataConfig
    data_origin: str
    tensors: dict | None = None  # reference: {name: array}
    checkpoint: str | None = None  # tfcnn: the checkpoint prefix
    model: str | None = None  # tfcnn: the model name it records
    averaged: bool = False  # tfcnn: load the moving average of the weights it holds (set False for the raw ones)


def open_weights(name: str, path: str) -> Source:
    """Reads `path` for the registered model `name`: a reference state dict file, or a tfcnn checkpoint
    prefix, log dir or convert output (a directory holding checkpoints/), or a published weights name
    (pretrained.is_weights_name), which resolves to its cached file, downloaded if absent."""
    weight_map, default_data = weight_map_of(name), model_info(name).data_config
    if pretrained.is_weights_name(path):
        path = pretrained.weights_file(name, path)
    if not isinstance(path, (str, os.PathLike)) or not os.path.exists(path) and not checkpoints.is_checkpoint(str(path)):
        raise ValueError(f"weights {path!r}: no such file or directory")
    path = str(path)
    if path.endswith(REFERENCE_SUFFIXES) and os.path.isfile(path):
        if weight_map is None:
            raise ValueError(f"weights {path}: {name} has no reference weight mapping")
        tensors = read_state_dict(path)
        if weight_map.rename:
            tensors = {weight_map.rename(key): value for key, value in tensors.items()}
        classifier = tensors.get(f"{weight_map.classifier}.weight")
        data_config, origin = _reference_data_config(path, weight_map)
        return Source(path, "reference", None if classifier is None else int(classifier.shape[0]),
                      dict(weight_map.options), data_config, origin, tensors=tensors)
    checkpoint = tfcnn_checkpoint(path)
    record = checkpoints.describe(checkpoint)
    if record.model is not None and record.model != name:
        raise ValueError(f"weights {path}: a checkpoint of {record.model}, not of {name}")
    if record.data_config:
        data_config, origin = DataConfig.from_dict(record.data_config), f"recorded in {checkpoint}"
    else:
        data_config, origin = default_data, f"{name}'s own (the checkpoint records none)"
    return Source(path, "tfcnn", record.num_classes, dict(record.options), data_config, origin,
                  checkpoint=checkpoint, model=record.model, averaged=record.averaged)


def tfcnn_checkpoint(path: str) -> str:
    """The checkpoint prefix a path stands for: itself, or the latest checkpoint of a log dir / convert output."""
    if checkpoints.is_checkpoint(path):
        return path
    if os.path.isdir(path):
        latest = checkpoints.latest_checkpoint(path) or tf.train.latest_checkpoint(path)
        if latest:
            return latest
    raise ValueError(f"weights {path}: neither a state dict file ({', '.join(REFERENCE_SUFFIXES)}) nor a tfcnn "
                     f"checkpoint, log dir or convert output (no checkpoint found there)")


def read_state_dict(path: str) -> dict[str, np.ndarray]:
    """{name: float32 array} of a .safetensors or (with torch installed) .pth/.pt/.bin file, without pickle."""
    if path.endswith(".safetensors"):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise ValueError(f"{path}: reading .safetensors needs the safetensors package (make install "
                             f"installs it)") from None
        try:
            tensors = load_file(path)
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(f"{path}: not a readable safetensors file: {error}") from None
    else:
        tensors = _torch_state_dict(path)
    if tensors and all(k.startswith("module.") for k in tensors):  # saved from DataParallel
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    return {k: np.asarray(v, np.float32) if v.dtype != np.float32 else v for k, v in tensors.items()}


def _torch_state_dict(path: str) -> dict:
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"{path}: reading a PyTorch file needs torch, which is not installed. Install it in this "
            f"environment (pip install torch), or convert the file to .safetensors where torch is: "
            f"python -c \"import torch; from safetensors.torch import save_file; "
            f"save_file(torch.load('{os.path.basename(path)}', weights_only=True), 'weights.safetensors')\"") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # never unpickles code
    except Exception as error:
        raise ValueError(f"{path}: torch.load(weights_only=True) refused it: {str(error).splitlines()[0]}") from None
    for wrapper in ("state_dict", "model"):  # training checkpoints nest the weights
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict):
        raise ValueError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return {k: v.detach().float().numpy() for k, v in state.items() if hasattr(v, "detach")}


def _reference_data_config(path: str, weight_map: WeightMap) -> tuple[DataConfig, str]:
    """What a reference file's weights expect: timm's pretrained_cfg from the config.json beside a hub
    file, torchvision's transforms for a torchvision file name, else the family's usual (said so)."""
    config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            cfg = json.load(f).get("pretrained_cfg")
        if cfg:
            return _timm_data_config(cfg, config_path), f"timm's pretrained_cfg in {config_path}"
    name = os.path.basename(path)
    if _TORCHVISION_FILE.match(name):
        data = weight_map.data_config
        if name in TORCHVISION_V2_FILES:
            data = data.replace(crop_fraction=data.input_size / 232)
        return data, f"torchvision's evaluation transforms for {name}"
    return weight_map.data_config, (f"assumed: the usual evaluation of {weight_map.reference} weights (pass "
                                    f"data_config, or --image_size/--crop_fraction/--mean/--std/--interpolation, "
                                    f"if yours differ)")


def _timm_data_config(cfg: dict, where: str) -> DataConfig:
    if cfg.get("crop_mode", "center") != "center":
        raise ValueError(f"{where}: crop_mode {cfg['crop_mode']!r} is not supported (only 'center')")
    interpolation = cfg.get("interpolation", "bilinear")
    if interpolation not in ("bilinear", "bicubic"):
        raise ValueError(f"{where}: interpolation {interpolation!r} is not supported (bilinear or bicubic)")
    return DataConfig(int(cfg["input_size"][-1]), float(cfg.get("crop_pct", 0.875)),
                      tuple(255 * m for m in cfg.get("mean", (0.485, 0.456, 0.406))),
                      tuple(255 * s for s in cfg.get("std", (0.229, 0.224, 0.225))), interpolation)


# ----------------------------------------------------------------------------------------- loading

def weighted_layers(model):
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            yield from weighted_layers(layer)
        elif layer.weights:
            yield layer


def _layer_tensors(layer):
    """[(reference suffix, Keras variable, PyTorch layout -> Keras layout)] of one layer."""
    L = tf.keras.layers
    if isinstance(layer, L.DepthwiseConv2D):
        def depthwise(w):  # (C * m, 1, kh, kw) -> (kh, kw, C, m)
            channels = layer.depthwise_kernel.shape[2]
            return w.reshape(channels, -1, *w.shape[2:]).transpose(2, 3, 0, 1)
        pairs = [("weight", layer.depthwise_kernel, depthwise)]
    elif isinstance(layer, L.Conv2D):
        pairs = [("weight", layer.kernel, lambda w: w.transpose(2, 3, 1, 0))]
    elif isinstance(layer, L.Dense):
        pairs = [("weight", layer.kernel, lambda w: w.T)]
    elif isinstance(layer, L.BatchNormalization):
        pairs = [(suffix, variable, None) for suffix, variable in (
            ("weight", layer.gamma), ("bias", layer.beta), ("running_mean", layer.moving_mean),
            ("running_var", layer.moving_variance)) if variable is not None]
        return pairs
    else:
        raise ValueError(f"layer {layer.name} ({type(layer).__name__}) has weights but no loading rule")
    if getattr(layer, "bias", None) is not None:
        pairs.append(("bias", layer.bias, None))
    return pairs


def reference_names(model) -> list:
    """[(variable, its name in the reference's state dict)] for every weight of a zoo model: what a
    rule written against torchvision / timm names (NVIDIA's PyTorch weight-decay filter) reads."""
    weight_map = weight_map_of(model.name)
    if weight_map is None:
        raise ValueError(f"{model.name} has no reference (torchvision / timm) names to go by")
    named = []
    for layer in weighted_layers(model):
        module = weight_map.module_of(layer.name)
        if module is None:
            raise ValueError(f"{model.name}: layer {layer.name} has no reference name")
        named.extend((variable, f"{module}.{suffix}") for suffix, variable, _ in _layer_tensors(layer))
    return named


def load_reference(model, tensors: dict, weight_map: WeightMap, head: str = "keep", log=print) -> dict:
    """Sets every weight of `model` from a reference state dict, strictly. Returns what was loaded and
    skipped. head='new': everything but the classifier, which keeps its fresh initialization."""
    assignments, missing, mismatched, used = [], [], [], set()
    classifier_prefix = weight_map.classifier + "."
    for layer in weighted_layers(model):
        module = weight_map.module_of(layer.name)
        if module is None:
            missing.append(f"(no reference name for layer {layer.name})")
            continue
        if head == "new" and module == weight_map.classifier:
            continue
        for suffix, variable, to_keras in _layer_tensors(layer):
            key = f"{module}.{suffix}"
            if key not in tensors:
                missing.append(key)
                continue
            used.add(key)
            value = to_keras(tensors[key]) if to_keras else tensors[key]
            if weight_map.adapt:
                value = weight_map.adapt(layer.name, suffix, value)
            if tuple(value.shape) != tuple(variable.shape):
                mismatched.append(f"{key}: file {tuple(tensors[key].shape)}, model {layer.name} "
                                  f"{tuple(variable.shape)}")
            assignments.append((variable, value))
    leftover = [k for k in tensors if k not in used and not k.endswith(SKIPPED_BUFFERS)]
    skipped_aux = [k for k in leftover if k.startswith(weight_map.auxiliary or ("\0",))]
    skipped_head = [k for k in leftover if head == "new" and k.startswith(classifier_prefix)]
    unexpected = [k for k in leftover if k not in skipped_aux and k not in skipped_head]
    if missing or unexpected or mismatched:
        raise ValueError(_mismatch_message(model.name, weight_map.reference, missing, unexpected, mismatched))
    if head == "keep" and len(assignments) != len(model.weights):  # create_model left them unset: see there
        raise ValueError(f"{model.name}: the loading rules set {len(assignments)} of its {len(model.weights)} weights")
    for variable, value in assignments:
        variable.assign(value)
    if skipped_aux:
        log(f"tfcnn: skipped the auxiliary classifier's {len(skipped_aux)} tensors "
            f"({_prefixes(skipped_aux)}): this {model.name} has no auxiliary head")
    if skipped_head:
        log(f"tfcnn: new head: the file's classifier ({_prefixes(skipped_head)}) was not loaded; "
            f"{weight_map.classifier} starts from a fresh initialization")
    return {"loaded": len(assignments), "skipped": skipped_aux + skipped_head}


def _prefixes(keys):
    return ", ".join(sorted({k.rsplit(".", 1)[0] for k in keys})[:4])


def _mismatch_message(name, reference, missing, unexpected, mismatched, limit=6):
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", mismatched)):
        if keys:
            more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
            parts.append(f"{len(keys)} {label}: {'; '.join(keys[:limit])}{more}")
    return f"these weights do not fit {name} (a {reference} state dict expected): " + ". ".join(parts)


def load_tfcnn(model, source: Source, head: str = "keep", log=print) -> dict:
    """A tfcnn checkpoint into `model`: all variables (their moving average when it holds one and
    source.averaged), or with head='new' all but the classifier (restored into a twin with the
    checkpoint's class count, then copied over)."""
    if head == "keep":
        checkpoints.restore_model(source.checkpoint, model, source.averaged)
        return {"loaded": len(model.weights), "skipped": []}
    with without_initializers():  # every weight of the twin is restored next
        twin = build_model(model.name, source.num_classes, model.input_shape[1:], dict(source.options))
    checkpoints.restore_model(source.checkpoint, twin, source.averaged)
    kept = [(ours, theirs) for ours, theirs in zip(weighted_layers(model), weighted_layers(twin))
            if ours.name != CLASSIFIER_LAYER]
    for ours, theirs in kept:
        ours.set_weights(theirs.get_weights())
    log(f"tfcnn: new head: {CLASSIFIER_LAYER} starts from a fresh initialization; everything else comes "
        f"from {source.checkpoint}")
    return {"loaded": sum(len(ours.weights) for ours, _ in kept), "skipped": [CLASSIFIER_LAYER]}


def load_weights(model, weights, *, head: str = "keep", log=print) -> dict:
    """Loads `weights` (a path, or a Source from open_weights) into a zoo model built by create_model.

    head: 'keep' (the file's classifier must have the model's class count) or 'new' (load all but the
    classifier, which keeps its fresh initialization; for fine-tuning on other classes).
    Returns {"loaded": count, "skipped": [...], "data_config": DataConfig, "data_origin": str}.
    """
    if head not in HEADS:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, received: {head!r}")
    name = model.name
    source = weights if isinstance(weights, Source) else open_weights(name, weights)
    num_classes = checkpoints.model_classes(model)
    if head == "keep" and source.num_classes is not None and source.num_classes != num_classes:
        raise ValueError(f"weights {source.path}: the file's classifier has {source.num_classes} classes, the "
                         f"model {num_classes}: ask for a new head (head='new', --new_head) to load everything "
                         f"but the classifier")
    if source.kind == "reference":
        report = load_reference(model, source.tensors, weight_map_of(name), head, log)
    else:
        report = load_tfcnn(model, source, head, log)
    return {**report, "data_config": source.data_config, "data_origin": source.data_origin}
