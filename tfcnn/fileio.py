"""Small file helpers shared by the writers of labels, metadata, configs and exports."""
from __future__ import annotations

import contextlib
import json
import os
import shutil


def read_jsonl(path: str) -> tuple[list[dict], int]:
    """The JSON objects of a JSON-lines file, and how many lines were none (a line cut short by a full disk or
    a crash): those are left out, never an error that would stop a resume or a plot."""
    records, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in filter(str.strip, f):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
    return records, bad


def atomic_write_text(path: str, text: str) -> None:
    """Writes via a temporary file and a rename, so readers never see half a file."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def replace_directory(tmp_dir: str, final_dir: str) -> None:
    """Moves a completely written directory into place, replacing an older one at final_dir."""
    old = f"{final_dir}.old-{os.getpid()}"
    if os.path.exists(final_dir):
        os.replace(final_dir, old)
    os.replace(tmp_dir, final_dir)
    shutil.rmtree(old, ignore_errors=True)


def check_output_dir(path, marker: str, kind: str, what: str) -> None:
    """The directory a new `kind` (an export, a conversion) is written to must be new, empty, or an older one of
    its kind (holding `marker`), which it replaces. A file, or a directory of other files (a dataset, a training
    run, a home directory), is refused with a ValueError naming `what` and the path, before any work: it would
    be replaced, or its files mixed with the new ones."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return
    a_kind = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if not os.path.isdir(path):
        raise ValueError(f"{what} {path} is a file: {a_kind} is a directory; name a new one (or an older {kind} "
                         f"to replace)")
    entries = sorted(os.listdir(path))
    if entries and marker not in entries:
        more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
        raise ValueError(f"{what} {path} holds other files ({entries[0]}{more}) and no tfcnn {kind} ({marker}): "
                         f"{a_kind} replaces only an older {kind}; name a new directory")


@contextlib.contextmanager
def staged_directory(final_dir, marker: str, kind: str, what: str):
    """Yields a temporary directory beside final_dir to write a `kind` into; moved into place (replacing an
    older one, check_output_dir's rule) only when the block completes, removed when it fails: final_dir is
    never half written, nor an older one's files mixed with the new ones."""
    check_output_dir(final_dir, marker, kind, what)
    final_dir = os.path.abspath(final_dir)
    tmp = f"{final_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, final_dir)
