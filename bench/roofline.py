"""How close a training step comes to what the cores can do: a model's FLOP/s against TensorFlow's own fp32
matmul on the same cores, in the same process, in alternating order.

    python bench/roofline.py [--isa avx2] [--model resnet50] [--image_size 224] [--batch_size 16]
                             [--steps 4] [--matmul_size 2048] [--matmul_seconds 2] [--repeats 2] [--output FILE]

The attainable rate is a square fp32 `tf.linalg.matmul` (2 n^3 FLOPs a product), the densest work TensorFlow
does on a CPU. The model's rate counts 2 FLOPs per multiply-accumulate of its forward pass
(`tfcnn.profile.count_macs`) and 3 passes a training step (forward, input gradients, weight gradients, as
the usual accounting has it; batch norm, activations and the optimizer are not counted), so the ratio is a
lower bound of how busy the step keeps the arithmetic units. Both run on the kernel set the environment
chooses (oneDNN's in tfcnn's venv); `--isa avx2` caps oneDNN at AVX2, for an AVX2 CPU's figure from an
AVX-512 machine (ONEDNN_MAX_CPU_ISA=AVX2, set before TensorFlow loads).
"""
import os
import sys
import time

# common first: it quiets TensorFlow's C++ logs
from common import model_step_rate, parser, report

SCRIPT = "bench/roofline.py"


def matmul_flops(n: int, seconds: float = 2.0) -> float:
    """FLOP/s of an n x n fp32 matmul, run back to back for about `seconds` after one untimed product."""
    import tensorflow as tf

    a, b = tf.random.uniform((n, n)), tf.random.uniform((n, n))

    @tf.function
    def products(count):
        total = tf.zeros(())
        for _ in tf.range(count):
            total += tf.linalg.matmul(a, b)[0, 0]  # a data dependence keeps every product
        return total

    float(products(tf.constant(1)))
    count, elapsed = 1, 0.0
    while elapsed < seconds:
        count *= 2
        start = time.perf_counter()
        float(products(tf.constant(count)))
        elapsed = time.perf_counter() - start
    return count * 2 * n**3 / elapsed


def main():
    p = parser(__doc__)
    p.add_argument("--isa", choices=("avx2",), help="cap oneDNN's instruction set (ONEDNN_MAX_CPU_ISA)")
    p.add_argument("--model", default="resnet50", help="a tfcnn model (python -m tfcnn.models lists them)")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--matmul_size", type=int, default=2048)
    p.add_argument("--matmul_seconds", type=float, default=2.0, help="how long each matmul measurement runs, at least")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    if args.isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.isa.upper()
    from tfcnn.precision import cpu_kernels
    from tfcnn.profile import profile_model

    macs = profile_model(args.model, args.image_size)["gmacs"] * 1e9
    flops_per_image = 3 * 2 * macs  # forward, input gradients, weight gradients; 2 FLOPs a MAC
    matmul, images = [], []
    for _ in range(args.repeats):
        matmul.append(matmul_flops(args.matmul_size, args.matmul_seconds))
        images.append(model_step_rate(args.model, args.image_size, args.batch_size, "train", args.steps))
        print(f"matmul {matmul[-1] / 1e9:.1f} GFLOP/s, {args.model} training {images[-1]:.2f} img/s = "
              f"{images[-1] * flops_per_image / 1e9:.1f} GFLOP/s", file=sys.stderr, flush=True)
    attainable, rate = sum(matmul) / len(matmul), sum(images) / len(images)
    achieved = rate * flops_per_image
    step = f"{args.model} {args.image_size}px training step, batch {args.batch_size}"
    rows = [{"name": f"tf.linalg.matmul {args.matmul_size}x{args.matmul_size} fp32", "gflop_per_sec": attainable / 1e9,
             "img_per_sec": None},
            {"name": step, "gflop_per_sec": achieved / 1e9, "img_per_sec": rate}]
    isa = f", capped at {args.isa.upper()}" if args.isa else ""
    report(SCRIPT, f"Training against the attainable fp32 FLOP/s ({cpu_kernels() or 'TensorFlow default'} "
                   f"kernels{isa})", rows,
           {f"{step} / matmul": achieved / attainable}, args.output, forward_gmacs=macs / 1e9)


if __name__ == "__main__":
    main()
