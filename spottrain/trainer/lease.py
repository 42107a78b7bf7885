"""One writer per checkpoint dir: a lease the chief takes before writing and renews.

Without it two runs pointed at one dir (a pipeline re-run while the first is still
going, two jobs, a new gang while the old one's pods terminate) both train and
write ``ckpt-N`` in turn. The lease is one small object, ``<dir>/lease.json``,
naming its holder (run, host, pid, since) and when it expires; it changes only by
compare-and-swap (:mod:`spottrain.versioned`: Cloud Storage generation
preconditions on ``gs://``, ``flock`` locally): created only if absent, renewed or
taken over only if still the version read.

A holder renews every quarter of its lease; one that died (SIGKILL, a lost node)
stops renewing and its lease is taken over once expired, or at once when it was a
process of this host and PID namespace that no longer exists. A holder that finds its
lease gone or someone else's (it expired while this process was partitioned or
stalled) stops writing. Expiry compares wall clocks of different hosts: seconds
of skew only shorten or lengthen a takeover by as much.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Any

from spottrain import fileio, versioned

log = logging.getLogger(__name__)

LEASE = "lease.json"
# The longest lease a holder may take (--lease-seconds is bounded by it): an expiry
# further ahead than this plus a day of clock skew is no holder's, it is a bad record.
MAX_SECONDS = 86400.0


class LeaseHeld(Exception):
    """Another writer holds the lease (``holder`` is its record)."""

    def __init__(self, holder: dict):
        super().__init__(describe(holder))
        self.holder = holder


def describe(holder: dict) -> str:
    """``run <id> on <host> (pid <pid>) since <UTC time>``."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("since", 0)))
    return (
        f"run {holder.get('run', '?')} on {holder.get('host', '?')} "
        f"(pid {holder.get('pid', '?')}) since {since}"
    )


def refused(e: BaseException) -> bool:
    """Whether a Cloud Storage failure is one a retry cannot fix.

    No permission, rejected credentials, no such bucket. Network and server errors
    are not, nor are credentials not found: in a pod they come from the metadata
    server, which may be briefly unreachable (TensorFlow's gs:// file system fails
    the same way, as retryable, see fileio.storage_failure).
    """
    from google.api_core import exceptions as gexc

    return isinstance(e, (gexc.Forbidden, gexc.Unauthorized, gexc.NotFound))


def problem(record: Any) -> str | None:
    """What makes a lease record unusable (``None``: a holder's record, or none).

    A holder writes a JSON object with a finite ``expires`` time. Anything else
    (a list, ``"expires": "tomorrow"``, an expiry of 1e400 that would hold the dir
    for ever) was not written by a holder: it names nobody who could let go.
    """
    if record is None:
        return None
    if not isinstance(record, dict) or not record:
        return "it is not a lease record (a JSON object naming its holder)"
    expires = record.get("expires")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        return f"its expiry {expires!r} is not a time"
    if not math.isfinite(expires) or expires > time.time() + MAX_SECONDS + 86400:
        return f"its expiry {expires!r} is not a time a holder could have set"
    return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _dead_here(holder: dict) -> bool:
    """Whether ``holder`` was a process of this host and PID namespace that has ended.

    Then its lease need not run out: a local re-run after a kill starts at once. A
    holder elsewhere (another pod or VM) is judged by its expiry alone.
    """
    if holder.get("host") != socket.gethostname() or _pid_namespace() is None:
        return False
    if holder.get("pid_namespace") != _pid_namespace() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class Lease:
    """The checkpoint dir's writer lease, for one process.

    Args:
        directory: The checkpoint dir.
        run: What the holder's record names as its run (two attempts of one run
            share it).
        seconds: How long a lease lasts without renewal.
    """

    def __init__(self, directory: str, run: str, seconds: float):
        self.directory = directory
        self.seconds = seconds
        self.path = fileio.join(directory, LEASE)
        self.store = versioned.store(self.path)
        self.record = {
            "run": run,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_namespace": _pid_namespace(),
            "token": uuid.uuid4().hex,
            "since": time.time(),
        }
        self.version: Any = None
        self.held = False
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _mine(self, record: dict | None) -> bool:
        return bool(record) and record.get("token") == self.record["token"]

    def acquire(self, wait_seconds: float) -> dict | None:
        """Takes the lease, waiting up to ``wait_seconds`` for a live holder to let go.

        Returns:
            The expired record taken over, or ``None``.

        Raises:
            LeaseHeld: still held by a live holder after the wait.
        """
        deadline = time.monotonic() + wait_seconds
        waited = False
        while True:
            current, version = self.store.read()
            now = time.time()
            bad = problem(current)
            if bad is not None:
                # Not a holder's: waiting or retrying cannot change it. Replace it (as
                # its version, so a racing taker still wins or loses cleanly), quoted.
                log.warning(
                    "replacing the invalid lease record %s (%s): %.200r",
                    self.path,
                    bad,
                    current,
                )
                current = None
            live = current and current["expires"] > now and not _dead_here(current)
            if live and not self._mine(current):
                if time.monotonic() >= deadline:
                    raise LeaseHeld(current)
                if not waited:
                    log.warning(
                        "checkpoint dir %s is held by %s; waiting up to %.0f s",
                        self.directory,
                        describe(current),
                        wait_seconds,
                    )
                    waited = True
                time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
                continue
            record = {**self.record, "expires": now + self.seconds}
            new = self.store.swap(record, version)
            if new is False:
                continue  # someone else got there first: look again
            self.version, self.held = new, True
            self.record = record
            return current if current else None

    def renew(self) -> bool:
        """Extends the lease; ``False`` (and ``lost`` set) when it is no longer ours."""
        current, version = self.store.read()
        if not self._mine(current) or version != self.version:
            return self._lose(current)
        record = {**self.record, "expires": time.time() + self.seconds}
        new = self.store.swap(record, version)
        if new is False:
            return self._lose(self.store.read()[0])
        self.version, self.record = new, record
        return True

    def _lose(self, current: dict | None) -> bool:
        if not self.lost.is_set():
            who = describe(current) if current else "nobody (it was removed)"
            log.error("lost the lease on %s: it is now held by %s", self.directory, who)
        self.held = False
        self.lost.set()
        return False

    def start_renewing(self) -> None:
        """Renews every quarter of the lease in a daemon thread until :meth:`release`."""

        def loop():
            while not self._stop.wait(self.seconds / 4):
                try:
                    if not self.renew():
                        return
                except Exception as e:  # noqa: BLE001 - storage trouble: try again, expire if it lasts
                    log.warning("could not renew the lease on %s: %s", self.directory, e)

        self._thread = threading.Thread(target=loop, name="lease-renewal", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stops renewing and removes the lease if it is still ours (best effort)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self.held:
            return
        self.held = False
        try:
            current, version = self.store.read()
            if self._mine(current):
                self.store.swap(None, version)
        except Exception as e:  # noqa: BLE001 - it expires by itself
            log.warning("could not release the lease on %s: %s", self.directory, e)
