"""Records the values tfcnn's recipes take from NVIDIA's files, read from those files, for
tests/test_recipes.py::test_recipes_take_nvidias_values (which fails when a recipe's value drifts from them).

Needs git clones of the two sources (the search tool's `fetch` makes them; any clone works):
  - a copy of the NGC TensorFlow 20.10-tf1 container's nvidia-examples (e.g. github.com/dbkinghorn/
    NGC-TF1-nvidia-examples, folder cnn/)
  - NVIDIA/DeepLearningExamples at 729963dd

    ~/ref/bin/pip install pyyaml
    ~/ref/bin/python tests/scripts/record_nvidia_sources.py NGC_GIT_DIR DLE_GIT_DIR

Writes tests/fixtures/recipes/nvidia_sources.json: each NGC script's default_args (the dict literal, read
with ast), nvutils' normalization constants, the DeepLearningExamples configs.yml entries (DGXA100, AMP) of
ResNet-50, ResNeXt101-32x4d and SE-ResNeXt101-32x4d with the anchors merged, and the 90-epoch scripts' flags.
"""
import ast
import json
import os
import re
import subprocess
import sys

import yaml

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "recipes",
                   "nvidia_sources.json")
NGC_SCRIPTS = ("resnet", "inception_v3", "vgg", "googlenet", "inception_v4", "inception_resnet_v2", "xception",
               "alexnet", "overfeat")
DLE_COMMIT = "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"
CONVNETS = "PyTorch/Classification/ConvNets"
DLE_MODELS = {"resnet50": "resnet50v1.5", "resnext101-32x4d": "resnext101-32x4d",
              "se-resnext101-32x4d": "se-resnext101-32x4d"}


def show(git_dir, commit, path):
    return subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def default_args(source):
    """The `default_args = {...}` literal of an NGC script."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "default_args" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError("no default_args literal")


def main(ngc_dir, dle_dir):
    ngc_commit = subprocess.run(["git", "-C", ngc_dir, "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()
    scripts = {name: default_args(show(ngc_dir, ngc_commit, f"cnn/{name}.py")) for name in NGC_SCRIPTS}
    runner = show(ngc_dir, ngc_commit, "cnn/nvutils/runner.py")
    mean = [float(v) for v in re.search(r"imagenet_mean = tf.constant\(\[([^\]]+)\]", runner)[1].split(",")]
    std = [float(v) for v in re.search(r"imagenet_std\s*= tf.constant\(\[([^\]]+)\]", runner)[1].split(",")]
    readme = show(ngc_dir, ngc_commit, "cnn/README.md")
    ranks = int(re.search(r"mpiexec [^\n]*-np (\d+)", readme)[1])
    configs = yaml.safe_load(show(dle_dir, DLE_COMMIT, f"{CONVNETS}/configs.yml"))
    dle = {}
    for model, folder in DLE_MODELS.items():
        entry = {**configs["precision"]["AMP"], **configs["models"][model]["DGXA100"]["AMP"]}
        script = show(dle_dir, DLE_COMMIT, f"{CONVNETS}/{folder}/training/AMP/DGXA100_{model}_AMP_90E.sh")
        flags = dict(re.findall(r"--(epochs|mixup) (\S+)", script))
        dle[model] = {"config": entry, "gpus": int(re.search(r"--nproc_per_node (\d+)", script)[1]),
                      "90e_flags": {k: float(v) for k, v in flags.items()}}
    with open(OUT, "w") as f:
        json.dump({"ngc": {"commit": ngc_commit, "scripts": scripts, "mean": mean, "std": std, "launch_ranks": ranks},
                   "dle": {"commit": DLE_COMMIT, "models": dle}}, f, indent=1, sort_keys=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
