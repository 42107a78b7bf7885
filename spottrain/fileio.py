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

import contextlib
import errno
import glob as _glob
import json
import logging
import os
import re

from spottrain import exits
from spottrain.storage import folder_problem, is_local

log = logging.getLogger(__name__)


# What no retry can cure without someone fixing the destination: the same table
# for Python's OSError (by errno) and TensorFlow's file-system errors (by the
# strerror text its POSIX file system puts in the message).
UNWRITABLE_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENOTDIR,
        errno.EISDIR,
    }
)
_TF_PATH_ERROR = re.compile(
    r"(\S+); (" + "|".join(re.escape(os.strerror(n)) for n in sorted(UNWRITABLE_ERRNOS)) + ")"
)
# TensorFlow file-system errors on gs:// that another attempt cannot fix.
_FATAL_STORAGE_ERRORS = frozenset(
    {"PermissionDeniedError", "UnauthenticatedError", "UnimplementedError", "NotFoundError"}
)
# Only errors about storage are converted: a collective's UnavailableError is a peer's.
_STORAGE_MARKERS = ("gs://", "googleapis", "HTTP request", "File system scheme")


def storage_failure(e: BaseException, dirs: dict[str, str] | None = None):
    """A storage error as the attempt's exit, or ``None`` for anything else.

    The one table: no space, a read-only or permission-denied destination, a file
    where a folder belongs (local OSError or TensorFlow's error) are
    :class:`~spottrain.exits.Unwritable` (64, not recorded in
    FATAL.json: a retry re-checks the dirs before any step); permission,
    credential, unsupported-scheme and missing-bucket errors on gs:// are fatal
    (64); the rest on gs:// (DNS, network, timeouts, 5xx) are retryable (172).

    Args:
        e: The exception.
        dirs: ``{flag: dir}`` to name which of the run's dirs the failed path is in.
    """
    is_tf = type(e).__module__.startswith("tensorflow")
    text = " ".join(str(e).split())
    unwritable = None  # (path, reason)
    if isinstance(e, OSError):
        if e.errno in UNWRITABLE_ERRNOS:
            unwritable = e.filename or "", e.strerror or text
    elif is_tf:
        # TensorFlow's POSIX file system: "<path>; <strerror>" inside the message.
        m = _TF_PATH_ERROR.search(text)
        if m:
            unwritable = m.group(1), m.group(2)
    if unwritable:
        path, reason = unwritable
        where = f"{path!r}" if path else "a file"
        flag = _flag_of(path or text, dirs or {})
        return exits.Unwritable(f"cannot write {where}{f' ({flag})' if flag else ''}: {reason}")
    if not is_tf or not any(m in text for m in _STORAGE_MARKERS):
        return None
    name = type(e).__name__
    if name in _FATAL_STORAGE_ERRORS:
        return exits.TrainerExit(exits.FATAL_CONFIG, f"storage refused: {text[:300]}")
    return exits.TrainerExit(exits.UNAVAILABLE, f"storage unreachable ({name}): {text[:300]}")


def _flag_of(path: str, dirs: dict[str, str]) -> str:
    """The flag whose dir holds ``path`` (the deepest, as the TensorBoard dir may be inside)."""
    best = ""
    for flag, directory in dirs.items():
        d = directory.rstrip("/") if directory else ""
        if d and (path == d or f"{d}/" in path):
            if len(d) > len(dirs.get(best, "").rstrip("/")):
                best = flag
    return best


@contextlib.contextmanager
def naming(path: str):
    """Gives an OSError raised inside (a library's write of ``path``) that path.

    Writes through a zip or HDF5 library (``model.save``) fail on a full disk
    with a bare ``[Errno 28]``; the line the user reads should say where.
    """
    try:
        yield
    except OSError as e:
        if e.filename or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, path) from e


def gfile():
    """``tf.io.gfile``, imported on first use."""
    import tensorflow as tf

    return tf.io.gfile


def join(directory: str, name: str) -> str:
    """``directory/name`` for local paths and URLs alike."""
    return f"{directory.rstrip('/')}/{name}"


def read_json(path: str) -> dict | None:
    """The JSON object at ``path``; ``None`` when it is missing or unreadable (logged)."""
    if not exists(path):
        return None
    try:
        return json.loads(read_text(path))
    except (ValueError, OSError) as e:
        log.warning("ignoring unreadable %s (%s)", path, e)
        return None


def read_text(path: str) -> str:
    """The text at ``path`` (raises when it is missing or unreadable)."""
    with open(path) if is_local(path) else gfile().GFile(path) as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (temp file, then rename)."""
    parent = path.rsplit("/", 1)[0]
    tmp = f"{path}.tmp"
    if is_local(path):  # no TensorFlow needed: the light supervisor writes here too
        if parent and parent != path:
            os.makedirs(parent, exist_ok=True)
        try:
            with naming(path), open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # a full disk must not keep half a file
                os.remove(tmp)
            raise
        return
    fs = gfile()
    if parent and parent != path:
        fs.makedirs(parent)
    try:
        with fs.GFile(tmp, "w") as f:
            f.write(text)
        fs.rename(tmp, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.remove(tmp)
        raise


def glob(pattern: str) -> list[str]:
    """The paths matching ``pattern``."""
    return sorted(_glob.glob(pattern)) if is_local(pattern) else gfile().glob(pattern)


def mtime(path: str) -> float:
    """Modification time of ``path`` in seconds since the epoch."""
    return os.stat(path).st_mtime if is_local(path) else gfile().stat(path).mtime_nsec / 1e9


def exists(path: str) -> bool:
    """Whether ``path`` exists."""
    return os.path.exists(path) if is_local(path) else gfile().exists(path)


def remove(path: str) -> None:
    """Removes the file or folder (with its contents) at ``path``, if there."""
    if is_local(path):
        import shutil

        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
    elif gfile().isdir(path):
        gfile().rmtree(path)
    elif gfile().exists(path):
        gfile().remove(path)


def move(src: str, dst: str) -> None:
    """Moves the file ``src`` to ``dst``, creating ``dst``'s folder."""
    parent = dst.rsplit("/", 1)[0]
    if is_local(dst):
        os.makedirs(parent, exist_ok=True)
        os.replace(src, dst)
    else:
        gfile().makedirs(parent)
        gfile().rename(src, dst, overwrite=True)


def write_json(path: str, data, *, sort_keys: bool = True) -> None:
    """Writes ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys))


def unwritable_folder(path: str) -> str | None:
    """Why a local folder cannot be created at ``path`` and written, or ``None``.

    Worded to follow the caller's naming of the value: ``--out 'x': not writable: ...``.
    """
    if blocked := folder_problem(path):
        return blocked
    try:
        probe_writable(path)
    except OSError as e:
        return f"not writable: {e.strerror}"
    return None


def probe_writable(directory: str) -> None:
    """Creates ``directory`` if needed, writes and removes a small file in it.

    Raises:
        OSError (or TensorFlow's error for URLs): when that is not possible.
    """
    # Its own name: workers and concurrent runs probe the same folders at once.
    probe = join(directory, f".spottrain-write-probe-{os.getpid()}-{os.urandom(4).hex()}")
    write_text(probe, "ok")
    if is_local(probe):
        os.remove(probe)
    else:
        gfile().remove(probe)


def quarantine(checkpoint_dir: str, path: str, suffix: str = "") -> str:
    """Moves the file ``path`` into ``<checkpoint_dir>/quarantine/`` (never deleted).

    Returns:
        Its new path: its name plus ``suffix``.
    """
    moved = join(checkpoint_dir, f"quarantine/{path.rsplit('/', 1)[-1]}{suffix}")
    move(path, moved)
    return moved
