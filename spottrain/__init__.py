"""spottrain: fault-tolerant TensorFlow training on spot GPUs with Kubeflow Pipelines.

A task author writes ``from spottrain import KerasTask`` (with ``FitArgs``; or ``Task``,
``TrainInput``, ``ConfigError``): :mod:`spottrain.trainer.task_api`, imported on first
use, so that
``import spottrain`` (every component does) stays light.
"""

from spottrain.version import IMAGE, __version__

_TASK_API = ("ConfigError", "FitArgs", "KerasTask", "Task", "TrainInput")

__all__ = ["IMAGE", "__version__", *_TASK_API]


def __getattr__(name: str):
    if name in _TASK_API:
        from spottrain.trainer import task_api

        return getattr(task_api, name)
    raise AttributeError(f"module 'spottrain' has no attribute {name!r}")
