"""The README's and docs' code blocks and the make commands in them: shared by the docs tests."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from spottrain.pipelines import compile as comp
from spottrain.pipelines import templates

REPO = Path(__file__).resolve().parents[1]

PAGES = {p.relative_to(REPO).as_posix(): p.read_text()
         for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}  # fmt: skip


MAKEFILE = (REPO / "Makefile").read_text()


def blocks(lang: str, text: str | None = None) -> list[str]:
    texts = [text] if text is not None else list(PAGES.values())
    return [b for t in texts for b in re.findall(rf"```{lang}\n(.*?)```", t, re.S)]


def commands(text: str | None = None) -> list[list[str]]:
    """The shell commands of the sh blocks (of ``text``, else of every page)."""
    found = []
    for block in blocks("sh", text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                found.append(shlex.split(line))
    return found


TEMPLATES = {
    "run-gke": comp.gke_yaml("spot", engine="job"),  # the default engine
    "run-vertex": comp.VERTEX_YAML,
}


def check_make_names(target: str, assignments: list[str]) -> None:
    """``target`` is a Makefile target; every NAME= is read by it or is a parameter."""
    assert re.search(rf"^(\S+ )*{re.escape(target)}( \S+)*:", MAKEFILE, re.M), target
    for name in [a.split("=", 1)[0] for a in assignments]:
        if name.isupper():
            assert f"$({name})" in MAKEFILE, f"make {target}: the Makefile never reads {name}"
        else:
            assert target in TEMPLATES, f"make {target} takes no pipeline parameter {name}"
            spec, _ = templates.load_template(comp.COMPILED_DIR / TEMPLATES[target])
            assert name in templates.parameter_types(spec), f"{name} is no parameter of {target}"
