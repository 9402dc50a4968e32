"""Asks for one published weights file by name, as every rank of a job on one machine does:

    horovodrun --gloo -np 2 python tests/scripts/download_probe.py OUT_DIR MODEL WEIGHTS

Loads tfcnn/models/pretrained.py alone (no TensorFlow, no Horovod: the machine's file lock is between
processes, whoever launched them), writes OUT_DIR/arrived{rank} just before asking and OUT_DIR/rank{rank}.txt,
the file's path, after. The rank is the launcher's HOROVOD_RANK.
"""
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(out_dir, model, weights):
    spec = importlib.util.spec_from_file_location("pretrained", os.path.join(REPO, "tfcnn", "models", "pretrained.py"))
    pretrained = importlib.util.module_from_spec(spec)
    sys.modules["pretrained"] = pretrained  # dataclasses look their module up
    spec.loader.exec_module(pretrained)
    rank = os.environ["HOROVOD_RANK"]
    open(os.path.join(out_dir, f"arrived{rank}"), "w").close()
    path = pretrained.weights_file(model, weights)
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(path)


if __name__ == "__main__":
    main(*sys.argv[1:])
