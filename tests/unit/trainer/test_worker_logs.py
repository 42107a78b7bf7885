"""The local launcher's console: one line per event, each worker's whole log in a file."""

from __future__ import annotations

import pytest

from spottrain.trainer import worker_logs

T = "2026-11-28 13:39:17,427"


@pytest.mark.parametrize(
    "line, chief, shown",
    [
        ("step 10/40 loss=1.7615 1.1 steps/s", True, True),
        ("step 10/40 loss=1.7615 1.1 steps/s", False, False),  # the chief's is enough
        ("start_step=0 total_steps=40 global_batch=32", True, True),
        ("epoch 3/20 loss=0.6376 accuracy=0.7229 val_loss=0.5556", True, True),
        ("epoch 3/20 loss=0.6376 accuracy=0.7229 val_loss=0.5556", False, False),
        ("stopped early by a callback at step 60, epoch 4", True, True),
        ("start_step=0 total_steps=40 global_batch=32", False, False),
        (f"{T} INFO trainer: first step done 15.9 s after start", True, True),
        (f"{T} INFO trainer: first step done 15.9 s after start", False, False),
        (f"{T} INFO trainer: saved /c/ckpt-10 at step 10 (interval, 20 ms, writing in the "
         "background)", True, True),
        (f"{T} INFO trainer: saved /c/ckpt-10 at step 10 (interval, 20 ms, writing in the "
         "background)", False, False),
        # A save that ends the attempt (the notice's, the final one): every worker's.
        (f"{T} INFO trainer: saved /c/ckpt-22 at step 22 (preemption, 101 ms)", False, True),
        (f"{T} INFO trainer: saved /c/ckpt-40 at step 40 (interval, 126 ms)", False, True),
        (f"{T} INFO spottrain.trainer.checkpoint_store: restored /c/ckpt-22 (step 22)", True,
         True),
        (f"{T} INFO trainer: done: {{\"final_step\": 40}}", True, True),
        (f"{T} INFO trainer: model: wrote model.keras, saved_model/", True, True),
        # Every warning and error, from any worker and any logger.
        (f"{T} WARNING trainer: SIGTERM received: saving at the next step boundary", False,
         True),
        (f"{T} ERROR trainer: exit 64: --image-dir 'nope' does not exist", False, True),
        (f"{T} WARNING tensorflow: a warning of TensorFlow's", False, True),
        ("HANG: no training step finished for 300 s", False, True),
        # The noise: TensorFlow's and absl's INFO, its C++ lines, absl's note.
        (f"{T} INFO tensorflow: Collective all_reduce tensors: 1 all_reduces", True, False),
        (f"{T} INFO absl: Sharding callback duration: 26 microseconds", True, False),
        (f"{T} INFO spottrain.tasks.image.data: decoded 1617 images", True, False),
        ("E0000 00:00:1795873157.434389 26201 cuda_platform.cc:52] failed call to cuInit", True,
         False),
        ("I0000 00:00:1795873138.603070 26201 cudart_stub.cc:31] Could not find cuda", True,
         False),
        ("F0000 00:00:1795873157.434389 26201 check.cc:1] Check failed: x", False, True),
        ("WARNING: All log messages before absl::InitializeLog() is called are written", True,
         False),
        ("Traceback (most recent call last):", True, False),  # in a crash's tail instead
    ],
)  # fmt: skip
def test_which_lines_are_events_by_table(line, chief, shown):
    assert worker_logs.is_event(line, chief) is shown


def test_the_cli_defaults_to_a_folder_beside_the_outputs():
    assert worker_logs.default_dir("out/job") == "out/job/worker-logs"
    elsewhere = worker_logs.default_dir("gs://bucket/job")
    assert elsewhere.startswith("/") and "spottrain-worker-logs-" in elsewhere
