"""Training configuration: defaults < a named recipe < explicit overrides, validated in one place."""
from __future__ import annotations

import dataclasses
import json
import numbers
import os

from tfcnn.options import (DATA_BACKENDS, DEFAULT_STOP_SIGNALS, EVAL_CROPS, LARC_MODES, LR_GRANULARITIES,
                           MOMENTUM_FORMS, OPTIMIZERS, PRECISIONS, TRAIN_CROPS, WEIGHT_DECAY_SETS, WEIGHT_INITS,
                           check_mixing, parse_loss_scale, parse_model_options, parse_policy, parse_signals)
from tfcnn.recipes import RECIPES, get_recipe
from tfcnn.sources import check_export_dir

SCHEDULES = ("cosine", "step", "poly", "constant")
ITER_UNITS = ("epoch", "batch")
IMAGENET_TRAIN_IMAGES = 1_281_167  # what an "epoch" of synthetic data counts
# What a run that leaves --warmup_epochs and --train_crop unset gets (tfcnn.training.plan): ImageNet's 5 warmup
# epochs and torchvision's crop where they were made for (images near the model's input size, long runs), else a
# warmup and a view that small images and short runs learn with (docs/training.md; measured in CHANGELOG.md,
# 2026-12-04).
WARMUP_EPOCHS = 5.0
WARMUP_SHARE = 0.1  # the default warmup is at most this share of the run
SMALL_IMAGES = 0.5  # at most this share of the model's input size, the default view is "small"


def option(default, help_text: str):
    """A TrainConfig field with its help text: the one place each flag is described (examples/train.py's
    flags and the docs' flag reference are generated from these)."""
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    model: str = option("resnet50", "model name (python -m tfcnn.models lists them)")
    data_dir: str | None = option(None, "directory of TFRecord shards made by imagenet_prep; absent: synthetic data")
    data_backend: str = option("tf", "input pipeline: tf (tf.data), dali_cpu or dali_gpu (NVIDIA DALI, decoding on the "
                                     "CPU or the GPU; make install DALI=1)")
    num_classes: int | None = option(None, "default: the number of lines of labels.txt beside the shards, else 1000")
    image_size: int | None = option(None, "default: the model's (or --init_weights') input size; from scratch on "
                                          "records of smaller images, theirs (arrays in memory: their size); smaller "
                                          "sizes let small datasets and CPUs train")
    batch_size: int = option(256, "images per GPU (per process) and micro-batch (a step, without accumulation)")
    grad_accum_steps: int = option(1, "micro-batches per optimizer step on every rank (gradient accumulation): the "
                                      "global batch is batch_size x ranks x this")
    optimizer_batch_size: int | None = option(None, "the global batch of an optimizer step, e.g. a recipe's 2048 on "
                                                    "fewer GPUs: sets --grad_accum_steps to it / (batch_size x ranks), "
                                                    "which must divide it")
    num_iter: int = option(90, "training length, in --iter_unit")
    iter_unit: str = option("epoch", "epoch or batch")
    precision: str = option("fp32", "fp32, fp16 (mixed, with --loss_scale), bf16 (mixed) or fp64 (float64 throughout, "
                                    "CPU only: for checking numerics against a reference)")
    loss_scale: str = option("dynamic", "fp16 loss scaling: dynamic (from 128, doubled after 100 steps without "
                                        "overflow, halved and the step skipped on one: NVIDIA's PyTorch GradScaler "
                                        "settings) or a number (a static scale, never skipping a step)")
    use_xla: bool = option(False, "XLA-compile the forward and backward pass")
    optimizer: str = option("sgd", "sgd (momentum), rmsprop, lamb or adamw")
    lr: float = option(0.256, "learning rate per 256 images (scaled by the global batch)")
    lr_schedule: str = option("cosine", "cosine, step, poly or constant (after the linear warmup)")
    lr_granularity: str = option("step", "how often the learning rate changes: every step, or at each epoch's start "
                                         "(epoch: NVIDIA's PyTorch ConvNets)")
    warmup_epochs: float | None = option(None, f"linear learning-rate warmup length; default: {WARMUP_EPOCHS:g} "
                                               f"epochs, at most {WARMUP_SHARE:.0%} of the run")
    lr_decay_epochs: tuple = option((30, 60, 80), "step schedule: epochs at which the rate is multiplied by "
                                                  "--lr_decay_factor")
    lr_decay_factor: float = option(0.1, "step schedule factor")
    poly_power: float = option(2.0, "poly schedule exponent")
    momentum: float = option(0.875, "SGD / RMSprop momentum (beta_1 for lamb/adamw)")
    momentum_form: str = option("pytorch", "SGD's momentum: pytorch (v = m v + g; w -= lr v: PyTorch's and TF1's, so "
                                           "NVIDIA's) or keras (v = m v - lr g; w += v); they differ once the rate "
                                           "changes")
    nesterov: bool = option(False, "Nesterov momentum (SGD)")
    beta_2: float = option(0.999, "lamb/adamw beta_2; RMSprop's rho")
    epsilon: float | None = option(None, "rmsprop/lamb/adamw epsilon (default: the optimizer's own)")
    larc_eta: float = option(0.0, "LARC's eta (0: off): each variable's gradient scaled by eta ||w|| / ||g||, as "
                                  "NVIDIA's nvutils (0.003 in its scripts)")
    larc_mode: str = option("clip", "LARC: clip (the local rate is at most the global one: min(eta ||w|| / ||g|| / "
                                    "lr, 1)) or scale")
    weight_decay: float = option(1 / 32768, "weight decay (L2 gradient factor) on --weight_decay_set")
    weight_decay_set: str = option("kernels", "what weight decay applies to: kernels (conv and dense kernels), "
                                              "no_bn (all but batch-norm parameters: NGC's nvutils) or no_bn_names (all "
                                              "whose torchvision name lacks 'bn': NVIDIA's PyTorch ConvNets)")
    label_smoothing: float = option(0.1, "label smoothing (of the mixed targets too)")
    weight_init: str = option("model", "initialization of a fresh model: model (each family's own), kaiming_fan_in / "
                                       "kaiming_fan_out (He normal convs, PyTorch's default for linear layers: "
                                       "NVIDIA's PyTorch ConvNets use fan_in), glorot_uniform (TF1's default: NGC)")
    model_options: dict | None = option(None, "builder options, e.g. zero_init_residual=false,dropout_rate=0.2,"
                                              "bn_epsilon=1e-4 (python -m tfcnn.models NAME lists a model's)")
    train_crop: str | None = option(None, "training view: torchvision (RandomResizedCrop, antialiased resize: "
                                          "NVIDIA's PyTorch ConvNets), small (the same, keeping more of the image), "
                                          "inception (sample_distorted_bounding_box on the records' boxes), ngc (NGC's "
                                          "scripts) or none (the whole image, resized if it is not the training size, "
                                          "not flipped: data already prepared); default: small at up to "
                                          f"{SMALL_IMAGES:.0%} of the model's input size, else torchvision")
    eval_crop: str | None = option(None, "evaluation view the run's checkpoints and exports record: torchvision "
                                         "(resize the shorter side, centre crop) or ngc (the NGC scripts' central "
                                         "80% crop resized to the input size); default: the model's")
    mean: tuple | None = option(None, "normalization mean per RGB channel, 0-255 (default: the model's)")
    std: tuple | None = option(None, "normalization std per RGB channel, 0-255 (default: the model's)")
    augment: str = option("none", "per-image training policy: none, randaugment:N,M (N ops of magnitude M, e.g. "
                                  "randaugment:2,9) or autoaugment:imagenet")
    mixup: float = option(0.0, "MixUp: Beta(alpha, alpha) blend of each batch with a permutation of itself (e.g. 0.2; "
                               "0: off)")
    cutmix: float = option(0.0, "CutMix: a box of a permutation of the batch pasted in, area from Beta(alpha, alpha) "
                                "(e.g. 1.0; 0: off)")
    mix_switch_prob: float = option(0.5, "with both --mixup and --cutmix: the probability that a batch gets CutMix")
    grad_compression: bool = option(False, "allreduce gradients in fp16")
    ema_decay: float = option(0.0, "keep an exponential moving average of the weights with this decay (e.g. 0.9999; 0: "
                                   "off); evaluation, --predict, the export and checkpoint-based evaluation use the "
                                   "average")
    seed: int | None = option(None, "seed of the initial weights, data order and augmentation (default: drawn once, "
                                    "kept in --log_dir)")
    init_weights: str | None = option(None, "start from these weights: a timm / torchvision state dict (.safetensors, "
                                            "or .pth with torch installed) or a tfcnn checkpoint, log dir or convert "
                                            "output; another --num_classes gets a new classifier. A checkpoint in "
                                            "--log_dir (a resume) takes precedence")
    log_dir: str | None = option(None, "checkpoints, metrics.jsonl, TensorBoard logs and config.json; reuse it to "
                                       "resume")
    export_dir: str | None = option(None, "write a SavedModel here at the end")
    display_every: int = option(100, "print and log metrics every N steps")
    checkpoint_every: int = option(1000, "write a checkpoint every N steps (0: only at epoch ends)")
    keep_checkpoints: int = option(5, "keep the last K checkpoints")
    benchmark_warmup_steps: int = option(20, "steps excluded from the throughput summary")
    predict: bool = option(False, "after training, evaluate on the validation split (rank 0, one GPU)")
    validation_every: int = option(1, "with val_data (tfcnn.train from Python): evaluate it at the end of every N-th "
                                      "epoch and after the last step, every example once over all ranks (0: after the "
                                      "last step only)")
    elastic: bool = option(False, "elastic training under horovodrun --min-np/--max-np/--host-discovery-script "
                                  "(Gloo): survive lost workers and take in new ones; each rank keeps --batch_size, "
                                  "the lr follows the global batch")
    elastic_commit_every: int = option(50, "with --elastic: steps between in-memory commits of the training state "
                                           "(also at epoch ends); a lost worker costs at most these steps")
    stop_signals: str = option(DEFAULT_STOP_SIGNALS, "signals that stop the run cleanly: every rank stops after the "
                                                     "same step, rank 0 writes its checkpoint, the exit status is 75 "
                                                     "(resume me); comma-separated TERM, INT, USR1, USR2, HUP, or none")
    max_minutes: float = option(0.0, "stop the same way after this many minutes of training, before a job's time "
                                     "limit (0: none)")
    recipe: str | None = option(None, "named recipe (python -m tfcnn.recipes lists them with their sources): "
                                      + ", ".join(RECIPES))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @property
    def stoppable(self) -> bool:
        """Whether the run may stop early and cleanly: on a --stop_signals signal or at --max_minutes."""
        return bool(parse_signals(self.stop_signals)) or self.max_minutes > 0

    @property
    def rank_batch(self) -> int:
        """Images each rank reads per optimizer step: batch_size micro-batches, grad_accum_steps of them."""
        return self.batch_size * self.grad_accum_steps


def make_config(recipe: str | None = None, **overrides) -> TrainConfig:
    """The config of `recipe` (if any) with `overrides` on top, validated. None overrides are ignored."""
    values = dict(get_recipe(recipe).config) if recipe is not None else {}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key, value in overrides.items():
        if key not in fields:
            raise ValueError(f"unknown training option {key!r}; valid options: {', '.join(sorted(fields))}")
        if key == "model_options" and value is not None:  # the user's options on top of the recipe's
            value = {**parse_model_options(values.get(key)), **parse_model_options(value)}
        if isinstance(value, os.PathLike):  # a notebook's pathlib.Path: config.json and the logs hold strings
            value = os.fspath(value)
        if value is not None:
            values[key] = value
    for key in ("lr_decay_epochs", "mean", "std"):  # a list, one number alone, or the flag's comma-separated text
        value = values.get(key)
        if value is not None:
            items = (value.split(",") if isinstance(value, str) else
                     [value] if isinstance(value, numbers.Real) else value)
            values[key] = tuple(_number(v) for v in items)
    if values.get("model_options") is not None:
        values["model_options"] = parse_model_options(values["model_options"])
    if values.get("loss_scale") is not None:
        values["loss_scale"] = str(values["loss_scale"])
    config = TrainConfig(recipe=recipe, **{k: v for k, v in values.items() if k != "recipe"})
    validate(config)
    return config


def _number(value):
    """A flag's list item as a number when it is one (validate names what is not)."""
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


# What an option's annotation asks for, as an error says it (numbers.Real takes ints and NumPy's numbers too).
_KINDS = {"float": (numbers.Real, "a number"), "int": (numbers.Integral, "an integer"), "bool": (bool, "True or False")}


def _check_types(config: TrainConfig) -> None:
    """A number, integer or flag of another type (lr="0.1", predict="no") is named here, not met as a TypeError
    inside a comparison, or taken for true."""
    for field in dataclasses.fields(TrainConfig):
        kind, _, optional = field.type.partition(" | ")
        value = getattr(config, field.name)
        if kind not in _KINDS or (optional and value is None):
            continue
        expected, words = _KINDS[kind]
        if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
            raise ValueError(f"--{field.name} must be {words}, received: {value!r}")
    if not all(isinstance(v, numbers.Real) for v in config.lr_decay_epochs):
        raise ValueError(f"--lr_decay_epochs must be numbers (epochs), received: {list(config.lr_decay_epochs)}")


def validate(config: TrainConfig) -> None:
    """Raises ValueError naming the flag and the received value."""
    choices = (("precision", PRECISIONS), ("optimizer", OPTIMIZERS), ("lr_schedule", SCHEDULES),
               ("iter_unit", ITER_UNITS), ("data_backend", DATA_BACKENDS), ("momentum_form", MOMENTUM_FORMS),
               ("larc_mode", LARC_MODES), ("weight_decay_set", WEIGHT_DECAY_SETS),
               ("lr_granularity", LR_GRANULARITIES), ("weight_init", WEIGHT_INITS), ("train_crop", TRAIN_CROPS))
    for name, valid in choices:
        if getattr(config, name) not in valid and not (name == "train_crop" and config.train_crop is None):
            raise ValueError(f"--{name} must be one of {', '.join(valid)}, received: {getattr(config, name)!r}")
    positive = ("batch_size", "num_iter", "display_every", "keep_checkpoints", "elastic_commit_every",
                "grad_accum_steps")
    for name in positive:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"--{name} must be a positive integer, received: {value!r}")
    if isinstance(config.validation_every, bool) or not isinstance(config.validation_every, int) \
            or config.validation_every < 0:
        raise ValueError(f"--validation_every must be an integer >= 0 (epochs; 0: after the last step only), "
                         f"received: {config.validation_every!r}")
    for name in ("num_classes", "image_size", "optimizer_batch_size"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"--{name} must be a positive integer, received: {value!r}")
    _check_types(config)
    non_negative = ("lr", "warmup_epochs", "weight_decay", "momentum", "checkpoint_every",
                    "benchmark_warmup_steps", "max_minutes", "larc_eta")
    for name in non_negative:
        if getattr(config, name) is not None and getattr(config, name) < 0:
            raise ValueError(f"--{name} must be >= 0, received: {getattr(config, name)!r}")
    if not 0 <= config.label_smoothing < 1:
        raise ValueError(f"--label_smoothing must be in [0, 1), received: {config.label_smoothing!r}")
    if config.eval_crop is not None and config.eval_crop not in EVAL_CROPS:
        raise ValueError(f"--eval_crop must be one of {', '.join(EVAL_CROPS)}, received: {config.eval_crop!r}")
    parse_policy(config.augment)
    parse_loss_scale(config.loss_scale)
    for name in ("mean", "std"):
        value = getattr(config, name)
        if value is not None:
            try:
                numbers = [float(v) for v in value]
            except (TypeError, ValueError):
                numbers = []
            if len(numbers) != 3 or (name == "std" and min(numbers) <= 0):
                raise ValueError(f"--{name} must be 3 numbers on the 0-255 scale, one per RGB channel"
                                 f"{' (all > 0)' if name == 'std' else ''}, received: {value!r}")
    parse_signals(config.stop_signals)
    check_mixing(config.mixup, config.cutmix, config.mix_switch_prob)
    if not 0 <= config.ema_decay < 1:
        raise ValueError(f"--ema_decay must be in [0, 1) (0: off), received: {config.ema_decay!r}")
    if config.epsilon is not None and not config.epsilon > 0:
        raise ValueError(f"--epsilon must be > 0, received: {config.epsilon!r}")
    if not 0 <= config.momentum < 1 or not 0 <= config.beta_2 < 1:
        raise ValueError(f"--momentum and --beta_2 must be in [0, 1), received: {config.momentum!r}, "
                         f"{config.beta_2!r}")
    if list(config.lr_decay_epochs) != sorted(config.lr_decay_epochs):
        raise ValueError(f"--lr_decay_epochs must be increasing, received: {list(config.lr_decay_epochs)}")
    if config.predict and config.data_dir is None:
        raise ValueError("--predict needs --data_dir (it evaluates on the validation shards)")
    if config.log_dir and os.path.exists(config.log_dir) and not os.path.isdir(config.log_dir):
        raise ValueError(f"--log_dir {config.log_dir} is a file: name a directory (a new one, or a run's to resume)")
    if config.export_dir:
        check_export_dir(config.export_dir, "--export_dir")  # before training, not after it
    from tfcnn.models.registry import check_model, model_overrides  # last: the zoo loads TensorFlow

    check_model(config.model, "--model")
    unknown = sorted(set(config.model_options or {}) - set(model_overrides(config.model)))
    if unknown:
        raise ValueError(f"--model_options: {config.model} has no option {', '.join(unknown)}; its options: "
                         f"{', '.join(model_overrides(config.model))}")
