"""The recreation rule's edges (``spottrain.runtime.gke_job.recreate``), on Job and pod
objects in the API's JSON shape. The recreation itself, against the real Job
controller's back-off, is in tests/test_gke_job_backoff_real_kube.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from spottrain.runtime.gke_job import recreate

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


_uids = iter(range(10**6))


def pod(phase, ended_ago=None, finalizer=False, job_uid="job-1"):
    state = {"terminated": {"exitCode": 143, "finishedAt": stamp(ended_ago)}} if ended_ago else {}
    return {
        "metadata": {
            "name": f"pod-{next(_uids)}",
            "finalizers": [recreate.TRACKING_FINALIZER] if finalizer else [],
            "ownerReferences": [{"kind": "Job", "uid": job_uid}],
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def job(limit=4, failed=0, ran=100.0, deadline=3600, annotations=None, deleting=False):
    meta = {"name": "st-x", "uid": "job-1", "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = stamp(1)
    return {
        "metadata": meta,
        "spec": {"backoffLimit": limit, "activeDeadlineSeconds": deadline},
        "status": {"failed": failed, "startTime": stamp(ran)},
    }


@pytest.mark.parametrize(
    ("failures", "delay"), [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (40, 600)]
)
def test_the_controllers_delay_doubles_from_10_s_to_its_10_minute_cap(failures, delay):
    assert recreate.controller_delay(failures) == delay


def looks(j, *views, at=(), poll=1.0):
    """The launcher's looks at Job ``j``: each view is the pods listed then; ``at`` the
    seconds after NOW of each look (default: all at NOW). Returns the last answer."""
    idle = recreate.IdleGangs()
    answer = None
    for i, pods in enumerate(views):
        answer = idle.look(j, pods, NOW + timedelta(seconds=at[i] if at else 0), poll)
    return answer


RUNNING = [pod("Running")]


def test_a_long_controller_wait_is_skipped_and_a_short_one_left_to_it():
    three = [pod("Failed", 30), pod("Failed", 5), pod("Failed", 4)]
    why = looks(job(), RUNNING, three)
    assert why.startswith("the Job controller would wait 36 s more") and "3 failed pods" in why
    assert looks(job(), RUNNING, three[1:]) is None  # 20 s: the controller's
    # A success resets the count (backoff_utils.go newBackoffRecord).
    assert looks(job(), RUNNING, [three[0], pod("Succeeded", 10), *three[1:]]) is None
    # Nearly over (3 s left): it starts them within the next poll (10 s) anyway.
    nearly = [pod("Failed", 60), pod("Failed", 38), pod("Failed", 37)]
    assert looks(job(), RUNNING, nearly, poll=10) is None


def test_pods_deleted_and_gone_still_count_and_an_earlier_jobs_do_not():
    """A drain, the taint-eviction controller and the scheduler delete the pod: it is
    gone from the API once counted, and still in the controller's back-off."""
    gone = [pod("Failed", 40), pod("Failed", 20)]
    earlier_job = [pod("Failed", 30, job_uid="job-0") for _ in range(5)]
    assert "3 failed pods" in looks(job(), RUNNING, gone + earlier_job, [pod("Failed", 3)])
    assert looks(job(), RUNNING + earlier_job, [pod("Failed", 3)]) is None  # 1 of this Job's


def test_a_gang_idle_for_30_s_is_recreated_even_when_its_failures_were_not_seen():
    views = [RUNNING, [], [], []]  # the pods vanished between two looks
    assert looks(job(), *views, at=(0, 10, 30, 39)) is None  # idle 29 s
    assert "no pod of it has run for 30 s" in looks(job(), *views, at=(0, 10, 30, 40))
    assert looks(job(), [], [], at=(0, 60)) is None  # a new Job: no pod of it ran yet
    # Two of its three failures seen (20 s): past those 20 s the gang still waits.
    two = [RUNNING, [pod("Failed", -1), pod("Failed", -2)], [], [], []]
    assert looks(job(), *two, at=(0, 3, 10, 25, 32)) is None  # idle 29 s
    assert "no pod of it has run for 30 s" in looks(job(), *two, at=(0, 3, 10, 25, 33))
    # Pods waiting for a node are live: no recreation (the unschedulable rule applies).
    assert looks(job(), RUNNING, [pod("Pending")], [pod("Pending")], at=(0, 10, 60)) is None


def fresh_failures():
    """Three pods that failed 1-3 s after NOW: looked at 5 s after NOW, 38 s are left."""
    return [pod("Failed", -1), pod("Failed", -2), pod("Failed", -3)]


def test_fresh_failures_are_recreated_when_nothing_holds_them_back():
    assert "would wait 38 s more" in looks(job(), RUNNING, fresh_failures(), at=(0, 5))


@pytest.mark.parametrize(
    "extra",
    [pod("Running"), pod("Failed", -4, finalizer=True)],
    ids=["a-pod-still-runs", "not-counted-yet"],
)
def test_no_recreation_while_a_pod_runs_or_the_controller_has_not_counted(extra):
    assert looks(job(), RUNNING, [*fresh_failures(), extra], at=(0, 5)) is None


@pytest.mark.parametrize("condition", ["FailureTarget", "SuccessCriteriaMet"])
def test_a_job_that_is_ending_is_left_to_the_controller(condition):
    j = job()
    j["status"]["conditions"] = [{"type": condition, "status": "True"}]
    assert looks(j, RUNNING, fresh_failures(), at=(0, 5)) is None


def test_uncounted_pods_in_the_job_status_hold_the_recreation_back():
    j = job()
    j["status"]["uncountedTerminatedPods"] = {"failed": ["uid-1"]}
    assert looks(j, RUNNING, fresh_failures(), at=(0, 5)) is None


def test_what_a_recreated_job_carries_over():
    assert recreate.carried(job(limit=4, failed=3, ran=600), NOW) == {
        "backoffLimit": 1, "activeDeadlineSeconds": 3000, "recreations": 1,
    }  # fmt: skip
    again = job(annotations={recreate.COUNT_ANNOTATION: "2"})
    assert recreate.carried(again, NOW)["recreations"] == 3


@pytest.mark.parametrize(
    "spent",
    [job(limit=2, failed=3), job(ran=3600), job(ran=3599.5)],
    ids=["retries", "deadline", "last-second"],
)
def test_a_job_with_nothing_left_is_not_recreated(spent):
    """The controller fails it as it would have: a recreation never buys retries or time."""
    assert recreate.carried(spent, NOW) is None


def test_only_a_job_being_deleted_with_the_mark_is_finished_by_a_restarted_launcher():
    mark = {recreate.ANNOTATION: json.dumps({"backoffLimit": 1, "recreations": 1})}
    assert recreate.marked(job(annotations=mark, deleting=True)) == {
        "backoffLimit": 1,
        "recreations": 1,
    }
    assert recreate.marked(job(annotations=mark)) is None  # marked, not yet deleted: re-attach
    assert recreate.marked(job(deleting=True)) is None  # someone else's delete
    assert recreate.marked(job(annotations={recreate.ANNOTATION: "{"}, deleting=True)) is None
    assert recreate.marked(None) is None
