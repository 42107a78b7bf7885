"""Per-step time of public Keras examples (tests/keras_io): the engine vs their own ``model.fit``.

One worker, CPU, each variant in a fresh process, interleaved (the order rotates every
repeat, so other load hits all alike). Both train the example's compiled model on the
same batches (the engine's pipeline for one worker, handed to fit), for ``--steps``:

* ``ours k``: ``spottrain.trainer.train_lib.Trainer`` as production runs it (the vote,
  ledger, heartbeat, saves every 100 steps asynchronously) with ``--steps-per-loop k``;
* ``fit k``: ``model.fit`` with ``steps_per_execution=k``, no callbacks but the timer.

k is 1 (fit's default) and ``--best`` (fit's best knob for a small model). Each process
times its own loop after ``WARM_UP`` steps (tracing left out): the time between the
first stamp at or past it and the last, over the steps between. Printed: each
variant's median ms per step over the repeats, and ours ÷ fit at the same k, median
[min-max] of the per-repeat ratios.

Usage: ``python bench/keras_io_step.py [--examples vae,timeseries] [--steps N] [--repeats N]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's copy module (see trainer_overhead.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import importlib.util
import os
import shutil
import statistics
import tempfile

WARM_UP = 20


def _sibling(name: str):
    """A bench script beside this one, as a module (bench/ is off sys.path: see above)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Its subprocess runner (one TF thread, quiet logs, the repo on PYTHONPATH) and spread.
overhead = _sibling("trainer_overhead")

# One JSON line: (step, time) after each call of the engine's loop.
OURS = r"""
import json, sys, time
from spottrain.trainer import attempt, train_lib
from spottrain import ledger as ledger_lib
cfg, cluster = attempt.prepare(sys.argv[1:])
task = attempt.validate_all(cfg, cluster)
stamps = []
class Stamped(ledger_lib.Ledger):  # the loop reports progress(step) after every call
    def progress(self, step, saved_step=None, force=False):
        if not stamps or stamps[-1][0] != step:
            stamps.append((step, time.perf_counter()))
        return super().progress(step, saved_step=saved_step)
t = train_lib.Trainer(cfg, cluster, task, Stamped(cfg.checkpoint_dir, True, workers=1))
t.build()
t.train()
t.store.close()
print(json.dumps(stamps))
"""

# The same model under fit, on the same batches: (step, time) after each execution.
FIT = r"""
import importlib, json, sys, time
import keras, tensorflow as tf
from spottrain.trainer.task_api import TrainInput
spec, steps, batch, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
module, _, name = spec.partition(":")
task = getattr(importlib.import_module(module), name)({}, None)
keras.utils.set_random_seed(42)
ds = task.train_dataset(TrainInput(tf.distribute.InputContext(1, 0, 1), batch, 42, 0, steps))
model = task.build_model()
model.steps_per_execution = k  # what compile(steps_per_execution=k) sets
stamps = []
class Times(keras.callbacks.Callback):
    def on_train_batch_end(self, step, logs=None):  # once per execution: its last step
        stamps.append((step + 1, time.perf_counter()))
model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[Times()])
print(json.dumps(stamps))
"""


def per_step(stamps: list) -> float:
    """Seconds per step between the first stamp at or past WARM_UP and the last."""
    start = next(s for s in stamps if s[0] >= WARM_UP)
    end = stamps[-1]
    return (end[1] - start[1]) / (end[0] - start[0])


def run(code: str, args: list[str]) -> float:
    return per_step(overhead.run_json(code, args))


def ours_args(spec: str, a, k: int, out: Path) -> list[str]:
    return [
        "--task", spec, "--train-steps", str(a.steps), "--batch-size-per-replica", str(a.batch),
        "--steps-per-loop", str(k), "--save-every-steps", "100", "--save-every-seconds", "0",
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
    ]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default="timeseries,siamese,vae,ticket_classifier")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--best", type=int, default=10, help="the larger steps_per_execution (divides --steps)"
    )
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-keras-io-"))
    load_before = os.getloadavg()
    try:
        for example in a.examples.split(","):
            spec = f"tests.keras_io.{example}:Task"
            names = [f"{kind} {k}" for k in (1, a.best) for kind in ("ours", "fit")]
            runs: dict[str, list[float]] = {n: [] for n in names}
            for i in range(a.repeats):
                shift = i % len(names)
                for name in names[shift:] + names[:shift]:
                    kind, k = name.split()
                    out = work / f"{example}-{k}-{i}"
                    runs[name].append(
                        run(OURS, ours_args(spec, a, int(k), out))
                        if kind == "ours"
                        else run(FIT, [spec, str(a.steps), str(a.batch), k])
                    )
            medians = ", ".join(
                f"{n} {1000 * statistics.median(v):.2f} ms" for n, v in runs.items()
            )
            ratios = ", ".join(
                f"k={k}: "
                + overhead.spread(
                    [o / f for o, f in zip(runs[f"ours {k}"], runs[f"fit {k}"], strict=True)]
                )
                for k in (1, a.best)
            )
            print(f"{example}: {medians}; ours / fit {ratios}", flush=True)
        load_after = os.getloadavg()
        print(
            f"steps={a.steps} batch={a.batch} repeats={a.repeats}; "
            f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
