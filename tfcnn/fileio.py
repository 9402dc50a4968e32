"""Small file helpers shared by the writers of labels, metadata, configs and exports."""
from __future__ import annotations

import os
import shutil


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
