"""One name per thing (issue 33): the copy library, and the fall-back decision's words."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pkgutil

import spottrain
import spottrain.components


def _modules_named(leaf: str) -> set[str]:
    found = set()
    for package in (spottrain, spottrain.components):
        prefix = package.__name__ + "."
        for info in pkgutil.walk_packages(package.__path__, prefix):
            if info.name.rsplit(".", 1)[-1] == leaf:
                found.add(info.name)
    return found


def test_the_copy_library_is_the_copier_not_a_third_gcs_copy():
    """``gcs_copy`` is the component and its body; the library has its own name, no shim."""
    assert importlib.util.find_spec("spottrain.gcs_copy") is None
    assert _modules_named("gcs_copy") == {
        "spottrain.components.gcs_copy",  # the KFP component (its name is in users' YAML)
        "spottrain.runtime.gcs_copy",  # the component's body, named after it
    }
    assert _modules_named("copier") == {"spottrain.copier"}
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert scripts["spottrain-copy"].value == "spottrain.copier:main"  # after `make venv`
