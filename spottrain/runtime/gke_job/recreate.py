"""When to recreate a gang's Job instead of waiting for the Job controller's back-off.

The Job controller delays the pods that replace failed ones by 10 s x 2^(n-1), capped at
10 min, where n counts *every* pod failure since the Job's last successful pod, those
its ``podFailurePolicy`` ignores included (k8s.io/kubernetes v1.34.3
``pkg/controller/job/backoff_utils.go:121`` adds each new failed pod to
``failuresAfterLastSuccess``, ``:258-280`` the delay; ``job_controller.go:70-72`` the 10 s
and 10 min; ``:927`` builds the record from all new failed pods, ``:1722`` applies it).
A training gang has no successful pod before its end, so on a spot pool preempted
often every gang restart waits longer, up to 10 minutes of idle GPUs each time
(``tests/test_gke_job_backoff_real_kube.py``; 10, 20, 40 and 80 s measured). The controller
has no knob for it: ``backoffLimitPerIndex`` counts ignored failures too
(``indexed_job_utils.go:424-426`` ``getIndexAbsoluteFailureCount``), and the record is
kept per Job *name* until the Job is deleted (``job_controller.go:557``).

So once every pod of the gang has ended (nothing trains, nothing can write the
checkpoint dir) and the controller's wait is long, the launcher deletes the Job and
creates it again under the same name: the new Job starts its pods at once. It knows
the wait is long from the failed pods it saw (40 s or more), or, since a pod the API
deleted (eviction, taint eviction, preemption) can leave the API between two of its
looks, from 30 s without any running pod (``IdleGangs``). What the
old Job had used up is carried over, so a recreation never buys more retries or
more time: ``backoffLimit`` minus the failures it counted, and ``activeDeadlineSeconds``
minus the time it ran. Before deleting, the launcher writes those into an annotation
on the Job, so that a launcher restarted between the delete and the create recreates
the Job with them, where a Job someone else deleted is not brought back.
"""

from __future__ import annotations

import json
from datetime import datetime

from spottrain.runtime.gke_job import status

# The Job controller's constants (job_controller.go:70-72).
BACKOFF_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 600.0
# Recreate when the controller would wait at least this long: deleting and creating a
# Job takes a few seconds, and the first waits (10 s, 20 s) are left to the controller.
RECREATE_FROM_SECONDS = 30.0
# The finalizer the Job controller keeps on a pod until it has counted it
# (pkg/apis/batch/types.go:39).
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# On the Job being deleted for a recreation: the carried budget (JSON).
ANNOTATION = "spottrain.dev/recreate-with"
# On a recreated Job: how many times the gang's Job was recreated.
COUNT_ANNOTATION = "spottrain.dev/recreations"


def controller_delay(failures: int) -> float:
    """The controller's wait after ``failures`` pod failures (backoff_utils.go:262-272)."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_SECONDS * 2 ** (failures - 1), BACKOFF_CAP_SECONDS)


def finished(pod: dict) -> datetime | None:
    """When a pod ended, as ``getFinishedTime`` reads it (backoff_utils.go:174-186)."""
    term = status.terminated(pod) or {}
    moment = status.parse_time(term.get("finishedAt"))
    if moment is None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "False":
                moment = status.parse_time(cond.get("lastTransitionTime"))
    return moment or status.parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))


def counted(job: dict, pods: list[dict]) -> bool:
    """Whether the controller has counted every ended pod in the Job's status.

    It lists a finished pod in ``status.uncountedTerminatedPods``, removes the pod's
    tracking finalizer, then moves it to ``status.failed``/``succeeded``
    (job_controller.go:1190-1194); until then ``status.failed`` is short.
    """
    uncounted = (job.get("status") or {}).get("uncountedTerminatedPods") or {}
    if uncounted.get("failed") or uncounted.get("succeeded"):
        return False
    return not any(TRACKING_FINALIZER in (p["metadata"].get("finalizers") or []) for p in pods)


def _owner(pod: dict) -> str:
    """The uid of the Job that owns ``pod`` (``""`` when it names none)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return ref.get("uid") or ""
    return ""


class IdleGangs:
    """What the launcher's looks show of each Job (by uid).

    Its ended pods, whether a pod of it ran, and since when none runs.

    A pod the API deleted (a drain's eviction, the taint-eviction controller, the
    scheduler's preemption) vanishes within a second of being counted, often between
    two looks, yet its failure stays in the controller's back-off. So the count of
    failed pods seen can fall short; a gang whose Job had running pods and has none
    for ``RECREATE_FROM_SECONDS`` is then idle in that back-off all the same (the
    controller's 10 s and 20 s waits end sooner; pods waiting for a node are live).
    """

    def __init__(self) -> None:
        self._ended: dict[str, dict[str, tuple[str, datetime]]] = {}
        self._ran: set[str] = set()
        self._idle_since: dict[str, datetime] = {}

    def _failed(self, uid: str) -> list[datetime]:
        ended = self._ended.get(uid, {}).values()
        last_success = max((t for phase, t in ended if phase == "Succeeded"), default=None)
        return [
            t for phase, t in ended
            if phase == "Failed" and (last_success is None or t > last_success)
        ]  # fmt: skip

    def look(self, job: dict, pods: list[dict], now: datetime, poll_seconds: float) -> str | None:
        """Records this look; returns why recreating the Job now beats waiting, or None.

        None while a pod of the Job has not ended (it may still write checkpoints) or
        until the controller has counted the ended ones (``counted``).
        """
        uid = (job.get("metadata") or {}).get("uid") or ""
        for pod in pods:
            moment = finished(pod) if status.is_done(pod) else None
            if moment is not None:
                key = pod["metadata"].get("uid") or pod["metadata"]["name"]
                self._ended.setdefault(_owner(pod), {})[key] = (pod["status"]["phase"], moment)
        if status.condition(job, "FailureTarget") or status.condition(job, "SuccessCriteriaMet"):
            return None  # ending (a fatal exit, or done): the controller finishes it
        if any(not status.is_done(p) for p in pods):
            self._ran.add(uid)
            self._idle_since.pop(uid, None)
            return None
        if uid not in self._ran or not counted(job, pods):
            return None
        idle = (now - self._idle_since.setdefault(uid, now)).total_seconds()
        failed = self._failed(uid)
        if failed:
            delay = controller_delay(len(failed))
            left = delay - (now - max(failed)).total_seconds()
            # Within a poll of its end the controller starts them first: let it.
            if delay >= RECREATE_FROM_SECONDS and left > poll_seconds:
                return (
                    f"the Job controller would wait {left:.0f} s more before starting new "
                    f"pods ({delay:.0f} s after {len(failed)} failed pods, preemptions "
                    "included)"
                )
        if idle >= RECREATE_FROM_SECONDS:
            return (
                f"no pod of it has run for {idle:.0f} s: the Job controller's replacement "
                "back-off (pods deleted by an eviction or a preemption leave the API "
                "before the launcher can count them)"
            )
        return None


def carried(job: dict, now: datetime) -> dict | None:
    """What a recreated Job may still use, or ``None`` when the old one had nothing left.

    ``backoffLimit`` less the failures the old Job counted (``status.failed``: the
    ignored ones are not in it), ``activeDeadlineSeconds`` less the time since its
    ``startTime``, and the recreation count.
    """
    spec, st = job.get("spec") or {}, job.get("status") or {}
    meta = job.get("metadata") or {}
    left = int(spec.get("backoffLimit", 6)) - int(st.get("failed") or 0)
    if left < 0:
        return None
    out = {"backoffLimit": left}
    deadline = spec.get("activeDeadlineSeconds")
    started = status.parse_time(st.get("startTime"))
    if deadline is not None:
        ran = (now - started).total_seconds() if started else 0.0
        out["activeDeadlineSeconds"] = int(deadline - ran)
        if out["activeDeadlineSeconds"] < 1:
            return None
    count = int(((meta.get("annotations") or {}).get(COUNT_ANNOTATION)) or 0)
    out["recreations"] = count + 1
    return out


def marked(job: dict | None) -> dict | None:
    """The carried budget of a Job the launcher is deleting to recreate, else ``None``."""
    if not status.being_deleted(job):
        return None
    text = ((job["metadata"].get("annotations")) or {}).get(ANNOTATION)
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and "backoffLimit" in value else None
