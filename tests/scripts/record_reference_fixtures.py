"""Records, per zoo model, what the weight-equivalence tests compare against: the reference (timm /
torchvision) state dict's key names and shapes, and the reference's logits for a fixed input on
weights generated from a seed by numpy (tests/weightgen.py). Not run by `make test`: it needs torch,
which tfcnn never depends on. Run it in a separate venv when a model or a reference changes:

    python3 -m venv ~/ref && ~/ref/bin/pip install torch torchvision timm numpy
    ~/ref/bin/python tests/scripts/record_reference_fixtures.py [MODEL ...]

Writes tests/fixtures/reference/MODEL.json (a few tens of KB each), recording the versions used.
"""
import json
import os
import sys
from typing import Callable, NamedTuple

import numpy as np
import timm
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import weightgen  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "fixtures", "reference")
SEED = 20261130


def torchvision_model(arch, **kwargs):
    return lambda: torchvision.models.get_model(arch, weights=None, **kwargs)


def timm_model(arch, **kwargs):
    return lambda: timm.create_model(arch, pretrained=False, **kwargs)


class Reference(NamedTuple):
    reference: str  # "torchvision NAME" or "timm NAME", as tfcnn's ModelInfo.reference says
    build: Callable  # -> the reference torch module
    size: int  # small input side for the logits test (the smallest the model takes, or a little more)
    damped: str | None = None  # regex of the norm weights that end a residual branch (see weightgen)


# The norms that end a residual branch: bn3 of a bottleneck, bn2 of a basic block (torchvision / timm).
BOTTLENECK, BASIC = r"^layer\d+\.\d+\.bn3\.weight$", r"^layer\d+\.\d+\.bn2\.weight$"

REFERENCES = {
    "resnet18": Reference("torchvision resnet18", torchvision_model("resnet18"), 64, BASIC),
    "resnet34": Reference("torchvision resnet34", torchvision_model("resnet34"), 64, BASIC),
    "resnet50": Reference("torchvision resnet50", torchvision_model("resnet50"), 64, BOTTLENECK),
    "resnet101": Reference("torchvision resnet101", torchvision_model("resnet101"), 64, BOTTLENECK),
    "resnet152": Reference("torchvision resnet152", torchvision_model("resnet152"), 64, BOTTLENECK),
    "resnext50_32x4d": Reference("torchvision resnext50_32x4d", torchvision_model("resnext50_32x4d"), 64, BOTTLENECK),
    "resnext101_32x4d": Reference("timm resnext101_32x4d", timm_model("resnext101_32x4d"), 64, BOTTLENECK),
    "se_resnext50_32x4d": Reference("timm seresnext50_32x4d", timm_model("seresnext50_32x4d"), 64, BOTTLENECK),
    "se_resnext101_32x4d": Reference("timm seresnext101_32x4d", timm_model("seresnext101_32x4d"), 64, BOTTLENECK),
    # With its auxiliary head, as torchvision's weight files hold it; transform_input off: tfcnn's
    # data config gives the (x - 0.5) / 0.5 inputs that it would produce.
    "inception_v3": Reference("torchvision inception_v3", torchvision_model(
        "inception_v3", aux_logits=True, transform_input=False, init_weights=False), 75),
}
# Models whose auxiliary head is also checked, at the input size it needs.
AUXILIARY = {"inception_v3": 299}


def logits_of(model, x_nhwc):
    with torch.no_grad():
        out = model(torch.from_numpy(x_nhwc.transpose(0, 3, 1, 2).copy()))
    return out


def record(name):
    reference, build, size, damped = REFERENCES[name]
    torch.manual_seed(0)
    model = build().eval()
    state = model.state_dict()
    keys = [[k, list(v.shape)] for k, v in state.items()]
    generated = weightgen.state_dict(keys, SEED, damped)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in generated.items()}, strict=False)
    x = weightgen.images(SEED, 2, size)
    out = logits_of(model, x)
    fixture = {"model": name, "reference": reference, "seed": SEED, "damped": damped, "input_size": size, "keys": keys,
               "logits": weightgen.encode(out.numpy()), "logits_shape": list(out.shape),
               "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                            "timm": timm.__version__, "numpy": np.__version__}}
    if name in AUXILIARY:
        aux_size = AUXILIARY[name]
        model.train()  # torchvision's Inception returns the auxiliary logits in training mode only
        for module in model.modules():  # ... but batch norm and dropout must stay in inference mode
            if isinstance(module, (torch.nn.BatchNorm2d, torch.nn.Dropout)):
                module.eval()
        x = weightgen.images(SEED + 1, 1, aux_size)
        main, aux = logits_of(model, x)
        fixture["auxiliary"] = {"input_size": aux_size, "logits": weightgen.encode(main.numpy()),
                                "aux_logits": weightgen.encode(aux.numpy()), "shape": list(main.shape)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"{name}: {len(keys)} tensors, logits {tuple(out.shape)}, |logits| max {float(out.abs().max()):.3g}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in sys.argv[1:] or REFERENCES:
        record(name)
