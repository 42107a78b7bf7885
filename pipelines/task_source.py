"""A task checked from its source, for an install without TensorFlow.

The authoring install (``spottrain[pipelines]``) has no TensorFlow, and a task module
nearly always imports it, so the pre-flight cannot import the task there. It finds
the module's file the way ``import`` would (the finders on ``sys.meta_path``, which
run no code, not even a parent package's ``__init__``), parses it and checks what
the source shows: the class exists, it subclasses ``Task`` or ``KerasTask`` (through
any classes of the user's own modules), and it defines the methods the engine calls.
Only a definite mistake is an error; whatever the source cannot show (a base class
from a package missing here, a class made at run time) is :class:`Unknown`, never a
refusal. Building the model and a batch is the image's ``--check``.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path

TASK_API = "spottrain.trainer.task_api"
# The bases as a task imports them: from the API module or from the package's top
# (spottrain/__init__.py hands them out).
TASK_BASES = {f"{m}.{c}" for m in (TASK_API, "spottrain") for c in ("Task", "KerasTask")}
# What the engine calls on each kind of task: spottrain.trainer.task_loader.load_task's
# rule (tests/unit/pipelines/test_task_source.py checks that the two agree).
KERAS_REQUIRED = ("model", "examples")
TASK_REQUIRED = ("build_model", "train_dataset", "loss")
OWN_STEP_REQUIRED = ("build_model", "train_dataset")
_MAX_DEPTH = 20  # base classes followed through modules; deeper is a cycle or absurd


class TaskSourceError(Exception):
    """A mistake the source shows for certain: the task cannot run anywhere."""


class NotFound(Exception):
    """The module has no file here (it lives only in the image)."""


class Unknown(Exception):
    """Something the source cannot show without running it; says what."""


@dataclass
class Found:
    """A task class read from its source."""

    kind: str  # "Task" or "KerasTask"
    path: Path
    line: int
    methods: set[str] = field(default_factory=set)


def find_source(module: str) -> Path:
    """The ``.py`` file ``import module`` would load, found without running any code.

    Raises:
        NotFound: no finder knows the module (or a parent is not a package).
        Unknown: the module is not Python source here (a namespace or compiled module).
    """
    path = None
    spec = None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, path, None)
            except (ImportError, ValueError, TypeError):
                spec = None
            if spec is not None:
                break
        if spec is None:
            raise NotFound(module)
        path = spec.submodule_search_locations
        if i < len(parts) - 1 and path is None:
            raise NotFound(module)
    origin = spec.origin if spec else None
    if not origin or not origin.endswith(".py"):
        raise Unknown(f"module {module!r} has no Python source here")
    return Path(origin)


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool

    def bindings(self) -> tuple[dict[str, ast.AST], bool]:
        """Top-level names and what binds them, and whether others may exist.

        A star import or a module ``__getattr__`` may bind names not written here: then a
        missing name is not a mistake.
        """
        names: dict[str, ast.AST] = {}
        open_ended = False
        todo = list(self.tree.body)
        while todo:
            node = todo.pop(0)
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names[node.name] = node
                open_ended |= node.name == "__getattr__"
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        open_ended = True
                    else:
                        names[alias.asname or alias.name.split(".")[0]] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names[sub.id] = node
            else:  # if/try/with at the top level bind names too
                for attr in ("body", "orelse", "finalbody", "handlers"):
                    todo.extend(getattr(node, attr, []) or [])
        return names, open_ended

    def absolute(self, node: ast.ImportFrom) -> str:
        """The module an ``from … import`` names, relative imports resolved."""
        if not node.level:
            return node.module or ""
        parts = self.name.split(".")
        base = parts if self.is_package else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])


def _load(module: str) -> _Module:
    path = find_source(module)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise TaskSourceError(f"{path}, line {e.lineno}: SyntaxError: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise Unknown(f"{path} cannot be read ({type(e).__name__})") from None
    return _Module(module, path, tree, path.name == "__init__.py")


class _Reader:
    """Follows base classes through the user's modules; caches the modules read."""

    def __init__(self) -> None:
        self.modules: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            self.modules[name] = _load(name)
        return self.modules[name]

    def qualified(self, qualname: str, depth: int) -> tuple[str, set[str], bool]:
        """``(kind, methods, complete)`` of the class at a dotted name (see :meth:`cls`)."""
        if qualname in TASK_BASES:
            return qualname.rsplit(".", 1)[1], set(), True
        module, _, name = qualname.rpartition(".")
        if not module:
            raise Unknown(f"{qualname!r} cannot be followed")
        try:
            mod = self.module(module)
        except NotFound:
            try:  # a submodule imported as a name: `from pkg import mod`
                self.module(qualname)
            except NotFound:
                raise Unknown(f"{module!r} is not importable here") from None
            raise Unknown(f"{qualname!r} is a module, not a class") from None
        return self.named(mod, name, depth)

    def named(self, mod: _Module, name: str, depth: int) -> tuple[str, set[str], bool]:
        names, open_ended = mod.bindings()
        node = names.get(name)
        if node is None:
            if open_ended:
                raise Unknown(f"{mod.path} may make {name!r} at import (a * import)")
            raise TaskSourceError(f"{mod.path} has no {name!r}")
        if isinstance(node, ast.ClassDef):
            return self.cls(mod, node, depth + 1)
        if isinstance(node, ast.ImportFrom):
            return self.qualified(f"{mod.absolute(node)}.{_imported(node, name)}", depth + 1)
        raise Unknown(f"{name!r} in {mod.path} (line {node.lineno}) is made at import")

    def cls(self, mod: _Module, node: ast.ClassDef, depth: int) -> tuple[str, set[str], bool]:
        """``(kind, methods, complete)`` of a class.

        The task kind reached through the bases ("" for none), the methods the class
        and its bases up to it define, and whether every base could be followed (if
        not, a method may come from one not read).
        """
        if depth > _MAX_DEPTH:
            raise Unknown(f"{node.name!r}'s base classes go deeper than {_MAX_DEPTH}")
        methods = set()
        for item in node.body:  # `def loss(…)`, or `loss = some_function`
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                methods.add(item.name)
            elif isinstance(item, ast.Assign | ast.AnnAssign):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                methods |= {t.id for t in targets if isinstance(t, ast.Name)}
        kind, complete, unknown = "", True, None
        for base in node.bases:
            try:
                base_kind, base_methods, base_complete = self.base(mod, base, depth)
            except Unknown as e:
                complete, unknown = False, e
                continue
            methods |= base_methods
            complete &= base_complete
            if base_kind and kind != "KerasTask":
                kind = base_kind
        if not kind and unknown is not None:
            raise unknown
        return kind, methods, complete

    def base(self, mod: _Module, expr: ast.expr, depth: int) -> tuple[str, set[str], bool]:
        """A base class expression, followed to its class."""
        dotted = []
        while isinstance(expr, ast.Attribute):
            dotted.insert(0, expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            raise Unknown(f"a base class of line {expr.lineno} in {mod.path} is computed")
        names, open_ended = mod.bindings()
        node = names.get(expr.id)
        if node is None:
            if hasattr(builtins, expr.id) and not dotted:
                return "", set(), True  # object, Exception, …: not a task
            if open_ended:
                raise Unknown(f"{mod.path} may make {expr.id!r} at import (a * import)")
            raise TaskSourceError(f"{mod.path}, line {expr.lineno}: {expr.id!r} is not defined")
        if isinstance(node, ast.ClassDef) and not dotted:
            return self.cls(mod, node, depth + 1)
        if isinstance(node, ast.Import):
            alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == expr.id)
            root = alias.name if alias.asname else expr.id
            return self.qualified(".".join([root, *dotted]), depth + 1)
        if isinstance(node, ast.ImportFrom):
            imported = _imported(node, expr.id)
            return self.qualified(".".join([mod.absolute(node), imported, *dotted]), depth + 1)
        raise Unknown(f"{expr.id!r} in {mod.path} (line {node.lineno}) is made at import")


def _imported(node: ast.ImportFrom, bound: str) -> str:
    """The name ``from m import name as bound`` takes from ``m``."""
    return next(a.name for a in node.names if (a.asname or a.name) == bound)


def inspect(module: str, class_name: str) -> Found:
    """Reads ``module:class_name`` from its source.

    Raises:
        NotFound: the module has no file here.
        TaskSourceError: a certain mistake, in one line naming it as the source writes it.
        Unknown: the check could not be completed from the source (says why).
    """
    reader = _Reader()
    mod = reader.module(module)
    names, _ = mod.bindings()
    node = names.get(class_name)
    kind, methods, complete = reader.named(mod, class_name, 0)
    where = f"{class_name} ({mod.path}"
    where += f", line {node.lineno})" if isinstance(node, ast.ClassDef) else ")"
    if not kind:
        if not complete:
            raise Unknown(f"not every base class of {where} can be read here")
        raise TaskSourceError(f"{where} is not a subclass of {TASK_API}.Task or KerasTask")
    if kind == "KerasTask":
        required = KERAS_REQUIRED
    elif "train_step" in methods:
        required = OWN_STEP_REQUIRED
    else:
        required = TASK_REQUIRED
    missing = [m for m in required if m not in methods]
    if missing and complete:
        raise TaskSourceError(f"{where} subclasses {kind} but {_missing(missing, methods, kind)}")
    if missing:
        raise Unknown(f"{where} may get {', '.join(missing)} from a base class not read here")
    return Found(kind, mod.path, node.lineno if isinstance(node, ast.ClassDef) else 0, methods)


def _missing(missing: list[str], methods: set[str], kind: str) -> str:
    """The "does not define …" clause, naming the user's own methods where they look meant."""
    text = f"does not define {', '.join(m + '()' for m in missing)}"
    other = TASK_REQUIRED if kind == "KerasTask" else KERAS_REQUIRED
    written = [m for m in other if m in methods and m not in missing]
    if written:
        right = "Task" if kind == "KerasTask" else "KerasTask"
        return (
            f"{text}; it defines {', '.join(m + '()' for m in written)}, which are "
            f"{right}'s: subclass {right}, or rename them"
        )
    hints = []
    for name in missing:
        close = difflib.get_close_matches(name, sorted(methods), n=1, cutoff=0.7)
        if close:
            hints.append(f"{close[0]}() where {name}() is meant?")
    return f"{text}" + (f" ({'; '.join(hints)})" if hints else "")
