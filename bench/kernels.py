"""TensorFlow's two CPU kernel sets side by side: oneDNN's against Eigen's, training and inference.

    python bench/kernels.py [--isa avx2] [--cases all|NAME,...] [--batch_size N] [--steps 4] [--repeats 2]
                            [--bf16] [--output FILE]

TensorFlow turns oneDNN's kernels on by default only on CPUs with AVX-512-class features; other x86 CPUs
(AVX2: most AMD servers, many laptops) run Eigen's unless TF_ENABLE_ONEDNN_OPTS=1. Each case (a tfcnn
model at an input size and batch, a training step or an inference call, fp32, or bf16 where the CPU has
it) runs in fresh processes under each kernel set, in alternating order, `--repeats` times; the figure is
the mean img/s over the timed steps, after a warmup step. `--isa avx2` caps oneDNN at AVX2
(ONEDNN_MAX_CPU_ISA=AVX2, which TensorFlow's oneDNN honours: ONEDNN_VERBOSE=1 then prints "isa:Intel
AVX2"): on an AVX-512 machine, what an AVX2 CPU would get from it (Eigen's kernels use what the wheel was
compiled for either way); not with --bf16, which TensorFlow hands to oneDNN by the CPU's AVX512F flag. The
ratio oneDNN / Eigen per case decides the kernel policy of tfcnn's venv (tfcnn-env.pth).
"""
import os
import subprocess
import sys
import time

# common first: it quiets TensorFlow's C++ logs
from common import parser, refuse, report

SCRIPT = "bench/kernels.py"
# (name, model, image size, batch, mode): the demo's and the tests' shapes, and real ones per family.
CASES = [
    ("resnet18 64px train (the demo)", "resnet18", 64, 32, "train"),
    ("resnet18 32px train (tests)", "resnet18", 32, 8, "train"),
    ("resnet50 224px train", "resnet50", 224, 16, "train"),
    ("inception_v3 299px train", "inception_v3", 299, 8, "train"),
    ("mobilenet_v2 224px train", "mobilenet_v2", 224, 16, "train"),
    ("efficientnet_b0 224px train", "efficientnet_b0", 224, 16, "train"),
    ("densenet121 224px train", "densenet121", 224, 8, "train"),
    ("vgg16 224px train", "vgg16", 224, 8, "train"),
    ("resnet50 224px inference", "resnet50", 224, 16, "infer"),
    ("mobilenet_v2 224px inference", "mobilenet_v2", 224, 32, "infer"),
    ("efficientnet_b0 224px inference", "efficientnet_b0", 224, 32, "infer"),
]
KERNELS = {"eigen": {"TF_ENABLE_ONEDNN_OPTS": "0"}, "onednn": {"TF_ENABLE_ONEDNN_OPTS": "1"}}

# Each measurement in a fresh process: the kernel set is chosen when TensorFlow loads.
WORKER = ("import sys; from common import model_step_rate; model, size, batch, mode, steps, policy = sys.argv[1:]; "
          "print(model_step_rate(model, int(size), int(batch), mode, int(steps), policy))")


def measure(case, kernel, isa, steps, policy):
    _, model, size, batch, mode = case
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, **KERNELS[kernel], "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [bench_dir, os.environ.get("PYTHONPATH")]))}
    if isa and kernel == "onednn":
        env["ONEDNN_MAX_CPU_ISA"] = isa.upper()
    done = subprocess.run([sys.executable, "-c", WORKER, model, str(size), str(batch), mode, str(steps), policy],
                          capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        refuse(SCRIPT, f"{case[0]} on {kernel}: {done.stderr.strip().splitlines()[-1] if done.stderr else 'failed'}")
    return float(done.stdout.strip().splitlines()[-1])


def main():
    p = parser(__doc__)
    p.add_argument("--isa", choices=("avx2",), help="cap oneDNN's instruction set (ONEDNN_MAX_CPU_ISA)")
    p.add_argument("--cases", default="all", help="comma-separated case names (substrings), or all")
    p.add_argument("--batch_size", type=int, help="every case at this batch instead of its own")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="also each case in mixed_bfloat16 (CPUs with AVX-512 BF16)")
    args = p.parse_args()
    cases = CASES if args.cases == "all" else [c for c in CASES if any(k in c[0] for k in args.cases.split(","))]
    if args.batch_size:
        cases = [(name, model, size, args.batch_size, mode) for name, model, size, _, mode in cases]
    if not cases:
        refuse(SCRIPT, f"no case matches --cases {args.cases!r}")
    policies = ["float32"] + (["mixed_bfloat16"] if args.bf16 else [])
    rows, ratios, started = [], {}, time.time()
    for case in cases:
        for policy in policies:
            runs = {"eigen": [], "onednn": []}
            for repeat in range(args.repeats):
                for kernel in (("eigen", "onednn") if repeat % 2 == 0 else ("onednn", "eigen")):
                    runs[kernel].append(measure(case, kernel, args.isa, args.steps, policy))
            name = case[0] + ("" if policy == "float32" else " bf16")
            eigen, onednn = (sum(v) / len(v) for v in (runs["eigen"], runs["onednn"]))
            rows.append({"name": name, "eigen_img_per_sec": eigen, "onednn_img_per_sec": onednn})
            ratios[f"{name}: oneDNN / Eigen"] = onednn / eigen
            print(f"{name}: Eigen {eigen:.1f}, oneDNN {onednn:.1f} img/s ({onednn / eigen:.2f}x; "
                  f"{time.time() - started:.0f} s so far)", flush=True)
    isa = f", oneDNN capped at {args.isa.upper()}" if args.isa else ""
    report(SCRIPT, f"oneDNN's against Eigen's CPU kernels, fp32{' and bf16' if args.bf16 else ''}{isa}", rows,
           ratios, args.output)


if __name__ == "__main__":
    main()
