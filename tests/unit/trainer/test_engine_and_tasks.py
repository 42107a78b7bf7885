"""The engine (``spottrain/trainer/``) apart from the built-in task (``spottrain/tasks/``).

The built-in image classifier is a user of the Task API like any user's task; the
engine names it by string in one place only, ``task_loader.DEFAULT_TASK``, and imports
no task: its flags come through its class (``Task.flags()``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ENGINE = REPO / "spottrain" / "trainer"


def _imported(path: Path) -> set[str]:
    """What ``path`` imports, top-level or inside a function (``from a import b``: ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_the_default_task_is_a_task_from_the_tasks_package():
    from spottrain import Task
    from spottrain.trainer import task_loader

    module, _, cls = task_loader.DEFAULT_TASK.partition(":")
    assert module.startswith("spottrain.tasks."), task_loader.DEFAULT_TASK
    assert issubclass(getattr(__import__(module, fromlist=[cls]), cls), Task)


def test_the_engine_imports_no_task_and_gets_the_default_tasks_flags_from_its_class():
    uses = {
        (path.name, name)
        for path in sorted(ENGINE.glob("*.py"))
        for name in _imported(path)
        if name.startswith("spottrain.tasks")
    }
    assert uses == set()
    from spottrain.tasks.image import flags
    from spottrain.trainer import task_loader

    assert task_loader.default_task_flags() is flags


def test_the_engine_holds_no_image_task_module():
    left = {"image_task.py", "image_settings.py", "model.py", "data.py"} & {
        p.name for p in ENGINE.glob("*.py")
    }
    assert left == set()


def test_a_task_without_flags_of_its_own_adds_none(monkeypatch):
    """Task.flags() is None by default: the trainer's flags are then the engine's alone."""
    from spottrain.trainer import config, task_loader

    monkeypatch.setattr(task_loader, "DEFAULT_TASK", "examples.regression:Regression")
    assert task_loader.default_task_flags() is None
    names = {a.dest for a in config.build_parser()._actions}
    assert "backbone" not in names and "train_steps" in names
