"""Cost of the per-step profiler marker (``tf.profiler.experimental.Trace``), on vs off.

The training loop wraps every step in a ``Trace("train", step_num=..., _r=1)`` so
that TensorBoard's Profile tab finds steps. This measures what that costs when no
profiler runs (every production step), side by side in one run:

* the loop: the real trainer (small CNN, digits at 32x32, single process, one TF
  thread) trains the same steps with the marker and with it replaced by a no-op
  context, alternating, each in a fresh process; printed: the ratio (marker / no
  marker) of the summed step times and of the median step time (the latter is
  robust to bursts of other load on a shared machine);
* the marker alone: enter + exit of the context, timed in a tight loop, in
  microseconds, next to the median step time.

Usage: ``python bench/step_marker.py [--steps 400] [--repeats 4]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's copy module (see trainer_overhead.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

REPO = Path(__file__).resolve().parents[1]

# One training attempt in this process; with "off" the marker becomes a no-op context.
LOOP = r"""
import contextlib, json, sys, time
marker, argv = sys.argv[1], sys.argv[2:]
import tensorflow as tf
if marker == "off":
    tf.profiler.experimental.Trace = lambda *a, **k: contextlib.nullcontext()
from spottrain.trainer import attempt, train_lib
from spottrain import ledger as ledger_lib
cfg, cluster = attempt.prepare(argv)
task = attempt.validate_all(cfg, cluster)
t = train_lib.Trainer(cfg, cluster, task, ledger_lib.Ledger(cfg.checkpoint_dir, enabled=False))
t.build()
start = time.perf_counter()
t.train()
wall = time.perf_counter() - start
steps = [s for _, s in list(t.step_times)[10:]]  # after tracing and warm-up
t.close()
print(json.dumps({"steps_s": sum(steps), "median_ms": 1000 * sorted(steps)[len(steps) // 2],
                  "wall_s": wall}))
"""

MICRO = r"""
import time, tensorflow as tf
n = 200_000
start = time.perf_counter()
for i in range(n):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        pass
print(1e6 * (time.perf_counter() - start) / n)
"""


def _env() -> dict:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_loop(marker: str, image_dir: str, steps: int, out: Path) -> dict:
    args = [
        "--image-dir", image_dir, "--backbone", "small_cnn", "--weights", "none",
        "--image-size", "32", "--batch-size-per-replica", "16", "--train-steps", str(steps),
        "--save-every-steps", str(10 * steps), "--save-every-seconds", "0",
        "--log-every-steps", str(10 * steps), "--threads", "1",
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", LOOP, marker, *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"trainer ({marker}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeats", type=int, default=4)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-marker-"))
    try:
        sys.path.insert(0, str(REPO))
        from spottrain.datasets import write_digits

        image_dir = str(work / "digits")
        write_digits(image_dir)
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for i in range(a.repeats):  # alternate (and swap the order) so noise hits both alike
            for marker in ("on", "off") if i % 2 == 0 else ("off", "on"):
                runs[marker].append(run_loop(marker, image_dir, a.steps, work / f"{marker}{i}"))
            print(
                f"repeat {i + 1}: steps with marker {runs['on'][-1]['steps_s']:.3f} s, "
                f"without {runs['off'][-1]['steps_s']:.3f} s",
                flush=True,
            )
        micro = subprocess.run(
            [sys.executable, "-c", MICRO], env=_env(), capture_output=True, text=True, check=True
        )
        per_marker_us = float(micro.stdout.strip().splitlines()[-1])
        on = statistics.median(r["steps_s"] for r in runs["on"])
        off = statistics.median(r["steps_s"] for r in runs["off"])
        # Each run's median step is robust to the bursts other processes cause.
        on_ms = statistics.median(r["median_ms"] for r in runs["on"])
        step_ms = statistics.median(r["median_ms"] for r in runs["off"])
        print(f"\nsteps={a.steps} repeats={a.repeats} (summed step times after 10 warm-up steps)")
        print(f"with marker:          {on:.3f} s")
        print(f"without marker:       {off:.3f} s")
        print(f"ratio with/without:   {on / off:.3f}")
        print(
            f"median step:          with {on_ms:.2f} ms, without {step_ms:.2f} ms, "
            f"ratio {on_ms / step_ms:.3f}"
        )
        print(
            f"one marker (no profiler running): {per_marker_us:.2f} us = "
            f"{100 * per_marker_us / 1000 / step_ms:.3f} % of a {step_ms:.1f} ms step"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
