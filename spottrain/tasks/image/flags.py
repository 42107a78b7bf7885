"""The built-in image task's settings as flags of ``python -m spottrain.trainer.task``.

A user's task takes its settings in ``--task-args``; the default task also takes
them as flags (``--image-dir``, ``--backbone``, ...), which become its task args.
The engine's :mod:`spottrain.trainer.config` hooks these in and names no setting.
No TensorFlow here: the supervisor and the pipelines' pre-flight run it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from spottrain.exits import ConfigError
from spottrain.tasks.image.settings import BACKBONES, ImageSettings
from spottrain.trainer import task_loader


def add(p: argparse.ArgumentParser) -> None:
    """The built-in image task's settings as flags (each also a --task-args key)."""
    i = ImageSettings()
    g = p.add_argument_group(
        "built-in image classifier (its task args, also as flags; not with another --task)",
        "--data is its image folder, or the tfds data_dir when its dataset is given.",
    )
    quiet = argparse.SUPPRESS  # absent unless given: then they join --task-args

    def add(name: str, help: str, **kw) -> None:
        default = getattr(i, name.replace("-", "_"))
        g.add_argument(f"--{name}", default=quiet, help=f"{help} (default {default!r})", **kw)

    add("image-dir", "Image folder <root>/<label>/*.png|jpg, local or gs://; overrides --dataset")
    add("dataset", "tfds dataset name")
    add("data-dir", "tfds data_dir holding the prepared dataset")
    add("train-split", "tfds training split")
    add("val-split", "tfds validation split; empty: hold out --val-fraction of train")
    add("val-fraction", "Share of the training data held out for validation", type=float)
    add("cache-max-mb", "Decode the training set once into memory when it fits", type=int)
    add("backbone", f"One of {', '.join(BACKBONES)}")
    add("weights", "imagenet (download pretrained) or none (random init)")
    g.add_argument(
        "--fine-tune", action="store_true", default=quiet, help="Also train the backbone."
    )
    add("image-size", "Square input size in pixels", type=int)


def merge(values: dict) -> None:
    """Moves the image flags given into ``values["task_args"]``; refuses a clash.

    Args:
        values: The parsed flags (``vars`` of the namespace), changed in place.

    Raises:
        ConfigError: image flags with another task, or a flag that contradicts
            the same key in ``--task-args``.
    """
    names = [f.name for f in dataclasses.fields(ImageSettings)]
    given = {n: values.pop(n) for n in names if n in values}
    if not given:
        return
    module, cls, args = task_loader.check_spec(values["task"], values["task_args"])
    flags = ", ".join("--" + n.replace("_", "-") for n in given)
    if f"{module}:{cls}" != task_loader.DEFAULT_TASK:
        raise ConfigError(
            f"{flags}: settings of the built-in image classifier; --task {values['task']} "
            "takes its settings in --task-args"
        )
    for name, value in given.items():
        if name in args and args[name] != value:
            raise ConfigError(
                f"--{name.replace('_', '-')} {value!r} contradicts --task-args "
                f"{name}={args[name]!r}; give it once"
            )
    values["task_args"] = json.dumps({**args, **given})


def check(args: dict[str, Any], data: str) -> None:
    """Checks the task args without TensorFlow (the supervisor, the pre-flight: milliseconds).

    Raises:
        ConfigError: naming the bad value.
    """
    ImageSettings.from_args(args, data)
