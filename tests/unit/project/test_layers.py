"""The house is layered: no package imports one that imports it back (bench/house.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HOUSE = Path(__file__).resolve().parents[3] / "bench" / "house.py"


def _house():
    spec = importlib.util.spec_from_file_location("house", HOUSE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_goes_back_up():
    """The engine imports no task (its default task's flags come from Task.flags() of the
    class task_loader.DEFAULT_TASK names): before, trainer.config imported the image
    task's flags, which import the engine back, and 9 imports closed that circle."""
    house = _house()
    graph = house.imports(house.modules())
    assert house.arrows_back_up(graph) == []
    engine = [m for m in graph if m.startswith("spottrain.trainer")]
    assert not {t for m in engine for t in graph[m] if t.startswith("spottrain.tasks")}


def test_no_modules_import_each_other_round():
    """No import circle, lazy imports included: before, spottrain.pricing imported its
    catalog reader (quoting), which imported the package back for Quote and Usage,
    now in pricing/terms.py."""
    house = _house()
    assert house.circles(house.imports(house.modules())) == []


def test_the_ledger_is_below_the_engine():
    """The ledger's room imports nothing of the trainer's, the runtime's or the
    pipelines': the engine writes it, the outputs and launchers read it there."""
    house = _house()
    graph = house.imports(house.modules())
    ledger = [m for m in graph if m.startswith("spottrain.ledger")]
    assert ledger
    up = (
        "spottrain.trainer",
        "spottrain.tasks",
        "spottrain.runtime",
        "spottrain.pipelines",
        "spottrain.components",
    )
    assert sorted((m, t) for m in ledger for t in graph[m] if t.startswith(up)) == []


def test_the_figures_see_an_arrow_back_up():
    """The measure itself: an import added from the engine to a task is one."""
    house = _house()
    graph = house.imports(house.modules())
    graph["spottrain.trainer.config"].add("spottrain.tasks.image.flags")
    assert ("spottrain.trainer.config", "spottrain.tasks.image.flags") in house.arrows_back_up(
        graph
    )


def test_the_guard_sees_the_top_two_floors_as_they_are_imported():
    """Issue 58: pipelines/ and components/ were named by folder while the code imports
    them as spottrain.pipelines.* (setup.py's package_dir), so every such import fell to
    the package face and the circle pipelines.gke <-> components (through guards) passed."""
    house = _house()
    mods = house.modules()
    assert mods["spottrain.pipelines.gke"].name == "gke.py"
    assert mods["spottrain.components.train.component"].parent.name == "train"
    graph = house.imports(mods)
    assert "spottrain.components.train.component" in graph["spottrain.pipelines.gke"]
    graph["spottrain.components"].add("spottrain.pipelines.guards")  # as it was before
    assert ("spottrain.components", "spottrain.pipelines.guards") in house.arrows_back_up(graph)
