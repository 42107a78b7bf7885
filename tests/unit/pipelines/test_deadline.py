"""The deadline at submit (spottrain/pipelines/deadline.py): a duration made a time, a
ladder over the compiled job's shape, and a deadline the ledger's speed cannot meet
said in one line."""

from __future__ import annotations

import json

import pytest
import yaml

from spottrain.ladder import LadderError
from spottrain.pipelines import compile as comp
from spottrain.pipelines import deadline

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load((comp.COMPILED_DIR / comp.VERTEX_FALLBACK_YAML).read_text())


def _ledger(where, per_step: float) -> None:
    rec = {"id": "a", "attempt": 1, "started": NOW - 600, "ended": NOW - 500, "workers": 1,
           "capacity": "spot", "start_step": 0, "last_step": 200, "saved_step": 200,
           "outcome": "preempted", "seconds_per_step": per_step}  # fmt: skip
    (where / "attempts.json").write_text(json.dumps({"attempts": [rec]}))


def test_a_deadline_the_measured_speed_cannot_meet_is_one_line(spec, tmp_path):
    # 10,000 steps, 200 done: 9,800 x 0.5 s = 4,900 s on on-demand, plus the prior's
    # 900 s restart (the record has no first step to measure one): 5,800 s (1.6 h). A 1 h
    # deadline cannot be met, a 2 h one can.
    _ledger(tmp_path, 0.5)
    params = {"checkpoint_dir": str(tmp_path), "train_steps": 10000, "finish_by": "1h"}
    lines = deadline.check(spec, params, now=NOW)
    assert lines == [
        "finish_by='1h': the run is to finish by 2027-01-15T09:00:00Z",
        "finish_by 09:00 UTC cannot be met: the fastest rung (on-demand 1 x n1-standard-8 "
        "+ 1 x NVIDIA_TESLA_T4) needs 1.6 h for the 9800 steps left at the measured speed",
    ], lines
    assert params["finish_by"] == "2027-01-15T09:00:00Z"
    params = {"checkpoint_dir": str(tmp_path), "train_steps": 10000, "finish_by": "2h"}
    assert len(deadline.check(spec, params, now=NOW)) == 1  # only the time
    # Nothing measured (a new run): judged once it has a step time.
    fresh = {"checkpoint_dir": str(tmp_path / "new"), "train_steps": 10000, "finish_by": "1m"}
    assert len(deadline.check(spec, fresh, now=NOW)) == 1


def test_a_new_runs_deadline_is_judged_at_submit_from_its_step_estimate(spec, tmp_path):
    """No ledger yet: ``prior_step_seconds`` stands in for the measured speed. 10,000
    steps at 0.5 s = 5,000 s, plus the prior's 900 s restart: 1.6 h."""
    params = {"checkpoint_dir": str(tmp_path / "new"), "train_steps": 10000, "finish_by": "1h",
              "prior_step_seconds": "0.5"}  # fmt: skip
    lines = deadline.check(spec, params, now=NOW)
    assert (
        len(lines) == 2
        and "needs 1.6 h for the 10000 steps left at the estimated speed" in (lines[1])
    ), lines
    assert len(deadline.check(spec, {**params, "finish_by": "2h"}, now=NOW)) == 1
    # A bad estimate is one line naming it, also without a deadline (exit 64).
    for bad in ("fast", "0", "-1", "inf"):
        with pytest.raises(LadderError, match=f"prior_step_seconds={bad!r}"):
            deadline.check(spec, {**params, "prior_step_seconds": bad, "finish_by": ""}, now=NOW)


def test_the_fallback_task_passes_the_estimate_to_its_launcher(spec):
    """The compiled fall-back pipeline has the parameter and its launcher gets the flag;
    the launcher reads an empty one as unknown."""
    from spottrain.runtime.vertex_job import parse_args

    assert "prior_step_seconds" in spec["root"]["inputDefinitions"]["parameters"]
    assert "--prior_step_seconds" in json.dumps(spec)
    base = ["--project", "p", "--location", "l", "--payload", "{}", "--gcp_resources", "g",
            "--checkpoint_dir", "c", "--train_steps", "1"]  # fmt: skip
    assert parse_args([*base, "--prior_step_seconds", ""]).prior_step_seconds == 0.0
    assert parse_args([*base, "--prior_step_seconds", "0.25"]).prior_step_seconds == 0.25


def test_a_ladder_is_read_over_the_compiled_jobs_shape(spec):
    params = {"ladder": '[{"capacity": "spot", "patience": "20m"}, {"capacity": "flex"}]'}
    with pytest.raises(LadderError, match="ladder rung 2: capacity='flex'"):
        deadline.check(spec, params, now=NOW)
    assert deadline.check(spec, {"ladder": '[{"capacity": "spot"}]'}, now=NOW) == []
