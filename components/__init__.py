"""The reusable components, loaded from their compiled YAML to run your image.

Every ``component.yaml`` here names the placeholder image (``spottrain.version.IMAGE``),
which no registry serves. In your own pipeline load each one with :func:`load` and
your image; :func:`yaml_path` is where the installed package keeps the YAML (in a
clone: ``components/<name>/component.yaml``)::

    from spottrain.components import load

    IMAGE = "us-central1-docker.pkg.dev/my-project/spottrain/trainer:0.1.0"
    train = load("train", image=IMAGE)

Light on purpose: the image imports this package for every component's body.
"""

from __future__ import annotations

from pathlib import Path

NAMES = ("fallback_decision", "gcs_copy", "profile", "train", "train_job", "training_status")


def yaml_path(name: str) -> Path:
    """The ``component.yaml`` of component ``name`` (one of :data:`NAMES`), where installed.

    Raises:
        ValueError: ``name`` is not one of ours.
    """
    if name not in NAMES:
        raise ValueError(f"component {name!r}: ours are {', '.join(NAMES)}")
    return Path(__file__).resolve().parent / name / "component.yaml"


def load(name: str, *, image: str):
    """Component ``name`` from its YAML, every container of it running ``image``.

    The JobSet engine's pods run the launcher's own image, so ``train_job`` needs
    nothing more.

    Args:
        name: One of :data:`NAMES`, e.g. ``"train"``.
        image: Your trainer image (built by ``make image`` or ``make image-task``).

    Raises:
        ValueError: an unknown component, or ``image`` is not an image reference.
    """
    import yaml
    from kfp import components

    from spottrain.images import reference_problem

    if problem := reference_problem(image):
        raise ValueError(f"image={image!r} {problem}")
    spec = yaml.safe_load(yaml_path(name).read_text())
    for executor in spec["deploymentSpec"]["executors"].values():
        executor["container"]["image"] = image
    return components.load_component_from_text(yaml.safe_dump(spec, sort_keys=False))
