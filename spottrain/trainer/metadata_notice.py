"""The earliest preemption notice on GCE: the metadata server's ``instance/preempted``.

A Spot VM whose ``scheduling.preemptionNoticeDuration`` is set (Preview; 120 s) has
its metadata key ``instance/preempted`` turn ``TRUE`` that long before the ACPI
soft-off that becomes the pods' SIGTERM; without it the key turns with the shutdown
itself (https://cloud.google.com/compute/docs/instances/spot#preemption-process,
https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange).
:class:`Watcher` long-polls that key from a daemon thread and sets the trainer's
:class:`~spottrain.trainer.preemption.StopFlag` when it turns, which starts the same
save at the same step on every worker as a SIGTERM would; SIGTERM stays.

Off GCE there is no metadata server: the first request fails (its name does not
resolve, or nothing listens) and the watcher ends at once, silently. The step loop
only reads the flag, so a slow metadata server never delays a step. The host is
google-auth's ``GCE_METADATA_HOST`` when set (tests point it at a stand-in).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable

log = logging.getLogger(__name__)

HOST_ENV = "GCE_METADATA_HOST"  # google-auth's name for the metadata server's host
DEFAULT_HOST = "metadata.google.internal"
PATH = "/computeMetadata/v1/instance/preempted"
REASON = "GCE metadata instance/preempted"
# How long one wait may hang on the server's side (its ``timeout_sec``); the client
# waits a little longer. A failed request after the watcher once worked is retried.
WAIT_SECONDS = 300
RETRY_SECONDS = 5.0
RETRIES_BEFORE_GIVING_UP = 3


def url(host: str | None = None) -> str:
    """The key's URL on ``host`` (default: ``GCE_METADATA_HOST``, else GCE's name)."""
    return f"http://{host or os.environ.get(HOST_ENV) or DEFAULT_HOST}{PATH}"


class Watcher:
    """Sets ``on_notice`` once when the VM's ``instance/preempted`` turns ``TRUE``.

    Args:
        on_notice: Called with :data:`REASON` (the trainer's ``StopFlag.set``).
        base_url: The key's URL (:func:`url`).
    """

    def __init__(self, on_notice: Callable[[str], None], base_url: str | None = None):
        self.on_notice = on_notice
        self.base_url = base_url or url()
        self.stopped = threading.Event()
        self.noticed = False
        self.thread = threading.Thread(target=self._run, name="metadata-notice", daemon=True)

    def start(self) -> Watcher:
        """Starts watching in a daemon thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stops after the wait in progress (the thread is a daemon: nothing waits for it)."""
        self.stopped.set()

    def _get(self, query: str, timeout: float) -> tuple[str, str]:
        """The key's value and ETag; ``ValueError`` from a server that is not GCE's."""
        request = urllib.request.Request(
            f"{self.base_url}?{query}", headers={"Metadata-Flavor": "Google"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            # GCE's server says who it is; anything else answering the name is not it.
            if response.headers.get("Metadata-Flavor") != "Google":
                raise ValueError("the answer has no Metadata-Flavor: Google header")
            return response.read().decode().strip(), response.headers.get("ETag", "")

    def _run(self) -> None:
        etag, failures, worked = "", 0, False
        while not self.stopped.is_set():
            query = f"wait_for_change=true&timeout_sec={WAIT_SECONDS}"
            query += f"&last_etag={etag}" if etag else ""
            asked = time.monotonic()
            try:
                # The first read does not wait: a key already TRUE is a notice now.
                value, etag = self._get(query if worked else "", WAIT_SECONDS + 10)
            except (OSError, ValueError) as err:  # URLError and timeouts are OSErrors
                failures += 1
                if not worked or failures > RETRIES_BEFORE_GIVING_UP:
                    # Off GCE (or no metadata server for us): nothing to watch.
                    log.debug("no preemption notice from the metadata server: %s", err)
                    return
                self.stopped.wait(RETRY_SECONDS)
                continue
            if value.upper() == "TRUE":
                self.noticed = True
                log.warning("%s turned TRUE: saving at the next step boundary", REASON)
                self.on_notice(REASON)
                return
            if worked and time.monotonic() - asked < 1.0:
                self.stopped.wait(1.0)  # a server that does not wait is not polled hard
            worked, failures = True, 0


def watch(on_notice: Callable[[str], None]) -> Watcher:
    """Starts a :class:`Watcher` of this VM's metadata server."""
    return Watcher(on_notice).start()
