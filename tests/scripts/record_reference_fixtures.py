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


def nvidia_se_resnext101_32x4d():
    """NVIDIA DeepLearningExamples' SE-ResNeXt101-32x4d (PyTorch ConvNets models/resnet.py:200,
    common.py:149): timm's with every gate's bottleneck 16 units wide (nn.Linear there, 1x1 convs here)."""
    from timm.layers import SEModule

    model = timm.create_model("seresnext101_32x4d", pretrained=False)
    for module in model.modules():
        if isinstance(getattr(module, "se", None), SEModule):
            module.se = SEModule(module.se.fc1.in_channels, rd_channels=16)
    return model


def overfeat():
    """NVIDIA's nvidia-examples/cnn/overfeat.py (NGC TensorFlow 20.10) layer list, written in PyTorch:
    convolutions and dense layers with biases and ReLU, valid 2x2 max pools, 231 px -> 6x6x1024."""
    nn = torch.nn
    features = nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(96, 256, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(),
        nn.Conv2d(512, 1024, 3, padding=1), nn.ReLU(),
        nn.Conv2d(1024, 1024, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
    classifier = nn.Sequential(nn.Linear(1024 * 6 * 6, 3072), nn.ReLU(), nn.Linear(3072, 4096), nn.ReLU(),
                               nn.Linear(4096, 1000))
    model = nn.Sequential()
    model.features, model.flatten, model.classifier = features, nn.Flatten(), classifier
    return model


# The norms that end a residual branch: bn3 of a bottleneck, bn2 of a basic block (torchvision / timm).
BOTTLENECK, BASIC = r"^layer\d+\.\d+\.bn3\.weight$", r"^layer\d+\.\d+\.bn2\.weight$"

REFERENCES = {
    "resnet18": Reference("torchvision resnet18", torchvision_model("resnet18"), 64, BASIC),
    "resnet34": Reference("torchvision resnet34", torchvision_model("resnet34"), 64, BASIC),
    "resnet50": Reference("torchvision resnet50", torchvision_model("resnet50"), 64, BOTTLENECK),
    "resnet101": Reference("torchvision resnet101", torchvision_model("resnet101"), 64, BOTTLENECK),
    "resnet152": Reference("torchvision resnet152", torchvision_model("resnet152"), 64, BOTTLENECK),
    "wide_resnet50_2": Reference("torchvision wide_resnet50_2", torchvision_model("wide_resnet50_2"), 64, BOTTLENECK),
    "resnext50_32x4d": Reference("torchvision resnext50_32x4d", torchvision_model("resnext50_32x4d"), 64, BOTTLENECK),
    "resnext101_32x4d": Reference("timm resnext101_32x4d", timm_model("resnext101_32x4d"), 64, BOTTLENECK),
    "se_resnext50_32x4d": Reference("timm seresnext50_32x4d", timm_model("seresnext50_32x4d"), 64, BOTTLENECK),
    "se_resnext101_32x4d": Reference("timm seresnext101_32x4d", timm_model("seresnext101_32x4d"), 64, BOTTLENECK),
    "nvidia_se_resnext101_32x4d": Reference("timm seresnext101_32x4d(se rd_channels=16)", nvidia_se_resnext101_32x4d,
                                            64, BOTTLENECK),
    # 231 px, its own size: the adaptive pool is the identity there, as in the script (71 px would repeat pixels).
    "overfeat": Reference("nvidia-examples/cnn overfeat.py (as a PyTorch Sequential)", overfeat, 231),
    # With its auxiliary head, as torchvision's weight files hold it; transform_input off: tfcnn's
    # data config gives the (x - 0.5) / 0.5 inputs that it would produce.
    "inception_v3": Reference("torchvision inception_v3", torchvision_model(
        "inception_v3", aux_logits=True, transform_input=False, init_weights=False), 75),
    "googlenet": Reference("torchvision googlenet", torchvision_model(
        "googlenet", aux_logits=True, transform_input=False, init_weights=False), 56),
    "densenet121": Reference("torchvision densenet121", torchvision_model("densenet121"), 37),
    # 107 px leaves a 2x2 final map, so the last stage's 1x3 / 3x1 padding is tested (75 would leave 1x1).
    "inception_v4": Reference("timm inception_v4", timm_model("inception_v4"), 107),
    "inception_resnet_v2": Reference("timm inception_resnet_v2", timm_model("inception_resnet_v2"), 107),
    # 95 / 64 px leave a 2x2 map before the adaptive pool, so the flatten's reordering is tested (at the
    # minimum size the 6x6 / 7x7 grid would repeat one pixel and hide a height/width swap).
    "alexnet": Reference("torchvision alexnet", torchvision_model("alexnet"), 95),
    **{name: Reference(f"torchvision {name}", torchvision_model(name), 64)
       for name in ("vgg11", "vgg13", "vgg16", "vgg19", "vgg16_bn")},
    # 64 px: every strided layer gets an even input, where Keras' one-sided 'same' padding would show.
    **{name: Reference(f"timm {name}", timm_model(name), 64) for name in (
        "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4")},
    "mobilenet_v2": Reference("torchvision mobilenet_v2", torchvision_model("mobilenet_v2"), 64),
    "xception": Reference("timm legacy_xception", timm_model("legacy_xception"), 75,
                          r"^block(1\.rep\.4|([23]|12)\.rep\.5|([4-9]|1[01])\.rep\.8)\.weight$"),
}
# Models whose auxiliary heads are also checked, at the input size they need.
AUXILIARY = {"inception_v3": 299, "googlenet": 56}


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
        outputs = logits_of(model, x)
        if isinstance(outputs, torchvision.models.GoogLeNetOutputs):  # (logits, aux_logits2, aux_logits1)
            main, aux = outputs.logits, [outputs.aux_logits1, outputs.aux_logits2]  # tfcnn's order: [aux1, aux2]
        else:
            main, aux = outputs[0], [outputs[1]]
        fixture["auxiliary"] = {"input_size": aux_size, "logits": weightgen.encode(main.numpy()),
                                "aux_logits": [weightgen.encode(a.numpy()) for a in aux], "shape": list(main.shape)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"{name}: {len(keys)} tensors, logits {tuple(out.shape)}, |logits| max {float(out.abs().max()):.3g}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in sys.argv[1:] or REFERENCES:
        record(name)
