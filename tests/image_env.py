"""What the trainer image can import, derived from the Dockerfile and setup.py.

The image runs ``pip install ".[<extras>]"`` (the Dockerfile) on a TensorFlow base.
So the image has exactly: our wheel (as setup.py builds it), the distributions its
``Requires-Dist`` pulls in for those extras, their dependencies, and the standard
library. Everything else this test venv holds (kfp-kubernetes, GCPC, pytest,
scikit-learn, ...) is authoring- or test-only.

:func:`image_environment` builds our wheel, computes that closure from the installed
distributions' metadata and returns the module prefixes the image does *not* have
(``kfp.kubernetes`` is one: kfp-kubernetes installs into kfp's namespace).
:data:`BLOCKER` is the code a child interpreter runs first to take the editable
checkout off its path, put the wheel's files on it and refuse those prefixes, so an
import there fails exactly as in the image. Nothing is hand-listed: a new authoring
dependency or a new extra in the Dockerfile changes the result by itself.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
OWN = canonicalize_name("spottrain")
_MODULE_SUFFIXES = (".py", ".so", ".pyd")


def dockerfile_extras(dockerfile: Path = REPO / "Dockerfile") -> set[str]:
    """The extras of the Dockerfile's ``pip install ".[a,b]"`` of this package."""
    found = re.search(r'pip install "\.(?:\[([a-z0-9_,-]*)\])?"', dockerfile.read_text())
    assert found, 'the Dockerfile must install this package with pip install ".[...]"'
    return {e for e in (found.group(1) or "").split(",") if e}


def build_wheel(out: Path) -> Path:
    """Builds this checkout's wheel into ``out`` (no dependencies, no isolation)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(REPO)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = out.glob("spottrain-*.whl")
    return wheel


def _wanted(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in extras | {""})


def _modules(files) -> set[str]:
    """Dotted module names of a distribution's RECORD entries (packages included)."""
    found = set()
    for f in files or ():
        parts = Path(str(f)).parts
        if not parts or parts[0] in ("..", "/") or parts[0].endswith((".dist-info", ".data")):
            continue
        if not parts[-1].endswith(_MODULE_SUFFIXES):
            continue
        stem = parts[-1].split(".")[0]
        dotted = [*parts[:-1]] if stem == "__init__" else [*parts[:-1], stem]
        if dotted and all(p.isidentifier() for p in dotted):
            found.add(".".join(dotted))
    return found


def _prefixes(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass(frozen=True)
class ImageEnvironment:
    """The image's view of this venv."""

    wheel_dir: Path  # the wheel's files, unpacked
    own_modules: frozenset[str]  # our modules as the wheel holds them
    distributions: frozenset[str]  # third-party distributions the image has
    blocked: frozenset[str]  # module prefixes the image does not have
    missing: frozenset[str]  # required by the image, not installed here

    def is_blocked(self, module: str) -> bool:
        """Whether the image lacks ``module`` (it lies under a blocked prefix)."""
        return any(p in self.blocked for p in _prefixes(module))


def image_environment(workdir: Path) -> ImageEnvironment:
    """Builds the wheel under ``workdir`` and derives what the image can import."""
    wheel = build_wheel(workdir / "wheel")
    unpacked = workdir / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
        meta = md.Distribution.at(next(unpacked.glob("spottrain-*.dist-info")))
        own = _modules(zf.namelist())
    extras = dockerfile_extras()

    wanted: dict[str, set[str]] = {}
    missing: set[str] = set()
    queue = [(Requirement(r), extras) for r in meta.requires or ()]
    while queue:
        req, active = queue.pop()
        if not _wanted(req, active):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.add(name)
            continue
        new = set(req.extras) - wanted.get(name, set())
        if name in wanted and not new:
            continue
        wanted.setdefault(name, set()).update(req.extras)
        queue += [(Requirement(r), set(req.extras)) for r in dist.requires or ()]

    allowed: set[str] = set(own)
    others: list[set[str]] = []
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name == OWN:
            continue
        mods = _modules(dist.files)
        if not mods and dist.read_text("top_level.txt"):
            mods = set(dist.read_text("top_level.txt").split())
        (allowed.update(mods) if name in wanted else others.append(mods))
    allowed_prefixes = {p for m in allowed for p in _prefixes(m)}
    blocked = set()
    for mods in others:
        for mod in mods:
            first_new = next((p for p in _prefixes(mod) if p not in allowed_prefixes), None)
            if first_new:
                blocked.add(first_new)
    # Our own modules that are not in the wheel (spottrain.testing) are absent too.
    blocked |= _modules(_checkout_files()) - own
    return ImageEnvironment(
        wheel_dir=unpacked,
        own_modules=frozenset(own),
        distributions=frozenset(wanted),
        blocked=frozenset(blocked),
        missing=frozenset(missing),
    )


def _checkout_files() -> list[str]:
    """The checkout's own import roots' files (``components/``, ``pipelines/`` map into
    ``spottrain`` and are in the wheel)."""
    return [
        str(p.relative_to(REPO)) for root in ("spottrain",) for p in (REPO / root).rglob("*.py")
    ]


# Runs first in a child interpreter (``python -I -c BLOCKER + code``) with the JSON of
# {"site": wheel dir, "blocked": [...]} in SPOTTRAIN_IMAGE_ENV.
BLOCKER = r"""
import importlib.abc, json, os, sys
_env = json.loads(os.environ["SPOTTRAIN_IMAGE_ENV"])
# The checkout's editable install is not in the image: drop its finders and paths.
sys.meta_path[:] = [f for f in sys.meta_path
                    if not type(f).__module__.startswith("__editable__")
                    and not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks
                     if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
sys.path.insert(0, _env["site"])
_BLOCKED = set(_env["blocked"])

class _NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        for i in range(len(parts)):
            if ".".join(parts[: i + 1]) in _BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (not in the image)", name=name)
        return None

sys.meta_path.insert(0, _NotInImage())
"""


def image_python(env: ImageEnvironment, code: str, *, timeout: float = 300):
    """Runs ``code`` in a child interpreter that imports as the image would."""
    import os

    child_env = {
        **os.environ,
        "SPOTTRAIN_IMAGE_ENV": json.dumps(
            {"site": str(env.wheel_dir), "blocked": sorted(env.blocked)}
        ),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    return subprocess.run(
        [sys.executable, "-I", "-c", BLOCKER + code],
        cwd=env.wheel_dir.parent, env=child_env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_in_image(env: ImageEnvironment, code: str, *, timeout: float = 300) -> dict:
    """Runs ``code`` (which prints one JSON line last) as the image would import it."""
    proc = image_python(env, code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
