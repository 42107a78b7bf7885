"""``make run-deadline``: the Vertex fall-back walking the capacity ladder for a deadline.

Locally, end to end: the launcher (:mod:`spottrain.runtime.vertex_job`) talks to a
JobService stand-in (:mod:`spottrain.testing.vertex_jobs`) over the real Vertex
client; its jobs run the real trainer here. The launcher is given no step time
estimate, so it starts the run on standard (on-demand); once the standard job has
measured its speed, the run is ahead of the deadline and goes back to spot. Spot is
taken back a few seconds into every job, and the deadline (set from this machine's
speed, measured first) stops being safe on spot before spot could finish: the
launcher moves the run to standard again, cancelling the spot job, which saves on the
notice. The attempts page draws the jobs, the moves and the deadline; the summary
says how the run stood against it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from spottrain import fileio, ledger
from spottrain.datasets import write_digits
from spottrain.ledger import attempt_cost, moves
from spottrain.runtime import report
from spottrain.runtime import vertex_job as vj

STEPS, MARGIN_S, SPOT_SECONDS = 6000, 30, 4
# The margin held beyond the forecast grows with the start-up: on a loaded machine the
# last standard job's start-up varies by that much.
MARGIN_STARTUPS = 2
# Beyond standard's start-up and work: room for a return to spot once the first
# standard job has measured its speed. The return needs about 80 s + 8 start-ups (the
# pace holds half the room; the first spot job, the standard job's start-up and its
# first measured steps, a restart and the margin come off it); the start-ups and the
# work also grow on a loaded machine after the calibration, hence the rest.
ROOM_S, ROOM_STARTUPS, ROOM_WORK = 120, 8, 0.5
# Vertex AI's prices are not read from the catalog (spottrain.pricing.quoting): the
# demo's are given as a user gives theirs, illustrative, per hour of n1-standard-4.
PRICES = {"vertex": {"machine": {"n1-standard-4": {"spot": 0.066, "on_demand": 0.219}}}}


def trainer_args(digits: Path, run: Path, steps: int) -> list[str]:
    """The trainer's flags: a small CNN on digits, a save every 2 s."""
    return ["--image-dir", str(digits), "--backbone", "small_cnn", "--weights", "none",
            "--image-size", "32", "--batch-size-per-replica", "32", "--train-steps", str(steps),
            "--save-every-steps", "20", "--save-every-seconds", "2", "--log-every-steps", "50",
            "--checkpoint-dir", str(run / "checkpoints"),
            "--model-dir", str(run / "model")]  # fmt: skip


def calibrate(
    digits: Path, out: Path, steps: int = 150, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(seconds to the first step, seconds per step) of the trainer on this machine now.

    ``env``: the jobs' own environment (their threads), so the figures are theirs.
    """
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "spottrain.trainer.task",
                    *trainer_args(digits, out / "calibration", steps)],
                   check=True, capture_output=True, env=env)  # fmt: skip
    wall = time.monotonic() - began
    rec = ledger.read(str(out / "calibration" / "checkpoints"))[-1]
    return max(wall - steps * rec["seconds_per_step"], 1.0), rec["seconds_per_step"]


def deadline_for(startup: float, per_step: float, steps: int, margin_s: float) -> float:
    """A deadline spot (taken back every few seconds) meets at first and then no longer.

    Standard alone needs the start-up ``s`` and the work ``w``: twice the one and 1.2
    times the other, the margin and 30 s leave spot safe at the first looks. Spot,
    taken back 4 s into each job, trains ~3 s of every ``s + 4``: it burns the time
    in hand (``s + 0.2 w + 30``) before it could finish (the integration test's).
    """
    return time.time() + 2 * startup + 1.2 * steps * per_step + margin_s + 30


def slowed_s(records: list[dict], startup: float, per_step: float) -> float:
    """Seconds the last attempt took beyond the calibrated speed (``0``: none).

    The machine slowing after the calibration (another process's load) can make the
    last attempt, on the fastest rung, late however well the ladder chose: its start-up
    beyond ``startup`` and its steps beyond ``per_step`` each. A check of "in time" adds
    this, measured on the run itself, not a margin taken from an idle machine.
    """
    last = records[-1] if records else {}
    if last.get("started") is None or last.get("first_step_at") is None:
        return 0.0
    steps = max(0, int(last.get("last_step") or 0) - int(last.get("start_step") or 0))
    slow = max(0.0, float(last.get("seconds_per_step") or per_step) - per_step) * steps
    return slow + max(0.0, float(last["first_step_at"]) - float(last["started"]) - startup)


def payload(digits: Path, run: Path) -> dict:
    """The custom job GCPC's component would build, its pool running the trainer here."""
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {
            "image_uri": "us-docker.pkg.dev/p/r/trainer:1",
            "command": [sys.executable, "-m", "spottrain.trainer.task"],
            "args": trainer_args(digits, run, STEPS),
        },
    }
    spec = {"worker_pool_specs": [pool], "scheduling": {"strategy": "SPOT"}}
    return {"display_name": "spottrain-train", "job_spec": spec}


# What the demo writes in --out, and all it removes there before a run.
WRITES = ("run", "jobs", "digits", "calibration", "gcp_resources", "attempts.html")


def clear_own(out: Path) -> None:
    """Removes what an earlier demo wrote in ``out``, only that: it may hold the user's files."""
    for name in WRITES:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        else:
            (out / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """Runs the demo; 0 when the run finished all its steps by the deadline."""
    from spottrain.testing.vertex_jobs import JobService

    p = argparse.ArgumentParser(prog="python -m spottrain.testing.demo_deadline")
    p.add_argument(
        "--out", default="out/deadline", help="Output folder (what the demo wrote is replaced)."
    )
    args = p.parse_args(argv)
    if blocked := fileio.unwritable_folder(args.out):
        p.error(f"--out {args.out!r}: {blocked}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import
    os.environ.setdefault("SPOTTRAIN_PRICES", json.dumps(PRICES))
    out = Path(args.out).resolve()
    clear_own(out)
    run = out / "run"
    (out / "jobs").mkdir(parents=True)
    digits = out / "digits"
    write_digits(str(digits))
    print("== measuring this machine: 150 steps of the trainer alone", flush=True)
    startup, per_step = calibrate(digits, out)
    work = STEPS * per_step
    finish_by = time.time() + startup + work + ROOM_S + ROOM_STARTUPS * startup + ROOM_WORK * work
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finish_by))
    print(f"   start-up {startup:.0f} s, {per_step * 1000:.0f} ms a step: {STEPS} steps on "
          f"standard take about {startup + work:.0f} s; deadline {iso} "
          f"({finish_by - time.time():.0f} s from now)", flush=True)  # fmt: skip
    print(f"== the launcher, with no step time estimate: standard until the speed is "
          f"measured, then spot (taken back {SPOT_SECONDS} s into every job) while the "
          "deadline allows", flush=True)  # fmt: skip
    env = {**vj_env(), vj.POLL_ENV: "0.5"}
    with JobService([], log_dir=out / "jobs", by_strategy={"SPOT": f"preempt~{SPOT_SECONDS}"},
                    env=env) as svc:  # fmt: skip
        argv = [sys.executable, "-m", "spottrain.runtime.vertex_job", "--project", "demo",
                "--location", "us-central1", "--payload", json.dumps(payload(digits, run)),
                "--gcp_resources", str(out / "gcp_resources"), "--checkpoint_dir",
                str(run / "checkpoints"), "--train_steps", str(STEPS), "--finish_by", iso,
                "--first_attempts", "100", "--look_every_seconds", "2",
                "--save_every_seconds", "2", "--margin_seconds",
                f"{MARGIN_S + MARGIN_STARTUPS * startup:.0f}",
                "--prior_restart_seconds", f"{startup:.1f}"]  # fmt: skip
        code = subprocess.run(argv, env={**env, vj.API_ENV: svc.address}).returncode
    ended = time.time()
    return summary(out, run, code, finish_by, ended, calibrated=(startup, per_step))


def vj_env() -> dict[str, str]:
    """This environment, the trainer's output unbuffered and TensorFlow's C++ INFO off."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def summary(
    out: Path,
    run: Path,
    code: int,
    finish_by: float,
    ended: float,
    calibrated: tuple[float, float] | None = None,
) -> int:
    """Prices the ledger, writes the attempts page, prints the summary; the exit code.

    ``calibrated``: ``(start-up, seconds a step)`` measured before the run; what the
    machine's slowing since then added to the last attempt (:func:`slowed_s`) is said,
    and a finish that late is still in time.
    """
    from spottrain.pricing import quote

    try:  # a development install: the stand-in catalog, as make run uses
        from spottrain.testing.billing_catalog import local_prices
    except ImportError:
        local_prices = None
    with local_prices(out) if local_prices else contextlib.nullcontext():
        records = ledger.price(str(run / "checkpoints"), quote)
    totals = ledger.totals(records)
    ladder, moved = moves.read(str(run / "checkpoints"))
    page = out / "attempts.html"
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # the event reader's deprecation
    report.write_report(str(run / "checkpoints"), "", str(page))
    print("\n== the run")
    for m in moved:
        print(f"move at {time.strftime('%H:%M:%S', time.gmtime(m['at']))} UTC, "
              f"{m['from_capacity']} -> {m['to_capacity']}: {m['reason']}")  # fmt: skip
    print(report.deadline_line(records, totals, ladder, moved))
    print(f"cost: {attempt_cost.totals_line(totals) or 'price unknown'} (illustrative prices: "
          f"SPOTTRAIN_PRICES={os.environ['SPOTTRAIN_PRICES']})")  # fmt: skip
    print(f"attempts page: {page}")
    back = [m for m in moved if m["to_capacity"] == "spot"]
    slowed = slowed_s(records, *calibrated) if calibrated else 0.0
    if finish_by < ended <= finish_by + slowed:
        print(f"finished {ended - finish_by:.0f} s late: this machine slowed after the "
              f"calibration, adding {slowed:.0f} s to the last attempt")  # fmt: skip
    ok = code == 0 and ended <= finish_by + slowed and bool(back)
    if not ok:
        print(f"== not as meant: launcher exit {code}, {len(moved)} move(s), {len(back)} "
              f"back to spot, finished {ended - finish_by:+.0f} s from the deadline")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
