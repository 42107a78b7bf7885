"""Opening local files for reading: regular files only, and never through a link out of DST.

Opening a FIFO for reading waits for a writer, forever, and in a worker thread no
signal can cut that wait short; opening a device can have side effects. So every
local file this package reads is checked with ``stat`` first, opened with
``O_NONBLOCK`` (a FIFO then opens at once) and checked again on the open
descriptor, which no rename in between can fool.
"""

from __future__ import annotations

import errno
import os
import stat

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symlink"),
)


class _NotRegular(OSError):
    """A path that is not a regular file (a FIFO, socket, device, ...)."""


class _Outside(OSError):
    """A path that resolves outside the directory it must stay in."""


def _kind(mode: int) -> str:
    """Names the kind of a non-regular file from its ``st_mode`` ("a FIFO", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _inside(real: str, real_root: str) -> bool:
    """Whether the resolved path ``real`` is ``real_root`` or under it."""
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _fd_path(fd: int, path: str) -> str:
    """The real path of the file open on ``fd`` (Linux: race-free via /proc)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _open_regular(path: str, *, real_root: str | None = None) -> int:
    """Opens ``path`` read-only; only a regular file, and only inside ``real_root``.

    Returns:
        A blocking file descriptor (the caller closes it).

    Raises:
        _NotRegular: ``path`` is a FIFO, socket, device or directory.
        _Outside: ``path`` (through a symlink) resolves outside ``real_root``.
        OSError: as ``os.open``.
    """
    mode = os.stat(path).st_mode  # no open() at all of what is plainly not a file
    if not stat.S_ISREG(mode):
        raise _NotRegular(errno.EINVAL, f"not a regular file ({_kind(mode)})", path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode  # what was really opened
        if not stat.S_ISREG(mode):
            raise _NotRegular(errno.EINVAL, f"not a regular file ({_kind(mode)})", path)
        if real_root is not None:
            real = _fd_path(fd, path)
            if not _inside(real, real_root):
                raise _Outside(errno.EXDEV, f"resolves outside the destination, to {real}", path)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise
