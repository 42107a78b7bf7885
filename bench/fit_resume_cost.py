"""What a resume costs a KerasTask's input: its first batch at step s, for growing s.

Arrays (60,000 x 784 float32, as MNIST's) and a ``keras.utils.PyDataset`` of 1,000
batches, worker 1 of 2, global batch 64: the time from making the pipeline at
``start_step = s`` to its first batch. With the batch of a step computed from its index
(spottrain/trainer/fit_sources.py) the time does not grow with ``s``; the pipeline before
issue 54 (shuffle, repeat, batch, skip) read through every earlier batch. Run it with
``PYTHONPATH`` at an older checkout to see that side (PyDatasets were refused there).

Usage: ``python bench/fit_resume_cost.py [--steps 100 2000 10000 100000]``
"""

from __future__ import annotations

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

from spottrain import KerasTask
from spottrain.trainer.task_api import TrainInput


class Arrays(KerasTask):
    x = np.random.default_rng(0).random((60000, 784), dtype=np.float32)
    y = np.arange(60000) % 10

    def examples(self):
        return self.x, self.y


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return np.full((64, 4), i, "float32"), np.zeros(64)


class PyData(KerasTask):
    def fit(self):
        from spottrain import FitArgs

        return FitArgs(Batches(), epochs=1000)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, nargs="+", default=[100, 100, 2000, 10000, 100000])
    steps = p.parse_args().steps
    context = tf.distribute.InputContext(2, 1, 2)
    for kind in (Arrays, PyData):
        task = kind({}, None)
        for start in steps:
            began = time.monotonic()
            spec = TrainInput(context, 64, 7, start, start + 10)
            try:
                next(iter(task.train_dataset(spec)))
            except Exception as e:  # noqa: BLE001 - an older checkout refuses a PyDataset
                print(f"{kind.__name__}: refused ({type(e).__name__}: {str(e)[:100]})")
                break
            print(f"{kind.__name__}: first batch at step {start}: {time.monotonic() - began:.2f} s")


if __name__ == "__main__":
    main()
