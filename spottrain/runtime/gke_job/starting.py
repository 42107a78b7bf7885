"""How long a gang's pods have waited to start: a start failure, no pod, or no node."""

from __future__ import annotations

from datetime import datetime

from spottrain.runtime.gke_job import status

# How long a pod may wait with a start failure (an image that does not pull, a
# missing Secret), or a Job may have no pod at all (a missing service account or a
# webhook refusing them), before the run stops: long enough for a registry or
# API hiccup to pass, far shorter than the run deadline the Job would otherwise wait for.
START_FAILURE_SECONDS = 180.0
_FIX = "fix it and run again (the checkpoints are kept)"


class StartWatch:
    """Remembers when each wait was first seen, across the launcher's polls.

    Args:
        start_failure_seconds: How long a start failure (or a Job without pods) may last.
    """

    def __init__(self, start_failure_seconds: float = START_FAILURE_SECONDS):
        self.start_failure_seconds = start_failure_seconds
        # When each pod's start failure (and each Job's want of pods) was first seen.
        self._failing_since: dict[str, datetime] = {}
        self._had_pods: set[str] = set()
        self._pending_since: dict[str, datetime] = {}

    def cannot_start(self, job: str, pods: list[dict], now: datetime) -> str | None:
        """The one-line reason to end the run (fatal) when the pods cannot start.

        Neither is ``Unschedulable``, so without this the launcher would wait for
        the run deadline (days) while the GPU node it got is held.
        """
        for pod in pods:
            failure = status.start_failure(pod)
            uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
            if failure is None:
                self._failing_since.pop(uid, None)
                continue
            reason, message, final = failure
            since = self._failing_since.setdefault(uid, now)
            waited = (now - since).total_seconds()
            if final or waited >= self.start_failure_seconds:
                detail = " ".join(message.split())[:300]
                return (
                    f"Job {job}: pod {pod['metadata']['name']} cannot start: {reason}"
                    + (f" ({detail})" if detail else "")
                    + ("" if final else f" for {waited:.0f} s")
                    + f"; {_FIX}"
                )
        if pods or job in self._had_pods:
            # Once pods came, none for a while is a replacement's back-off (pods of a
            # lost node are garbage-collected) or a recreation, not a refusal.
            self._had_pods.add(job)
            return None
        since = self._failing_since.setdefault(job, now)
        waited = (now - since).total_seconds()
        if waited < self.start_failure_seconds:
            return None
        return (
            f"Job {job} created no pod in {waited:.0f} s: its pods are refused (a "
            "missing service account, a quota, an admission webhook); `kubectl describe "
            f"job {job}` shows why; {_FIX}"
        )

    def unschedulable_for(self, pods: list[dict], now: datetime) -> float | None:
        """Seconds the longest-waiting unplaced pod has waited (``None``: none waits)."""
        waits = []
        for pod in pods:
            if status.is_done(pod):
                continue
            since = status.unschedulable_since(pod)
            uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
            if since is None:
                self._pending_since.pop(uid, None)
                continue
            # Without lastTransitionTime, count from when the launcher first saw it.
            first = self._pending_since.setdefault(uid, since or now)
            waits.append((now - first).total_seconds())
        return max(waits) if waits else None
