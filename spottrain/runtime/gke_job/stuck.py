"""Pods a broken gang leaves running: deleted so that the gang can re-form.

Every MWMS worker ends within seconds of a peer's end, so a pod still running long
after a peer beside it failed is frozen or hung (``status.left_in_broken_gang``).
Left alone it would never end (a frozen container ignores SIGTERM; a frozen node
never reports), and it keeps its index: under ``podReplacementPolicy: Failed`` the
Job controller creates no replacement for it, and the other indexes' replacements
wait in MWMS start-up for a peer that never answers, fail, and use up the Job's
retries.
"""

from __future__ import annotations

import logging
from datetime import datetime

from spottrain.runtime.gke_job import kube as kube_mod
from spottrain.runtime.gke_job import status

log = logging.getLogger(__name__)

# How long a pod may run on after a peer of its gang failed: live peers end within
# ~10 s (the coordination service's heartbeats) or one notice save.
BROKEN_GANG_SECONDS = 120.0
# The pod spec's default terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30


class StuckPods:
    """Deletes a broken gang's stuck pods, gracefully first, by force if their node is gone."""

    def __init__(self, kube, bound_seconds: float = BROKEN_GANG_SECONDS):
        self.kube = kube
        self.bound = bound_seconds
        self.deleted: dict[str, datetime] = {}  # uid -> when the graceful delete was sent
        self.forced: set[str] = set()

    def sweep(self, pods: list[dict], now: datetime) -> list[str]:
        """One look at the gang's pods; returns the names of the pods deleted now.

        A graceful delete first: the kubelet sends SIGTERM, SIGKILL after the grace
        period, and the pod fails (137, counted like the rest of a gang restart). A
        pod whose node does not answer (a frozen VM) stays Terminating until the
        node does; once its grace period and the same bound have passed with the
        node not Ready, it is force-deleted.
        """
        acted = []
        for pod, broken_for, peer in status.left_in_broken_gang(pods, now, self.deleted):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            uid = meta.get("uid") or meta["name"]
            if broken_for < self.bound or uid in self.forced:
                continue
            if uid not in self.deleted:
                log.warning(
                    "deleting pod %s: it still runs %.0f s after its peer %s failed "
                    "(frozen or hung), and its replacement needs its hostname",
                    meta["name"], broken_for, peer,
                )  # fmt: skip
                self.kube.delete_pod(meta["name"])
                self.deleted[uid] = now
                acted.append(meta["name"])
                continue
            grace = spec.get("terminationGracePeriodSeconds")
            waited = (now - self.deleted[uid]).total_seconds()
            node = spec.get("nodeName") or ""
            if waited >= (grace or DEFAULT_GRACE_SECONDS) + self.bound and not self._ready(node):
                log.warning(
                    "force-deleting pod %s: Terminating for %.0f s on node %s, which is "
                    "not Ready",
                    meta["name"], waited, node,
                )  # fmt: skip
                self.kube.delete_pod(meta["name"], grace_seconds=0)
                self.forced.add(uid)
                acted.append(meta["name"])
        return acted

    def _ready(self, node: str) -> bool:
        """Whether ``node`` is Ready; unknown counts as ready (never force blind)."""
        if not node:
            return True
        try:
            found = self.kube.read_node(node)
        except kube_mod.KubeError:
            return True
        if found is None:
            return False  # the node object is gone
        ready = status.condition(found, "Ready")
        return ready is None or ready.get("status") == "True"
