"""The recreation rule's edges (``spottrain.runtime.gke_job.recreate``), on Job and pod
objects in the API's JSON shape. The recreation itself, against the real Job
controller's back-off, is in tests/test_gke_job_real_kube.py (test_c*)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from spottrain.runtime.gke_job import recreate

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(phase, ended_ago=None, finalizer=False):
    state = {"terminated": {"exitCode": 143, "finishedAt": stamp(ended_ago)}} if ended_ago else {}
    return {
        "metadata": {"finalizers": [recreate.TRACKING_FINALIZER] if finalizer else []},
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def job(limit=4, failed=0, ran=100.0, deadline=3600, annotations=None, deleting=False):
    meta = {"name": "st-x", "annotations": annotations or {}}
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


def test_the_wait_counts_every_failed_pod_since_the_last_success():
    pods = [pod("Failed", 30), pod("Failed", 5), pod("Failed", 4)]
    failures, delay, left = recreate.idle_wait(job(), pods, NOW)
    assert (failures, delay, left) == (3, 40, 36)
    assert recreate.should_recreate((failures, delay, left), poll_seconds=10)
    # A success resets the count (backoff_utils.go newBackoffRecord).
    pods.insert(1, {**pod("Succeeded", 10)})
    assert recreate.idle_wait(job(), pods, NOW)[:2] == (2, 20)


@pytest.mark.parametrize(
    "pods",
    [
        [pod("Failed", 5), pod("Running")],  # a pod may still write checkpoints
        [pod("Failed", 5), pod("Failed", 4, finalizer=True)],  # not counted yet
        [pod("Succeeded", 5)],  # nothing failed
        [],
    ],
)
def test_no_recreation_while_a_pod_runs_the_controller_counts_or_nothing_failed(pods):
    assert recreate.idle_wait(job(), pods, NOW) is None


def test_short_or_nearly_over_waits_are_left_to_the_controller():
    assert not recreate.should_recreate((2, 20.0, 19.0), poll_seconds=1)  # below 30 s
    assert not recreate.should_recreate((3, 40.0, 0.5), poll_seconds=1)  # nearly over
    assert not recreate.should_recreate(None, poll_seconds=1)


def test_uncounted_pods_in_the_job_status_hold_the_recreation_back():
    j = job()
    j["status"]["uncountedTerminatedPods"] = {"failed": ["uid-1"]}
    assert recreate.idle_wait(j, [pod("Failed", 5)], NOW) is None


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
