"""Streams the chief's log into the launcher's own log (the KFP task log).

One daemon thread per chief pod: a gang restart brings a new chief pod, whose log
is followed from its start. The kubernetes client's ``watch.Watch`` can also stream
a log, but it would re-read it from the start after a reconnect; one follow per
pod is what a task log wants.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spottrain.runtime.train_job import names, status

log = logging.getLogger(__name__)
_LOGGABLE = ("Running", "Succeeded", "Failed")


class ChiefLog:
    """Follows the newest chief (index 0) pod of a gang."""

    def __init__(self, kube, sink: Callable[[str], None] = print):
        self.kube = kube
        self.sink = sink
        self.followed: set[str] = set()
        self.threads: list[threading.Thread] = []

    def update(self, pods: list[dict]) -> None:
        """Starts following a chief pod that has started and is not followed yet."""
        chiefs = [
            p
            for p in pods
            if status.pod_index(p) == 0 and (p.get("status") or {}).get("phase") in _LOGGABLE
        ]
        for pod in chiefs:
            meta = pod["metadata"]
            uid = meta.get("uid") or meta["name"]
            if uid in self.followed:
                continue
            self.followed.add(uid)
            thread = threading.Thread(
                target=self._follow, args=(meta["name"],), name=f"log-{meta['name']}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def _follow(self, pod: str) -> None:
        try:
            for line in self.kube.follow_log(pod, names.CONTAINER):
                self.sink(f"[{pod}] {line}")
        except Exception as err:  # noqa: BLE001 - a lost log stream must not stop training
            log.warning("stopped following the log of %s: %s", pod, err)

    def join(self, timeout: float = 5.0) -> None:
        """Waits a little for the streams to drain (they end with their containers)."""
        for thread in self.threads:
            thread.join(timeout)
