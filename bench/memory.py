"""Memory: peak resident memory of a training run (default ResNet-50), tfcnn's trainer vs plain model.fit.

The contenders are those of train_step.py: Keras' application of --model (ResNet50, v1, by default) under
model.fit, tfcnn's model (resnet50, v1.5) under the same model.fit, and tfcnn's model through tfcnn's trainer.

    python bench/memory.py [--model resnet50] [--batch_size 32] [--image_size 224] [--steps 3] [--repeats 3]

Each side runs in a fresh child process (so neither inherits the other's allocations); the parent
reads the child's peak RSS from the kernel (wait4's ru_maxrss) when it exits. The peak of one and the
same program varies from process to process (Keras' ResNet50 has been seen at 3.8 and at 4.8 GB), so
each side runs --repeats times, alternating, and the table shows the lowest and highest peak; the
ratios compare the lowest.
"""
import argparse
import os
import subprocess
import sys

from common import add_model_flag, parser, refuse, report
from train_step import CONTENDERS, contender_name

SCRIPT = "bench/memory.py"
KINDS = tuple(CONTENDERS)


def child(kind, model_name, batch_size, image_size, steps):
    CONTENDERS[kind][1](model_name, batch_size, image_size, steps, 1, False)


def peak_rss_mb(kind, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, f"--model={args.model}",
           f"--batch_size={args.batch_size}", f"--image_size={args.image_size}", f"--steps={args.steps}"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    stderr = process.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        refuse(SCRIPT, f"the {kind} run failed: {stderr.strip().splitlines()[-1] if stderr.strip() else status}")
    return usage.ru_maxrss / 1024  # Linux reports KiB


def main():
    p = parser(__doc__)
    add_model_flag(p)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)  # the measured run itself
    args = p.parse_args()
    if args.child:
        return child(args.child, args.model, args.batch_size, args.image_size, args.steps)
    peaks = {kind: [] for kind in KINDS}
    for _ in range(args.repeats):
        for kind in KINDS:
            peaks[kind].append(peak_rss_mb(kind, args))
    low = {kind: min(values) for kind, values in peaks.items()}
    rows = [{"name": contender_name(kind, args.model), "peak_rss_mb_lowest": low[kind],
             "peak_rss_mb_highest": max(peaks[kind])} for kind in KINDS]
    ratios = {"tfcnn trainer / keras model.fit (<1 = tfcnn smaller)": low["tfcnn"] / low["keras"],
              f"tfcnn trainer / model.fit of the same {args.model}": low["tfcnn"] / low["tfcnn_model_fit"]}
    report(SCRIPT, f"Peak resident memory, {args.model} training, batch {args.batch_size}, {args.image_size} px, fp32",
           rows, ratios, args.output, all_peaks_mb=peaks)


if __name__ == "__main__":
    main()
