"""Records what tfcnn's table of published weights (tfcnn/models/pretrained.py) rests on, from the sources
themselves: for every zoo model, each published ImageNet weights file of its reference definition (timm's
pretrained tags of the same architecture, torchvision's Weights enum entries) with its URL, license and
(timm) pretrained_cfg, and the state dict key names and shapes that file holds, taken from its architecture
instantiated with random weights. Nothing is downloaded. Where a file's architecture is the other library's
twin of the reference (timm's resnet50 for torchvision's), it also records whether the twin computes the
reference's function: the same generated weights in both, the logits compared.

tests/test_pretrained.py checks the table against this: every entry is a recorded file whose keys and
shapes tfcnn's strict loader accepts, and every such file of a twin that computes the same function has
an entry. Not run by `make test` (it needs torch); run it where record_reference_fixtures.py runs:

    ~/ref/bin/python tests/scripts/record_pretrained_keys.py

Writes tests/fixtures/pretrained_keys.json: key lists by a digest, once per distinct architecture, and only where
they are not already a reference fixture's.
"""
import hashlib
import json
import os
import re
import sys

import numpy as np
import timm
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import weightgen  # noqa: E402
from record_reference_fixtures import REFERENCES, SEED  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "fixtures", "pretrained_keys.json")
HUB_FILE = "model.safetensors"  # what timm reads from a hub repo (timm/models/_hub.py), beside config.json
# torchvision's DenseNet files still use the old layer names that its densenet.py _load_state_dict renames.
DENSENET_OLD = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))([12])\.(weight|bias|running_mean|running_var)$")
DATA_FIELDS = ("input_size", "crop_pct", "crop_mode", "interpolation", "mean", "std", "num_classes", "label_offset",
               "test_input_size", "test_crop_pct")


def timm_build(arch, cfg):
    """The module a timm file was saved from. inception_v3: only its tv_in1k file holds the auxiliary head
    (timm/models/inception_v3.py _create_inception_v3 loads that one alone with aux_logits)."""
    kwargs = {"num_classes": cfg.num_classes or 0}
    if arch == "inception_v3":
        kwargs["aux_logits"] = cfg.tag == "tv_in1k"
    return lambda: timm.create_model(arch, pretrained=False, **kwargs), kwargs


def torchvision_build(arch, classes):
    """torchvision's builders load GoogLeNet's and Inception's files with their auxiliary heads on."""
    kwargs = {"num_classes": classes or 1000}
    if arch in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=True, init_weights=False, transform_input=False)
    return lambda: torchvision.models.get_model(arch, weights=None, **kwargs), kwargs


def state_keys(module, library, arch):
    keys = [[k, list(v.shape)] for k, v in module.state_dict().items()]
    if library == "torchvision" and arch.startswith("densenet"):
        keys = [[DENSENET_OLD.sub(r"\1.\2.\3", k), s] for k, s in keys]
    return keys


def candidates(reference: str):
    """[(name, record, build)] of the published files for a reference such as "torchvision resnet50"."""
    library, _, arch = reference.partition(" ")
    arch = arch.split("(")[0]  # "seresnext101_32x4d(se rd_channels=16)": files of the unmodified one, if any
    found = []
    if arch in timm.list_models():
        default = timm.models.get_pretrained_cfg(arch).tag
        for tag in timm.list_pretrained(f"{arch}.*"):
            cfg = timm.models.get_pretrained_cfg(tag)
            if not cfg.hf_hub_id and not cfg.url:
                continue
            build, kwargs = timm_build(arch, cfg)
            record = {"library": "timm", "arch": arch, "build": kwargs, "default": cfg.tag == default,
                      "hub": cfg.hf_hub_id or None, "file": cfg.hf_hub_filename or HUB_FILE if cfg.hf_hub_id else None,
                      "url": cfg.url or None, "license": cfg.license,
                      "pretrained_cfg": {k: getattr(cfg, k) for k in DATA_FIELDS if getattr(cfg, k) is not None}}
            found.append((f"timm:{tag}", record, build))
    if arch in torchvision.models.list_models():
        enum = torchvision.models.get_model_weights(arch)
        for weights in enum:
            classes = len(weights.meta.get("categories") or [])
            build, kwargs = torchvision_build(arch, classes)
            record = {"library": "torchvision", "arch": arch, "build": kwargs, "default": weights == enum.DEFAULT,
                      # torchvision's license, which timm's pretrained_cfg also gives its tv_in1k republications
                      "url": weights.url, "classes": classes, "license": "bsd-3-clause",
                      "transforms": {k: str(v) for k, v in weights.transforms.keywords.items()},
                      "acc@1": weights.meta.get("_metrics", {}).get("ImageNet-1K", {}).get("acc@1")}
            found.append((f"torchvision:{weights.name}", record, build))
    return found


def logits(module, x):
    x = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        if getattr(module, "aux_logits", False) and hasattr(module, "forward_postaux"):
            # timm's Inception V3 runs its auxiliary head in eval mode too, which needs ~299 px inputs
            return module.eval().forward_head(module.forward_postaux(module.forward_preaux(x))).numpy()
        return module.eval()(x).numpy()


def reference_run(model):
    """(the reference's keys and shapes, its generated weights, an input, its logits)."""
    reference = REFERENCES[model]
    torch.manual_seed(0)
    ref = reference.build().eval()
    keys = [(k, list(v.shape)) for k, v in ref.state_dict().items()]
    generated = weightgen.state_dict(keys, SEED, reference.damped)
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in generated.items()}, strict=False)
    x = weightgen.images(SEED, 2, reference.size)
    return dict(keys), generated, x, logits(ref, x)


def function_check(module, run):
    """Whether a file's architecture computes the reference's function: the reference's generated weights
    (tests/weightgen.py) loaded into both, the logits compared (also for the reference's own definition,
    which must agree with itself)."""
    ref_keys, generated, x, expected = run
    mine = {k: list(v.shape) for k, v in module.state_dict().items()}
    if any(ref_keys.get(k) != s for k, s in mine.items()):
        return None, "not comparable: keys or shapes differ from the reference's"
    module.load_state_dict({k: torch.from_numpy(generated[k]) for k in mine if k in generated}, strict=False)
    out = logits(module, x)
    if out.shape != expected.shape:
        return None, f"not comparable: outputs {tuple(out.shape)}, the reference {tuple(expected.shape)}"
    error = float(np.abs(out - expected).max() / np.abs(expected).max())
    return error < 1e-5, f"logits on the reference's generated weights: relative difference {error:.1e}"


def main():
    torch.set_num_threads(1)
    keysets, models, digests, checked = {}, {}, {}, {}
    for model, reference in REFERENCES.items():
        files, run = {}, None
        for name, record, build in candidates(reference.reference):
            key = (record["library"], record["arch"], json.dumps(record["build"], sort_keys=True))
            if (model, key) not in checked:  # one build at a time: the VGGs hold 0.5 GB each
                torch.manual_seed(0)
                module = build()
                keys = state_keys(module, record["library"], record["arch"])
                digests[key] = hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:12]
                keysets[digests[key]] = keys
                run = run or reference_run(model)
                checked[model, key] = function_check(module, run)
                del module
            same, how = checked[model, key]
            files[name] = {**record, "keys": digests[key], "same_function": same, "function_check": how}
        models[model] = {"reference": reference.reference, "files": files}
        print(f"{model}: {len(files)} published files ({', '.join(files) or 'none'})", flush=True)
    # Key lists equal to a reference fixture's (tests/fixtures/reference/MODEL.json, the same builders) are
    # named, not repeated; those of files that do not compute the reference's function are left out.
    fixtures = {}
    for model in REFERENCES:
        keys = weightgen.fixture(model)["keys"]
        fixtures.setdefault(hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:12], model)
    useful = {f["keys"] for m in models.values() for f in m["files"].values() if f["same_function"]}
    keysets = {digest: {"reference_fixture": fixtures[digest]} if digest in fixtures else {"keys": keys}
               for digest, keys in keysets.items() if digest in useful}
    fixture = {"versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                            "timm": timm.__version__},
               "models": models, "keysets": keysets}
    with open(OUT, "w") as f:
        json.dump(fixture, f, separators=(",", ":"), sort_keys=True)
    print(f"wrote {OUT}: {len(keysets)} key sets, {os.path.getsize(OUT) / 1e3:.0f} KB")


if __name__ == "__main__":
    main()
