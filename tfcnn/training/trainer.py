"""Horovod data-parallel, mixed-precision training on Keras `fit`, with our own train_step.

One step on every rank: normalize the rank's uint8 batch and run forward/backward (XLA-compiled with
use_xla; Horovod's ops stay outside XLA), average the (still loss-scaled) gradients over ranks, then
apply them. In fp16 the LossScaleOptimizer unscales and checks the *averaged* gradients, so every
rank takes the same skip-or-apply decision and lowers the loss scale together.

Gradient accumulation (accum_steps K > 1): the rank's batch holds K micro-batches; the step computes
their gradients one after the other (a loop in the graph, so memory holds one micro-batch's activations
and one sum of gradients), averages them, and allreduces once: one optimizer step, one collective, as a
K times larger batch would, except that batch norm normalizes each micro-batch on its own and MixUp /
CutMix pair the images within each micro-batch. An fp16 overflow in any micro-batch skips the step.

Batch-norm moving statistics, the only state a step updates from the rank's own data, are averaged in
the same grouped allreduce as the gradients, so after every step every rank holds the same model, bit
for bit: a checkpoint saves what every rank has, and a resumed run continues exactly as an
uninterrupted one (averaging them only at checkpoints made a run stopped between two of them round
differently from one that was not). By linearity the statistics are the ones per-rank statistics
averaged at the end would be; they cost a fraction of a percent of the gradients' traffic. The stop
flag (tfcnn.training.stopping) rides in the same collective, so every rank learns in the same step
whether any rank asked to stop.

Side effects (printing, metrics.jsonl, TensorBoard, checkpoints, export) happen on rank 0; the
collectives around them (metric averaging, the finiteness checks) run on every rank at the same steps,
so no rank ever waits on another. The run itself (train()) is tfcnn.training.run's.
"""
from __future__ import annotations

import contextlib
import functools

import tensorflow as tf

from tfcnn import checkpoints, distributed
from tfcnn.data import backends, pipeline, preprocessing
from tfcnn.ema import WeightAverage
from tfcnn.metrics import accuracy, count_correct
from tfcnn.models import create_model
from tfcnn.models.initializers import build_initialized
from tfcnn.models.layers import grouped_convolutions_note
from tfcnn.models.weights import load_weights
from tfcnn.options import check_mixing, parse_loss_scale
from tfcnn.precision import set_policy
from tfcnn.training import mixing
from tfcnn.training.callbacks import Checkpointer, RunEpochs, RunLogger, small_batch_norm_warning
from tfcnn.training.optimizers import build_optimizer, decayed_variables, l2_penalty, larc, optimizer_variables
from tfcnn.training.plan import Plan
from tfcnn.training.schedules import config_schedule
from tfcnn.training.stopping import StopAgreement


class ClassifierTrainer(tf.keras.Model):
    """Wraps a zoo model with the distributed train_step. The zoo model stays pure (no loss, no LR,
    no Horovod); checkpoints and exports use it directly."""

    def __init__(self, model, num_classes, *, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), label_smoothing=0.0,
                 weight_decay=0.0, l2_variables=(), loss_scale=False, use_xla=False, grad_compression=False,
                 stop_on_nonfinite=True, ema_decay=0.0, mixup=0.0, cutmix=0.0, mix_switch_prob=0.5, mix_seed=0,
                 accum_steps=1, stoppable=False, larc_eta=0.0, larc_mode="clip", learning_rate=None):
        """l2_variables: those whose weight_decay / 2 * ||w||^2 joins the loss (coupled decay; AdamW and LAMB
        decay their own way). accum_steps: micro-batches per optimizer step (the batches fed hold that many).
        stoppable: carry a stop flag in the gradient allreduce (tfcnn.training.stopping); the step's logs then
        say `stop`. larc_eta > 0: LARC (optimizers.larc) on the averaged, unscaled gradients, with
        learning_rate (a schedule of the optimizer's step, or a number) as the global rate."""
        super().__init__(name="trainer")
        self.model = model
        self.num_classes = num_classes
        self.mean, self.std = mean, std
        self.loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing)
        self.l2_variables = list(l2_variables) if weight_decay else []
        self.weight_decay = weight_decay
        self.loss_scale = loss_scale
        self.grad_compression = grad_compression
        self.stop_on_nonfinite = stop_on_nonfinite
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.first_nonfinite_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="first_nonfinite_step")
        self.loss_metric = tf.keras.metrics.Mean("loss")
        self.top1_metric = tf.keras.metrics.SparseCategoricalAccuracy("top1")
        # A function of its own only to be compiled: without XLA its boundary costs tracing time and nothing else.
        self._gradients = tf.function(self.compute_gradients, jit_compile=True) if use_xla else self.compute_gradients
        self.fixed_batch = None
        self.ema = WeightAverage(model, ema_decay) if ema_decay else None
        self.moving_stats = moving_statistics(model)
        check_mixing(mixup, cutmix, mix_switch_prob)
        self.mixing = (mixup, cutmix, mix_switch_prob) if mixup or cutmix else None
        self.mix_seed = int(mix_seed)
        if isinstance(accum_steps, bool) or not isinstance(accum_steps, int) or accum_steps < 1:
            raise ValueError(f"--grad_accum_steps must be a positive integer, received: {accum_steps!r}")
        self.accum_steps = accum_steps
        self.stop_flag = tf.Variable(0.0, trainable=False, name="stop_flag") if stoppable else None
        if larc_eta and learning_rate is None:
            raise ValueError("LARC needs the learning rate (its clip mode compares the local rate with it)")
        self.larc = (float(larc_eta), larc_mode, learning_rate) if larc_eta else None

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

    def inference_weights(self):
        """A context in which the model holds the weights to evaluate and export: their moving average
        when training keeps one, else its own."""
        return self.ema.swapped_in() if self.ema else contextlib.nullcontext()

    def save_weights(self, filepath, *args, **kwargs):
        """The zoo model's weights, as `inference_weights` holds them, written by rank 0 (every rank holds the
        same): what a Keras callback's `self.model` (this trainer) is asked for, e.g. by
        ModelCheckpoint(save_weights_only=True), so that `create_model(...).load_weights(path)` takes them. The
        trainer's own state (step, optimizer) is the checkpoints' (log_dir)."""
        self._save_model(lambda: self.model.save_weights(filepath, *args, **kwargs))

    def save(self, filepath, *args, **kwargs):
        """The zoo model, as save_weights writes it (ModelCheckpoint's whole-model form)."""
        self._save_model(lambda: self.model.save(filepath, *args, **kwargs))

    def _save_model(self, write):
        if distributed.is_chief():
            with self.inference_weights():
                write()

    def compute_gradients(self, images, labels, mix=None):
        """(loss, logits, gradients of the [scaled] loss, the labels top-1 counts) on this rank's batch.
        mix: a mixing.Mix drawn for the batch (MixUp / CutMix on the normalized images and their
        targets, which label smoothing then softens as usual), or None."""
        with tf.GradientTape() as tape:
            images, targets = self.normalize(images), tf.one_hot(labels, self.num_classes)
            if mix is not None:
                images, targets, _ = mixing.apply_mix(images, targets, mix)
                labels = mixing.dominant_labels(targets)  # each mixed image's class of largest weight
            logits = self.model(images, training=True)
            loss = self.loss_fn(targets, logits)
            objective = loss + l2_penalty(self.l2_variables, self.weight_decay) if self.l2_variables else loss
            if self.loss_scale:
                objective = self.optimizer.get_scaled_loss(objective)
        return loss, logits, tape.gradient(objective, self.model.trainable_variables), labels

    def train_step(self, data):
        images, labels = self.fixed_batch or data
        if self.accum_steps == 1:
            loss, logits, grads, labels = self._gradients(images, labels, self._mix(images, 0))
            self.top1_metric.update_state(labels, logits)
        else:
            loss, grads = self.accumulated_gradients(images, labels)
        # Read after the forward pass that moved them: the statistics, then the stop agreement's flag.
        shared = [v.read_value() for v in self.moving_stats]
        if self.stop_flag is not None:
            shared.append(self.stop_flag.read_value())
        grads, shared = distributed.average_gradients(grads, self.grad_compression, state=shared)
        for variable, mean in zip(self.moving_stats, shared):
            variable.assign(mean)
        stop = shared[-1] if self.stop_flag is not None else None
        if self.loss_scale:  # unscale the averaged gradients; apply_gradients then checks them for inf/NaN
            grads = self.optimizer.get_unscaled_gradients(grads)
        if self.larc:  # as nvutils wraps it: inside the loss scaling, around the allreduce and the optimizer
            eta, mode, learning_rate = self.larc
            rate = learning_rate(self.optimizer.iterations) if callable(learning_rate) else learning_rate
            grads = larc(grads, self.model.trainable_variables, rate, eta, mode)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.step.assign_add(1)
        if self.ema is not None:
            self.ema.update(self.step)
        if self.stop_on_nonfinite:
            first_bad = tf.logical_and(self.first_nonfinite_step < 0, tf.logical_not(tf.math.is_finite(loss)))
            self.first_nonfinite_step.assign(tf.where(first_bad, self.step, self.first_nonfinite_step))
        self.loss_metric.update_state(loss)
        logs = {"loss": self.loss_metric.result(), "top1": self.top1_metric.result()}
        if stop is not None:
            logs["stop"] = stop > 0
        return logs

    def _mix(self, images, micro_batch):
        """The MixUp / CutMix draw for one (micro-)batch, or None. Drawn outside the (maybe XLA-compiled)
        gradient function: XLA has no Beta sampler. Seeded by the step and micro-batch, so a resumed run
        draws the same."""
        if not self.mixing:
            return None
        seed = tf.stack([tf.constant(self.mix_seed, tf.int64),
                         self.step * self.accum_steps + tf.cast(micro_batch, tf.int64)])
        return mixing.sample_mix(images.shape[-4], images.shape[-3], images.shape[-2], *self.mixing, seed)

    def accumulated_gradients(self, images, labels):
        """(mean loss, mean gradients) over the accum_steps micro-batches of a rank's batch, computed one
        after the other in a graph loop; top-1 counts every micro-batch."""
        k = self.accum_steps
        micro = images.shape[0] // k
        images = tf.reshape(images, [k, micro, *images.shape[1:]])
        labels = tf.reshape(labels, [k, micro])
        variables = self.model.trainable_variables

        def body(i, loss_sum, grad_sums):
            loss, logits, grads, counted = self._gradients(images[i], labels[i], self._mix(images[i], i))
            self.top1_metric.update_state(counted, logits)
            return i + 1, loss_sum + loss, [s + tf.convert_to_tensor(g) for s, g in zip(grad_sums, grads)]

        _, loss_sum, grad_sums = tf.while_loop(
            lambda i, *_: i < k, body, [tf.constant(0), tf.constant(0.0), [tf.zeros_like(v) for v in variables]])
        return loss_sum / k, [g / k for g in grad_sums]


def moving_statistics(model) -> list:
    """The moving statistics of the batch norms that training updates (those of a frozen layer,
    trainable False, run in inference mode and never change)."""
    norms = [layer for layer in model.submodules
             if isinstance(layer, tf.keras.layers.BatchNormalization) and layer.trainable]
    return [v for layer in norms for v in (layer.moving_mean, layer.moving_variance)]


def build_trainer(plan: Plan, log=print, lr=None, state=None, broadcast=True):
    """Model, optimizer, trainer and checkpoint: restored from the latest checkpoint when there is one,
    else loaded from the initial weights (on rank 0), then broadcast from rank 0 to every rank.

    lr: the optimizer's schedule (default: --lr per 256 images scaled to the global batch, by step).
    state: more variables to checkpoint, restore and broadcast, by name (restored only from checkpoints
    that hold them). broadcast: False for an elastic run, whose state sync does it (a collective here
    could not be matched by the running ranks).
    """
    state = dict(state or {})
    config = plan.config
    set_policy(config.precision)
    # The seed fixes the initial weights too (Keras draws unseeded initializers' seeds from Python's
    # `random`), so a run is reproducible.
    tf.keras.utils.set_random_seed(config.seed)
    build = functools.partial(create_model, config.model, num_classes=plan.num_classes,
                              input_shape=(plan.image_size, plan.image_size, 3), **plan.options)
    fresh = plan.init is None and plan.checkpoint is None and not config.init_weights
    # A fresh model is initialized as the run says; the others are loaded or restored below.
    model = build_initialized(build, config.weight_init, config.seed) if fresh else build()
    model.data_config = plan.data_config
    warning = small_batch_norm_warning(model, config.batch_size)
    if warning:
        log(f"tfcnn: warning: {warning}")
    note = grouped_convolutions_note(model)
    if note:
        log(f"tfcnn: note: {note}")
    if plan.init is not None:
        new_head = plan.init_classes is not None and plan.init_classes != plan.num_classes
        if new_head:
            log(f"tfcnn: --init_weights has {plan.init_classes} classes, this run {plan.num_classes}: the "
                f"classifier is re-initialized")
        report = load_weights(model, plan.init, head="new" if new_head else "keep", log=log)
        log(f"tfcnn: initial weights from {config.init_weights} ({report['loaded']} tensors; data config: "
            f"{plan.init.data_origin})")
    if lr is None:  # --lr is per 256 images
        lr = config_schedule(config, config.lr * plan.global_batch / 256, plan.total_steps, plan.steps_per_epoch)
    decayed = decayed_variables(model, config.weight_decay_set)
    optimizer, coupled = build_optimizer(config.optimizer, lr, momentum=config.momentum, beta_2=config.beta_2,
                                         weight_decay=config.weight_decay, decayed=decayed,
                                         variables=model.trainable_variables, epsilon=config.epsilon,
                                         loss_scale=config.loss_scale if config.precision == "fp16" else None,
                                         nesterov=config.nesterov, momentum_form=config.momentum_form)
    trainer = ClassifierTrainer(model, plan.num_classes, mean=plan.data_config.mean, std=plan.data_config.std,
                                label_smoothing=config.label_smoothing,
                                weight_decay=config.weight_decay, l2_variables=decayed if coupled else (),
                                larc_eta=config.larc_eta, larc_mode=config.larc_mode, learning_rate=lr,
                                loss_scale=config.precision == "fp16", use_xla=config.use_xla,
                                grad_compression=config.grad_compression,
                                # a dynamic fp16 loss scale skips non-finite steps itself; a static one applies them
                                stop_on_nonfinite=config.precision in ("fp32", "fp64") or (
                                    config.precision == "fp16" and parse_loss_scale(config.loss_scale) is not None),
                                ema_decay=config.ema_decay, mixup=config.mixup, cutmix=config.cutmix,
                                mix_switch_prob=config.mix_switch_prob,
                                mix_seed=config.seed + 7_000_003 * distributed.rank(),  # each rank mixes its own way
                                accum_steps=config.grad_accum_steps, stoppable=config.stoppable)
    trainer.compile(optimizer=optimizer)
    if hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)  # create the slots now, so restore and broadcast see them
    checkpoint = checkpoints.make_checkpoint(model, optimizer=optimizer, step=trainer.step, ema=trainer.ema, **state)
    if plan.checkpoint:
        _restore(plan.checkpoint, trainer, state)
        plan.start_step = int(trainer.step.numpy())
    if broadcast:
        distributed.broadcast_variables(training_variables(trainer) + list(state.values()))
    return model, optimizer, trainer, checkpoint, lr


def _restore(path, trainer, state):
    """Everything a checkpoint holds of this run's state: model, optimizer and step always (it is an
    error when any is missing); the weight average and the `state` variables when it has them (a run
    that turns --ema_decay on starts its average at the restored weights)."""
    reader = tf.train.load_checkpoint(path)
    present = {name: value for name, value in state.items() if reader.has_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")}
    averaged = trainer.ema is not None and checkpoints.describe(path).averaged
    objects = dict(model=trainer.model, optimizer=trainer.optimizer, step=trainer.step, **present)
    if averaged:
        objects["ema"] = trainer.ema
    tf.train.Checkpoint(**objects).restore(path).expect_partial().assert_existing_objects_matched()
    if trainer.ema is not None and not averaged:
        trainer.ema.reset()


def training_variables(trainer) -> list:
    """The state every rank must hold alike: model, optimizer slots, step, weight average."""
    averages = trainer.ema.averages if trainer.ema else []
    return trainer.model.variables + optimizer_variables(trainer.optimizer) + [trainer.step] + averages


def fit_segment(trainer, checkpoint, plan: Plan, lr_at, before=(), after=(), callbacks=(), stop=None,
                dataset=None) -> dict:
    """Trains from plan.start_step to plan.total_steps on this rank's share of the data, from the epoch
    position plan.start_images. Callbacks in order: `before`, progress, checkpoints, the stop agreement,
    `after`, `callbacks` (told of the run's epochs: callbacks.RunEpochs). stop: a stopping.StopRequest; when
    the ranks agree to stop, the segment ends after that step, its checkpoint is written and every rank has
    waited for it (a callback's stop keeps its step's checkpoint too). dataset: this rank's (uint8 images,
    int32 labels) batches of rank_batch images from plan.start_step on, instead of the config's data
    (make_plan's train_records then says how many images an epoch is).
    Returns the progress summary (start and total steps, final metrics, throughput; `stopped`: the step
    and the reason, when it stopped early)."""
    config = plan.config
    given = dataset is not None
    if not given:
        dataset = backends.build_dataset(
            config.data_backend, config.data_dir, "train", config.rank_batch, plan.image_size,
            num_classes=plan.num_classes, num_shards=distributed.size(), shard_index=distributed.rank(),
            augment=config.augment, train_crop=config.train_crop, seed=config.seed + 1_000_003 * distributed.rank(),
            start_step=plan.start_images // plan.global_batch)
    if config.data_dir is None and not given:  # synthetic: the one generated batch stays on the device
        trainer.keep_batch_on_device(*next(iter(dataset)))
        dataset = tf.data.Dataset.from_tensors(0).repeat()
    logger = RunLogger(trainer, trainer.optimizer, lr_at, plan)
    own = [*before, logger]
    checkpointer = agreement = None
    if config.log_dir:
        manager = tf.train.CheckpointManager(checkpoint, checkpoints.checkpoint_dir(config.log_dir),
                                             max_to_keep=config.keep_checkpoints, checkpoint_name="ckpt")
        checkpointer = Checkpointer(trainer, manager, plan)
        own.append(checkpointer)
    if stop is not None and trainer.stop_flag is not None:
        agreement = StopAgreement(trainer, stop, plan.start_step)
        own.append(agreement)
    with pipeline.corrupt_records_named(None if given else config.data_dir, "train", distributed.size(),
                                        distributed.rank()):
        trainer.fit(dataset, epochs=1, steps_per_epoch=plan.total_steps - plan.start_step,
                    callbacks=own + list(after) + ([RunEpochs(callbacks, plan)] if callbacks else []), verbose=0)
    # The last step trained: the trainer's step variable is the weights', which a callback may have set back
    # (EarlyStopping's restore_best_weights puts an earlier epoch's in place).
    progress = {"start_step": plan.start_step, "total_steps": plan.total_steps, "end_step": logger.last_step,
                **logger.summary()}
    if agreement and agreement.stopped_at:
        step = agreement.stopped_at
        saved = checkpointer.save(step) if checkpointer else None
        distributed.allreduce(tf.constant(0.0), name="tfcnn_stop_saved")  # no rank exits before the save is done
        progress["stopped"] = {"step": step, "reason": agreement.reason, "checkpoint": saved}
    return progress


def predict(trainer: ClassifierTrainer, plan: Plan, data=None) -> dict:
    """Top-1/top-5 of the trained model: on the whole validation split, in this one process; or on `data`
    held in memory (tfcnn.data.memory), every rank counting its share, the counts summed over ranks."""
    view = plan.data_config
    options = dict(num_classes=plan.num_classes, crop_fraction=view.crop_fraction, interpolation=view.interpolation,
                   eval_crop=view.eval_crop)
    if data is None:
        dataset = backends.build_dataset(plan.config.data_backend, plan.config.data_dir, "validation",
                                         plan.config.batch_size, plan.image_size, **options)
    else:
        from tfcnn.data import memory

        dataset = memory.eval_batches(data, batch_size=plan.config.batch_size, image_size=plan.image_size,
                                      num_shards=distributed.size(), shard_index=distributed.rank(), **options)
    counts = count_correct(lambda images: trainer(images, training=False), dataset)
    if data is not None:
        keys = ("count", "top1_correct", "top5_correct")
        summed = distributed.allreduce(tf.constant([counts[k] for k in keys], tf.int64), average=False,
                                       name="tfcnn_predict_counts").numpy()
        counts = dict(zip(keys, (int(v) for v in summed)))
    return accuracy(counts)
