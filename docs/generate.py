"""Writes the documentation's generated pages from their one source, or checks them (`--check`).

    python docs/generate.py            # make docs runs it before building the site
    python docs/generate.py --check    # exit 1 naming the stale pages (tests/test_docs.py does the same)

docs/generated/flags.md        the training flags: tfcnn.training.config.TrainConfig's fields and help texts
docs/generated/prep_flags.md   the converter's flags: imagenet_prep.build_tfrecords.define_flags
docs/generated/models.md       the model zoo: the registry (python -m tfcnn.models --markdown), with what
                               weights="imagenet" loads (tfcnn.models.pretrained)
docs/generated/weights.md      the published weights' names per model: tfcnn.models.pretrained's table
docs/generated/recipes.md      the recipes: tfcnn.recipes (python -m tfcnn.recipes --markdown)
docs/generated/performance.md  the benchmarks: bench/results/*.json, each with its command, hardware and date
"""
import argparse
import dataclasses
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED = os.path.join(ROOT, "docs", "generated")
sys.path.insert(0, ROOT)


def flags() -> str:
    from tfcnn.training.config import TrainConfig

    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for field in dataclasses.fields(TrainConfig):
        default = field.default
        shown = "none" if default is None else ",".join(map(str, default)) if isinstance(default, tuple) else default
        text = field.metadata["help"].replace("|", "\\|")
        lines.append(f"| `--{field.name}` | {shown} | {text} |")
    return "\n".join(lines) + "\n"


def prep_flags() -> str:
    from absl import flags as absl_flags

    from imagenet_prep import build_tfrecords

    defined = absl_flags.FlagValues()
    build_tfrecords.define_flags(defined)
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for name in defined:
        flag = defined[name]
        shown = "" if flag.default is None else ("on" if flag.default else "off") if flag.boolean else flag.default
        text = flag.help.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        lines.append(f"| `--{name}` | {shown} | {text} |")
    return "\n".join(lines) + "\n"


def models() -> str:
    from tfcnn.models.__main__ import model_markdown

    return model_markdown()


def weights() -> str:
    from tfcnn.models import list_models, pretrained

    return pretrained.markdown(list_models())


def recipes() -> str:
    from tfcnn import recipes as recipe_table

    return recipe_table.markdown()


def performance() -> str:
    """One section per bench/results file: its title, command, hardware and date, the measured rows and the
    ratios against the baseline measured in the same run."""
    parts = []
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.json"))):
        with open(path) as f:
            result = json.load(f)
        env = result["environment"]
        parts.append(f"### {result['title']}\n\n`{result['command']}`: {env['device']}, TensorFlow "
                     f"{env['tensorflow']}, {result['date']} (`bench/results/{os.path.basename(path)}`)\n")
        keys = [k for k in result["results"][0] if k != "name"]
        rows = ["| run | " + " | ".join(k.replace("_", " ") for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
        rows += [f"| {r['name']} | " + " | ".join(_number(r.get(k)) for k in keys) + " |" for r in result["results"]]
        ratios = [f"- {name}: **{value:.2f}x**" for name, value in result["ratios"].items()]
        parts.append("\n".join(rows) + "\n\n" + "\n".join(ratios) + "\n")
    return "\n".join(parts)


def _number(value):
    if isinstance(value, float):
        return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"
    return "" if value is None else str(value)


PAGES = {"flags.md": flags, "prep_flags.md": prep_flags, "models.md": models, "weights.md": weights,
         "recipes.md": recipes, "performance.md": performance}


def stale() -> list:
    """The generated pages whose file differs from what their source says now."""
    out = []
    for name, make in PAGES.items():
        path = os.path.join(GENERATED, name)
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != make():
            out.append(name)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 naming stale pages")
    args = parser.parse_args()
    if args.check:
        names = stale()
        if names:
            sys.exit(f"docs/generated/ is stale: {', '.join(names)}; run `python docs/generate.py`")
        return
    os.makedirs(GENERATED, exist_ok=True)
    for name, make in PAGES.items():
        text = make()  # before the file is opened: a source that fails leaves its page as it was
        with open(os.path.join(GENERATED, name), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"wrote {', '.join(PAGES)} to docs/generated/")


if __name__ == "__main__":
    main()
