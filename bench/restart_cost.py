"""Process start to first step, resumed at step 0 / 10,000 / 100,000 (issue 55).

The whole restart a preemption costs, not only the input's: the trainer
(``python -m spottrain.trainer.task``) is spawned on one of the KerasTasks of
``bench/fit_resume_cost.py`` (60,000 CIFAR-shaped examples, global batch 256; arrays,
a ``from_tensor_slices`` dataset, TFRecord files, a prepared tfds dataset, a PyDataset),
and timed from the spawn to its line "first step done".

The checkpoint at step ``s`` is made cheaply: one real step is trained and saved,
then its tensors are written again as ``ckpt-s`` with the step counter set to ``s``
(``tf.raw_ops.SaveV2``, the checkpoint's own object graph kept): restoring it is what
a run that trained ``s`` steps restores, at the size of this model.

Usage: ``python bench/restart_cost.py [--steps 0 10000 100000] [--kinds ...]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = {
    "arrays": "Arrays",
    "dataset": "Dataset",
    "tfrecord": "Records",
    "tfds": "Tfds",
    "pydataset": "PyData",
}


def _args(kind: str, out: str, steps: int) -> list[str]:
    return [
        "--task", f"bench.fit_resume_cost:{KINDS[kind]}", "--train-steps", str(steps),
        "--checkpoint-dir", os.path.join(out, "checkpoints"),
        "--model-dir", os.path.join(out, "model"), "--save-every-steps", "1000000",
        "--save-every-seconds", "0", "--log-every-steps", "1",
    ]  # fmt: skip


def _seed(kind: str, out: str, env) -> None:
    """One real step, saved at the end: the checkpoint the forged ones copy."""
    run = [sys.executable, "-m", "spottrain.trainer.task", *_args(kind, out, 1)]
    proc = subprocess.run(run, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{kind}: the seed run ended {proc.returncode}:\n{proc.stdout[-3000:]}")


def _forge(checkpoints: str, step: int) -> None:
    """``ckpt-<step>``: the newest checkpoint's tensors, its step counter set to ``step``."""
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(checkpoints)
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    counter = "step/.ATTRIBUTES/VARIABLE_VALUE"  # train_lib.py's Checkpoint(step=...)
    tensors = [tf.constant(step, tf.int64) if n == counter else reader.get_tensor(n) for n in names]
    target = os.path.join(checkpoints, f"ckpt-{step}")
    tf.raw_ops.SaveV2(
        prefix=target, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors
    )
    tf.compat.v1.train.update_checkpoint_state(checkpoints, target)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, nargs="+", default=[0, 10_000, 100_000])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    p.add_argument("--repeats", type=int, default=3, help="restarts at each step (median)")
    args = p.parse_args()
    root = os.path.dirname(HERE)  # not bench/ itself: its copy.py would hide the stdlib's
    sys.path.insert(0, root)
    from bench import fit_resume_cost
    from bench.notice_latency import restart_to_first_step

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        if "tfrecord" in args.kinds:
            os.makedirs(os.path.join(tmp, "records"))
            fit_resume_cost._write_records(os.path.join(tmp, "records"))
            env["BENCH_RECORDS"] = os.path.join(tmp, "records")
        if "tfds" in args.kinds:
            fit_resume_cost._prepare_tfds(os.path.join(tmp, "tfds"))
            env["BENCH_TFDS"] = os.path.join(tmp, "tfds")
        for kind in args.kinds:
            seed = os.path.join(tmp, kind, "seed")
            _seed(kind, seed, env)
            times: dict[int, list[float]] = {step: [] for step in args.steps}
            for _ in range(args.repeats):  # interleaved: the load at the moment weighs on all
                for step in args.steps:
                    out = os.path.join(tmp, kind, f"{step}-{len(times[step])}")
                    if step:
                        shutil.copytree(
                            os.path.join(seed, "checkpoints"), os.path.join(out, "checkpoints")
                        )
                        _forge(os.path.join(out, "checkpoints"), step)
                    took = restart_to_first_step(
                        _args(kind, out, step + 2), env, expect=f"start_step={step} "
                    )
                    times[step].append(took)
            for step, took in times.items():
                took.sort()
                print(
                    f"{kind}: start to first step at step {step}: {took[len(took) // 2]:.1f} s "
                    f"(median of {len(took)}, {took[0]:.1f}-{took[-1]:.1f}; "
                    f"{took[len(took) // 2] / times[args.steps[0]][len(took) // 2]:.2f}x step "
                    f"{args.steps[0]})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
