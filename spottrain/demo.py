"""``make run`` before the pipeline: the trainer alone, with one injected preemption.

Writes the digits image folder, trains with 2 local MWMS workers through the
launcher, sends SIGTERM to one worker mid-run, restarts the job as an
orchestrator would, and prints a summary built from the trainer's own ledger.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from spottrain import exits, fileio, ledger
from spottrain.datasets import MISSING_DEPENDENCY, MissingDependency, write_digits
from spottrain.ledger import attempt_cost, usage
from spottrain.trainer import launch
from spottrain.trainer.train_lib import SUMMARY_FILE


def main(argv: list[str] | None = None) -> int:
    """Runs the demo; returns 0 when the run finished with exactly the requested steps."""
    p = argparse.ArgumentParser(
        prog="python -m spottrain.demo", description=__doc__.splitlines()[0]
    )
    p.add_argument("--out", default="out", help="Output folder (recreated).")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--preempt-at-step", type=int, default=120)
    p.add_argument("--max-attempts", type=int, default=5)
    args = p.parse_args(argv)
    for flag, value, least in (
        ("--workers", args.workers, 1),
        ("--steps", args.steps, 1),
        ("--preempt-at-step", args.preempt_at_step, 0),
        ("--max-attempts", args.max_attempts, 1),
    ):
        if value < least:
            p.error(f"{flag} {value} must be >= {least}")
    if blocked := fileio.unwritable_folder(args.out):
        p.error(f"--out {args.out!r}: {blocked}")

    out = Path(args.out).resolve()
    run_dir = out / "demo-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"== writing scikit-learn digits to {out / 'digits'}", flush=True)
    try:
        write_digits(str(out / "digits"))
    except MissingDependency as err:
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return MISSING_DEPENDENCY
    trainer_args = [
        "--image-dir",
        str(out / "digits"),
        "--backbone",
        "small_cnn",
        "--weights",
        "none",
        "--image-size",
        "32",
        "--batch-size-per-replica",
        "16",
        "--learning-rate",
        "0.002",
        "--train-steps",
        str(args.steps),
        "--save-every-steps",
        "50",
        "--log-every-steps",
        "20",
    ]
    # A local run has no machine: its prices are an assumed spot machine's, said as
    # such (run-local assumes the same; SPOTTRAIN_USAGE names another). The workers
    # inherit this environment (launch.ProcessLauncher).
    os.environ.setdefault(usage.USAGE_ENV, usage.ASSUMED_LOCAL)
    os.environ.setdefault(ledger.CAPACITY_ENV, "spot")
    started = time.monotonic()
    for attempt in range(1, args.max_attempts + 1):
        print(
            f"== attempt {attempt}: {args.workers} workers"
            + (f", SIGTERM at step {args.preempt_at_step}" if attempt == 1 else ""),
            flush=True,
        )
        result = launch.ProcessLauncher(
            args.workers,
            trainer_args,
            output_dir=str(run_dir),
            preempt_at_step=args.preempt_at_step if attempt == 1 else 0,
            signal_name="TERM",
            log_dir="",  # one line per event; each worker's log in run_dir/worker-logs
        ).run()
        if result.code == 0:
            break
        if not exits.is_retryable(result.code):
            print(f"== attempt {attempt} failed with fatal exit {result.code}; not retrying")
            return result.code
        print(
            f"== attempt {attempt} ended with retryable exit {result.code}; restarting", flush=True
        )
    else:
        print(f"== gave up after {args.max_attempts} attempts")
        return 1
    summary = json.loads((run_dir / "model" / SUMMARY_FILE).read_text())
    from spottrain.pricing import quote

    try:  # a development install: the stand-in catalog, as make run uses
        from spottrain.testing.billing_catalog import local_prices
    except ImportError:  # the wheel: the prices the environment names
        local_prices = None
    # Priced once the run is over, as the pipelines' outputs are (never in the loop).
    with local_prices(out) if local_prices else contextlib.nullcontext():
        records = ledger.price(str(run_dir / "checkpoints"), quote)
    totals = ledger.totals(records)
    print("\n== attempts (checkpoints/attempts.json)")
    print(f"{'#':>2} {'outcome':<12} {'start':>6} {'saved':>6} {'lost':>5} {'seconds':>8}")
    for r in records:
        print(
            f"{r['attempt']:>2} {r['outcome']:<12} {r.get('start_step', '-')!s:>6} "
            f"{r.get('saved_step', '-')!s:>6} "
            f"{r.get('steps_lost', 0):>5} {r.get('seconds', 0):>8.1f}"
        )
    print("\n== summary")
    print(f"steps:          {summary['final_step']} of {summary['train_steps']} requested")
    print(
        f"preemptions:    {totals['preemptions']} (interruptions in all: {totals['interruptions']})"
    )
    print(f"steps lost:     {totals['steps_lost']}")
    print(f"val accuracy:   {summary.get('val_accuracy', float('nan')):.3f}")
    if used := usage.ran_on(records):
        print(f"ran on:         {used}")
    print(f"cost:           {attempt_cost.totals_line(totals) or 'price unknown'}")
    print(f"wall time:      {time.monotonic() - started:.1f} s")
    print(f"outputs:        {run_dir} (model/, checkpoints/, logs/, worker-logs/)")
    ok = summary["final_step"] == summary["train_steps"] == args.steps
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
