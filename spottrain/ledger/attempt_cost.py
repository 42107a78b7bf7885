"""Spent, lost and saved, per attempt and per run (issue 34): pure functions.

Given the ledger's records and a price function (``Usage -> Quote``: per hour, one
machine with its GPUs), each attempt gets:

* ``spent``: its seconds x workers x the price of what it ran on;
* ``lost`` (attempts a preemption, kill, lost peer or hang ended): the steps it
  trained again (``steps_lost`` x its own seconds per step, until its notice), and
  its seconds from the notice to its end (the save on notice), priced as it ran, plus
  the restart that followed: the next attempt's seconds from its start to its first
  step (``first_step_at``: the restore, then the input's fast-forward to its start step
  and the step's first trace; until its notice, else its end, when it ended before),
  priced as that attempt ran. ``lost`` is part of ``spent``;
* ``move_cost`` (an attempt a ladder move ended, ``schema.moved``): the same three
  parts, but the run's own decision, not a preemption: not in ``lost``;
* ``saved``: what the work that was kept would have cost on demand, minus
  ``spent``. Kept is every machine-second but those ``lost`` and ``move_cost`` count
  (a step trained again, a save on notice, a restart): an on-demand run would not have
  paid for them, so pricing them on demand too would credit spot with its own
  preemptions. Like ``lost``, the restart is the interrupted attempt's, though the
  next attempt ran it.

A price the source does not know leaves the figures out (never 0) and says why in
``price_unknown``. The trainer's ``--price-per-hour`` and ``--on-demand-price-per-hour``
flags, where given, are the user's own prices for one worker (``prices_given`` in the
record) and win over every price source, by the same code path. Figures are computed
when the run's outputs are written, never in the training loop: a run never waits on
prices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spottrain.ledger.schema import (
    INTERRUPTED_OUTCOMES,
    Record,
    capacity,
    moved,
    trained_again,
)
from spottrain.ledger.usage import describe
from spottrain.pricing import Quote, Usage

log = logging.getLogger(__name__)

Price = Callable[[Usage], Quote]
# A record's own prices (the trainer's flags): {"price_per_hour": paid on spot, or on
# whatever it ran on; "on_demand_price_per_hour": one on-demand worker}, each if given.
PRICES_GIVEN = "prices_given"
FLAGS_SOURCE = "--price-per-hour flags"
FIGURES = ("spent", "saved", "lost")
# The run's figures in ledger.totals (run_totals): what the outputs show of them.
TOTAL_FIELDS = (*FIGURES, "move_cost", "currency", "price_unknown")
# What each attempt's priced fields are (removed before pricing again).
PRICED_FIELDS = (
    *FIGURES, "currency", "price_source", "price_unknown", "lost_redo_seconds",
    "lost_notice_seconds", "lost_restart_seconds", "lost_unknown", "move_cost", "move_seconds",
    "price_per_hour", "on_demand_price_per_hour",
)  # fmt: skip
# Billed at the spot price: Spot VMs and preemptible VMs.
SPOT_KINDS = ("spot", "preemptible")
# Billed at the on-demand price here, saving 0. An on-demand VM, a Vertex STANDARD job
# and a reservation's VM are on-demand VMs: a consumed reservation bills its VMs at
# the on-demand rate, committed-use or sustained-use discounts apart
# (https://cloud.google.com/compute/docs/instances/reservations-overview, "Pricing").
# Flex-start VMs bill at their own discounted rate (GKE: "Flex-start VMs are priced
# at a discount", https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start-vms;
# Vertex: https://cloud.google.com/vertex-ai/docs/training/flex-start), which the price
# source does not carry: the on-demand price is an upper bound for them.
ON_DEMAND_KINDS = ("on-demand", "standard", "reservation", "flex-start")


def kind(record: Record) -> str:
    """The capacity kind an attempt ran on: its node's, else the compiled one."""
    return str(record.get("node_kind") or record.get("capacity") or "")


def _machine_seconds(record: Record) -> float:
    return float(record.get("seconds") or 0) * int(record.get("workers") or 1)


def _rates(record: Record, price: Price | None, quotes: dict) -> tuple:
    """(paid, on_demand per machine-hour, currency, source, reason); ``None`` = unknown."""
    capacity = kind(record)
    if given := record.get(PRICES_GIVEN):
        return _given_rates(given, capacity)
    if capacity not in SPOT_KINDS + ON_DEMAND_KINDS:
        why = f"capacity kind {capacity!r} has no price" if capacity else "no capacity kind"
        return None, None, "", "", why
    if price is None:
        return None, None, "", "", "no price source"
    from spottrain.ledger.usage import as_usage

    usage = as_usage(record)
    if usage not in quotes:
        try:
            quotes[usage] = price(usage)
        except Exception as err:  # noqa: BLE001 - prices never fail a run
            quotes[usage] = Quote(None, None, reason=f"{type(err).__name__}: {err}")
    q: Quote = quotes[usage]
    paid = q.spot if capacity in SPOT_KINDS else q.on_demand
    reason = q.reason or ("no spot price" if paid is None else "no on-demand price")
    known = paid is not None and q.on_demand is not None
    return paid, q.on_demand, q.currency, q.source, "" if known else reason


def _given_rates(given: Mapping[str, float], capacity: str) -> tuple:
    """The flags' (paid, on-demand, currency, source, reason) per machine-hour.

    An on-demand kind pays the on-demand price where it is given; anything else (spot,
    or a kind not known) ``price_per_hour``.
    """

    def number(key: str) -> float | None:
        value = given.get(key) if isinstance(given, Mapping) else None
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        return float(value) if ok else None

    od = number("on_demand_price_per_hour")
    paid = od if capacity in ON_DEMAND_KINDS and od else number("price_per_hour")
    if paid is None:
        return None, None, "", FLAGS_SOURCE, "no --price-per-hour for this attempt"
    reason = "" if od is not None else "no --on-demand-price-per-hour"
    return paid, od, "USD", FLAGS_SOURCE, reason


def price_records(records: Sequence[Record], price: Price | None) -> list[Record]:
    """Copies of ``records`` with their figures (or ``price_unknown``), in the same order."""
    quotes: dict = {}
    out = [{k: v for k, v in r.items() if k not in PRICED_FIELDS} for r in records]
    rates = [_rates(r, price, quotes) for r in out]
    # Per attempt, the seconds ``lost`` (or a move's cost) counts (its redone steps and
    # its save on notice; the restart it caused, as (next attempt, seconds)): not kept
    # work, so not in ``saved``.
    redone = [0.0] * len(out)
    caused: list[tuple[int, float] | None] = [None] * len(out)
    for i, (rec, (paid, od, currency, source, reason)) in enumerate(zip(out, rates, strict=True)):
        if source:
            rec["price_source"] = source
        if currency and paid is not None:
            rec["currency"] = currency
        if reason:
            rec["price_unknown"] = reason
        if paid is None:
            continue
        rec["price_per_hour"] = round(paid, 6)
        hours = _machine_seconds(rec) / 3600
        rec["spent"] = round(hours * paid, 6)
        if od is not None:
            rec["on_demand_price_per_hour"] = round(od, 6)
        if rec.get("outcome") in INTERRUPTED_OUTCOMES:
            j = _next(out, i)
            nxt, next_paid = (None, None) if j is None else (out[j], rates[j][0])
            lost = _lost(rec, nxt, paid, next_paid)
            if lost is None:
                if not moved(rec):
                    rec["lost_unknown"] = (
                        "its redone steps or the next attempt's restart have no time or price"
                    )
            else:
                fields, redo, restart = lost
                if moved(rec):  # the run's own move: its cost, not a preemption's loss
                    seconds = sum(v for k, v in fields.items() if k.endswith("_seconds"))
                    fields = {"move_cost": fields["lost"], "move_seconds": round(seconds, 2)}
                rec.update(fields)
                redone[i] = redo
                if j is not None:
                    caused[i] = (j, restart)
    # Saved from the unrounded seconds and prices: the figures are rounded once, here.
    for i, rec in enumerate(out):
        if (value := _kept_value(out, i, redone[i], caused[i], rates)) is not None:
            rec["saved"] = round((value - _machine_seconds(rec) * rates[i][0]) / 3600, 6)
    return out


def _kept_value(out: list[Record], i: int, redo: float, caused: tuple | None, rates: list):
    """What attempt ``i``'s kept work would have cost on demand, in price x seconds.

    The restart a preemption caused runs on the next attempt but is charged here, where
    ``lost`` is: the next attempt (an on-demand one saves 0) is not shown a loss it did
    not cause, and the run's sum is the same. ``None`` when a price is unknown.
    """
    paid, od = rates[i][:2]
    if paid is None or od is None:
        return None
    value = max(0.0, _machine_seconds(out[i]) - redo * int(out[i].get("workers") or 1)) * od
    if caused:
        j, restart = caused
        if (next_od := rates[j][1]) is None:
            return None
        value -= restart * int(out[j].get("workers") or 1) * next_od
    return value


def _next(records: list[Record], i: int) -> int | None:
    """Where the attempt that resumed after record ``i`` is (next started, not refused)."""
    started = records[i].get("started") or 0
    later = [
        j
        for j, r in enumerate(records)
        if (r.get("started") or 0) > started and r.get("outcome") != "refused"
    ]
    return min(later, key=lambda j: records[j]["started"]) if later else None


def _lost(rec: Record, nxt: Record | None, paid: float, next_paid: float | None) -> tuple | None:
    """``lost`` and its two parts' seconds, as fields and as the two unrounded seconds.

    ``None`` when the redone steps cannot be timed.
    """
    steps = int(rec.get("steps_lost") or 0)
    redo = 0.0
    # It trained until its notice; from there to its end it saved (and exited).
    ended = rec.get("ended")
    until = min(float(rec.get("notice_at") or ended or 0), float(ended or 0))
    notice = float(ended) - until if ended and rec.get("notice_at") else 0.0
    if steps:
        began = rec.get("resumed_at") or rec.get("started")
        trained = (rec.get("last_step") or 0) - (rec.get("start_step") or 0)
        if not ended or began is None or trained <= 0:
            return None
        redo = steps * max(0.0, until - float(began)) / trained
    restart = 0.0
    # Until it trained again; an attempt that ended before (a notice during its start)
    # was restart until its notice (its save on notice is its own lost, not counted twice).
    resumed = nxt is not None and (trained_again(nxt) or nxt.get("notice_at") or nxt.get("ended"))
    if nxt is not None and resumed:
        if next_paid is None:
            return None  # the restart ran on an attempt without a price
        restart = max(0.0, float(resumed) - float(nxt["started"]))
    workers = int(rec.get("workers") or 1)
    next_workers = int((nxt or {}).get("workers") or 1)
    own = redo + notice
    cost = own * workers * paid / 3600 + restart * next_workers * (next_paid or 0.0) / 3600
    fields = {"lost": round(cost, 6), "lost_redo_seconds": round(redo, 2),
              "lost_notice_seconds": round(notice, 2),
              "lost_restart_seconds": round(restart, 2)}  # fmt: skip
    return fields, own, restart


def run_totals(records: Sequence[Record]) -> dict[str, Any]:
    """The run's figures: sums over attempts, only when every attempt is priced.

    A sum over some attempts would read as the run's: one attempt without a price
    leaves the run's figures out, with that attempt's reason in ``price_unknown``.
    """
    if not any("spent" in r or "price_unknown" in r for r in records):
        return {}
    unpriced = [r for r in records if "spent" not in r or "saved" not in r]
    currencies = {r.get("currency") for r in records if "spent" in r}
    if unpriced:
        r = unpriced[0]
        why = r.get("price_unknown") or "no price"
        return {"price_unknown": f"attempt {r.get('attempt')}: {why}"}
    if len(currencies) > 1:
        return {"price_unknown": f"attempts priced in {', '.join(sorted(map(str, currencies)))}"}
    out = {
        "spent": round(sum(r["spent"] for r in records), 6),
        "saved": round(sum(r["saved"] for r in records), 6),
        "currency": currencies.pop(),
    }
    if not any("lost_unknown" in r for r in records):
        out["lost"] = round(sum(r.get("lost", 0.0) for r in records), 6)
    if any(moved(r) for r in records) and all("move_cost" in r for r in records if moved(r)):
        out["move_cost"] = round(sum(r.get("move_cost", 0.0) for r in records), 6)
    return out


def totals_line(totals: Mapping[str, Any]) -> str:
    """The run's spent, lost and saved in one line, or why they are unknown."""
    if "spent" in totals:
        lost = (f"{totals['lost']:.4f}" if "lost" in totals else "") or "unknown"
        moves = f", ladder moves cost {totals['move_cost']:.4f}" if "move_cost" in totals else ""
        return (
            f"Spent {totals['spent']:.4f} {totals.get('currency', '')}, lost to preemptions "
            f"{lost}{moves}, saved {totals['saved']:.4f} against on-demand."
        )
    if "price_unknown" in totals:
        return f"Spent, lost, saved: price unknown ({totals['price_unknown']})."
    return ""


def basis_line(records: Sequence[Mapping[str, Any]]) -> str:
    """What the figures are priced on: each machine, capacity and rate, and the prices' source.

    ``""`` when no attempt was priced. A machine is one of the attempt's (its workers
    each pay it): ``spent`` is the rate times the machine-hours.
    """
    seen: list[str] = []
    sources: list[str] = []
    for r in records:
        if r.get("price_per_hour") is None:
            continue
        od = r.get("on_demand_price_per_hour")
        versus = f" (on-demand {od:.4f}/h)" if od and od != r["price_per_hour"] else ""
        what = (
            f"{capacity(r)} {describe(r)} at {r['price_per_hour']:.4f} "
            f"{r.get('currency', '')}/h{versus}"
        )
        if what not in seen:
            seen.append(what)
        if (source := r.get("price_source")) and source not in sources:
            sources.append(source)
    if not seen:
        return ""
    return f"Priced per machine-hour: {'; '.join(seen)}. Prices: {', '.join(sources) or 'unknown'}."
