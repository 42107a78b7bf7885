"""docs/architecture.md names only what exists, and names every trainer and ledger module, every
package under spottrain/ and every tool under tools/ (issue 43: it had drifted)."""

from __future__ import annotations

import re
from itertools import product
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Paths the page names that are not in this repository: upstream packages the tools
# build, folders inside a checkpoint dir, a GCE metadata key.
ELSEWHERE = {
    "workflow/controller",
    "cmd/argoexec",
    "diagnostics/",
    "quarantine/",
    "instance/preempted",
}
DOC = (REPO / "docs" / "architecture.md").read_text()
# The folder a section's bare module names are in (its heading names it).
SECTIONS = {
    "## The trainer, one job per module": "spottrain/trainer",
    "## The ledger, `spottrain/ledger/`": "spottrain/ledger",
    "## The built-in task, `spottrain/tasks/image/`": "spottrain/tasks/image",
}


def _expand(token: str) -> list[str]:
    """``tools/{a,b}/`` -> ``tools/a/``, ``tools/b/``."""
    parts = re.split(r"\{([^}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in product(*choices)]


def _named() -> list[tuple[str, str]]:
    """(section folder or "", path) for every path-like token in backticks."""
    out, folder = [], ""
    for line in DOC.splitlines():
        if line.startswith("## "):
            folder = SECTIONS.get(line.strip(), "")
        for token in re.findall(r"`([^`\s]+)`", line):
            if "<" in token or token.startswith(("python", "-", ".")) or "=" in token:
                continue
            if "://" in token or token in ELSEWHERE:
                continue
            if "/" in token or token.endswith(".py"):
                out += [(folder, t) for t in _expand(token)]
    return out


def _exists(folder: str, path: str) -> bool:
    """A path from the repository's root (a glob matching something), or a bare name in
    its section's folder, else in the folder its row names (any source folder)."""
    path = path.split(":")[0]  # `module.py:Class`
    if (REPO / path).exists() or ("*" in path and next(REPO.glob(path), None)):
        return True
    if "/" in path.rstrip("/"):
        return False
    if folder and (REPO / folder / path).exists():
        return True
    roots = ("spottrain", "pipelines", "components", "tools", "tests", "bench", "examples")
    return any(next((REPO / r).rglob(path), None) for r in roots)


def test_every_path_the_page_names_exists():
    missing = [p for folder, p in _named() if not _exists(folder, p)]
    assert not missing, missing


def test_the_page_names_every_trainer_module_package_and_tool():
    named = {p.rstrip("/") for _, p in _named()} | {
        f"{folder}/{p}" for folder, p in _named() if folder and "/" not in p
    }
    trainer = {f"spottrain/trainer/{p.name}" for p in (REPO / "spottrain/trainer").glob("*.py")}
    trainer -= {"spottrain/trainer/__init__.py"}
    ledger = {f"spottrain/ledger/{p.name}" for p in (REPO / "spottrain/ledger").glob("*.py")}
    packages = {
        f"spottrain/{p.parent.name}"
        for p in (REPO / "spottrain").glob("*/__init__.py")
        if p.parent.name not in ("trainer", "tasks")
    }
    tools = {f"tools/{p.name}" for p in (REPO / "tools").iterdir() if p.is_dir()}
    assert not sorted((trainer | ledger | packages | tools) - named)
