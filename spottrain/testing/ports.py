"""Which TCP ports a process listens on, to tell our server from another on its port.

A server started on a port picked beforehand may find the port taken by another
process, which may answer our readiness check before ours exits with "address
already in use" (issue 42). Reading the process's own sockets settles whose it is.
"""

from __future__ import annotations

import os


def listening_ports(pid: int) -> set[int] | None:
    """TCP ports ``pid`` listens on (none once it exited); None if /proc cannot tell.

    A socket's inode is both the target of ``/proc/<pid>/fd/<n>`` ("socket:[inode]",
    proc(5)) and column 10 of its row in ``/proc/<pid>/net/tcp[6]``, whose state
    ``0A`` is TCP_LISTEN (include/net/tcp_states.h) and whose local address ends in
    the port in hex.
    """
    if not os.path.exists("/proc/self/net/tcp"):
        return None
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
        ports = set()
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as rows:
                next(rows)
                for row in rows:
                    cols = row.split()
                    if cols[3] == "0A" and cols[9] in inodes:
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        return ports
    except OSError:  # the process is gone
        return set()
