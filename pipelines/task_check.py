"""Pre-flight: a run's own task is checked here, on CPU, before any GPU is paid for.

A pipeline that names a task (``task=<module>:<Class>``) runs the engine's own
``--check`` (:mod:`spottrain.trainer.check`: import, prepare, build, one batch of
step 0, the loss; writes nothing) in a child process on this machine, when the
task's module is importable here. When it is not (it lives only in the image), the
check is skipped with one line saying so, and the image's ``--check`` (``docker run
IMAGE --check …``, or the build-time import in ``examples/Dockerfile``) is the way to
check it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

# Importing TensorFlow and building a model on CPU takes seconds; a check that takes
# longer than this is not what a pre-flight should wait for.
CHECK_TIMEOUT_S = 180


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def check_task(params: Mapping[str, Any]) -> str | None:
    """Runs ``--check`` on the run's task, when it names one that imports here.

    Args:
        params: The run's pipeline parameters (after conversion).

    Returns:
        A note for the user when the check was skipped; None when there is no task
        or it passed.

    Raises:
        GuardError: the check failed, with its one line.
    """
    from spottrain.pipelines.guards import GuardError

    task = str(params.get("task") or "")
    if not task:
        return None
    module = task.split(":", 1)[0]
    if not _importable(module):
        return (
            f"pre-flight: task {task!r} is not importable here, so it is not checked "
            "before the run; check it in your image: docker run IMAGE --check --task …"
        )
    from spottrain.runtime.train import trainer_flags
    from spottrain.trainer.config import PIPELINE_HYPERPARAMETERS

    with tempfile.TemporaryDirectory(prefix="spottrain-check-") as scratch:
        # The run's settings become flags as the train component makes them; no data
        # folder (it is copied only in the run), and a step count the check accepts.
        flags = trainer_flags(
            data_dir="",
            checkpoint_dir=f"{scratch}/c",
            model_dir=scratch,
            extra_args=["--train-steps", "1"],  # the last of a repeated flag wins
            **{k: params[k] for k in PIPELINE_HYPERPARAMETERS if k in params},
        )
        argv = [sys.executable, "-m", "spottrain.trainer.task", "--check", *flags]
        # CPU only: the check is about the task, and this machine's GPU (if any) is not
        # the run's.
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
        env.pop("TF_CONFIG", None)
        try:
            proc = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return (
                f"pre-flight: the check of task {task!r} took over {CHECK_TIMEOUT_S} s here; "
                "not checked before the run"
            )
    if proc.returncode == 0:
        return None
    lines = [ln for ln in proc.stderr.splitlines() if " ERROR " in ln]
    # "<time> ERROR <logger>: <message>": the message
    detail = lines[-1].split(" ERROR ", 1)[1].split(": ", 1)[-1] if lines else "?"
    raise GuardError(f"task {task!r} fails its pre-flight check (exit {proc.returncode}): {detail}")
