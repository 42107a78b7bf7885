"""The earliest preemption notice on GCE: the metadata server's ``instance/preempted``.

A Spot VM whose ``scheduling.preemptionNoticeDuration`` is set (Preview; 120 s) has
its metadata key ``instance/preempted`` turn ``TRUE`` that long before the ACPI
soft-off that becomes the pods' SIGTERM; without it the key turns with the shutdown
itself (https://cloud.google.com/compute/docs/instances/spot#preemption-process,
https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange).
:class:`Watcher` long-polls that key from a daemon thread and sets the trainer's
:class:`~spottrain.trainer.preemption.StopFlag` when it turns, which starts the same
save at the same step on every worker as a SIGTERM would; SIGTERM stays.

It says at INFO, once, whether it watches. Only off GCE does it stop: before any
answer, the name does not resolve, nothing listens, or what answers is not GCE's
server; it says so at INFO. Any other failed read (an HTTP error, a reset, a timeout,
an answer that is not ``TRUE``/``FALSE``) is retried with a backoff that doubles up to
:data:`RETRY_MAX_SECONDS`, for as long as the process lives: one failed read must not
cost the notice. A ``GCE_METADATA_HOST`` that is not a host is one WARNING and no
watcher (the notice is optional; SIGTERM remains). The step loop only reads the flag,
so a slow metadata server never delays a step.
"""

from __future__ import annotations

import datetime
import http.client
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

log = logging.getLogger(__name__)

# google-auth's name for the metadata server's host[:port], put after "http://" as it
# is (google-auth 2.63 google/auth/compute_engine/_metadata.py:55,89).
HOST_ENV = "GCE_METADATA_HOST"
DEFAULT_HOST = "metadata.google.internal"
PATH = "/computeMetadata/v1/instance/preempted"
REASON = "GCE metadata instance/preempted"
# How long one wait may hang on the server's side (its ``timeout_sec``); the client
# waits a little longer.
WAIT_SECONDS = 300
# A failed read is retried after 0.5 s, 1 s, 2 s, ... at most 10 s apart: a notice
# 120 s ahead of the soft-off is then heard at most ~10 s late.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOST_PORT = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]+\])(?::(\d{{1,5}}))?")


def url(host: str | None = None) -> str:
    """The key's URL on ``host`` (default: ``GCE_METADATA_HOST``, else GCE's name)."""
    return f"http://{host or os.environ.get(HOST_ENV) or DEFAULT_HOST}{PATH}"


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a ``host[:port]`` (None when it is one)."""
    m = _HOST_PORT.fullmatch(host)
    if m is None:
        return "not a host[:port]"
    if m.group(1) is not None and not 0 < int(m.group(1)) < 65536:
        return f"port {m.group(1)} is not in 1..65535"
    return None


def retry_delay(failures: int) -> float:
    """The wait after the ``failures``-th failed read in a row."""
    return min(RETRY_FIRST_SECONDS * 2 ** (failures - 1), RETRY_MAX_SECONDS)


def utc(epoch: float) -> str:
    """``epoch`` as the log lines print it (UTC, milliseconds)."""
    at = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return at.strftime("%H:%M:%S.%f")[:-3] + " UTC"


class NotGce(Exception):
    """What answered is not GCE's metadata server (off GCE)."""


class BadAnswer(ValueError):
    """An answer that is neither ``TRUE`` nor ``FALSE`` (retried)."""


def off_gce(err: Exception) -> str | None:
    """Why a first failed read means no metadata server here (None: retry it)."""
    reason = getattr(err, "reason", None) if isinstance(err, urllib.error.URLError) else err
    if isinstance(err, NotGce):
        return str(err)
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    # A temporary failure (EAI_AGAIN) is retried: a DNS hiccup on GCE is not off GCE.
    gone = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
    if isinstance(reason, socket.gaierror) and reason.errno in gone:
        return "the name does not resolve"
    return None


class Watcher:
    """Sets ``on_notice`` once when the VM's ``instance/preempted`` turns ``TRUE``.

    Args:
        on_notice: Called with :data:`REASON` (the trainer's ``StopFlag.set``).
        host: The metadata server's ``host[:port]`` (default: ``GCE_METADATA_HOST``,
            else GCE's name).
    """

    def __init__(self, on_notice: Callable[[str], None], host: str | None = None):
        self.on_notice = on_notice
        self.from_env = not host and bool(os.environ.get(HOST_ENV))
        self.host = host or os.environ.get(HOST_ENV) or DEFAULT_HOST
        self.base_url = url(self.host)
        self.stopped = threading.Event()
        self.noticed = False
        self.seen_at: float | None = None  # when a TRUE was read (epoch seconds)
        self.reverted_at: float | None = None  # when FALSE was read again after it
        self.thread = threading.Thread(target=self._run, name="metadata-notice", daemon=True)

    def start(self) -> Watcher:
        """Starts watching in a daemon thread (not for a host that is not one)."""
        problem = host_problem(self.host)
        if problem is not None:
            named = f"{HOST_ENV}={self.host!r}" if self.from_env else repr(self.host)
            log.warning(
                "GCE metadata notice off: %s is %s; SIGTERM stays the notice", named, problem
            )
            return self
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stops after the wait in progress (the thread is a daemon: nothing waits for it)."""
        self.stopped.set()

    def _get(self, query: str, timeout: float) -> tuple[str, str]:
        """The key's value and ETag."""
        request = urllib.request.Request(
            f"{self.base_url}?{query}", headers={"Metadata-Flavor": "Google"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            # GCE's server says who it is; anything else answering the name is not it.
            if response.headers.get("Metadata-Flavor") != "Google":
                raise NotGce("what answers has no Metadata-Flavor: Google header")
            value = response.read().decode(errors="replace").strip()
            if value not in ("TRUE", "FALSE"):
                raise BadAnswer(f"the answer is {value[:40]!r}, not TRUE or FALSE")
            return value, response.headers.get("ETag", "")

    def _run(self) -> None:
        etag, failures, answered = "", 0, False
        while not self.stopped.is_set():
            query = f"wait_for_change=true&timeout_sec={WAIT_SECONDS}"
            query += f"&last_etag={etag}" if etag else ""
            asked, waiting = time.monotonic(), answered
            try:
                # The first read does not wait: a key already TRUE is a notice now.
                value, etag = self._get(query if answered else "", WAIT_SECONDS + 10)
            # URLError, resets and timeouts are OSErrors; a garbled answer is http.client's.
            except (OSError, http.client.HTTPException, ValueError, NotGce) as err:
                why = None if answered else off_gce(err)
                if why is not None:
                    log.info(
                        "GCE metadata notice off: not on GCE (%s: %s); SIGTERM stays the notice",
                        self.host,
                        why,
                    )
                    return
                failures += 1
                delay = retry_delay(failures)
                say = log.info if failures == 1 else log.debug  # once per run of failures
                say(
                    "GCE metadata notice: reading instance/preempted on %s failed (%s: %s); "
                    "retrying in %.1f s, backing off up to %.0f s",
                    self.host,
                    type(err).__name__,
                    err,
                    delay,
                    RETRY_MAX_SECONDS,
                )
                self.stopped.wait(delay)
                continue
            if not answered or failures:
                after = f", after {failures} failed reads" if failures else ""
                if answered:
                    log.info("GCE metadata notice: %s answers again%s", self.host, after)
                else:
                    log.info(
                        "GCE metadata notice on: watching instance/preempted on %s (%s now%s); "
                        "TRUE starts the save a SIGTERM would",
                        self.host,
                        value,
                        after,
                    )
            answered, failures = True, 0
            if value == "TRUE" and self.seen_at is None:
                self._heard()
            elif value == "FALSE" and self.seen_at is not None:
                self._reverted()
                return
            if waiting and time.monotonic() - asked < 1.0:
                self.stopped.wait(1.0)  # a server that does not wait is not polled hard

    def _heard(self) -> None:
        self.seen_at, self.noticed = time.time(), True
        log.warning(
            "%s read TRUE at %s on %s: the notice",
            REASON,
            utc(self.seen_at),
            self.host,
        )
        self.on_notice(REASON)
        # It keeps watching: a TRUE that reverts is said, though the stop stands.

    def _reverted(self) -> None:
        assert self.seen_at is not None
        self.reverted_at = time.time()
        log.warning(
            "%s read FALSE again at %s on %s, %.2f s after the TRUE read at %s: the "
            "notice stands, this attempt still acts on it",
            REASON,
            utc(self.reverted_at),
            self.host,
            self.reverted_at - self.seen_at,
            utc(self.seen_at),
        )


def watch(on_notice: Callable[[str], None]) -> Watcher:
    """Starts a :class:`Watcher` of this VM's metadata server."""
    return Watcher(on_notice).start()
