"""Which rung to train on now, from the ladder, the clock and what the run measured (pure).

Called at each decision point: capacity not coming, a preemption, and every look
(``look_every_s``). Both launchers (Vertex's walk, the JobSet launcher's deadline check)
and ``bench/ladder_sim.py`` call :func:`decide` the same way, with what the ledger knows
at that moment. Without a deadline it is the patience rule: a rung whose capacity does
not come within its patience gives way to the next. With ``finish_by``:

1. **Safety net** (``deadline``). On a preemptible rung, stay while a rung that cannot
   be preempted (a *backstop*) could still finish in time if moved to at the next
   look; move before that stops being true (Wu et al., "Can't Be Late", NSDI '24,
   section 3). The forecast already holds what one mishap puts at risk (the move's
   restart, the steps since the last save); ``margin_s`` is held beyond it (unset:
   a third of the restart, :func:`held_in_hand`).
2. **Cost** (``cost``). Leave spot when preemptions make its useful hour
   :data:`LEAVE_SHARE` times the backstop's
   (:func:`~spottrain.ladder.forecast.useful_share`), or when what it realized (hours
   paid against steps kept) cost more than the backstop would have by more than
   :data:`REALIZED_BUDGET` of the run and the rate agrees (:func:`realized_regret`).
3. **Pace** (``pace``). Waiting for spot capacity while behind the pace
   (:func:`pace_s`: part of the deadline's slack, shrinking evenly to the deadline),
   train on the backstop instead (Wu et al.'s Uniform Progress, section 5.2.2, looser).
4. **Back to spot when ahead** (``ahead``). On a backstop that trains, go back to the
   first preemptible rung when the backstop would still be in time after the pace, a
   restart there and a look (hysteresis against rules 1 and 3) and spot's useful hour
   is no dearer (:data:`LEAVE_SHARE`; :data:`RETURN_SHARE` after a cost move). After a
   cost or pace move a return waits :data:`RETURN_WAIT_S`, doubled for each return
   before: a rate that looks lower only because it was forgotten, or a drought that
   goes on, is tried less and less often; after a pace move at least as long as the
   drought had lasted. A return also needs what spot realized to be no dearer
   (:func:`realized_dearer`).
5. **A queued rung closing** (``queued``). A cheaper queued backstop (flex-start) in
   time now but not at the next look is moved to now when that costs less than spot
   until the last moment.
6. **Out of time** (``late``). When no rung can make it, the rung forecast to finish
   first, said.

Before any step time, measured or estimated (``Prior.step_s``), the work left could
need all the time there is: the run starts on the backstop (``estimate``), and rule 4
brings it back once a step is measured. Each move names its rule (:data:`RULES`).
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from spottrain.ladder import Ladder, LadderError, duration_s
from spottrain.ladder.forecast import (
    Forecast,
    Measured,
    Prior,
    forecast,
    restart_seconds,
    step_seconds,
    useful_share,
)

# A finish_by nearer than this is "now" (finish_by=0): no gang starts in it. One further
# than this is a typo (99999999999999999999d overflowed the clock); Vertex's longest
# custom job is 7 days, a KFP run's timeout is the pipeline's.
MIN_FINISH_BY_S = 60.0
MAX_FINISH_BY_S = 366 * 86400.0

# Held in hand beyond a forecast (the launchers' --margin_seconds; unset: sized here),
# for a restart slower than measured. What one mishap puts at risk is already in every
# forecast: a move's restart (Forecast.start_s) and the steps since the last save, as
# the work left counts from the newest saved step. What is left at risk is the restart
# itself running long, so the margin is sized by it: MARGIN_SHARE of the restart (the
# prior's 900 s: 300 s), at least MARGIN_MIN_S (last-safe's 60 s). Each second held
# costs far more than a second on the backstop: at 0.5 preemptions/h spot loses 4 % of
# its time, so a second more held moves the run to the backstop ~25 s of spot training
# earlier; with a 1.02x slack, 240 s more held cost 0.03-0.07 of on-demand's cost.
MARGIN_SHARE = 1 / 3
MARGIN_MIN_S = 60.0
# Leave spot for its cost only where its useful hour costs this much more than the
# backstop's, and come back only where it costs at most RETURN_SHARE of it: a rate
# measured over a burst overshoots, and each move costs a restart.
LEAVE_SHARE = 1.5
RETURN_SHARE = 0.6
# The pace: the share of the deadline's slack held per second of work left, below
# which a run waiting for spot capacity trains on the backstop instead (rule 3).
PACE_SHARE = 0.5
# A return after a cost or pace move waits this long after spot was left, doubled for
# each return before it.
RETURN_WAIT_S = 3600.0
# Spot judged by what it realized (Measured.held_h, .kept_steps), not only by a
# modelled rate: its hours paid less the backstop's price of the work they kept is the
# regret of having been on spot rather than on the backstop, and on a spot dearer per
# unit of work it grows at the rate of the gap. The run leaves once that regret is more
# than REALIZED_BUDGET of the backstop's cost of the whole run and more than
# REALIZED_MISHAPS mishaps (a restart and a save interval of spot), and the rate's model
# agrees spot is dearer beyond its own noise (LEAVE_NOISE x the rate's Poisson error
# times what a preemption loses): so what the run pays beyond the backstop alone is
# about the budget, and one unlucky hour on a good spot is not taken for a bad one. The
# rate forgave 16/h as ~12/h for hours; what was realized does not. A return needs
# spot's realized cost per unit of work, pulled to the prior's by REALIZED_PRIOR_H
# hours, to be no dearer (at most RETURN_SHARE of it after a cost move): the evidence is
# weighed by age but the ratio is not, so a spot that realized nothing is tried again
# only once its evidence has faded to the prior's.
REALIZED_BUDGET = 0.008
REALIZED_MISHAPS = 3.0
REALIZED_PRIOR_H = 0.05
LEAVE_NOISE = 1.0
STAY, MOVE = "stay", "move"
# The rules, as a move names the one that made it (the ledger's Move.rule).
PATIENCE, ESTIMATE, DEADLINE, COST, PACE, AHEAD, QUEUED, LATE = RULES = (
    "patience", "estimate", "deadline", "cost", "pace", "ahead", "queued", "late",
)  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """Stay on rung ``to`` (== the current one) or move to it, with why and its forecast."""

    kind: str
    to: int
    reason: str
    forecast: Forecast | None = None
    rule: str = ""


def with_estimate(ladder: Ladder, measured: Measured, prior: Prior) -> Measured:
    """``measured``, or before any step time was measured the prior's, on rung 0's shape."""
    if measured.step_s or not prior.step_s:
        return measured
    first = ladder[0]
    return replace(measured, step_s={first.shape: prior.step_s},
                   replicas={first.shape: first.replicas})  # fmt: skip


def held_in_hand(measured: Measured, prior: Prior) -> float:
    """Seconds held beyond a forecast when the launcher sets none.

    :data:`MARGIN_SHARE` of the restart (measured, else the prior's), at least
    :data:`MARGIN_MIN_S`: 300 s before a restart is measured (the prior's 900 s), 100 s
    once one of 5 min is.
    """
    return max(MARGIN_MIN_S, MARGIN_SHARE * restart_seconds(measured, prior))


def utc_clock(t: float) -> str:
    """``HH:MM UTC`` of epoch seconds ``t``: how deadlines and moves are said.

    A forecast finish beyond what the clock can say (a rung ~0 % useful: a finish
    1e16 s away) is "never", not an OverflowError that would end the launcher.
    """
    try:
        return time.strftime("%H:%M", time.gmtime(float(t))) + " UTC"
    except (OverflowError, OSError, ValueError):
        return "never"


def decide(
    ladder: Ladder,
    at: int,
    measured: Measured,
    *,
    now: float,
    finish_by: float | None,
    look_every_s: float,
    waited_s: float = 0.0,
    running: bool | None = None,
    prior: Prior | None = None,
    prices: Mapping[str, float] | None = None,
    margin_s: float | None = None,
) -> Decision:
    """The rung to be on.

    Args:
        ladder: The rungs (checked).
        at: The rung the run is on (or waits for) now.
        measured: What the run measured (the ledger's, :meth:`Measured.from_ledger`).
        now: Epoch seconds.
        finish_by: The deadline, epoch seconds (``None``: none).
        look_every_s: Seconds until the next decision point at the latest.
        waited_s: How long the run has waited for rung ``at``'s capacity (0: it runs).
        running: Whether the run trains on rung ``at`` now (default: ``waited_s == 0``);
            ``False`` after a preemption there, so staying costs a restart too.
        prior: What is assumed until measured (default: :class:`Prior`'s).
        prices: One worker's price per hour by capacity kind (the cost rules and the
            forecast's cost); ``None``: cost is not compared, and the ladder's order
            is taken as cheapest first.
        margin_s: The time held in hand beyond a forecast; ``None``: sized by the
            restart (:func:`held_in_hand`).
    """
    prices, prior = prices or {}, prior or Prior()
    here = ladder[at]
    running = waited_s <= 0 if running is None else running
    patience_used = waited_s >= here.patience_s and at + 1 < len(ladder)
    no_capacity = f"no {here.capacity} capacity for {waited_s:.0f} s"
    if finish_by is None:
        if patience_used:
            return Decision(MOVE, at + 1, f"{no_capacity} (its patience)", rule=PATIENCE)
        return Decision(STAY, at, "")
    measured = with_estimate(ladder, measured, prior)
    backstops = [i for i, r in enumerate(ladder.rungs) if not r.preemptible]
    if not measured.step_s:
        if here.preemptible and backstops:
            to = backstops[0]
            return Decision(MOVE, to, (
                f"no step time measured or estimated (prior_step_seconds): the work left "
                f"could need all the time to {utc_clock(finish_by)}, so "
                f"{ladder[to].capacity} until one is measured"
            ), rule=ESTIMATE)  # fmt: skip
        if patience_used:
            return Decision(MOVE, at + 1, f"no step time measured yet: {no_capacity}",
                            rule=PATIENCE)  # fmt: skip
        return Decision(STAY, at, "no step time measured yet")

    forecasts = [
        forecast(rung, measured, prior, moving=i != at or not running,
                 price_per_hour=prices.get(rung.capacity))
        for i, rung in enumerate(ladder.rungs)
    ]  # fmt: skip
    hold = held_in_hand(measured, prior) if margin_s is None else margin_s

    def in_time(f: Forecast, t: float) -> bool:
        return t + f.finish_s + hold <= finish_by

    def cheapest(fs: list[Forecast]) -> Forecast:
        return min(fs, key=lambda f: (prices.get(f.rung.capacity, math.inf), f.finish_s))

    stay = forecasts[at]
    if not here.preemptible and waited_s < here.patience_s:
        # Only from a backstop that trains: one still queued was chosen because spot did
        # not come, and its patience says how long to give it.
        back = running and _back_to_spot(ladder, at, forecasts, measured, prior, prices, now=now,
                             finish_by=finish_by, look_every_s=look_every_s, hold=hold)  # fmt: skip
        return back or Decision(STAY, at, "", stay)
    others = [forecasts[i] for i in backstops if i != at]
    safe_later = [f for f in others if in_time(f, now + look_every_s)]
    if here.preemptible and not patience_used and safe_later:
        there = cheapest(safe_later)
        price_here, price_there = prices.get(here.capacity), prices.get(there.rung.capacity)
        dearer = bool(price_here and price_there
                      and price_here >= LEAVE_SHARE * price_there * stay.useful)  # fmt: skip
        if stay.useful <= 0 or dearer:
            return _move(ladder, there, (
                f"{stay.rate_per_h:.1f} preemptions/h leave spot {stay.useful:.0%} useful: its "
                f"useful hour costs more than {there.rung.capacity}'s"
            ), COST)  # fmt: skip
        regret = realized_regret(stay, there, measured, prior, prices)
        noise = _noise(stay, measured, prior)
        model_dearer = bool(price_here and price_there
                            and price_here >= price_there * stay.useful * (1 + noise))  # fmt: skip
        if regret is not None and regret[0] > regret[1] and model_dearer:
            return _move(ladder, there, (
                f"{here.capacity} paid {measured.held_h:.1f} h for {measured.kept_steps:.0f} "
                f"steps kept: {regret[0]:.2f} more than {there.rung.capacity} would have, "
                f"beyond the {regret[1]:.2f} allowed"
            ), COST)  # fmt: skip
        # Waiting for spot capacity burns time in hand: behind the pace, wait on the
        # backstop instead, training (back to spot once ahead again: rule 3).
        spare = finish_by - now - there.finish_s - hold
        behind = pace_s(there, measured, now, finish_by)
        if not running and waited_s > 0 and spare < behind:
            return _move(ladder, there, (
                f"{no_capacity}: {max(spare, 0) / 60:.0f} min in hand for "
                f"{utc_clock(finish_by)}, behind the pace ({behind / 60:.0f} min for the work "
                f"left); on {there.rung.capacity} until ahead again"
            ), PACE)  # fmt: skip
        # A cheaper backstop in time now but not at the next look (a queued one): move to
        # it now when that costs less than spot until the last moment, then `there`.
        closing = [f for f in others if f not in safe_later and f.cost is not None
                   and in_time(f, now)]  # fmt: skip
        then = _stay_then(stay, there, finish_by - now, price_here, hold)
        for f in sorted(closing, key=lambda f: f.cost):
            if then is not None and f.cost < then:
                return _move(ladder, f, (
                    f"to finish by {utc_clock(finish_by)} at the lowest cost: {f.rung.capacity} "
                    f"now (forecast {f.cost:.2f}) rather than {here.capacity} then "
                    f"{there.rung.capacity} ({then:.2f})"
                ), QUEUED)  # fmt: skip
        return Decision(STAY, at, (
            f"forecast finish {utc_clock(now + stay.finish_s)}; {there.rung.capacity} could "
            f"still finish by {utc_clock(finish_by)} if moved to at the next look"
        ), stay)  # fmt: skip
    safe_now = [f for f in others if in_time(f, now)]
    if safe_now:
        there = cheapest(safe_now)
        waited = f"{no_capacity}; " if waited_s else ""
        return _move(ladder, there, (
            f"{waited}to finish by {utc_clock(finish_by)}: on {here.capacity} from the next look "
            f"the deadline could be missed; forecast finish {utc_clock(now + there.finish_s)}"
        ), DEADLINE)  # fmt: skip
    fastest = min(forecasts, key=lambda f: f.finish_s)
    when = utc_clock(now + fastest.finish_s) if math.isfinite(fastest.finish_s) else "never"
    # In time but not with the margin held in hand: said as such, the same choice.
    short = now + fastest.finish_s <= finish_by
    line = (
        f"the deadline {utc_clock(finish_by)} "
        f"{'leaves less than the margin' if short else 'cannot be met'} on any rung: "
        f"forecast finish {when} on {fastest.rung.capacity}"
    )
    if fastest.rung == here or not math.isfinite(fastest.finish_s):
        return Decision(STAY, at, line, fastest, LATE)
    return _move(ladder, fastest, line, LATE)


def pace_s(f: Forecast, measured: Measured, now: float, finish_by: float) -> float:
    """Time in hand the run should still have at ``now`` (0: no pace known).

    The deadline's slack at the launch (its time less the work on backstop ``f``'s
    rung and a restart) shrinking evenly to 0 at the deadline, and only
    :data:`PACE_SHARE` of it: Wu et al.'s Uniform Progress line, in time in hand
    rather than in progress, and looser. Behind it, a run waiting for spot capacity
    trains on the backstop instead.
    """
    began = measured.began_at
    if began is None or measured.steps_left <= 0 or not math.isfinite(f.work_s):
        return 0.0
    if finish_by <= began:
        return 0.0
    total = f.work_s * measured.steps_total / measured.steps_left
    slack = finish_by - began - total - f.start_s
    return max(0.0, PACE_SHARE * slack * min(1.0, (finish_by - now) / (finish_by - began)))


def realized_regret(
    spot: Forecast,
    backstop: Forecast,
    measured: Measured,
    prior: Prior,
    prices: Mapping[str, float],
) -> tuple[float, float] | None:
    """(regret, allowed): what spot paid beyond the backstop's price of the work it kept.

    The regret is spot's hours held (:attr:`Measured.held_h`) at its price less the
    backstop's price of the steps kept there (:attr:`Measured.kept_steps`) at its speed;
    allowed, :data:`REALIZED_BUDGET` of the backstop's cost of the whole run, at least
    :data:`REALIZED_MISHAPS` restarts and save intervals of spot. ``None``: no prices.
    """
    price_spot, price_back = prices.get(spot.rung.capacity), prices.get(backstop.rung.capacity)
    per_step = step_seconds(backstop.rung, measured)
    if not price_spot or not price_back or per_step is None:
        return None
    unit = price_back * backstop.rung.workers * per_step / 3600  # the backstop's, a step
    paid = price_spot * spot.rung.workers * measured.held_h
    regret = paid - unit * measured.kept_steps
    mishap = restart_seconds(measured, prior) + measured.save_every_s
    allowed = max(REALIZED_BUDGET * unit * measured.steps_total,
                  REALIZED_MISHAPS * price_spot * spot.rung.workers * mishap / 3600)  # fmt: skip
    return regret, allowed


def _noise(spot: Forecast, measured: Measured, prior: Prior) -> float:
    """The relative error of spot's modelled useful share, times :data:`LEAVE_NOISE`.

    The rate's Poisson error over the hours behind it, times what a preemption costs (a
    restart and half a save interval).
    """
    hours = prior.weight_hours + measured.preemptible_hours
    lost_h = (restart_seconds(measured, prior) + measured.save_every_s / 2) / 3600
    return LEAVE_NOISE * lost_h * math.sqrt(max(spot.rate_per_h, 0.0) / hours)


def realized_dearer(
    spot: Forecast,
    backstop: Forecast,
    measured: Measured,
    prior: Prior,
    prices: Mapping[str, float],
    share: float = 1.0,
) -> bool:
    """Whether spot's realized cost per unit of work, pulled to the prior's, is dearer."""
    price_spot, price_back = prices.get(spot.rung.capacity), prices.get(backstop.rung.capacity)
    per_back, per_spot = step_seconds(backstop.rung, measured), step_seconds(spot.rung, measured)
    if not price_spot or not price_back or per_back is None or per_spot is None:
        return False
    useful = useful_share(prior.preemptions_per_hour, restart_seconds(measured, prior),
                          measured.save_every_s)  # fmt: skip
    steps = measured.kept_steps + useful * REALIZED_PRIOR_H * 3600 / per_spot
    paid = price_spot * spot.rung.workers * (measured.held_h + REALIZED_PRIOR_H)
    return paid > share * price_back * backstop.rung.workers * per_back / 3600 * steps


def _back_to_spot(
    ladder: Ladder,
    at: int,
    forecasts: list[Forecast],
    measured: Measured,
    prior: Prior,
    prices: Mapping[str, float],
    *,
    now: float,
    finish_by: float,
    look_every_s: float,
    hold: float,
) -> Decision | None:
    """A move from backstop ``at`` to the first preemptible rung, when the run is ahead."""
    here = ladder[at]
    spots = [f for f in forecasts if f.rung.preemptible and math.isfinite(f.finish_s)]
    if not spots:
        return None
    spot = spots[0]
    price_spot, price_here = prices.get(spot.rung.capacity), prices.get(here.capacity)
    if spot.useful <= 0:
        return None
    if realized_dearer(spot, forecasts[at], measured, prior, prices,
                       RETURN_SHARE if measured.left_by == COST else 1.0):  # fmt: skip
        return None
    if price_spot and price_here:
        # Left for its cost: back only once clearly cheaper, and less and less often
        # (a rate that looks lower only because it was forgotten). Else: not dearer.
        share = RETURN_SHARE if measured.left_by == COST else LEAVE_SHARE
        if price_spot >= share * price_here * spot.useful:
            return None
    # Left for its cost or the pace, the run comes back less and less often: each
    # return that found spot no better (or no capacity again) doubles the wait.
    if measured.left_by in (COST, PACE) and measured.left_spot_at is not None:
        wait = RETURN_WAIT_S * 2**measured.returns
        held = measured.spot_held_at if measured.spot_held_at is not None else measured.began_at
        if measured.left_by == PACE and held is not None:
            # Left waiting for capacity: a drought that has lasted this long is as likely
            # to last as long again, and each return into it costs a restart here.
            wait = max(wait, measured.left_spot_at - held)
        if now - measured.left_spot_at < wait:
            return None
    # Coming back here later costs a restart: the backstop's finish as if moved to.
    again = forecast(here, measured, prior, moving=True)
    spare = finish_by - now - again.finish_s - hold
    restart = restart_seconds(measured, prior)
    # Hysteresis: beyond the pace, the restart there and two looks, so that neither the
    # pace rule nor the safety net (which leaves at a look's spare) brings it straight back.
    need = pace_s(again, measured, now, finish_by) + restart + look_every_s
    if spare < need:
        return None
    return _move(ladder, spot, (
        f"ahead of the deadline: back to {spot.rung.capacity} ({spot.rate_per_h:.1f} "
        f"preemptions/h, {spot.useful:.0%} useful); {here.capacity} is still in time for "
        f"{utc_clock(finish_by)} if moved back to by {utc_clock(finish_by - again.finish_s - hold)}"
    ), AHEAD)  # fmt: skip


def _stay_then(
    stay: Forecast, then: Forecast, left_s: float, price: float | None, hold: float
) -> float | None:
    """Expected cost of training on here until ``then``'s last safe moment, then there."""
    if price is None or then.cost is None or stay.work_s <= 0:
        return None
    window = max(0.0, left_s - then.finish_s - hold)
    if window * stay.useful >= stay.work_s:
        return price * stay.rung.workers * stay.finish_s / 3600
    share_left = 1 - window * stay.useful / stay.work_s
    return price * stay.rung.workers * window / 3600 + then.cost * share_left


def _move(ladder: Ladder, to: Forecast, reason: str, rule: str) -> Decision:
    return Decision(MOVE, ladder.rungs.index(to.rung), reason, to, rule)


def finish_by_epoch(text: str, now: float) -> float | None:
    """The deadline ``finish_by`` names, epoch seconds; ``None`` for ``""``.

    A duration from ``now`` (``"6h"``, ``"90m"``) or a time with its zone
    (``"2026-11-29T06:00:00Z"``, ``"2026-11-29T06:00+09:00"``).

    Raises:
        LadderError: neither, a time without a zone, or one already past (one line).
    """
    text = (text or "").strip()
    if not text:
        return None
    try:
        at = now + duration_s(text, "finish_by")
    except LadderError:
        at = _time_with_zone(text, now)
    if at - now < MIN_FINISH_BY_S:
        raise LadderError(f"finish_by={text!r} is less than a minute away: no run starts in that")
    if at - now > MAX_FINISH_BY_S:
        raise LadderError(f"finish_by={text!r} is more than a year away: a typo?")
    return at


def _time_with_zone(text: str, now: float) -> float:
    """Epoch seconds of ``finish_by`` written as a time with its zone, not yet past."""
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise LadderError(
            f"finish_by={text!r}: expected a duration ('6h') or a time with its zone "
            "('2026-11-29T06:00:00Z')"
        ) from None
    if when.tzinfo is None:
        raise LadderError(f"finish_by={text!r} has no time zone: add 'Z' or '+09:00'")
    if when.timestamp() <= now:
        raise LadderError(f"finish_by={text!r} is already past")
    return when.timestamp()


def unreachable(
    ladder: Ladder,
    measured: Measured | None,
    *,
    now: float,
    finish_by: float,
    prior: Prior | None = None,
) -> str:
    """One line when even the fastest rung cannot finish by ``finish_by``, else ``""``.

    Before any step was measured, from the prior's step time (``Prior.step_s``); with
    neither, ``""``: a new run's deadline is judged once it has one (by :func:`decide`).
    """
    prior = prior or Prior()
    if measured is None:
        return ""
    speed = "the estimated" if not measured.step_s else "the measured"
    measured = with_estimate(ladder, measured, prior)
    if not measured.step_s:
        return ""
    fastest = min((forecast(r, measured, prior, moving=True) for r in ladder.rungs),
                  key=lambda f: f.finish_s)  # fmt: skip
    if now + fastest.finish_s <= finish_by:
        return ""
    hours = fastest.finish_s / 3600
    return (
        f"finish_by {utc_clock(finish_by)} cannot be met: the fastest rung ({fastest.rung}) "
        f"needs {hours:.1f} h for the {measured.steps_left} steps left at {speed} speed"
    )


def kept_deadline(checkpoint_dir: str, asked: str, rungs: list[str], now: float) -> float | None:
    """The deadline ``asked`` names, as the ledger keeps it across a task's retries.

    A duration counts from the first launcher that read it: the ledger's ladder keeps
    the time it gave then (``asked`` the same), and a new ``asked`` replaces it.

    Raises:
        LadderError: ``asked`` is not a deadline (one line).
    """
    from spottrain.ledger import moves

    stored, _ = moves.read(checkpoint_dir)
    if stored and stored.get("asked") == asked:
        kept = stored.get("finish_by")
        if kept is not None and (
            not isinstance(kept, int | float) or isinstance(kept, bool) or not math.isfinite(kept)
        ):
            raise LadderError(
                f"the ledger in {checkpoint_dir} keeps finish_by={kept!r} for {asked!r}, not "
                "a time: pass finish_by as a time with its zone (a new value replaces it)"
            )
        return kept
    finish_by = finish_by_epoch(asked, now)
    plan = {"rungs": rungs, "finish_by": finish_by, "asked": asked, "set_at": now}
    moves.set_ladder(checkpoint_dir, plan)
    return finish_by
