"""The trainer's per-step cost vs plain ``model.fit`` and ``fit`` + ``BackupAndRestore``.

Three variants train the same model (small CNN), data (scikit-learn's digits at
32x32, decoded into memory), global batch, optimizer and number of steps, each in a
fresh single process, interleaved (the order rotates every repeat, so the machine's
other load hits all alike):

* ``ours``: the engine as production runs it (``spottrain.trainer.train_lib.Trainer``: stop-flag
  all-reduce every step, ledger, heartbeat, asynchronous checkpoints every
  ``--save-every`` steps);
* ``fit``: ``model.fit`` with no checkpoints;
* ``fit+bar``: ``model.fit`` with ``keras.callbacks.BackupAndRestore(save_freq=--save-every)``.

Each process times its own training loop, not its start-up: a timestamp and the
process's CPU time after every step (our ledger's per-step ``progress`` call, so the
production loop runs, without the profiler's ``on_step`` hook; a Keras callback's
``on_train_batch_end``). Printed, as median [min-max] over the repeats of per-repeat
ratios ours / other:

* per-step wall: the median step interval (robust to bursts of other load) and the
  mean over the loop (includes the saves);
* loop CPU seconds (user + system, one TF thread: counts work, not waiting);
* the steps that contain a periodic save: their mean interval ÷ the same run's
  median step (ours: the async save's blocking part; fit+bar: its synchronous save);
* restart → first step, from the process's spawn (``python -m spottrain.trainer.task``, with
  its supervisor, resuming a half-done run) to its first finished step, beside
  what the log's "first step done" says (it counts from after the TensorFlow import);
* the load average before and after.

With ``--task keras`` the engine trains a user's ``KerasTask``
(``examples/keras_classifier.py``) and the other two fit that task's own compiled
model on its own examples (same batch, steps and optimizer).

Usage: ``python bench/trainer_overhead.py [--task image|resnet50|keras] [--steps N] [--repeats N]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts bench/ first on sys.path, where bench/copy.py (the GCS copy
# benchmark) would shadow the standard library's copy module.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]

# Prints one JSON line: per-step timestamps and CPU seconds of the loop.
OURS = r"""
import json, resource, sys, time
from spottrain.trainer import attempt, distribution, train_lib
from spottrain import ledger as ledger_lib
cfg, cluster = attempt.prepare(sys.argv[1:])
task = attempt.validate_all(cfg, cluster)
stamps, cpu = [], []
class Stamped(ledger_lib.Ledger):  # the loop calls progress(step) once a step, then a save may
    seen = set()
    def progress(self, step, saved_step=None, force=False):
        if step not in self.seen:
            self.seen.add(step)
            stamps.append(time.perf_counter())
            r = resource.getrusage(resource.RUSAGE_SELF)
            cpu.append(r.ru_utime + r.ru_stime)
        return super().progress(step, saved_step=saved_step)
ledger = Stamped(cfg.checkpoint_dir, True, workers=1)
t = train_lib.Trainer(cfg, cluster, task, ledger)
t.build()
t.train()  # no on_step hook: the production path (the step fetches its own batch)
t.store.close()
print(json.dumps({"stamps": stamps, "cpu": cpu}))
"""

FIT = r"""
import json, resource, sys, time
import tensorflow as tf, keras
from spottrain.tasks.image import data, model as model_lib
from spottrain.tasks.image.settings import ImageSettings
from spottrain.trainer import config, optimizer
image_dir, backup, kind = sys.argv[1], sys.argv[5], sys.argv[6]
steps, batch, save_every = (int(v) for v in sys.argv[2:5])
cfg = config.TrainConfig(train_steps=steps)
backbone = "resnet50" if kind == "resnet50" else "small_cnn"
image = ImageSettings(image_dir=image_dir, backbone=backbone, weights="none", image_size=32)
keras.utils.set_random_seed(0)
if kind == "keras":  # the user task's own compiled model and examples
    from examples.keras_classifier import Classifier
    task = Classifier({}, cfg)
    model = task.model()
    examples, n = task.single_examples(), task.shuffle_buffer
    loss = model.loss
else:
    index = data.index_image_dir(image, cfg.seed)
    pipes = data.Pipelines(index, image, cfg.seed)
    examples = tf.data.Dataset.from_tensor_slices(pipes.train_cache)  # (images, labels)
    n = len(index.train)
    model = model_lib.build_model(image, len(index.class_names))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
ds = (examples.shuffle(n, seed=0).repeat().batch(batch, drop_remainder=True)
      .prefetch(tf.data.AUTOTUNE))
model.compile(optimizer=optimizer.build_optimizer(cfg), loss=loss)
stamps, cpu = [], []
class Times(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        stamps.append(time.perf_counter())
        r = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(r.ru_utime + r.ru_stime)
callbacks = [Times()]
if backup:
    callbacks.insert(0, keras.callbacks.BackupAndRestore(backup, save_freq=save_every))
model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks)
print(json.dumps({"stamps": stamps, "cpu": cpu}))
"""


def _env() -> dict:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO),
    )
    return env


KERAS_TASK = "examples.keras_classifier:Classifier"


def trainer_args(
    image_dir: str, steps: int, batch: int, out: Path, save_every: int, kind: str = "image"
) -> list:
    what = (
        ["--task", KERAS_TASK, "--optimizer", "adam"]  # fit's side compiles the engine's Adam
        if kind == "keras"
        else ["--image-dir", image_dir, "--weights", "none",
              "--backbone", "resnet50" if kind == "resnet50" else "small_cnn",
              "--image-size", "32"]
    )  # fmt: skip
    return [
        *what, "--batch-size-per-replica", str(batch),
        "--train-steps", str(steps), "--save-every-steps", str(save_every),
        "--save-every-seconds", "0",
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
    ]  # fmt: skip


def run_json(code: str, args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"variant failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Steps left out of every variant's figures: tracing, and (ours) the first TensorBoard
# write at the first log step, which traces the summary ops once (~150 ms: a quarter
# of a 600-step run of a 0.4 ms model, nothing per step).
WARM_UP = 20


def loop_figures(run: dict, save_every: int, after: bool) -> dict:
    """Per-step intervals after the first ``WARM_UP`` steps.

    ``after``: the variant saves after its step's timestamp (ours: the hook runs
    before the save), so the save of step s falls into the interval ending at s + 1;
    else (BackupAndRestore runs before the timing callback) into the one ending at s.
    """
    stamps, cpu = run["stamps"][WARM_UP:], run["cpu"][WARM_UP:]
    intervals = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]  # k ends at step k+W+2
    median = statistics.median(intervals)
    shift = (1 if after else 2) + WARM_UP
    saving = [iv for k, iv in enumerate(intervals) if (k + shift) % save_every == 0]
    return {
        "median": median,
        "mean": statistics.fmean(intervals),
        "cpu": cpu[-1] - cpu[0],
        "save_steps": statistics.fmean(saving) / median if saving else float("nan"),
    }


def restart_to_first_step(args: list[str]) -> tuple[float, float]:
    """(spawn -> first finished step, the log's "first step done" figure) of a resume."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    first, logged, lines = None, None, []
    for line in proc.stdout:
        lines.append(line)
        if first is None and re.search(r"^step \d+/\d+ ", line):
            first = time.perf_counter() - start
        if logged is None and (m := re.search(r"first step done ([\d.]+) s", line)):
            logged = float(m.group(1))
    if proc.wait() != 0 or first is None:
        raise SystemExit("trainer failed:\n" + "".join(lines[-30:]))
    return first, logged


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--task",
        choices=["image", "resnet50", "keras"],
        default="image",
        help="image: the built-in small CNN on digits; resnet50: the same with ResNet50 "
        "(random init, 32 px); keras: examples.keras_classifier (a user's KerasTask) "
        "against fit on its own compiled model and examples",
    )
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    load_before = os.getloadavg()
    try:
        sys.path.insert(0, str(REPO))
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from spottrain.datasets import write_digits

        image_dir = str(work / "digits")
        write_digits(image_dir)
        variants = {
            "ours": lambda i: run_json(
                OURS,
                trainer_args(image_dir, a.steps, a.batch, work / f"ours{i}", a.save_every, a.task),
            ),
            "fit": lambda i: run_json(
                FIT, [image_dir, str(a.steps), str(a.batch), str(a.save_every), "", a.task]
            ),
            "fit+bar": lambda i: run_json(
                FIT,
                [
                    image_dir,
                    str(a.steps),
                    str(a.batch),
                    str(a.save_every),
                    str(work / f"b{i}"),
                    a.task,
                ],
            ),  # fmt: skip
        }
        names = list(variants)
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for i in range(a.repeats):
            order = names[i % 3 :] + names[: i % 3]
            for name in order:
                runs[name].append(loop_figures(variants[name](i), a.save_every, name == "ours"))
            print(
                f"repeat {i + 1}: "
                + ", ".join(f"{n} {1000 * runs[n][-1]['median']:.1f} ms/step" for n in names),
                flush=True,
            )
        resume = work / "resume"
        run_json(OURS, trainer_args(image_dir, a.steps // 2, a.batch, resume, a.save_every, a.task))
        restarts = [
            restart_to_first_step(
                trainer_args(image_dir, a.steps, a.batch, resume, a.steps, a.task)
            )
        ]
        load_after = os.getloadavg()
        print(
            f"\ntask={a.task} steps={a.steps} batch={a.batch} save_every={a.save_every} "
            f"repeats={a.repeats}; "
            f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
        )
        print("ratio ours / other, median [min-max] of per-repeat ratios (target <= 1.05):")
        for other in ("fit", "fit+bar"):
            for key, what in (
                ("median", "per-step wall, median step"),
                ("mean", "per-step wall, mean (saves included)"),
                ("cpu", "loop CPU seconds"),
            ):
                ratios = [o[key] / x[key] for o, x in zip(runs["ours"], runs[other], strict=True)]
                print(f"  vs {other:8s} {what:38s} {spread(ratios)}")
        print("steps that contain a periodic save, mean ÷ the run's median step:")
        for name in ("ours", "fit+bar"):
            print(f"  {name:8s} {spread([r['save_steps'] for r in runs[name]])}")
        medians = {n: statistics.median(r["median"] for r in runs[n]) for n in names}
        print("median step: " + ", ".join(f"{n} {1000 * m:.2f} ms" for n, m in medians.items()))
        first, logged = restarts[0]
        print(
            f"restart -> first step: {first:.2f} s from the process's spawn "
            f"(the log's 'first step done' says {logged:.2f} s: it starts after the TF import)"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
