"""`python -m tfcnn.models [PATTERN] [--markdown]`: the model table (name, input size, params, GMACs, reference
top-1, the timm / torchvision definition whose weights it loads, what weights="imagenet" loads); as
Markdown, the docs' table. With one model's name: also every published weights name it takes."""
import sys

from tfcnn.models import list_models, model_info, pretrained


def imagenet_weights(name) -> str:
    return pretrained.cell(pretrained.find(name, "imagenet")) if pretrained.aliases(name) else "none published"


def model_table(pattern="*"):
    rows = [f"{'model':<22}{'input':>7}{'params':>14}{'GMACs':>9}{'ref top-1':>11}  {'weights of':<40}imagenet"]
    for name in list_models(pattern):
        info = model_info(name)
        rows.append(f"{name:<22}{info.input_size:>7}{info.params:>14,}{info.gmacs:>9.3f}{info.top1:>10.2f}%  "
                    f"{info.reference:<40}{imagenet_weights(name)}")
    if list_models(pattern) == [pattern]:
        rows.append(f"\nweights={{name}} for {pattern}: {', '.join(pretrained.weight_names(pattern)) or 'none'}")
    return "\n".join(rows)


def model_markdown(pattern="*"):
    rows = ["| model | input | params | GMACs | reference top-1 | weights of | `imagenet` weights |",
            "|---|---|---|---|---|---|---|"]
    for name in list_models(pattern):
        info = model_info(name)
        top1 = f"{info.top1:.2f}%" if info.top1 else "none published"
        rows.append(f"| {name} | {info.input_size} | {info.params:,} | {info.gmacs:.3f} | {top1} | {info.reference} | "
                    f"{imagenet_weights(name)} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--markdown"]
    if "--markdown" in sys.argv[1:]:
        print(model_markdown(*args[:1]), end="")
    else:
        print(model_table(*args[:1]))
