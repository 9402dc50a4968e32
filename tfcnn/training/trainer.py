"""Horovod data-parallel, mixed-precision training on Keras `fit`, with our own train_step.

One step on every rank: normalize the rank's uint8 batch and run forward/backward (XLA-compiled with
use_xla; Horovod's ops stay outside XLA), average the (still loss-scaled) gradients over ranks, then
apply them. In fp16 the LossScaleOptimizer unscales and checks the *averaged* gradients, so every
rank takes the same skip-or-apply decision and lowers the loss scale together.

Side effects (printing, metrics.jsonl, TensorBoard, checkpoints, export) happen on rank 0; the
collectives around them (metric averaging, batch-norm statistics averaging) run on every rank at the
same steps, so no rank ever waits on another.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

import tensorflow as tf

from tfcnn import distributed
from tfcnn.fileio import atomic_write_text
from tfcnn.data import pipeline, preprocessing
from tfcnn.models import create_model, model_info
from tfcnn.precision import hardware_notes, set_policy
from tfcnn import checkpoints
from tfcnn.training.config import IMAGENET_TRAIN_IMAGES, TrainConfig, validate
from tfcnn.training.optimizers import build_optimizer, decayed_variables, l2_penalty, optimizer_variables
from tfcnn.training.schedules import WarmupDecay

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"


class NonFiniteLossError(RuntimeError):
    pass


class ClassifierTrainer(tf.keras.Model):
    """Wraps a zoo model with the distributed train_step. The zoo model stays pure (no loss, no LR,
    no Horovod); checkpoints and exports use it directly."""

    def __init__(self, model, num_classes, *, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), label_smoothing=0.0,
                 weight_decay=0.0, coupled_l2=False, loss_scale=False, use_xla=False, grad_compression=False,
                 stop_on_nonfinite=True):
        super().__init__(name="trainer")
        self.model = model
        self.num_classes = num_classes
        self.mean, self.std = mean, std
        self.loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing)
        self.l2_variables = decayed_variables(model.trainable_variables) if coupled_l2 and weight_decay else []
        self.weight_decay = weight_decay
        self.loss_scale = loss_scale
        self.grad_compression = grad_compression
        self.stop_on_nonfinite = stop_on_nonfinite
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.first_nonfinite_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="first_nonfinite_step")
        self.loss_metric = tf.keras.metrics.Mean("loss")
        self.top1_metric = tf.keras.metrics.SparseCategoricalAccuracy("top1")
        self._gradients = tf.function(self.compute_gradients, jit_compile=use_xla)
        self.fixed_batch = None

    def keep_batch_on_device(self, images, labels):
        """Trains on this one batch at every step, held in variables on the compute device (a GPU when
        there is one): synthetic-data runs then measure the model, not host-to-device copies. The images
        are held as float32 0-255 (GPUs hold float variables for sure; normalization casts anyway)."""
        self.fixed_batch = (tf.Variable(tf.cast(images, tf.float32), trainable=False, name="synthetic_images"),
                            tf.Variable(labels, trainable=False, name="synthetic_labels"))

    def call(self, images, training=False):
        return self.model(self.normalize(images), training=training)

    def normalize(self, images):
        """0-255 images of any dtype -> normalized, in the model's compute dtype."""
        return preprocessing.normalize_batch(images, self.mean, self.std, self.model.compute_dtype)

    @property
    def metrics(self):
        return [self.loss_metric, self.top1_metric]

    def compute_gradients(self, images, labels):
        """(loss, logits, gradients of the [scaled] loss) on this rank's batch."""
        with tf.GradientTape() as tape:
            logits = self.model(self.normalize(images), training=True)
            loss = self.loss_fn(tf.one_hot(labels, self.num_classes), logits)
            objective = loss + l2_penalty(self.l2_variables, self.weight_decay) if self.l2_variables else loss
            if self.loss_scale:
                objective = self.optimizer.get_scaled_loss(objective)
        return loss, logits, tape.gradient(objective, self.model.trainable_variables)

    def train_step(self, data):
        images, labels = self.fixed_batch or data
        loss, logits, grads = self._gradients(images, labels)
        grads = distributed.average_gradients(grads, self.grad_compression)
        if self.loss_scale:  # unscale the averaged gradients; apply_gradients then checks them for inf/NaN
            grads = self.optimizer.get_unscaled_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.step.assign_add(1)
        if self.stop_on_nonfinite:
            first_bad = tf.logical_and(self.first_nonfinite_step < 0, tf.logical_not(tf.math.is_finite(loss)))
            self.first_nonfinite_step.assign(tf.where(first_bad, self.step, self.first_nonfinite_step))
        self.loss_metric.update_state(loss)
        self.top1_metric.update_state(labels, logits)
        return {"loss": self.loss_metric.result(), "top1": self.top1_metric.result()}


@dataclasses.dataclass
class Plan:
    """What a run resolved from its config, its data and its log directory."""
    config: TrainConfig
    num_classes: int
    image_size: int
    global_batch: int
    steps_per_epoch: int
    total_steps: int
    start_step: int = 0
    checkpoint: str | None = None


def resolve(config: TrainConfig) -> TrainConfig:
    """Fills in num_classes, image_size and seed; checks them against a run already in --log_dir."""
    validate(config)
    info = model_info(config.model)
    num_classes = config.num_classes or pipeline.num_classes_of(config.data_dir)
    image_size = config.image_size or info.input_size
    if image_size < info.min_size:
        raise ValueError(f"--image_size must be >= {info.min_size} for {config.model}, received: {image_size}")
    previous = _previous_config(config.log_dir)
    seed = config.seed if config.seed is not None else (previous or {}).get("seed")
    if seed is None:
        # From the OS, not `random`: an earlier run in this process may have seeded `random`.
        seed = distributed.broadcast_object(int.from_bytes(os.urandom(4), "little") >> 1)
    if previous:
        for key, now in (("model", config.model), ("num_classes", num_classes), ("image_size", image_size),
                         ("batch_size", config.batch_size)):
            if previous.get(key) != now:
                raise ValueError(f"--log_dir {config.log_dir} holds a run with {key} {previous.get(key)!r}, not "
                                 f"--{key} {now!r}: use another --log_dir, or the same --{key} to resume")
    return dataclasses.replace(config, num_classes=num_classes, image_size=image_size, seed=seed)


def _previous_config(log_dir):
    path = os.path.join(log_dir, CONFIG_FILE) if log_dir else None
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def plan_run(config: TrainConfig) -> Plan:
    global_batch = config.batch_size * distributed.size()
    if config.data_dir:
        files = pipeline.list_shards(config.data_dir, "train")
        records = pipeline.count_records(config.data_dir, files)
    else:
        records = IMAGENET_TRAIN_IMAGES
    steps_per_epoch = records // global_batch
    if steps_per_epoch < 1:
        raise ValueError(f"{records} training images cannot fill one global batch of {global_batch} "
                         f"(--batch_size {config.batch_size} x {distributed.size()} ranks)")
    total = config.num_iter * steps_per_epoch if config.iter_unit == "epoch" else config.num_iter
    plan = Plan(config, config.num_classes, config.image_size, global_batch, steps_per_epoch, total)
    if config.log_dir:
        plan.checkpoint = checkpoints.latest_checkpoint(config.log_dir)
        if plan.checkpoint:
            checkpoints.check_compatible(plan.checkpoint, config.model, config.num_classes,
                                         f"--log_dir {config.log_dir}")
            plan.start_step = checkpoints.trained_steps(plan.checkpoint)
            if plan.start_step > total:
                raise ValueError(
                    f"--num_iter {config.num_iter} --iter_unit {config.iter_unit} ({total} steps) is below step "
                    f"{plan.start_step} of the latest checkpoint in --log_dir {config.log_dir}: that run already "
                    f"went further. Pass --num_iter of at least its length to continue it, or another --log_dir")
    return plan


def build_trainer(plan: Plan):
    """Model, optimizer, trainer and checkpoint, restored from the latest checkpoint when there is one."""
    config = plan.config
    set_policy(config.precision)
    # The seed fixes the initial weights too (Keras draws unseeded initializers' seeds from Python's
    # `random`), so a run is reproducible.
    tf.keras.utils.set_random_seed(config.seed)
    model = create_model(config.model, num_classes=plan.num_classes,
                         input_shape=(plan.image_size, plan.image_size, 3))
    lr = WarmupDecay(config.lr * plan.global_batch / 256, plan.total_steps,
                     warmup_steps=round(config.warmup_epochs * plan.steps_per_epoch), kind=config.lr_schedule,
                     boundaries=[e * plan.steps_per_epoch for e in config.lr_decay_epochs],
                     factor=config.lr_decay_factor, power=config.poly_power)
    optimizer, coupled = build_optimizer(config.optimizer, lr, momentum=config.momentum, beta_2=config.beta_2,
                                         weight_decay=config.weight_decay, variables=model.trainable_variables,
                                         loss_scale=config.precision == "fp16")
    info = model_info(config.model)
    trainer = ClassifierTrainer(model, plan.num_classes, mean=info.mean, std=info.std,
                                label_smoothing=config.label_smoothing,
                                weight_decay=config.weight_decay, coupled_l2=coupled,
                                loss_scale=config.precision == "fp16", use_xla=config.use_xla,
                                grad_compression=config.grad_compression, stop_on_nonfinite=config.precision == "fp32")
    trainer.compile(optimizer=optimizer)
    if hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)  # create the slots now, so restore and broadcast see them
    checkpoint = checkpoints.make_checkpoint(config.model, model, plan.num_classes, optimizer=optimizer,
                                             step=trainer.step)
    if plan.checkpoint:
        checkpoint.restore(plan.checkpoint).assert_existing_objects_matched()
        plan.start_step = int(trainer.step.numpy())
    distributed.broadcast_variables(model.variables + optimizer_variables(optimizer) + [trainer.step])
    return model, optimizer, trainer, checkpoint, lr


def train(config: TrainConfig, callbacks=()) -> dict:
    """Runs (or resumes) a training run; returns its summary. Every rank calls this.

    callbacks: extra Keras callbacks, run after tfcnn's own (logging, checkpoints) at every step; their
    `self.model` is the ClassifierTrainer, whose `.model` is the zoo model.
    """
    distributed.init()
    config = resolve(config)
    plan = plan_run(config)
    chief = distributed.is_chief()
    if plan.checkpoint and plan.start_step == plan.total_steps:
        if chief:
            print(f"tfcnn: the run in --log_dir {config.log_dir} is already complete at step {plan.start_step} "
                  f"of {plan.total_steps}: nothing to do. Pass a larger --num_iter to train it further, or "
                  f"another --log_dir to start a new run", flush=True)
        return {"complete": True, "start_step": plan.start_step, "total_steps": plan.total_steps}
    model, optimizer, trainer, checkpoint, lr = build_trainer(plan)
    if chief and config.log_dir:
        os.makedirs(config.log_dir, exist_ok=True)
        atomic_write_text(os.path.join(config.log_dir, CONFIG_FILE), config.to_json())
    if chief:
        _print_start(plan)
    summary = {"config": dataclasses.asdict(config), "start_step": plan.start_step, "total_steps": plan.total_steps,
               "steps_per_epoch": plan.steps_per_epoch, "global_batch": plan.global_batch, "ranks": distributed.size()}
    logger = RunLogger(trainer, optimizer, lr, plan)
    dataset = pipeline.build_dataset(
        config.data_dir, "train", config.batch_size, plan.image_size, num_classes=plan.num_classes,
        num_shards=distributed.size(), shard_index=distributed.rank(),
        seed=config.seed + 1_000_003 * distributed.rank(), start_step=plan.start_step)
    if config.data_dir is None:  # synthetic: the one generated batch stays on the device
        trainer.keep_batch_on_device(*next(iter(dataset)))
        dataset = tf.data.Dataset.from_tensors(0).repeat()
    own = [logger]
    if config.log_dir:
        manager = tf.train.CheckpointManager(checkpoint, checkpoints.checkpoint_dir(config.log_dir),
                                             max_to_keep=config.keep_checkpoints, checkpoint_name="ckpt")
        own.append(Checkpointer(trainer, manager, plan))
    with pipeline.corrupt_records_named(config.data_dir, "train", distributed.size(), distributed.rank()):
        trainer.fit(dataset, epochs=1, steps_per_epoch=plan.total_steps - plan.start_step,
                    callbacks=own + list(callbacks), verbose=0)
    summary.update(logger.summary())
    if config.export_dir and chief:
        from tfcnn.training.export import export_saved_model

        summary["saved_model"] = export_saved_model(config.model, model, config.export_dir, plan.num_classes,
                                                    plan.image_size, config.data_dir)
    if config.predict and chief:
        summary["validation"] = predict(trainer, plan)
    if chief:
        summary["checkpoints"] = checkpoints.checkpoint_dir(config.log_dir) if config.log_dir else None
        _print_summary(summary)
    return summary


def predict(trainer: ClassifierTrainer, plan: Plan) -> dict:
    """Top-1/top-5 of the trained model on the whole validation split, in this one process."""
    from tfcnn.evaluate import accuracy, count_correct

    dataset = pipeline.build_dataset(plan.config.data_dir, "validation", plan.config.batch_size, plan.image_size,
                                     num_classes=plan.num_classes,
                                     crop_fraction=model_info(plan.config.model).crop_fraction)
    return accuracy(count_correct(lambda images: trainer(images, training=False), dataset))


class RunLogger(tf.keras.callbacks.Callback):
    """Every display_every steps (and at the last): metrics averaged over ranks; rank 0 prints them and
    appends them to metrics.jsonl and TensorBoard. Also stops the run at a non-finite fp32 loss."""

    _supports_tf_logs = True  # keep Keras from converting the logs to numpy (a device sync) every step

    def __init__(self, trainer, optimizer, lr, plan: Plan):
        super().__init__()
        self.trainer, self.optimizer, self.lr, self.plan = trainer, optimizer, lr, plan
        self.chief = distributed.is_chief()
        log_dir = plan.config.log_dir if self.chief else None
        self.metrics_path = os.path.join(log_dir, METRICS_FILE) if log_dir else None
        if self.metrics_path and os.path.exists(self.metrics_path):
            _drop_records_after(self.metrics_path, plan.start_step)
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, "tensorboard")) if log_dir else None
        self.last = {}
        self.total_seconds = 0.0
        self.timed_steps = 0
        self.timed_seconds = 0.0
        self.start_time = self.mark_time = self.warmup_end_time = None
        self.mark_step = plan.start_step

    def on_train_begin(self, logs=None):
        self.start_time = self.mark_time = time.perf_counter()
        if self.plan.config.benchmark_warmup_steps == 0:
            self.warmup_end_time = self.start_time

    def on_train_batch_end(self, batch, logs=None):
        step = self.plan.start_step + batch + 1
        warmup_end = self.plan.start_step + self.plan.config.benchmark_warmup_steps
        if step == warmup_end:
            float(logs["loss"])  # wait for the step to finish before starting the clock
            self.warmup_end_time = time.perf_counter()
        if step % self.plan.config.display_every and step != self.plan.total_steps:
            return
        loss, top1, bad = distributed.allreduce(
            tf.stack([logs["loss"], logs["top1"], tf.cast(self.trainer.first_nonfinite_step >= 0, tf.float32)]),
            name="tfcnn_display").numpy()
        if bad > 0:
            first = int(self.trainer.first_nonfinite_step.numpy())
            where = f"at step {first}" if first >= 0 else f"on another rank before step {step}"
            raise NonFiniteLossError(f"the loss became NaN or infinite {where} (fp32): stopping. Lower --lr or "
                                     f"check the data; the last checkpoint holds the state before it")
        self.trainer.loss_metric.reset_state()
        self.trainer.top1_metric.reset_state()
        now = time.perf_counter()
        rate = (step - self.mark_step) * self.plan.global_batch / max(now - self.mark_time, 1e-9)
        self.mark_step, self.mark_time = step, now
        record = {"step": step, "epoch": round(step / self.plan.steps_per_epoch, 4), "loss": float(loss),
                  "top1": float(top1), "lr": float(self.lr(step - 1)), "img_per_sec": rate}
        if self.plan.config.precision == "fp16":
            record["loss_scale"] = float(self.optimizer.loss_scale)
        self.last = record
        if self.chief:
            self._emit(record)

    def _emit(self, record):
        print(f"step {record['step']:>7}/{self.plan.total_steps}  epoch {record['epoch']:7.2f}  "
              f"loss {record['loss']:.4f}  top1 {100 * record['top1']:6.2f}%  lr {record['lr']:.5f}  "
              f"{record['img_per_sec']:9.1f} img/s" + (f"  loss scale {record['loss_scale']:g}"
                                                       if "loss_scale" in record else ""), flush=True)
        if self.metrics_path:
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.writer:
            with self.writer.as_default(step=record["step"]):
                for key, value in record.items():
                    if key != "step":
                        tf.summary.scalar(key, value)
            self.writer.flush()

    def on_train_end(self, logs=None):
        end = time.perf_counter()
        self.total_seconds = end - self.start_time
        warmup = self.plan.config.benchmark_warmup_steps
        steps = self.plan.total_steps - self.plan.start_step
        if steps > warmup and self.warmup_end_time is not None:
            self.timed_steps, self.timed_seconds = steps - warmup, end - self.warmup_end_time

    def summary(self) -> dict:
        out = {"final": self.last, "train_seconds": self.total_seconds}
        if self.timed_steps:
            out["img_per_sec"] = self.timed_steps * self.plan.global_batch / self.timed_seconds
            out["img_per_sec_steps"] = self.timed_steps
        return out


def _drop_records_after(path, step):
    """A resumed run repeats the steps after its checkpoint; their old lines would appear twice."""
    with open(path) as f:
        lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(lines))


class Checkpointer(tf.keras.callbacks.Callback):
    """Every checkpoint_every steps, at each epoch end and at the last step: batch-norm statistics
    averaged over ranks, a check that no weight is NaN or infinite (both on all ranks, so all take the
    same decision), then rank 0 saves through the CheckpointManager (which keeps the last K)."""

    _supports_tf_logs = True

    def __init__(self, trainer, manager, plan: Plan):
        super().__init__()
        self.trainer, self.manager, self.plan = trainer, manager, plan
        self.moving_stats = [v for v in trainer.model.non_trainable_variables if "moving_" in v.name]

    def on_train_batch_end(self, batch, logs=None):
        step = self.plan.start_step + batch + 1
        every = self.plan.config.checkpoint_every
        if (every and step % every == 0) or step % self.plan.steps_per_epoch == 0 or step == self.plan.total_steps:
            distributed.average_variables(self.moving_stats)
            if not all_finite(self.trainer.model.variables):
                raise NonFiniteLossError(
                    f"the weights became NaN or infinite by step {step}: stopping without saving them. Lower "
                    f"--lr or check the data; the last checkpoint holds the state before it")
            if distributed.is_chief():
                self.manager.save(checkpoint_number=step)


@tf.function
def all_finite(variables):
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in variables])


def _print_start(plan: Plan):
    c = plan.config
    data = c.data_dir or "synthetic data"
    print(f"tfcnn: training {c.model} ({plan.num_classes} classes, {plan.image_size} px) on {data}; "
          f"{distributed.size()} rank(s) x batch {c.batch_size} = global batch {plan.global_batch}; "
          f"{c.precision}{' + XLA' if c.use_xla else ''}; {c.optimizer}, lr {c.lr} per 256 -> "
          f"{c.lr * plan.global_batch / 256:g} ({c.lr_schedule}, {c.warmup_epochs:g} warmup epochs); "
          f"{plan.total_steps} steps ({plan.steps_per_epoch} per epoch)"
          + (f"; resuming from {plan.checkpoint} at step {plan.start_step}" if plan.checkpoint else ""), flush=True)
    for note in hardware_notes(c.precision, c.use_xla):
        print(f"tfcnn: {note}", flush=True)


def _print_summary(s: dict):
    lines = [f"done: steps {s['start_step']}-{s['total_steps']} in {s['train_seconds']:.1f} s"]
    if "img_per_sec" in s:
        lines.append(f"  throughput: {s['img_per_sec']:.1f} img/s (global, mean over {s['img_per_sec_steps']} steps, "
                     f"excluding {s['config']['benchmark_warmup_steps']} warmup steps)")
    else:
        lines.append(f"  throughput: not measured: the run had no more steps than its "
                     f"{s['config']['benchmark_warmup_steps']} warmup steps")
    if s["final"]:
        lines.append(f"  final loss {s['final']['loss']:.4f}, top1 {100 * s['final']['top1']:.2f}% (training batches)")
    if "validation" in s:
        v = s["validation"]
        lines.append(f"  validation: top1 {100 * v['top1']:.2f}%, top5 {100 * v['top5']:.2f}% over {v['count']} images")
    log_dir = s["config"]["log_dir"]
    if log_dir:
        lines.append(f"  logs: {log_dir} ({METRICS_FILE}, tensorboard/, {CONFIG_FILE}); checkpoints: {s['checkpoints']}")
    if "saved_model" in s:
        lines.append(f"  SavedModel: {s['saved_model']}")
    print("\n".join(lines), flush=True)

