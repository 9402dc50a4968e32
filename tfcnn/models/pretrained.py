"""Published ImageNet weights by name, downloaded once into a verified cache.

    create_model("resnet50", weights="imagenet")                # the model's default published weights
    create_model("resnet50", weights="timm:resnet50.a1_in1k")    # a timm hub file (safetensors, no torch)
    create_model("resnet50", weights="torchvision")             # torchvision's newest .pth (reading it needs torch)
    weight_names("resnet50")                                    # every name the model's weights go by

The table below lists, per zoo model, every published file that its architecture computes the function of
(`model_info(name).reference`'s own definition or a twin proven to compute it): timm's Hugging Face hub
tags (`timm:<arch>.<tag>`: `model.safetensors` with the `config.json` that carries its pretrained_cfg) and
torchvision's Weights enum files (`torchvision:IMAGENET1K_V1`, `torchvision` for its DEFAULT).
"imagenet" prefers the hub, which needs no torch: timm's republication of torchvision's original weights
(`<arch>.tv_in1k`) for torchvision's definitions, else torchvision's DEFAULT file; timm's own default tag
for timm's definitions. tests/scripts/record_pretrained_keys.py records the files, URLs, licenses and key
names from timm's and torchvision's code; tests/test_pretrained.py checks this table against them.

A file is fetched once into the cache, `$TFCNN_CACHE_DIR`, else `$XDG_CACHE_HOME/tfcnn/weights` (default
`~/.cache/tfcnn/weights`), as `timm/<arch>.<tag>/{model.safetensors,config.json}` or
`torchvision/<file>.pth`; later calls read it there without the network. A hub file that timm (huggingface_hub)
already keeps in the Hugging Face cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
`~/.cache/huggingface/hub`: `models--timm--<arch>.<tag>/snapshots/<refs/main>/<file>`) is verified against its
blob's name (an LFS file's SHA-256, a git blob's SHA-1) and linked into the cache instead of being downloaded.
Processes on one machine (Horovod's ranks) fetch a missing file once: the first takes a file lock in the cache
(`.locks/`), the others wait for it and then read the file. Downloads are verified before they
count: the byte count against Content-Length (and the hub's X-Linked-Size), the SHA-256 against the table's
full hash where one is known, against the 8-hex prefix in a torchvision file name (as torchvision's own
check_hash does), and against the server's X-Linked-Etag / ETag when that is a SHA-256 (Hugging Face sends
the LFS file's there). A file is written under a temporary name in its cache directory and renamed only when
complete and verified, so a broken download never leaves a file that loads. `TFCNN_OFFLINE=1` forbids the
network (a missing file is an error naming where to put it), `HF_HUB_OFFLINE=1` the hub's; `TFCNN_WEIGHTS_MIRROR`
(all hosts), `TFCNN_HUB_MIRROR` or else `HF_ENDPOINT` (the hub), and `TFCNN_TORCHVISION_MIRROR` replace a URL's
scheme and host, for mirrors and tests.

Why the standard library and no download package: what the checks above need (a hash prefix from a file
name, the hub's X-Linked-Etag from the redirect before the CDN, Content-Length, errors naming the URL and both
hashes, an offline error naming the path) lies outside pooch's known_hash model, so pooch would only do the
streaming GET and the temporary-file rename, a few lines here, at the price of pooch and platformdirs (and
tqdm for a bar) in every install; huggingface_hub covers the hub alone, brings a dozen packages (filelock,
fsspec, requests, tqdm, pyyaml, ...) into an install whose packages are fixed, and its cache layout is a few
directories and a ref file, read here in a dozen lines. This module imports nothing of TensorFlow or tfcnn,
so the recording script and the tests' processes read the table without them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import http.client
import importlib.util
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HUB = "https://huggingface.co/timm/{tag}/resolve/main/{file}"  # timm's hf_hub_id "timm/<arch>.<tag>"
TORCHVISION = "https://download.pytorch.org/models/{file}"
NAME_FORMS = ("imagenet", "torchvision", "torchvision:<Weights enum name>", "timm:<arch>.<tag>")
APACHE, BSD, NC = "apache-2.0", "bsd-3-clause", "cc-by-nc-4.0"

# timm 1.0.31's pretrained tags (default_cfgs) of each model's reference architecture, by the license in
# their pretrained_cfg. Left out: resnet50.bamboo (no classifier) and timm's VGGs (their pre_logits convs do
# not fit torchvision's VGG that tfcnn maps).
TIMM_TAGS = {
    "resnet18": {APACHE: "a1_in1k a2_in1k a3_in1k gluon_in1k", BSD: "tv_in1k",
                 NC: "fb_ssl_yfcc100m_ft_in1k fb_swsl_ig1b_ft_in1k"},
    "resnet34": {APACHE: "a1_in1k a2_in1k a3_in1k bt_in1k gluon_in1k ra4_e3600_r224_in1k", BSD: "tv_in1k"},
    "resnet50": {APACHE: "a1_in1k a1h_in1k a2_in1k a3_in1k am_in1k b1k_in1k b2k_in1k bt_in1k c1_in1k c2_in1k "
                         "d_in1k gluon_in1k ra_in1k ram_in1k", BSD: "tv2_in1k tv_in1k",
                 NC: "fb_ssl_yfcc100m_ft_in1k fb_swsl_ig1b_ft_in1k"},
    "resnet101": {APACHE: "a1_in1k a1h_in1k a2_in1k a3_in1k gluon_in1k", BSD: "tv2_in1k tv_in1k"},
    "resnet152": {APACHE: "a1_in1k a1h_in1k a2_in1k a3_in1k gluon_in1k", BSD: "tv2_in1k tv_in1k"},
    "resnext50_32x4d": {APACHE: "a1_in1k a1h_in1k a2_in1k a3_in1k gluon_in1k ra_in1k", BSD: "tv2_in1k tv_in1k",
                        NC: "fb_ssl_yfcc100m_ft_in1k fb_swsl_ig1b_ft_in1k"},
    "wide_resnet50_2": {APACHE: "racm_in1k", BSD: "tv2_in1k tv_in1k"},
    "resnext101_32x4d": {APACHE: "gluon_in1k", NC: "fb_ssl_yfcc100m_ft_in1k fb_swsl_ig1b_ft_in1k"},
    "se_resnext50_32x4d": {APACHE: "gluon_in1k racm_in1k"},
    "se_resnext101_32x4d": {APACHE: "gluon_in1k"},
    "densenet121": {APACHE: "ra_in1k tv_in1k"},
    "inception_v3": {APACHE: "gluon_in1k tf_adv_in1k tf_in1k tv_in1k"},
    "inception_v4": {APACHE: "tf_in1k"},
    "inception_resnet_v2": {APACHE: "tf_ens_adv_in1k tf_in1k"},
    "efficientnet_b0": {APACHE: "ra4_e3600_r224_in1k ra_in1k"},
    "efficientnet_b1": {APACHE: "ft_in1k ra4_e3600_r240_in1k"},
    "efficientnet_b2": {APACHE: "ra_in1k"},
    "efficientnet_b3": {APACHE: "ra2_in1k"},
    "efficientnet_b4": {APACHE: "ra2_in1k"},
}
TIMM_ARCH = {"se_resnext50_32x4d": "seresnext50_32x4d", "se_resnext101_32x4d": "seresnext101_32x4d",
             "xception": "legacy_xception"}
# Not on the hub: timm reads legacy_xception's file from a GitHub release (a .pth: reading it needs torch).
TIMM_URLS = {"xception": ("tf_in1k", APACHE, "https://github.com/rwightman/pytorch-image-models/releases/download/"
                                             "v0.1-cadene/xception-43020ad28.pth")}

# torchvision 0.29.1's Weights enums (the ImageNet-1K classifiers; vgg16's IMAGENET1K_FEATURES has none).
# Its DEFAULT is the newest, listed last. torchvision's EfficientNets name their tensors otherwise than timm's.
TORCHVISION_FILES = {
    "alexnet": {"IMAGENET1K_V1": "alexnet-owt-7be5be79.pth"},
    "densenet121": {"IMAGENET1K_V1": "densenet121-a639ec97.pth"},
    "googlenet": {"IMAGENET1K_V1": "googlenet-1378be20.pth"},
    "inception_v3": {"IMAGENET1K_V1": "inception_v3_google-0cc3c7bd.pth"},
    "mobilenet_v2": {"IMAGENET1K_V1": "mobilenet_v2-b0353104.pth", "IMAGENET1K_V2": "mobilenet_v2-7ebf99e0.pth"},
    "resnet18": {"IMAGENET1K_V1": "resnet18-f37072fd.pth"},
    "resnet34": {"IMAGENET1K_V1": "resnet34-b627a593.pth"},
    "resnet50": {"IMAGENET1K_V1": "resnet50-0676ba61.pth", "IMAGENET1K_V2": "resnet50-11ad3fa6.pth"},
    "resnet101": {"IMAGENET1K_V1": "resnet101-63fe2227.pth", "IMAGENET1K_V2": "resnet101-cd907fc2.pth"},
    "resnet152": {"IMAGENET1K_V1": "resnet152-394f9c45.pth", "IMAGENET1K_V2": "resnet152-f82ba261.pth"},
    "resnext50_32x4d": {"IMAGENET1K_V1": "resnext50_32x4d-7cdf4587.pth",
                        "IMAGENET1K_V2": "resnext50_32x4d-1a0047aa.pth"},
    "wide_resnet50_2": {"IMAGENET1K_V1": "wide_resnet50_2-95faca4d.pth",
                        "IMAGENET1K_V2": "wide_resnet50_2-9ba9bcbe.pth"},
    "vgg11": {"IMAGENET1K_V1": "vgg11-8a719046.pth"},
    "vgg13": {"IMAGENET1K_V1": "vgg13-19584684.pth"},
    "vgg16": {"IMAGENET1K_V1": "vgg16-397923af.pth"},
    "vgg16_bn": {"IMAGENET1K_V1": "vgg16_bn-6c64b313.pth"},
    "vgg19": {"IMAGENET1K_V1": "vgg19-dcbb9e9d.pth"},
}

# "imagenet": torchvision's original weights from the hub where timm republishes them (its config.json then
# gives torchvision's 256 -> 224 evaluation), else torchvision's DEFAULT file; timm's default tag (what
# timm.create_model(arch, pretrained=True) loads) for timm's definitions, unless its license forbids
# commercial use (cc-by-nc): then timm's first permissively licensed tag, so that "imagenet" never carries
# a non-commercial license unasked.
IMAGENET = {
    **{model: f"timm:{model}.tv_in1k" for model in (
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2",
        "densenet121", "inception_v3")},
    **{model: "torchvision:IMAGENET1K_V1" for model in (
        "alexnet", "googlenet", "vgg11", "vgg13", "vgg16", "vgg16_bn", "vgg19")},
    "mobilenet_v2": "torchvision:IMAGENET1K_V2",
    "resnext101_32x4d": "timm:resnext101_32x4d.gluon_in1k",
    "se_resnext50_32x4d": "timm:seresnext50_32x4d.racm_in1k",
    "se_resnext101_32x4d": "timm:seresnext101_32x4d.gluon_in1k",
    "inception_v4": "timm:inception_v4.tf_in1k",
    "inception_resnet_v2": "timm:inception_resnet_v2.tf_in1k",
    "efficientnet_b0": "timm:efficientnet_b0.ra_in1k",
    "efficientnet_b1": "timm:efficientnet_b1.ra4_e3600_r240_in1k",
    "efficientnet_b2": "timm:efficientnet_b2.ra_in1k",
    "efficientnet_b3": "timm:efficientnet_b3.ra2_in1k",
    "efficientnet_b4": "timm:efficientnet_b4.ra2_in1k",
    "xception": "timm:legacy_xception.tf_in1k",
}
# Models whose hub tv_in1k / tv2_in1k files are torchvision's IMAGENET1K_V1 / V2 (timm's pretrained_cfg url).
HUB_TWINS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2")
SHA256 = {}  # (model, name) -> the file's full SHA-256, where one is known (neither timm nor torchvision says)

# Per host, the variables naming its mirror, first found wins; then TFCNN_WEIGHTS_MIRROR for every host.
MIRRORS = {"huggingface.co": ("TFCNN_HUB_MIRROR", "HF_ENDPOINT"), "download.pytorch.org": ("TFCNN_TORCHVISION_MIRROR",)}
TRUE = ("1", "true", "yes", "on")  # what an environment switch accepts (huggingface_hub's values), any case
PROGRESS_MIN_BYTES = 1 << 20  # smaller files (config.json) download without a progress line
CHUNK = 1 << 20
TIMEOUT = 60  # seconds without a byte before a download fails
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")  # the Hugging Face cache's blob name of a file stored in git, not LFS
_TORCHVISION_HASH = re.compile(r"-([a-f0-9]*)\.")  # torchvision's (torch.hub's) HASH_REGEX


class DownloadError(OSError, ValueError):
    """Published weights that could not be had: offline and not cached, a failed download or one that did not
    verify (nothing of it is left in the cache). A ValueError too, as every other weights error: callers that
    stop all ranks on a bad --init_weights catch those."""


@dataclasses.dataclass(frozen=True)
class Published:
    """One published weights file of a zoo model."""
    model: str
    name: str  # "timm:resnet50.tv_in1k", "torchvision:IMAGENET1K_V1"
    url: str
    license: str
    config_url: str | None = None  # a hub file's config.json (timm's pretrained_cfg: how to feed the weights)
    sha256: str | None = None

    @property
    def file(self) -> str:
        return self.url.rsplit("/", 1)[1]

    @property
    def directory(self) -> str:
        """Its directory in the cache, one per hub repo, so that config.json lies beside the weights."""
        source, _, tag = self.name.partition(":")
        return source if source == "torchvision" else os.path.join(source, tag)

    @property
    def hub_repo(self) -> str | None:
        """Its Hugging Face hub repository ("timm/resnet50.tv_in1k"), for a hub file."""
        return self.name.replace("timm:", "timm/", 1) if self.url.startswith("https://huggingface.co/") else None

    @property
    def hash_prefix(self) -> str | None:
        """The SHA-256 prefix a torchvision file name carries (resnet50-0676ba61.pth), checked as torchvision does."""
        match = _TORCHVISION_HASH.search(self.file) if self.name.startswith("torchvision:") else None
        return match.group(1) if match and match.group(1) else None


def _table() -> dict:
    table = {}
    for model, by_license in TIMM_TAGS.items():
        arch = TIMM_ARCH.get(model, model)
        for license_, tags in by_license.items():
            for tag in tags.split():
                name = f"timm:{arch}.{tag}"
                table.setdefault(model, []).append(Published(
                    model, name, HUB.format(tag=f"{arch}.{tag}", file="model.safetensors"), license_,
                    HUB.format(tag=f"{arch}.{tag}", file="config.json"), SHA256.get((model, name))))
    for model, (tag, license_, url) in TIMM_URLS.items():
        name = f"timm:{TIMM_ARCH.get(model, model)}.{tag}"
        table.setdefault(model, []).append(Published(model, name, url, license_, None, SHA256.get((model, name))))
    for model, files in TORCHVISION_FILES.items():
        for enum_name, file in files.items():
            name = f"torchvision:{enum_name}"
            table.setdefault(model, []).append(Published(model, name, TORCHVISION.format(file=file), BSD, None,
                                                         SHA256.get((model, name))))
    return {model: tuple(sorted(entries, key=lambda e: e.name)) for model, entries in table.items()}


TABLE = _table()


def published(model: str) -> tuple:
    """The published weights files of a zoo model (none for a model whose reference publishes none)."""
    return TABLE.get(model, ())


def aliases(model: str) -> dict:
    """{"imagenet": name, "torchvision": name} for the model's default and torchvision's DEFAULT."""
    out = {"imagenet": IMAGENET[model]} if model in IMAGENET else {}
    if model in TORCHVISION_FILES:
        out["torchvision"] = f"torchvision:{list(TORCHVISION_FILES[model])[-1]}"
    return out


def weight_names(model: str) -> list:
    """Every name `create_model(model, weights=...)` accepts for published weights."""
    return [*aliases(model), *(entry.name for entry in published(model))]


def is_weights_name(weights) -> bool:
    """Whether a `weights` value is a name (resolved here) rather than a path. A directory called "imagenet"
    is passed as "./imagenet"."""
    return isinstance(weights, str) and (weights in ("imagenet", "torchvision")
                                         or weights.startswith(("timm:", "torchvision:")))


def find(model: str, weights: str) -> Published:
    """The table entry a weights name stands for; a ValueError listing the model's names otherwise."""
    name = aliases(model).get(weights, weights)
    for entry in published(model):
        if entry.name == name:
            return entry
    if not published(model):
        raise ValueError(f"weights {weights!r}: {model} has no published weights by name (no file of its reference "
                         f"computes its function); pass a weights file or a tfcnn checkpoint path instead")
    raise ValueError(f"weights {weights!r}: not a name of {model}'s published weights; its names: "
                     f"{', '.join(weight_names(model))} (or pass a file path)")


def cache_dir() -> str:
    """Where published weights are kept: $TFCNN_CACHE_DIR, else $XDG_CACHE_HOME/tfcnn/weights."""
    if os.environ.get("TFCNN_CACHE_DIR"):
        return os.path.expanduser(os.environ["TFCNN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfcnn", "weights")


def offline(entry: Published) -> str | None:
    """The setting that forbids downloading the entry's files (TFCNN_OFFLINE, or HF_HUB_OFFLINE for a hub file),
    or None."""
    switches = ("TFCNN_OFFLINE", "HF_HUB_OFFLINE") if entry.hub_repo else ("TFCNN_OFFLINE",)
    return next((name for name in switches if os.environ.get(name, "").strip().lower() in TRUE), None)


def hf_cache_dir() -> str:
    """The Hugging Face hub cache, where huggingface_hub (so timm) keeps files: $HF_HUB_CACHE, else
    $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub (default ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.expanduser(os.environ.get("HF_HOME") or os.path.join(base, "huggingface")), "hub")


def hf_cached(entry: Published, file: str) -> str | None:
    """`file` of the entry's hub repository at its main revision in the Hugging Face cache, as huggingface_hub
    resolves it (models--timm--<arch>.<tag>/refs/main names the snapshot), or None when it is not there."""
    if not entry.hub_repo:
        return None
    repo = os.path.join(hf_cache_dir(), "models--" + entry.hub_repo.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main")) as f:
            revision = f.read().strip()
    except OSError:
        return None
    path = os.path.join(repo, "snapshots", revision, file)
    return path if revision and os.path.isfile(path) else None


def weights_file(model: str, weights: str) -> str:
    """The cached file of a weights name (with its config.json), from the Hugging Face cache or downloaded and
    verified when absent; one process per machine fetches it (see the module docstring)."""
    entry = find(model, weights)
    directory = os.path.join(cache_dir(), entry.directory)
    path = os.path.join(directory, entry.file)
    files = ([(entry.config_url, os.path.join(directory, "config.json"))] if entry.config_url else []) + [
        (entry.url, path)]  # the weights last: their presence means the directory is complete
    if all(os.path.isfile(where) for _, where in files):
        return path
    with _machine_lock(entry):  # the others wait here, then find the files
        for url, where in files:
            shared = None if os.path.isfile(where) else hf_cached(entry, os.path.basename(where))
            if shared:
                _link_verified(shared, where, sha256=entry.sha256 if url == entry.url else None)
        missing = [(url, where) for url, where in files if not os.path.isfile(where)]
        if not missing:
            return path
        forbidden = offline(entry)
        if forbidden:
            places = "; ".join(f"{where} (from {url})" for url, where in missing)
            shared = f"; the Hugging Face cache {hf_cache_dir()} has no copy either" if entry.hub_repo else ""
            raise DownloadError(f"weights {weights!r} of {model} ({entry.name}): {forbidden}=1 forbids downloading "
                                f"and the cache lacks it: place the file{'s' * (len(missing) > 1)} at {places}, or "
                                f"unset {forbidden}{shared}")
        if entry.file.endswith(".pth") and importlib.util.find_spec("torch") is None:  # before, not after, 100s of MB
            twin = hub_twin(entry)
            raise ValueError(f"weights {weights!r} of {model} ({entry.name}) are a PyTorch file ({entry.url}), and "
                             f"reading it needs torch, which is not installed (pip install torch)"
                             + (f"; {twin!r} is the same file as safetensors, readable without torch" if twin else ""))
        for url, where in missing:
            download(url, where, sha256=entry.sha256 if url == entry.url else None,
                     hash_prefix=entry.hash_prefix if url == entry.url else None)
    return path


@contextlib.contextmanager
def _machine_lock(entry: Published):
    """An exclusive lock on the entry's files among the processes of this machine (a file lock in the cache's
    .locks/, which outlives nobody: the system drops it when its holder exits, however it exits)."""
    locks = os.path.join(cache_dir(), ".locks")
    os.makedirs(locks, exist_ok=True)
    with open(os.path.join(locks, entry.directory.replace(os.sep, "--") + ".lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"tfcnn: waiting for another process fetching {entry.name}", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _link_verified(shared: str, where: str, sha256: str | None = None) -> None:
    """Links a Hugging Face cache file at `where` (atomically: a link under a temporary name, renamed), once its
    content matches the hash its blob is named by (an LFS file's SHA-256, a git file's blob SHA-1) and the
    table's SHA-256 where known; a DownloadError naming the file and both hashes otherwise."""
    blob = os.path.basename(os.path.realpath(shared))
    with open(shared, "rb") as f:
        data_hash, git_hash = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % os.fstat(f.fileno()).st_size)
        while chunk := f.read(CHUNK):
            data_hash.update(chunk)
            git_hash.update(chunk)
    expected = []  # (what says it, the hash it says, the file's hash of that kind)
    if _SHA256.match(blob):
        expected.append((f"the name of its blob {blob}", blob, data_hash.hexdigest()))
    elif _GIT_SHA1.match(blob):
        expected.append((f"the name of its blob {blob}", blob, git_hash.hexdigest()))
    if sha256:
        expected.append(("tfcnn's table", sha256, data_hash.hexdigest()))
    for source, want, got in expected:
        if want != got:
            raise DownloadError(f"{shared} (the Hugging Face cache): hash mismatch: expected {want} ({source}), "
                                f"received {got}: a corrupted file; delete it (and its blob) to fetch it again")
    os.makedirs(os.path.dirname(where), exist_ok=True)
    temporary = os.path.join(os.path.dirname(where), f".{os.path.basename(where)}.{os.getpid()}.link")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    os.symlink(os.path.abspath(shared), temporary)
    os.replace(temporary, where)
    checks = " and ".join(source for source, _, _ in expected)
    print(f"tfcnn: {where}: the Hugging Face cache's {shared} ("
          f"{f'verified against {checks}' if checks else 'no hash to verify it against'}), linked", file=sys.stderr,
          flush=True)


def hub_twin(entry: Published) -> str | None:
    """The hub name of the same weights as a torchvision file, where timm says which file it republished."""
    if entry.model in HUB_TWINS and entry.name in ("torchvision:IMAGENET1K_V1", "torchvision:IMAGENET1K_V2"):
        return f"timm:{entry.model}.{'tv_in1k' if entry.name.endswith('V1') else 'tv2_in1k'}"
    return None


def mirrored(url: str) -> str:
    """`url` with its scheme and host replaced by the mirror the environment names for that host, if any."""
    parts = urllib.parse.urlsplit(url)
    for name in (*MIRRORS.get(parts.hostname, ()), "TFCNN_WEIGHTS_MIRROR"):
        mirror = os.environ.get(name)
        if mirror:
            if not mirror.startswith(("http://", "https://")):
                raise ValueError(f"{name} must be a URL such as https://mirror.example.com, received: {mirror!r}")
            return mirror.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")
    return url


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Keeps each redirect's headers: the hub answers a file with a redirect to its CDN that carries the file's
    SHA-256 and size (X-Linked-Etag, X-Linked-Size), which the CDN's own response does not."""

    def __init__(self):
        self.headers = []

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self.headers.append(headers)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def download(url: str, path: str, *, sha256: str | None = None, hash_prefix: str | None = None) -> str:
    """Downloads `url` (through a mirror, if set) to `path`, atomically, verified as the module docstring says.
    sha256: the file's known hash. hash_prefix: a known prefix of it. Raises DownloadError."""
    source = mirrored(url)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # A name that no loader reads (".part"), in the same directory so that the rename is atomic.
    handle, partial = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            received, digest, headers = _fetch(source, out, path)
            out.flush()
            os.fsync(out.fileno())
        _verify(source, headers, received, digest.hexdigest(), sha256, hash_prefix, path)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
    return path


def _fetch(url, out, path):
    redirects = _Redirects()
    opener = urllib.request.build_opener(redirects)
    request = urllib.request.Request(url, headers={"User-Agent": "tfcnn", "Accept-Encoding": "identity"})
    try:
        response = opener.open(request, timeout=TIMEOUT)
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        raise DownloadError(f"{url}: cannot connect ({getattr(error, 'reason', error)}); without network access, "
                            f"place the file at {path} yourself, or set TFCNN_WEIGHTS_MIRROR") from None
    headers = [*redirects.headers, response.headers]
    length = response.headers.get("Content-Length")
    progress = _Progress(url, int(length) if length and length.isdigit() else None)
    digest, received = hashlib.sha256(), 0
    with response:
        try:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                progress.update(received)
        except (OSError, ValueError, http.client.HTTPException) as error:  # a reset connection, IncompleteRead
            progress.close()
            raise DownloadError(f"{url}: the download broke off after {received:,} bytes ({error}); nothing was "
                                f"kept in the cache: run again to retry") from None
    progress.close()
    return received, digest, headers


def _header(headers, name):
    for block in headers:
        if block.get(name):
            return block[name]
    return None


def _verify(url, headers, received, digest, sha256, hash_prefix, path):
    sizes = [(name, _header(headers[-1:] if name == "Content-Length" else headers, name))
             for name in ("Content-Length", "X-Linked-Size")]
    for name, size in sizes:
        if size and size.isdigit() and int(size) != received:
            raise DownloadError(f"{url}: received {received:,} bytes, but {name} says {int(size):,}: the download "
                                f"broke off or the server is wrong; nothing was kept in the cache (run again to retry)")
    expected = [("tfcnn's table", sha256)] if sha256 else []
    for name in ("X-Linked-Etag", "ETag"):
        tag = (_header(headers, name) or "").removeprefix("W/").strip('"').lower()
        if _SHA256.match(tag):
            expected.append((f"the server's {name}", tag))
            break
    for where, value in expected:
        if digest != value.lower():
            raise DownloadError(f"{url}: SHA-256 mismatch: expected {value} ({where}), received {digest}; nothing "
                                f"was kept in the cache (a corrupted download, or a mirror serving another file)")
    if hash_prefix and not digest.startswith(hash_prefix):
        raise DownloadError(f"{url}: SHA-256 mismatch: expected {hash_prefix}... (the prefix in the file name), "
                            f"received {digest}; nothing was kept in the cache")
    if received >= PROGRESS_MIN_BYTES:
        checks = [where for where, _ in expected] + (["the file name's prefix"] if hash_prefix else [])
        said = f"verified against {' and '.join(checks)}" if checks else "no known hash to verify it against"
        print(f"tfcnn: SHA-256 {digest} ({said}); saved {path}", file=sys.stderr, flush=True)


class _Progress:
    """A progress line on stderr for files from PROGRESS_MIN_BYTES up: redrawn in place on a terminal, one
    line per quarter in a log."""

    def __init__(self, url, total):
        self.stream, self.total, self.start, self.drawn, self.quarter = sys.stderr, total, time.monotonic(), 0.0, 0
        self.shown = total is None or total >= PROGRESS_MIN_BYTES
        self.tty = self.shown and hasattr(self.stream, "isatty") and self.stream.isatty()
        if self.shown:
            size = f"{total / 1e6:.1f} MB" if total is not None else "size unknown"
            print(f"tfcnn: downloading {url} ({size})", file=self.stream, flush=True)

    def update(self, done):
        if not self.shown:
            return
        now = time.monotonic()
        if self.tty and (now - self.drawn >= 0.2 or done == self.total):
            self.stream.write(f"\r  {self._status(done, now)}   ")
            self.stream.flush()
            self.drawn = now
        elif not self.tty and self.total and done * 4 // self.total > self.quarter:
            self.quarter = done * 4 // self.total
            print(f"  {self._status(done, now)}", file=self.stream, flush=True)

    def close(self):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _status(self, done, now):
        rate = done / max(now - self.start, 1e-3) / 1e6
        if self.total:
            return f"{100 * done / self.total:3.0f}%  {done / 1e6:.1f} of {self.total / 1e6:.1f} MB, {rate:.1f} MB/s"
        return f"{done / 1e6:.1f} MB, {rate:.1f} MB/s"


def markdown(models) -> str:
    """The docs' table of names: per model, what "imagenet" and "torchvision" stand for, and the other names."""
    rows = ["| model | `imagenet` | `torchvision` | more names |", "|---|---|---|---|"]
    for model in models:
        named = aliases(model)
        others = [cell(e) for e in published(model) if e.name not in named.values()]
        rows.append(f"| {model} | {cell(find(model, 'imagenet')) if named else 'none published'} | "
                    f"{cell(find(model, 'torchvision')) if 'torchvision' in named else ''} | {', '.join(others)} |")
    return "\n".join(rows) + "\n"


def cell(entry: Published) -> str:
    """An entry's name for a table: `timm:resnet50.tv_in1k`, with "(torch)" for a PyTorch file and the license
    when it is not a permissive one."""
    needs = " (torch)" if entry.file.endswith(".pth") else ""
    licence = "" if entry.license in (APACHE, BSD) else f" ({entry.license})"
    return f"`{entry.name}`{needs}{licence}"
