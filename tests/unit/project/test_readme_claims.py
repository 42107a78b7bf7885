"""README's first screen says what a preemption costs per path, with docs/'s figures only."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FIRST_SCREEN = 30  # lines
# A measured figure: "0.5–1.4 s", "146 steps", "3 of 10".
FIGURE = re.compile(r"\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)? (?:s|min|steps|of \d+)\b")


def test_the_first_screen_gives_each_paths_preemption_cost_as_measured_in_docs():
    first = "\n".join((REPO / "README.md").read_text().splitlines()[:FIRST_SCREEN])
    docs = "\n".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))
    rows = {r.split("|")[1].strip(): r for r in first.splitlines() if r.startswith("| ")}
    for path in ("Vertex AI custom job", "GKE, JobSet engine (default)",
                 "GKE, in-pod engine (`ENGINE=pod`)", "locally, `make run`"):  # fmt: skip
        row = rows.get(path)
        assert row, f"README's first {FIRST_SCREEN} lines have no row for {path}"
        lost, restart = (cell.strip() for cell in row.split("|")[2:4])
        assert re.search(r"\*\*0\*\*|\d+ steps", lost), (path, "steps lost", lost)
        assert re.search(r"\d s\b|not measured", restart), (path, "restart", restart)
    # Every figure it quotes is one docs/ states (each measured there).
    unsourced = [f for f in FIGURE.findall(first) if f not in docs]
    assert not unsourced, unsourced
    assert "costs nothing" not in first
