"""`python -m tfcnn.models [PATTERN] [--markdown]`: the model table (name, input size, params, GMACs, reference
top-1, the timm / torchvision definition whose weights it loads, what weights="imagenet" loads); as
Markdown, the docs' table. With one model's name: also every published weights name it takes, and its builder
options (--model_options, create_model's keywords) with their defaults."""
from tfcnn.models import list_models, model_info, pretrained
from tfcnn.models.registry import override_defaults
from tfcnn.options import command_parser


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
        options = ", ".join(f"{key}={value}" for key, value in override_defaults(pattern).items())
        rows.append(f"builder options (--model_options, create_model's keywords), defaults: {options or 'none'}")
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


def main(argv=None):
    parser = command_parser("python -m tfcnn.models", __doc__)
    parser.add_argument("pattern", nargs="?", default="*", help="a model's name or a shell pattern ('resnet*')")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown (the docs')")
    args = parser.parse_args(argv)
    if not list_models(args.pattern):
        parser.error(f"no model matches {args.pattern!r}; valid names: {', '.join(list_models())}")
    if args.markdown:
        print(model_markdown(args.pattern), end="")  # ends with its newline, as the docs' generated page does
    else:
        print(model_table(args.pattern))


if __name__ == "__main__":
    main()
