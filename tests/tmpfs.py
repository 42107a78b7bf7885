"""Small file systems (tmpfs) for storage-failure tests; mounting needs root."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def mount_tmpfs(path, size: str, *options: str):
    path.mkdir(parents=True, exist_ok=True)
    opts = ",".join((f"size={size}", *options))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=False)
    if done.returncode:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder) -> None:
    """Writes zeros into ``folder`` until its file system is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
