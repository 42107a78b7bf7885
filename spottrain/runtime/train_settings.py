"""The training settings a pipeline passes to its train and profile tasks, typed once.

A pipeline takes them once, as ``settings`` (:func:`as_parameters` gives KFP one
parameter per setting); a training component writes them out as parameters (KFP
copies its source into the image) and builds a :class:`TrainSettings` from them by
name; the runtime turns it into the trainer's flags.
tests/unit/pipelines/test_signatures.py ties the fields and defaults to ``TrainConfig``
(the engine's) and ``ImageSettings`` (the built-in image task's). Imports neither kfp
nor TensorFlow: the component bodies use it.
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


# What a pipeline's docstring says of each setting (the KFP UI shows it per parameter).
HELP = {
    "backbone": "resnet50, mobilenet_v2 or small_cnn.",
    "weights": "imagenet or none.",
    "image_size": "Square input size in pixels.",
    "batch_size_per_replica": "Batch size per GPU.",
    "train_steps": "Total optimizer steps across all attempts.",
    "learning_rate": "Peak learning rate.",
    "save_every_steps": "Checkpoint interval in steps.",
    "mixed_precision": "Use mixed float16.",
    "steps_per_loop": 'Training steps per compiled call, or "auto" (calls of about 0.5 s); '
    "a notice is heard when the running call ends.",
    "jit_compile": "XLA for the training step: auto (on for one GPU, as Keras fit), on or off.",
    "task": "What to train: <module>:<Class> of a spottrain.trainer.task_api.Task in the "
    "image; empty = the built-in image classifier.",
    "task_args": "The task's own settings, a JSON object.",
    "tensorboard_dir": "TensorBoard log folder; empty uses <checkpoint_dir>/tensorboard.",
}
_SETTINGS_ARG = "settings"


def as_parameters(*, without: tuple[str, ...] = ()):
    """Gives a pipeline function taking ``settings`` each setting as its own parameter.

    A KFP pipeline's parameters are its function's (``inspect.signature``, described
    by the docstring's ``Args``), and KFP calls it once, at compile time, with a
    channel per parameter. The function written takes ``settings: TrainSettings`` and
    one docstring line ``settings: ...``; the function KFP sees has the settings'
    fields (but ``without``) in its place, described from :data:`HELP`, and hands the
    function one :class:`TrainSettings` built from them (the left-out at their
    defaults). A component's signature stays written out: KFP copies its source.
    """
    import functools
    import inspect
    import typing

    names = [n for n in TrainSettings.names() if n not in without]
    defaults = {f.name: f.default for f in dataclasses.fields(TrainSettings)}
    types = typing.get_type_hints(TrainSettings)  # the annotations are strings here

    def wrap(fn):
        sig = inspect.signature(fn)
        own = list(sig.parameters.values())
        at = [p.name for p in own].index(_SETTINGS_ARG)
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        added = [
            inspect.Parameter(n, kind, default=defaults[n], annotation=types[n]) for n in names
        ]
        params = [*own[:at], *added, *own[at + 1 :]]
        public = sig.replace(parameters=params)

        @functools.wraps(fn)
        def pipeline(*args, **kwargs):
            bound = public.bind(*args, **kwargs)
            bound.apply_defaults()
            given = dict(bound.arguments)
            settings = TrainSettings(**{n: given.pop(n) for n in names})
            return fn(**given, **{_SETTINGS_ARG: settings})

        pipeline.__signature__ = public
        pipeline.__doc__ = _doc_with(fn.__doc__ or "", names)
        return pipeline

    return wrap


def _doc_with(doc: str, names: list[str]) -> str:
    """``doc`` with its ``settings:`` line replaced by one ``Args`` line per setting."""
    lines = doc.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.strip().startswith(f"{_SETTINGS_ARG}:")), None)
    if at is None:  # a docstring without Args: its parameters go undescribed, as before
        return doc
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    end = at + 1
    while end < len(lines) and lines[end].startswith(indent + " ") and lines[end].strip():
        end += 1  # the settings line's continuation lines
    # One line each: KFP keeps a description's line breaks, and its UI shows them.
    out = [f"{indent}{n}: {HELP[n]}" for n in names]
    return "\n".join([*lines[:at], *out, *lines[end:]])


#: The settings' defaults: a pipeline function's ``settings`` default (as_parameters).
DEFAULT_SETTINGS = TrainSettings()
