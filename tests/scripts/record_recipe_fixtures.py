"""Records what tests/test_recipes.py compares tfcnn's trainer against: NVIDIA's training steps, written
here from NVIDIA's code (not from tfcnn's), run in PyTorch in float64 on a small SE-ResNeXt (timm's ResNet
with the blocks of NVIDIA's: bottleneck, grouped 3x3, an SE gate of fixed width, downsample conv + batch
norm) for STEPS steps of a learning rate that changes every step or epoch. Not run by `make test`: it
needs torch, which tfcnn never depends on. Run it in a separate venv when a recipe or a reference changes:

    python3 -m venv ~/ref && ~/ref/bin/pip install torch torchvision timm numpy
    ~/ref/bin/python tests/scripts/record_recipe_fixtures.py          # also: the crop sampler's draws

Writes tests/fixtures/recipes/{ngc,dle,dle_mixup}.npz (per-step losses, each parameter's accumulated update
and each batch norm's final statistics, by timm name; the setup the test runs tfcnn with) and
resized_crop.json (quantiles of torchvision's RandomResizedCrop draws).

The update rules, with NVIDIA's sources:
- ngc: NGC TensorFlow 20.10-tf1 nvidia-examples/cnn, nvutils/runner.py:112-174. Inputs (x - [121, 115,
  100]) / [70, 68, 71]; loss = mean sparse softmax cross-entropy + weight_decay * sum(w^2) / 2 over every
  variable without 'BatchNorm' in its name (var_storage.py:4-31: biases included); lr =
  polynomial_decay(lr_init, step, decay_steps=all steps, end 0, power 2); LarcOptimizer(clip, eta 0.003,
  epsilon 1) on the averaged unscaled gradients (optimizers.py:22-57); MomentumOptimizer(0.9,
  use_nesterov=True): accum = m accum + g; w -= lr (g + m accum). Batch norm epsilon 1e-4, decay 0.9
  (builder.py:11-17).
- dle: DeepLearningExamples@729963dd PyTorch/Classification/ConvNets: configs.yml resnet_params (momentum
  0.875, warmup 8, cosine, label smoothing 0.1); optimizers.py:34-56 (SGD, weight decay on the parameters
  whose name lacks 'bn', nesterov False), :120-130 (lr_cosine_policy: per epoch), smoothing.py (label
  smoothing), dataloaders.py (mean/std 255 x ImageNet's); PyTorch's BatchNorm2d defaults.
- dle_mixup: dle with mixup.py (one lambda ~ Beta(0.2, 0.2) per batch from numpy, partners from
  torch.randperm, mixed one-hot targets) and NLLMultiLabelSmooth; the draws are recorded for the test to
  feed tfcnn's trainer (tfcnn draws its own the same way: a Beta per batch, a uniform permutation).
"""
import functools
import json
import os
import sys

import numpy as np
import timm
import torch
import torch.nn.functional as F
import torchvision
from timm.layers import SEModule

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import weightgen  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "fixtures", "recipes")
SEED = 54  # a seed whose three trajectories keep their neighbours close (run() checks)
STEPS, BATCH, SIZE, CLASSES, STEPS_PER_EPOCH = 20, 8, 32, 10, 2
# The network: timm's ResNet as NVIDIA's (and tfcnn's) SE-ResNeXt blocks, at a width a CPU trains in
# milliseconds. tfcnn's twin: the `recipenet` model the test registers (tfcnn's ResNet builder).
ARCH = dict(depths=(1, 1, 1, 1), stage_filters=(8, 16, 32, 64), groups=2, width_per_group=32, se_channels=4)
BOTTLENECK_GAMMAS = r"^layer\d+\.\d+\.bn3\.weight$"  # weightgen's damped norms, as the zoo's fixtures
LOSS_RTOL, UPDATE_RTOL = 1e-4, 1e-3  # tfcnn.recipes' (tfcnn is not importable here: no TensorFlow)
IMAGENET_MEAN, IMAGENET_STD = [0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255]

# What each family's run is. `recipe`: the tfcnn recipe whose rules the test runs; `overrides`: the test's
# sizes, applied to that recipe and used here. The rates: NGC's lr_init of ResNet (2.0, at any batch); for
# DeepLearningExamples 0.03 at this batch of 8 rather than their 0.008 (0.256 per 256), so that 20 steps move
# every tensor well beyond float32's rounding of it.
# The setup (seed, size, rates) is one whose trajectory is stable: float32 rounding does not grow along it
# (record() checks this, running the reference in float32 too). Training is chaotic from some starting
# points: a perturbation of 1e-7 can grow threefold per step (seen at 64 px, and for seeds 3 and 5 at 32).
FAMILIES = {
    "ngc": dict(recipe="ngc_resnet50", bn_epsilon=1e-4, peak_lr=2.0, weight_decay=1e-4, mean=[121, 115, 100],
                std=[70, 68, 71], overrides=dict(num_iter=STEPS, iter_unit="batch")),
    "dle": dict(recipe="resnet50_90e", bn_epsilon=1e-5, peak_lr=0.03, weight_decay=1 / 32768, warmup_epochs=3,
                mean=IMAGENET_MEAN, std=IMAGENET_STD, overrides=dict(num_iter=STEPS // STEPS_PER_EPOCH,
                                                                       iter_unit="epoch", warmup_epochs=3)),
    "dle_mixup": dict(recipe="resnet50_250e", bn_epsilon=1e-5, peak_lr=0.03, weight_decay=1 / 32768, warmup_epochs=3,
                      mean=IMAGENET_MEAN, std=IMAGENET_STD, mixup=0.2,
                      overrides=dict(num_iter=STEPS // STEPS_PER_EPOCH, iter_unit="epoch", warmup_epochs=3)),
}


def network(bn_epsilon):
    return timm.models.resnet.ResNet(
        timm.models.resnet.Bottleneck, list(ARCH["depths"]), num_classes=CLASSES, channels=ARCH["stage_filters"],
        cardinality=ARCH["groups"], base_width=ARCH["width_per_group"], zero_init_last=False,
        norm_layer=functools.partial(torch.nn.BatchNorm2d, eps=bn_epsilon),
        block_args=dict(attn_layer=functools.partial(SEModule, rd_channels=ARCH["se_channels"])))


def batch(step):
    """Step `step`'s uint8 NHWC images and int labels, from weightgen's frozen stream (the test's too)."""
    images = np.floor(weightgen.uniform([SEED, 1, step], 0.0, 256.0, (BATCH, SIZE, SIZE, 3))).astype(np.uint8)
    labels = np.floor(weightgen.uniform([SEED, 2, step], 0.0, CLASSES, (BATCH,))).astype(np.int64)
    return images, labels


def normalized(images, mean, std, dtype):
    x = torch.from_numpy(images).to(dtype).permute(0, 3, 1, 2)
    return (x - torch.tensor(mean, dtype=dtype)[:, None, None]) / torch.tensor(std, dtype=dtype)[:, None, None]


def ngc_lr(step, peak):
    """tf.train.polynomial_decay(lr_init, step, decay_steps=STEPS, end_learning_rate=0, power=2)."""
    return peak * (1 - min(step, STEPS) / STEPS) ** 2


def dle_lr(step, peak, warmup):
    """lr_cosine_policy(base_lr, warmup, epochs): a function of the epoch only."""
    epoch, epochs = step // STEPS_PER_EPOCH, STEPS // STEPS_PER_EPOCH
    if epoch < warmup:
        return peak * (epoch + 1) / warmup
    return 0.5 * (1 + np.cos(np.pi * (epoch - warmup) / (epochs - warmup))) * peak


def smoothed_loss(logits, targets, smoothing):
    """NVIDIA's LabelSmoothing / NLLMultiLabelSmooth: (1 - s) * nll(targets) + s * mean(-log p)."""
    logprobs = F.log_softmax(logits, dim=-1)
    nll = (-logprobs * targets).sum(-1)
    return ((1 - smoothing) * nll + smoothing * (-logprobs.mean(-1))).mean()


def trajectory(family, dtype, perturbation=0.0, steps=STEPS):
    """The reference's first `steps` steps in `dtype`: (per-step losses, {update/NAME, buffer/NAME[, lam,
    partner]: array}, the state dict's keys and shapes). perturbation: the starting weights times 1 + that x U(-1, 1) (a seeded
    draw per tensor), to see how the trajectory answers differences of rounding size."""
    spec = FAMILIES[family]
    model = network(spec["bn_epsilon"]).to(dtype).train()
    keys = [[k, list(v.shape)] for k, v in model.state_dict().items()]
    state = weightgen.state_dict(keys, SEED, BOTTLENECK_GAMMAS)
    if perturbation:
        rng = np.random.default_rng(int(perturbation * 1e12))
        state = {k: v * (1 + perturbation * rng.uniform(-1, 1, v.shape)) for k, v in state.items()}
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in state.items()}, strict=False)
    params = dict(model.named_parameters())
    start = {n: p.detach().clone() for n, p in params.items()}
    velocity = {n: torch.zeros_like(p) for n, p in params.items()}
    numpy_rng, torch_rng = np.random.RandomState(SEED), torch.Generator().manual_seed(SEED)
    losses, lams, partners = [], [], []
    for step in range(steps):
        images, labels = batch(step)
        x = normalized(images, spec["mean"], spec["std"], dtype)
        targets = F.one_hot(torch.from_numpy(labels), CLASSES).to(dtype)
        if spec.get("mixup"):  # mixup.py: c = np.random.beta(alpha, alpha); perm = torch.randperm(bs)
            lam = float(numpy_rng.beta(spec["mixup"], spec["mixup"]))
            perm = torch.randperm(BATCH, generator=torch_rng)
            x, targets = lam * x + (1 - lam) * x[perm], lam * targets + (1 - lam) * targets[perm]
            lams.append(lam)
            partners.append(perm.numpy())
        logits = model(x)
        if family == "ngc":
            loss = smoothed_loss(logits, targets, 0.0)  # sparse softmax cross-entropy
            decayed = [p for n, p in params.items() if not _is_batch_norm(n)]  # var_storage: not 'BatchNorm'
            objective = loss + spec["weight_decay"] * sum((p ** 2).sum() / 2 for p in decayed)
        else:
            loss = objective = smoothed_loss(logits, targets, 0.1)
        model.zero_grad()
        objective.backward()
        with torch.no_grad():
            if family == "ngc":
                lr = ngc_lr(step, spec["peak_lr"])
                for n, p in params.items():  # LarcOptimizer, clip mode, then MomentumOptimizer(use_nesterov=True)
                    g = p.grad
                    w_norm, g_norm = p.norm(), g.norm()
                    local = 0.003 * w_norm / g_norm if w_norm > 0 and g_norm > 0 else torch.tensor(1.0, dtype=g.dtype)
                    g = g * torch.clamp(local / lr, max=1.0)
                    velocity[n] = 0.9 * velocity[n] + g
                    p -= lr * (g + 0.9 * velocity[n])
            else:
                lr = dle_lr(step, spec["peak_lr"], spec["warmup_epochs"])
                for n, p in params.items():  # torch.optim.SGD(momentum=0.875, nesterov=False), 'bn' groups
                    g = p.grad + (0.0 if "bn" in n else spec["weight_decay"]) * p
                    velocity[n] = g if step == 0 else 0.875 * velocity[n] + g
                    p -= lr * velocity[n]
        losses.append(loss.item())
    # float32: the test's tolerance is 1e-3 of each update, float32 keeps 1e-7 of it (and half the bytes).
    arrays = {f"update/{n}": (p.detach() - start[n]).numpy().astype(np.float32) for n, p in params.items()}
    arrays.update({f"buffer/{n}": b.numpy().astype(np.float32) for n, b in model.named_buffers() if "running" in n})
    if lams:
        arrays.update(lam=np.array(lams), partner=np.array(partners, np.int32))
    return np.array(losses), arrays, keys


def spread(losses, arrays, reference_losses, reference, start):
    """The test's measure of a trajectory against the reference's: (largest relative per-step loss difference,
    largest per-tensor update difference relative to the update, or to a thousandth of the tensor when the
    update is smaller than that)."""
    loss = float(np.max(np.abs(losses - reference_losses) / np.abs(reference_losses)))
    update = max(float(np.linalg.norm(arrays[k] - v) / max(np.linalg.norm(v), 1e-3 * np.linalg.norm(start[k[7:]])))
                 for k, v in reference.items() if k.startswith("update/"))
    return loss, update


# The neighbours a recorded trajectory must keep close to it. The test runs tfcnn in float64 for all the steps:
# starting weights moved by 1e-9 and 1e-8 of themselves stand for other kernels' rounding (and tfcnn's float32
# learning rate and mixing weights). It runs tfcnn's float32 trainer for the first EARLY_STEPS, as the
# reference in float32 here. Not farther: float32 training is chaotic. Where a ReLU is within rounding of
# switching, it does in one run and not in the other; the forward pass hardly notices, but the backward pass
# routes a gradient differently, and when the unit is one of an SE gate's few, the whole block's gradient for
# that image changes (seen: oneDNN's float32 kernels stray by 5% in every tensor's update at the second step,
# Eigen's agree to 1e-7; float32 runs of 20 steps strayed by 1e-3 from float64 for most seeds).
EARLY_STEPS = 1
NEIGHBOURS = [(torch.float64, 1e-9, STEPS), (torch.float64, 1e-8, STEPS), (torch.float32, 0.0, EARLY_STEPS)]


def run(family):
    """Records the family's float64 trajectory (all the steps, and the first EARLY_STEPS), after checking that
    its neighbours follow it closely (to a quarter of the test's tolerances): where one does not, the test
    could show rounding as a wrong rule, and no fixture is written."""
    spec = FAMILIES[family]
    losses, arrays, keys = trajectory(family, torch.float64)
    early_losses, early, _ = trajectory(family, torch.float64, steps=EARLY_STEPS)
    start = weightgen.state_dict(keys, SEED, BOTTLENECK_GAMMAS)
    spreads = []
    for dtype, perturbation, steps in NEIGHBOURS:
        reference = (losses, arrays) if steps == STEPS else (early_losses, early)
        spreads.append(spread(*trajectory(family, dtype, perturbation, steps)[:2], *reference, start))
    worst = tuple(max(s[i] for s in spreads) for i in range(2))
    if worst[0] > LOSS_RTOL / 4 or worst[1] > UPDATE_RTOL / 4:
        sys.exit(f"{family}: a neighbour strays from the trajectory by {worst[0]:.1e} (loss) / {worst[1]:.1e} "
                 f"(update): the test could not tell rounding from a wrong rule; change SEED or the rates")
    arrays.update({f"early_{k}": v for k, v in early.items() if k.startswith(("update/", "buffer/"))})
    setup = dict(family=family, recipe=spec["recipe"], seed=SEED, steps=STEPS, early_steps=EARLY_STEPS, batch=BATCH,
                 size=SIZE, classes=CLASSES, steps_per_epoch=STEPS_PER_EPOCH, arch=ARCH, damped=BOTTLENECK_GAMMAS,
                 keys=keys, peak_lr=spec["peak_lr"], weight_decay=spec["weight_decay"], overrides=spec["overrides"],
                 neighbours_spread=dict(loss=worst[0], update=worst[1]),
                 versions={"torch": torch.__version__, "timm": timm.__version__, "numpy": np.__version__})
    os.makedirs(OUT, exist_ok=True)
    np.savez_compressed(os.path.join(OUT, f"{family}.npz"), losses=losses, early_losses=early_losses,
                        setup=json.dumps(setup), **arrays)
    print(f"{family}: losses {losses[0]:.4f} -> {losses[-1]:.4f}; neighbours stray by {worst[0]:.1e} (loss), "
          f"{worst[1]:.1e} (update)")


def _is_batch_norm(name):
    """timm's batch norms: bn1/bn2/bn3, and downsample.1 (nvutils names every batch norm 'BatchNorm')."""
    return ".bn" in f".{name}" or "downsample.1." in name


def record_crops(draws=100_000):
    """Quantiles of torchvision's RandomResizedCrop.get_params draws (scale (0.08, 1), ratio (3/4, 4/3)) for
    a landscape image, and for a panorama where most attempts fail and the centre-crop fallback decides."""
    crop = torchvision.transforms.RandomResizedCrop(224)
    torch.manual_seed(SEED)
    out = {"draws": draws, "torchvision": torchvision.__version__, "images": {}}
    for height, width in ((375, 500), (100, 900)):
        image = torch.zeros(1, height, width)
        boxes = np.array([crop.get_params(image, crop.scale, crop.ratio) for _ in range(draws)], np.float64)
        top, left, h, w = boxes.T
        stats = {"area": h * w / (height * width), "log_aspect": np.log(w / h),
                 "centre_y": (top + h / 2) / height, "centre_x": (left + w / 2) / width}
        out["images"][f"{height}x{width}"] = {
            "quantiles": {k: np.quantile(v, np.linspace(0, 1, 1001)).tolist() for k, v in stats.items()},
            "fallback": float(np.mean(h * w == _fallback_area(height, width)))}
    with open(os.path.join(OUT, "resized_crop.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"resized_crop: {draws} draws per image")


def _fallback_area(height, width):
    ratio = width / height
    if ratio < 3 / 4:
        return width * int(round(width / (3 / 4)))
    if ratio > 4 / 3:
        return height * int(round(height * 4 / 3))
    return height * width


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in sys.argv[1:] or [*FAMILIES, "crops"]:
        record_crops() if name == "crops" else run(name)
