"""The deadline-aware policy against today's and always-spot on simulated capacity
(bench/ladder_sim.py, which runs spottrain.ladder.decide itself): issue 44's goal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[3] / "bench" / "ladder_sim.py"


@pytest.fixture(scope="module")
def rows():
    spec = importlib.util.spec_from_file_location("ladder_sim", SIM)
    sim = importlib.util.module_from_spec(spec)
    sys.modules["ladder_sim"] = sim  # its dataclass looks its module up
    spec.loader.exec_module(sim)
    return sim.table(runs=30)


def test_the_deadline_aware_policy_meets_every_deadline_on_demand_could(rows):
    """Every cell's deadline is at least 1.1x the on-demand duration."""
    missed = [r for r in rows if r["deadline"]["met"] < 99.0]
    assert not missed, missed


def test_it_costs_least_of_the_policies_that_meet_the_deadlines(rows):
    worse = []
    for r in rows:
        meeting = [r[p]["cost"] for p in ("always-spot", "today") if r[p]["met"] >= 99.0]
        if meeting and r["deadline"]["cost"] > min(meeting) + 0.01:
            worse.append(r)
    assert not worse, worse


def test_the_others_miss_deadlines_the_simulation_makes_hard(rows):
    """The measure can fail: at 1.1x slack and 2 preemptions/h neither spot policy is
    in time, and spot alone never finishes at 8/h (each preemption costs more time
    than the 7.5 min between them)."""
    tight = next(r for r in rows if (r["slack"], r["rate_h"], r["droughts"]) == (1.1, 2.0, False))
    assert tight["always-spot"]["met"] < 50 and tight["today"]["met"] < 50
    assert all(r["always-spot"]["met"] == 0 for r in rows if r["rate_h"] == 8.0)
