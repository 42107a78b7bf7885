"""One look at a JobSet and its pods (spottrain/runtime/train_job/observe.py), over the
API's own dict shapes; the real controllers' objects are in
tests/system/gke/test_train_job_launcher_real_kube.py."""

from __future__ import annotations

import pytest

from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import observe as ob

OURS = {"app.kubernetes.io/managed-by": "spottrain", "spottrain.dev/run": "run-1"}
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0 = "2027-01-15T07:59:00Z"  # NOW - 60


def jobset(conditions=(), labels=OURS, restarts=0, counted=0, deleting=None, selector=None):
    pod_spec = {"nodeSelector": selector} if selector else {}
    meta = {"name": "st-1", "labels": dict(labels)}
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {
        "metadata": meta,
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [{"template": {"spec": {"template": {"spec": pod_spec}}}}],
        },
        "status": {
            "restarts": restarts,
            "restartsCountTowardsMax": counted,
            "conditions": [{"type": c, "status": "True"} for c in conditions],
        },
    }


def failed_pod(name, code, gen=0, finished=T0):
    return {
        "metadata": {"name": name, "labels": {ob.RESTART_LABEL: str(gen)}},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"terminated": {"exitCode": code, "finishedAt": finished}},
                }
            ],
        },
    }


def pending_pod(name, reason="Unschedulable", since=T0):
    cond = {"type": "PodScheduled", "status": "False", "reason": reason}
    cond["lastTransitionTime"] = since
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": [cond]}}


def look(js, pods=(), **kw):
    return ob.observe(js, list(pods), now=NOW, ours=OURS, **kw)


def test_no_jobset_is_missing():
    assert look(None).state == "missing"


def test_a_jobset_without_our_labels_is_foreign():
    other = {**OURS, "spottrain.dev/run": "run-2"}
    assert look(jobset(labels=other)).state == "foreign"
    assert look(jobset(labels={})).state == "foreign"


@pytest.mark.parametrize(
    ("conditions", "state"),
    [((), "running"), (("Completed",), "completed"), (("Failed",), "failed")],
)
def test_conditions(conditions, state):
    seen = look(jobset(conditions, restarts=2, counted=1))
    assert (seen.state, seen.restarts, seen.restarts_counted, seen.max_restarts) == (
        state,
        2,
        1,
        3,
    )


def test_a_fatal_exit_of_the_newest_generation_is_the_code_whatever_finished_last():
    pods = [
        failed_pod("a", 170, gen=1, finished="2027-01-15T07:59:30Z"),
        failed_pod("b", 64, gen=1, finished="2027-01-15T07:59:10Z"),
        failed_pod("c", 65, gen=0),  # an older generation's
    ]
    assert look(jobset(("Failed",)), pods).exit_code == 64


def test_else_the_last_pod_to_fail_of_the_newest_generation():
    pods = [
        failed_pod("a", 171, gen=2, finished="2027-01-15T07:59:10Z"),
        failed_pod("b", 170, gen=2, finished="2027-01-15T07:59:30Z"),
        failed_pod("c", 64, gen=1),
    ]
    assert look(jobset(("Failed",)), pods).exit_code == 170
    assert look(jobset(("Failed",)), []).exit_code is None


def test_unschedulable_is_timed_from_the_schedulers_condition_and_names_the_selector():
    sel = {"cloud.google.com/compute-class": "spottrain-a100"}
    seen = look(jobset(selector=sel), [pending_pod("p0"), pending_pod("p1", reason="Other")])
    assert seen.unschedulable_seconds == pytest.approx(60.0)
    assert seen.selector == "cloud.google.com/compute-class=spottrain-a100"
    assert look(jobset(), [failed_pod("p", 1)]).unschedulable_seconds is None


def test_deleting_names_the_pods_still_ending():
    gone = {"metadata": {"name": "p0", "deletionTimestamp": T0}, "status": {"phase": "Running"}}
    seen = look(jobset(deleting=T0), [gone, failed_pod("p1", 143)])
    assert (seen.state, seen.stuck_pods) == ("deleting", ("p0",))
    assert seen.deleting_seconds == pytest.approx(60.0)


def test_signals_pass_through_and_the_suspension_is_seen():
    seen = look(jobset(), sigterm=True, own_pod_disrupted=True)
    assert seen.sigterm and seen.own_pod_disrupted and not seen.suspended
    js = jobset()
    js["spec"]["suspend"] = True
    assert look(js).suspended


def test_a_moves_earlier_gang_is_seen_with_its_deletion_and_its_unanswering_pods():
    """The gang a move leaves: how long its JobSet has been being deleted, and its pods
    whose node stopped answering (forcibly deleted by the launcher)."""
    old = jobset(deleting=T0)
    gone = {"metadata": {"name": "old-0", "deletionTimestamp": "2027-01-15T07:58:00Z"},
            "spec": {"nodeName": "n-9"}, "status": {}}  # fmt: skip
    seen = look(jobset(), earlier={"st-spot": (old, [gone, failed_pod("old-1", 143)])})
    assert seen.earlier == ("st-spot",) and seen.earlier_unanswered == (("old-0", "n-9"),)
    assert seen.moving_seconds == pytest.approx(60.0)
    fresh = look(jobset(), earlier={"st-spot": (jobset(), [])})  # delete not yet asked
    assert (fresh.earlier, fresh.moving_seconds) == (("st-spot",), 0.0)
    assert look(jobset()).earlier == ()


def test_the_run_is_timed_from_the_launchers_annotation_else_the_creation():
    js = jobset()
    js["metadata"]["creationTimestamp"] = T0
    assert look(js).age_seconds == pytest.approx(60.0)
    js["metadata"]["annotations"] = {ob.RUN_STARTED_ANNOTATION: f"{NOW - 3600:.3f}"}
    assert look(js).age_seconds == pytest.approx(3600.0)


def test_a_pod_that_cannot_start_is_timed_from_when_the_launcher_first_saw_it():
    waiting = {
        "metadata": {"name": "p0", "uid": "u0"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff",
                                                          "message": "Back-off  pulling"}}}
            ],
        },
    }  # fmt: skip
    assert ob.start_failures([waiting], {}, NOW) == {"u0": NOW}
    assert ob.start_failures([waiting], {"u0": NOW - 30, "gone": 1.0}, NOW) == {"u0": NOW - 30}
    seen = look(jobset(), [waiting], starts={"u0": NOW - 30})
    assert seen.start_failure == "pod p0: ImagePullBackOff (Back-off pulling)"
    assert seen.start_failure_seconds == pytest.approx(30.0) and not seen.start_failure_final
    assert look(jobset(), [waiting]).start_failure == ""  # not seen before: not timed


def test_a_pod_terminating_past_its_grace_is_unanswered_after_a_while():
    def terminating(name, due):
        meta = {"name": name, "deletionTimestamp": due}
        return {"metadata": meta, "spec": {"nodeName": "n-" + name}, "status": {}}

    pods = [terminating("a", "2027-01-15T07:58:00Z"), terminating("b", "2027-01-15T07:59:30Z")]
    assert look(jobset(), pods).unanswered == (("a", "n-a"),)  # 120 s and 30 s past
    assert look(jobset(), pods, settings=d.Settings(unanswered_after=10)).unanswered == (
        ("a", "n-a"),
        ("b", "n-b"),
    )


def test_a_jobset_another_launcher_claimed_is_held_by_it():
    js = jobset()
    assert look(js, holder="pod-a/1").held_by == ""  # unclaimed (made before claims)
    js["metadata"]["annotations"] = {ob.HOLDER_ANNOTATION: "pod-a/1"}
    assert look(js, holder="pod-a/1").held_by == ""
    assert look(js, holder="pod-b/7").held_by == "pod-a/1"
    js["metadata"]["labels"] = {}
    assert look(js, holder="pod-b/7").state == "foreign"  # foreign wins: never touched
