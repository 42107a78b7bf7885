"""``python -m tests.noisy_worker``: prints what a trainer prints, without TensorFlow.

For the local launcher's console (spottrain.trainer.worker_logs): TensorFlow's C++
lines and absl's note, INFO lines of TensorFlow and the trainer, the step loop's
prints, a background and a final save, a warning. ``NOISY_END``: ``ok`` (exit 0),
``fatal`` (the trainer's one ``exit 64:`` line, exit 64) or ``crash`` (a traceback,
exit 1).
"""

from __future__ import annotations

import json
import os
import sys

chief = (
    json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("type", "chief") == "chief"
)
T = "2026-11-28 13:39:17,427"
for line in (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795873138.325096   26202 cudart_stub.cc:31] Could not find cuda drivers",
    "E0000 00:00:1795873156.804549   26202 cuda_platform.cc:52] failed call to cuInit",
    f"{T} INFO tensorflow: Enabled multi-worker collective ops with available devices",
    f"{T} INFO absl: Sharding callback duration: 40 microseconds",
    "start_step=0 total_steps=20 global_batch=32 replicas=2 steps_per_loop=1 xla=off",
    f"{T} INFO trainer: first step done 16.1 s after start",
    "step 10/20 loss=1.7615 1.2 steps/s",
    f"{T} INFO trainer: saved /c/ckpt-10 at step 10 (interval, 28 ms, writing in the background)",
    f"{T} WARNING tensorflow: a warning of TensorFlow's",
    "step 20/20 loss=0.9398 3.9 steps/s",
    f"{T} INFO trainer: saved /c/ckpt-20 at step 20 (interval, 126 ms)",
):
    print(line, flush=True)
end = os.environ.get("NOISY_END", "ok")
if end == "fatal":
    print(f"{T} ERROR trainer: exit 64: --image-dir 'nope' does not exist", file=sys.stderr)
    sys.exit(64)
if end == "crash":
    raise RuntimeError("a crash the trainer did not catch")
print(f'{T} INFO trainer: done: {{"final_step": 20}}', flush=True)
