"""Small files beside the checkpoints: JSON and text on local disk, /gcs/ (FUSE) or gs://.

The one place that writes them, so every writer gets the same guarantees: the
parent folder is created, and a file is written to ``<path>.tmp`` and renamed
over ``path``, so a reader (the next attempt, a retry's FATAL check) sees the
old file or the new one, never half of one, even when the writer is killed.
TensorFlow's ``tf.io.gfile`` speaks all three kinds of path; it is imported on
first use, so modules that only may write (the hang supervisor) stay light.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def gfile():
    """``tf.io.gfile``, imported on first use."""
    import tensorflow as tf

    return tf.io.gfile


def join(directory: str, name: str) -> str:
    """``directory/name`` for local paths and URLs alike."""
    return f"{directory.rstrip('/')}/{name}"


def read_json(path: str) -> dict | None:
    """The JSON object at ``path``; ``None`` when it is missing or unreadable (logged)."""
    fs = gfile()
    if not fs.exists(path):
        return None
    try:
        with fs.GFile(path) as f:
            return json.load(f)
    except (ValueError, OSError) as e:
        log.warning("ignoring unreadable %s (%s)", path, e)
        return None


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (temp file, then rename)."""
    fs = gfile()
    parent = path.rsplit("/", 1)[0]
    if parent and parent != path:
        fs.makedirs(parent)
    tmp = f"{path}.tmp"
    with fs.GFile(tmp, "w") as f:
        f.write(text)
    fs.rename(tmp, path, overwrite=True)


def write_json(path: str, data, *, sort_keys: bool = True) -> None:
    """Writes ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys))
