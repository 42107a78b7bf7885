"""Trainer overhead vs a plain ``model.fit`` script, measured side by side in one run.

Both sides run in fresh single processes on the same machine, alternately, on the
same model (small CNN), data (scikit-learn digits at 32x32), global batch and
number of steps, and both save the final model. Ours also checkpoints every
``--save-every`` steps, all-reduces its stop flag every step and evaluates at the
end, i.e. everything it does in production. Prints:

* wall-time ratio ours / plain fit (target <= 1.05),
* the cost of one checkpoint save (ms, from the trainer's own log),
* restart-to-first-step: process start -> first step finished, when resuming.

Usage: ``python bench/trainer_overhead.py [--steps 600] [--repeats 3]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts bench/ first on sys.path, where bench/copy.py (the GCS copy
# benchmark) would shadow the standard library's copy module.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]

PLAIN_FIT = r"""
import sys, numpy as np, tensorflow as tf, keras
from trainer import config, data, model as model_lib
image_dir, steps, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = config.TrainConfig(image_dir=image_dir, backbone="small_cnn", weights="none",
                         image_size=32, train_steps=steps)
index = data.index_image_dir(cfg)
pipes = data.Pipelines(index, cfg)
keras.utils.set_random_seed(0)
ds = (tf.data.Dataset.from_tensor_slices((pipes.train_cache, pipes.train_labels))
      .shuffle(len(index.train), seed=0).repeat().batch(batch, drop_remainder=True)
      .prefetch(tf.data.AUTOTUNE))
model = model_lib.build_model(cfg, len(index.class_names))
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
model.evaluate(pipes.val_dataset(64), verbose=0)
model.save(out + "/model.keras")
model.export(out + "/saved_model", verbose=False)
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


def _children_cpu() -> float:
    """User + system CPU seconds of all waited-for child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_plain(image_dir: str, steps: int, batch: int, out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", PLAIN_FIT, image_dir, str(steps), str(batch), str(out)],
        cwd=REPO,
        env=_env(),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def trainer_args(image_dir: str, steps: int, batch: int, out: Path, save_every: int):
    return [
        "--image-dir",
        image_dir,
        "--backbone",
        "small_cnn",
        "--weights",
        "none",
        "--image-size",
        "32",
        "--batch-size-per-replica",
        str(batch),
        "--train-steps",
        str(steps),
        "--save-every-steps",
        str(save_every),
        "--log-every-steps",
        "50",
        "--checkpoint-dir",
        str(out / "ckpt"),
        "--model-dir",
        str(out / "model"),
    ]


def run_ours(args: list[str]) -> tuple[float, str, float | None]:
    """Returns (wall seconds, output, seconds from spawn to the first step line)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.task", *args],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first_step, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if first_step is None and "first step done" in line:
            first_step = time.perf_counter() - start
    if proc.wait() != 0:
        raise SystemExit("trainer failed:\n" + "".join(lines[-30:]))
    return time.perf_counter() - start, "".join(lines), first_step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    try:
        sys.path.insert(0, str(REPO))
        from spottrain.datasets import write_digits

        image_dir = str(work / "digits")
        write_digits(image_dir)
        plain, ours, saves = [], [], []
        plain_cpu, ours_cpu = [], []
        for i in range(a.repeats):  # alternate so machine noise hits both sides alike
            before = _children_cpu()
            plain.append(run_plain(image_dir, a.steps, a.batch, work / f"plain{i}"))
            plain_cpu.append(_children_cpu() - before)
            before = _children_cpu()
            wall, out, _ = run_ours(
                trainer_args(image_dir, a.steps, a.batch, work / f"ours{i}", a.save_every)
            )
            ours_cpu.append(_children_cpu() - before)
            ours.append(wall)
            saves += [float(ms) for ms in re.findall(r"\(interval, (\d+) ms\)", out)]
            print(f"repeat {i + 1}: plain fit {plain[-1]:.2f} s, ours {ours[-1]:.2f} s", flush=True)
        # Restart: resume a finished-halfway run, time spawn -> first step.
        resume_dir = work / "resume"
        run_ours(trainer_args(image_dir, a.steps // 2, a.batch, resume_dir, a.save_every))
        _, _, first = run_ours(trainer_args(image_dir, a.steps, a.batch, resume_dir, a.save_every))
        mp, mo = statistics.median(plain), statistics.median(ours)
        print(
            f"\nsteps={a.steps} batch={a.batch} save_every={a.save_every} "
            f"repeats={a.repeats} (median wall time, whole process)"
        )
        print(f"plain model.fit:      {mp:.2f} s")
        print(f"ours (checkpointing): {mo:.2f} s")
        print(f"ratio ours/plain:     {mo / mp:.3f}  (target <= 1.05)")
        cp, co = statistics.median(plain_cpu), statistics.median(ours_cpu)
        # CPU seconds (user + sys of the whole process tree, one TF thread each)
        # count work, not waiting, so other load on the machine moves them less.
        print(f"CPU seconds:          plain {cp:.2f}, ours {co:.2f}, ratio {co / cp:.3f}")
        print(
            f"one checkpoint save:  {statistics.median(saves):.0f} ms median ({len(saves)} saves)"
        )
        print(f"restart -> 1st step:  {first:.2f} s (process spawn to first finished step)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
