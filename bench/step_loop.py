"""Our step loop against ``model.fit`` at the *same* knobs, on the *same* input pipeline.

For each model (an MLP on digits' 64 features, a small CNN and ResNet50 on digits
at 32x32), each variant trains in a fresh single process with one TensorFlow thread,
interleaved (the order rotates every repeat, so other load hits all alike):

* ``fit``: ``model.fit`` at its defaults (one step per call; ``jit_compile="auto"``,
  which is off on a CPU);
* ``ours``: the engine (``spottrain.trainer.train_lib.Trainer``) as production runs
  it, with ``--steps-per-loop 1`` and ``--jit-compile off``;
* ``fit N`` / ``ours N``: ``steps_per_execution=N`` / ``--steps-per-loop N``;
* ``+xla``: ``jit_compile=True`` / ``--jit-compile on`` (XLA runs on a CPU too);
* ``fit again``: the control, ``fit`` a second time: its ratio to ``fit`` is the noise
  floor of this machine at this load.

Both sides read one pipeline, built by :func:`pipeline` (in-memory tensors, shuffle,
repeat, batch, prefetch), with the same model, optimizer (Adam 1e-3), batch and
steps. Saves are left out (ours saves only after its last timed step): their cost is
``make bench-checkpoint``'s. Each process times its own loop after ``warm-up``
steps (tracing, XLA compilation): wall and CPU seconds per step from the timestamp at
the end of the call holding the warm-up step to the last one (fit's
``on_train_batch_end``; our ledger's per-call ``progress``).

Printed: ms per step of each variant (median over repeats), and ratios ours ÷ fit at
the same knobs, median [min-max] of per-repeat ratios, for wall and CPU; the load
average before and after.

Usage: ``python bench/step_loop.py [--models mlp,cnn,resnet50] [--repeats 3] [--no-xla]``
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
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]
# model: (steps, warm-up steps, batch, N for the steps-per-call variants)
MODELS = {
    "mlp": (3000, 500, 64, 50),
    "cnn": (500, 100, 64, 50),
    "resnet50": (50, 15, 16, 10),
}


def pipeline(model: str, batch: int, image_size: int = 32):
    """The one input pipeline both sides train on: digits in memory, shuffled, batched."""
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.images.astype("float32") / 16.0
    if model == "mlp":
        x = x.reshape(len(x), 64)
    else:  # 8x8 -> image_size x image_size x 3
        up = np.ones((image_size // 8, image_size // 8), "float32")
        x = np.repeat(np.kron(x, up)[..., None], 3, axis=-1)
    examples = tf.data.Dataset.from_tensor_slices((x, digits.target.astype("int32")))
    return (
        examples.shuffle(len(x), seed=0)
        .repeat()
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def build_model(model: str, image_size: int = 32):
    import keras

    if model == "mlp":
        return keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
    if model == "cnn":
        return keras.Sequential(
            [
                keras.Input((image_size, image_size, 3)),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(64, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
    shape = (image_size, image_size, 3)
    return keras.applications.ResNet50(weights=None, input_shape=shape, classes=10,
                                       classifier_activation=None)  # fmt: skip


def _task_class():
    from spottrain.trainer.task_api import Task

    class BenchTask(Task):
        """The bench's model and pipeline as a task (starts at step 0: not for resumes)."""

        def build_model(self):
            return build_model(self.args["model"], self.args.get("image_size", 32))

        def train_dataset(self, spec):
            size = self.args.get("image_size", 32)
            return pipeline(self.args["model"], spec.per_replica_batch, size)

        def loss(self, labels, outputs):
            import keras

            return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)

    return BenchTask


def __getattr__(name):  # ``--task bench.step_loop:BenchTask`` without importing TF here
    if name == "BenchTask":
        return _task_class()
    raise AttributeError(name)


def _stamp(stamps: list, step: int) -> None:
    r = resource.getrusage(resource.RUSAGE_SELF)
    stamps.append((step, time.perf_counter(), r.ru_utime + r.ru_stime))


def run_ours(model: str, n: int, xla: bool, out: str, knobs: dict) -> list:
    from spottrain import ledger as ledger_lib
    from spottrain.trainer import attempt, train_lib

    steps, batch = knobs["steps"], knobs["batch"]
    task_args = {"model": model, "image_size": knobs["image_size"]}
    argv = [
        "--task", "bench.step_loop:BenchTask", "--task-args", json.dumps(task_args),
        "--batch-size-per-replica", str(batch), "--train-steps", str(steps),
        "--save-every-steps", str(steps), "--save-every-seconds", "0",
        "--steps-per-loop", str(n), "--jit-compile", "on" if xla else "off",
        "--checkpoint-dir", f"{out}/ckpt", "--model-dir", f"{out}/model",
        "--threads", "1" if knobs["one_thread"] else "0",
        *(["--mixed-precision"] if knobs["mixed"] else []),
    ]  # fmt: skip
    cfg, cluster = attempt.prepare(argv)
    task = attempt.validate_all(cfg, cluster)
    stamps: list = []

    class Stamped(ledger_lib.Ledger):  # the loop calls progress(step) after each call
        def progress(self, step, **kw):
            if not stamps or stamps[-1][0] != step:
                _stamp(stamps, step)
            return super().progress(step, **kw)

    trainer = train_lib.Trainer(cfg, cluster, task, Stamped(cfg.checkpoint_dir, True, workers=1))
    trainer.build()
    trainer.train()
    trainer.store.close()
    if n == 1:
        # One step a call runs the next step before step j is recorded (calls.StepAhead;
        # on a CPU the call returns when it is done): at stamp j, step j + 1 is done
        # too, except at the last step, which has none after it.
        stamps = [(s + 1, *rest) for s, *rest in stamps[:-1]] + stamps[-1:]
    return stamps


def run_fit(model: str, n: int, xla: bool, knobs: dict) -> list:
    import keras
    import tensorflow as tf

    from spottrain.trainer import config, optimizer

    if knobs["one_thread"]:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if knobs["mixed"]:
        keras.mixed_precision.set_global_policy("mixed_float16")
    steps, batch = knobs["steps"], knobs["batch"]
    keras.utils.set_random_seed(0)
    net = build_model(model, knobs["image_size"])
    net.compile(
        optimizer=optimizer.build_optimizer(config.TrainConfig(train_steps=steps)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=n,
        jit_compile=True if xla else "auto",
    )
    stamps: list = []

    class Times(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):  # once per call: batch = its last
            _stamp(stamps, batch + 1)

    net.fit(pipeline(model, batch, knobs["image_size"]), steps_per_epoch=steps, epochs=1,
            verbose=0, callbacks=[Times()])  # fmt: skip
    return stamps


def per_step(stamps: list, warm: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step from the call holding step ``warm`` to the last."""
    first = next(s for s in stamps if s[0] >= warm)
    last = stamps[-1]
    steps = last[0] - first[0]
    return (last[1] - first[1]) / steps, (last[2] - first[2]) / steps


def variants(n: int, xla: bool) -> dict[str, tuple[str, int, bool]]:
    out = {"fit": ("fit", 1, False), "ours": ("ours", 1, False),
           f"fit {n}": ("fit", n, False), f"ours {n}": ("ours", n, False)}  # fmt: skip
    if xla:
        out["fit+xla"], out["ours+xla"] = ("fit", 1, True), ("ours", 1, True)
        out[f"fit {n}+xla"], out[f"ours {n}+xla"] = ("fit", n, True), ("ours", n, True)
    out["fit again"] = ("fit", 1, False)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def knobs_of(model: str, given: dict) -> dict:
    """The model's defaults (MODELS) under what the command line set."""
    steps, warm, batch, n = MODELS[model]
    knobs = {"steps": steps, "warm": warm, "batch": batch, "n": n, "image_size": 32,
             "mixed": False, "one_thread": True}  # fmt: skip
    return {**knobs, **{k: v for k, v in given.items() if v is not None}}


def child(argv: list[str]) -> int:
    side, model, n, xla, out = argv[0], argv[1], int(argv[2]), argv[3] == "1", argv[4]
    knobs = knobs_of(model, json.loads(argv[5]) if len(argv) > 5 else {})
    run = run_ours(model, n, xla, out, knobs) if side == "ours" else run_fit(model, n, xla, knobs)
    print(json.dumps(per_step(run, knobs["warm"])))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn,resnet50")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-xla", action="store_true")
    p.add_argument("--steps", type=int, help="default: the model's (MODELS)")
    p.add_argument("--warm-up", type=int, dest="warm", help="steps left out of the timing")
    p.add_argument("--batch", type=int)
    p.add_argument("--steps-per-loop", type=int, dest="n", help="N of the N variants")
    p.add_argument("--image-size", type=int, help="a multiple of 8 (default 32)")
    p.add_argument("--mixed-precision", action="store_const", const=True, dest="mixed")
    p.add_argument("--all-threads", action="store_const", const=False, dest="one_thread",
                   help="let TensorFlow use every core (a GPU machine); default: one")  # fmt: skip
    a = p.parse_args()
    given = {k: getattr(a, k) for k in ("steps", "warm", "batch", "n", "image_size", "mixed",
                                        "one_thread")}  # fmt: skip
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    if a.one_thread is not False:
        env.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1")
    env.pop("TF_CONFIG", None)
    work = Path(tempfile.mkdtemp(prefix="bench-step-loop-"))
    load_before = os.getloadavg()
    try:
        for model in a.models.split(","):
            knobs = knobs_of(model, given)
            steps, warm, batch, n = (knobs[k] for k in ("steps", "warm", "batch", "n"))
            table = variants(n, not a.no_xla)
            names = list(table)
            runs: dict[str, list] = {name: [] for name in names}
            for i in range(a.repeats):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    side, k, xla = table[name]
                    out = work / f"{model}-{i}-{len(runs[name])}-{side}{k}{int(xla)}"
                    cmd = [sys.executable, __file__, "--child", side, model, str(k),
                           "1" if xla else "0", str(out), json.dumps(knobs)]  # fmt: skip
                    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise SystemExit(f"{model} {name} failed:\n{proc.stderr[-3000:]}")
                    runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"{model} repeat {i + 1}: " + ", ".join(
                    f"{name} {1000 * runs[name][-1][0]:.2f}" for name in names) + " ms/step",
                    flush=True)  # fmt: skip
            print(f"\n{model}: steps={steps} warm-up={warm} batch={batch} N={n} "
                  f"image={knobs['image_size']} mixed={knobs['mixed']} "
                  f"repeats={a.repeats}")  # fmt: skip
            if knobs["image_size"] != 32 or not knobs["one_thread"]:
                rate = {nm: batch / statistics.median(r[0] for r in runs[nm]) for nm in names}
                print("  images/s: " + ", ".join(f"{nm} {v:.0f}" for nm, v in rate.items()))
            for name in names:
                print(f"  {name:14s} {1000 * statistics.median(r[0] for r in runs[name]):8.3f} "
                      "ms/step (median wall)")  # fmt: skip
            print("  ratio, median [min-max] of per-repeat ratios:    wall          CPU")
            pairs = [(o, o.replace("ours", "fit")) for o in names if o.startswith("ours")]
            for mine, theirs in [*pairs, ("fit again", "fit")]:
                ratios = [[m[j] / t[j] for m, t in zip(runs[mine], runs[theirs], strict=True)]
                          for j in (0, 1)]  # fmt: skip
                print(f"  {mine + ' / ' + theirs:26s} {spread(ratios[0])}  {spread(ratios[1])}")
        load_after = os.getloadavg()
        print(f"\nload average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
              f"{os.cpu_count()} CPUs")  # fmt: skip
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2:]))
    sys.exit(main())
