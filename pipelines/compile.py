"""Compiles the components and pipelines to the YAML files committed in the repository.

``make compile`` rewrites them; ``tests/unit/pipelines/test_pipelines.py`` fails when a
committed file differs from what this module renders (the drift check).
``make release-files`` writes the same set for a release's image under ``dist/``.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from kfp import compiler

import spottrain.components
import spottrain.pipelines
from spottrain.version import IMAGE

COMPONENTS_DIR = Path(spottrain.components.__file__).parent
COMPILED_DIR = Path(spottrain.pipelines.__file__).parent / "compiled"

VERTEX_YAML = "spottrain_vertex.yaml"
VERTEX_FALLBACK_YAML = "spottrain_vertex_fallback.yaml"


def gke_yaml(pool: str = "preemptible", fallback: bool = False, engine: str = "pod") -> str:
    """The committed GKE pipeline for a pool kind, e.g. ``spottrain_gke_spot_fallback.yaml``.

    One file per pool kind because the node selector and toleration are compiled in:
    a pool made with ``nodepool --pool spot`` carries the spot label and taint, and a
    pod selecting the preemptible label would stay Pending there forever.
    ``engine="job"``: the JobSet-engine variant (``spottrain_gke_spot_job.yaml``), which
    falls back to on-demand by itself.
    """
    if engine == "job":
        if fallback:
            raise ValueError("the JobSet-engine pipeline has its own on-demand fall-back")
        return f"spottrain_gke_{pool}_job.yaml"
    return f"spottrain_gke_{pool}" + ("_fallback" if fallback else "") + ".yaml"


# The default GKE pipeline (preemptible pool, no fall-back).
GKE_YAML = gke_yaml()


def components() -> dict[str, object]:
    """The reusable components by directory name."""
    from spottrain.components.fallback_decision.component import fallback_decision
    from spottrain.components.gcs_copy.component import gcs_copy
    from spottrain.components.profile.component import profile
    from spottrain.components.train.component import train
    from spottrain.components.train_job.component import train_job
    from spottrain.components.training_status.component import training_status

    return {
        "fallback_decision": fallback_decision,
        "gcs_copy": gcs_copy,
        "profile": profile,
        "train": train,
        "train_job": train_job,
        "training_status": training_status,
    }


def pipelines() -> dict[str, Callable[[], object]]:
    """The default pipeline builds by file name (built lazily: GCPC imports are slow)."""
    from spottrain import placement
    from spottrain.pipelines import gke, gke_jobset, vertex

    builds: dict[str, Callable[[], object]] = {}
    for pool in placement.SPOT_POOLS:
        spot = placement.Placement(pool=pool)
        builds[gke_yaml(pool)] = lambda spot=spot: gke.build(spot)
        builds[gke_yaml(pool, fallback=True)] = lambda spot=spot: gke.build(
            spot, fallback=placement.ON_DEMAND_PLACEMENT
        )
        builds[gke_yaml(pool, engine="job")] = lambda spot=spot: gke_jobset.build(spot)
    builds[VERTEX_YAML] = lambda: vertex.build()
    builds[VERTEX_FALLBACK_YAML] = lambda: vertex.build(vertex.VertexTraining(fallback="STANDARD"))
    return builds


@contextlib.contextmanager
def component_images(image: str = IMAGE) -> Iterator[None]:
    """Builds and compiles with ``image`` as every component's container image.

    The components are defined with the default image, and a pipeline takes the
    image from each component's spec: at compile time for container tasks, and
    when GCPC's custom-job wrapper is created for the Vertex worker pools. So
    both the build and the compile of a pipeline happen inside this.
    """
    specs = [c.component_spec.implementation.container for c in components().values()]
    before = [spec.image for spec in specs]
    for spec in specs:
        spec.image = image
    try:
        yield
    finally:
        for spec, old in zip(specs, before, strict=True):
            spec.image = old


def compile_text(func: object, image: str = IMAGE) -> str:
    """Compiles a component or pipeline and returns the YAML text.

    Args:
        func: A component or pipeline function. A Vertex pipeline built for another
            image must be built inside ``component_images(image)`` (see there).
        image: The container image of every component (``--image`` for your registry).

    Raises:
        ValueError: the default image is still in the result (a Vertex pipeline
            built outside ``component_images``).
    """
    with component_images(image), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.yaml"
        compiler.Compiler().compile(func, str(path))
        text = path.read_text()
    if image != IMAGE and IMAGE in text:
        raise ValueError(
            f"compiled for image {image!r} but {IMAGE!r} remains: build the pipeline "
            "inside compile.component_images(image)"
        )
    return text


def render_all(image: str = IMAGE) -> dict[Path, str]:
    """Every committed YAML file and its content."""
    with component_images(image):
        out = {
            COMPONENTS_DIR / name / "component.yaml": compile_text(component, image)
            for name, component in components().items()
        }
        for name, build in pipelines().items():
            out[COMPILED_DIR / name] = compile_text(build(), image)
    return out


# The SDK stamps its own version into every file. setup.py allows any kfp 2.x, so
# a new kfp release must not by itself make the committed YAML "stale" (KFP's own
# read/write tests ignore the field the same way).
_SDK_VERSION = re.compile(r"^sdkVersion: .*$", re.M)


def same_yaml(committed: str, fresh: str) -> bool:
    """Whether two compiled files agree, whichever kfp SDK version stamped them."""
    return _SDK_VERSION.sub("", committed) == _SDK_VERSION.sub("", fresh)


def write_all(image: str = IMAGE, rendered: dict[Path, str] | None = None) -> list[Path]:
    """Writes the files that changed (of ``rendered``, else a fresh render); returns their paths."""
    changed = []
    for path, text in (rendered or render_all(image)).items():
        if not path.exists() or not same_yaml(path.read_text(), text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed


def repo_path(path: Path) -> Path:
    """A rendered file's path relative to the repository root.

    ``components/<name>/component.yaml`` or ``pipelines/compiled/<file>.yaml``, also
    from an installed wheel, where setup.py's ``package_dir`` puts both under
    ``spottrain/``.
    """
    if path.is_relative_to(COMPILED_DIR):
        return Path("pipelines", "compiled", path.relative_to(COMPILED_DIR))
    return Path("components", path.relative_to(COMPONENTS_DIR))


def out_dir_problem(out_dir: str) -> str | None:
    """Why ``write_all_to`` must not write under ``out_dir``, or ``None``."""
    from spottrain.storage import folder_problem

    if not out_dir:
        return "is empty"
    if blocked := folder_problem(out_dir):
        return blocked
    # There, the copies would overwrite the committed files they are made from.
    sources = {COMPONENTS_DIR.resolve().parent, COMPILED_DIR.resolve().parents[1]}
    if Path(out_dir).resolve() in sources:
        return "holds the committed YAML (compile without --out-dir rewrites it)"
    return None


def write_all_to(out_dir: Path | str, image: str = IMAGE) -> list[Path]:
    """Writes every committed YAML file, compiled for ``image``, under ``out_dir``.

    Each file goes to its repository path (see ``repo_path``) under ``out_dir``,
    which is created if missing; the committed files are not touched. Everything is
    compiled before the first file is written.

    Returns:
        The paths written.
    """
    rendered = render_all(image)
    written = []
    for path, text in rendered.items():
        target = Path(out_dir) / repo_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written


def drift(image: str = IMAGE, rendered: dict[Path, str] | None = None) -> list[Path]:
    """The committed YAML files that differ from a fresh compile (or from ``rendered``)."""
    return [
        p
        for p, text in (rendered or render_all(image)).items()
        if not p.exists() or not same_yaml(p.read_text(), text)
    ]
