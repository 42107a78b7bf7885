"""Container image references: whether one can be pulled at all, and whether it is CPU-only.

Below the components and the pipelines, which both check a user's image
(``spottrain.components.load``, the pre-flight guards).
"""

from __future__ import annotations

import re

# An image whose name or tag says CPU: Vertex's prebuilt tf-cpu.*, a "-cpu" tag, or
# the official tensorflow/tensorflow image without its "-gpu" tag.
_CPU_IMAGE = re.compile(r"(^|[/:._-])cpu([._-]|$)")
_OFFICIAL_TF = re.compile(r"^(docker\.io/)?tensorflow/tensorflow(:(?P<tag>.+))?$")
# An image reference as the container runtimes parse it (distribution/reference,
# regexp.go): [host[:port]/]path[:tag][@digest], path components lower-case.
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def reference_problem(image: str) -> str | None:
    """Why ``image`` is no reference a node could pull (it fails at ImagePullBackOff), or None."""
    if _IMAGE_REF.match(image or ""):
        return None
    return (
        "is not an image reference: expected [registry/]path[:tag][@sha256:digest] with a "
        "lower-case path, e.g. us-central1-docker.pkg.dev/my-project/spottrain/trainer:v1"
    )


def is_cpu_only(image: str) -> bool:
    """Whether an image's name or tag marks it CPU-only."""
    official = _OFFICIAL_TF.match(image)
    if official:
        return "gpu" not in (official.group("tag") or "latest")
    return bool(_CPU_IMAGE.search(image.rsplit("/", 1)[-1]))
