"""How the engine loads and calls a task (``--task module:Class``); the API is task_api's.

Kept apart from :mod:`spottrain.trainer.task_api`, which is what task authors read.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from typing import Any

from spottrain.exits import ConfigError
from spottrain.trainer.task_api import KerasTask, Task
from spottrain.trainer.user_code import call_task  # noqa: F401 - where the engine finds it

# Named, and imported when used: a task depends on the engine, never the engine on a task.
DEFAULT_TASK = "spottrain.tasks.image.task:ImageClassificationTask"


def default_task_flags():
    """The default task's own trainer flags (``Task.flags()``: --image-dir, --backbone...).

    Its class is imported without TensorFlow (its module imports TF when it builds);
    ``None`` when it has none.
    """
    module, _, name = DEFAULT_TASK.partition(":")
    return getattr(importlib.import_module(module), name).flags()


def check_spec(spec: str, args_json: str) -> tuple[str, str, dict[str, Any]]:
    """``(module, class, args)`` of ``--task``/``--task-args``, without importing anything.

    Cheap enough for the supervisor's checks and the pipelines' pre-flight.

    Raises:
        ConfigError: naming the malformed value.
    """
    module_name, _, class_name = (spec or DEFAULT_TASK).partition(":")
    if not all(p.isidentifier() for p in module_name.split(".")) or not class_name.isidentifier():
        raise ConfigError(f"--task {spec!r}: expected <module>:<Class>, e.g. my_pkg.tasks:MyTask")
    try:
        args = json.loads(args_json or "{}")
    except json.JSONDecodeError as e:
        raise ConfigError(f"--task-args {args_json!r} is not JSON: {e.msg}") from None
    if not isinstance(args, dict):
        raise ConfigError(f"--task-args {args_json!r} must be a JSON object")
    return module_name, class_name, args


def _user_line(error: BaseException) -> str:
    """`` (<file>, line <n>)``: where in the user's code an import failed (``""``: nowhere).

    The deepest frame outside the import machinery, the standard library and
    installed packages (else the first outside the import machinery): the line
    that raised, or the line a SyntaxError names.
    """
    import os
    import sysconfig
    import traceback

    if isinstance(error, SyntaxError) and error.filename:
        return f" ({error.filename}, line {error.lineno})"
    library = tuple(
        os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "purelib", "platlib")
    )
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith("<") and f.filename != __file__
    ]
    own = [f for f in frames if not f.filename.startswith(library)]
    if isinstance(error, ImportError) and not own:
        return ""  # the module itself is not found: no line of the user's to name
    frame = (own or frames or [None])[-1 if own else 0]
    return f" ({frame.filename}, line {frame.lineno})" if frame else ""


class StartsTensorFlow(BaseException):
    """The task's module started TensorFlow while :func:`preload` imported it.

    A ``BaseException``: the module's own ``except Exception`` must not swallow it.
    """


@contextlib.contextmanager
def tensorflow_not_started():
    """Raises :class:`StartsTensorFlow` where code would start TensorFlow's eager context.

    Every path that creates the context goes through ``Context.ensure_initialized``
    (TF 2.21 ``tensorflow/python/eager/context.py``: the only caller of
    ``TFE_NewContext``); a tensor, a variable or a layer's weights call it first.
    """
    from tensorflow.python.eager import context

    original = context.Context.ensure_initialized

    def guarded(self):
        if not self._initialized:
            raise StartsTensorFlow
        return original(self)

    context.Context.ensure_initialized = guarded
    try:
        yield
    finally:
        context.Context.ensure_initialized = original


def _import(spec: str, module_name: str):
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        where = _user_line(e)
        if isinstance(e, ImportError):
            what = f"cannot import {module_name!r}: {e}"
        else:
            text = e.msg if isinstance(e, SyntaxError) else e  # its str() repeats the line
            what = f"importing {module_name!r} raised {type(e).__name__}: {text}"
        raise ConfigError(f"--task {spec!r}: {what}{where}") from None


def _task_class(spec: str, module, module_name: str, class_name: str) -> type:
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"--task {spec!r}: {module_name!r} has no {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"--task {spec!r} is not a subclass of spottrain.trainer.task_api.Task")
    if issubclass(cls, KerasTask):
        required = ("model", "examples")
    elif cls.has_own_step():  # its step computes its own losses
        required = ("build_model", "train_dataset")
    else:
        required = ("build_model", "train_dataset", "loss")
    base = KerasTask if issubclass(cls, KerasTask) else Task
    missing = [name for name in required if getattr(cls, name) is getattr(base, name)]
    if "examples" in missing and cls.fit is not KerasTask.fit:  # fit() gives the data
        missing.remove("examples")
    elif "examples" in missing:
        missing[missing.index("examples")] = "examples (or fit)"
    if missing:
        raise ConfigError(f"--task {spec!r} does not implement {', '.join(missing)}")
    return cls


def preload(spec: str, args_json: str) -> bool:
    """Imports the task's module and checks its class, before TensorFlow is configured.

    So a module that does not import, or lacks its class, fails at once, before the
    gang forms (a peer that never comes cannot hold it up). A module that starts
    TensorFlow while it is imported (a module-level ``StringLookup``) is stopped there
    and taken out of ``sys.modules`` (importlib removes a module whose code raised):
    it is imported again, whole, by :func:`load_task` once TensorFlow is configured
    (:mod:`spottrain.trainer.process_setup`); its top-level code up to its first
    TensorFlow object then runs twice.

    Returns:
        Whether the module is imported (``False``: it starts TensorFlow).

    Raises:
        ConfigError: the one line :func:`load_task` would raise.
    """
    module_name, class_name, _ = check_spec(spec, args_json)
    try:
        with tensorflow_not_started():
            module = _import(spec, module_name)
    except StartsTensorFlow:
        return False
    _task_class(spec, module, module_name, class_name)
    return True


def load_task(spec: str, args_json: str, cfg) -> Task:
    """Imports ``module:Class`` and builds it; one ``ConfigError`` line for each way it fails."""
    module_name, class_name, args = check_spec(spec, args_json)
    cls = _task_class(spec, _import(spec, module_name), module_name, class_name)
    try:
        return cls(args, cfg)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's constructor
        raise ConfigError(f"--task {spec!r}: {type(e).__name__}: {e}") from None
