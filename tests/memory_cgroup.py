"""A child process in a memory cgroup of its own: a pod's memory limit, on this machine.

The kernel's OOM killer then ends only the child (exit 137), never a neighbour.
"""

from __future__ import annotations

import contextlib
import os
import time

from spottrain.trainer import batch_memory


def read_text(path: str) -> str:
    """A cgroup file's text, or "" where there is none."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def writable() -> tuple[str, str] | None:
    """A writable memory cgroup of this process (v1 or v2): (folder, limit file), or None."""
    for (mount, limit_file, _), where in batch_memory._own_cgroups():
        folder = os.path.join(mount, *[p for p in where.split("/") if p])
        subtree = read_text(os.path.join(folder, "cgroup.subtree_control")).split()
        if limit_file == "memory.max" and "memory" not in subtree:
            continue
        if os.path.isdir(folder) and os.access(folder, os.W_OK):
            return folder, limit_file
    return None


@contextlib.contextmanager
def limited(limit_bytes: int, name: str):
    """Yields a command prefix that runs a command inside a new cgroup of ``limit_bytes``.

    Everything left in it is killed and the cgroup removed on exit.
    """
    found = writable()
    if found is None:
        raise LookupError("no writable memory cgroup here (needs root)")
    parent, limit_file = found
    cg = os.path.join(parent, f"{name}-{os.getpid()}")
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(limit_bytes))
        yield ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]
    finally:
        for pid in read_text(os.path.join(cg, "cgroup.procs")).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        for _ in range(50):  # the killed processes leave the cgroup as they are reaped
            with contextlib.suppress(OSError):
                os.rmdir(cg)
                break
            time.sleep(0.1)
