"""Small files beside the checkpoints: JSON and text on local disk, /gcs/ (FUSE) or gs://.

The one place that writes them, so every writer gets the same guarantees: the
parent folder is created, and a file is written to ``<path>.tmp`` and renamed
over ``path``, so a reader (the next attempt, a retry's FATAL check) sees the
old file or the new one, never half of one, even when the writer is killed.
Local paths (a /gcs/ FUSE mount included) use plain Python; URLs (gs://) use
TensorFlow's ``tf.io.gfile``, imported on first use, so the light supervisor
can record a fatal error without loading TensorFlow.
"""

from __future__ import annotations

import glob as _glob
import json
import logging
import os

log = logging.getLogger(__name__)


def is_local(path: str) -> bool:
    """A path of this machine (incl. a /gcs/ FUSE mount), not a URL like gs://."""
    return "://" not in path


def gfile():
    """``tf.io.gfile``, imported on first use."""
    import tensorflow as tf

    return tf.io.gfile


def join(directory: str, name: str) -> str:
    """``directory/name`` for local paths and URLs alike."""
    return f"{directory.rstrip('/')}/{name}"


def read_json(path: str) -> dict | None:
    """The JSON object at ``path``; ``None`` when it is missing or unreadable (logged)."""
    local = is_local(path)
    exists = os.path.exists if local else gfile().exists
    if not exists(path):
        return None
    try:
        with open(path) if local else gfile().GFile(path) as f:
            return json.load(f)
    except (ValueError, OSError) as e:
        log.warning("ignoring unreadable %s (%s)", path, e)
        return None


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (temp file, then rename)."""
    parent = path.rsplit("/", 1)[0]
    tmp = f"{path}.tmp"
    if is_local(path):  # no TensorFlow needed: the light supervisor writes here too
        if parent and parent != path:
            os.makedirs(parent, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return
    fs = gfile()
    if parent and parent != path:
        fs.makedirs(parent)
    with fs.GFile(tmp, "w") as f:
        f.write(text)
    fs.rename(tmp, path, overwrite=True)


def glob(pattern: str) -> list[str]:
    """The paths matching ``pattern``."""
    return sorted(_glob.glob(pattern)) if is_local(pattern) else gfile().glob(pattern)


def mtime(path: str) -> float:
    """Modification time of ``path`` in seconds since the epoch."""
    return os.stat(path).st_mtime if is_local(path) else gfile().stat(path).mtime_nsec / 1e9


def write_json(path: str, data, *, sort_keys: bool = True) -> None:
    """Writes ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys))


def probe_writable(directory: str) -> None:
    """Creates ``directory`` if needed, writes and removes a small file in it.

    Raises:
        OSError (or TensorFlow's error for URLs): when that is not possible.
    """
    probe = join(directory, ".spottrain-write-probe")
    write_text(probe, "ok")
    if is_local(probe):
        os.remove(probe)
    else:
        gfile().remove(probe)
