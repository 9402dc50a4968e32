"""Memory: peak resident memory of a ResNet-50 training run, tfcnn's trainer vs plain model.fit.

    python bench/memory.py [--batch_size 32] [--image_size 224] [--steps 3]

Each side runs in a fresh child process (so neither inherits the other's allocations); the parent
reads the child's peak RSS from the kernel (wait4's ru_maxrss) when it exits. Peak RSS of the same run
varies by several hundred MB from one process to the next (allocator and oneDNN caches), so each side
runs --repeats times, alternating, and the smallest peak counts.
"""
import argparse
import os
import subprocess
import sys

from common import parser, refuse, report

SCRIPT = "bench/memory.py"


def child(kind, batch_size, image_size, steps):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_step import keras_fit_rate, tfcnn_rate

    (tfcnn_rate if kind == "tfcnn" else keras_fit_rate)(batch_size, image_size, steps, 1, False)


def peak_rss_mb(kind, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, f"--batch_size={args.batch_size}",
           f"--image_size={args.image_size}", f"--steps={args.steps}"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    stderr = process.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        refuse(SCRIPT, f"the {kind} run failed: {stderr.strip().splitlines()[-1] if stderr.strip() else status}")
    return usage.ru_maxrss / 1024  # Linux reports KiB


def main():
    p = parser(__doc__)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--child", choices=("tfcnn", "keras"), help=argparse.SUPPRESS)  # the measured run itself
    args = p.parse_args()
    if args.child:
        return child(args.child, args.batch_size, args.image_size, args.steps)
    peaks = {"keras": [], "tfcnn": []}
    for _ in range(args.repeats):
        for kind in peaks:
            peaks[kind].append(peak_rss_mb(kind, args))
    rows = [{"name": "keras ResNet50 model.fit", "peak_rss_mb": min(peaks["keras"])},
            {"name": "tfcnn resnet50 trainer", "peak_rss_mb": min(peaks["tfcnn"])}]
    report(SCRIPT, f"Peak resident memory, ResNet-50 training, batch {args.batch_size}, {args.image_size} px, fp32",
           rows, {"tfcnn / keras peak RSS (<1 = tfcnn smaller)": rows[1]["peak_rss_mb"] / rows[0]["peak_rss_mb"]},
           args.output, all_peaks_mb=peaks)


if __name__ == "__main__":
    main()
