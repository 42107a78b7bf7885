"""Pods a broken gang leaves running: deleted so that the gang can re-form.

Every MWMS worker ends within seconds of a peer's end, so a pod still running long
after a peer beside it failed is frozen or hung (``status.left_in_broken_gang``).
Left alone it would never end (a frozen container ignores SIGTERM), and it keeps its
index: with a ``podFailurePolicy`` the Job controller replaces only pods whose phase
is ``Failed`` (``onlyReplaceFailedPods``, ``isPodFailed`` in kubernetes
``pkg/controller/job/job_controller.go``; ``firstPendingIndexes`` in
``indexed_job_utils.go`` skips an index whose pod is still running or terminating),
so the other indexes' replacements wait in MWMS start-up for a peer that never
answers, fail, and use up the Job's retries.

A pod whose node stopped answering (a frozen VM) stays Terminating with phase
``Running`` after any delete, a forced one included: the Job's tracking finalizer
keeps the object, and only the kubelet or PodGC sets ``Failed`` -- PodGC only once
the node carries the ``node.kubernetes.io/out-of-service`` taint (``gcTerminating``)
or its Node object is gone (``gcOrphaned``), in ``pkg/controller/podgc/gc_controller.go``
(read at release-1.29; the Job controller at a later commit, 6ae037f1). Tainting or
deleting nodes is beyond the launcher's RBAC, so it names the node and the fix once;
otherwise the Job's retries run out and the launcher moves to on-demand.
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
    """Deletes a broken gang's stuck pods; names the node of one that cannot go."""

    def __init__(self, kube, bound_seconds: float = BROKEN_GANG_SECONDS):
        self.kube = kube
        self.bound = bound_seconds
        self.deleted: dict[str, datetime] = {}  # uid -> when the graceful delete was sent
        self.named: set[str] = set()  # stuck on a node that does not answer: said once

    def sweep(self, pods: list[dict], now: datetime) -> list[str]:
        """One look at the gang's pods; returns the names of the pods deleted now.

        A graceful delete: the kubelet sends SIGTERM, SIGKILL after the grace period,
        and the pod fails (137, counted like the rest of a gang restart).
        """
        acted = []
        for pod, broken_for, peer in status.left_in_broken_gang(pods, now, self.deleted):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            uid = meta.get("uid") or meta["name"]
            if broken_for < self.bound or uid in self.named:
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
            grace = spec.get("terminationGracePeriodSeconds") or DEFAULT_GRACE_SECONDS
            waited = (now - self.deleted[uid]).total_seconds()
            node = spec.get("nodeName") or ""
            if waited >= grace + self.bound and not self._ready(node):
                log.warning(
                    "pod %s is still Terminating %.0f s after its delete: its node %s is "
                    "not Ready, and Kubernetes replaces the pod only once it is marked "
                    "Failed. Mark the node out of service (kubectl taint nodes %s "
                    "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute) or delete "
                    "it; otherwise this Job's retries run out",
                    meta["name"], waited, node, node,
                )  # fmt: skip
                self.named.add(uid)
        return acted

    def _ready(self, node: str) -> bool:
        """Whether ``node`` is Ready; unknown counts as ready."""
        if not node:
            return True
        try:
            found = self.kube.read_node(node)
        except kube_mod.KubeError:
            return True
        if found is None:
            return False  # the node object is gone
        for cond in (found.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Ready":
                return cond.get("status") == "True"  # "Unknown": it stopped reporting
        return True
