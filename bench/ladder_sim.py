"""Deadline policies on spot capacity, simulated or replayed: deadlines met, and cost.

``python bench/ladder_sim.py [--quick | --full] [--runs N] [--trace PATH ...] [--json]``
(``make bench-ladder``). Each run is ``--work-h`` hours (40) of training on a two-rung
ladder, spot then on-demand, with a deadline ``slack`` x the on-demand-only duration.
The world (``bench/ladder_world.py``) is separate from the policies
(``bench/ladder_policies.py``):

* ``omniscient``: a lower bound no policy beats, knowing all the future of capacity;
* ``always-od``, ``always-spot`` (waits for spot), ``last-safe`` (spot until the time
  left is on-demand's finish plus a restart, then on-demand for good);
* ``uniform-progress``: Wu et al., "Can't Be Late", NSDI '24, section 5.2.2;
* ``ours``: :func:`spottrain.ladder.decide.decide`, the launchers' code, fed only what
  the ledger knows at each moment (no step time before a step was trained, but the
  user's estimate, ``Prior.step_s``, equal to the true one), as the Vertex launcher
  calls it; ``ours-gke`` as the JobSet launcher does (no prices).

The grid (``--full``): slack (1.02, 1.05, 1.1, 1.5, 2, 3) x preemptions/h (0.1, 0.5,
2, 4, 8, 16) x restart (5, 15 min) x droughts (none; after preemptions: with
probability 0.3 none for an exponential time of mean 1.5 h; one at the start, 1.25 x
the slack) x spot at (0.2, 0.3, 0.7) of on-demand. The default is a subset of it, and
``--quick`` a smaller one. With ``--trace``, each trace file in the public format
(skypilot-org/spot-traces; ``make bench-ladder-traces`` fetches them) is replayed
from ``--runs`` seeded start points at every slack, restart and price instead.

Per cell and policy: deadlines met (%), mean cost ÷ the on-demand-only cost (a missed
run is stopped at its deadline), and the gap to the omniscient bound. A summary line
per policy: the cells where it met >= 99 % wherever always-od did, and the cells where
it cost more (by > 0.01) than the cheapest simple baseline that also met >= 99 %.
Google publishes no preemption rate per hour for Spot VMs: the rates are the issue's.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is first on the path and would shadow the standard
# library's copy (bench/copy.py): the repository instead.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

from bench import ladder_policies as pol  # noqa: E402
from bench import ladder_world as lw  # noqa: E402

SAVE_S = 600.0
SLACKS = (1.02, 1.05, 1.1, 1.5, 2.0, 3.0)
RATES = (0.1, 0.5, 2.0, 4.0, 8.0, 16.0)
RESTARTS_MIN = (5.0, 15.0)
DROUGHTS = ("none", "after", "start")
PRICES = (0.2, 0.3, 0.7)
GRIDS = {
    "full": (SLACKS, RATES, RESTARTS_MIN, DROUGHTS, PRICES),
    "default": ((1.02, 1.1, 1.5, 3.0), (0.1, 2.0, 8.0, 16.0), (5.0, 15.0), DROUGHTS, (0.3,)),
    "quick": ((1.05, 1.5, 3.0), (0.5, 4.0, 16.0), (5.0,), DROUGHTS, (0.3,)),
}
POLICIES = (
    "omniscient", "always-od", "always-spot", "last-safe", "uniform-progress", "ours",
    "ours-gke",
)  # fmt: skip


def _cell(worlds: list, prices: tuple) -> dict:
    """{price: {policy: {met, cost, gap}}} over ``worlds`` (the same worlds for all)."""
    runs = {name: [lw.run(w, p) for w in worlds] for name, p in pol.BASELINES.items()}
    gke = [lw.run(w, pol.ours(None, launcher="gke")) for w in worlds]  # no prices: once
    out = {}
    for price in prices:
        bound = [lw.lower_bound(w, price) for w in worlds]
        ours = [lw.run(w, pol.ours({"spot": price, "on-demand": 1.0})) for w in worlds]
        row = {"omniscient": {"met": 100.0, "cost": sum(bound) / len(bound), "gap": 0.0}}
        for name, results in {**runs, "ours": ours, "ours-gke": gke}.items():
            costs = [
                r.cost(price, w.work_s, w.restart_s) for r, w in zip(results, worlds, strict=True)
            ]
            row[name] = {
                "met": 100.0 * sum(r.met for r in results) / len(results),
                "cost": sum(costs) / len(costs),
                "gap": sum(c - b for c, b in zip(costs, bound, strict=True)) / len(costs),
            }
        out[price] = row
    return out


def table(grid: str = "default", runs: int = 20, work_h: float = 40.0) -> list[dict]:
    """One row per cell of the seeded grid ``grid`` (:data:`GRIDS`)."""
    slacks, rates, restarts, droughts, prices = GRIDS[grid]
    rows = []
    for slack, rate, restart_min, drought in itertools.product(slacks, rates, restarts, droughts):
        worlds = [
            lw.stochastic(work_s=work_h * 3600, slack=slack, rate_h=rate,
                          restart_s=restart_min * 60, save_s=SAVE_S, drought=drought, seed=s)
            for s in range(runs)
        ]  # fmt: skip
        for price, row in _cell(worlds, prices).items():
            cell = {"slack": slack, "rate_h": rate, "restart_min": restart_min}
            rows.append({**cell, "drought": drought, "price": price, **row})
    return rows


def trace_table(paths: list[str], runs: int = 20, work_h: float = 40.0) -> list[dict]:
    """One row per trace x slack x restart x price, ``runs`` seeded start points each."""
    rows = []
    for path in paths:
        trace = lw.read_trace(path)
        span = trace[0] * len(trace[1])
        starts = [random.Random(s).uniform(0, span) for s in range(runs)]
        for slack, restart_min in itertools.product(SLACKS, RESTARTS_MIN):
            worlds = [
                lw.from_trace(trace, work_s=work_h * 3600, slack=slack,
                              restart_s=restart_min * 60, save_s=SAVE_S, start_s=s)
                for s in starts
            ]  # fmt: skip
            for price, row in _cell(worlds, PRICES).items():
                cell = {
                    "trace": "/".join(Path(path).parts[-3:]),
                    "slack": slack,
                    "restart_min": restart_min,
                }
                rows.append({**cell, "price": price, **row})
    return rows


def summary(rows: list[dict]) -> dict:
    """Per policy: cells met >= 99 % where always-od did, and dearer than simple ones."""
    out = {}
    for name in POLICIES[1:]:
        od_met = [r for r in rows if r["always-od"]["met"] >= 99.0]
        met = sum(r[name]["met"] >= 99.0 for r in od_met)
        dearer = []
        for r in rows:
            meeting = [r[p]["cost"] for p in pol.SIMPLE if r[p]["met"] >= 99.0]
            if meeting and r[name]["cost"] > min(meeting) + 0.01:
                dearer.append(r)
        worse_up = sum(r[name]["cost"] > r["uniform-progress"]["cost"] + 0.01 for r in rows)
        out[name] = {"met_where_od_met": met, "od_met": len(od_met), "dearer": len(dearer),
                     "cells": len(rows), "dearer_than_up": worse_up}  # fmt: skip
    return out


def _key(row: dict) -> str:
    if "trace" in row:
        return f"{row['trace']} | {row['slack']}x | {row['restart_min']:.0f} | {row['price']}"
    return (f"{row['slack']}x | {row['rate_h']} | {row['restart_min']:.0f} | {row['drought']} "
            f"| {row['price']}")  # fmt: skip


def main() -> None:
    """Prints the table and the summary (Markdown, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a small grid (smoke)")
    size.add_argument("--full", action="store_true", help="the issue's whole grid")
    parser.add_argument("--runs", type=int, default=20, help="seeds (or trace starts) a cell")
    parser.add_argument("--work-h", type=float, default=40.0)
    parser.add_argument("--trace", action="append", default=[], metavar="PATH")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    began = time.monotonic()
    grid = "quick" if args.quick else "full" if args.full else "default"
    if args.trace:
        rows = trace_table(args.trace, args.runs, args.work_h)
    else:
        rows = table(grid, args.runs, args.work_h)
    took = time.monotonic() - began
    sums = summary(rows)
    crashes = dict(pol.CRASHES)
    if args.json:
        out = {"rows": rows, "summary": sums, "seconds": took, "decide_raised": crashes}
        print(json.dumps(out, indent=1))
        return
    what = "traces" if args.trace else f"grid {grid}"
    print(f"{what}: {args.runs} runs a cell, {args.work_h:g} h of work, {took:.0f} s; "
          "met % / cost ÷ on-demand / gap to the omniscient bound")  # fmt: skip
    head = "trace | slack | restart min | spot" if args.trace else (
        "slack | preemptions/h | restart min | drought | spot")  # fmt: skip
    print(f"| {head} | " + " | ".join(POLICIES) + " |")
    print("|" + "---|" * (head.count("|") + 1 + len(POLICIES)))
    for r in rows:
        cells = [f"{r[p]['met']:.0f} % / {r[p]['cost']:.2f} / {r[p]['gap']:.2f}" for p in POLICIES]
        print(f"| {_key(r)} | " + " | ".join(cells) + " |")
    for name, s in sums.items():
        print(f"{name}: met >= 99 % in {s['met_where_od_met']} of the {s['od_met']} cells "
              f"always-od met; dearer than the cheapest simple baseline meeting them in "
              f"{s['dearer']} of {s['cells']}; dearer than uniform-progress in "
              f"{s['dearer_than_up']}")  # fmt: skip
    if crashes:
        print(f"decide() raised OverflowError (counted as staying) by launcher: {crashes}")


if __name__ == "__main__":
    main()
