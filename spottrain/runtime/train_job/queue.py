"""What Kueue says of a queued gang, from its Workload and LocalQueue (pure; no I/O).

Kueue (sigs.k8s.io/kueue v0.17.0, ``kueue.x-k8s.io/v1beta2``) keeps one Workload per
queued JobSet, labelled with the JobSet's uid (``kueue.x-k8s.io/job-uid``,
pkg/controller/constants/constants.go:34; set at
pkg/controller/jobframework/reconciler.go:1388-1391).
It admits the whole gang by resuming the JobSet, and evicts it by suspending it
again (reconciler.go:579-619): JobSet suspends its child Jobs, whose pods are deleted
and hear SIGTERM, the notice our trainer saves on. The Workload's conditions say
which (apis/kueue/v1beta2/workload_types.go:928-1094): ``Admitted``; ``QuotaReserved``
False, reason ``Pending``, whose message says why it waits; ``Evicted`` with
its reason (``Preempted``, ``PodsReadyTimeout``, ``AdmissionCheck``, ...) and
``Preempted`` with the preemptor's (``InClusterQueue``, ``InCohortReclamation``, ...),
both set False again when it next reserves quota (pkg/workload/workload.go:863-867);
``Finished`` (``FailedToStart``: Kueue could not merge its flavor into the pods).
A Workload carries no position in its queue (only the visibility API, an aggregated
API, does); the LocalQueue's ``status.pendingWorkloads`` counts the queue's waiting
workloads, this one among them.

An eviction readmitted between two looks leaves ``Evicted`` False again, so the
conditions alone miss it. Kueue also counts every eviction of the Workload, by reason
and underlying cause, in ``status.schedulingStats.evictions``
(apis/kueue/v1beta2/workload_types.go:681-684, 728-760), raised in the same status
patch that sets ``Evicted`` (``workload.Evict``, pkg/workload/workload.go:1599-1610;
``workloadEvictionStateInc``, :1750-1762) and never lowered: the launcher compares it
with what it has said (:func:`unsaid`). ``status.requeueState`` counts only
``PodsReadyTimeout`` requeues (``UpdateRequeueState``, workload.go:725-730, called from
pkg/controller/core/workload_controller.go:977-978), not preemptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spottrain.runtime.train_job import status

API_GROUP, API_VERSION = "kueue.x-k8s.io", "v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# A Kueue-deactivated Workload is never admitted again (workload.go:1605-1607).
DEACTIVATED = "Deactivated"
# What Kueue says of a request larger than all the quota the ClusterQueue could ever
# use, borrowing included (pkg/scheduler/flavorassigner/flavorassigner.go:1036-1041).
NEVER_FITS = "> maximum capacity ("


@dataclass(frozen=True)
class Queued:
    """A queued gang as Kueue has it now.

    Attributes:
        admitted: The Workload's ``Admitted`` condition is True.
        waiting_seconds: Since it last began to wait for admission (its quota
            released, or its creation; the JobSet's with no Workload yet).
        pending: The LocalQueue's waiting workloads (None: unknown).
        says: Why Kueue does not admit it (``QuotaReserved``'s message).
        evicted: Why Kueue took the gang back, while it waits again (``""``: it did not).
        flavors: The ResourceFlavors it was admitted on, ``"gpu=spot"``-like.
        ended: Kueue finished the Workload before the JobSet ended (the reason and message).
        no_workload: Kueue has made no Workload for the JobSet (yet).
        never_fits: Kueue says the gang needs more than the queue's whole quota.
        evictions: Kueue's count of the Workload's evictions, by reason (:func:`evictions`).
        evicted_reason: The reason of the eviction it waits after now, as counted
            (``""``: it does not wait after one).
    """

    admitted: bool = False
    waiting_seconds: float = 0.0
    pending: int | None = None
    says: str = ""
    evicted: str = ""
    flavors: str = ""
    ended: str = ""
    no_workload: bool = False
    never_fits: bool = False
    evictions: tuple[tuple[str, int], ...] = field(default=())
    evicted_reason: str = ""


def _condition(obj: Mapping, kind: str) -> Mapping | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def _true(obj: Mapping, kind: str) -> Mapping | None:
    cond = _condition(obj, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def flavors_of(workload: Mapping) -> str:
    """``resource=flavor`` of every pod set's admission, e.g. ``nvidia.com/gpu=spot``."""
    admission = (workload.get("status") or {}).get("admission") or {}
    pairs = {
        f"{resource}={flavor}"
        for assignment in admission.get("podSetAssignments") or []
        for resource, flavor in (assignment.get("flavors") or {}).items()
    }
    return ", ".join(sorted(pairs))


def eviction(workload: Mapping) -> str:
    """``"<Evicted reason> (<Preempted reason>): <message>"`` of an evicted Workload."""
    evicted = _true(workload, "Evicted")
    if evicted is None:
        return ""
    reason = evicted.get("reason") or "Evicted"
    preempted = _true(workload, "Preempted")
    if preempted is not None and preempted.get("reason"):
        reason += f" ({preempted['reason']})"
    message = " ".join(str(evicted.get("message") or "").split())
    return f"{reason}: {message}" if message else reason


def evictions(workload: Mapping | None) -> tuple[tuple[str, int], ...]:
    """The Workload's evictions by reason, ``(("Preempted", 3),)``, summed over causes."""
    stats = ((workload or {}).get("status") or {}).get("schedulingStats") or {}
    counts: dict[str, int] = {}
    for entry in stats.get("evictions") or []:
        reason = str(entry.get("reason") or "Evicted")
        counts[reason] = counts.get(reason, 0) + max(0, int(entry.get("count") or 0))
    return tuple(sorted((r, n) for r, n in counts.items() if n))


def more(counts: Mapping[str, int], than: Mapping[str, int]) -> dict[str, int]:
    """The evictions of ``counts`` that ``than`` does not hold, by reason."""
    return {r: n - than.get(r, 0) for r, n in counts.items() if n > than.get(r, 0)}


def unsaid(q: Queued, said: Mapping[str, int], now_said: bool) -> dict[str, int]:
    """Kueue's evictions of the gang no line has said yet, by reason.

    ``said``: the counts said; ``now_said``: the eviction the gang waits after now was
    said (its own line, :data:`decide.SAID_EVICTED`); when not, it is left to that line.
    """
    left = more(dict(q.evictions), said)
    if q.evicted_reason and not now_said and left.get(q.evicted_reason):
        left[q.evicted_reason] -= 1
    return {r: n for r, n in left.items() if n > 0}


def named(counts: Mapping[str, int]) -> str:
    """``"Preempted ×2, LocalQueueStopped"``: the reasons, each with its count above 1."""
    return ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in sorted(counts.items()))


def queued(
    jobset: Mapping, workload: Mapping | None, local_queue: Mapping | None, now: float
) -> Queued:
    """The gang of ``jobset`` as Kueue has it (``workload``: None when there is none yet)."""
    pending = ((local_queue or {}).get("status") or {}).get("pendingWorkloads")
    pending = int(pending) if pending is not None else None
    if workload is None:
        created = status.epoch((jobset.get("metadata") or {}).get("creationTimestamp")) or now
        return Queued(waiting_seconds=max(0.0, now - created), pending=pending, no_workload=True)
    finished = _true(workload, "Finished")
    ended = ""
    if finished is not None:
        ended = f"{finished.get('reason', 'Finished')}: {finished.get('message', '')}".strip(": ")
    counted = evictions(workload)
    if _true(workload, "Admitted") is not None:
        return Queued(
            admitted=True, pending=pending, flavors=flavors_of(workload), ended=ended,
            evictions=counted,
        )  # fmt: skip
    reserved = _condition(workload, "QuotaReserved")
    since = status.epoch((reserved or {}).get("lastTransitionTime")) or status.epoch(
        (workload.get("metadata") or {}).get("creationTimestamp")
    )
    says = ""
    if reserved is not None and reserved.get("status") == "False":
        says = " ".join(str(reserved.get("message") or "").split())
    return Queued(
        waiting_seconds=max(0.0, now - (since or now)),
        pending=pending,
        says=says,
        evicted=eviction(workload),
        ended=ended,
        never_fits=NEVER_FITS in says,
        evictions=counted,
        evicted_reason=_counted_as(str((_true(workload, "Evicted") or {}).get("reason") or "")),
    )


def _counted_as(reason: str) -> str:
    # Evicted's reason is the one counted, but Deactivated's, which names its cause
    # too (workload.go:1604-1609).
    return DEACTIVATED if reason.startswith(DEACTIVATED) else reason
