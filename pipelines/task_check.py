"""Pre-flight: a run's own task is checked here, on CPU, before any GPU is paid for.

A pipeline that names a task (``task=<module>:<Class>``) runs the engine's own
``--check`` (:mod:`spottrain.trainer.check`: import, prepare, build, one batch of
step 0, the loss; writes nothing) in a child process on this machine, when
TensorFlow and the task's module are importable here. Without TensorFlow (the
authoring install, ``spottrain[pipelines]``) the task is read from its source
instead (:mod:`task_source`: the class, its ``Task``/``KerasTask`` base, the methods
the engine calls): only a certain mistake refuses the run, and one line says what was
not checked. A module that is not here at all (it lives only in the image) is skipped
with one line. Either way the image's ``--check`` (``docker run IMAGE --check …``, or
the build-time import in ``examples/Dockerfile``) is the full check.
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


# A run is checked once per process: the CLI's pre-flight and submit's own both call
# check_task, and the note is said once (the outcome by the run's parameters).
_OUTCOMES: dict[str, tuple[str | None, str | None]] = {}


def _has_tensorflow() -> bool:
    return _importable("tensorflow") and _importable("keras")


def check_task(params: Mapping[str, Any]) -> str | None:
    """Checks the run's task, when it names one: ``--check``, or its source without TF.

    Args:
        params: The run's pipeline parameters (after conversion).

    Returns:
        A note for the user on what was not checked (the first time for these
        parameters); None when there is no task, it passed, or the note was given.

    Raises:
        GuardError: the check failed, with its one line.
    """
    from spottrain.pipelines.errors import GuardError

    if not str(params.get("task") or ""):
        return None
    key = repr(sorted((str(k), repr(v)) for k, v in params.items()))
    if key in _OUTCOMES:
        error = _OUTCOMES[key][1]
        if error is not None:
            raise GuardError(error)
        return None
    try:
        note = _check(params)
    except GuardError as e:
        _OUTCOMES[key] = (None, str(e))
        raise
    _OUTCOMES[key] = (note, None)
    return note


def _in_image(task: str) -> str:
    return f"docker run IMAGE --check --task {task} …"


def _check(params: Mapping[str, Any]) -> str | None:
    from spottrain.exits import ConfigError
    from spottrain.pipelines.errors import GuardError
    from spottrain.trainer.task_loader import check_spec

    task = str(params["task"])
    try:
        module = check_spec(task, "{}")[0]
    except ConfigError as e:
        raise GuardError(f"pipeline parameter {e}".replace("--task ", "task=", 1)) from None
    if not _has_tensorflow():
        return _check_source(task)
    if not _importable(module):
        return (
            f"pre-flight: task {task!r} is not importable here, so it is not checked "
            f"before the run; check it in your image: {_in_image(task)}"
        )
    from spottrain.runtime.train import trainer_flags
    from spottrain.runtime.train_settings import TrainSettings

    with tempfile.TemporaryDirectory(prefix="spottrain-check-") as scratch:
        # The run's settings become flags as the train component makes them; no data
        # folder (it is copied only in the run), and a step count the check accepts.
        flags = trainer_flags(
            data_dir="",
            checkpoint_dir=f"{scratch}/c",
            model_dir=scratch,
            settings=TrainSettings.from_params(params),
            extra_args=["--train-steps", "1"],  # the last of a repeated flag wins
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


def _check_source(task: str) -> str:
    """Without TensorFlow: what the task's source shows (see :mod:`task_source`)."""
    from spottrain.pipelines import task_source
    from spottrain.pipelines.errors import GuardError

    module, _, class_name = task.partition(":")
    try:
        found = task_source.inspect(module, class_name)
    except task_source.NotFound:
        return (
            f"pre-flight: task {task!r} is not importable here, so it is not checked "
            f"before the run; check it in your image: {_in_image(task)}"
        )
    except task_source.Unknown as e:
        return (
            f"pre-flight: task {task!r} read from its source, not all checked ({e}); "
            f"no TensorFlow here, so check it in your image: {_in_image(task)}"
        )
    except task_source.TaskSourceError as e:
        raise GuardError(f"task {task!r} fails its pre-flight check: {e}") from None
    return (
        f"pre-flight: task {task!r} read from its source: a {found.kind} with the methods "
        "the engine calls; its model, data and loss are not checked (no TensorFlow here): "
        f"check them in your image: {_in_image(task)}"
    )
