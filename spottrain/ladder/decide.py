"""Which rung to train on now, from the ladder, the clock and what the run measured (pure).

Called at each decision point: capacity not coming, a preemption, and every look
(``look_every_s``). Without a deadline it is today's rule: a rung whose capacity does
not come within its patience gives way to the next. With ``finish_by`` it keeps the
run on the cheapest rung as long as a rung that cannot be preempted (the *backstop*)
could still finish in time if it were moved to at the next decision point, and moves
before that stops being true; it moves at once when preemptions make spot's useful
hour dearer than the backstop's. This is Wu et al.'s safety rule (NSDI '24, "Can't Be
Late": use spot while the on-demand fall-back can still meet the deadline), applied
to our measured step time, restarts and save interval.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from spottrain.ladder import Ladder, LadderError, duration_s
from spottrain.ladder.forecast import Forecast, Measured, Prior, forecast

# Held in hand beyond the forecast: a share of the work left, and at least this long.
MARGIN_SHARE = 0.05
MARGIN_MIN_S = 300.0
STAY, MOVE = "stay", "move"


@dataclass(frozen=True)
class Decision:
    """Stay on rung ``to`` (== the current one) or move to it, with why and its forecast."""

    kind: str
    to: int
    reason: str
    forecast: Forecast | None = None


def _margin(f: Forecast, least_s: float = MARGIN_MIN_S) -> float:
    return max(MARGIN_SHARE * f.work_s, least_s)


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
    prior: Prior | None = None,
    prices: Mapping[str, float] | None = None,
    margin_s: float = MARGIN_MIN_S,
) -> Decision:
    """The rung to be on.

    Args:
        ladder: The rungs (checked).
        at: The rung the run is on (or waits for) now.
        measured: What the run measured.
        now: Epoch seconds.
        finish_by: The deadline, epoch seconds (``None``: none).
        look_every_s: Seconds until the next decision point at the latest.
        waited_s: How long the run has waited for rung ``at``'s capacity (0: it runs).
        prior: What is assumed until measured (default: :class:`Prior`'s).
        prices: One worker's price per hour by capacity kind (for the cost rule and the
            forecast's cost); ``None``: cost is not compared.
        margin_s: The least time held in hand beyond a forecast (also 5 % of the work).
    """
    prices, prior = prices or {}, prior or Prior()
    here = ladder[at]
    if finish_by is None or not measured.step_s:
        # Today's rule; with a deadline too until a step time is measured (no forecast).
        why = "" if finish_by is None else "no step time measured yet: "
        if waited_s >= here.patience_s and at + 1 < len(ladder):
            return Decision(
                MOVE,
                at + 1,
                f"{why}no {here.capacity} capacity for {waited_s:.0f} s (its patience)",
            )
        return Decision(STAY, at, why.rstrip(": "))

    forecasts = [
        forecast(rung, measured, prior, moving=i != at, price_per_hour=prices.get(rung.capacity))
        for i, rung in enumerate(ladder.rungs)
    ]
    stay = forecasts[at]
    if not here.preemptible and waited_s < here.patience_s:
        return Decision(STAY, at, "", stay)
    backstops = [f for i, f in enumerate(forecasts) if i != at and not f.rung.preemptible]
    safe_later = [
        f for f in backstops if now + look_every_s + f.finish_s + _margin(f, margin_s) <= finish_by
    ]
    if here.preemptible and waited_s < here.patience_s and safe_later:
        cheapest = min(
            safe_later, key=lambda f: (prices.get(f.rung.capacity, math.inf), f.finish_s)
        )
        price_here, price_there = prices.get(here.capacity), prices.get(cheapest.rung.capacity)
        dearer = bool(price_here and price_there and price_here >= price_there * stay.useful)
        if stay.useful <= 0 or dearer:
            return _move(ladder, cheapest, (
                f"{stay.rate_per_h:.1f} preemptions/h leave spot {stay.useful:.0%} useful: its "
                f"useful hour costs more than {cheapest.rung.capacity}'s"
            ))  # fmt: skip
        # A cheaper backstop in time now but not at the next look (a queued one): move to
        # it now when that costs less than spot until the last moment, then `cheapest`.
        closing = [f for f in backstops if f not in safe_later and f.cost is not None
                   and now + f.finish_s + _margin(f, margin_s) <= finish_by]  # fmt: skip
        then = _stay_then(stay, cheapest, finish_by - now, price_here, margin_s)
        for f in sorted(closing, key=lambda f: f.cost):
            if then is not None and f.cost < then:
                return _move(ladder, f, (
                    f"to finish by {utc_clock(finish_by)} at the lowest cost: {f.rung.capacity} "
                    f"now (forecast {f.cost:.2f}) rather than {here.capacity} then "
                    f"{cheapest.rung.capacity} ({then:.2f})"
                ))  # fmt: skip
        return Decision(STAY, at, (
            f"forecast finish {utc_clock(now + stay.finish_s)}; {cheapest.rung.capacity} could "
            f"still finish by {utc_clock(finish_by)} if moved to at the next look"
        ), stay)  # fmt: skip
    safe_now = [f for f in backstops if now + f.finish_s + _margin(f, margin_s) <= finish_by]
    if safe_now:
        cheapest = min(safe_now, key=lambda f: (prices.get(f.rung.capacity, math.inf), f.finish_s))
        waited = f"no {here.capacity} capacity for {waited_s:.0f} s; " if waited_s else ""
        return _move(ladder, cheapest, (
            f"{waited}to finish by {utc_clock(finish_by)}: on {here.capacity} from the next look "
            f"the deadline could be missed; forecast finish {utc_clock(now + cheapest.finish_s)}"
        ))  # fmt: skip
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
        return Decision(STAY, at, line, fastest)
    return _move(ladder, fastest, line)


def _stay_then(
    stay: Forecast, then: Forecast, left_s: float, price: float | None, margin_s: float
) -> float | None:
    """Expected cost of training on here until ``then``'s last safe moment, then there."""
    if price is None or then.cost is None or stay.work_s <= 0:
        return None
    window = max(0.0, left_s - then.finish_s - _margin(then, margin_s))
    if window * stay.useful >= stay.work_s:
        return price * stay.rung.workers * stay.finish_s / 3600
    share_left = 1 - window * stay.useful / stay.work_s
    return price * stay.rung.workers * window / 3600 + then.cost * share_left


def _move(ladder: Ladder, to: Forecast, reason: str) -> Decision:
    return Decision(MOVE, ladder.rungs.index(to.rung), reason, to)


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
        return now + duration_s(text, "finish_by")
    except LadderError:
        pass
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

    Also ``""`` when nothing was measured yet: a new run's deadline is judged once it
    has a step time (by :func:`decide`).
    """
    if measured is None or not measured.step_s:
        return ""
    prior = prior or Prior()
    fastest = min((forecast(r, measured, prior, moving=True) for r in ladder.rungs),
                  key=lambda f: f.finish_s)  # fmt: skip
    if now + fastest.finish_s <= finish_by:
        return ""
    hours = fastest.finish_s / 3600
    return (
        f"finish_by {utc_clock(finish_by)} cannot be met: the fastest rung ({fastest.rung}) "
        f"needs {hours:.1f} h for the {measured.steps_left} steps left at the measured speed"
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
        return stored.get("finish_by")
    finish_by = finish_by_epoch(asked, now)
    plan = {"rungs": rungs, "finish_by": finish_by, "asked": asked, "set_at": now}
    moves.set_ladder(checkpoint_dir, plan)
    return finish_by
