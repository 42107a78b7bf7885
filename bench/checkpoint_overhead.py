"""Cost of the time-based asynchronous saves, measured side by side in one run.

The same trainer, model, data and steps run alternately with the time-based
saves off (``--save-every-seconds 0``) and on at a short interval (``--interval``,
default 5 s: twelve times the production default's rate of 60 s, so the
overhead at the default is about a twelfth of what this measures). Step-interval
saves are off on both sides and the final save is the same. Prints:

* the training-time ratio on / off over the same steps (medians of the repeats),
* the main-thread cost of one asynchronous save (ms, from the trainer's log),
* the overhead extrapolated to the default interval.

Usage: ``python bench/checkpoint_overhead.py [--backbone mobilenet_v2] [--steps 400] [--repeats 3]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's copy module.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERVAL_S = 60.0
_STEP = re.compile(r"^step (\d+)/(\d+)\b")
_ASYNC_SAVE = re.compile(r"\(timer, (\d+) ms, writing in the background\)")
WARMUP_STEPS = 10


def run(args, image_dir: str, out: Path, interval: float) -> tuple[float, list[int]]:
    """One training run; returns (seconds from step WARMUP to the last, async save ms)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "spottrain.trainer.task",
        "--image-dir", image_dir, "--backbone", args.backbone, "--weights", "none",
        "--image-size", str(args.image_size), "--batch-size-per-replica", "32",
        "--train-steps", str(args.steps), "--save-every-steps", str(10**9),
        "--save-every-seconds", str(interval), "--log-every-steps", "1", "--threads", "1",
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    start = end = None
    saves = []
    for line in proc.stdout:
        m = _STEP.match(line)
        if m and int(m.group(1)) == WARMUP_STEPS:
            start = time.perf_counter()
        if m and int(m.group(1)) == args.steps:
            end = time.perf_counter()
        s = _ASYNC_SAVE.search(line)
        if s:
            saves.append(int(s.group(1)))
    if proc.wait() != 0 or start is None or end is None:
        raise SystemExit(f"trainer failed (exit {proc.returncode}): {' '.join(cmd)}")
    return end - start, saves


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backbone", default="mobilenet_v2")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--interval", type=float, default=5.0)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="spottrain-bench-ckpt-"))
    try:
        image_dir = str(tmp / "digits")
        subprocess.run(
            [sys.executable, "-m", "spottrain.datasets", "digits", image_dir],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        off, on, save_ms = [], [], []
        for i in range(args.repeats):
            for label, interval, sink in (("off", 0.0, off), ("on", args.interval, on)):
                seconds, saves = run(args, image_dir, tmp / f"{label}{i}", interval)
                sink.append(seconds)
                if interval:
                    save_ms += saves
                print(
                    f"  run {i + 1} saves {label:3}: {seconds:6.1f} s, {len(saves)} async save(s)"
                )
        med_on, med_off = statistics.median(on), statistics.median(off)
        ratio = med_on / med_off
        overhead = ratio - 1
        scaled = 100 * overhead * args.interval / DEFAULT_INTERVAL_S
        save_med = statistics.median(save_ms or [0])
        share = 100 * save_med / 1000 / DEFAULT_INTERVAL_S
        print(
            f"{args.backbone} {args.image_size}px, {args.steps} steps, {args.repeats} repeats:\n"
            f"  training time with async saves every {args.interval:g} s / without: "
            f"{ratio:.3f} (medians {med_on:.1f} s / {med_off:.1f} s)\n"
            f"  main-thread cost of one async save: median {save_med} ms "
            f"over {len(save_ms)} saves\n"
            f"  overhead at the default {DEFAULT_INTERVAL_S:g} s: measured "
            f"{100 * overhead:+.2f} % at {args.interval:g} s scales to {scaled:+.2f} %; "
            f"main-thread time {save_med} ms per {DEFAULT_INTERVAL_S:g} s = {share:.3f} % "
            "(target <= 2 %)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
