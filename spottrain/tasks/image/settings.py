"""The built-in image task's settings: its task args, also given as its own flags.

No TensorFlow here: the supervisor, the CLI and the pipelines' pre-flight check
these in milliseconds. Each setting is a key of ``--task-args`` and a flag of the
same name (``image_dir`` is ``--image-dir``); the engine's settings are
:class:`spottrain.trainer.config.TrainConfig`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from spottrain import storage
from spottrain.exits import ConfigError

BACKBONES = ("resnet50", "mobilenet_v2", "small_cnn")
WEIGHTS = ("imagenet", "none")
# Keras applications refuse smaller inputs for these backbones.
MIN_IMAGE_SIZE = {"resnet50": 32, "mobilenet_v2": 32, "small_cnn": 8}
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")

_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}

# A resumed run must build the same variables as the run that wrote the checkpoint.
COMPATIBILITY_KEYS = ("backbone", "image_size", "fine_tune")


@dataclass(frozen=True)
class ImageSettings:
    """What the image classifier trains on and how it is built.

    Attributes:
        image_dir: Image folder ``<root>/<label>/*.png|jpg``; empty: the run's
            ``--data`` folder, unless ``dataset`` is given.
        dataset: tfds dataset name; used when there is no image folder.
        data_dir: tfds ``data_dir``; empty: the run's ``--data`` folder, else
            ``~/tensorflow_datasets``.
        train_split: tfds training split.
        val_split: tfds validation split; empty: hold out ``val_fraction`` of train.
        val_fraction: Share held out for validation (image folders; tfds without
            ``val_split``).
        cache_max_mb: Decode the training set into memory when it fits in this.
        backbone: One of :data:`BACKBONES`.
        weights: ``imagenet`` or ``none``.
        fine_tune: Also train the backbone.
        image_size: Square input size in pixels.
    """

    image_dir: str = ""
    dataset: str = "cassava"
    data_dir: str = ""
    train_split: str = "train"
    val_split: str = "validation"
    val_fraction: float = 0.1
    cache_max_mb: int = 1024
    backbone: str = "resnet50"
    weights: str = "imagenet"
    fine_tune: bool = False
    image_size: int = 224

    @classmethod
    def from_args(cls, args: dict[str, Any], data: str = "") -> ImageSettings:
        """Checked settings from task args; ``data`` is the engine's ``--data`` folder.

        Raises:
            ConfigError: an unknown key, a value of the wrong type or out of range.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - set(fields))
        if unknown:
            raise ConfigError(
                f"--task-args: the image classifier has no setting {', '.join(unknown)} "
                f"(it has {', '.join(fields)})"
            )
        values = {}
        for name, value in args.items():
            default = fields[name].default
            kind = type(default)
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be {_KINDS[kind]}")
            values[name] = value
        tfds = "dataset" in values or bool(values.get("data_dir"))
        if data and not values.get("image_dir") and not tfds:
            values["image_dir"] = data  # the run's data is an image folder, as before tasks
        elif data and tfds and not values.get("data_dir"):
            values["data_dir"] = data  # the run's data is the tfds data_dir
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raises ConfigError naming the first bad value (as its flag)."""
        _require(
            self.backbone in BACKBONES,
            f"--backbone {self.backbone!r} is unknown; choose one of {', '.join(BACKBONES)}",
        )
        _require(
            self.weights in WEIGHTS,
            f"--weights {self.weights!r} is unknown; choose imagenet or none",
        )
        _require(
            not (self.weights == "imagenet" and self.backbone == "small_cnn"),
            "--weights imagenet is not available for --backbone small_cnn; use --weights none",
        )
        min_size = MIN_IMAGE_SIZE[self.backbone]
        _require(
            min_size <= self.image_size <= 1024,
            f"--image-size {self.image_size} is out of range for {self.backbone} "
            f"({min_size}..1024)",
        )
        _require(
            math.isfinite(self.val_fraction) and 0 <= self.val_fraction < 1,
            f"--val-fraction {self.val_fraction} must be in [0, 1)",
        )
        _require(self.cache_max_mb >= 0, f"--cache-max-mb {self.cache_max_mb} must be >= 0")
        for flag, path in (("--image-dir", self.image_dir), ("--data-dir", self.data_dir)):
            problem = storage.url_problem(path)
            _require(problem is None, f"{flag} {path!r}: {problem}")
        if not self.image_dir:
            _require(bool(self.dataset), "give --image-dir or --dataset")

    def compatibility(self) -> dict[str, Any]:
        """The settings a checkpoint depends on."""
        return {k: getattr(self, k) for k in COMPATIBILITY_KEYS}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
