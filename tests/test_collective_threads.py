"""Fast steps under MultiWorkerMirroredStrategy keep a flat thread count.

A per-collective timeout made TensorFlow park one sleeping thread per collective for
the whole timeout (``collective_util.py``: "creates a new thread for each
collective"): at ~100 steps/s the workers grew by hundreds of threads a second and
died with "can't start new thread". The engine sets none by default
(``distribution.create_strategy``); this runs a fast task long enough to tell.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from trainer_helpers import summary

from spottrain.trainer import launch


def _worker_threads(marker: str) -> dict[int, int]:
    """Thread counts of the live processes whose command line names ``marker``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            found[int(pid)] = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:  # ended meanwhile
            continue
    return found


@pytest.mark.slow
def test_a_fast_two_worker_run_does_not_grow_threads(tmp_path):
    out = tmp_path / "fast"
    args = [
        "--task", "examples.regression:Regression", "--task-args", '{"features": 8}',
        "--train-steps", "3000", "--batch-size-per-replica", "8", "--save-every-steps", "1000",
        "--log-every-steps", "500", "--threads", "1",
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    result = {}
    run = threading.Thread(target=lambda: result.update(r=launch.Launcher(2, args).run()))
    run.start()
    samples = []  # (seconds since start, max threads of any worker process)
    start = time.monotonic()
    while run.is_alive():
        counts = _worker_threads(str(out / "checkpoints"))
        if counts:
            samples.append((time.monotonic() - start, max(counts.values())))
        time.sleep(0.5)
    run.join()
    assert result["r"].code == 0, result["r"]
    assert summary(out)["final_step"] == 3000
    # Steady state: from a third of the run on (TF's own pools are up by then). A leak
    # only adds threads; the last samples may catch a worker tearing its threads down.
    steady = [n for t, n in samples if t > samples[-1][0] / 3]
    assert len(steady) >= 4, samples
    assert max(steady) - steady[0] < 30, samples
