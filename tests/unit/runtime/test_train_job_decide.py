"""The JobSet launcher's pure rule (spottrain/runtime/train_job/decide.py): a table."""

from __future__ import annotations

import pytest
from decide_rows import row

from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job.queue import Queued

SPOT = "cloud.google.com/gke-spot=true"
CLASS = "compute class spottrain-a100"
PULL = 'pod p-0: ErrImagePull (failed to pull image "x": not found)'


TABLE = [
    # (observed, action kind, exit code, a word of the line)
    (row("missing"), d.CREATE, None, ""),
    # A deadline move due at the first look: the on-demand gang at once, no spot JobSet.
    (
        row("missing", for_deadline="no step time yet", can_fall_back=True),
        d.FALL_BACK,
        None,
        "no step time yet: starting on on-demand",
    ),
    (row("missing", for_deadline="x"), d.CREATE, None, ""),
    (row("missing", for_deadline="x", for_deadline_to="spot", can_return=True), d.CREATE, None, ""),
    (row("missing", sigterm=True), d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (row("running", sigterm=True), d.DELETE_AND_EXIT, 143, "SIGTERM"),
    (row("running"), d.WAIT, None, ""),
    (row("completed", restarts=2), d.EXIT, 0, "Completed"),
    (row("failed", exit_code=64, can_fall_back=True), d.EXIT, 64, "exit 64"),
    (row("failed", exit_code=65), d.EXIT, 65, "NaN"),
    (row("failed", exit_code=170), d.DELETE_AND_EXIT, 170, "exit 170"),
    (row("failed", exit_code=170, can_fall_back=True), d.FALL_BACK, None, "on-demand"),
    # A move the deadline needs: while the gang trains or waits, only with a move left.
    (
        row("running", for_deadline="to finish by 06:00 UTC", can_fall_back=True),
        d.FALL_BACK,
        None,
        "to finish by 06:00 UTC: moving to on-demand",
    ),
    (row("running", for_deadline="to finish by 06:00 UTC"), d.WAIT, None, ""),
    (
        row(
            "running", for_deadline="x", unschedulable_seconds=31, can_fall_back=True, selector=SPOT
        ),
        d.FALL_BACK,
        None,
        "x: moving",
    ),
    (
        row("running", for_deadline="x", sigterm=True, can_fall_back=True),
        d.DELETE_AND_EXIT,
        143,
        "SIGTERM",
    ),
    (row("completed", for_deadline="x", can_fall_back=True), d.EXIT, 0, "Completed"),
    # Ahead of the deadline on an on-demand gang a move made (issue 56): back to a new spot
    # gang, the same move the other way; never without spot to go back to.
    (
        row(
            "running", for_deadline="ahead of the deadline", for_deadline_to="spot", can_return=True
        ),
        d.BACK_TO_SPOT,
        None,
        "ahead of the deadline: moving back to a new spot gang",
    ),
    (row("running", for_deadline="ahead", for_deadline_to="spot"), d.WAIT, None, ""),
    (
        row("running", for_deadline="ahead", for_deadline_to="spot", can_fall_back=True),
        d.WAIT,
        None,
        "",
    ),
    (
        row("running", for_deadline="to finish by", for_deadline_to="on-demand", can_return=True),
        d.WAIT,
        None,
        "",
    ),
    (
        row("running", for_deadline="x", for_deadline_to="spot", can_return=True, sigterm=True),
        d.DELETE_AND_EXIT,
        143,
        "SIGTERM",
    ),
    (
        row("completed", for_deadline="x", for_deadline_to="spot", can_return=True),
        d.EXIT,
        0,
        "Completed",
    ),
    # Capacity and used-up restarts never take an on-demand gang back to spot.
    (row("failed", exit_code=170, can_return=True), d.DELETE_AND_EXIT, 170, "exit 170"),
    (
        row(
            "running",
            unschedulable_seconds=900,
            capacity_deadline=900,
            selector=SPOT,
            can_return=True,
            unschedulable_said=True,
        ),
        d.DELETE_AND_EXIT,
        172,
        "capacity deadline",
    ),
    (row("failed"), d.DELETE_AND_EXIT, 172, "exit 172"),  # no exit code seen: retryable
    (row("failed", exit_code=64), d.EXIT, 64, "kept for inspection"),
    # Not ours: never touched, not even on SIGTERM.
    (row("foreign"), d.EXIT, 64, "not created for this task"),
    (row("foreign", sigterm=True), d.EXIT, 64, "not touching it"),
    # SIGTERM because the launcher's own pod is going: the gang runs on.
    (row("running", sigterm=True, own_pod_disrupted=True), d.EXIT, 143, "runs on"),
    # A newer launcher claimed the gang: this one leaves it, SIGTERM or not, never deletes.
    (row("running", held_by="pod-b/1"), d.EXIT, 143, "pod-b/1 follows"),
    (row("running", held_by="pod-b/1", sigterm=True), d.EXIT, 143, "leaving the gang"),
    (row("failed", exit_code=170, held_by="pod-b/1"), d.EXIT, 143, "newer attempt"),
    # An earlier JobSet of the name still going: said once, waited for, bounded.
    (row("deleting", stuck_pods=("p-0",)), d.REPORT, None, "p-0"),
    (row("deleting", deleting_said=True, deleting_seconds=10), d.WAIT, None, ""),
    (row("deleting", deleting_seconds=d.DELETING_DEADLINE), d.EXIT, 172, "still being"),
    # Unschedulable: said once after 30 s, naming the selector; the deadline ends it.
    (row("running", unschedulable_seconds=29, selector=CLASS), d.WAIT, None, ""),
    (row("running", unschedulable_seconds=31, selector=CLASS), d.REPORT, None, CLASS),
    (
        row("running", unschedulable_seconds=600, unschedulable_said=True, selector=CLASS),
        d.WAIT,
        None,
        "",
    ),
    (
        row("running", unschedulable_seconds=3600, unschedulable_said=True, selector=CLASS),
        d.DELETE_AND_EXIT,
        172,
        CLASS,
    ),
    (
        row(
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
    (row("running", deadline=600, age_seconds=600), d.DELETE_AND_EXIT, 64, "deadline"),
    (row("running", deadline=600, age_seconds=599), d.WAIT, None, ""),
    (row("completed", deadline=600, age_seconds=700), d.EXIT, 0, "Completed"),
    # A pod that cannot start: said once, then the run ends (64) at the start deadline,
    # at once when its command could not run at all.
    (row("running", start_failure=PULL, start_failure_seconds=5), d.REPORT, None, "yet"),
    (row("running", start_failure=PULL, start_failure_said=True), d.WAIT, None, ""),
    (
        row("running", start_failure=PULL, start_failure_seconds=d.START_FAILURE_SECONDS),
        d.DELETE_AND_EXIT,
        64,
        "ErrImagePull",
    ),
    (
        row("running", start_failure="pod p-0: StartError", start_failure_final=True),
        d.DELETE_AND_EXIT,
        64,
        "fix it",
    ),
    # A pod whose node stopped answering holds the restart (jobset#576): deleted forcibly,
    # while running or while the JobSet is being deleted; not on SIGTERM.
    (row("running", unanswered=(("p-1", "n-2"),)), d.FORCE_DELETE, None, "p-1 (node n-2)"),
    (row("deleting", unanswered=(("p-1", "n-2"),)), d.FORCE_DELETE, None, "forcibly"),
    # Progress: a restart the JobSet controller made is said once.
    (row("running", restarts=1, max_restarts=3), d.REPORT, None, "0 of 3 counted"),
    (row("running", restarts=1, restarts_said=1), d.WAIT, None, ""),
    # The move, decided like the rest: the earlier gang's JobSet deleted on every look
    # until it is gone (its pods on a node that does not answer, forcibly), bounded;
    # then the suspended next gang resumed; a SIGTERM meanwhile ends it as any other.
    (row("running", suspended=True, moved=True, earlier=("st-a",)), d.FINISH_MOVE, None, ""),
    (
        row("running", moved=True, earlier=("st-a",), earlier_unanswered=(("p-0", "n-1"),)),
        d.FINISH_MOVE,
        None,
        "p-0 (node n-1) of JobSet st-a do not end",
    ),
    (
        row("running", moved=True, earlier=("st-a",), moving_seconds=d.DELETING_DEADLINE),
        d.EXIT,
        172,
        "st-a still being deleted",
    ),
    (
        row("running", moved=True, earlier=("st-a",), sigterm=True),
        d.DELETE_AND_EXIT,
        143,
        "SIGTERM",
    ),
    (row("running", suspended=True, moved=True), d.RESUME, None, ""),
    (row("missing", moved=True), d.CREATE, None, ""),
    # Suspended by someone else (not a move of ours): left as it is.
    (row("running", suspended=True), d.WAIT, None, ""),
]


@pytest.mark.parametrize(("observed", "kind", "code", "word"), TABLE)
def test_decide(observed, kind, code, word):
    action = d.decide(*observed)
    assert (action.kind, action.code) == (kind, code)
    assert word in action.line
    if kind in (d.WAIT, d.CREATE, d.RESUME) or (kind == d.FINISH_MOVE and not word):
        assert action.line == ""
    else:
        assert action.line and "\n" not in action.line


AFTER = [
    # (memory, action, seen, memory after)
    (d.Memory(), d.Action(d.REPORT, "x", said=d.SAID_DELETING), d.Seen("deleting"),
     d.Memory(said=frozenset({d.SAID_DELETING}))),
    (d.Memory(restarts_said=1), d.Action(d.REPORT, "x", said=d.SAID_RESTARTS),
     d.Seen("running", restarts=3), d.Memory(restarts_said=3)),
    # A move: the next gang's lines are unsaid, one move fewer left, resumed once.
    (d.Memory(said=frozenset({d.SAID_UNSCHEDULABLE}), restarts_said=2, moves_left=1),
     d.Action(d.FALL_BACK, "x"), d.Seen("running"),
     d.Memory(moves_left=0, can_return=True, moved=True)),
    # Back to spot: a new spot gang, which may move on to on-demand again.
    (d.Memory(said=frozenset({d.SAID_RESTARTS}), restarts_said=1, can_return=True),
     d.Action(d.BACK_TO_SPOT, "x"), d.Seen("running"), d.Memory(moves_left=1, moved=True)),
    (d.Memory(moved=True), d.Action(d.RESUME), d.Seen("running", suspended=True), d.Memory()),
    (d.Memory(moved=True), d.Action(d.FINISH_MOVE), d.Seen("running"), d.Memory(moved=True)),
    (d.Memory(restarts_said=2), d.Action(d.WAIT), d.Seen("running"), d.Memory(restarts_said=2)),
    # Kueue's evictions said: those between two looks, then the one a look sees.
    (d.Memory(evictions_said=(("Preempted", 1),)), d.Action(d.REPORT, "x", said=d.SAID_EVICTIONS),
     d.Seen("running", queued=Queued(admitted=True, evictions=(("Preempted", 3),))),
     d.Memory(evictions_said=(("Preempted", 3),))),
    (d.Memory(), d.Action(d.REPORT, "x", said=d.SAID_EVICTIONS),
     d.Seen("running", queued=Queued(evicted="Preempted: x", evicted_reason="Preempted",
                                     evictions=(("Preempted", 3),))),
     d.Memory(evictions_said=(("Preempted", 2),))),
    (d.Memory(evictions_said=(("Preempted", 2),)), d.Action(d.REPORT, "x", said=d.SAID_EVICTED),
     d.Seen("running", queued=Queued(evicted="Preempted: x", evicted_reason="Preempted",
                                     evictions=(("Preempted", 3),))),
     d.Memory(said=frozenset({d.SAID_EVICTED}), evictions_said=(("Preempted", 3),))),
    # A move: the next gang's Workload counts from nothing.
    (d.Memory(evictions_said=(("Preempted", 2),), moves_left=1), d.Action(d.FALL_BACK, "x"),
     d.Seen("running"), d.Memory(moves_left=0, can_return=True, moved=True)),
]  # fmt: skip


@pytest.mark.parametrize(("memory", "action", "seen", "expected"), AFTER)
def test_memory_after(memory, action, seen, expected):
    assert memory.after(action, seen) == expected


def test_a_line_said_is_not_said_again_and_a_moved_gang_says_it_anew():
    """The loop as the launcher runs it: decide, then remember, look after look."""
    seen = d.Seen("running", unschedulable_seconds=40, selector="x")
    memory, settings = d.Memory(moves_left=1), d.Settings(capacity_deadline=60)
    first = d.decide(seen, memory, settings)
    memory = memory.after(first, seen)
    assert first.kind == d.REPORT and d.decide(seen, memory, settings).kind == d.WAIT
    later = d.Seen("running", unschedulable_seconds=61, selector="x")
    move = d.decide(later, memory, settings)
    memory = memory.after(move, later)
    assert move.kind == d.FALL_BACK and memory == d.Memory(can_return=True, moved=True)
    assert d.decide(seen, memory, settings).kind == d.REPORT  # the new gang's first wait


def test_the_deadline_takes_the_run_back_to_spot_and_on_to_on_demand_again():
    """The loop as the launcher runs it, move by move: spot → on-demand (the deadline),
    resumed; back to a new spot gang (ahead), resumed; on-demand again (the deadline)."""
    settings = d.Settings()
    memory = d.Memory(moves_left=1)
    steps = [
        (d.Seen("running", for_deadline="to finish by 06:00 UTC", for_deadline_to="on-demand"),
         d.FALL_BACK),
        (d.Seen("running", suspended=True), d.RESUME),
        (d.Seen("running", for_deadline="ahead of the deadline", for_deadline_to="spot"),
         d.BACK_TO_SPOT),
        (d.Seen("running", suspended=True, earlier=("st-a-od",)), d.FINISH_MOVE),
        (d.Seen("running", suspended=True), d.RESUME),
        # On the new spot gang, "back to spot" is no move; the deadline's move on is.
        (d.Seen("running", for_deadline="ahead", for_deadline_to="spot"), d.WAIT),
        (d.Seen("running", for_deadline="to finish by 07:00 UTC", for_deadline_to="on-demand"),
         d.FALL_BACK),
        (d.Seen("running", suspended=True), d.RESUME),
        (d.Seen("running", for_deadline="to finish by", for_deadline_to="on-demand"), d.WAIT),
    ]  # fmt: skip
    kinds = []
    for seen, _ in steps:
        action = d.decide(seen, memory, settings)
        kinds.append(action.kind)
        memory = memory.after(action, seen)
    assert kinds == [kind for _, kind in steps]
    assert memory == d.Memory(can_return=True)
