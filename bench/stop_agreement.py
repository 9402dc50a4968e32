"""The per-step stop agreement's cost: two-rank training with --stop_signals on (the default) vs none.

    python bench/stop_agreement.py [--model resnet18] [--image_size 32] [--batch_size 2] [--steps 100]
        [--warmup_steps 10] [--repeats 2] [--launcher horovodrun|mpiexec] [--train_command examples/train.py]

With stop signals on, every optimizer step adds one int32 to the grouped gradient allreduce (the ranks'
stop flags, summed) and reads it on the host; with `--stop_signals none` neither happens. A small model at
a small size and batch makes the step as short as a CPU allows (a fraction of a second on 2 cores), so a
fixed per-step cost shows as large as it can; under real models the same cost is a smaller share. Each repeat runs both, alternating, as
`horovodrun --gloo -np 2` (or `mpiexec -np 2`) processes of examples/train.py on synthetic data; img/s is
the trainer's own figure (warmup steps excluded).
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

from common import parser, refuse, report

SCRIPT = "bench/stop_agreement.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
LAUNCHERS = {"horovodrun": [os.path.join(BIN, "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2"],
             "mpiexec": ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", "2"]}
CONTENDERS = {"stop agreement on (default signals)": "TERM,INT,USR1", "no stop agreement (--stop_signals none)": "none"}


def run(launcher, args, signals, log_dir):
    command = LAUNCHERS[launcher] + [sys.executable, *shlex.split(args.train_command),
                                     f"--model={args.model}", f"--image_size={args.image_size}",
                                     f"--batch_size={args.batch_size}", f"--num_iter={args.steps}", "--iter_unit=batch",
                                     f"--benchmark_warmup_steps={args.warmup_steps}", f"--stop_signals={signals}",
                                     f"--log_dir={log_dir}", "--display_every=1000000"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=3600)
    found = re.search(r"throughput: ([0-9.]+) img/s", done.stdout)
    if done.returncode != 0 or not found:
        refuse(SCRIPT, f"{' '.join(command)} failed (exit {done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
    return float(found.group(1))


def main():
    p = parser(__doc__)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=2, help="per rank")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup_steps", type=int, default=10, help="excluded from img/s")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--launcher", choices=sorted(LAUNCHERS), default="horovodrun")
    p.add_argument("--train_command", default="examples/train.py",
                   help="what each rank runs with Python before the training flags, from the repository root "
                        "(a wrapper too: the tests run tests/scripts/with_testnet.py examples/train.py)")
    args = p.parse_args()
    rates = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for index, (name, signals) in enumerate(CONTENDERS.items()):
                rates[name].append(run(args.launcher, args, signals, os.path.join(tmp, f"{repeat}-{index}")))
    rows = [{"name": name, "img_per_sec": sum(values) / len(values), "runs": len(values)}
            for name, values in rates.items()]
    on, off = rows[0]["img_per_sec"], rows[1]["img_per_sec"]
    report(SCRIPT, f"{args.model}, {args.image_size} px, 2 ranks x batch {args.batch_size} ({args.launcher}), "
                   f"{args.steps} steps", rows, {"with agreement / without (1 = free)": on / off}, args.output,
           runs=rates)


if __name__ == "__main__":
    main()
