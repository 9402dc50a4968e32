"""`python -m tfcnn.models [PATTERN]`: the model table (name, input size, params, GMACs, reference top-1, the
timm / torchvision definition whose weights it loads)."""
import sys

from tfcnn.models import list_models, model_info


def model_table(pattern="*"):
    rows = [f"{'model':<22}{'input':>7}{'params':>14}{'GMACs':>9}{'ref top-1':>11}  weights of"]
    for name in list_models(pattern):
        info = model_info(name)
        rows.append(f"{name:<22}{info.input_size:>7}{info.params:>14,}{info.gmacs:>9.3f}{info.top1:>10.2f}%  "
                    f"{info.reference}")
    return "\n".join(rows)


if __name__ == "__main__":
    print(model_table(*sys.argv[1:2]))
