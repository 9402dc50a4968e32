"""Train an ImageNet CNN, one process per GPU:

    python examples/train.py --model resnet18 --data_dir DIR --image_size 64 --num_iter 5
    horovodrun -np 8 python examples/train.py --recipe resnet50_90e --data_dir DIR --log_dir runs/rn50
    mpiexec --allow-run-as-root -np 8 python examples/train.py --recipe resnet50_90e --data_dir DIR

Without --data_dir it trains on synthetic data. Flags override the --recipe's values, which override
the defaults; the resolved configuration is written to --log_dir/config.json. Rerunning with the same
--log_dir resumes from its latest checkpoint. --flagfile FILE reads flags from a file. SIGTERM, SIGINT
or SIGUSR1 (--stop_signals) or --max_minutes stop the run after a step, with its checkpoint written,
and exit with status 75: rerun the same command to resume.
"""
import dataclasses
import sys

from absl import app, flags, logging

from tfcnn.training import RECIPES, TrainConfig, make_config  # no TensorFlow yet: bad flags fail at once

HELP = {
    "model": "model name (python -m tfcnn.models lists them)",
    "data_dir": "directory of TFRecord shards made by imagenet_prep; absent: synthetic data",
    "data_backend": "input pipeline: tf (tf.data), dali_cpu or dali_gpu (NVIDIA DALI, decoding on the CPU or the "
                    "GPU; make install DALI=1)",
    "num_classes": "default: the number of lines of labels.txt beside the shards, else 1000",
    "image_size": "default: the model's input size; smaller sizes let small datasets and CPUs train",
    "batch_size": "images per GPU (per process) and micro-batch (a step, without accumulation)",
    "grad_accum_steps": "micro-batches per optimizer step on every rank (gradient accumulation): the global batch "
                        "is batch_size x ranks x this",
    "optimizer_batch_size": "the global batch of an optimizer step, e.g. a recipe's 2048 on fewer GPUs: sets "
                            "--grad_accum_steps to it / (batch_size x ranks), which must divide it",
    "num_iter": "training length, in --iter_unit",
    "iter_unit": "epoch or batch",
    "precision": "fp32, fp16 (mixed, dynamic loss scaling) or bf16 (mixed)",
    "use_xla": "XLA-compile the forward and backward pass",
    "optimizer": "sgd (momentum), rmsprop, lamb or adamw",
    "lr": "learning rate per 256 images (scaled by the global batch)",
    "lr_schedule": "cosine, step, poly or constant (after the linear warmup)",
    "warmup_epochs": "linear learning-rate warmup length",
    "lr_decay_epochs": "step schedule: epochs at which the rate is multiplied by --lr_decay_factor",
    "lr_decay_factor": "step schedule factor",
    "poly_power": "poly schedule exponent",
    "momentum": "SGD / RMSprop momentum (beta_1 for lamb/adamw)",
    "beta_2": "lamb/adamw beta_2; RMSprop's rho",
    "epsilon": "rmsprop/lamb/adamw epsilon (default: the optimizer's own)",
    "weight_decay": "weight decay (kernels only, never batch-norm parameters or biases)",
    "label_smoothing": "label smoothing (of the mixed targets too)",
    "augment": "per-image training policy: none, randaugment:N,M (N ops of magnitude M, e.g. randaugment:2,9) or "
               "autoaugment:imagenet",
    "mixup": "MixUp: Beta(alpha, alpha) blend of each batch with itself reversed (e.g. 0.2; 0: off)",
    "cutmix": "CutMix: a box of the reversed batch pasted in, area from Beta(alpha, alpha) (e.g. 1.0; 0: off)",
    "mix_switch_prob": "with both --mixup and --cutmix: the probability that a batch gets CutMix",
    "grad_compression": "allreduce gradients in fp16",
    "ema_decay": "keep an exponential moving average of the weights with this decay (e.g. 0.9999; 0: off); "
                 "evaluation, --predict, the export and checkpoint-based evaluation use the average",
    "seed": "seed of the initial weights, data order and augmentation (default: drawn once, kept in --log_dir)",
    "init_weights": "start from these weights: a timm / torchvision state dict (.safetensors, or .pth with torch "
                    "installed) or a tfcnn checkpoint, log dir or convert output; another --num_classes gets a "
                    "new classifier. A checkpoint in --log_dir (a resume) takes precedence",
    "log_dir": "checkpoints, metrics.jsonl, TensorBoard logs and config.json; reuse it to resume",
    "export_dir": "write a SavedModel here at the end",
    "display_every": "print and log metrics every N steps",
    "checkpoint_every": "write a checkpoint every N steps (0: only at epoch ends)",
    "keep_checkpoints": "keep the last K checkpoints",
    "benchmark_warmup_steps": "steps excluded from the throughput summary",
    "predict": "after training, evaluate on the validation split (rank 0, one GPU)",
    "elastic": "elastic training under horovodrun --min-np/--max-np/--host-discovery-script (Gloo): survive lost "
               "workers and take in new ones; each rank keeps --batch_size, the lr follows the global batch",
    "elastic_commit_every": "with --elastic: steps between in-memory commits of the training state (also at "
                            "epoch ends); a lost worker costs at most these steps",
    "stop_signals": "signals that stop the run cleanly: every rank stops after the same step, rank 0 writes its "
                    "checkpoint, the exit status is 75 (resume me); comma-separated TERM, INT, USR1, USR2, HUP, "
                    "or none",
    "max_minutes": "stop the same way after this many minutes of training, before a job's time limit (0: none)",
    "recipe": "named recipe: " + ", ".join(sorted(RECIPES)),
}
FIELDS = [f for f in dataclasses.fields(TrainConfig)]


def define_flags():
    """One flag per TrainConfig field; default None means "not given", so a recipe value stays."""
    if "log_dir" in flags.FLAGS:
        # absl.logging defines --log_dir for its own log files, which tfcnn never writes; ours wins.
        delattr(flags.FLAGS, "log_dir")
    # The annotation says the flag's type (`float | None`: a float flag whose absence keeps the default).
    definers = (("bool", flags.DEFINE_boolean), ("float", flags.DEFINE_float), ("int", flags.DEFINE_integer),
                ("tuple", flags.DEFINE_list), ("str", flags.DEFINE_string))
    for field in FIELDS:
        define = next(define for kind, define in definers if kind in str(field.type))
        define(field.name, None, f"{HELP[field.name]} (default: {field.default})")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO chatter (SavedModel tracing, ...) hides ours
    values = {f.name: flags.FLAGS[f.name].value for f in FIELDS if flags.FLAGS[f.name].present}
    recipe = values.pop("recipe", None)
    try:
        if "lr_decay_epochs" in values:
            values["lr_decay_epochs"] = [int(e) for e in values["lr_decay_epochs"]]
        config = make_config(recipe, **values)
    except ValueError as error:
        sys.exit(f"train.py: error: {error}")
    from tfcnn.training import NonFiniteLossError, train  # loads TensorFlow

    try:
        summary = train(config)
    except NonFiniteLossError as error:
        sys.exit(f"train.py: {error}")
    except (ValueError, RuntimeError) as error:
        sys.exit(f"train.py: error: {error}")
    if "preempted" in summary:  # stopped by a signal or --max_minutes, its checkpoint written: resume me
        from tfcnn.training.stopping import exit_preempted

        exit_preempted(config.stop_signals)


if __name__ == "__main__":
    define_flags()
    app.run(main)
