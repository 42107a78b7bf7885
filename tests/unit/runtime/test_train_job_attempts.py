"""The pods a launcher saw end (spottrain.runtime.train_job.attempts)."""

from __future__ import annotations

from spottrain.runtime.train_job import attempts, names

INDEX = "batch.kubernetes.io/job-completion-index"


def pod(state: dict, conditions=()) -> dict:
    return {
        "metadata": {"name": "g-workers-0-1-abc", "annotations": {INDEX: "1"}},
        "spec": {"nodeName": "node-a"},
        "status": {
            "conditions": list(conditions),
            "containerStatuses": [
                {"name": "other", "state": {}},
                {"name": names.CONTAINER, "state": state},
            ],  # fmt: skip
        },
    }


def test_an_ended_pod_is_its_terminated_state():
    ended = attempts.from_pod(
        pod(
            {
                "terminated": {
                    "exitCode": 143,
                    "startedAt": "2026-11-29T06:00:00Z",
                    "finishedAt": "2026-11-29T06:00:30Z",
                }
            }
        ),  # fmt: skip
        "g/0",
        "spot",
    )
    assert (ended.pod, ended.index, ended.node, ended.node_kind) == (
        "g-workers-0-1-abc",
        1,
        "node-a",
        "spot",
    )
    assert (ended.exit_code, ended.disruption) == (143, "")
    assert ended.finished - ended.started == 30.0


def test_a_running_pod_gone_under_an_eviction_is_stopped_for_that_reason_when_last_seen():
    """Its start from the running state it was last seen in; its end when it was gone;
    no exit code (none was seen); the eviction's reason wins over a pod condition."""
    gone = attempts.stopped(
        pod({"running": {"startedAt": "2026-11-29T06:00:00Z"}},
            [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]),
        "g/0", "spot", None, ended=1_795_932_060.0, why="Kueue Preempted (InClusterQueue)",
    )  # fmt: skip
    assert gone.disruption == "Kueue Preempted (InClusterQueue)" and gone.exit_code is None
    assert (gone.pod, gone.index, gone.node, gone.job) == ("g-workers-0-1-abc", 1, "node-a", "g/0")
    assert gone.finished - gone.started == 60.0
