"""Calling a task's own code: what it raises becomes one fatal line.

Its own module (not the task loader's) so that :mod:`spottrain.trainer.fit_plan`,
which the Task API's ``KerasTask`` calls, can use it without importing the Task API
back through the loader.
"""

from __future__ import annotations

from spottrain import fileio
from spottrain.exits import ConfigError, TrainerExit


def call_task(what: str, method, *args):
    """Calls a task's ``method``; what the task's own code raises becomes one fatal line.

    The engine's own exits and storage failures (retryable: ``fileio.storage_failure``,
    e.g. pretrained weights unreachable) pass through unchanged.

    Args:
        what: How the line names the call, e.g. "the task's build_model()".
        method: The bound method.
        *args: Its arguments.
    """
    try:
        return method(*args)
    except (ConfigError, TrainerExit):
        raise
    except Exception as e:  # noqa: BLE001 - a user's task: one line, not a traceback
        if fileio.storage_failure(e) is not None:
            raise
        raise ConfigError(f"{what} raised {type(e).__name__}: {e}") from e
