"""The ladder's forecast and decision (spottrain/ladder/{forecast,decide}.py), by table.

Each figure is worked by hand in a comment: 9,000 steps left at 0.5 s is 4,500 s of
work; the prior's 1 preemption/h over one hour, a 180 s restart and half of a 600 s
save interval redone leave spot 1 - 480/3600 = 86.7 % useful.
"""

from __future__ import annotations

import math

import pytest

from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import MOVE, STAY, decide
from spottrain.ladder.forecast import Measured, Prior, forecast, preemption_rate, step_seconds

SPOT = Rung("spot", "n1-standard-8", "nvidia-tesla-t4", 1, 2, patience_s=1800)
FLEX = Rung("flex-start", "n1-standard-8", "nvidia-tesla-t4", 1, 2, patience_s=3600)
ON_DEMAND = Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 2)
TWO = Ladder((SPOT, ON_DEMAND))
THREE = Ladder((SPOT, FLEX, ON_DEMAND))
PRICES = {"spot": 0.3, "flex-start": 0.5, "on-demand": 1.0}


def measured(**kw) -> Measured:
    base = dict(steps_done=1000, steps_total=10000, step_s={SPOT.shape: 0.5},
                replicas={SPOT.shape: 2}, save_every_s=600.0)  # fmt: skip
    return Measured(**{**base, **kw})


def test_the_forecast_by_hand():
    m = measured()
    here = forecast(ON_DEMAND, m, Prior(), moving=False, price_per_hour=0.73)
    assert (here.work_s, here.useful, here.finish_s) == (4500.0, 1.0, 4500.0)
    spot = forecast(SPOT, m, Prior(), moving=False)
    assert spot.rate_per_h == 1.0 and spot.useful == pytest.approx(1 - 480 / 3600)
    assert spot.finish_s == pytest.approx(4500 / (1 - 480 / 3600))  # 5,192 s
    moved = forecast(ON_DEMAND, m, Prior(), moving=True, price_per_hour=0.73)
    assert moved.start_s == 180 and moved.finish_s == 4680
    assert moved.cost == pytest.approx(0.73 * 2 * 4680 / 3600)  # the restart is paid
    # A queued rung may wait its whole patience before it trains.
    assert forecast(FLEX, m, Prior(), moving=True).finish_s == 180 + 3600 + 4500
    # Measured restarts replace the prior's.
    assert forecast(ON_DEMAND, measured(restart_s=60.0), Prior(), moving=True).start_s == 60


def test_the_rate_is_the_runs_own_pulled_to_the_prior_and_speeds_scale_by_replicas():
    assert preemption_rate(measured(preemptions=3, preemptible_hours=2.0), Prior()) == 4 / 3
    assert preemption_rate(measured(), Prior(preemptions_per_hour=0.5, weight_hours=2)) == 0.5
    four = Rung("on-demand", "n1-standard-16", "nvidia-tesla-t4", 2, 2)
    assert step_seconds(four, measured()) == 0.25  # 0.5 s on 2 replicas, 4 here
    assert step_seconds(four, measured(step_s={})) is None
    assert forecast(four, measured(step_s={}), Prior(), moving=True).finish_s == math.inf


TABLE = [
    # (ladder, at, measured, finish_by, waited, kind, to, a word of the reason)
    # No deadline: today's rule, the rung's patience.
    (TWO, 0, measured(), None, 600, STAY, 0, ""),
    (TWO, 0, measured(), None, 1800, MOVE, 1, "no spot capacity for 1800 s"),
    # A deadline before any step was measured: no forecast, the patience rule.
    (TWO, 0, measured(step_s={}), 9000, 0, STAY, 0, "no step time measured yet"),
    (TWO, 0, measured(step_s={}), 9000, 1800, MOVE, 1, "no step time measured yet: no spot"),
    # Ample time: on spot; on-demand could still make it from the next look.
    (TWO, 0, measured(), 20000, 0, STAY, 0, "if moved to at the next look"),
    # On-demand needs 180 + 4,500 s + 300 s margin = 4,980 s: from the next look (300 s)
    # that is 5,280 s, past 5,200; from now it is in time: move now.
    (TWO, 0, measured(), 5280, 0, STAY, 0, "forecast finish"),
    (TWO, 0, measured(), 5200, 0, MOVE, 1, "to finish by"),
    # Too late for every rung: the fastest (on-demand, 4,680 s), said.
    (TWO, 0, measured(), 4000, 0, MOVE, 1, "cannot be met on any rung"),
    (TWO, 1, measured(), 4000, 0, STAY, 1, ""),
    # 20 preemptions in 2 h: (1 + 20) / 3 = 7/h, spot 1 - 7 x 480/3600 = 6.7 % useful:
    # its useful hour (0.3 / 0.067 = 4.5) dearer than on-demand's (1.0): move.
    (TWO, 0, measured(preemptions=20, preemptible_hours=2.0), 90000, 0, MOVE, 1, "7.0 preempt"),
    # 3 in 2 h: 4/3 per hour, 82 % useful, 0.37 < 1.0: stay.
    (TWO, 0, measured(preemptions=3, preemptible_hours=2.0), 90000, 0, STAY, 0, ""),
    # Waited out spot's patience with time in hand: the cheapest safe backstop.
    (TWO, 0, measured(), 20000, 1800, MOVE, 1, "no spot capacity for 1800 s; to finish by"),
    # Three rungs: flex-start (0.5) is cheaper than on-demand and waits at most 1 h:
    # 180 + 3,600 + 4,500 + 300 = 8,580 s. With 9,000 s left it is safe from the next
    # look: stay on spot. With 8,700 s only from now. Flex-start now: 0.5 x 2 x 4,680 s
    # = 1.30. Spot until on-demand's last safe moment (8,700 - 4,680 - 300 = 3,720 s:
    # 0.3 x 2 x 3,720 s = 0.62, 3,224 s of the work done), then on-demand for the
    # remaining 28 % (2 x 4,680 s x 0.28 = 0.74): 1.36. Move to flex-start.
    (THREE, 0, measured(), 9000, 0, STAY, 0, "flex-start could still finish"),
    (THREE, 0, measured(), 8700, 0, MOVE, 1, "flex-start now (forecast 1.30) rather than"),
    # At 8,875 s spot's window is 3,895 s: 0.649 + 2.6 x 0.2499 = 1.2988 < 1.30: stay.
    (THREE, 0, measured(), 8875, 0, STAY, 0, "on-demand could still finish"),
    # Only on-demand is still in time: 4,980 s.
    (THREE, 0, measured(), 5200, 0, MOVE, 2, "to finish by"),
    # Spot only, and 20 preemptions in an hour leave it no progress: said, not a crash.
    (
        Ladder((SPOT,)),
        0,
        measured(preemptions=20, preemptible_hours=1.0),
        9000,
        0,
        STAY,
        0,
        "forecast finish never on spot",
    ),
    # A step of 1e13 s: a forecast finish past what a clock can say is "never", not an
    # OverflowError that ends the launcher (the simulator's GKE-style calls hit it).
    (TWO, 0, measured(step_s={SPOT.shape: 1e13}), 9000, 0, MOVE, 1, "forecast finish never"),
    # Flex-start not coming within its patience: on-demand.
    (THREE, 1, measured(), 20000, 3600, MOVE, 2, "no flex-start capacity for 3600 s"),
    (THREE, 1, measured(), 20000, 600, STAY, 1, ""),
]


@pytest.mark.parametrize(("ladder", "at", "m", "finish_by", "waited", "kind", "to", "word"), TABLE)
def test_decide(ladder, at, m, finish_by, waited, kind, to, word):
    made = decide(ladder, at, m, now=0.0, finish_by=finish_by, look_every_s=300,
                  waited_s=waited, prices=PRICES)  # fmt: skip
    assert (made.kind, made.to) == (kind, to), made
    assert word in made.reason and "\n" not in made.reason
    if made.kind == MOVE:
        assert made.forecast is None or made.forecast.rung == ladder[to]


def test_what_the_ledger_says_the_run_measured():
    """Seconds per step pooled per shape from each attempt's restore to its end; the
    spot kinds' preemptions and hours; the mean priced restart."""
    t4 = dict(machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4", gpu_count=1, workers=2)
    records = [
        # 100 steps in 50 s on spot, preempted; its restart took 40 s.
        dict(t4, capacity="spot", start_step=0, last_step=100, saved_step=100, started=1000.0,
             resumed_at=1060.0, ended=1110.0, outcome="preempted", lost_restart_seconds=40.0),
        # 200 steps in 100 s on on-demand.
        dict(t4, capacity="on-demand", start_step=100, last_step=300, saved_step=300,
             started=1150.0, resumed_at=1200.0, ended=1300.0, outcome="success"),
        # Refused by the lease: no steps, no time.
        dict(t4, capacity="spot", started=1290.0, outcome="refused"),
        # Another shape on a node GKE says is preemptible: killed, 30 s for 10 steps.
        dict(machine_type="a2-highgpu-2g", gpu_type="nvidia-tesla-a100", gpu_count=2, workers=1,
             capacity="on-demand", node_kind="preemptible", start_step=300, last_step=310,
             saved_step=300, started=1400.0, resumed_at=1410.0, updated=1440.0, outcome="killed"),
    ]  # fmt: skip
    m = Measured.from_ledger(records, steps_total=1000, save_every_s=60.0)
    assert m.step_s == {SPOT.shape: 150 / 300, "1 x a2-highgpu-2g + 2 x nvidia-tesla-a100": 3.0}
    assert m.replicas == {SPOT.shape: 2, "1 x a2-highgpu-2g + 2 x nvidia-tesla-a100": 2}
    assert (m.preemptions, m.restart_s, m.steps_done, m.steps_left) == (1, 40.0, 300, 700)
    # Held from each start (start-up included): 1000-1110 and 1400-1440.
    assert m.preemptible_hours == pytest.approx((110 + 40) / 3600)
    assert Measured.from_ledger([], 10, 60.0).step_s == {}


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", None), ("6h", NOW + 21600), ("90m", NOW + 5400),
     ("2027-01-15T10:00:00Z", NOW + 7200), ("2027-01-15T19:00+09:00", NOW + 7200)],
)  # fmt: skip
def test_finish_by_is_a_duration_or_a_time_with_its_zone(text, expected):
    from spottrain.ladder.decide import finish_by_epoch

    assert finish_by_epoch(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "word"),
    [("tomorrow", "expected a duration"), ("2027-01-15T10:00", "no time zone"),
     ("2027-01-15T07:00:00Z", "already past")],
)  # fmt: skip
def test_a_finish_by_no_run_can_use_is_one_line(text, word):
    from spottrain.ladder import LadderError
    from spottrain.ladder.decide import finish_by_epoch

    with pytest.raises(LadderError, match=word):
        finish_by_epoch(text, NOW)


def test_a_deadline_even_the_fastest_rung_misses_is_said_in_one_line():
    """On-demand needs 180 + 4,500 s (1.3 h): a deadline 1 h away cannot be met."""
    from spottrain.ladder.decide import unreachable

    line = unreachable(TWO, measured(), now=0.0, finish_by=3600.0)
    assert "cannot be met" in line and "1.3 h for the 9000 steps left" in line
    assert "on-demand" in line and "\n" not in line
    assert unreachable(TWO, measured(), now=0.0, finish_by=5000.0) == ""
    assert unreachable(TWO, None, now=0.0, finish_by=10.0) == ""  # nothing measured yet


def test_the_engines_steady_speed_and_the_restart_gaps_count_when_there():
    """``seconds_per_step`` (the engine's steady speed) wins over the wall clock, which
    counts start-up; with no priced restart, the gap from an interrupted attempt's end
    to the next one's restore is the restart."""
    t4 = dict(machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4", gpu_count=1, workers=2)
    records = [
        # 100 steps in 50 s of wall clock, 0.2 s each steady; preempted at 1110.
        dict(t4, capacity="spot", start_step=0, last_step=100, saved_step=100, started=1000.0,
             resumed_at=1060.0, ended=1110.0, outcome="preempted", seconds_per_step=0.2),
        # Restored 30 s later; 100 steps at 0.3 s each steady.
        dict(t4, capacity="spot", start_step=100, last_step=200, saved_step=200, started=1120.0,
             resumed_at=1140.0, ended=1200.0, outcome="success", seconds_per_step=0.3),
    ]  # fmt: skip
    m = Measured.from_ledger(records, steps_total=1000, save_every_s=60.0)
    assert m.step_s == {SPOT.shape: pytest.approx((20 + 30) / 200)}
    assert m.restart_s == 30.0  # 1140 - 1110; the success ended nothing
    records[0].pop("seconds_per_step")
    assert Measured.from_ledger(records, 1000, 60.0).step_s == {SPOT.shape: (50 + 30) / 200}
    # A first attempt still in its first call: no restore, no steady speed, no speed yet
    # (its 15 steps over 12 s from its start are mostly TensorFlow's start-up).
    fresh = dict(t4, capacity="spot", start_step=0, last_step=15, started=1000.0,
                 updated=1012.0, outcome="running")  # fmt: skip
    assert Measured.from_ledger([fresh], 1000, 60.0).step_s == {}
    # Restored, but still in its first call (it traces): no speed until its steady one.
    fresh.update(resumed_at=1005.0, last_step=1)
    assert Measured.from_ledger([fresh], 1000, 60.0).step_s == {}
    fresh["seconds_per_step"] = 0.25
    assert Measured.from_ledger([fresh], 1000, 60.0).step_s == {SPOT.shape: 0.25}


def test_the_margin_is_a_setting_and_a_deadline_in_time_but_inside_it_is_said_so():
    # On-demand needs 180 s restart + 4,500 s: 4,680 s; its margin is 5 % of 4,500 = 225 s
    # or margin_s when larger. 4,920 s left: in time, inside a 300 s margin (4,980 s),
    # outside a 225 s one (4,905 s).
    m = measured(preemptions=50, preemptible_hours=1.0)  # spot hopeless: 0 % useful
    d = decide(TWO, 0, m, now=NOW, finish_by=NOW + 4920, look_every_s=60)
    assert (d.kind, d.to) == (MOVE, 1) and "leaves less than the margin" in d.reason, d
    d = decide(TWO, 0, m, now=NOW, finish_by=NOW + 4920, look_every_s=60, margin_s=60)
    assert (d.kind, d.to) == (MOVE, 1) and "to finish by" in d.reason, d
