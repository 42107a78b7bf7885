"""The JobSet launcher's pure rule (spottrain/runtime/train_job/decide.py): a table."""

from __future__ import annotations

import pytest

from spottrain.runtime.train_job import decide as d

SPOT = "cloud.google.com/gke-spot=true"
CLASS = "compute class spottrain-a100"
PULL = 'pod p-0: ErrImagePull (failed to pull image "x": not found)'

TABLE = [
    # (observed, action kind, exit code, a word of the line)
    (d.Observed("missing"), d.CREATE, None, ""),
    (d.Observed("missing", sigterm=True), d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (d.Observed("running", sigterm=True), d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (d.Observed("running"), d.WAIT, None, ""),
    (d.Observed("completed", restarts=2), d.EXIT, 0, "Completed"),
    (d.Observed("failed", exit_code=64, can_fall_back=True), d.EXIT, 64, "exit 64"),
    (d.Observed("failed", exit_code=65), d.EXIT, 65, "NaN"),
    (d.Observed("failed", exit_code=170), d.DELETE_AND_EXIT, 170, "exit 170"),
    (d.Observed("failed", exit_code=170, can_fall_back=True), d.FALL_BACK, None, "on-demand"),
    (d.Observed("failed"), d.DELETE_AND_EXIT, 172, "exit 172"),  # no exit code seen: retryable
    (d.Observed("failed", exit_code=64), d.EXIT, 64, "kept for inspection"),
    # Not ours: never touched, not even on SIGTERM.
    (d.Observed("foreign"), d.EXIT, 64, "not created for this task"),
    (d.Observed("foreign", sigterm=True), d.EXIT, 64, "not touching it"),
    # SIGTERM because the launcher's own pod is going: the gang runs on.
    (d.Observed("running", sigterm=True, own_pod_disrupted=True), d.EXIT, 143, "runs on"),
    # A newer launcher claimed the gang: this one leaves it, SIGTERM or not, never deletes.
    (d.Observed("running", held_by="pod-b/1"), d.EXIT, 143, "pod-b/1 follows"),
    (d.Observed("running", held_by="pod-b/1", sigterm=True), d.EXIT, 143, "leaving the gang"),
    (d.Observed("failed", exit_code=170, held_by="pod-b/1"), d.EXIT, 143, "newer attempt"),
    # An earlier JobSet of the name still going: said once, waited for, bounded.
    (d.Observed("deleting", stuck_pods=("p-0",)), d.REPORT, None, "p-0"),
    (d.Observed("deleting", deleting_said=True, deleting_seconds=10), d.WAIT, None, ""),
    (d.Observed("deleting", deleting_seconds=d.DELETING_DEADLINE), d.EXIT, 172, "still being"),
    # Unschedulable: said once after 30 s, naming the selector; the deadline ends it.
    (d.Observed("running", unschedulable_seconds=29, selector=CLASS), d.WAIT, None, ""),
    (d.Observed("running", unschedulable_seconds=31, selector=CLASS), d.REPORT, None, CLASS),
    (
        d.Observed("running", unschedulable_seconds=600, unschedulable_said=True, selector=CLASS),
        d.WAIT,
        None,
        "",
    ),
    (
        d.Observed("running", unschedulable_seconds=3600, unschedulable_said=True, selector=CLASS),
        d.DELETE_AND_EXIT,
        172,
        CLASS,
    ),
    (
        d.Observed(
            "running",
            unschedulable_seconds=900,
            capacity_deadline=900,
            selector=SPOT,
            can_fall_back=True,
        ),
        d.FALL_BACK,
        None,
        SPOT,
    ),
    # The run's deadline: the JobSet deleted, exit 64 (a retry would pass it again).
    (d.Observed("running", deadline=600, age_seconds=600), d.DELETE_AND_EXIT, 64, "deadline"),
    (d.Observed("running", deadline=600, age_seconds=599), d.WAIT, None, ""),
    (d.Observed("completed", deadline=600, age_seconds=700), d.EXIT, 0, "Completed"),
    # A pod that cannot start: said once, then the run ends (64) at the start deadline,
    # at once when its command could not run at all.
    (d.Observed("running", start_failure=PULL, start_failure_seconds=5), d.REPORT, None, "yet"),
    (d.Observed("running", start_failure=PULL, start_failure_said=True), d.WAIT, None, ""),
    (
        d.Observed("running", start_failure=PULL, start_failure_seconds=d.START_FAILURE_SECONDS),
        d.DELETE_AND_EXIT,
        64,
        "ErrImagePull",
    ),
    (
        d.Observed("running", start_failure="pod p-0: StartError", start_failure_final=True),
        d.DELETE_AND_EXIT,
        64,
        "fix it",
    ),
    # A pod whose node stopped answering holds the restart (jobset#576): deleted forcibly,
    # while running or while the JobSet is being deleted; not on SIGTERM.
    (d.Observed("running", unanswered=(("p-1", "n-2"),)), d.FORCE_DELETE, None, "p-1 (node n-2)"),
    (d.Observed("deleting", unanswered=(("p-1", "n-2"),)), d.FORCE_DELETE, None, "forcibly"),
    # Progress: a restart the JobSet controller made is said once.
    (d.Observed("running", restarts=1, max_restarts=3), d.REPORT, None, "0 of 3 counted"),
    (d.Observed("running", restarts=1, restarts_said=1), d.WAIT, None, ""),
]


@pytest.mark.parametrize(("observed", "kind", "code", "word"), TABLE)
def test_decide(observed, kind, code, word):
    action = d.decide(observed)
    assert (action.kind, action.code) == (kind, code)
    assert word in action.line
    if kind in (d.WAIT, d.CREATE):
        assert action.line == ""
    else:
        assert action.line and "\n" not in action.line
