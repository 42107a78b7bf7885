"""The deadline's word on the JobSet launcher's move (spottrain/runtime/train_job/deadline.py):
the two gangs as a two-rung ladder, the ledger's measurements, at most one read a look.

Figures: 2 workers with 1 A100 each; 200 of 10,000 steps done at a steady 0.5 s, so
on-demand needs a restart (this run's own start-up, 100 s: started to restored) +
9,800 x 0.5 = 4,900 s: 5,000 s, and holds the 300 s margin (``margin_s``, as given by
``--margin_seconds 300``; unset it would be 60 s, a third of the restart at least 60 s).
With the 60 s look, spot stays while now + 60 + 5,000 + 300 = now + 5,360 <= the deadline.

Back to spot from on-demand (issue 56) needs, beyond the same 5,000 s and 300 s, two
restarts, a save interval and two looks: 2 x 100 + 60 + 2 x 60 = 380 s, so a deadline
at least now + 5,680; and RETURN_WAIT_S (2 h) since spot was last left, doubled for
each return before (the ledger's moves).
"""

from __future__ import annotations

import json

from spottrain.ladder.decide import RETURN_WAIT_S
from spottrain.ladder.forecast import Prior
from spottrain.ledger import moves
from spottrain.ledger.schema import Move
from spottrain.placement import Placement
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job.deadline import NOT_DUE, Due, rung_of
from spottrain.runtime.train_job.deadline import DeadlineCheck as _DeadlineCheck

NOW = 1_800_000_000.0


def DeadlineCheck(*args, **kw) -> _DeadlineCheck:  # noqa: N802 (the class, margin given)
    """The launcher's check with the 300 s margin the figures above hold."""
    return _DeadlineCheck(*args, **{"margin_s": 300.0, **kw})


def gang(pool: str, name: str) -> js.WorkerSet:
    placement = Placement(pool=pool, gpu_type="nvidia-tesla-a100", gpu_count=1)
    return js.WorkerSet(name=name, namespace="t", image="i", args=(), workers=2,
                        placement=placement)  # fmt: skip


SETS = [gang("spot", "st-a"), gang("on-demand", "st-b")]


def ledger_at(tmp_path, capacity: str = "spot") -> str:
    rec = {"id": "a", "attempt": 1, "started": NOW - 400, "resumed_at": NOW - 300,
           "updated": NOW - 200, "workers": 2, "gpu_type": "nvidia-tesla-a100", "gpu_count": 1,
           "capacity": capacity, "start_step": 0, "last_step": 200, "saved_step": 200,
           "outcome": "running", "seconds_per_step": 0.5}  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "attempts.json").write_text(json.dumps({"attempts": [rec]}))
    return str(tmp_path)


def test_the_gangs_are_rungs():
    assert str(rung_of(SETS[0])) == "spot 2 x ? + 1 x nvidia-tesla-a100"
    assert rung_of(SETS[1]).capacity == "on-demand" and not rung_of(SETS[1]).preemptible
    cpu = gang("preemptible", "st-c")
    cpu = js.WorkerSet(**{**cpu.__dict__, "placement": Placement(pool="preemptible", gpu_count=0)})
    assert (rung_of(cpu).capacity, rung_of(cpu).gpu_type) == ("spot", "")


def test_a_move_is_due_once_on_demand_would_be_late_from_the_next_look(tmp_path):
    clock = [NOW]
    check = DeadlineCheck(ledger_at(tmp_path), 10_000, NOW + 5_360 + 1, clock=lambda: clock[0])
    assert check(SETS, 0) == NOT_DUE  # 5,360 <= 5,361: spot stays
    check = DeadlineCheck(ledger_at(tmp_path), 10_000, NOW + 5_360 - 1, clock=lambda: clock[0])
    due = check(SETS, 0)
    assert due.reason.startswith("to finish by") and due.to == 1
    # One ledger read a look: within look_every_s the answer is the last one.
    (tmp_path / "attempts.json").unlink()
    clock[0] += 59
    assert check(SETS, 0) == due
    # Asked on the on-demand gang (the move made), the look is its own: no ledger, no
    # step time measured or estimated, so on-demand stays.
    assert check(SETS, 1) == NOT_DUE
    # One gang only (a ComputeClass): nothing to move to.
    assert check(SETS[:1], 0) == NOT_DUE
    clock[0] += 60
    # No ledger on spot: nothing measured nor estimated, so the work could need all the
    # time there is: on-demand until a step is measured (as on Vertex; rule "estimate").
    due = check(SETS, 0)
    assert due.to == 1 and "no step time measured or estimated" in due.reason, due
    # With the user's estimate (prior_step_seconds), the deadline binds from it: 10,000
    # steps x 0.5 s + the prior's 900 s restart + 300 s held fit in 9,000 s from the next
    # look, not in 6,000 s.
    for left, to in ((9_000, None), (6_000, 1)):
        est = DeadlineCheck(str(tmp_path / "new"), 10_000, NOW + left, clock=lambda: clock[0],
                            prior=Prior(step_s=0.5))  # fmt: skip
        clock[0] = NOW
        assert est(SETS, 0).to == to


def test_the_components_finish_by_gives_the_launcher_its_check_and_writes_each_move(tmp_path):
    import pytest

    from spottrain import exits
    from spottrain.ledger import moves
    from spottrain.runtime.train import TrainFailed
    from spottrain.runtime.train_job.component import for_the_deadline
    from spottrain.runtime.train_settings import TrainSettings

    d, settings = str(tmp_path), TrainSettings(train_steps=10_000)
    with pytest.raises(TrainFailed) as bad:
        for_the_deadline("soon", d, settings, SETS)
    assert bad.value.code == exits.FATAL_CONFIG and "finish_by='soon'" in bad.value.message
    options = for_the_deadline("6h", d, settings, SETS)
    assert isinstance(options["for_deadline"], _DeadlineCheck)
    ladder, _ = moves.read(d)
    assert ladder["asked"] == "6h" and options["for_deadline"].finish_by == ladder["finish_by"]
    assert ladder["rungs"] == ["spot 2 x ? + 1 x nvidia-tesla-a100",
                               "on-demand 2 x ? + 1 x nvidia-tesla-a100"]  # fmt: skip
    # A retried launcher keeps the deadline the first one read.
    again = for_the_deadline("6h", d, settings, SETS)["for_deadline"]
    assert again.finish_by == ladder["finish_by"]
    options["moved"]("to finish by 14:00 UTC: ...", SETS[0], SETS[1])
    _, (move,) = moves.read(d)
    assert (move["platform"], move["left"], move["to_capacity"]) == ("gke", "st-a", "on-demand")
    assert move["finish_by"] == ladder["finish_by"]
    # Every move is written, a deadline or not; one gang (a ComputeClass): nothing to act on.
    assert set(for_the_deadline("", str(tmp_path / "b"), settings, SETS)) == {"moved"}
    assert for_the_deadline("6h", str(tmp_path / "c"), settings, SETS[:1]) == {}
    # The user's step estimate reaches the check; a bad one is one line, exit 64.
    check = for_the_deadline("6h", d, settings, SETS, 0.25)["for_deadline"]
    assert check.prior.step_s == 0.25
    assert for_the_deadline("6h", d, settings, SETS)["for_deadline"].prior.step_s is None
    # A bad prior_step_seconds: train_job/inputs.py, before (test_train_job_component.py).


def test_on_demand_far_ahead_of_its_deadline_goes_back_to_spot_once_spot_was_left_long_enough(
    tmp_path,
):
    """On the on-demand gang (``current`` 1), a ledger far ahead: a move back to gang 0's
    kind (spot). Not with less spare than the hysteresis's (a 100 s restart and a 60 s
    look beyond coming back: 5,000 + 300 + 160 = 5,460 s), and not within RETURN_WAIT_S
    of a pace (or cost) move that left spot (the ledger's moves), doubled per return."""
    d = ledger_at(tmp_path, capacity="on-demand")
    left = Move(at=NOW - RETURN_WAIT_S, platform="gke", left="st-a", from_capacity="spot",
                to_capacity="on-demand", reason="behind the pace", rule="pace")  # fmt: skip
    moves.add_move(d, left)
    check = DeadlineCheck(d, 10_000, NOW + 5_460, clock=lambda: NOW)
    due = check(SETS, 1, running=True)
    assert due.to == 0 and rung_of(SETS[due.to]).capacity == "spot", due
    assert due.reason.startswith("ahead of the deadline: back to spot"), due
    # 1 s less spare than that: on-demand stays.
    assert DeadlineCheck(d, 10_000, NOW + 5_459, clock=lambda: NOW)(SETS, 1) == NOT_DUE
    # From the spot gang the same ledger is no move at all: spot stays.
    assert DeadlineCheck(d, 10_000, NOW + 5_460, clock=lambda: NOW)(SETS, 0) == NOT_DUE
    # Left for the deadline (the safety net), not the pace: no wait.
    g = ledger_at(tmp_path / "g", "on-demand")
    moves.add_move(g, {**left, "at": NOW - 1, "rule": "deadline"})
    assert DeadlineCheck(g, 10_000, NOW + 9_999, clock=lambda: NOW)(SETS, 1).to == 0
    # Spot left 1 s too recently: no return yet.
    e = ledger_at(tmp_path / "e", "on-demand")
    moves.add_move(e, {**left, "at": NOW - RETURN_WAIT_S + 1})
    assert DeadlineCheck(e, 10_000, NOW + 9_999, clock=lambda: NOW)(SETS, 1) == NOT_DUE
    # One return before (spot → on-demand → spot → on-demand): the wait is twice as long.
    f = ledger_at(tmp_path / "f", "on-demand")
    for at, a, b in (
        (NOW - 9 * 3600, "spot", "on-demand"),
        (NOW - 8 * 3600, "on-demand", "spot"),
        (NOW - 2 * RETURN_WAIT_S + 1, "spot", "on-demand"),
    ):
        moves.add_move(f, {**left, "at": at, "from_capacity": a, "to_capacity": b})
    assert DeadlineCheck(f, 10_000, NOW + 9_999, clock=lambda: NOW)(SETS, 1) == NOT_DUE
    again = DeadlineCheck(f, 10_000, NOW + 9_999, clock=lambda: NOW + 1)(SETS, 1)
    assert again == Due(again.reason, 0) and again.reason, again
