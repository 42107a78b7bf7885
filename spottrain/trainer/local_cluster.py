"""Where the local launcher's workers are: ports on 127.0.0.1, each one's ``TF_CONFIG``.

Also what /proc says of a worker's processes (its trainer under its supervisor).
"""

from __future__ import annotations

import os
import random
import socket


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands out for outgoing connections and bind(0)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts there


def free_ports(n: int) -> list[int]:
    """Reserves n distinct free TCP ports on 127.0.0.1 (held open until all are picked).

    They are released before the workers bind them, seconds later. A port from the
    kernel's ephemeral range could be taken in between by any process's outgoing
    connection (CI saw a chief fail "Could not start gRPC server" so), so they are
    drawn below that range, where only an explicit bind can take them.
    """
    low = _ephemeral_low()
    floor = 10000
    rng = random.SystemRandom()
    socks = []
    try:
        tries = 0
        while len(socks) < n:
            s = socket.socket()
            if low - floor >= 1000 and tries < 50 * n:
                tries += 1
                try:
                    s.bind(("127.0.0.1", rng.randrange(floor, low)))
                except OSError:
                    s.close()
                    continue
            else:  # an unusual range: the kernel's own pick
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
