"""run-local's console (spottrain.pipelines.console) and `make help`: what a newcomer reads.

The whole `make run` is in tests/system/kfp/test_local_pipeline.py (its console and its log); here a
real child process writes to the file descriptors it inherits, as kfp.local's tasks do.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

from spottrain.pipelines.console import Console

REPO = Path(__file__).resolve().parents[3]


def test_a_childs_output_goes_to_the_log_and_only_its_events_to_the_console(tmp_path):
    # Lines as the trainer, its launcher and TensorFlow write them (make run's log).
    child = r"""
import sys
print("E0000 00:00:1795685891.042518 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)", file=sys.stderr)
print("    [chief-0] step 50/120 loss=0.1381 6.1 steps/s", flush=True)
print("    [worker-0] step 50/120 loss=0.1381 6.1 steps/s", flush=True)
print("    [launcher] chaos: sending SIGTERM to chief-0 at step 50", flush=True)
print("    [chief-0] 2026-11-26 09:39:19,443 INFO trainer: saved /c/ckpt-51 at step 51 (preemption, 190 ms)")
print("    [chief-0] 2026-11-26 09:39:19,462 WARNING trainer: exit 143: preempted: saved at step 51 of 120, 0 steps lost")
"""  # noqa: E501
    console, log = io.StringIO(), tmp_path / "run.log"
    with Console(log, stream=console) as c:
        c.say("running")
        print("09:38:23.120 - INFO - Executing task \x1b[96m'train'\x1b[0m")  # kfp.local's
        subprocess.run([sys.executable, "-c", child], check=True)
        print("Got executor_input: {")  # this process's own output: the log
        logging.getLogger().warning("Task train failed (attempt 1/4). Retrying in 1.0s...")
    shown = console.getvalue()
    lines = [ln.split("] ", 1)[1] for ln in shown.splitlines()]
    assert lines == [
        "running",
        "train: started",
        "train: step 50/120 loss=0.1381",
        "train: notice: SIGTERM to chief-0 at step 50 (the injected preemption)",
        "train: saved step 51 on the notice (190 ms)",
        "train: exit 143: preempted: saved at step 51 of 120, 0 steps lost",
        "train: KFP retries it in 1.0s (attempt 2 of 4)",
    ], shown
    written = log.read_text()
    for everything in ("cuInit", "[worker-0] step 50/120", "Got executor_input", "Retrying in"):
        assert everything in written
    assert not sys.stdout.closed  # this process's own again


def test_make_help_shows_values_not_make_variables():
    shown = subprocess.run(
        ["make", "--no-print-directory", "help", "OUT=/tmp/spot"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "$(" not in shown, [ln for ln in shown.splitlines() if "$(" in ln]
    assert "/tmp/spot/digits" in shown and "dist/<version>/" in shown
