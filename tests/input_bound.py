"""Test-only: profile the real training with an input pipeline too slow for its steps.

The profile's tests need a run the report must call input-bound, next to a healthy
one. The production code has no knob for that; this script slows the trainer's
training pipeline itself (a sleep per batch) and then runs the profiling command
line in its own process::

    python tests/input_bound.py DELAY_MS [profiling options] -- [trainer flags]
"""

from __future__ import annotations

import sys
import time


def slow_train_dataset(delay_ms: float) -> None:
    """Adds a ``delay_ms`` sleep per batch to each train set of the image task's ``Pipelines``.

    A sequential map, like an unparallelised decode: the producer cannot run ahead
    of the delay however deep the prefetch buffer is. The sleep runs in a Python
    function (``tf.numpy_function``), which the trace shows as a ``PyFunc`` op.
    """
    import numpy as np
    import tensorflow as tf

    from spottrain.tasks.image import data

    original = data.Pipelines.train_dataset
    seconds = delay_ms / 1000

    def _sleep():
        time.sleep(seconds)
        return np.int64(0)

    def delayed(images, labels):
        done = tf.numpy_function(_sleep, [], tf.int64, stateful=True)
        with tf.control_dependencies([done]):
            return tf.identity(images), tf.identity(labels)

    def train_dataset(self, *args, **kwargs):
        # One batch ahead, not AUTOTUNE's buffer: that one filled up while the first
        # steps traced (seconds on a busy machine), and the profiled steps then read
        # from it without waiting (a CI-like load once measured 12 % instead of > 20 %).
        return original(self, *args, **kwargs).map(delayed).prefetch(1)

    data.Pipelines.train_dataset = train_dataset


def main(argv: list[str]) -> int:
    """Slows the input by ``argv[0]`` ms per batch, then runs the profiling CLI on the rest."""
    from spottrain import profiling

    delay_ms, *rest = argv
    if "--" not in rest:
        raise SystemExit("usage: input_bound.py DELAY_MS [profiling options] -- [trainer flags]")
    slow_train_dataset(float(delay_ms))
    # The hang supervisor would re-run `python -m spottrain.profiling` as a child
    # process, where the patch above does not exist: profile in this process.
    return profiling.main([*rest, "--no-supervisor"])


if __name__ == "__main__":
    from spottrain.trainer.preemption import exit_process

    exit_process(main(sys.argv[1:]))
