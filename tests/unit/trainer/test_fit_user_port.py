"""A fit user's script (tests/fit_user/script.py) ports by moving, not rewriting.

The port (tests/fit_user/task.py) wraps the model's lines in ``model()`` and moves
the ``model.fit(...)`` call's arguments, unchanged, into ``fit()``'s ``FitArgs(...)``.
Measured here: 8 lines added and 2 removed (``model.fit(`` and ``model.save``: the
engine exports), the model's 11 lines and the call's 7 only indented; a plain
``diff`` shows 25 added and 19 removed for that indentation.
"""

from __future__ import annotations

import difflib
from pathlib import Path

FIT_USER = Path(__file__).resolve().parents[2] / "fit_user"


def _lines(name: str) -> list[str]:
    return (FIT_USER / name).read_text().splitlines()


def _changes(a: list[str], b: list[str]) -> tuple[int, int]:
    diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:]
    added = sum(1 for ln in diff if ln.startswith("+"))
    removed = sum(1 for ln in diff if ln.startswith("-"))
    return added, removed


def _call(lines: list[str], opening: str) -> list[str]:
    """The stripped lines from ``opening`` to its closing parenthesis."""
    stripped = [ln.strip() for ln in lines]
    start = stripped.index(opening)
    end = stripped.index(")", start)
    return stripped[start + 1 : end]


def test_the_fit_calls_arguments_move_unchanged():
    script, port = _lines("script.py"), _lines("task.py")
    assert _call(script, "model.fit(") == _call(port, "return FitArgs(")
    assert len(_call(port, "return FitArgs(")) == 6


def test_the_model_lines_are_only_indented():
    script, port = _lines("script.py"), _lines("task.py")
    model_lines = [ln for ln in port if ln.startswith(" " * 8) and "FitArgs" not in ln]
    body = [ln.strip() for ln in model_lines if ln.strip() != "return model"]
    assert all(ln in [s.strip() for s in script] for ln in body), body


def test_the_port_adds_eight_lines_and_removes_two():
    script, port = _lines("script.py"), _lines("task.py")
    strip = [ln.strip() for ln in script], [ln.strip() for ln in port]
    assert _changes(*strip) == (8, 2)
    assert _changes(script, port) == (25, 19)  # what a plain diff shows, indentation included
    assert (len(script), len(port)) == (33, 39)


def test_the_docs_show_the_port_as_it_is():
    """docs/task-api.md's "Port a model.fit script" block is tests/fit_user/task.py."""
    page = (FIT_USER.parents[1] / "docs" / "task-api.md").read_text()
    section = page[page.index("## Port a `model.fit` script") :]
    block = section[section.index("```python\n") + len("```python\n") :]
    assert block[: block.index("```")] == (FIT_USER / "task.py").read_text()
