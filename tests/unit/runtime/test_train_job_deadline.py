"""The deadline's word on the JobSet launcher's move (spottrain/runtime/train_job/deadline.py):
the two gangs as a two-rung ladder, the ledger's measurements, at most one read a look.

Figures: 2 workers with 1 A100 each; 200 of 10,000 steps done at a steady 0.5 s, so
on-demand needs a restart (this run's own start-up, 100 s: started to restored) +
9,800 x 0.5 = 4,900 s: 5,000 s, and holds the 300 s margin. With the 60 s look, spot
stays while now + 60 + 5,000 + 300 = now + 5,360 <= the deadline.
"""

from __future__ import annotations

import json

from spottrain.placement import Placement
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job.deadline import DeadlineCheck, rung_of

NOW = 1_800_000_000.0


def gang(pool: str, name: str) -> js.WorkerSet:
    placement = Placement(pool=pool, gpu_type="nvidia-tesla-a100", gpu_count=1)
    return js.WorkerSet(name=name, namespace="t", image="i", args=(), workers=2,
                        placement=placement)  # fmt: skip


SETS = [gang("spot", "st-a"), gang("on-demand", "st-b")]


def ledger_at(tmp_path) -> str:
    rec = {"id": "a", "attempt": 1, "started": NOW - 400, "resumed_at": NOW - 300,
           "updated": NOW - 200, "workers": 2, "gpu_type": "nvidia-tesla-a100", "gpu_count": 1,
           "capacity": "spot", "start_step": 0, "last_step": 200, "saved_step": 200,
           "outcome": "running", "seconds_per_step": 0.5}  # fmt: skip
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
    assert check(SETS, 0) == ""  # 5,360 <= 5,361: spot stays
    check = DeadlineCheck(ledger_at(tmp_path), 10_000, NOW + 5_360 - 1, clock=lambda: clock[0])
    assert "to finish by" in check(SETS, 0)
    # One ledger read a look: within look_every_s the answer is the last one.
    (tmp_path / "attempts.json").unlink()
    clock[0] += 59
    assert "to finish by" in check(SETS, 0)
    # No gang after the current one: nothing to move to.
    assert check(SETS, 1) == ""
    clock[0] += 1
    assert check(SETS, 0) == ""  # no ledger: nothing measured, no move


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
    assert isinstance(options["for_deadline"], DeadlineCheck)
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
