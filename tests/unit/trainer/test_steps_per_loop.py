"""Several steps per compiled call (``--steps-per-loop``) and XLA (``--jit-compile``).

The in-process tests; those that start processes are in
tests/integration/trainer/test_steps_per_loop.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from spottrain.tasks.image import model as _model  # noqa: F401 - registers Preprocess for load_model
from spottrain.trainer import calls, config
from spottrain.trainer.calls import LoopSizes


def _sizes(steps_per_loop, allowed=True, agreed=None):
    cfg = config.TrainConfig(steps_per_loop=steps_per_loop)
    return LoopSizes(cfg, allowed, agreed or (lambda mean: mean))


@pytest.mark.parametrize(
    "steps_per_loop, allowed, step_seconds, now",
    [
        (1, True, 0.01, 1),  # the default: one step a call, never measured
        (8, True, 0.01, 8),  # a fixed N
        (8, False, 0.01, 1),  # the profiler times each step: one a call whatever the flag
        (0, True, 0.01, 50),  # auto: 0.5 s of 10 ms steps
        (0, True, 2.0, 1),  # auto: a step longer than the bound still runs
        (0, True, 1e-9, config.MAX_STEPS_PER_LOOP),  # auto is capped
    ],
)
def test_loop_sizes(steps_per_loop, allowed, step_seconds, now):
    sizes = _sizes(steps_per_loop, allowed)
    sizes.measured(1, 100.0)  # the first call traced: not counted
    for _ in range(LoopSizes.PROBE_CALLS):
        assert sizes.now == (1 if steps_per_loop == 0 else now)
        sizes.measured(1, step_seconds)
    assert sizes.now == now


def test_auto_takes_the_agreed_mean_not_its_own():
    """Every worker must run the same steps per call: auto uses what all agreed on."""
    seen = []
    sizes = _sizes(0, agreed=lambda mean: seen.append(mean) or 0.05)
    for _ in range(LoopSizes.PROBE_CALLS + 1):
        sizes.measured(1, 0.001)
    assert seen == [pytest.approx(0.001)] and sizes.now == 10


def test_a_fixed_n_whose_calls_are_slow_is_warned_of(caplog):
    """A notice waits for the running call: a fixed N that makes calls long is said once."""
    sizes = _sizes(40)
    for seconds in (100.0, 12.0, 12.0):  # the first call traces: not counted
        sizes.measured(40, seconds)
    warned = [r.getMessage() for r in caplog.records if "a call takes" in r.getMessage()]
    assert warned == [
        "--steps-per-loop 40: a call takes 12.0 s, and a preemption notice waits for it "
        "(GKE gives a pod 15-30 s); use --steps-per-loop auto"
    ]
    fast = _sizes(40)
    for seconds in (100.0, 0.5, 0.5):
        fast.measured(40, seconds)
    assert len([r for r in caplog.records if "a call takes" in r.getMessage()]) == 1


class _Out:
    """A step's outputs that note when the host reads them (``np.asarray``)."""

    def __init__(self, log, k):
        self.log, self.k = log, k

    def __array__(self, dtype=None, copy=None):
        self.log.append(f"read {self.k}")
        return np.array([float(self.k), 0.0, 0.0])


def test_one_step_a_call_runs_the_next_step_before_reading_the_last():
    """The host reads step j after step j+1 is dispatched; an error of the step run
    ahead is raised at its own turn, after the step before it was read."""
    log = []

    def call(stop, save):
        log.append("call")
        if (stop, save) == ("boom", "boom"):
            raise RuntimeError("step 3 failed")
        return _Out(log, len([x for x in log if x.startswith("call")]))

    ahead = calls.StepAhead(call)
    assert ahead.step((0, 0), then=(0, 0))[0] == 1.0  # step 1, step 2 dispatched
    assert ahead.ahead
    assert ahead.step((0, 0), then=("boom", "boom"))[0] == 2.0  # step 3 dispatched: fails
    assert [x.split()[0] for x in log] == ["call", "call", "read", "call", "read"]
    with pytest.raises(RuntimeError, match="step 3 failed"):
        ahead.step((0, 0))
    assert not ahead.ahead
    assert ahead.step((0, 0))[0] == 4.0  # none ahead: run and read at once


@pytest.mark.parametrize(
    "flag, profiled, asked, looped, auto, now",
    [(1, False, 1, False, False, 1), (8, False, 8, True, False, 8), (0, False, 0, True, True, 1),
     (8, True, 1, False, False, 1), (0, True, 1, False, False, 1)],
)  # fmt: skip
def test_steps_a_call_are_decided_once_by_table(flag, profiled, asked, looped, auto, now):
    """Issue 58: the start line and the loop read the same decision (calls.per_call)."""
    import dataclasses

    from spottrain.trainer import calls, config

    cfg = dataclasses.replace(
        config.parse_args(
            ["--train-steps", "5", "--checkpoint-dir", "/c", "--model-dir", "/m"], {}
        ),
        steps_per_loop=flag,
    )
    assert calls.per_call(cfg, profiled) == asked
    sizes = calls.LoopSizes(cfg, not profiled, agree=None)
    assert (sizes.looped, sizes.auto, sizes.now) == (looped, auto, now)
