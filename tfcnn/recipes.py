"""NVIDIA's training recipes, each element set as NVIDIA's code sets it: `--recipe NAME`.

    python -m tfcnn.recipes              # the table: source, published top-1, what is proven here
    python -m tfcnn.recipes --markdown   # the same as the README's and the docs' Markdown table

Two families, read from NVIDIA's code (not from its READMEs' prose, which disagrees with it in places):

- `ngc_*`: the original NGC TensorFlow container scripts (nvidia-examples/cnn, release 20.10-tf1, with
  their nvutils library): polynomial decay of power 2 from each script's learning_rate_init, no warmup,
  Nesterov momentum 0.9 (TF1's form), LARC in clip mode (eta 0.003), L2 on every variable but batch
  norm's (biases included) in the loss, plain softmax cross-entropy, a static loss scale, their crop
  (`--train_crop ngc`), evaluation view (`--eval_crop ngc`: the central 80% resized) and normalization
  (mean 121, 115, 100; std 70, 68, 71), the script's own network (tfcnn.models.ngc, resnet.py's v1 options,
  alexnet.py's; VGG-16 and OverFeat are tfcnn's, the same layers), glorot-uniform
  initialization (TF1's default), 90 epochs. The scripts never scale the rate with the batch: it is
  theirs at the global batch of their 8-GPU launch command (`mpiexec -np 8`), which `optimizer_batch_size`
  pins (`lr` is per 256 images here, so 2.0 at 2048 reads 0.25).
- `*_90e`, `*_250e`: DeepLearningExamples' PyTorch ConvNets at 729963dd (configs.yml, DGX A100, AMP; the
  90-epoch scripts add `--epochs 90 --mixup 0.0`): SGD with PyTorch's momentum 0.875, learning rate
  0.256 per 256 at the global batch of the 8-GPU config (2,048; 1,024 for the 101-layer models), linear
  warmup and cosine decay set per epoch (8 warmup epochs), label smoothing 0.1, weight decay on every
  parameter whose name lacks 'bn' (so the downsample batch norm and the biases are decayed), Kaiming
  fan-in initialization without zero-gamma, torchvision's RandomResizedCrop through PIL, dynamic loss
  scaling from 128 (growth every 100 steps), MixUp 0.2 for 250 epochs.

What differs from NVIDIA's runs is said per recipe (`differs`), and what is proven here says which test
compares tfcnn's steps with an independent implementation of NVIDIA's update rule.
"""
from __future__ import annotations

import dataclasses
import sys

from tfcnn.options import EVAL_CROPS, IMAGENET_MEAN, IMAGENET_STD, NGC_MEAN, NGC_README_TOP1, NGC_STD, command_parser

# The tolerances of tests/test_recipes.py, which reads them from here: per-step loss and per-tensor
# accumulated update, relative, tfcnn's trainer against the reference's (float64 over 20 steps, float32 over
# the first; measured agreement: about 1e-7 and 1e-6, and 3e-5 for the float32 step's updates).
LOSS_RTOL = 1e-4
UPDATE_RTOL = 1e-3

NGC = "NGC TF 20.10-tf1 nvidia-examples/cnn"
DLE = "DLE@729963dd PyTorch/Classification/ConvNets"  # NVIDIA/DeepLearningExamples

TESTS = "tests/test_recipes.py"
NETWORK_TESTS = "tests/test_ngc_models.py"  # the NGC recipes' networks against the scripts' builder


def _proof(family):
    """The tests that prove a family's recipes (test_recipes.py checks that these names are its tests)."""
    crop = "" if family == "ngc" else ", test_torchvision_crop_sampler_draws_torchvisions_distribution"
    values = "test_ngc_recipes_take_their_scripts_values" if family == "ngc" else \
        "test_dle_recipes_take_their_configs_values"
    return (f"{TESTS}: test_steps_match_the_reference[{family}] (loss {LOSS_RTOL:g}, update {UPDATE_RTOL:g}), "
            f"test_initializations_follow_their_rules, {values}{crop}")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A named training recipe. config: TrainConfig values (flags override them). source: NVIDIA's files
    (and lines or config keys) the values come from. published: the top-1 NVIDIA reports for it, with the
    table's machine and precision, or why there is none. proof: the tests that show tfcnn takes NVIDIA's
    steps, with their tolerances. differs: what still differs from NVIDIA's run."""
    config: dict
    source: str
    published: str
    proof: str = ""
    differs: str = ""


def _ngc(script, model, lr_init, global_batch, *, batch_size=256, weight_decay=1e-4, loss_scale=128.0, larc_eta=0.003,
         num_iter=90, precision="fp16", image_size=None, lines="25-47", dropout=None, batch_norm=(1e-4, 0.9),
         differs=""):
    """An NGC script's recipe: its default_args (`lines` of the script) on nvutils' runner, training `model`, the
    script's network (tests/test_ngc_models.py proves each against the script's builder). dropout: the rate of
    the script's dropout layers (None: it has none); batch_norm: nvutils' (epsilon, decay), or None for a model
    without batch norm (the ngc_* models' own defaults, stated for the models that are tfcnn's). Published: what
    the scripts' README states (NGC_README_TOP1), if anything."""
    options = {"dropout_rate": dropout or 0.0}
    if batch_norm:
        options.update(bn_epsilon=batch_norm[0], bn_momentum=batch_norm[1])
    if model.startswith("ngc_resnet"):
        options["zero_init_residual"] = False  # nvutils initializes every gamma to 1
    config = dict(model=model, batch_size=batch_size, optimizer_batch_size=global_batch, precision=precision,
                  loss_scale=str(loss_scale), num_iter=num_iter, iter_unit="epoch", optimizer="sgd",
                  momentum_form="pytorch", momentum=0.9, nesterov=True, lr=lr_init * 256 / global_batch,
                  lr_schedule="poly", poly_power=2.0, warmup_epochs=0.0, lr_granularity="step",
                  larc_eta=larc_eta, larc_mode="clip", weight_decay=weight_decay, weight_decay_set="no_bn",
                  label_smoothing=0.0, mixup=0.0, cutmix=0.0, weight_init="glorot_uniform", train_crop="ngc",
                  eval_crop="ngc", mean=NGC_MEAN, std=NGC_STD, model_options=options)
    if image_size:
        config["image_size"] = image_size
    source = f"{NGC}/{script}.py:{lines} (default_args) on nvutils/runner.py:112-174; README: mpiexec -np 8"
    network = f"{NETWORK_TESTS}: test_network_computes_nvidias[{model}], test_negative_control_fails[{model}]"
    top1 = NGC_README_TOP1.get(model)
    published = f"{top1:g}% {NGC_README}" if top1 else "none published with the scripts"
    return Recipe(config, source, published, f"{_proof('ngc')}; {network}", NGC_DIFFERS + differs)


# What no CPU can settle: the accuracy itself, on ImageNet with 8 GPUs (fp16 there is TF1's fp16 compute on fp32
# variables, as Keras' mixed_float16).
NGC_DIFFERS = ("the random streams (initial draws, crops, order) are tfcnn's; batch-norm moving statistics are "
               "averaged over the ranks at every step, in the gradients' allreduce (the scripts' GPUs each kept "
               "their own, and rank 0's were saved); no ImageNet run here")
# The scripts' README in the version tfcnn was created from (20.10's own README no longer states them).
NGC_README = ("(8 GPUs, fp16): the NGC TensorFlow container's nvidia-examples/cnn README: 'After training, "
              "ResNet50 and Inception_v3 should achieve top1 accuracies of 75.5% and 77.8%'")


def _dle(model, batch_size, global_batch, weight_decay, epochs, published, differs=""):
    """A DeepLearningExamples PyTorch ConvNets recipe: configs.yml's resnet_params on the DGX A100 AMP config."""
    config = dict(model=model, batch_size=batch_size, optimizer_batch_size=global_batch, precision="fp16",
                  loss_scale="dynamic", num_iter=epochs, iter_unit="epoch", optimizer="sgd", momentum_form="pytorch",
                  momentum=0.875, nesterov=False, lr=0.256, lr_schedule="cosine", warmup_epochs=8.0,
                  lr_granularity="epoch", larc_eta=0.0, weight_decay=weight_decay, weight_decay_set="no_bn_names",
                  label_smoothing=0.1, mixup=0.2 if epochs == 250 else 0.0, cutmix=0.0, weight_init="kaiming_fan_in",
                  train_crop="torchvision", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                  # PyTorch's BatchNorm2d defaults (eps 1e-5, momentum 0.1, i.e. Keras' 0.9); no zero-gamma
                  model_options=dict(zero_init_residual=False, bn_epsilon=1e-5, bn_momentum=0.9, dropout_rate=0.0))
    anchor = {2048: "resnet_params_2k", 1024: "resnet_params_1k"}[global_batch]
    source = f"{DLE}/configs.yml:66-96 ({anchor}; DGXA100, AMP: batch {batch_size} x 8 GPUs)" + (
        "" if epochs == 250 else " with the 90E script's --epochs 90 --mixup 0.0")
    return Recipe(config, source, published, _proof("dle_mixup" if epochs == 250 else "dle"),
                  differs or "loss scale: the 20.12 code that produced the table did not grow it")


def _table(readme, line, a100, v100):
    return f"{a100}% (8x A100 80GB, AMP), {v100}% (8x V100 16GB, AMP): {readme}/README.md:{line} (20.12 container)"


SE_NOTE = ("NVIDIA's SE bottleneck has 16 units in every block (models/resnet.py:200, common.py:149): "
           "nvidia_se_resnext101_32x4d; timm's se_resnext101_32x4d has channels / 16")

RECIPES = {
    # ---- DeepLearningExamples, PyTorch ConvNets
    "resnet50_90e": _dle("resnet50", 256, 2048, 1 / 32768, 90,
                         _table("resnet50v1.5", "558,566", "77.12 +/- 0.11", "76.88 +/- 0.16")),
    "resnet50_250e": _dle("resnet50", 256, 2048, 1 / 32768, 250,
                          _table("resnet50v1.5", "559,567", "78.43 +/- 0.11", "78.25 +/- 0.12")),
    "resnext101_32x4d_90e": _dle("resnext101_32x4d", 128, 1024, 1 / 16384, 90,
                                 _table("resnext101-32x4d", "540,548", "79.47 +/- 0.03", "79.49 +/- 0.05")),
    "resnext101_32x4d_250e": _dle("resnext101_32x4d", 128, 1024, 1 / 16384, 250,
                                  _table("resnext101-32x4d", "541,549", "80.19 +/- 0.08", "80.26 +/- 0.11")),
    "se_resnext101_32x4d_90e": _dle("nvidia_se_resnext101_32x4d", 128, 1024, 1 / 16384, 90,
                                    _table("se-resnext101-32x4d", "542,550", "80.03 +/- 0.11", "80.04 +/- 0.07")),
    "se_resnext101_32x4d_250e": _dle("nvidia_se_resnext101_32x4d", 128, 1024, 1 / 16384, 250,
                                     _table("se-resnext101-32x4d", "543,551", "80.9 +/- 0.08", "80.92 +/- 0.09")),
    # ---- NGC nvidia-examples/cnn: every script but trivial.py (a one-layer smoke test)
    "ngc_resnet50": _ngc("resnet", "ngc_resnet50", 2.0, 2048),
    "ngc_inception_v3": _ngc("inception_v3", "ngc_inception_v3", 1.0, 1024, batch_size=128, loss_scale=2048.0,
                             lines="25-45"),
    "ngc_vgg16": _ngc("vgg", "vgg16", 0.02, 2048, lines="26-45", batch_norm=None, differs=(
        "; the model is tfcnn's vgg16, the script's layers (vgg.py --layers 16)")),
    "ngc_googlenet": _ngc("googlenet", "ngc_googlenet", 0.04, 2048, lines="25-45", batch_norm=None),
    # builder.dropout(x, 0.8) passes a rate to tf.layers.dropout: 80% of the features are dropped.
    "ngc_inception_v4": _ngc("inception_v4", "ngc_inception_v4", 0.045, 2048, loss_scale=1.0, lines="24-45",
                             dropout=0.8),
    "ngc_inception_resnet_v2": _ngc("inception_resnet_v2", "ngc_inception_resnet_v2", 0.045, 2048, lines="25-45",
                                    dropout=0.8),
    "ngc_xception": _ngc("xception", "ngc_xception", 0.045, 256, batch_size=32, weight_decay=4e-5, precision="fp32",
                         lines="25-45", dropout=0.5, batch_norm=(1e-5, 0.99), differs=(
                             "; its loss scale 128 in fp32 changes nothing but rounding (tfcnn scales fp16 only)")),
    "ngc_alexnet": _ngc("alexnet", "ngc_alexnet", 1.0, 2048, weight_decay=5e-4, larc_eta=0.0023, num_iter=91,
                        lines="24-45", dropout=0.5, batch_norm=None),
    "ngc_overfeat": _ngc("overfeat", "overfeat", 0.001, 2048, lines="25-45", batch_norm=None, differs=(
        "; the model is tfcnn's overfeat, the script's layers")),
    # ---- DeepLearningExamples, TensorFlow2 ConvNets (EfficientNet v1-B0)
    # efficientnet_v1/B0/training/AMP/convergence_8xA100-80G.sh with config/defaults.py and b0_cfg.py: 500 epochs,
    # batch 1024 per GPU, lr_init 0.005 per 128 images (= 0.01 per 256), cosine after 5 warmup epochs, RMSprop
    # (rho 0.9, momentum 0.9, epsilon 0.001), L2 5e-6 as a Keras regularizer, whose gradient is 1e-5 * w (tfcnn's
    # weight_decay is that gradient factor, so 1e-5 is NVIDIA's 5e-6), label smoothing 0.1, EMA 0.9999;
    # dropout 0.2 and stochastic depth 0.2 are efficientnet_b0's defaults; AutoAugment, the ImageNet policy.
    "efficientnet_b0_500e": Recipe(
        dict(model="efficientnet_b0", batch_size=1024, optimizer_batch_size=8192, precision="fp16",
             loss_scale="dynamic", num_iter=500, iter_unit="epoch", optimizer="rmsprop", lr=0.01, lr_schedule="cosine",
             warmup_epochs=5.0, lr_granularity="step", momentum=0.9, beta_2=0.9, epsilon=0.001, weight_decay=1e-5,
             weight_decay_set="kernels", label_smoothing=0.1, ema_decay=0.9999, augment="autoaugment:imagenet",
             train_crop="inception", weight_init="model"),
        "DLE@729963dd TensorFlow2/Classification/ConvNets/efficientnet_v1/B0/training/AMP/convergence_8xA100-80G.sh "
        "with config/defaults.py and b0_cfg.py",
        "77.59% (8x A100 80GB, AMP): efficientnet_v1/README.md",
        "",
        "not proven step by step: its EMA decay warms up (min(0.9999, (1 + t) / (10 + t))), its L2 is set per layer "
        "through Keras regularizers (biases included), its crop is its own"),
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown --recipe {name!r}; valid recipes: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


COLUMNS = ("recipe", "model", "global batch", "evaluation view", "source", "published top-1", "proven by",
           "differs from NVIDIA's run")
# What the checkpoints of a recipe's run record as their evaluation view (--eval_crop; unset: the model's own).
EVAL_VIEWS = {
    None: "the model's: torchvision's resize of the shorter side to size / crop fraction, the central crop",
    "ngc": f"the scripts': the central {EVAL_CROPS['ngc']:.0%} of each side resized to the input (--eval_crop ngc)",
}


def rows() -> list[tuple[str, ...]]:
    out = []
    for name, recipe in RECIPES.items():
        c = recipe.config
        batch = c.get("optimizer_batch_size") or c["batch_size"]
        out.append((name, c["model"], str(batch), EVAL_VIEWS[c.get("eval_crop")], recipe.source, recipe.published,
                    recipe.proof or "not proven", recipe.differs or "-"))
    return out


COMPACT = ("recipe", "model", "global batch", "published top-1")


def markdown(columns=COLUMNS) -> str:
    """The recipe table in Markdown (the docs' recipe section; the README's has the COMPACT columns)."""
    picked = [COLUMNS.index(column) for column in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row[i].replace("|", "\\|") for i in picked) + " |" for row in rows()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = command_parser("python -m tfcnn.recipes", __doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--compact", action="store_true", help="with --markdown: the README's columns only")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown(COMPACT if args.compact else COLUMNS))
        return
    for row in rows():
        print(f"{row[0]}: {row[1]}, global batch {row[2]}")
        for label, cell in zip(COLUMNS[3:], row[3:]):
            print(f"    {label}: {cell}")


if __name__ == "__main__":
    main()
