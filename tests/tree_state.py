"""Shared by the tests that check a command left a folder as it was (test_output_paths,
test_cli_fuzz): a snapshot of every path under a root, compared before and after."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_state(root: Path) -> dict[str, str]:
    """Every file (sha256 of its bytes), symlink (its target) and folder under root, by its path
    relative to root."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                state[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                state[rel] = "dir"
            else:
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state
