"""``make run``'s spent, lost and saved recomputed by hand from its files (issue 43).

``python bench/cost_by_hand.py [out/pipeline]`` reads the run's ``attempts.json`` and
the stand-in catalog's cached prices (``prices-standin.json``) and recomputes each
figure from docs/cost.md's definitions, written out here without spottrain's code:

* one machine-hour = the T4 + 8 n1 vCPUs + 30 GiB of n1 RAM (n1-standard-8, the
  assumed local machine), spot or on-demand, in us-central1;
* spent = seconds x workers x the spot price;
* lost = steps lost x the attempt's seconds per step (``resumed_at`` to ``ended``
  over its steps) x workers, plus the next attempt's ``started`` to ``resumed_at`` x
  its workers, priced as each ran;
* saved = the on-demand price of every machine-second not in lost, minus spent.

Prints the figures beside the ledger's, and the restart the page labels (between the
attempts, and its paid start-up part).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# n1-standard-8 (https://cloud.google.com/compute/docs/general-purpose-machines#n1_machines)
VCPUS, GIB = 8, 30


def hourly(prices: dict[str, float], side: str) -> float:
    """One n1-standard-8 with one T4 for an hour, on ``side`` (``spot``/``on_demand``)."""
    region = "us-central1"
    return (
        prices[f"gpu:t4|{side}|{region}"]
        + VCPUS * prices[f"core:n1|{side}|{region}"]
        + GIB * prices[f"ram:n1|{side}|{region}"]
    )


def main() -> int:
    """Prints the ledger's figures and the ones recomputed here."""
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/pipeline")
    table = json.loads((out / "prices-standin.json").read_text())["table"]["prices"]
    (ledger,) = out.rglob("attempts.json")
    records = json.loads(ledger.read_text())["attempts"]
    spot, on_demand = hourly(table, "spot"), hourly(table, "on_demand")
    print(f"{ledger}\nper machine-hour: spot {spot:.6f}, on-demand {on_demand:.6f}")
    wasted = [0.0] * len(records)  # machine-seconds lost, per attempt
    figures = []
    for i, r in enumerate(records):
        machine_s = r["seconds"] * r["workers"]
        spent = machine_s / 3600 * spot
        lost = 0.0
        if r["outcome"] in ("preempted", "preempted_unsaved", "killed", "worker_lost", "hang"):
            per_step = (r["ended"] - r["resumed_at"]) / max(1, r["last_step"] - r["start_step"])
            redo = r["steps_lost"] * per_step * r["workers"]
            nxt = records[i + 1]
            restart = (nxt["resumed_at"] - nxt["started"]) * nxt["workers"]
            wasted[i] += redo
            wasted[i + 1] += restart
            lost = (redo + restart) / 3600 * spot
            between = nxt["started"] - r["ended"]
            print(
                f"restart after attempt {r['attempt']}: "
                f"{between + nxt['resumed_at'] - nxt['started']:.0f} s "
                f"({nxt['resumed_at'] - nxt['started']:.0f} s paid, {between:.0f} s between)"
            )
        figures.append([spent, lost, machine_s])
    for i, (spent, lost, machine_s) in enumerate(figures):
        saved = (machine_s - wasted[i]) / 3600 * on_demand - spent
        r = records[i]
        print(
            f"attempt {r['attempt']}: spent {spent:.6f} (ledger {r.get('spent')}), "
            f"lost {lost:.6f} (ledger {r.get('lost', 0)}), "
            f"saved {saved:.6f} (ledger {r.get('saved')})"
        )
        figures[i].append(saved)
    total = [sum(f[k] for f in figures) for k in (0, 1, 3)]
    print("run: spent {:.4f}, lost {:.4f}, saved {:.4f}".format(*total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
