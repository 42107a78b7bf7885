"""The pre-flight's check of a task from its source (pipelines/task_source.py), for an
install without TensorFlow: it refuses only what cannot run, names methods as the user
wrote them, and agrees with the engine's own ``load_task`` on every task we have.

The TF-free install itself (check_task choosing this path, its one line, once) is
tests/integration/project/test_authoring_install.py."""

from __future__ import annotations

import inspect as pyinspect
import sys
import textwrap

import pytest

from spottrain.pipelines import task_source
from spottrain.pipelines.task_source import TaskSourceError, Unknown

HEADER = "import keras\nimport tensorflow as tf\n"


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder on sys.path where a test writes a user's task package ``mine``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mine").mkdir()
    # A parent package that itself needs TensorFlow: it must not be run to find the module.
    (tmp_path / "mine" / "__init__.py").write_text("import not_installed_anywhere\n")

    def write(name: str, source: str) -> str:
        (tmp_path / "mine" / f"{name}.py").write_text(HEADER + textwrap.dedent(source))
        return f"mine.{name}"

    yield write
    for name in [m for m in sys.modules if m == "mine" or m.startswith("mine.")]:
        del sys.modules[name]


def test_valid_tasks_are_found_whatever_their_imports(user_dir):
    user_dir("base", """
        from spottrain.trainer import task_api

        class MyBase(task_api.Task):
            def loss(self, labels, outputs):
                return tf.zeros([1])
    """)  # fmt: skip
    module = user_dir("tasks", """
        import spottrain.trainer.task_api as api
        from spottrain.trainer.task_api import KerasTask as KT
        from .base import MyBase

        class Mine(MyBase):
            def build_model(self):
                return keras.Sequential()
            def train_dataset(self, spec):
                return None

        class MineKeras(KT):
            def model(self):
                return None
            examples = lambda self: None

        class OwnStep(api.Task):
            def build_model(self): ...
            def train_dataset(self, spec): ...
            def train_step(self, model, optimizers, features, labels, global_batch): ...
    """)  # fmt: skip
    top = user_dir("top", """
        import spottrain
        from spottrain import KerasTask

        class FromTheTop(KerasTask):
            def model(self): ...
            def examples(self): ...

        class Dotted(spottrain.Task):
            def build_model(self): ...
            def train_dataset(self, spec): ...
            def loss(self, labels, outputs): ...
    """)  # fmt: skip
    assert task_source.inspect(top, "FromTheTop").kind == "KerasTask"  # as the docs write it
    assert task_source.inspect(top, "Dotted").kind == "Task"
    found = task_source.inspect(module, "Mine")
    assert found.kind == "Task" and {"loss", "build_model"} <= found.methods
    assert task_source.inspect(module, "MineKeras").kind == "KerasTask"
    assert task_source.inspect(module, "OwnStep").kind == "Task"  # no loss(): its own step
    assert "mine" not in sys.modules, "the user's package was run to find its module"


@pytest.mark.parametrize(
    ("source", "cls", "says"),
    [
        # A Task written with KerasTask's names: named as written, with the way out.
        (
            "class Mine(Task):\n  def model(self): ...\n  def examples(self): ...\n",
            "Mine",
            "subclasses Task but does not define build_model(), train_dataset(), loss(); it "
            "defines model(), examples(), which are KerasTask's: subclass KerasTask, or rename",
        ),
        (
            "class Mine(KerasTask):\n  def build_model(self): ...\n"
            "  def train_dataset(self, s): ...\n  def loss(self, l, o): ...\n",
            "Mine",
            "which are Task's: subclass Task",
        ),
        (
            "class Mine(KerasTask):\n  def model(self): ...\n  def example(self): ...\n",
            "Mine",
            "does not define examples() (example() where examples() is meant?)",
        ),
        ("class Mine:\n  def build_model(self): ...\n", "Mine", "is not a subclass of"),
        ("class Mine(Task):\n  pass\n", "Nope", "has no 'Nope'"),
        ("class Mine(Task)\n  pass\n", "Mine", "line 4: SyntaxError"),
        ("class Mine(Tsk):\n  pass\n", "Mine", "line 4: 'Tsk' is not defined"),
    ],
)
def test_certain_mistakes_are_one_line_naming_them(user_dir, source, cls, says):
    module = user_dir("tasks", "from spottrain.trainer.task_api import KerasTask, Task\n" + source)
    with pytest.raises(TaskSourceError) as err:
        task_source.inspect(module, cls)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "source",
    [
        "class Mine(keras_hub_missing.Base):\n  pass\n",  # a base from a package not here
        "from elsewhere_missing import *\nclass Mine(Base):\n  pass\n",
        "class Mine(make_base()):\n  pass\n",
        "Mine = type('Mine', (), {})\n",
        "from not_here_either import Base\nclass Mine(Base, Task):\n  pass\n",
    ],
)
def test_what_the_source_cannot_show_is_unknown_never_an_error(user_dir, source):
    module = user_dir(
        "tasks",
        "import keras_hub_missing\nfrom spottrain.trainer.task_api import Task\n"
        "def make_base():\n  return Task\n" + source,
    )
    with pytest.raises(Unknown):
        task_source.inspect(module, "Mine")


def test_a_module_that_is_not_here_is_not_found(user_dir):
    with pytest.raises(task_source.NotFound):
        task_source.inspect("mine.absent", "Mine")
    with pytest.raises(task_source.NotFound):
        task_source.inspect("only_in_my_image.tasks", "Mine")


def _classes(module) -> list[str]:
    mine = [(n, c) for n, c in vars(module).items() if pyinspect.isclass(c)]
    return [n for n, c in mine if c.__module__ == module.__name__]


def test_it_agrees_with_the_engines_load_task_on_every_task_we_have():
    """Every task in examples/ and tests/task_fixtures.py: a task the engine loads is never
    refused from its source, and one it refuses for its shape is refused from it too."""
    import importlib

    from spottrain.exits import ConfigError
    from spottrain.trainer.task_loader import load_task

    seen = {"loads": 0, "refused": 0, "unknown": 0}
    for module_name in (
        "examples.regression",
        "examples.keras_classifier",
        "examples.two_optimizers",
        "tests.task_fixtures",
    ):
        for cls in _classes(importlib.import_module(module_name)):
            spec = f"{module_name}:{cls}"
            try:
                load_task(spec, "{}", None)
                engine = None
            except ConfigError as e:
                engine = str(e)
            try:
                task_source.inspect(module_name, cls)
                static = None
            except Unknown:
                seen["unknown"] += 1
                continue
            except TaskSourceError as e:
                static = str(e)
            if engine is None or "does not implement" not in engine and "subclass" not in engine:
                assert static is None, (spec, static)  # loads (or fails later): not refused
                seen["loads"] += 1
            else:
                assert static is not None, (spec, engine)
                seen["refused"] += 1
    assert seen["loads"] >= 4 and seen["refused"] >= 3, seen
