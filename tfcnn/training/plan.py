"""What a run resolves before it builds anything: its config filled in and checked against the data,
the log directory and the initial weights, and the step arithmetic.

Where the weights come from, in order: the latest checkpoint of --log_dir (a resume; --init_weights is
then ignored, and the log says so), else --init_weights (a timm / torchvision state dict or a tfcnn
checkpoint: rank 0 reads it, the others receive the weights by broadcast), else a fresh initialization.
The builder options and the data config (input size, crop, mean/std, interpolation, evaluation view) come with
them; --mean, --std and --eval_crop replace the data config's.
"""
from __future__ import annotations

import dataclasses
import json
import os

from tfcnn import checkpoints, distributed
from tfcnn.data import pipeline
from tfcnn.data.preprocessing import TRAIN_VIEWS
from tfcnn.models import DataConfig, model_info
from tfcnn.training.config import (IMAGENET_TRAIN_IMAGES, SMALL_IMAGES, WARMUP_EPOCHS, WARMUP_SHARE, TrainConfig,
                                   validate)

CONFIG_FILE = "config.json"
# What runs made before a field existed did: no accumulation, Keras' SGD momentum.
OLDER_RUNS = {"grad_accum_steps": 1, "momentum_form": "keras"}


@dataclasses.dataclass
class Plan:
    """What a run resolved from its config, its data, its log directory and its initial weights."""
    config: TrainConfig  # num_classes, image_size and seed filled in
    global_batch: int
    steps_per_epoch: int
    total_steps: int
    data_config: DataConfig  # what the model is fed: input_size is the run's image size
    options: dict  # builder options (e.g. from reference weights)
    start_step: int = 0
    checkpoint: str | None = None  # the checkpoint to resume from
    init: object = None  # weights.Source to start from (on rank 0; None on the others and when resuming)
    init_classes: int | None = None  # the class count of the initial weights' classifier
    # Progress in images, which is what epochs are: an elastic run changes global_batch with the world size.
    epoch_images: int = 0  # images per epoch (steps_per_epoch x global_batch; an elastic run: the records)
    start_images: int = 0  # images trained on before start_step
    notes: list = dataclasses.field(default_factory=list)  # options set far from their intended use, one line each

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def image_size(self) -> int:
        return self.config.image_size

    def images_at(self, step: int) -> int:
        """Images trained on after `step` (of this plan's global batch since start_step)."""
        return self.start_images + (step - self.start_step) * self.global_batch

    def epoch_at(self, step: int) -> float:
        return self.images_at(step) / self.epoch_images

    def ends_epoch(self, step: int) -> bool:
        return self.images_at(step) // self.epoch_images > self.images_at(step - 1) // self.epoch_images


def make_plan(config: TrainConfig, train_records: int | None = None) -> Plan:
    """The plan of `config`. train_records: the size of an epoch of training data held in memory (the
    run's batches come from elsewhere); None: count the records of config.data_dir (synthetic data: an
    ImageNet epoch)."""
    validate(config)
    checkpoint = checkpoints.latest_checkpoint(config.log_dir) if config.log_dir else None
    options, data, init, init_classes = _starting_weights(config, checkpoint)
    if not checkpoint:  # a resumed run keeps what its checkpoint records
        options = {**options, **(config.model_options or {})}
        data = data.replace(mean=config.mean, std=config.std, eval_crop=config.eval_crop)
    previous = previous_config(config.log_dir)  # the run already in --log_dir, whose unset values a rerun keeps
    info = model_info(config.model)
    from_scratch = not (checkpoint or config.init_weights)
    input_size, size_notes = _default_image_size(config, data.input_size, info.min_size, from_scratch)
    config = _resolve(_resolve_accumulation(config, distributed.size()), input_size, previous)
    if config.image_size < info.min_size:
        raise ValueError(f"--image_size must be >= {info.min_size} for {config.model}, received: {config.image_size}")
    global_batch = config.rank_batch * distributed.size()
    if train_records is not None:
        records = train_records
    elif config.data_dir:
        records = pipeline.count_records(config.data_dir, pipeline.list_shards(config.data_dir, "train"))
        if config.predict:  # said before the training, not after it (a rerun of a complete run evaluates nothing)
            pipeline.list_shards(config.data_dir, "validation")
    else:
        records = IMAGENET_TRAIN_IMAGES
    steps_per_epoch = records // global_batch
    if config.elastic and not distributed.is_elastic():
        raise ValueError("--elastic needs horovodrun's elastic mode (horovodrun -np N --min-np N --max-np M "
                         "--host-discovery-script SCRIPT ...; README 'Many machines'); this process was "
                         "started without it: drop --elastic, or launch it that way")
    if config.elastic and config.iter_unit != "epoch":
        raise ValueError("--elastic needs --iter_unit epoch: how many images a batch is depends on the world size")
    if steps_per_epoch < 1:
        accumulated = f" x {config.grad_accum_steps} accumulated" if config.grad_accum_steps > 1 else ""
        per_step = config.batch_size * distributed.size()
        if config.optimizer_batch_size and records >= per_step:  # it sets the accumulation: a smaller one fits
            way_out = (f"pass an --optimizer_batch_size of at most {records // per_step * per_step} (a multiple of "
                       f"--batch_size x ranks = {per_step})")
        else:
            fits = records // (config.grad_accum_steps * distributed.size())  # the largest batch_size that fills one
            way_out = f"pass a --batch_size of at most {fits}" if fits else "use fewer ranks or accumulation steps"
            if config.optimizer_batch_size:
                way_out = (f"pass a --batch_size of at most {records // distributed.size()} and an "
                           f"--optimizer_batch_size of a multiple of it x ranks")
        raise ValueError(f"{records} training images cannot fill one global batch of {global_batch} "
                         f"(--batch_size {config.batch_size}{accumulated} x {distributed.size()} ranks): {way_out}")
    total = config.num_iter * steps_per_epoch if config.iter_unit == "epoch" else config.num_iter
    notes = size_notes + far_from_intended_use(config, total / steps_per_epoch, info.input_size)
    config = _fit_defaults(config, total / steps_per_epoch, info.input_size, previous)
    # An elastic run counts epochs in records: the same on every rank whatever the world size.
    plan = Plan(config, global_batch, steps_per_epoch, total, data.replace(input_size=config.image_size), options,
                checkpoint=checkpoint, init=init, init_classes=init_classes,
                epoch_images=records if config.elastic else steps_per_epoch * global_batch, notes=notes)
    if checkpoint:
        record = checkpoints.check_compatible(checkpoint, config.model, config.num_classes,
                                              f"--log_dir {config.log_dir}")
        plan.start_step = record.step
        plan.start_images = record.step * global_batch  # an elastic run restores its own count of images
        if plan.start_step > total and not config.elastic:
            raise ValueError(
                f"--num_iter {config.num_iter} --iter_unit {config.iter_unit} ({total} steps) is below step "
                f"{plan.start_step} of the latest checkpoint in --log_dir {config.log_dir}: that run already "
                f"went further. Pass --num_iter of at least its length to continue it, or another --log_dir")
        planned = previous and (previous.get("num_iter"), previous.get("iter_unit"))
        if planned and planned != (config.num_iter, config.iter_unit) and config.lr_schedule != "constant":
            plan.notes.append(f"note: the run in --log_dir {config.log_dir} was planned as --num_iter {planned[0]} "
                              f"--iter_unit {planned[1]}; resumed at step {plan.start_step} to {total} steps, its "
                              f"{config.lr_schedule} learning-rate schedule spans the {total}: from here on each "
                              f"step takes the rate the new length gives it, not the one the planned run would have")
    return plan


def _starting_weights(config: TrainConfig, checkpoint: str | None):
    """(builder options, data config, weights.Source on rank 0 or None, their class count)."""
    info = model_info(config.model)
    if checkpoint:
        record = checkpoints.describe(checkpoint)
        data = DataConfig.from_dict(record.data_config) if record.data_config else info.data_config
        return record.options, data, None, None
    if not config.init_weights:
        return {}, info.data_config, None, None
    init = None
    # Rank 0 reads the file and tells the others. An elastic run issues no collective before its first
    # sync (a worker joining later could not match it): every rank reads the file's metadata itself.
    if distributed.is_chief() or config.elastic:
        from tfcnn.models.weights import open_weights

        try:
            init = open_weights(config.model, config.init_weights)
            meta = (init.options, init.data_config.to_dict(), init.num_classes, None)
        except ValueError as error:  # every rank must stop, not only the one that read the file
            meta = (None, None, None, f"--init_weights: {error}")
    else:
        meta = None
    options, data, classes, error = meta if config.elastic else distributed.broadcast_object(meta)
    if error:
        raise ValueError(error)
    return options, DataConfig.from_dict(data), init, classes


def _resolve_accumulation(config: TrainConfig, ranks: int) -> TrainConfig:
    """grad_accum_steps from --optimizer_batch_size (the global batch an optimizer step sees), which must
    be a multiple of --batch_size x ranks and agree with an explicit --grad_accum_steps."""
    if config.optimizer_batch_size is None:
        return config
    per_step = config.batch_size * ranks
    steps, remainder = divmod(config.optimizer_batch_size, per_step)
    if remainder or steps < 1:
        raise ValueError(f"--optimizer_batch_size {config.optimizer_batch_size} must be a multiple of --batch_size "
                         f"{config.batch_size} x {ranks} rank(s) = {per_step}: each optimizer step accumulates "
                         f"whole micro-batches on every rank")
    if config.grad_accum_steps not in (1, steps):
        raise ValueError(f"--grad_accum_steps {config.grad_accum_steps} contradicts --optimizer_batch_size "
                         f"{config.optimizer_batch_size} ({steps} micro-batches of {config.batch_size} on {ranks} "
                         f"rank(s)): give one of them")
    return dataclasses.replace(config, grad_accum_steps=steps)


def _default_image_size(config: TrainConfig, input_size: int, min_size: int,
                        from_scratch: bool) -> tuple[int, list[str]]:
    """The image size a run takes without --image_size, and a note when it is not the model's: the input size of
    the model (or of its initial weights), but a model trained from scratch on records of smaller images takes
    theirs (the median shorter side of a sample), as it takes the size of arrays in memory. Upscaled, small images
    train many times slower and learn worse: 32 px digits, 2 epochs of ResNet-18 from the records reached 87.5%
    top-1 in 14 s at 32 px and 25.8% in 3.6 minutes at 224 (CHANGELOG, 2026-12-06)."""
    if config.image_size or not from_scratch or not config.data_dir:
        return input_size, []
    stored = pipeline.stored_image_size(config.data_dir)
    if not stored or stored >= input_size:
        return input_size, []
    size = max(stored, min_size)
    raised = f", raised to {config.model}'s smallest" if size > stored else ""
    return size, [f"note: image size {size} px: the training records' images are {stored} px (the median shorter "
                  f"side of a sample){raised}, not {config.model}'s {input_size}; --image_size sets another"]


def _resolve(config: TrainConfig, weights_input_size: int, previous: dict | None) -> TrainConfig:
    """Fills in num_classes, image_size and seed; checks them against the `previous` run's config."""
    num_classes = config.num_classes or pipeline.num_classes_of(config.data_dir)
    image_size = config.image_size or weights_input_size
    seed = config.seed if config.seed is not None else (previous or {}).get("seed")
    if seed is None:
        # From the OS, not `random`: an earlier run in this process may have seeded `random`. (An elastic
        # run keeps its own draw: its state sync hands rank 0's to every rank.)
        seed = int.from_bytes(os.urandom(4), "little") >> 1
        seed = seed if config.elastic else distributed.broadcast_object(seed)
    if previous:
        kept = [("model", config.model), ("num_classes", num_classes), ("image_size", image_size),
                ("batch_size", config.batch_size), ("grad_accum_steps", config.grad_accum_steps)]
        if config.optimizer == "sgd":  # the velocity means another thing in the other form
            kept.append(("momentum_form", config.momentum_form))
        for key, now in kept:
            if previous.get(key, OLDER_RUNS.get(key)) != now:
                then = previous.get(key, OLDER_RUNS.get(key))
                raise ValueError(f"--log_dir {config.log_dir} holds a run with {key} {then!r}, not "
                                 f"--{key} {now!r}: use another --log_dir, or the same --{key} to resume")
    return dataclasses.replace(config, num_classes=num_classes, image_size=image_size, seed=seed)


def _fit_defaults(config: TrainConfig, epochs: float, input_size: int, previous: dict | None) -> TrainConfig:
    """--warmup_epochs and --train_crop when unset: WARMUP_EPOCHS, at most WARMUP_SHARE of the run's `epochs` (the
    `previous` run's, resumed); "small" at up to SMALL_IMAGES of the model's `input_size`, else "torchvision"."""
    warmup = config.warmup_epochs
    if warmup is None:
        warmup = (previous or {}).get("warmup_epochs")
    if warmup is None:
        warmup = min(WARMUP_EPOCHS, round(WARMUP_SHARE * epochs, 4))
    crop = config.train_crop or ("small" if _small(config.image_size, input_size) else "torchvision")
    return dataclasses.replace(config, warmup_epochs=warmup, train_crop=crop)


def _small(image_size: int, input_size: int) -> bool:
    """Whether images of image_size are small for a model of input_size, for which ImageNet's crop is made."""
    return image_size <= SMALL_IMAGES * input_size


def far_from_intended_use(config: TrainConfig, epochs: float, input_size: int) -> list[str]:
    """A line for each option set (by the user or a recipe) far from what it was made for: a warmup of more than
    half the run, an ImageNet crop of images at up to SMALL_IMAGES of the model's input size."""
    notes = []
    if config.warmup_epochs is not None and config.warmup_epochs > epochs / 2:
        notes.append(f"note: --warmup_epochs {config.warmup_epochs:g} is more than half of this {epochs:g}-epoch "
                     f"run: the learning rate peaks late and decays at once. Unset, the warmup is at most "
                     f"{WARMUP_SHARE:.0%} of the run")
    crop = config.train_crop
    if crop not in (None, "small", "none") and _small(config.image_size, input_size):
        notes.append(f"note: --train_crop {crop} crops as little as {TRAIN_VIEWS[crop].area[0]:.0%} of an image, "
                     f"made for photos at the model's {input_size} px; at --image_size {config.image_size} small "
                     f"images learn faster with --train_crop small (keeping {TRAIN_VIEWS['small'].area[0]:.0%} or "
                     f"more), the default at this size")
    return notes


def previous_config(log_dir):
    path = os.path.join(log_dir, CONFIG_FILE) if log_dir else None
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)
