"""Notice -> saved with one step per call vs ``--steps-per-loop auto``; restart -> first step.

Each case trains the built-in small CNN on digits (CPU, one TF thread a worker;
``--backbone``, ``--image-size`` and ``--all-threads`` for a GPU)
under ``spottrain.trainer.launch``, whose chaos option sends SIGTERM to one worker
when it reports step ``--at``. Printed per case (1 and 2 workers x N = 1 and auto),
median [min-max] over the repeats:

* notice -> saved: from the launcher's SIGTERM to the last worker's exit (each exits
  only after the save of its stop step is complete and all passed the barrier);
* steps after the notice: the saved step minus the step the launcher had heard of
  (each worker reports its step after every call, so a call of N steps can run up to
  N more before the next call hears the notice);
* restart -> first step: a resume of the saved run, from the process's spawn to its
  log's "first step done" line (one worker, supervisor included).

Usage: ``python bench/notice_latency.py [--repeats 3] [--at 60]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def args_for(a, image_dir: str, out: Path, steps_per_loop: str, steps: int) -> list[str]:
    return [
        "--image-dir", image_dir, "--backbone", a.backbone, "--weights", "none",
        "--image-size", str(a.image_size), "--batch-size-per-replica", str(a.batch),
        "--train-steps", str(steps), "--save-every-steps", str(steps),
        "--save-every-seconds", "0", "--threads", "0" if a.all_threads else "1",
        "--steps-per-loop", steps_per_loop,
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
        *(["--mixed-precision"] if a.mixed_precision else []),
    ]  # fmt: skip


def restart_to_first_step(args: list[str], env: dict, expect: str = "") -> float:
    """Spawn -> the trainer's "first step done" line (then stopped), seconds.

    ``expect``: a line of its output must hold it (bench/restart_cost.py: the step restored).
    """
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    first, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if first is None and "first step done" in line:
            first = time.perf_counter() - start
            proc.terminate()
    proc.wait()
    if first is None or not any(expect in line for line in lines):
        raise SystemExit(f"the resume never stepped ({expect!r}):\n" + "".join(lines[-30:]))
    return first


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--at", type=int, default=60, help="the step the notice is sent at")
    p.add_argument("--workers", default="1,2", help="the worker counts, e.g. 1 on one GPU")
    p.add_argument("--backbone", default="small_cnn")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--mixed-precision", action="store_true")
    p.add_argument("--all-threads", action="store_true", help="TF's own thread count (a GPU)")
    a = p.parse_args()
    sys.path.insert(0, str(REPO))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("TF_CONFIG", None)
    os.environ.update(env)
    from spottrain import exits
    from spottrain.datasets import write_digits
    from spottrain.trainer import launch

    work = Path(tempfile.mkdtemp(prefix="bench-notice-"))
    load = os.getloadavg()[0]
    try:
        image_dir = str(work / "digits")
        write_digits(image_dir)
        cases = [(int(w), n) for w in a.workers.split(",") for n in ("1", "auto")]
        got: dict = {c: {"latency": [], "after": [], "restart": []} for c in cases}
        for i in range(a.repeats):
            for workers, n in cases[i % len(cases) :] + cases[: i % len(cases)]:
                out = work / f"{workers}-{n}-{i}"
                run_args = args_for(a, image_dir, out, n, 100 * a.at)
                runner = launch.ProcessLauncher(
                    workers, run_args, preempt_at_step=a.at, signal_name="TERM", seed=0
                )
                result = runner.run()
                if result.chaos is None or result.code != exits.PREEMPTED:
                    raise SystemExit(f"{workers} worker(s), N={n}: no preemption: {result}")
                last_exit = max(w.ended_at for w in runner.workers)
                record = json.loads((out / "ckpt" / "attempts.json").read_text())["attempts"][0]
                got[(workers, n)]["latency"].append(last_exit - result.chaos["at"])
                got[(workers, n)]["after"].append(record["saved_step"] - result.chaos["step"])
                if workers == 1:
                    got[(workers, n)]["restart"].append(restart_to_first_step(run_args, env))
            print(f"repeat {i + 1} done", flush=True)
        print(f"\n{a.backbone} at {a.image_size} px, batch {a.batch}; "
              f"notice at step {a.at}, {a.repeats} repeats, load average {load:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after; median [min-max]")  # fmt: skip
        for (workers, n), figures in got.items():
            line = (f"  {workers} worker(s), --steps-per-loop {n:4s}: notice -> saved "
                    f"{spread(figures['latency'])} s, steps after the notice "
                    f"{spread(figures['after'])}")  # fmt: skip
            if figures["restart"]:
                line += f", restart -> first step {spread(figures['restart'])} s"
            print(line)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
