"""Refuses a batch that cannot fit in this machine's memory, before the first step.

Without it a batch size that is too large (``--batch-size-per-replica 1000000``)
grows the input pipeline until the kernel's OOM killer ends the trainer: exit 137,
which every orchestrator retries, after minutes, with no line saying why. The
engine reads the size of one decoded element from the task's dataset's
``element_spec`` (nothing is decoded) and compares what one step holds on this
worker against the memory available to the process (the cgroup's limit, as in a
pod or container, and the host's ``MemAvailable``).

The bound is generous, so that no run that could train trips it: only two steps'
batches (the one a step reads and the one ``prefetch`` holds) must fit, while a real
run also needs the model, the optimizer and the decode buffers.
"""

from __future__ import annotations

import math
import os

from spottrain.trainer.preemption import ConfigError

# Steps' batches held at once at the least: the one in use and one prefetched.
BATCHES_HELD = 2
# Where each cgroup version's hierarchy is mounted: (mount, limit file, usage file).
_V1 = ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
_V2 = [(mount, "memory.max", "memory.current")
       for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]  # fmt: skip


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _own_cgroups(path: str = "/proc/self/cgroup") -> list[tuple[tuple[str, str, str], str]]:
    """This process's memory cgroups: ((mount, limit file, usage file), its path)."""
    found = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "memory" in controllers.split(","):
            found.append((_V1, where))
        elif controllers == "":
            found += [(v2, where) for v2 in _V2]
    return found


def available_bytes() -> int | None:
    """Memory this process can still get (bytes), ``None`` when nothing says.

    The least of the host's ``MemAvailable`` and the room left under each limit of
    its cgroup and of the cgroups above it.
    """
    known = [_meminfo_available()]
    for (mount, limit_file, usage_file), where in _own_cgroups():
        parts = [p for p in where.split("/") if p]
        for depth in range(len(parts), -1, -1):  # a limit may be set on any ancestor
            folder = os.path.join(mount, *parts[:depth])
            cap = _read_int(os.path.join(folder, limit_file))
            used = _read_int(os.path.join(folder, usage_file))
            if cap is not None and used is not None and cap < 2**62:  # v1's "none": ~2**63
                known.append(max(0, cap - used))
    known = [k for k in known if k is not None]
    return min(known) if known else None


def element_bytes(element_spec, batch: int) -> tuple[int, str]:
    """Bytes of one dataset element of ``batch`` examples, and how they were counted.

    The leading dimension of each tensor is its batch (``batch`` when the spec leaves
    it unknown); other unknown dimensions count as 1, so the estimate is a lower bound.
    """
    import tensorflow as tf

    total, parts = 0, []
    for spec in tf.nest.flatten(element_spec):
        shape = getattr(spec, "shape", None)
        dtype = getattr(spec, "dtype", None)
        if shape is None or dtype is None or shape.rank is None:
            continue
        dims = shape.as_list()
        rows = dims[0] if dims and dims[0] is not None else batch
        each = math.prod(d or 1 for d in dims[1:]) * max(1, dtype.size)
        total += rows * each
        parts.append(f"{'x'.join(str(d) for d in dims[1:]) or 'scalar'} {dtype.name}")
    return total, " + ".join(parts)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_batch_fits(element_spec, batch: int, elements_per_step: int, flag: str) -> None:
    """Raises ConfigError (exit 64) when a step's batches cannot fit in memory.

    Args:
        element_spec: The task's training dataset's ``element_spec``.
        batch: Examples per element (the per-replica batch).
        elements_per_step: Elements this worker reads per step (its local replicas).
        flag: The flag and value that set the batch, for the line.
    """
    available = available_bytes()
    if available is None:
        return
    each, counted = element_bytes(element_spec, batch)
    step = each * elements_per_step
    if step * BATCHES_HELD <= available:
        return
    raise ConfigError(
        f"{flag}: a step's batch on this worker is {_gib(step)} decoded "
        f"({batch * elements_per_step} x {counted}), and {BATCHES_HELD} of them do not fit in "
        f"the {_gib(available)} of memory available; lower it"
    )
