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
# What each file is (its name's first word): the readers below glob by it.
HANG, NOTICE = "hang", "notice"


def path(checkpoint_dir: str, kind: str, worker: str, stamp: str) -> str:
    """``<checkpoint_dir>/diagnostics/<kind>-<worker>-<stamp>.txt``: one worker's file."""
    return fileio.join(checkpoint_dir, f"{DIR}/{kind}-{worker}-{stamp}.txt")


def last_hang_dump(checkpoint_dir: str, since: float) -> tuple[float, int | None] | None:
    """The newest hang dump (:data:`HANG`) written since ``since``.

    Its writer (a worker's supervisor, or the local launcher for a frozen worker)
    killed the hung attempt then, and names the last step it saw finish.

    Returns:
        (its modification time in epoch seconds, that step or ``None``), or ``None``
        when no dump was written.
    """
    pattern = fileio.join(checkpoint_dir, f"{DIR}/{HANG}-*")
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
    pattern = fileio.join(checkpoint_dir, f"{DIR}/{NOTICE}-*")
    return any(since <= fileio.mtime(p) <= until for p in fileio.glob(pattern))
