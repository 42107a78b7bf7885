"""Where the local launcher's workers are: ports on 127.0.0.1, each one's ``TF_CONFIG``.

Also what /proc says of a worker's processes (its trainer under its supervisor).
"""

from __future__ import annotations

import os
import socket


def free_ports(n: int) -> list[int]:
    """Reserves n distinct free TCP ports on 127.0.0.1 (held open until all are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tf_configs(ports: list[int]) -> list[tuple[str, dict]]:
    """(name, TF_CONFIG) per worker: chief first, then workers, as Vertex AI does."""
    addrs = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": addrs[:1]}
    if len(addrs) > 1:
        cluster["worker"] = addrs[1:]
    out = [("chief-0", {"cluster": cluster, "task": {"type": "chief", "index": 0}})]
    for i in range(len(addrs) - 1):
        out.append((f"worker-{i}", {"cluster": cluster, "task": {"type": "worker", "index": i}}))
    return out


def default_max_workers() -> int:
    """The most local workers allowed without ``--max-workers``: 4 per CPU."""
    return 4 * (os.cpu_count() or 1)


def children(pid: int) -> list[int]:
    """Direct child pids (Linux /proc), e.g. the trainer under its supervisor."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []
