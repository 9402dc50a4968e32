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

from tfcnn.training import TrainConfig, make_config  # no TensorFlow yet: bad flags fail at once

FIELDS = [f for f in dataclasses.fields(TrainConfig)]


def define_flags():
    """One flag per TrainConfig field; default None means "not given", so a recipe value stays."""
    if "log_dir" in flags.FLAGS:
        # absl.logging defines --log_dir for its own log files, which tfcnn never writes; ours wins.
        delattr(flags.FLAGS, "log_dir")
    # The annotation says the flag's type (`float | None`: a float flag whose absence keeps the default; a
    # dict is name=value text, parsed by make_config).
    definers = (("bool", flags.DEFINE_boolean), ("float", flags.DEFINE_float), ("int", flags.DEFINE_integer),
                ("tuple", flags.DEFINE_list), ("str", flags.DEFINE_string), ("dict", flags.DEFINE_string))
    for field in FIELDS:
        define = next(define for kind, define in definers if kind in str(field.type))
        define(field.name, None, f"{field.metadata['help']} (default: {field.default})")


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
