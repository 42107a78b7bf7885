"""The checkpoint dir's ``diagnostics/``: what supervisors leave for the next attempt.

Every worker writes here under its own name (a hung worker's stack dump, a notice its
supervisor noted); the engine's watchdog writes, the ledger reads when it closes
the record of an attempt that could not close its own. Below both, so neither
imports the other for it.
"""

from __future__ import annotations

import re

from spottrain import fileio

DIR = "diagnostics"


def last_hang_dump(checkpoint_dir: str, since: float) -> tuple[float, int | None] | None:
    """The newest hang dump (``checkpointing.diagnostics_path``) written since ``since``.

    Its writer (a worker's supervisor, or the local launcher for a frozen worker)
    killed the hung attempt then, and names the last step it saw finish.

    Returns:
        (its modification time in epoch seconds, that step or ``None``), or ``None``
        when no dump was written.
    """
    pattern = fileio.join(checkpoint_dir, f"{DIR}/hang-*")
    dumps = [(t, p) for p in fileio.glob(pattern) if (t := fileio.mtime(p)) >= since]
    if not dumps:
        return None
    when, path = max(dumps)
    try:
        found = re.search(r"after step (\d+)", fileio.read_text(path)[:1000])
    except OSError:
        found = None
    return when, int(found.group(1)) if found else None


def notice_between(checkpoint_dir: str, since: float, until: float) -> bool:
    """Whether a supervisor noted a preemption notice (watchdog.write_notice) in that time."""
    pattern = fileio.join(checkpoint_dir, f"{DIR}/notice-*")
    return any(since <= fileio.mtime(p) <= until for p in fileio.glob(pattern))
