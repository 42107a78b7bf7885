"""The capacity ladder's policies on simulated spot capacity: deadlines met, and cost.

``python bench/ladder_sim.py [--runs 200] [--json]`` (``make bench-ladder``). Seeded
runs of a job of ``WORK_H`` hours on on-demand capacity, on a two-rung ladder (spot,
then on-demand), in every cell of: deadline slack (1.1x, 1.5x, 2x the on-demand
duration) x spot preemptions per hour (0.5, 2, 8) x capacity droughts (none; after
each preemption, with probability ``DROUGHT_P``, no spot capacity for an exponential
time of mean ``DROUGHT_MEAN_H``). Three policies:

* ``always-spot``: waits for spot however long it takes;
* ``today``: moves to on-demand once spot capacity has not come for 30 min (the JobSet
  launcher's ``unschedulable_timeout`` default; preemptions alone never move it, as a
  disruption is a free restart);
* ``deadline``: :func:`spottrain.ladder.decide.decide`, the code the launchers run,
  fed what the simulated run has measured (its step time, preemptions, restarts).

Figures per cell: deadlines met (%) and cost ÷ the on-demand-only cost. The simulated
world: the restart after a preemption or a move costs ``RESTART_S`` (paid, as machines
are held), the steps since the last save (every ``SAVE_S``) are trained again, spot
costs ``SPOT_RATIO`` of on-demand (the stand-in catalog's n1-standard-8 + T4 in
us-central1: 0.215970 / 0.729998), nothing is paid while no capacity comes. The
preemption rates are the issue's grid, not published figures: Google publishes none
per hour for Spot VMs (see spottrain/ladder/forecast.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is first on the path and would shadow the standard
# library's copy (bench/copy.py): the repository instead.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from spottrain.ladder import Ladder, Rung  # noqa: E402
from spottrain.ladder.decide import MOVE, decide  # noqa: E402
from spottrain.ladder.forecast import Measured, Prior  # noqa: E402

WORK_H = 8.0
STEP_S = 1.0
RESTART_S = 180.0
SAVE_S = 600.0
SPOT_RATIO = 0.215970 / 0.729998
DROUGHT_P = 0.3
DROUGHT_MEAN_H = 1.5
TODAY_PATIENCE_S = 1800.0
DT = 60.0
LOOK_S = 300.0
SLACKS = (1.1, 1.5, 2.0)
RATES = (0.5, 2.0, 8.0)
DROUGHTS = (False, True)
POLICIES = ("always-spot", "today", "deadline")
SHAPE = Rung("spot", "n1-standard-8", "nvidia-tesla-t4", 1, 2)
LADDER = Ladder((SHAPE, Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 2)))
PRICES = {"spot": SPOT_RATIO, "on-demand": 1.0}


@dataclass
class Run:
    """One simulated run's state."""

    at: int = 0  # the rung
    done_s: float = 0.0  # work done (seconds of on-demand compute)
    saved_s: float = 0.0
    since_save: float = 0.0
    restart_left: float = RESTART_S
    drought_left: float = 0.0
    waited: float = 0.0
    preemptions: int = 0
    spot_h: float = 0.0
    cost: float = 0.0
    restarts_seen: int = 0


def simulate(policy: str, slack: float, rate_h: float, droughts: bool, seed: int) -> tuple:
    """(deadline met, cost ÷ on-demand cost) of one seeded run."""
    rng = random.Random(seed)
    work = WORK_H * 3600
    on_demand_s = work + RESTART_S
    finish_by = slack * on_demand_s
    r, t, next_look = Run(), 0.0, 0.0
    while r.done_s < work and t < 10 * finish_by:
        on_spot = LADDER[r.at].preemptible
        price = PRICES[LADDER[r.at].capacity] * SHAPE.workers
        if r.drought_left > 0:
            r.drought_left -= DT
            r.waited += DT
        elif r.restart_left > 0:
            r.restart_left -= DT
            r.cost += price * DT / 3600
        else:
            r.waited = 0.0
            r.done_s += DT
            r.since_save += DT
            r.cost += price * DT / 3600
            r.spot_h += DT / 3600 if on_spot else 0.0
            if r.since_save >= SAVE_S:
                r.saved_s, r.since_save = r.done_s, 0.0
            if on_spot and rng.random() < 1 - math.exp(-rate_h * DT / 3600):
                r.preemptions += 1
                r.restarts_seen += 1
                r.done_s, r.since_save, r.restart_left = r.saved_s, 0.0, RESTART_S
                if droughts and rng.random() < DROUGHT_P:
                    r.drought_left = rng.expovariate(1 / (DROUGHT_MEAN_H * 3600))
        t += DT
        if r.done_s >= work or not on_spot or t < next_look:
            continue
        next_look = t + LOOK_S
        if _moves(policy, r, t, finish_by):
            # A move: the spot gang saves on its notice, the on-demand one restarts.
            r.at, r.saved_s, r.since_save = 1, r.done_s, 0.0
            r.drought_left, r.restart_left = 0.0, RESTART_S
    return t <= finish_by and r.done_s >= work, r.cost / (on_demand_s / 3600 * SHAPE.workers)


def _moves(policy: str, r: Run, t: float, finish_by: float) -> bool:
    if policy == "always-spot":
        return False
    if policy == "today":
        return r.waited >= TODAY_PATIENCE_S
    measured = Measured(
        steps_done=int(r.saved_s / STEP_S), steps_total=int(WORK_H * 3600 / STEP_S),
        step_s={SHAPE.shape: STEP_S}, replicas={SHAPE.shape: SHAPE.replicas},
        preemptions=r.preemptions, preemptible_hours=r.spot_h,
        restart_s=RESTART_S if r.restarts_seen else None, save_every_s=SAVE_S,
    )  # fmt: skip
    made = decide(LADDER, r.at, measured, now=t, finish_by=finish_by, look_every_s=LOOK_S,
                  waited_s=r.waited, prior=Prior(), prices=PRICES)  # fmt: skip
    return made.kind == MOVE


def table(runs: int) -> list[dict]:
    """One row per cell: each policy's deadlines met (%) and mean cost ratio."""
    rows = []
    for slack in SLACKS:
        for rate in RATES:
            for drought in DROUGHTS:
                row = {"slack": slack, "rate_h": rate, "droughts": drought}
                for policy in POLICIES:
                    out = [simulate(policy, slack, rate, drought, s) for s in range(runs)]
                    row[policy] = {
                        "met": 100.0 * sum(m for m, _ in out) / runs,
                        "cost": sum(c for _, c in out) / runs,
                    }
                rows.append(row)
    return rows


def main() -> None:
    """Prints the table (Markdown, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = table(args.runs)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.runs} runs per cell; {WORK_H:.0f} h of work; met % / cost ÷ on-demand")
    print("| slack | preemptions/h | droughts | " + " | ".join(POLICIES) + " |")
    print("|---|---|---|" + "---|" * len(POLICIES))
    for row in rows:
        cells = [f"{row[p]['met']:.0f} % / {row[p]['cost']:.2f}" for p in POLICIES]
        drought = "yes" if row["droughts"] else "no"
        print(f"| {row['slack']}x | {row['rate_h']} | {drought} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
