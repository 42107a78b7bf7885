"""A gang queued in Kueue: what the launcher reads of its Workload, and decides (tables).

The Workloads here are shaped as Kueue v0.17.0 writes them (kueue.x-k8s.io/v1beta2;
apis/kueue/v1beta2/workload_types.go:928-1094 for the conditions and reasons).
"""

from __future__ import annotations

import pytest
from decide_rows import row

from spottrain import exits
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import observe as o
from spottrain.runtime.train_job import queue as q

T0 = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"  # T0


def cond(kind: str, status: str, reason: str, message: str = "", at: str = STAMP) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at}  # fmt: skip


def workload(*conditions, admission: dict | None = None) -> dict:
    status = {"conditions": list(conditions)}
    if admission:
        status["admission"] = admission
    return {"metadata": {"name": "jobset-st-a1b2c", "creationTimestamp": STAMP}, "status": status}


def counted(wl: dict, *evictions: tuple[str, str, int]) -> dict:
    """``wl`` with Kueue's eviction counts (status.schedulingStats, workload_types.go:728-760)."""
    stats = [{"reason": r, "underlyingCause": c, "count": n} for r, c, n in evictions]
    return {**wl, "status": {**wl["status"], "schedulingStats": {"evictions": stats}}}


JOBSET = {"metadata": {"name": "st", "creationTimestamp": STAMP}}
LQ = {"status": {"pendingWorkloads": 3}}
PENDING = cond("QuotaReserved", "False", "Pending",
               "couldn't assign flavors to pod set workers: insufficient unused quota for "
               "nvidia.com/gpu in flavor spot, 2 more needed")  # fmt: skip
ADMITTED = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond("Evicted", "False", "QuotaReserved"),
    admission={"clusterQueue": "cq", "podSetAssignments": [
        {"name": "workers", "flavors": {"nvidia.com/gpu": "spot", "cpu": "spot"}, "count": 2}
    ]},
)  # fmt: skip
EVICTED = workload(
    cond("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload", STAMP),
    cond("Admitted", "False", "NoReservation"),
    cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: u) due to "
         "prioritization in the ClusterQueue"),
    cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload"),
)  # fmt: skip


READ = [
    # (workload, local queue, seconds after T0, what the launcher reads)
    (None, None, 30, q.Queued(waiting_seconds=30, no_workload=True)),
    (workload(PENDING), LQ, 90,
     q.Queued(waiting_seconds=90, pending=3, says=PENDING["message"])),
    (workload(cond("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set "
                   "workers: insufficient quota for nvidia.com/gpu in flavor spot, previously "
                   "considered podsets requests (0) + current podset request (2) > maximum "
                   "capacity (1)")), None, 0,
     q.Queued(says="couldn't assign flavors to pod set workers: insufficient quota for "
              "nvidia.com/gpu in flavor spot, previously considered podsets requests (0) + "
              "current podset request (2) > maximum capacity (1)", never_fits=True)),
    (ADMITTED, LQ, 90, q.Queued(admitted=True, pending=3, flavors="cpu=spot, nvidia.com/gpu=spot")),
    (EVICTED, None, 5, q.Queued(
        waiting_seconds=5, says="Preempted to accommodate a workload",
        evicted="Preempted (InClusterQueue): Preempted to accommodate a workload (UID: u) due to "
        "prioritization in the ClusterQueue", evicted_reason="Preempted")),
    (workload(cond("Evicted", "True", "DeactivatedDueToRequeuingLimitExceeded", "limit")), None, 0,
     q.Queued(evicted="DeactivatedDueToRequeuingLimitExceeded: limit",
              evicted_reason="Deactivated")),
    # Kueue's count of evictions, by reason over every cause: what no look saw is counted.
    (counted(ADMITTED, ("Preempted", "", 2), ("LocalQueueStopped", "", 1)), None, 0,
     q.Queued(admitted=True, flavors="cpu=spot, nvidia.com/gpu=spot",
              evictions=(("LocalQueueStopped", 1), ("Preempted", 2)))),
    (counted(EVICTED, ("Preempted", "", 3), ("PodsReadyTimeout", "x", 0)), None, 5, q.Queued(
        waiting_seconds=5, says="Preempted to accommodate a workload",
        evicted="Preempted (InClusterQueue): Preempted to accommodate a workload (UID: u) due to "
        "prioritization in the ClusterQueue", evicted_reason="Preempted",
        evictions=(("Preempted", 3),))),
    (counted(workload(cond("Admitted", "True", "Admitted")), ("Deactivated", "A", 1),
             ("Deactivated", "B", 2)), None, 0,
     q.Queued(admitted=True, evictions=(("Deactivated", 3),))),
    (workload(cond("Admitted", "True", "Admitted"),
              cond("Finished", "True", "FailedToStart", "conflict for nodeSelector")), None, 0,
     q.Queued(admitted=True, ended="FailedToStart: conflict for nodeSelector")),
]  # fmt: skip


@pytest.mark.parametrize("wl, lq, after, expected", READ)
def test_what_the_launcher_reads_of_kueue(wl, lq, after, expected):
    assert q.queued(JOBSET, wl, lq, T0 + after) == expected


def test_observe_reads_kueue_only_of_a_queued_jobset():
    labels = {"spottrain.dev/task": "t"}
    plain = {**JOBSET, "metadata": {**JOBSET["metadata"], "labels": labels}}
    seen = o.observe(plain, [], now=T0 + 9, ours=labels, workload=ADMITTED)
    assert (seen.queue, seen.queued) == ("", None)
    queued = {**plain, "metadata": {**plain["metadata"],
              "labels": {**labels, "kueue.x-k8s.io/queue-name": "team-a"}}}  # fmt: skip
    seen = o.observe(queued, [], now=T0 + 9, ours=labels, workload=EVICTED)
    assert seen.state == "running" and seen.queue == "team-a" and seen.queued.evicted


def waiting(**kw) -> q.Queued:
    return q.Queued(**kw)


def queued_row(queued: q.Queued, **kw):
    return row("running", queue="team-a", queued=queued, suspended=not queued.admitted, **kw)


TABLE = [
    # (observed, action kind, exit code, a word of the line)
    # Waiting: said once, with what Kueue says and how many wait, then waited.
    (queued_row(waiting(waiting_seconds=5, pending=3, says="insufficient quota")), d.REPORT, None,
     "waiting for admission in queue team-a: 3 workload(s) waiting in it; Kueue: insufficient"),
    (queued_row(waiting(waiting_seconds=5), queued_said=True), d.WAIT, None, ""),
    # Kueue's reason comes a moment after the Workload: the line waits for it, a while.
    (queued_row(waiting(waiting_seconds=5, pending=1)), d.WAIT, None, ""),
    (queued_row(waiting(waiting_seconds=d.QUEUE_REASON_WAIT, pending=1)), d.REPORT, None,
     "waiting for admission in queue team-a: 1 workload(s) waiting in it"),
    # A suspended, queued JobSet is never read as lost capacity nor resumed by us.
    (queued_row(waiting(waiting_seconds=4000), capacity_deadline=60, queued_said=True), d.WAIT,
     None, ""),
    (queued_row(waiting(waiting_seconds=4000), moved=True, queued_said=True), d.WAIT, None, ""),
    # The admission deadline: retryable, the JobSet deleted.
    (queued_row(waiting(waiting_seconds=7200, says="no quota"), admission_deadline=7200),
     d.DELETE_AND_EXIT, exits.UNAVAILABLE, "not admitted by queue team-a in 7200 s"),
    # Admitted after a wait: said once, naming the flavor.
    (queued_row(waiting(admitted=True, flavors="nvidia.com/gpu=spot"), queued_said=True),
     d.REPORT, None, "admitted by queue team-a on nvidia.com/gpu=spot"),
    (queued_row(waiting(admitted=True)), d.WAIT, None, ""),
    # Evicted (Kueue's preemption): a free restart, said once with Kueue's reason.
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x")), d.REPORT, None,
     "evicted by Kueue (Preempted (InClusterQueue): x)"),
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x"), evicted_said=True), d.WAIT,
     None, ""),
    # Never admitted again, or never startable: the run ends, one line.
    (queued_row(waiting(evicted="DeactivatedDueToRequeuingLimitExceeded: x")),
     d.DELETE_AND_EXIT, exits.UNAVAILABLE, "will not admit it again"),
    (queued_row(waiting(admitted=True, ended="FailedToStart: conflict")), d.DELETE_AND_EXIT,
     exits.FATAL_CONFIG, "FailedToStart"),
    # No Workload: Kueue does not manage the JobSet; said after a minute.
    (queued_row(waiting(waiting_seconds=30, no_workload=True)), d.REPORT, None, "waiting for"),
    (queued_row(waiting(waiting_seconds=3, no_workload=True)), d.WAIT, None, ""),
    (queued_row(waiting(waiting_seconds=61, no_workload=True)), d.REPORT, None,
     "no Workload for the JobSet"),
    # A gang larger than the queue's whole quota: one line, fatal, nothing started.
    (queued_row(waiting(waiting_seconds=1, says="insufficient quota for nvidia.com/gpu in "
                        "flavor spot, previously considered podsets requests (0) + current "
                        "podset request (2) > maximum capacity (1)", never_fits=True)),
     d.DELETE_AND_EXIT, exits.FATAL_CONFIG, "can never admit the whole gang"),
    # Evicted and readmitted between two looks (issue 57): no look saw Evicted, Kueue's
    # count says it; one line per batch, by reason, each eviction said once.
    (queued_row(waiting(admitted=True, evictions=(("Preempted", 1),))), d.REPORT, None,
     "Kueue evicted the gang 1 time(s) between two looks (Preempted) and readmitted it"),
    (queued_row(waiting(admitted=True, evictions=(("Preempted", 3),)),
                evictions_said=(("Preempted", 1),)), d.REPORT, None,
     "2 time(s) between two looks (Preempted ×2) and readmitted it"),
    (queued_row(waiting(admitted=True, evictions=(("LocalQueueStopped", 1), ("Preempted", 2)))),
     d.REPORT, None, "3 time(s) between two looks (LocalQueueStopped, Preempted ×2)"),
    (queued_row(waiting(admitted=True, evictions=(("Preempted", 3),)),
                evictions_said=(("Preempted", 3),)), d.WAIT, None, ""),
    # The eviction a look sees has its own line; only the ones before it are said here.
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x", evicted_reason="Preempted",
                        evictions=(("Preempted", 1),))), d.REPORT, None, "evicted by Kueue ("),
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x", evicted_reason="Preempted",
                        evictions=(("Preempted", 2),))), d.REPORT, None,
     "1 time(s) between two looks (Preempted) and it waits again in queue team-a"),
    # Said evicted, readmitted and evicted again before the next look: that one is new.
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x", evicted_reason="Preempted",
                        evictions=(("Preempted", 2),)), evicted_said=True,
                evictions_said=(("Preempted", 1),)), d.REPORT, None,
     "1 time(s) between two looks (Preempted) and it waits again"),
    (queued_row(waiting(evicted="Preempted (InClusterQueue): x", evicted_reason="Preempted",
                        evictions=(("Preempted", 2),)), evicted_said=True,
                evictions_said=(("Preempted", 2),)), d.WAIT, None, ""),
    # What comes first still does.
    (queued_row(waiting(admitted=True, evictions=(("Preempted", 1),)), sigterm=True),
     d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (row("completed", queue="team-a", queued=waiting(admitted=True, evictions=(("Preempted", 1),))),
     d.EXIT, 0, "Completed"),
    (queued_row(waiting(admitted=True, ended="FailedToStart: x", evictions=(("Preempted", 1),))),
     d.DELETE_AND_EXIT, exits.FATAL_CONFIG, "FailedToStart"),
    (queued_row(waiting(waiting_seconds=5), sigterm=True), d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (row("completed", queue="team-a", queued=waiting(admitted=True)), d.EXIT, 0, "Completed"),
    (queued_row(waiting(waiting_seconds=5), age_seconds=100, deadline=50), d.DELETE_AND_EXIT, 64,
     "deadline"),
]  # fmt: skip


@pytest.mark.parametrize("observed, kind, code, word", TABLE)
def test_decide_for_a_queued_gang(observed, kind, code, word):
    action = d.decide(*observed)
    assert (action.kind, action.code) == (kind, code), action
    assert word in action.line, action.line


def test_admission_forgets_the_wait_so_a_later_eviction_is_said_again():
    seen, memory, settings = queued_row(waiting(admitted=True), queued_said=True, evicted_said=True)
    action = d.decide(seen, memory, settings)
    assert action.said == d.SAID_ADMITTED
    after = memory.after(action, seen)
    assert not after.said & d.QUEUE_SAID
    evicted, _, _ = queued_row(waiting(evicted="Preempted (InClusterQueue): x"))
    assert d.decide(evicted, after, settings).said == d.SAID_EVICTED


def test_each_eviction_kueue_counts_is_said_once_seen_or_not():
    """A look sees the gang evicted while Kueue has counted one more before it: the one
    before is said first, then the one under way, then its readmission; nothing twice."""
    evicted = waiting(evicted="Preempted (InClusterQueue): x", evicted_reason="Preempted",
                      evictions=(("Preempted", 2),))  # fmt: skip
    seen, memory, settings = queued_row(evicted)
    lines = []
    for _ in range(3):
        action = d.decide(seen, memory, settings)
        lines.append(action.line)
        memory = memory.after(action, seen)
    assert "1 time(s) between two looks" in lines[0] and "evicted by Kueue (" in lines[1]
    assert lines[2] == "" and memory.evictions_said == (("Preempted", 2),)
    readmitted, _, _ = queued_row(waiting(admitted=True, evictions=(("Preempted", 2),)))
    action = d.decide(readmitted, memory, settings)
    assert action.said == d.SAID_ADMITTED
    memory = memory.after(action, readmitted)
    assert d.decide(readmitted, memory, settings).kind == d.WAIT


def test_the_evictions_said_are_kept_on_the_jobset_for_a_launcher_started_again():
    said = (("LocalQueueStopped", 1), ("Preempted", 12))
    value = o.evictions_annotation(said)
    jobset = {"metadata": {"annotations": {o.EVICTIONS_SAID_ANNOTATION: value}}}
    assert o.evictions_said(jobset) == said
    assert o.evictions_said({"metadata": {}}) == ()
    bad = {"metadata": {"annotations": {o.EVICTIONS_SAID_ANNOTATION: "x=,=3,Preempted=-1"}}}
    assert o.evictions_said(bad) == ()
