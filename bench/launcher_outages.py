"""The JobSet launcher through API outages on the wire, at its production settings.

    python bench/launcher_outages.py [--seconds 5,20,90] [--down-for-good]

Each row: the real launcher and ``kubernetes`` client, their connections to kube-cp
(with JobSet's real controller) refused, reset, black-holed or answered late for that
long, at start or mid-run (tests/launcher_outages.py; the proxy: tests/wire_faults.py),
with the launcher's own timeouts (``kube.REQUEST_TIMEOUT``) and patience
(``kube.API_PATIENCE``). ``--down-for-good`` adds one row per kind that never ends.
All rows run at once, one namespace each; prints a Markdown table. Needs ``make tools``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# In place of this script's folder, whose copy.py would shadow the standard library's.
sys.path[0] = str(Path(__file__).resolve().parents[1] / "tests")

from launcher_outages import play  # noqa: E402
from real_jobset import running_jobset_kube  # noqa: E402
from wire_faults import KINDS, SLOW  # noqa: E402

from spottrain.runtime.train_job import kube  # noqa: E402

# A slow answer: 10 s per chunk, within the 30 s read timeout (an answer, late); down
# for good, 40 s per chunk (past it: no answer).
SLOW_DELAY, SLOW_FOR_GOOD = 10.0, 40.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", default="5,20,90")
    parser.add_argument("--down-for-good", action="store_true")
    args = parser.parse_args()
    rows = [
        (kind, phase, float(s), SLOW_DELAY)
        for s in args.seconds.split(",")
        for kind in KINDS
        for phase in ("start", "mid")
    ]
    if args.down_for_good:
        rows += [(kind, "mid", None, SLOW_FOR_GOOD) for kind in KINDS]
    with tempfile.TemporaryDirectory() as tmp, running_jobset_kube(Path(tmp)) as cp:
        with ThreadPoolExecutor(len(rows)) as pool:
            futures = [
                pool.submit(
                    play,
                    cp,
                    f"bo-{i}",
                    f"st-bo-{i}",
                    kind,
                    phase,
                    seconds,
                    patience=kube.API_PATIENCE,
                    request_timeout=kube.REQUEST_TIMEOUT,
                    delay=delay,
                )  # fmt: skip
                for i, (kind, phase, seconds, delay) in enumerate(rows)
            ]
            played = [f.result() for f in futures]
    print(
        f"\nrequest timeout {kube.REQUEST_TIMEOUT} s, patience {kube.API_PATIENCE:.0f} s, "
        f"slow = {SLOW_DELAY:.0f} s per chunk ({SLOW_FOR_GOOD:.0f} s down for good)\n"
    )
    print("| kind | at | outage | exit | retried | gang untouched | took | last line |")
    print("|---|---|---|---|---|---|---|---|")
    for run in played:
        outage = "for good" if run.seconds == float("inf") else f"{run.seconds:.0f} s"
        kind = f"{run.kind} ({SLOW_DELAY if run.seconds != float('inf') else SLOW_FOR_GOOD:.0f} s)"
        print(
            f"| {kind if run.kind == SLOW else run.kind} | {run.phase} | {outage} | {run.code} | "
            f"{run.retried} | {'yes' if run.same_gang and run.restarts == 0 else 'no'} | "
            f"{run.took:.0f} s | {run.line[:160]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
