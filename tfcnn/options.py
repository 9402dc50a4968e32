"""What tfcnn's flags accept, checked without TensorFlow: a bad flag fails at once, before TensorFlow
(seconds to import) loads. The modules that act on these values import them from here."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys

PRECISIONS = ("fp32", "fp16", "bf16", "fp64")
EVAL_PRECISIONS = PRECISIONS[:3]  # evaluation: fp64 is only for proving training steps (tests/test_recipes.py)
DATA_BACKENDS = ("tf", "dali_cpu", "dali_gpu")  # tf.data, or NVIDIA DALI decoding on the CPU / on the GPU
OPTIMIZERS = ("sgd", "rmsprop", "lamb", "adamw")
# ImageNet's statistics as torchvision and timm give them (of 1.0), on tfcnn's 0-255 scale: the zoo's data
# configs and the recipes read them here, where no TensorFlow is imported.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# The NGC scripts' normalization (nvidia-examples/cnn nvutils/runner.py:114-115): their networks and recipes.
NGC_MEAN, NGC_STD = (121.0, 115.0, 100.0), (70.0, 68.0, 71.0)
# The top-1 the scripts' README states their ResNet-50 and Inception V3 reach after training (8 GPUs, fp16; the
# README of the release tfcnn was created from: "After training, ResNet50 and Inception_v3 should achieve top1
# accuracies of 75.5% and 77.8%"; 20.10's no longer says it): those networks' reference top-1 in the zoo, and
# their recipes' published figure.
NGC_README_TOP1 = {"ngc_resnet50": 75.5, "ngc_inception_v3": 77.8}
# Evaluation views (tfcnn.data.preprocessing.eval_view), each with the crop fraction it usually takes:
# torchvision's resize of the shorter side to size / fraction and centre crop; the NGC scripts' central crop of
# that fraction of each side resized to the square input (nvutils/image_processing.py: central_crop(image, 0.8)).
EVAL_CROPS = {"torchvision": 0.875, "ngc": 0.8}
# The elements a recipe fixes (tfcnn.training.optimizers, schedules; tfcnn.models.initializers;
# tfcnn.data.preprocessing.TRAIN_VIEWS): what each value means is documented where it is implemented.
MOMENTUM_FORMS = ("pytorch", "keras")
LARC_MODES = ("clip", "scale")
WEIGHT_DECAY_SETS = ("kernels", "no_bn", "no_bn_names")
LR_GRANULARITIES = ("step", "epoch")
WEIGHT_INITS = ("model", "kaiming_fan_in", "kaiming_fan_out", "glorot_uniform")
TRAIN_CROPS = ("torchvision", "small", "inception", "ngc", "none")

MAX_OPS = 10  # RandAugment's N
MAX_MAGNITUDE = 30.0  # RandAugment's M
POLICY_ERROR = "--augment must be none, randaugment:N,M or autoaugment:imagenet"


@dataclasses.dataclass(frozen=True)
class Policy:
    """A parsed `--augment`: kind 'none', 'randaugment' (num_ops N, magnitude M) or 'autoaugment'
    (name 'imagenet')."""
    kind: str = "none"
    num_ops: int = 0
    magnitude: float = 0.0
    name: str = ""

    def __str__(self):
        if self.kind == "randaugment":
            return f"randaugment:{self.num_ops},{self.magnitude:g}"
        if self.kind == "autoaugment":
            return f"autoaugment:{self.name}"
        return "none"


def parse_policy(text: str) -> Policy:
    """The `--augment` flag's value -> Policy. Accepted: none, randaugment:N,M (N an integer in [1, 10],
    M a number in [0, 30]), autoaugment:imagenet. Case and surrounding spaces do not matter."""
    normalized = str(text).strip().lower()
    kind, _, args = normalized.partition(":")
    if normalized == "none":
        return Policy()
    if kind == "autoaugment" and args == "imagenet":
        return Policy("autoaugment", name="imagenet")
    if kind == "autoaugment":
        raise ValueError(f"--augment autoaugment has only the imagenet policy (autoaugment:imagenet), "
                         f"received: {text!r}")
    if kind != "randaugment":
        raise ValueError(f"{POLICY_ERROR}, received: {text!r}")
    parts = args.split(",")
    if len(parts) != 2:
        raise ValueError(f"--augment randaugment takes N,M (N ops per image, magnitude M; e.g. randaugment:2,9), "
                         f"received: {text!r}")
    try:
        num_ops = int(parts[0])
    except ValueError:
        num_ops = None
    if num_ops is None or not 1 <= num_ops <= MAX_OPS:
        raise ValueError(f"--augment randaugment:N,M needs N an integer in [1, {MAX_OPS}], received: {text!r}")
    try:
        magnitude = float(parts[1])
    except ValueError:
        magnitude = float("nan")
    if not 0 <= magnitude <= MAX_MAGNITUDE:  # also rejects nan
        raise ValueError(f"--augment randaugment:N,M needs M a number in [0, {MAX_MAGNITUDE:g}], received: {text!r}")
    return Policy("randaugment", num_ops=num_ops, magnitude=magnitude)


def check_mixing(mixup_alpha=0.0, cutmix_alpha=0.0, switch_prob=0.5):
    """ValueError naming the flag when an alpha is negative or the switch probability not in [0, 1]."""
    for flag, value in (("--mixup", mixup_alpha), ("--cutmix", cutmix_alpha)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{flag} (the Beta distribution's alpha; 0: off) must be a number >= 0, "
                             f"received: {value!r}")
    if isinstance(switch_prob, bool) or not isinstance(switch_prob, (int, float)) or not 0 <= switch_prob <= 1:
        raise ValueError(f"--mix_switch_prob (the probability of CutMix when both --mixup and --cutmix are on) "
                         f"must be in [0, 1], received: {switch_prob!r}")


def parse_loss_scale(value) -> float | None:
    """--loss_scale: 'dynamic' -> None, a positive number (a static scale) -> that float."""
    if str(value).strip().lower() == "dynamic":
        return None
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = 0.0
    if not 0 < scale < float("inf"):
        raise ValueError(f"--loss_scale must be 'dynamic' or a positive number (a static scale, e.g. 128), "
                         f"received: {value!r}")
    return scale


def parse_model_options(value) -> dict:
    """--model_options: a dict, or 'name=value,name=value' text (values: numbers, true/false, none, or
    words) -> a dict. Which names a model takes is checked when it is built."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    parts = [p.strip() for p in (value if isinstance(value, (list, tuple)) else str(value).split(",")) if p.strip()]
    options = {}
    for part in parts:
        name, equals, text = part.partition("=")
        if not equals or not name.strip().isidentifier():
            raise ValueError(f"--model_options takes name=value pairs separated by commas (e.g. "
                             f"dropout_rate=0.2,zero_init_residual=false), received: {value!r}")
        options[name.strip()] = _literal(text.strip())
    return options


def _literal(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


STOP_SIGNALS = ("TERM", "INT", "USR1", "USR2", "HUP")  # what --stop_signals may name
DEFAULT_STOP_SIGNALS = "TERM,INT,USR1"


def parse_signals(text) -> tuple[str, ...]:
    """`--stop_signals`: comma-separated signal names with or without SIG (TERM,USR1; case does not
    matter), or none -> ('TERM', 'USR1') / (). A name outside STOP_SIGNALS is a ValueError naming it."""
    names = [part.strip().upper() for part in str(text).split(",") if part.strip()]
    if names == ["NONE"]:
        return ()
    names = [name[3:] if name.startswith("SIG") else name for name in names]
    bad = [name for name in names if name not in STOP_SIGNALS]
    if not names or bad:
        raise ValueError(f"--stop_signals must be none or a comma-separated list of {', '.join(STOP_SIGNALS)}, "
                         f"received: {text!r}" + (f" (unknown: {', '.join(bad)})" if bad else ""))
    return tuple(dict.fromkeys(names))


class _CommandParser(argparse.ArgumentParser):
    """argparse's parser, naming the flag a mistyped one is close to, as absl's flags (tfcnn.train's) do, and
    before the flag it then lacks: argparse itself says "unrecognized arguments: --log_dirs a b" for `tfcnn.plots
    --log_dirs a b` (the Python keyword's spelling), and "the following arguments are required: --output_dir"
    for `--output-dir x`."""

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        flags = [name for name in self._option_string_actions if name.startswith("--")]
        for arg in args[:args.index("--")] if "--" in args else args:  # after a bare --, values only
            name = arg.split("=", 1)[0]
            if name.startswith("--") and name not in self._option_string_actions:
                close = difflib.get_close_matches(name, flags, n=1)
                self.error(f"unrecognized argument: {arg}" + (f" (did you mean {close[0]}?)" if close else ""))
        return super().parse_args(args, namespace)


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A command line's parser: the description printed as written, and whole flag names only. argparse's
    default takes a flag's prefix for the flag (`--output x.json` for `--output_dir`, a directory named x.json),
    and a flag added later can change what a prefix means."""
    return _CommandParser(prog=prog, description=description, allow_abbrev=False,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_weight_sources(parser, saved_model_help: str) -> None:
    """The one-of flags naming the weights (tfcnn.evaluate, tfcnn.export); --weights needs --model."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a tfcnn checkpoint, e.g. runs/x/checkpoints/ckpt-1000, or a "
                                             "`tfcnn.convert` output directory")
    source.add_argument("--log_dir", help="a training log directory: its latest checkpoint")
    source.add_argument("--saved_model", help=saved_model_help)
    source.add_argument("--weights", help="a timm / torchvision state dict (.safetensors, or .pth with torch), "
                                          "with --model")


def add_feed_flags(parser) -> None:
    """The flags that override how a model's weights record it is fed (tfcnn.evaluate, tfcnn.export)."""
    parser.add_argument("--image_size", type=int, help="default: what the weights record")
    parser.add_argument("--crop_fraction", type=float, help="default: what the weights record")
    parser.add_argument("--interpolation", choices=("bilinear", "bicubic"), help="default: what the weights record")
    parser.add_argument("--eval_crop", choices=tuple(EVAL_CROPS), help="the evaluation view: torchvision (resize the "
                        "shorter side, centre crop) or ngc (the NGC scripts' central crop resized; crop fraction "
                        "0.8 unless --crop_fraction says); default: what the weights record")
    parser.add_argument("--num_classes", type=int, help="default: the weights' classifier")


def check_feed_flags(parser, args, positive=("image_size", "num_classes")) -> None:
    """parser.error naming the flag for a non-positive count among `positive`, a crop fraction outside (0, 1],
    or --weights without --model."""
    for name in positive:
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive integer, received: {value}")
    if args.crop_fraction is not None and not 0 < args.crop_fraction <= 1:
        parser.error(f"--crop_fraction must be in (0, 1], received: {args.crop_fraction}")
    if args.weights and not args.model:
        parser.error("--weights needs --model (a state dict does not name its architecture)")
