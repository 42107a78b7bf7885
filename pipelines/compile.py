"""Compiles the components and pipelines to the YAML files committed in the repository.

``make compile`` rewrites them; ``tests/test_pipelines.py`` fails when a
committed file differs from what this module renders (the drift check).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from kfp import compiler

import spottrain.components
import spottrain.pipelines
from spottrain.version import IMAGE

COMPONENTS_DIR = Path(spottrain.components.__file__).parent
COMPILED_DIR = Path(spottrain.pipelines.__file__).parent / "compiled"

GKE_YAML = "spottrain_gke.yaml"
GKE_FALLBACK_YAML = "spottrain_gke_fallback.yaml"
VERTEX_YAML = "spottrain_vertex.yaml"


def components() -> dict[str, object]:
    """The reusable components by directory name."""
    from spottrain.components.gcs_copy.component import gcs_copy
    from spottrain.components.profile.component import profile
    from spottrain.components.train.component import train
    from spottrain.components.training_status.component import training_status

    return {
        "gcs_copy": gcs_copy,
        "profile": profile,
        "train": train,
        "training_status": training_status,
    }


def pipelines() -> dict[str, Callable[[], object]]:
    """The default pipeline builds by file name (built lazily: GCPC imports are slow)."""
    from spottrain.pipelines import gke, placement, vertex

    return {
        GKE_YAML: lambda: gke.build(),
        GKE_FALLBACK_YAML: lambda: gke.build(
            fallback=placement.ON_DEMAND_PLACEMENT, name=f"{gke.NAME}-fallback"
        ),
        VERTEX_YAML: lambda: vertex.build(),
    }


def compile_text(func: object, image: str = IMAGE) -> str:
    """Compiles a component or pipeline and returns the YAML text.

    Args:
        func: A component or pipeline function.
        image: Replaces the default image everywhere (``--image`` for your registry).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.yaml"
        compiler.Compiler().compile(func, str(path))
        text = path.read_text()
    if image != IMAGE:
        # The image appears verbatim in executors and custom-job worker pools.
        text = text.replace(IMAGE, image)
    return text


def render_all(image: str = IMAGE) -> dict[Path, str]:
    """Every committed YAML file and its content."""
    out = {
        COMPONENTS_DIR / name / "component.yaml": compile_text(component, image)
        for name, component in components().items()
    }
    for name, build in pipelines().items():
        out[COMPILED_DIR / name] = compile_text(build(), image)
    return out


def write_all(image: str = IMAGE) -> list[Path]:
    """Writes the YAML files that changed; returns their paths."""
    changed = []
    for path, text in render_all(image).items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed


def drift(image: str = IMAGE) -> list[Path]:
    """The committed YAML files that differ from a fresh compile."""
    return [p for p, text in render_all(image).items() if not p.exists() or p.read_text() != text]
