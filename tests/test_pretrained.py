"""Published weights by name: the table against what timm and torchvision publish (recorded by
tests/scripts/record_pretrained_keys.py), every entry's keys and shapes through the strict loader, and the
download cache (once, verified, atomic, offline, mirrored) against files served from a loopback server.
Nothing here reaches the internet, and nothing imports torch."""
import dataclasses
import hashlib
import http.server
import importlib.util
import io
import json
import os
import re
import sys
import threading
import urllib.parse

import numpy as np
import pytest

import weightgen
from tfcnn.models import create_model, list_models, model_info, pretrained, weights

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "pretrained_keys.json")
HAS_TORCH = importlib.util.find_spec("torch") is not None
MIRROR_VARIABLES = ("TFCNN_WEIGHTS_MIRROR", "TFCNN_HUB_MIRROR", "TFCNN_TORCHVISION_MIRROR", "TFCNN_OFFLINE",
                    "HF_ENDPOINT", "HF_HUB_OFFLINE")


def quiet(*_):
    pass


with open(FIXTURE) as f:
    RECORDED = json.load(f)


def digest(keys) -> str:
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:12]


def recorded_keys(keyset: str) -> list:
    """A recorded key list, from the reference fixture it names (which must still hold it) or as stored."""
    stored = RECORDED["keysets"][keyset]
    if "reference_fixture" in stored:
        keys = weightgen.fixture(stored["reference_fixture"])["keys"]
        assert digest(keys) == keyset, f"tests/fixtures/reference/{stored['reference_fixture']}.json changed"
        return keys
    return stored["keys"]


def publishable(record: dict) -> bool:
    """A recorded file that tfcnn's table must offer: it computes the reference's function and holds an
    ImageNet-1k classifier (timm's label_offset files would hold 1001 classes)."""
    cfg = record.get("pretrained_cfg", {})
    return bool(record["same_function"]) and record.get("classes", 1000) == 1000 \
        and cfg.get("num_classes", 1000) == 1000 and not cfg.get("label_offset")


def table_problems(table) -> list:
    """How `table` ({model: entries}) differs from the recorded sources; [] when it agrees."""
    problems = []
    for model in list_models():
        if weights.weight_map_of(model) is None:  # the NGC scripts' networks: no timm / torchvision file is theirs
            if table.get(model):
                problems.append(f"{model}: offers weights, but no reference computes its function")
            continue
        if model not in RECORDED["models"]:
            problems.append(f"{model}: not recorded (run tests/scripts/record_pretrained_keys.py)")
            continue
        recorded = RECORDED["models"][model]
        if recorded["reference"] != model_info(model).reference:
            problems.append(f"{model}: recorded for {recorded['reference']}, now {model_info(model).reference}")
        files = {name: record for name, record in recorded["files"].items() if publishable(record)}
        entries = {entry.name: entry for entry in table.get(model, ())}
        for name in sorted(set(files) ^ set(entries)):
            problems.append(f"{model}: {name} {'missing from the table' if name in files else 'not recorded'}")
        for name in set(files) & set(entries):
            record, entry = files[name], entries[name]
            if record["library"] == "timm" and record["hub"]:
                url = f"https://huggingface.co/{record['hub']}/resolve/main/{record['file']}"
                config = f"https://huggingface.co/{record['hub']}/resolve/main/config.json"
            else:
                url, config = record["url"], None
            if (entry.url, entry.config_url, entry.license) != (url, config, record["license"]):
                problems.append(f"{model}: {name}: {entry.url, entry.config_url, entry.license} recorded as "
                                f"{url, config, record['license']}")
    return problems


def test_the_table_lists_what_timm_and_torchvision_publish():
    """Every recorded file whose architecture computes the reference's function (timm's tags of it or of its
    twin, torchvision's enum files) is in the table with the source's URL and license, and nothing else is."""
    assert table_problems(pretrained.TABLE) == []


def test_the_table_check_notices_a_missing_or_invented_entry():
    table = dict(pretrained.TABLE)
    table["resnet50"] = tuple(e for e in table["resnet50"] if e.name != "timm:resnet50.gluon_in1k")
    fake = dataclasses.replace(table["resnet18"][0], name="timm:resnet18.made_up")
    table["resnet18"] = (*table["resnet18"], fake)
    right, wrong = table["vgg11"][0].url, table["vgg13"][0].url
    table["vgg11"] = (dataclasses.replace(table["vgg11"][0], url=wrong),)
    assert table_problems(table) == [
        "resnet18: timm:resnet18.made_up not recorded",
        "resnet50: timm:resnet50.gluon_in1k missing from the table",
        f"vgg11: torchvision:IMAGENET1K_V1: {wrong, None, 'bsd-3-clause'} recorded as {right, None, 'bsd-3-clause'}"]


def test_a_torchvision_models_reference_top1_is_torchvisions():
    """A model with torchvision's definition states the acc@1 torchvision publishes for its IMAGENET1K_V1 weights,
    except resnet50, which states NVIDIA's result (tfcnn/models/resnet.py)."""
    stated = {name: model_info(name).top1 for name in list_models()
              if model_info(name).reference.startswith("torchvision ") and name != "resnet50"}
    published = {name: RECORDED["models"][name]["files"]["torchvision:IMAGENET1K_V1"]["acc@1"] for name in stated}
    assert {n: round(t, 2) for n, t in stated.items()} == {n: round(t, 2) for n, t in published.items()}


def test_defaults_follow_the_stated_rule():
    """"imagenet": timm's republished torchvision weights (tv_in1k) for torchvision's definitions, else
    torchvision's DEFAULT; timm's default tag for timm's, or its first permissive one where the default is
    non-commercial. "torchvision": torchvision's DEFAULT. The hub twins
    of torchvision files are the files timm's pretrained_cfg says it republished."""
    for model, recorded in RECORDED["models"].items():
        files = {name: record for name, record in recorded["files"].items() if publishable(record)}
        if not files:
            assert pretrained.aliases(model) == {} and pretrained.published(model) == ()
            continue
        timm_default = [n for n, r in files.items() if r["library"] == "timm" and r["default"]]
        torchvision_default = [n for n, r in files.items() if r["library"] == "torchvision" and r["default"]]
        hub_twin = [n for n in files if n.endswith(".tv_in1k")]
        if recorded["reference"].startswith("torchvision"):
            expected = hub_twin or torchvision_default
        elif files[timm_default[0]]["license"] == pretrained.NC:
            expected = [n for n, r in files.items() if r["library"] == "timm" and r["license"] != pretrained.NC]
        else:
            expected = timm_default
        assert pretrained.aliases(model)["imagenet"] == expected[0], model
        assert pretrained.aliases(model).get("torchvision") == (torchvision_default or [None])[0], model
        for name in torchvision_default + [n for n in files if n.startswith("torchvision:")]:
            twin = pretrained.hub_twin(pretrained.find(model, name))
            same_url = [n for n, r in files.items() if r["library"] == "timm" and r.get("url") == files[name]["url"]]
            assert [twin] == same_url if twin else same_url == [], (model, name)


def entry_groups():
    """(model, key set, the entries whose files hold it) for every entry of the table."""
    groups = {}
    for model, entries in pretrained.TABLE.items():
        for entry in entries:
            keyset = RECORDED["models"][model]["files"][entry.name]["keys"]
            groups.setdefault((model, keyset), []).append(entry)
    return [(model, keyset, entries) for (model, keyset), entries in sorted(groups.items())]


# Key sets loaded here: those that are no reference fixture's (torchvision's DenseNet file names, timm's
# Inception V3 files without the auxiliary head), and one of each kind of file: a hub safetensors beside a
# torchvision .pth (resnet18), torchvision's alone (mobilenet_v2), timm's GitHub .pth (xception).
LOADED_HERE = [(m, k, e) for m, k, e in entry_groups()
               if "keys" in RECORDED["keysets"][k] or m in ("resnet18", "mobilenet_v2", "xception")]


def unproven(groups) -> list:
    """The (model, key set) pairs of `groups` that neither the model's reference fixture nor a load here covers."""
    here = {(model, keyset) for model, keyset, _ in LOADED_HERE}
    return [(model, keyset) for model, keyset, _ in groups
            if RECORDED["keysets"][keyset].get("reference_fixture") != model and (model, keyset) not in here]


def test_every_entrys_keys_are_proven_to_load():
    """Each entry's file holds its architecture's state dict (timm and torchvision load their files strictly
    into it; the recording script instantiated it). Its key names and shapes are either exactly the model's
    reference fixture's, which tests/test_models.py loads into the model strictly and matches the reference's
    logits with, or loaded below. Each hub entry's recorded pretrained_cfg is a data config tfcnn reads."""
    assert unproven(entry_groups()) == []
    for model, keyset, entries in entry_groups():
        recorded_keys(keyset)  # a named reference fixture still holds these keys
        for entry in entries:
            cfg = RECORDED["models"][model]["files"][entry.name].get("pretrained_cfg")
            if entry.config_url:
                data = weights._timm_data_config(cfg, entry.name)
                assert (data.input_size, data.interpolation) == (cfg["input_size"][-1], cfg["interpolation"])


def load_by_name(model, keys, entry, cache, monkeypatch, build=True):
    """create_model(model, weights=entry.name) through the cache, offline, with the cached file standing for
    a state dict of exactly `keys` (zeros): name resolution, open_weights and the strict loader all run.
    build=False: only places the files."""
    record = RECORDED["models"][model]["files"][entry.name]
    directory = os.path.join(cache, entry.directory)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, entry.file), "wb"):
        pass
    if entry.config_url:
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump({"architecture": record["arch"], "pretrained_cfg": record["pretrained_cfg"]}, f)
    monkeypatch.setattr(weights, "read_state_dict", lambda path: {k: np.zeros(s, np.float32) for k, s in keys})
    if not build:
        return None
    size = max(model_info(model).min_size, 32)
    return create_model(model, weights=entry.name, input_shape=(size, size, 3), log=quiet)


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    for name in MIRROR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TFCNN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # not the machine's own
    monkeypatch.setenv("TFCNN_OFFLINE", "1")  # a file that is not where the name says would be an error
    return str(tmp_path / "cache")


@pytest.mark.parametrize("model, keyset, entries", LOADED_HERE, ids=[f"{m}-{k}" for m, k, _ in LOADED_HERE])
def test_entries_load_by_name(model, keyset, entries, offline_cache, monkeypatch):
    """create_model(model, weights=NAME): the name resolves to its cached file, whose recorded keys and shapes
    the strict loader sets every weight from. The other entries with the same keys open the same way."""
    built = load_by_name(model, recorded_keys(keyset), entries[0], offline_cache, monkeypatch)
    assert built.name == model and built.output_shape[-1] == 1000
    for entry in entries[1:]:
        load_by_name(model, recorded_keys(keyset), entry, offline_cache, monkeypatch, build=False)
        source = weights.open_weights(model, entry.name)
        assert source.path == os.path.join(offline_cache, entry.directory, entry.file) and source.num_classes == 1000


def test_a_table_entry_with_another_architectures_keys_fails_the_check(offline_cache, monkeypatch):
    """The negative control: resnet18's entry pointing at resnet34's file is refused, naming keys, and a key
    set that is another model's reference fixture does not count as proven for this one."""
    entry = pretrained.find("resnet18", "imagenet")
    resnet34 = RECORDED["models"]["resnet34"]["files"]["timm:resnet34.tv_in1k"]["keys"]
    with pytest.raises(ValueError, match=r"these weights do not fit resnet18 .* 80 unexpected: layer1\.2\.conv1\.weight"):
        load_by_name("resnet18", recorded_keys(resnet34), entry, offline_cache, monkeypatch)
    assert unproven([("resnet18", resnet34, [entry])]) == [("resnet18", resnet34)]


# ------------------------------------------------------------------------------------------- names

def test_names_and_their_errors(offline_cache):
    assert pretrained.weight_names("efficientnet_b0") == [
        "imagenet", "timm:efficientnet_b0.ra4_e3600_r224_in1k", "timm:efficientnet_b0.ra_in1k"]
    assert pretrained.find("resnet50", "torchvision").name == "torchvision:IMAGENET1K_V2"
    assert pretrained.is_weights_name("timm:resnet50.a1_in1k") and not pretrained.is_weights_name("./imagenet")
    with pytest.raises(ValueError, match=r"weights 'timm:resnet50\.tv3_in1k': not a name of resnet50's published "
                                         r"weights; its names: imagenet, torchvision, timm:resnet50\.a1_in1k, .*"
                                         r"torchvision:IMAGENET1K_V2 \(or pass a file path\)"):
        create_model("resnet50", weights="timm:resnet50.tv3_in1k")
    with pytest.raises(ValueError, match=r"weights 'torchvision': not a name .* its names: imagenet, "
                                         r"timm:efficientnet_b0\.ra4_e3600_r224_in1k, timm:efficientnet_b0\.ra_in1k "):
        create_model("efficientnet_b0", weights="torchvision")
    with pytest.raises(ValueError, match=r"weights 'imagenet': overfeat has no published weights by name"):
        create_model("overfeat", weights="imagenet")


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TFCNN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert pretrained.cache_dir() == str(tmp_path / "home" / ".cache" / "tfcnn" / "weights")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained.cache_dir() == str(tmp_path / "xdg" / "tfcnn" / "weights")
    monkeypatch.setenv("TFCNN_CACHE_DIR", str(tmp_path / "mine"))
    assert pretrained.cache_dir() == str(tmp_path / "mine")


def test_mirrors_replace_scheme_and_host(monkeypatch):
    for name in MIRROR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    hub = pretrained.find("resnet50", "imagenet").url
    torchvision = pretrained.find("resnet50", "torchvision").url
    assert pretrained.mirrored(hub) == hub
    monkeypatch.setenv("TFCNN_WEIGHTS_MIRROR", "http://127.0.0.1:8080/base/")
    assert pretrained.mirrored(hub) == "http://127.0.0.1:8080/base/timm/resnet50.tv_in1k/resolve/main/model.safetensors"
    monkeypatch.setenv("TFCNN_HUB_MIRROR", "https://hub-mirror.example")  # the host's own variable first
    assert pretrained.mirrored(hub) == "https://hub-mirror.example/timm/resnet50.tv_in1k/resolve/main/model.safetensors"
    assert pretrained.mirrored(torchvision) == "http://127.0.0.1:8080/base/models/resnet50-11ad3fa6.pth"
    monkeypatch.setenv("TFCNN_TORCHVISION_MIRROR", "mirror.example")
    with pytest.raises(ValueError, match=r"TFCNN_TORCHVISION_MIRROR must be a URL .*, received: 'mirror\.example'"):
        pretrained.mirrored(torchvision)


# ------------------------------------------------------------------------------------- downloads

class Server:
    """A loopback HTTP server of in-memory files. Each route: body, extra headers, and how it is served:
    "ok"; "redirect" (a 302 carrying the headers, as the hub answers, to the body at /cdn/...); "truncate"
    (announces the full length, sends a third and closes). holds: route -> a function the handler calls before
    it sends that route's body."""

    def __init__(self):
        self.routes, self.requests, self.holds = {}, [], {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body, headers, mode = server.routes.get(self.path.removeprefix("/cdn"), (None, {}, "ok"))
                if body is None:
                    self.send_error(404)
                    return
                if mode == "redirect" and not self.path.startswith("/cdn/"):
                    self.send_response(302)
                    self.send_header("Location", "/cdn" + self.path)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                server.holds.get(self.path.removeprefix("/cdn"), lambda: None)()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if "ETag" not in headers:  # as S3 and CDNs send: an MD5, not a SHA-256, so not checked
                    self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
                for name, value in headers.items() if mode != "redirect" else ():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body[:len(body) // 3] if mode == "truncate" else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def add(self, url, body, headers=None, mode="ok"):
        """Serves `body` at a table URL's path (what the mirror variable maps it to)."""
        self.routes[urllib.parse.urlsplit(url).path] = (body, headers or {}, mode)


@pytest.fixture(scope="module")
def server():
    served = Server()
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


@pytest.fixture
def mirror(server, tmp_path, monkeypatch):
    for name in MIRROR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TFCNN_WEIGHTS_MIRROR", server.url)
    monkeypatch.setenv("TFCNN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # empty: not the machine's own
    server.routes.clear()
    server.requests.clear()
    server.holds.clear()
    return server


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def random_bytes(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def test_imagenet_downloads_once_verified_and_loads(mirror, tmp_path, capsys):
    """The whole path: create_model(..., weights="imagenet") fetches the hub file and its config.json through
    the hub's redirect (whose X-Linked-Etag carries the SHA-256), shows its progress, verifies it, loads it
    strictly with the config's preprocessing; a second use reads the cache without a request."""
    entry = pretrained.find("efficientnet_b0", "imagenet")
    path = weightgen.write_safetensors(weightgen.fixture("efficientnet_b0"), tmp_path / "served.safetensors")
    body = open(path, "rb").read()
    record = RECORDED["models"]["efficientnet_b0"]["files"][entry.name]
    config = json.dumps({"architecture": "efficientnet_b0", "pretrained_cfg": record["pretrained_cfg"]}).encode()
    mirror.add(entry.url, body, {"X-Linked-Etag": f'"{sha256(body)}"', "X-Linked-Size": str(len(body))}, "redirect")
    mirror.add(entry.config_url, config)

    model = create_model("efficientnet_b0", weights="imagenet", log=quiet)
    cached = os.path.join(str(tmp_path / "cache"), "timm", "efficientnet_b0.ra_in1k")
    assert sorted(os.listdir(cached)) == ["config.json", "model.safetensors"]  # no temporary file left
    assert mirror.requests == ["/timm/efficientnet_b0.ra_in1k/resolve/main/config.json",
                               "/timm/efficientnet_b0.ra_in1k/resolve/main/model.safetensors",
                               "/cdn/timm/efficientnet_b0.ra_in1k/resolve/main/model.safetensors"]
    stem = weights.read_state_dict(path)["conv_stem.weight"].transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel.numpy(), stem)
    cfg = record["pretrained_cfg"]
    assert (model.data_config.input_size, model.data_config.crop_fraction, model.data_config.interpolation) == (
        cfg["input_size"][-1], cfg["crop_pct"], cfg["interpolation"])

    err = capsys.readouterr().err
    assert f"tfcnn: downloading {mirror.url}/timm/efficientnet_b0.ra_in1k/resolve/main/model.safetensors " \
           f"({len(body) / 1e6:.1f} MB)" in err
    quarters = re.findall(r"^ +(\d+)%  [\d.]+ of [\d.]+ MB, [\d.]+ MB/s$", err, re.M)  # a line a quarter in a log
    assert len(quarters) == 4 and quarters[-1] == "100"
    assert f"tfcnn: SHA-256 {sha256(body)} (verified against the server's X-Linked-Etag); saved " \
           f"{os.path.join(cached, 'model.safetensors')}" in err
    assert "config.json (" not in err  # small files download without a progress line

    mirror.requests.clear()
    assert pretrained.weights_file("efficientnet_b0", "imagenet") == os.path.join(cached, "model.safetensors")
    assert pretrained.weights_file("efficientnet_b0", "timm:efficientnet_b0.ra_in1k") == os.path.join(
        cached, "model.safetensors")
    assert mirror.requests == []


def test_on_a_terminal_the_progress_line_is_redrawn(mirror, tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    body = random_bytes(3 << 20, seed=2)
    mirror.add("https://download.pytorch.org/models/big.pth", body)
    pretrained.download("https://download.pytorch.org/models/big.pth", str(tmp_path / "big.pth"))
    shown = sys.stderr.getvalue()
    assert shown.startswith(f"tfcnn: downloading {mirror.url}/models/big.pth (3.1 MB)\n\r")
    assert "\r  100%  3.1 of 3.1 MB, " in shown and "no known hash to verify it against" in shown


def test_a_truncated_download_leaves_nothing_that_loads(mirror, tmp_path):
    entry = pretrained.find("efficientnet_b0", "timm:efficientnet_b0.ra4_e3600_r224_in1k")
    body = random_bytes(3 << 20)
    mirror.add(entry.config_url, b'{"pretrained_cfg": {}}')
    mirror.add(entry.url, body, mode="truncate")
    with pytest.raises(pretrained.DownloadError, match=r"model\.safetensors: received 1,048,576 bytes, but "
                                                       r"Content-Length says 3,145,728: the download broke off"):
        pretrained.weights_file("efficientnet_b0", entry.name)
    directory = os.path.join(str(tmp_path / "cache"), entry.directory)
    assert os.listdir(directory) == ["config.json"]  # neither the weights nor a temporary file
    # the next call tries again, and succeeds once the server does
    mirror.add(entry.url, body)
    assert os.path.getsize(pretrained.weights_file("efficientnet_b0", entry.name)) == len(body)


def test_wrong_hashes_are_refused_naming_both(mirror, tmp_path, monkeypatch):
    body = random_bytes(2 << 20, seed=1)
    wrong = sha256(b"another file")
    target = str(tmp_path / "cache" / "x" / "weights.safetensors")
    url = "https://huggingface.co/timm/x/resolve/main/model.safetensors"

    mirror.add(url, body, {"X-Linked-Etag": f'"{wrong}"'}, "redirect")
    with pytest.raises(pretrained.DownloadError, match=rf"^{mirror.url}/timm/x/resolve/main/model\.safetensors: "
                                                       rf"SHA-256 mismatch: expected {wrong} \(the server's "
                                                       rf"X-Linked-Etag\), received {sha256(body)}; nothing was kept"):
        pretrained.download(url, target)
    assert os.listdir(os.path.dirname(target)) == []

    mirror.add(url, body, {"ETag": f'W/"{wrong}"'})  # a plain ETag that is a SHA-256 counts too
    with pytest.raises(pretrained.DownloadError, match=rf"expected {wrong} \(the server's ETag\), "
                                                       rf"received {sha256(body)}"):
        pretrained.download(url, target)

    mirror.add(url, body)  # the table's full hash, where known, is checked whatever the server says
    with pytest.raises(pretrained.DownloadError, match=rf"expected {wrong} \(tfcnn's table\), received {sha256(body)}"):
        pretrained.download(url, target, sha256=wrong)

    # torchvision's file names carry the hash's first hex digits, checked as torchvision does
    name = f"resnet18-{sha256(body)[:8]}.pth"
    mirror.add(f"https://download.pytorch.org/models/{name}", body)
    with pytest.raises(pretrained.DownloadError, match=rf"{mirror.url}/models/{name}: SHA-256 mismatch: expected "
                                                       rf"00000000\.\.\. \(the prefix in the file name\), received "
                                                       rf"{sha256(body)}"):
        pretrained.download(f"https://download.pytorch.org/models/{name}", target, hash_prefix="00000000")
    assert os.listdir(os.path.dirname(target)) == []
    good = pretrained.download(f"https://download.pytorch.org/models/{name}", target, hash_prefix=sha256(body)[:8])
    assert open(good, "rb").read() == body

    mirror.requests.clear()
    with pytest.raises(pretrained.DownloadError, match=r"/nothing/here\.pth: HTTP 404"):
        pretrained.download("https://download.pytorch.org/nothing/here.pth", target + ".2")
    monkeypatch.setenv("TFCNN_WEIGHTS_MIRROR", "http://127.0.0.1:1")  # nothing listens there
    with pytest.raises(pretrained.DownloadError, match=rf"^http://127\.0\.0\.1:1/models/{name}: cannot connect "
                                                       rf"\(.*\); without network access, place the file at "
                                                       rf"{re.escape(target)} yourself"):
        pretrained.download(f"https://download.pytorch.org/models/{name}", target)
    assert os.listdir(os.path.dirname(target)) == ["weights.safetensors"]  # the good one above, nothing else


def test_offline_names_the_path_and_the_url(mirror, monkeypatch):
    monkeypatch.setenv("TFCNN_OFFLINE", "1")
    entry = pretrained.find("resnet18", "imagenet")
    where = os.path.join(pretrained.cache_dir(), "timm", "resnet18.tv_in1k")
    with pytest.raises(pretrained.DownloadError, match=re.escape(
            f"weights 'imagenet' of resnet18 (timm:resnet18.tv_in1k): TFCNN_OFFLINE=1 forbids downloading and the "
            f"cache lacks it: place the files at {where}/config.json (from {entry.config_url}); "
            f"{where}/model.safetensors (from {entry.url}), or unset TFCNN_OFFLINE")):
        create_model("resnet18", weights="imagenet", log=quiet)
    assert mirror.requests == []
    # a ValueError too, like every other weights error: training stops all ranks on those
    assert issubclass(pretrained.DownloadError, ValueError)


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed: a .pth file can be read")
def test_a_pytorch_file_without_torch_is_refused_before_downloading(mirror):
    with pytest.raises(ValueError, match=r"weights 'torchvision' of resnet50 \(torchvision:IMAGENET1K_V2\) are a "
                                         r"PyTorch file \(https://download\.pytorch\.org/models/resnet50-11ad3fa6\.pth\)"
                                         r", and reading it needs torch, which is not installed \(pip install torch\); "
                                         r"'timm:resnet50\.tv2_in1k' is the same file as safetensors"):
        create_model("resnet50", weights="torchvision", log=quiet)
    with pytest.raises(ValueError, match=r"vgg16 \(torchvision:IMAGENET1K_V1\) are a PyTorch file .*pip install "
                                         r"torch\)$"):
        create_model("vgg16", weights="imagenet", log=quiet)
    assert mirror.requests == []


# ------------------------------------------------------------------ one machine, and the Hugging Face cache

def test_two_ranks_on_one_machine_download_once(mirror, tmp_path):
    """horovodrun -np 2, both ranks asking for the same missing file: one downloads it (the server holds the
    body until both have asked, so without the machine's lock the second would send its own request), the
    other waits and reads the same verified file."""
    import subprocess
    import time

    from launchers import HOROVODRUN_GLOO

    entry = pretrained.find("resnet18", "imagenet")
    body = random_bytes(2 << 20, seed=3)
    mirror.add(entry.config_url, b'{"pretrained_cfg": {}}')
    mirror.add(entry.url, body, {"X-Linked-Etag": f'"{sha256(body)}"'}, "redirect")
    out = tmp_path / "out"
    out.mkdir()

    def both_ranks_asked():
        deadline = time.time() + 120
        while not all((out / f"arrived{r}").exists() for r in range(2)) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # time for the second rank's request, were it to send one

    mirror.holds[urllib.parse.urlsplit(entry.url).path] = both_ranks_asked
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "download_probe.py")
    done = subprocess.run(HOROVODRUN_GLOO + [sys.executable, probe, str(out), "resnet18", "imagenet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    weights_path = urllib.parse.urlsplit(entry.url).path
    assert sorted(mirror.requests) == sorted([urllib.parse.urlsplit(entry.config_url).path, weights_path,
                                              "/cdn" + weights_path])  # once each, for both ranks
    paths = {(out / f"rank{r}.txt").read_text() for r in range(2)}
    assert paths == {os.path.join(str(tmp_path / "cache"), entry.directory, entry.file)}
    assert open(paths.pop(), "rb").read() == body
    assert "waiting for another process fetching timm:resnet18.tv_in1k" in done.stdout + done.stderr


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hf_cache_layout(root, repo: str, files: dict, revision="0123456789abcdef0123456789abcdef01234567") -> dict:
    """Files placed as huggingface_hub leaves them: blobs named by their hash (an LFS file's SHA-256, a git
    file's blob SHA-1), snapshots/<revision>/<name> relative links to them, refs/main naming the revision.
    files: name -> (bytes, "lfs" or "git"). Returns name -> its snapshot path."""
    base = os.path.join(root, "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(base, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(base, "snapshots", revision), exist_ok=True)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", "main"), "w") as f:
        f.write(revision)
    placed = {}
    for name, (data, kind) in files.items():
        blob = sha256(data) if kind == "lfs" else git_blob_sha1(data)
        with open(os.path.join(base, "blobs", blob), "wb") as f:
            f.write(data)
        placed[name] = os.path.join(base, "snapshots", revision, name)
        os.symlink(os.path.join("..", "..", "blobs", blob), placed[name])
    return placed


def test_a_file_in_the_hugging_face_cache_is_used_without_the_network(mirror, tmp_path, monkeypatch):
    """What timm left in $HF_HUB_CACHE (the weights and their config.json) loads with the network off
    (HF_HUB_OFFLINE=1, and the server never asked): verified against its blobs' names, linked into tfcnn's cache,
    not copied."""
    entry = pretrained.find("resnet18", "imagenet")
    path = weightgen.write_safetensors(weightgen.fixture("resnet18"), tmp_path / "served.safetensors")
    body = open(path, "rb").read()
    cfg = RECORDED["models"]["resnet18"]["files"][entry.name]["pretrained_cfg"]
    config = json.dumps({"architecture": "resnet18", "pretrained_cfg": cfg}).encode()
    placed = hf_cache_layout(tmp_path / "hf", "timm/resnet18.tv_in1k",
                             {"model.safetensors": (body, "lfs"), "config.json": (config, "git")})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    model = create_model("resnet18", weights="imagenet", log=quiet)
    assert mirror.requests == []
    stem = weights.read_state_dict(path)["conv1.weight"].transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel.numpy(), stem)
    assert (model.data_config.input_size, model.data_config.crop_fraction) == (cfg["input_size"][-1], cfg["crop_pct"])
    linked = os.path.join(str(tmp_path / "cache"), entry.directory)
    for name, snapshot in placed.items():
        assert os.path.islink(os.path.join(linked, name))
        assert os.path.realpath(os.path.join(linked, name)) == os.path.realpath(snapshot)


def test_only_the_missing_config_is_fetched_beside_a_hugging_face_cache_file(mirror, tmp_path, monkeypatch):
    """timm.create_model(name, pretrained=True) leaves the weights alone in the Hugging Face cache: they are
    used, and only config.json is downloaded. Offline, the error names the config's place."""
    entry = pretrained.find("efficientnet_b0", "imagenet")
    body = random_bytes(1 << 20, seed=4)
    hf_cache_layout(tmp_path / "hf", entry.hub_repo, {"model.safetensors": (body, "lfs")})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = os.path.join(str(tmp_path / "cache"), entry.directory, "config.json")
    with pytest.raises(pretrained.DownloadError, match=rf"HF_HUB_OFFLINE=1 forbids downloading and the cache lacks "
                                                       rf"it: place the file at {re.escape(config)} \(from "
                                                       rf"{re.escape(entry.config_url)}\), or unset HF_HUB_OFFLINE"):
        pretrained.weights_file("efficientnet_b0", "imagenet")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    mirror.add(entry.config_url, b'{"pretrained_cfg": {}}')
    path = pretrained.weights_file("efficientnet_b0", "imagenet")
    assert mirror.requests == [urllib.parse.urlsplit(entry.config_url).path]
    assert open(path, "rb").read() == body and os.path.islink(path)


def test_a_corrupted_hugging_face_cache_file_is_refused_naming_both_hashes(mirror, tmp_path, monkeypatch):
    entry = pretrained.find("efficientnet_b0", "imagenet")
    body = random_bytes(1 << 20, seed=5)
    placed = hf_cache_layout(tmp_path / "hf", entry.hub_repo, {"model.safetensors": (body, "lfs")})
    with open(placed["model.safetensors"], "r+b") as f:  # one byte flipped behind the blob's name
        f.write(bytes([body[0] ^ 1]))
    mirror.add(entry.config_url, b'{"pretrained_cfg": {}}')
    damaged = sha256(bytes([body[0] ^ 1]) + body[1:])
    with pytest.raises(pretrained.DownloadError, match=rf"{re.escape(placed['model.safetensors'])} \(the Hugging "
                                                       rf"Face cache\): hash mismatch: expected {sha256(body)} \(the "
                                                       rf"name of its blob {sha256(body)}\), received {damaged}"):
        pretrained.weights_file("efficientnet_b0", "imagenet")
    assert not os.path.exists(os.path.join(str(tmp_path / "cache"), entry.directory, entry.file))


def test_hugging_face_settings_are_honoured(monkeypatch, tmp_path):
    """The cache is found as huggingface_hub finds it; HF_ENDPOINT serves the hub's files (after tfcnn's own hub
    mirror); HF_HUB_OFFLINE forbids the hub, not torchvision's host."""
    for name in (*MIRROR_VARIABLES, "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert pretrained.hf_cache_dir() == str(tmp_path / "home" / ".cache" / "huggingface" / "hub")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained.hf_cache_dir() == str(tmp_path / "xdg" / "huggingface" / "hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert pretrained.hf_cache_dir() == str(tmp_path / "hf-home" / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    assert pretrained.hf_cache_dir() == str(tmp_path / "hub-cache")

    hub, torchvision = pretrained.find("resnet50", "imagenet"), pretrained.find("resnet50", "torchvision")
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")
    assert pretrained.mirrored(hub.url) == ("https://hf-mirror.example/timm/resnet50.tv_in1k/resolve/main/"
                                            "model.safetensors")
    assert pretrained.mirrored(torchvision.url) == torchvision.url
    monkeypatch.setenv("TFCNN_HUB_MIRROR", "https://tfcnn-mirror.example")
    assert pretrained.mirrored(hub.url).startswith("https://tfcnn-mirror.example/timm/")

    assert pretrained.offline(hub) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "yes")
    assert (pretrained.offline(hub), pretrained.offline(torchvision)) == ("HF_HUB_OFFLINE", None)
    monkeypatch.setenv("TFCNN_OFFLINE", "1")
    assert (pretrained.offline(hub), pretrained.offline(torchvision)) == ("TFCNN_OFFLINE", "TFCNN_OFFLINE")
