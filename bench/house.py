"""The house's shape in figures: files, lines, import levels, arrows back up, circles.

``python bench/house.py [--json]`` over ``spottrain/``, ``pipelines/`` and
``components/``. Every import counts, a function's too (a lazy import is still a
dependency):

* **levels**: the longest chain of imports between modules, once each circle is
  counted as one module;
* **arrows back up**: an import from one package to another that imports it back
  (directly or not): the two are not layered;
* **circles**: groups of modules that import each other round (module-level import
  cycles, lazy ones included);
* **most branched**: ruff's McCabe complexity, the functions above 10.

Issue 43 asked for these before and after the ledger moved out of the trainer.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("spottrain", "pipelines", "components")
# Where each root is installed, as setup.py's package_dir maps it: pipelines/gke.py is
# imported as spottrain.pipelines.gke. Named by folder, every such import fell to the
# package face (spottrain) and no arrow up from the top two floors was seen.
INSTALLED_AS = {"spottrain": "spottrain", "pipelines": "spottrain.pipelines",
                "components": "spottrain.components"}  # fmt: skip


def modules() -> dict[str, Path]:
    """Dotted name (as imported) → file, for every module under ROOTS."""
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO / root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([INSTALLED_AS[root], *parts])] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of ROOTS it imports (anywhere in it)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join([*pkg, base] if base else pkg)
                subs = [f"{base}.{a.name}" for a in node.names]
                # The package itself only where a name is not a module of it.
                targets = subs + ([base] if any(t not in mods for t in subs) else [])
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def levels(graph: dict[str, set[str]]) -> int:
    """The longest import chain, each circle one step."""
    group_of = {m: m for m in graph}
    for group in circles(graph):
        for m in group:
            group_of[m] = group[0]
    dag: dict[str, set[str]] = defaultdict(set)
    for a, bs in graph.items():
        for b in bs:
            if group_of[a] != group_of[b]:
                dag[group_of[a]].add(group_of[b])
    depth: dict[str, int] = {}

    def d(v: str) -> int:
        if v not in depth:
            depth[v] = 1 + max((d(w) for w in dag[v]), default=0)
        return depth[v]

    return max(d(v) for v in set(group_of.values()))


def package(m: str) -> str:
    """A module's room: ``spottrain.trainer.config`` → ``spottrain.trainer``; a module
    directly under ``spottrain`` (``spottrain.storage``) is a room of its own."""
    return ".".join(m.split(".")[:2])


def arrows_back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Module imports across packages that close a package-level circle."""
    pg: dict[str, set[str]] = defaultdict(set)
    for a, bs in graph.items():
        for b in bs:
            if package(a) != package(b):
                pg[package(a)].add(package(b))
    for p in list(pg):
        for q in list(pg[p]):
            pg.setdefault(q, set())
    reach: dict[str, set[str]] = {}

    def r(p: str) -> set[str]:
        if p not in reach:
            seen, todo = set(), [p]
            while todo:
                for q in pg[todo.pop()]:
                    if q not in seen:
                        seen.add(q)
                        todo.append(q)
            reach[p] = seen
        return reach[p]

    return sorted(
        (a, b)
        for a, bs in graph.items()
        for b in bs
        if package(a) != package(b) and package(a) in r(package(b))
    )


def most_branched(limit: int = 10) -> list[tuple[int, str]]:
    """Functions above McCabe ``limit``, most branched first: (complexity, where)."""
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run(
        [str(ruff), "check", "--select", "C901", "--output-format", "json", "--config",
         f"lint.mccabe.max-complexity={limit}", *ROOTS],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    out = []
    for hit in json.loads(proc.stdout or "[]"):
        n = int(hit["message"].rsplit("(", 1)[1].split(" ")[0])
        name = hit["message"].split("`")[1]
        out.append((n, f"{Path(hit['filename']).relative_to(REPO)}:{name}"))
    return sorted(out, reverse=True)


def figures() -> dict:
    """Every figure, as a dict."""
    mods = modules()
    graph = imports(mods)
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    trainer = [m for m in mods if package(m) == "spottrain.trainer"]
    trainer_graph = {m: {t for t in graph[m] if t in trainer} for m in trainer}
    return {
        "files": len(mods),
        "lines": sum(lines.values()),
        "over_450_lines": sorted(
            (str(mods[m].relative_to(REPO)), n) for m, n in lines.items() if n > 450
        ),
        "trainer_files": len(trainer),
        "import_levels": levels(graph),
        "trainer_import_levels": levels(trainer_graph),
        "arrows_back_up": arrows_back_up(graph),
        "circles": circles(graph),
        "most_branched": most_branched()[:10],
    }


def main() -> int:
    """Prints the figures (``--json``: as JSON)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    f = figures()
    if p.parse_args().json:
        print(json.dumps(f, indent=1))
        return 0
    print(f"files {f['files']}, lines {f['lines']}; trainer {f['trainer_files']} files")
    print(f"import levels {f['import_levels']} (trainer {f['trainer_import_levels']})")
    print(f"over 450 lines: {f['over_450_lines']}")
    print(f"arrows back up ({len(f['arrows_back_up'])}):")
    for a, b in f["arrows_back_up"]:
        print(f"  {a} -> {b}")
    print(f"circles ({len(f['circles'])}):")
    for c in f["circles"]:
        print(f"  {len(c)}: {', '.join(c)}")
    print("most branched:")
    for n, where in f["most_branched"]:
        print(f"  {n:3d} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
