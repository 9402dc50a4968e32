"""One bench/ script on two lanes' venvs (TensorFlow versions), in alternating runs on this machine.

    python bench/compare_lanes.py --script train_step.py [--venvs .venv .venv-tf2.15] [--repeats 2] \\
        [--output FILE] -- [the script's own arguments]

Runs `VENV/bin/python bench/SCRIPT --output TMP ARGS` for each venv in turn, `--repeats` rounds, the order
alternating between rounds (drift hits both lanes alike), and reports every figure of the script's
results as the mean per lane and the ratio of the first lane to the second. Nothing runs in parallel.
"""
import json
import os
import subprocess
import sys
import tempfile

from common import parser as common_parser, refuse, report

SCRIPT = "bench/compare_lanes.py"
HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(venv, script, args, output):
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        refuse(SCRIPT, f"{python} does not exist: install that lane first (make install TF=...)")
    done = subprocess.run([python, os.path.join(HERE, script), "--output", output, *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        refuse(SCRIPT, f"{script} failed in {venv}: {done.stderr.strip()[-1500:]}")
    with open(output) as f:
        return json.load(f)


def figures(result):
    """{(row name, key): value} of a script's result rows."""
    return {(row["name"], key): value for row in result["results"] for key, value in row.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def main():
    parser = common_parser(__doc__)
    parser.add_argument("--script", required=True, help="a bench/ script, e.g. train_step.py")
    parser.add_argument("--venvs", nargs=2, default=[".venv", ".venv-tf2.15"], help="the two lanes' venvs")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each runs every venv once")
    parser.add_argument("args", nargs="*", help="the script's own arguments (after --)")
    args = parser.parse_args()
    runs = {venv: [] for venv in args.venvs}
    versions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for venv in args.venvs if round_ % 2 == 0 else args.venvs[::-1]:
                result = run_once(venv, args.script, args.args, os.path.join(tmp, "result.json"))
                versions[venv] = result["environment"]["tensorflow"]
                runs[venv].append(figures(result))
    first, second = args.venvs
    keys = [k for k in runs[first][0] if all(k in r for r in runs[first] + runs[second])]
    mean = {venv: {k: sum(r[k] for r in runs[venv]) / len(runs[venv]) for k in keys} for venv in args.venvs}
    rows = [{"name": f"{name} [{key}]", **{f"TF {versions[v]}": mean[v][(name, key)] for v in args.venvs}}
            for name, key in keys]
    ratios = {f"TF {versions[first]} / TF {versions[second]}: {name} [{key}]": mean[first][(name, key)] /
              mean[second][(name, key)] for name, key in keys if mean[second][(name, key)]}
    report(SCRIPT, f"bench/{args.script} on two lanes, {args.repeats} alternating rounds", rows, ratios,
           args.output, runs={v: [{f"{n} [{k}]": x for (n, k), x in r.items()} for r in runs[v]] for v in runs},
           script_args=args.args)


if __name__ == "__main__":
    sys.exit(main())
