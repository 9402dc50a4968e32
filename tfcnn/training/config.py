"""Training configuration: defaults < a named recipe < explicit overrides, validated in one place."""
from __future__ import annotations

import dataclasses
import json

from tfcnn.options import (DATA_BACKENDS, DEFAULT_STOP_SIGNALS, OPTIMIZERS, PRECISIONS, check_mixing, parse_policy,
                           parse_signals)

SCHEDULES = ("cosine", "step", "poly", "constant")
ITER_UNITS = ("epoch", "batch")
IMAGENET_TRAIN_IMAGES = 1_281_167  # what an "epoch" of synthetic data counts


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    model: str = "resnet50"
    data_dir: str | None = None  # None: synthetic data
    data_backend: str = "tf"  # tf (tf.data), dali_cpu or dali_gpu (NVIDIA DALI)
    num_classes: int | None = None  # None: from labels.txt beside the shards, else 1000
    image_size: int | None = None  # None: the model's input size
    batch_size: int = 256  # per GPU / process and micro-batch
    grad_accum_steps: int = 1  # micro-batches per optimizer step (gradient accumulation)
    optimizer_batch_size: int | None = None  # the global batch per optimizer step; sets grad_accum_steps
    num_iter: int = 90
    iter_unit: str = "epoch"
    precision: str = "fp32"
    use_xla: bool = False
    optimizer: str = "sgd"
    lr: float = 0.256  # per 256 images; scaled by the global batch
    lr_schedule: str = "cosine"
    warmup_epochs: float = 5.0
    lr_decay_epochs: tuple = (30, 60, 80)  # step schedule
    lr_decay_factor: float = 0.1  # step schedule
    poly_power: float = 2.0  # poly schedule
    momentum: float = 0.875  # SGD / RMSprop momentum; beta_1 for LAMB / AdamW
    beta_2: float = 0.999  # LAMB / AdamW beta_2, RMSprop's rho
    epsilon: float | None = None  # RMSprop / LAMB / AdamW; None: the optimizer's default
    weight_decay: float = 1 / 32768  # not applied to batch-norm parameters and biases
    label_smoothing: float = 0.1
    augment: str = "none"  # per-image policy: none, randaugment:N,M or autoaugment:imagenet
    mixup: float = 0.0  # MixUp's Beta alpha (0: off)
    cutmix: float = 0.0  # CutMix's Beta alpha (0: off)
    mix_switch_prob: float = 0.5  # with both on: the probability that a batch gets CutMix
    grad_compression: bool = False  # fp16 allreduce
    ema_decay: float = 0.0  # exponential moving average of the weights (0: off); evaluation and export use it
    seed: int | None = None  # initial weights, data order, augmentation; None: drawn once, kept in the log dir
    init_weights: str | None = None  # start from these weights (timm / torchvision file or tfcnn checkpoint)
    log_dir: str | None = None
    export_dir: str | None = None
    display_every: int = 100
    checkpoint_every: int = 1000  # steps; checkpoints are also written at each epoch end
    keep_checkpoints: int = 5
    benchmark_warmup_steps: int = 20  # excluded from the throughput summary
    predict: bool = False  # evaluate on the validation split after training
    elastic: bool = False  # under horovodrun's elastic mode: survive lost workers, take in new ones
    elastic_commit_every: int = 50  # steps between in-memory commits of the elastic state (and at epoch ends)
    stop_signals: str = DEFAULT_STOP_SIGNALS  # signals that stop the run cleanly at the next step (none: off)
    max_minutes: float = 0.0  # stop the same way after this many minutes of training (0: no limit)
    recipe: str | None = None

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


# NVIDIA's DeepLearningExamples recipes (TensorFlow ResNet50 v1.5 / ResNeXt101 / SE-ResNeXt101, 90 epochs,
# mixed precision). Inception V3 has no NVIDIA recipe: it takes the ResNet50 one at 299 px.
RECIPES = {
    "resnet50_90e": dict(model="resnet50", batch_size=256, precision="fp16", num_iter=90, iter_unit="epoch",
                         lr=0.256, lr_schedule="cosine", warmup_epochs=5, momentum=0.875,
                         weight_decay=1 / 32768, label_smoothing=0.1),
    "inception_v3_90e": dict(model="inception_v3", batch_size=128, precision="fp16", num_iter=90,
                             iter_unit="epoch", lr=0.256, lr_schedule="cosine", warmup_epochs=5, momentum=0.875,
                             weight_decay=1 / 32768, label_smoothing=0.1),
    "resnext101_32x4d_90e": dict(model="resnext101_32x4d", batch_size=128, precision="fp16", num_iter=90,
                                 iter_unit="epoch", lr=0.256, lr_schedule="cosine", warmup_epochs=8,
                                 momentum=0.875, weight_decay=1 / 16384, label_smoothing=0.1),
    "se_resnext101_32x4d_90e": dict(model="se_resnext101_32x4d", batch_size=96, precision="fp16", num_iter=90,
                                    iter_unit="epoch", lr=0.256, lr_schedule="cosine", warmup_epochs=8,
                                    momentum=0.875, weight_decay=1 / 16384, label_smoothing=0.1),
    # NVIDIA's 250-epoch recipes, the second table's (DeepLearningExamples PyTorch/Classification/ConvNets:
    # configs.yml, DGX A100, AMP; README results 78.46% / 80.08% / 81.01% top-1): 8 warmup epochs, cosine,
    # momentum 0.875, label smoothing 0.1, MixUp 0.2, lr 0.256 per 256 (2.048 at 2048, 1.024 at 1024),
    # weight decay 1/32768 for ResNet-50 (batch 256/GPU) and 1/16384 for the 101-layer ones (128/GPU).
    "resnet50_250e": dict(model="resnet50", batch_size=256, precision="fp16", num_iter=250, iter_unit="epoch",
                          lr=0.256, lr_schedule="cosine", warmup_epochs=8, momentum=0.875, weight_decay=1 / 32768,
                          label_smoothing=0.1, mixup=0.2),
    "resnext101_32x4d_250e": dict(model="resnext101_32x4d", batch_size=128, precision="fp16", num_iter=250,
                                  iter_unit="epoch", lr=0.256, lr_schedule="cosine", warmup_epochs=8,
                                  momentum=0.875, weight_decay=1 / 16384, label_smoothing=0.1, mixup=0.2),
    "se_resnext101_32x4d_250e": dict(model="se_resnext101_32x4d", batch_size=128, precision="fp16", num_iter=250,
                                     iter_unit="epoch", lr=0.256, lr_schedule="cosine", warmup_epochs=8,
                                     momentum=0.875, weight_decay=1 / 16384, label_smoothing=0.1, mixup=0.2),
    # NVIDIA's TF2 EfficientNet v1-B0 (DeepLearningExamples TensorFlow2/Classification/ConvNets:
    # efficientnet_v1/B0/training/AMP/convergence_8xA100-80G.sh with config/defaults.py and b0_cfg.py):
    # 500 epochs, batch 1024 per GPU, lr_init 0.005 per 128 images (= 0.01 per 256), cosine after 5 warmup
    # epochs, RMSprop (rho 0.9, momentum 0.9, epsilon 0.001), L2 5e-6 as a Keras regularizer, i.e. a
    # gradient of 1e-5 * w (tfcnn's weight_decay is that gradient factor), label smoothing 0.1, EMA 0.9999;
    # dropout 0.2 and stochastic depth 0.2 are efficientnet_b0's defaults; AutoAugment with the ImageNet
    # policy (--augmenter_name autoaugment). NVIDIA reports 77.59% top-1 (8x A100, mixed precision).
    "efficientnet_b0_500e": dict(model="efficientnet_b0", batch_size=1024, precision="fp16", num_iter=500,
                                 iter_unit="epoch", optimizer="rmsprop", lr=0.01, lr_schedule="cosine",
                                 warmup_epochs=5, momentum=0.9, beta_2=0.9, epsilon=0.001, weight_decay=1e-5,
                                 label_smoothing=0.1, ema_decay=0.9999, augment="autoaugment:imagenet"),
}


def make_config(recipe: str | None = None, **overrides) -> TrainConfig:
    """The config of `recipe` (if any) with `overrides` on top, validated. None overrides are ignored."""
    values = {}
    if recipe is not None:
        if recipe not in RECIPES:
            raise ValueError(f"unknown --recipe {recipe!r}; valid recipes: {', '.join(sorted(RECIPES))}")
        values.update(RECIPES[recipe])
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key, value in overrides.items():
        if key not in fields:
            raise ValueError(f"unknown training option {key!r}; valid options: {', '.join(sorted(fields))}")
        if value is not None:
            values[key] = value
    if "lr_decay_epochs" in values:
        values["lr_decay_epochs"] = tuple(values["lr_decay_epochs"])
    config = TrainConfig(recipe=recipe, **{k: v for k, v in values.items() if k != "recipe"})
    validate(config)
    return config


def validate(config: TrainConfig) -> None:
    """Raises ValueError naming the flag and the received value."""
    choices = (("precision", PRECISIONS), ("optimizer", OPTIMIZERS), ("lr_schedule", SCHEDULES),
               ("iter_unit", ITER_UNITS), ("data_backend", DATA_BACKENDS))
    for name, valid in choices:
        if getattr(config, name) not in valid:
            raise ValueError(f"--{name} must be one of {', '.join(valid)}, received: {getattr(config, name)!r}")
    positive = ("batch_size", "num_iter", "display_every", "keep_checkpoints", "elastic_commit_every",
                "grad_accum_steps")
    for name in positive:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"--{name} must be a positive integer, received: {value!r}")
    for name in ("num_classes", "image_size", "optimizer_batch_size"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"--{name} must be a positive integer, received: {value!r}")
    non_negative = ("lr", "warmup_epochs", "weight_decay", "momentum", "checkpoint_every",
                    "benchmark_warmup_steps", "max_minutes")
    for name in non_negative:
        if getattr(config, name) < 0:
            raise ValueError(f"--{name} must be >= 0, received: {getattr(config, name)!r}")
    if not 0 <= config.label_smoothing < 1:
        raise ValueError(f"--label_smoothing must be in [0, 1), received: {config.label_smoothing!r}")
    parse_policy(config.augment)
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
    from tfcnn.models import list_models  # last: the zoo loads TensorFlow, the checks above do not

    if config.model not in list_models():
        raise ValueError(f"unknown --model {config.model!r}; valid models: {', '.join(list_models())}")
