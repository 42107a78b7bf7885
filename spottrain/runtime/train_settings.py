"""The training settings a pipeline passes to its train and profile tasks, typed once.

Each pipeline and training component writes these out as parameters (KFP needs
explicit signatures), builds a :class:`TrainSettings` from them by name, and the
runtime turns it into the trainer's flags. tests/unit/pipelines/test_signatures.py ties the fields
and defaults to ``TrainConfig`` (the engine's) and ``ImageSettings`` (the built-in
image task's). Imports neither kfp nor TensorFlow: the component bodies use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The built-in image task's settings: another task refuses their flags, and every
# pipeline has them, so they become flags only away from their defaults.
IMAGE_SETTINGS = ("backbone", "weights", "image_size")
# What the profile does not share with training: it runs its own steps (one a call)
# without checkpoints.
NOT_PROFILED = ("train_steps", "save_every_steps", "steps_per_loop")


@dataclass(frozen=True)
class TrainSettings:
    """One run's training settings, as pipeline parameters name and type them.

    The defaults are ``TrainConfig``'s and ``ImageSettings``', except ``train_steps``
    (pipelines train a step count; they expose no epochs) and ``steps_per_loop``
    (one type for a parameter: the flag's string, "8" or "auto").
    """

    backbone: str = "resnet50"
    weights: str = "imagenet"
    image_size: int = 224
    batch_size_per_replica: int = 32
    train_steps: int = 1000
    learning_rate: float = 0.001
    save_every_steps: int = 100
    mixed_precision: bool = False
    steps_per_loop: str = "1"
    jit_compile: str = "auto"
    task: str = ""
    task_args: str = "{}"
    tensorboard_dir: str = ""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' names, in flag order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TrainSettings:
        """The settings among a run's parameters (a mapping: a pipeline's run values)."""
        return cls(**{name: params[name] for name in cls.names() if name in params})

    def inputs(self) -> dict[str, Any]:
        """The train components' inputs these fill, by name (a pipeline's tasks take them)."""
        return {name: getattr(self, name) for name in self.names()}

    def profile_inputs(self) -> dict[str, Any]:
        """The profile component's inputs these fill."""
        return {n: v for n, v in self.inputs().items() if n not in NOT_PROFILED}

    def for_profile(self) -> TrainSettings:
        """The settings the profile's trainer runs with: no TensorBoard, no steps of ours.

        Its steps are replaced by warm-up + profiled ones, one a call, with no
        checkpoint inside the window; the trace is copied to ``tensorboard_dir`` apart.
        """
        return dataclasses.replace(
            self, train_steps=1, save_every_steps=1, steps_per_loop="", tensorboard_dir=""
        )

    def trainer_flags(self) -> list[str]:
        """The ``python -m spottrain.trainer.task`` flags of these settings.

        Each is ``--name-with-dashes value``; a true bool is the bare flag; an empty
        string or a false bool is left out, so the trainer's default holds; and the
        image task's settings are left out at their defaults (see ``IMAGE_SETTINGS``).
        """
        defaults = TrainSettings()
        flags: list[str] = []
        for name in self.names():
            value = getattr(self, name)
            if value is None or value is False or value == "":
                continue
            if name in IMAGE_SETTINGS and value == getattr(defaults, name):
                continue
            flag = "--" + name.replace("_", "-")
            if value is True:
                flags.append(flag)
            else:
                flags += [flag, repr(float(value)) if isinstance(value, float) else str(value)]
        return flags
