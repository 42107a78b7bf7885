"""A task that pauses in one phase of an attempt, to send a notice while it is there.

``NOTICE_PHASE`` names the phase (``restore``: while the checkpoint is read back,
as a large model's is for minutes from Cloud Storage; ``trace``: the train step's
first trace; ``evaluate``: inside TensorFlow, as a big validation set's forward
passes are; ``export``: while Keras writes the model file). On entering it, each
worker writes ``<NOTICE_MARK>-<its name>`` and pauses ``PAUSE_S``: a test sends the
notice then, knowing the worker is inside that phase, not before or after it.
``child`` instead starts a process from ``train_dataset`` (as a data loader's pool
does) and writes that process's blocked-signal mask into the mark. Used by
tests/integration/trainer/test_notice_phases.py.
"""

from __future__ import annotations

import json
import os
import time

from examples.regression import Regression

PHASE_ENV = "NOTICE_PHASE"
MARK_ENV = "NOTICE_MARK"
PAUSE_S = 8.0


def _name() -> str:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return f"{task.get('type', 'chief')}-{task.get('index', 0)}"


def _enter(phase: str) -> bool:
    """Marks and pauses when ``phase`` is the one to pause in (once per process)."""
    if os.environ.get(PHASE_ENV) != phase or getattr(_enter, "done", False):
        return False
    _enter.done = True
    mark = f"{os.environ[MARK_ENV]}-{_name()}"
    with open(f"{mark}.tmp", "w") as f:
        f.write(repr(time.time()))
    os.replace(f"{mark}.tmp", mark)
    return True


class Phased(Regression):
    def train_dataset(self, spec):
        if os.environ.get(PHASE_ENV) == "child" and not getattr(self, "started_one", False):
            import subprocess
            import sys

            self.started_one = True
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            with open(f"/proc/{child.pid}/status") as f:
                blocked = next(ln.split()[1] for ln in f if ln.startswith("SigBlk:"))
            child.kill()
            child.wait()
            with open(f"{os.environ[MARK_ENV]}-{_name()}", "w") as f:
                f.write(blocked)
        return super().train_dataset(spec)

    def loss(self, labels, outputs):
        # Called only where the train step is traced: a model's first trace (or XLA
        # compile) of a large model takes this long and longer.
        if _enter("trace"):
            time.sleep(PAUSE_S)
        return super().loss(labels, outputs)

    def evaluate(self, model, batch_size: int):
        import tensorflow as tf

        if os.environ.get(PHASE_ENV) == "evaluate":

            def pause(x):
                if _enter("evaluate"):
                    time.sleep(PAUSE_S)
                return x

            # The main thread waits inside TensorFlow, where no Python handler runs.
            tf.numpy_function(pause, [tf.constant(0.0)], tf.float32, stateful=True)
        return super().evaluate(model, batch_size)

    def build_model(self):
        import keras
        import tensorflow as tf

        class Restored(tf.train.experimental.PythonState):
            """Checkpointed state whose restore runs Python: the restore phase's pause."""

            def serialize(self):
                return "restored"

            def deserialize(self, _string):
                if _enter("restore"):
                    time.sleep(PAUSE_S)

        class Probe(keras.layers.Layer):
            """Pauses while the checkpoint is restored, or Keras saves the model."""

            def __init__(self):
                super().__init__()
                self.restored = Restored()

            def call(self, x):
                return x

            def save_own_variables(self, store):
                if _enter("export"):
                    time.sleep(PAUSE_S)

        model = super().build_model()
        return keras.Sequential([keras.Input((self.features,)), Probe(), *model.layers])
