"""The Vertex launcher's walk of the capacity ladder: its next step after each look
(spottrain/runtime/vertex_ladder.py ``next_step``), as a table.

Ladder: spot (patience 10 min) then on-demand; 9,000 steps left at 0.5 s (4,500 s of
work). The deadline rows are :func:`spottrain.ladder.decide.decide`'s (its own table
in tests/unit/ladder/test_decide.py); these are what the walk adds: a job's end, the
budgets, a job that waited, and what a look with nothing measured does.
"""

from __future__ import annotations

import json

import pytest

from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import MOVE
from spottrain.ladder.forecast import Measured
from spottrain.runtime.fallback_words import CANCELLED, COMPLETED, FATAL, INCOMPLETE
from spottrain.runtime.vertex_ladder import (
    AGAIN,
    WAIT,
    Look,
    defaults_of,
    next_step,
    prices_by_kind,
)

SPOT = Rung("spot", "n1-standard-8", workers=2, patience_s=600)
LADDER = Ladder((SPOT, Rung("on-demand", "n1-standard-8", workers=2)))
NOW = 1_800_000_000.0
M = Measured(1000, 10000, {SPOT.shape: 0.5}, {SPOT.shape: 2}, save_every_s=60.0)
# A deadline on-demand meets from the next look with room (the prior's 900 s restart +
# 4,500 + 300 held + a 60 s look = 5,760 < 6,000), and one it meets only from now
# (5,700 s).
ROOMY, CLOSE = NOW + 6000, NOW + 5700

ROWS = [
    # (rung, look, finish_by, step, to, words in the reason)
    (0, Look(ended=True, succeeded=True), None, COMPLETED, 0, ""),
    (0, Look(ended=True, settled=FATAL), None, FATAL, 0, ""),
    (0, Look(ended=True, settled=CANCELLED), ROOMY, CANCELLED, 0, ""),
    # Running, no deadline: wait; waited past its patience: move.
    (0, Look(ended=False, measured=M), None, WAIT, 0, ""),
    (0, Look(ended=False, waited_s=601), None, MOVE, 1, "no spot capacity for 601 s"),
    # Ended without progress (no capacity): move at once, with budget left.
    (0, Look(ended=True, progressed=False, jobs_here=1), None, MOVE, 1, "no spot capacity"),
    # Preempted after progress: again on spot while its budget lasts, then on.
    (0, Look(ended=True, progressed=True, jobs_here=2, measured=M), None, AGAIN, 0, ""),
    (0, Look(ended=True, progressed=True, jobs_here=3, measured=M), None, MOVE, 1, "budget"),
    # The last rung: again while its budget lasts, then incomplete.
    (1, Look(ended=True, progressed=True, jobs_here=1, measured=M), None, AGAIN, 1, ""),
    (1, Look(ended=True, progressed=True, jobs_here=2, measured=M), None, INCOMPLETE, 1, "budget"),
    # A deadline: spot stays while on-demand is safe from the next look, else moves.
    (0, Look(ended=False, measured=M), ROOMY, WAIT, 0, "could still finish by"),
    (0, Look(ended=False, measured=M), CLOSE, MOVE, 1, "to finish by"),
    (0, Look(ended=True, progressed=True, jobs_here=1, measured=M), CLOSE, MOVE, 1, "to finish by"),
    # With a deadline and no step time measured or estimated: on-demand until one is.
    (0, Look(ended=False), CLOSE, MOVE, 1, "no step time measured or estimated"),
    (1, Look(ended=False), CLOSE, WAIT, 1, "no step time measured yet"),
    # A spot job that ended without progress (preempted in its start-up): with a deadline
    # not its patience used (the deadline decides: again, while on-demand is in time).
    (0, Look(ended=True, progressed=False, jobs_here=1, measured=M), ROOMY, AGAIN, 0, ""),
    # On on-demand, far ahead of the deadline: back to spot.
    (1, Look(ended=False, measured=M), NOW + 20000, MOVE, 0, "ahead of the deadline"),
]


@pytest.mark.parametrize(("at", "look", "finish_by", "kind", "to", "words"), ROWS)
def test_next_step(at, look, finish_by, kind, to, words):
    step = next_step(LADDER, at, look, budgets=(3, 2), now=NOW, finish_by=finish_by,
                     look_every_s=60)  # fmt: skip
    assert (step.kind, step.to) == (kind, to), step
    assert words in step.reason, step


def test_the_payloads_own_shape_is_each_rungs_default():
    pool = {"machine_spec": {"machine_type": "a2-highgpu-1g", "accelerator_type":
            "NVIDIA_TESLA_A100", "accelerator_count": 1}, "replica_count": 1}  # fmt: skip
    payload = {"job_spec": {"worker_pool_specs": [pool, {**pool, "replica_count": 3}]}}
    assert defaults_of(payload) == Rung("spot", "a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 4)
    cpu = {"machine_spec": {"machine_type": "n1-standard-4",
           "accelerator_type": "ACCELERATOR_TYPE_UNSPECIFIED"}}  # fmt: skip
    assert defaults_of({"job_spec": {"worker_pool_specs": [cpu]}}) == Rung("spot", "n1-standard-4")


def test_the_walk_prices_spot_and_on_demand_from_the_users_vertex_prices(monkeypatch):
    prices = {"vertex": {"machine": {"n1-standard-8": {"spot": 0.1, "on_demand": 0.4}}}}
    monkeypatch.setenv("SPOTTRAIN_PRICES", json.dumps(prices))
    monkeypatch.setenv("SPOTTRAIN_CATALOG_ENDPOINT", "off")
    three = Ladder((SPOT, Rung("flex-start", "n1-standard-8", workers=2), LADDER[1]))
    assert prices_by_kind(three, "us-central1") == {"spot": 0.1, "on-demand": 0.4}
    monkeypatch.setenv("SPOTTRAIN_PRICES", json.dumps({"vertex": {}}))
    assert prices_by_kind(three, "us-central1") == {}  # unknown: the cost rules stay off
