"""The ladder's forecast and decision (spottrain/ladder/{forecast,decide}.py), by table.

Each figure is worked by hand in a comment: 9,000 steps left at 0.5 s is 4,500 s of
work; a move's restart is 180 s (measured); 300 s are held in hand (``margin_s``, as a
launcher given ``--margin_seconds 300`` holds; unset, a third of the restart: see
``test_the_margin_unset_is_a_third_of_the_restart``); a look is 300 s.
The prior's 1 preemption/h, a 180 s restart and a 600 s save interval leave spot
87.4 % useful (:func:`useful_share`, checked against a simulation below).
"""

from __future__ import annotations

import math
import random

import pytest

from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import (
    AHEAD,
    COST,
    DEADLINE,
    ESTIMATE,
    LATE,
    MOVE,
    PACE,
    PATIENCE,
    QUEUED,
    STAY,
    decide,
    held_in_hand,
)
from spottrain.ladder.forecast import (
    REALIZED_HALF_LIFE_H,
    Measured,
    Prior,
    age_weight,
    forecast,
    held_hours,
    preemption_rate,
    step_seconds,
    useful_share,
)

SPOT = Rung("spot", "n1-standard-8", "nvidia-tesla-t4", 1, 2, patience_s=1800)
FLEX = Rung("flex-start", "n1-standard-8", "nvidia-tesla-t4", 1, 2, patience_s=3600)
ON_DEMAND = Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 2)
TWO = Ladder((SPOT, ON_DEMAND))
THREE = Ladder((SPOT, FLEX, ON_DEMAND))
PRICES = {"spot": 0.3, "flex-start": 0.5, "on-demand": 1.0}
U1 = useful_share(1.0, 180, 600)  # 0.874


def measured(**kw) -> Measured:
    base = dict(steps_done=1000, steps_total=10000, step_s={SPOT.shape: 0.5},
                replicas={SPOT.shape: 2}, save_every_s=600.0, restart_s=180.0)  # fmt: skip
    return Measured(**{**base, **kw})


def simulated_share(rate_h: float, restart_s: float, save_s: float, hours: float = 20000.0):
    """Saved progress over time held, from seeded Poisson preemptions (a renewal, run)."""
    rng, t, saved = random.Random(7), 0.0, 0.0
    while t < hours * 3600:
        life = rng.expovariate(rate_h / 3600)
        if life > restart_s:
            saved += save_s * math.floor((life - restart_s) / save_s)
        t += life
    return saved / t


@pytest.mark.parametrize(("rate", "restart", "save"), [(1, 180, 600), (4, 300, 600),
                         (8, 900, 600), (16, 300, 600), (0.5, 900, 60)])  # fmt: skip
def test_the_useful_share_is_what_poisson_preemptions_leave(rate, restart, save):
    assert useful_share(rate, restart, save) == pytest.approx(
        simulated_share(rate, restart, save), rel=0.03, abs=0.002
    )


def test_the_useful_share_by_hand():
    # 4/h, 5 min restart, 10 min saves: the 0.50, where 1 - 4 (300 + 300)/3600
    # gave 0.33; 8/h gave a negative share, never here.
    assert useful_share(4, 300, 600) == pytest.approx(0.504, abs=0.001)
    assert 0 < useful_share(8, 900, 600) < 0.1 and useful_share(0, 900, 600) == 1.0
    assert useful_share(2, 300, 0) == pytest.approx(math.exp(-2 * 300 / 3600))


def test_the_forecast_by_hand():
    m = measured()
    here = forecast(ON_DEMAND, m, Prior(), moving=False, price_per_hour=0.73)
    assert (here.work_s, here.useful, here.finish_s) == (4500.0, 1.0, 4500.0)
    spot = forecast(SPOT, m, Prior(), moving=False)
    assert spot.rate_per_h == 1.0 and spot.useful == pytest.approx(U1)
    assert spot.finish_s == pytest.approx(4500 / U1)  # 5,148 s
    moved = forecast(ON_DEMAND, m, Prior(), moving=True, price_per_hour=0.73)
    assert moved.start_s == 180 and moved.finish_s == 4680
    assert moved.cost == pytest.approx(0.73 * 2 * 4680 / 3600)  # the restart is paid
    # A queued rung may wait its whole patience before it trains.
    assert forecast(FLEX, m, Prior(), moving=True).finish_s == 180 + 3600 + 4500
    # Nothing measured: the prior's restart (900 s: it errs towards the backstop).
    assert forecast(ON_DEMAND, measured(restart_s=None), Prior(), moving=True).start_s == 900


def test_the_rate_forgets_and_speeds_scale_by_replicas():
    assert preemption_rate(measured(preemptions=3, preemptible_hours=2.0), Prior()) == 4 / 3
    assert preemption_rate(measured(), Prior(preemptions_per_hour=0.5, weight_hours=2)) == 0.5
    # Each preemption and hour weighs half as much every 2 h.
    assert age_weight(0) == 1.0 and age_weight(7200) == pytest.approx(0.5)
    # An hour held that ended just now weighs (1 - 0.5**0.5) / ln 2 x 2 h = 0.845 h.
    assert held_hours(0, 3600, 3600) == pytest.approx((1 - 0.5**0.5) / math.log(2) * 2)
    assert held_hours(0, 3600, 3600 + 7200) == pytest.approx(held_hours(0, 3600, 3600) / 2)
    # 16/h for 45 min then none: 4 h later the burst weighs a quarter.
    burst = measured(preemptions=12 * age_weight(4 * 3600),
                     preemptible_hours=held_hours(0, 2700, 2700 + 4 * 3600))  # fmt: skip
    assert preemption_rate(burst, Prior()) < 0.5 * preemption_rate(
        measured(preemptions=12, preemptible_hours=0.75), Prior())  # fmt: skip
    four = Rung("on-demand", "n1-standard-16", "nvidia-tesla-t4", 2, 2)
    assert step_seconds(four, measured()) == 0.25  # 0.5 s on 2 replicas, 4 here
    assert step_seconds(four, measured(step_s={})) is None
    assert forecast(four, measured(step_s={}), Prior(), moving=True).finish_s == math.inf


# Spot hopeless at 40 preemptions in 2 h: (1 + 40) / 3 = 13.7/h leave it 13 % useful:
# 0.3 >= 1.5 x 1.0 x 0.13 (LEAVE_SHARE): its useful hour is too dear.
HOPELESS = dict(preemptions=40, preemptible_hours=2.0)
# Started 16,000 s before now with a deadline 8,000 s after it: 24,000 s for 5,000 s
# of work and a 180 s restart: a slack of 18,820 s, half of it (PACE_SHARE) shrinking
# to 0 at the deadline: 0.5 x 18,820 x 8,000 / 24,000 = 3,137 s should be in hand;
# on-demand from the next look needs 4,680 + 300 = 4,980 s, so 3,020 s are: behind.
# Started 12,000 s before: 0.5 x 14,820 x 8,000 / 20,000 = 2,964 s; 3,020 are: ahead.
BEHIND, AHEAD_OF_IT = dict(began_at=-16000.0), dict(began_at=-12000.0)

TABLE = [
    # (ladder, at, measured, finish_by, waited, running, kind, to, rule, a word of the reason)
    # No deadline: the patience rule.
    (TWO, 0, measured(), None, 600, None, STAY, 0, "", ""),
    (TWO, 0, measured(), None, 1800, None, MOVE, 1, PATIENCE, "no spot capacity for 1800 s"),
    # A deadline and no step time, measured or estimated: the backstop until one is.
    (TWO, 0, measured(step_s={}), 9000, 0, None, MOVE, 1, ESTIMATE, "measured or estimated"),
    (TWO, 1, measured(step_s={}), 9000, 0, None, STAY, 1, "", "no step time measured yet"),
    # Ample time: on spot; on-demand could still make it from the next look.
    (TWO, 0, measured(), 20000, 0, None, STAY, 0, "", "if moved to at the next look"),
    # Safety net: on-demand needs 180 + 4,500 s + 300 s held = 4,980 s: from the next
    # look (300 s) 5,280 s; with 5,200 s left it is in time only from now: move now.
    (TWO, 0, measured(), 5280, 0, None, STAY, 0, "", "forecast finish"),
    (TWO, 0, measured(), 5200, 0, None, MOVE, 1, DEADLINE, "to finish by"),
    # Too late for every rung: the fastest (on-demand, 4,680 s), said.
    (TWO, 0, measured(), 4000, 0, None, MOVE, 1, LATE, "cannot be met on any rung"),
    (TWO, 1, measured(), 4000, 0, None, STAY, 1, "", ""),
    # Cost: spot's useful hour too dear (HOPELESS); at 3 in 2 h it is not.
    (TWO, 0, measured(**HOPELESS), 90000, 0, None, MOVE, 1, COST, "13.7 preemptions/h"),
    (TWO, 0, measured(preemptions=3, preemptible_hours=2.0), 90000, 0, None, STAY, 0, "", ""),
    # After a preemption (not running), staying costs a restart too: 5,148 + 180 s on
    # spot; the safety net is unchanged (on-demand's forecast holds its restart).
    (TWO, 0, measured(), 5280, 0, False, STAY, 0, "", "forecast finish"),
    # Waited out spot's patience with time in hand: the cheapest safe backstop.
    (TWO, 0, measured(), 20000, 1800, None, MOVE, 1, DEADLINE, "no spot capacity for 1800 s"),
    # Pace: waiting for spot capacity behind the pace: on-demand; ahead of it: wait.
    (TWO, 0, measured(**BEHIND), 8000, 600, False, MOVE, 1, PACE, "behind the pace"),
    (TWO, 0, measured(**AHEAD_OF_IT), 8000, 600, False, STAY, 0, "", ""),
    (TWO, 0, measured(**BEHIND), 8000, 0, None, STAY, 0, "", ""),  # training: it stays
    # Back to spot from on-demand: coming back later needs 4,680 + 300 s; the stint
    # needs a restart and a look beyond the pace (none here): 5,460 s left and it goes.
    (TWO, 1, measured(), 5460, 0, None, MOVE, 0, AHEAD, "ahead of the deadline"),
    (TWO, 1, measured(), 5400, 0, None, STAY, 1, "", ""),
    # ... not while queued for it, nor when spot is hopeless, nor when behind the pace.
    (TWO, 1, measured(), 20000, 60, None, STAY, 1, "", ""),
    (TWO, 1, measured(**HOPELESS), 20000, 0, None, STAY, 1, "", ""),
    (TWO, 1, measured(**BEHIND), 8000, 0, None, STAY, 1, "", ""),
    # Three rungs: flex-start (0.5) waits at most 1 h: 180 + 3,600 + 4,500 + 300 =
    # 8,580 s. With 9,000 s left it is safe from the next look: stay on spot. With
    # 8,700 s only from now. Flex-start now: 0.5 x 2 x 4,680 s = 1.30. Spot until
    # on-demand's last safe moment (8,700 - 4,680 - 300 = 3,720 s: 0.3 x 2 x 3,720 s =
    # 0.62, 3,252 s of the work done at 87.4 %), then on-demand for the remaining 27.7 %
    # (2 x 4,680 s x 0.277 = 0.72): 1.34. Move to flex-start.
    (THREE, 0, measured(), 9000, 0, None, STAY, 0, "", "flex-start could still finish"),
    (THREE, 0, measured(), 8700, 0, None, MOVE, 1, QUEUED, "flex-start now (forecast 1.30)"),
    # At 8,875 s spot's window is 3,895 s: 0.649 + 2.6 x 0.243 = 1.28 < 1.30: stay.
    (THREE, 0, measured(), 8875, 0, None, STAY, 0, "", "on-demand could still finish"),
    # Only on-demand is still in time: 4,980 s.
    (THREE, 0, measured(), 5200, 0, None, MOVE, 2, DEADLINE, "to finish by"),
    # Spot only, and 200 preemptions in an hour leave it ~0 % useful: said, no crash.
    (Ladder((SPOT,)), 0, measured(preemptions=200, preemptible_hours=1.0), 9000, 0, None,
     STAY, 0, LATE, "cannot be met on any rung"),
    # A step of 1e13 s: a forecast finish past what a clock can say is "never", not an
    # OverflowError that ends the launcher (the simulator's GKE-style calls hit it).
    (TWO, 0, measured(step_s={SPOT.shape: 1e13}), 9000, 0, None, MOVE, 1, LATE, "finish never"),
    # Flex-start not coming within its patience: on-demand.
    (THREE, 1, measured(), 20000, 3600, None, MOVE, 2, DEADLINE, "no flex-start capacity"),
    (THREE, 1, measured(), 20000, 600, None, STAY, 1, "", ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ladder", "at", "m", "finish_by", "waited", "running", "kind", "to", "rule", "word"), TABLE
)
def test_decide(ladder, at, m, finish_by, waited, running, kind, to, rule, word):
    made = decide(ladder, at, m, now=0.0, finish_by=finish_by, look_every_s=300,
                  waited_s=waited, running=running, prices=PRICES, margin_s=300)  # fmt: skip
    assert (made.kind, made.to) == (kind, to), made
    assert word in made.reason and "\n" not in made.reason, made
    if made.kind == MOVE:
        assert made.rule == rule, made
        assert made.forecast is None or made.forecast.rung == ladder[to]


def test_the_prior_step_time_binds_the_deadline_before_a_step_is_measured():
    """A drought at the start: no step yet, but the estimate forecasts on-demand's
    finish, so the safety net moves in time (and the estimate scales to the rung)."""
    nothing = measured(step_s={}, replicas={})
    prior = Prior(step_s=0.5, restart_s=180.0)
    for fb, kind in ((5280, STAY), (5200, MOVE)):
        made = decide(TWO, 0, nothing, now=0.0, finish_by=fb, look_every_s=300, waited_s=600,
                      prior=prior, margin_s=300)  # fmt: skip
        assert made.kind == kind, made


def test_returns_after_a_cost_or_pace_move_wait_longer_each_time():
    """Spot left for its cost: back only once its useful hour is at most 0.6 of
    on-demand's (0.3 < 0.6 x 0.874), and 1 h after, then 2, then 4."""

    def to(left_s: float, returns: int) -> int:
        m = measured(left_by=COST, left_spot_at=-left_s, returns=returns)
        return decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300, prices=PRICES).to

    assert [to(3500, 0), to(3700, 0), to(7100, 1), to(7300, 1), to(14500, 2)] == [1, 0, 1, 0, 0]
    # A useful hour between 0.6 and 1.5 of on-demand's: left for its cost, it stays away;
    # left for the deadline or the pace, it goes back (the bands do not overlap).
    meh = dict(preemptions=15, preemptible_hours=2.0, left_spot_at=-90000.0)  # 5.3/h, 0.40
    for left_by, to in ((COST, 1), (DEADLINE, 0), (PACE, 0)):
        m = measured(**meh, left_by=left_by)
        assert decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300,
                      prices=PRICES).to == to  # fmt: skip
    # Left for the pace an hour ago, after one return already: it waits 2 h.
    m = measured(left_by=PACE, left_spot_at=-3700.0, returns=1)
    assert decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300).to == 1


# What spot realized (rule 2, by the ledger): 2 h held at 0.3 x 2 workers is 1.20 paid;
# a step on on-demand costs 1.0 x 2 x 0.5 s = 0.000278, so 4,000 steps kept are worth
# 1.11 there. Allowed: 0.008 of the whole run on on-demand (10,000 steps: 0.022), at
# least 3 mishaps of spot (3 x 0.3 x 2 x (180 + 600) s = 0.39). 30 preemptions in 2 h
# are (1 + 30) / 3 = 10.3/h: 22.4 % useful, 0.3 >= 0.224 x 1.25 (its noise: 480 s x
# sqrt(10.3 / 3), in hours) so the model agrees spot is dearer, but not 1.5x dearer.
# 3 preemptions in 2 h (1.3/h) leave spot ~84 % useful: the model disagrees.
REALIZED = [
    # (measured, kind, to, rule, a word of the reason)
    (dict(preemptions=30, preemptible_hours=2.0, held_h=2.0, kept_steps=0.0),
     MOVE, 1, COST, "0 steps kept: 1.20 more than on-demand would have"),
    # 4,000 steps kept: 1.20 - 1.11 = 0.09 of regret, within the 0.39 allowed.
    (dict(preemptions=30, preemptible_hours=2.0, held_h=2.0, kept_steps=4000.0),
     STAY, 0, "", ""),
    # Nothing kept, but the rate says spot is cheaper: one unlucky stretch, stay.
    (dict(preemptions=3, preemptible_hours=2.0, held_h=2.0, kept_steps=0.0), STAY, 0, "", ""),
]  # fmt: skip


@pytest.mark.parametrize(("m", "kind", "to", "rule", "word"), REALIZED)
def test_spot_is_left_once_what_it_realized_cost_more_than_allowed(m, kind, to, rule, word):
    made = decide(TWO, 0, measured(**m), now=0.0, finish_by=90000, look_every_s=300,
                  prices=PRICES, margin_s=300)  # fmt: skip
    assert (made.kind, made.to, made.rule) == (kind, to, rule), made
    assert word in made.reason, made


def test_a_return_needs_spot_to_have_realized_no_dearer_than_the_backstop():
    """Left for its cost 25 h ago: back only when spot's realized cost per unit of work
    (pulled to the prior's by 0.05 h at 87.4 %) is at most 0.6 of on-demand's. 2 h
    held and nothing kept: 0.3 x 2 x 2.05 h = 1.23 > 0.6 x 0.000278 x 315 steps; 2 h
    and 12,000 steps kept (83 %): 1.23 <= 0.6 x 0.000278 x 12,315 = 2.05: back. Left for
    the deadline, only not dearer: 2 h and 4,000 steps (1.23 > 1.0 x 1.20) stays away."""

    def to(left_by: str, **kw) -> int:
        m = measured(left_by=left_by, left_spot_at=-90000.0, **kw)
        return decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300, prices=PRICES).to

    assert to(COST, held_h=2.0, kept_steps=0.0) == 1
    assert to(COST, held_h=2.0, kept_steps=12000.0) == 0
    assert to(DEADLINE, held_h=2.0, kept_steps=4000.0) == 1
    assert to(DEADLINE, held_h=2.0, kept_steps=5000.0) == 0
    # Without prices (the JobSet launcher) nothing is realized in money: back.
    m = measured(left_by=COST, left_spot_at=-90000.0, held_h=2.0, kept_steps=0.0)
    assert decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300).to == 0


def test_a_return_after_a_pace_move_waits_as_long_as_the_drought_had_lasted():
    """Left for the pace 3,700 s ago (past the first hour's wait), spot last held 40,000 s
    before now: the drought had lasted 36,300 s when it was left, so the run waits that
    long. Spot last held 5,000 s before now: 1,300 s of drought, the hour's wait holds."""

    def to(**kw) -> int:
        m = measured(left_by=PACE, left_spot_at=-3700.0, began_at=-40000.0, **kw)
        return decide(TWO, 1, m, now=0.0, finish_by=90000, look_every_s=300).to

    assert to() == 1  # never held: the drought is the whole run so far
    assert to(spot_held_at=-40000.0) == 1
    assert to(spot_held_at=-5000.0) == 0


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
    assert (m.restart_s, m.steps_done, m.steps_left) == (40.0, 300, 700)
    # One preemption, weighed by its age at the newest record (330 s: 0.97 of one).
    assert m.preemptions == pytest.approx(age_weight(1440 - 1110))
    # Held from each start (start-up included): 1000-1110 and 1400-1440, weighed by age.
    assert m.preemptible_hours == pytest.approx(
        held_hours(1000, 1110, 1440) + held_hours(1400, 1440, 1440)
    )
    assert m.preemptible_hours == pytest.approx((110 + 40) / 3600, rel=0.05)
    # What spot realized (weighed with the slower half-life): 150 s held, the first
    # attempt's 100 steps kept (the last's 10 steps were not saved), spot held until 1440.
    slow = REALIZED_HALF_LIFE_H
    assert m.held_h == pytest.approx(held_hours(1000, 1110, 1440, slow)
                                     + held_hours(1400, 1440, 1440, slow))  # fmt: skip
    assert m.kept_steps == pytest.approx(100 * held_hours(1000, 1110, 1440, slow) * 3600 / 110)
    assert m.kept_steps == pytest.approx(100, rel=0.01)
    assert m.spot_held_at == 1440
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
     ("2027-01-15T07:00:00Z", "already past"), ("0", "less than a minute away"),
     ("0.001s", "less than a minute away"), ("2027-01-15T08:00:30Z", "less than a minute"),
     ("99999999999999999999d", "more than a year away"),
     ("2099-01-01T00:00:00Z", "more than a year away")],
)  # fmt: skip
def test_a_finish_by_no_run_can_use_is_one_line(text, word):
    from spottrain.ladder import LadderError
    from spottrain.ladder.decide import finish_by_epoch

    with pytest.raises(LadderError, match=word):
        finish_by_epoch(text, NOW)


def test_a_deadline_even_the_fastest_rung_misses_is_said_in_one_line():
    """On-demand needs 180 + 4,500 s (1.3 h): a deadline 1 h away cannot be met; from
    the prior's step time before any is measured too."""
    from spottrain.ladder.decide import unreachable

    line = unreachable(TWO, measured(), now=0.0, finish_by=3600.0)
    assert "cannot be met" in line and "1.3 h for the 9000 steps left" in line
    assert "on-demand" in line and "\n" not in line
    assert unreachable(TWO, measured(), now=0.0, finish_by=5000.0) == ""
    assert unreachable(TWO, None, now=0.0, finish_by=10.0) == ""  # nothing measured yet
    nothing = measured(step_s={}, replicas={})
    assert unreachable(TWO, nothing, now=0.0, finish_by=10.0) == ""  # nor estimated
    line = unreachable(TWO, nothing, now=0.0, finish_by=3600.0,
                       prior=Prior(step_s=0.5, restart_s=180.0))  # fmt: skip
    assert "1.3 h for the 9000 steps left at the estimated speed" in line


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
    # On-demand needs a 180 s restart + 4,500 s: 4,680 s, and holds margin_s (here 300 s;
    # unset 60 s, a third of the restart). 4,920 s left: in time, inside a 300 s margin
    # (4,980 s), outside a 60 s one (4,740 s). Spot is hopeless here (1.7 % useful), so it
    # cannot make it either.
    m = measured(preemptions=50, preemptible_hours=1.0)
    d = decide(TWO, 0, m, now=NOW, finish_by=NOW + 4920, look_every_s=60, margin_s=300)
    assert (d.kind, d.to) == (MOVE, 1) and "leaves less than the margin" in d.reason, d
    # With 60 s held, on-demand is in time from the next look (60 + 4,680 + 60 = 4,800 s):
    # spot stays (no prices: its cost is not compared); at 4,790 s left only from now.
    d = decide(TWO, 0, m, now=NOW, finish_by=NOW + 4920, look_every_s=60, margin_s=60)
    assert (d.kind, d.to) == (STAY, 0), d
    d = decide(TWO, 0, m, now=NOW, finish_by=NOW + 4790, look_every_s=60, margin_s=60)
    assert (d.kind, d.to) == (MOVE, 1) and "to finish by" in d.reason, d


@pytest.mark.parametrize("kept", ["tomorrow", None, True, float("nan"), [1]])
def test_a_kept_deadline_that_is_not_a_time_is_one_line(tmp_path, kept):
    """A ledger's kept finish_by (hand-edited, foreign) that is not a number: one line
    (exit 64) at the launcher's first look, where it was a TypeError. ``None`` is a run
    without a deadline, kept as such."""
    from spottrain.ladder import LadderError
    from spottrain.ladder.decide import kept_deadline
    from spottrain.ledger import moves

    moves.set_ladder(str(tmp_path), {"rungs": ["spot"], "finish_by": kept, "asked": "6h",
                                     "set_at": NOW})  # fmt: skip
    if kept is None:
        assert kept_deadline(str(tmp_path), "6h", ["spot"], NOW) is None
        return
    with pytest.raises(LadderError, match="not a time") as err:
        kept_deadline(str(tmp_path), "6h", ["spot"], NOW)
    assert "\n" not in str(err.value) and err.value.code == 64


# Unset, the margin is a third of the restart, at least 60 s: with the 180 s restart
# measured, 60 s. On-demand needs 4,680 s: from the next look (300 s) 4,980 + 60 =
# 5,040 s; 5,040 s left: stay on spot; 5,000 s: only from now, move. Before a restart
# is measured, the prior's 900 s: 300 s held, and 900 + 4,500 + 300 + 300 s from the
# next look.
MARGIN_TABLE = [
    (measured(), 5040, STAY, ""),
    (measured(), 5000, MOVE, DEADLINE),
    (measured(restart_s=None), 6000, STAY, ""),
    (measured(restart_s=None), 5990, MOVE, DEADLINE),
    # A 15 min restart measured: 300 s, as the prior's.
    (measured(restart_s=900.0), 6000, STAY, ""),
    (measured(restart_s=900.0), 5990, MOVE, DEADLINE),
]


@pytest.mark.parametrize(("m", "finish_by", "kind", "rule"), MARGIN_TABLE)
def test_the_margin_unset_is_a_third_of_the_restart(m, finish_by, kind, rule):
    made = decide(TWO, 0, m, now=0.0, finish_by=finish_by, look_every_s=300, prices=PRICES)
    assert made.kind == kind and made.rule == rule, made
    assert held_in_hand(measured(restart_s=30.0), Prior()) == 60.0
    assert held_in_hand(measured(), Prior()) == 60.0
    assert held_in_hand(measured(restart_s=None), Prior()) == 300.0
    assert held_in_hand(measured(restart_s=1800.0), Prior()) == 600.0
