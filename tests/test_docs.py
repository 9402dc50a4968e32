"""The README and the documentation site's sources: generated pages current, runnable snippets running,
links that lead somewhere, no measurement diary in the README. (`make docs` builds the site itself with
mkdocs --strict, which fails on a broken link or a missing page; CI runs it.)"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
SOURCES = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir(DOCS) if n.endswith(".md"))
RUNS = "<!-- test: runs -->"


def read(name):
    """A file of the repository, by its path from the top."""
    return open(os.path.join(REPO, name), encoding="utf-8").read()


def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", os.path.join(DOCS, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_say_what_their_sources_say():
    """Flags from TrainConfig, models from the registry, recipes from tfcnn.recipes, figures from
    bench/results: each page equal to what its source gives now."""
    assert generator().stale() == [], "docs/generated/ is stale: run `python docs/generate.py` (make docs does)"


def test_a_stale_page_is_noticed(monkeypatch):
    """The check above can fail: a help text that says something else than the page makes it stale."""
    module = generator()
    original = module.flags
    monkeypatch.setitem(module.PAGES, "flags.md", lambda: original().replace("per 256 images", "per 128 images"))
    assert module.stale() == ["flags.md"]


def runnable_blocks():
    """(file, first line, code) of every ```python block marked `<!-- test: runs -->` on the line before."""
    blocks = []
    for name in SOURCES:
        lines = read(name).splitlines()
        for i, line in enumerate(lines):
            if line.strip() == RUNS:
                assert lines[i + 1].strip() == "```python", f"{name}:{i + 1}: {RUNS} must come right before ```python"
                end = lines.index("```", i + 2)
                blocks.append((name, i + 3, "\n".join(lines[i + 2:end])))
    return blocks


# Runs each snippet (a JSON list of code) as a reader would, in a directory of its own beside a photo.jpg, with fresh
# globals and Keras state; prints one JSON line per snippet: null, or the traceback it failed with.
SNIPPET_RUNNER = """
import json, os, sys, traceback
import numpy as np
from PIL import Image

pixels = (np.random.default_rng(0).random((120, 160, 3)) * 255).astype(np.uint8)
for index, code in enumerate(json.loads(sys.stdin.read())):
    os.makedirs(str(index))
    os.chdir(str(index))
    Image.fromarray(pixels).save("photo.jpg")
    try:
        exec(compile(code, f"<snippet {index}>", "exec"), {"__name__": "__main__"})
        failure = None
    except BaseException:
        failure = traceback.format_exc()
    os.chdir("..")
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].keras.backend.clear_session()
    print("SNIPPET " + json.dumps(failure), flush=True)
"""


@pytest.fixture(scope="module")
def snippet_failures(tmp_path_factory, imagenet_cache):
    """{(file, line): None or the traceback}: every marked snippet, run in one fresh process (the same Python,
    TensorFlow loaded once rather than once a snippet), with published weights in the cache."""
    blocks = runnable_blocks()
    env = {**os.environ, "PYTHONPATH": REPO, "TFCNN_CACHE_DIR": imagenet_cache, "TFCNN_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", SNIPPET_RUNNER], input=json.dumps([code for _, _, code in blocks]),
                          capture_output=True, text=True, timeout=900, cwd=tmp_path_factory.mktemp("snippets"), env=env)
    results = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("SNIPPET ")]
    assert done.returncode == 0 and len(results) == len(blocks), done.stderr[-3000:]
    return {(name, line): failure for (name, line, _), failure in zip(blocks, results)}


@pytest.mark.parametrize("name, line, code", runnable_blocks(), ids=lambda v: str(v)[:40])
def test_marked_snippets_run(name, line, code, snippet_failures):
    """A renamed function or flag breaks these, not the reader. They run as a reader would: each in a directory
    of its own beside a photo.jpg (the README's example reads one), in a Python started for them."""
    failure = snippet_failures[(name, line)]
    assert failure is None, f"{name}:{line}: the snippet failed:\n{failure[-3000:]}"


def test_the_readme_and_the_site_mark_snippets_to_run():
    assert {name for name, _, _ in runnable_blocks()} >= {"README.md", os.path.join("docs", "training.md")}


def test_readme_is_short_and_keeps_no_diary():
    readme = read("README.md")
    assert len(readme.splitlines()) <= 200
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", readme)
    assert not dates, f"README.md holds dates {dates}: measurement history goes to CHANGELOG.md"


def test_readme_setup_figures_are_those_of_their_sources():
    """The README repeats, in prose, the disk `make install` checks for (the Makefile's INSTALL_SPACE_MIB: the
    venv and pip's downloads, in MiB) and the measured demo and suite times (docs/performance.md's table);
    docs/install.md the venvs' and downloads' sizes measured (the Makefile's comment on INSTALL_SPACE_MIB)."""
    readme, table, makefile = read("README.md"), read(os.path.join("docs", "performance.md")), read("Makefile")
    gpu, cpu = (sum(map(int, pair.split())) for pair in re.search(
        r"INSTALL_SPACE_MIB := \$\(if \$\(filter 1,\$\(HAS_GPU\)\),(\d+ \d+),(\d+ \d+)\)", makefile).groups())
    said = re.search(r"and ([\d.]+) GiB of disk \(([\d.]+) GiB\s+for the GPU stack", readme)
    assert said and said.groups() == (f"{cpu / 1024:.1f}", f"{gpu / 1024:.1f}"), (said and said.groups(), cpu, gpu)
    # docs/install.md gives the sizes measured, in the Makefile's comment on INSTALL_SPACE_MIB, in GiB
    comments = re.sub(r"\n#\s*", " ", makefile)  # a comment's lines as one
    measured = re.search(r"The GPU stack: a ([\d,]+) MiB venv [^;]* and ([\d,]+) MiB of downloads; the CPU one "
                         r"with both extras: ([\d,]+) and ([\d,]+) MiB", comments)
    assert measured, "the Makefile's comment on INSTALL_SPACE_MIB no longer gives the sizes measured"
    gpu_venv, gpu_downloads, cpu_venv, cpu_downloads = (int(n.replace(",", "")) / 1024 for n in measured.groups())
    said = re.search(r"the CPU venv takes ([\d.]+) GiB \(with both \[extras\]\(#optional-extras\)\), the GPU "
                     r"stack's ([\d.]+) GiB, and pip\s+needs room for its downloads \(([\d.]+) GiB and ([\d.]+) GiB\)",
                     read(os.path.join("docs", "install.md")))
    assert said and said.groups() == (f"{cpu_venv:.1f}", f"{gpu_venv:.1f}", f"{cpu_downloads:.2f}",
                                      f"{gpu_downloads:.1f}"), (said and said.groups(), measured.groups())

    demo, install = re.search(r"`make demo` \| \*\*(\d+:\d\d)\*\*: install (\d+) s", table).groups()
    said = re.search(r"`make demo` took (\d+:\d\d) \((\d+):(\d\d) of it installing", readme)
    assert said and (said[1], int(said[2]) * 60 + int(said[3])) == (demo, int(install)), (said and said.groups())
    suite = re.search(r"^\| `make test`, pytest \| ([^|]+)\|", table, re.M)[1]
    runs = [run.split("-") for run in re.findall(r"\*\*(\d+:\d\d(?:-\d+:\d\d)?)\*\*", suite)]
    times = sorted((t for run in runs for t in run), key=lambda t: [int(n) for n in t.split(":")])
    said = re.search(r"pytest (\d+:\d\d)-(\d+:\d\d) \((\d+) runs\)", readme)
    assert said and said.groups() == (times[0], times[-1], str(len(times))), (said and said.groups(), times)


def test_readme_links_lead_to_files_and_the_site_lists_every_page():
    readme = read("README.md")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert os.path.exists(os.path.join(REPO, target)), f"README.md links to {target}, which does not exist"
    nav = read("mkdocs.yml")
    pages = {n for n in os.listdir(DOCS) if n.endswith(".md")}
    listed = set(re.findall(r":\s*(\w+\.md)\s*$", nav, flags=re.M))
    assert listed == pages, f"mkdocs.yml's nav and docs/ differ: {sorted(listed ^ pages)}"
    for name in ("LICENSE", "CHANGELOG.md"):
        assert os.path.getsize(os.path.join(REPO, name)) > 1000


def test_the_install_page_lists_every_horovod_patch_in_one_table():
    """docs/install.md's table of the patch set has a row per file of patches/horovod-*/, in their order, and no
    blank line within it (Markdown would end the table there and print the rows after it as text)."""
    [patch_dir] = [os.path.join(REPO, "patches", n) for n in os.listdir(os.path.join(REPO, "patches"))
                   if n.startswith("horovod-")]
    patches = sorted(n[:-len(".patch")] for n in os.listdir(patch_dir) if n.endswith(".patch"))
    table = read(os.path.join("docs", "install.md")).split("| patch | needed by | what it fixes |\n", 1)[1]
    table = table.split("\n\n", 1)[0]  # the table ends at its first blank line
    assert re.findall(r"^\| (\d\d-[\w-]+) \|", table, flags=re.M) == patches
