"""One name per thing (issue 33): the copy library, and the fall-back decision's words."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pkgutil

import spottrain
import spottrain.components


def _modules_named(leaf: str) -> set[str]:
    found = set()
    for package in (spottrain, spottrain.components):
        prefix = package.__name__ + "."
        for info in pkgutil.walk_packages(package.__path__, prefix):
            if info.name.rsplit(".", 1)[-1] == leaf:
                found.add(info.name)
    return found


def test_the_copy_library_is_the_copier_not_a_third_gcs_copy():
    """``gcs_copy`` is the component and its body; the library has its own name, no shim."""
    assert importlib.util.find_spec("spottrain.gcs_copy") is None
    assert _modules_named("gcs_copy") == {
        "spottrain.components.gcs_copy",  # the KFP component (its name is in users' YAML)
        "spottrain.runtime.gcs_copy",  # the component's body, named after it
    }
    assert _modules_named("copier") == {"spottrain.copier"}
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert scripts["spottrain-copy"].value == "spottrain.copier:main"  # after `make venv`


# -- The on-demand fall-back's decision: one vocabulary (spottrain.runtime.fallback_words) ------

FALLBACK_MODULES = (
    "spottrain/runtime/fallback_decision.py",
    "spottrain/runtime/training_status.py",
    "spottrain/runtime/vertex_job.py",
    "pipelines/gke.py",
    "pipelines/vertex.py",
)
# The words of every vocabulary the fall-backs ever spoke ("done" and "give up": Vertex's).
SPOKEN = {"resume", "completed", "incomplete", "fatal", "cancelled", "done", "give up"}


def test_the_fallback_modules_spell_no_decision_word_of_their_own():
    """Each word is a constant of fallback_words; the fall-back modules only import it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spelled = []
    for rel in FALLBACK_MODULES:
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in SPOKEN:
                spelled.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not spelled


def test_both_fallbacks_decide_in_the_same_words():
    from spottrain.runtime import fallback_decision, fallback_words, vertex_job
    from spottrain.runtime.vertex_job import Attempt, Plan

    assert set(fallback_words.DECISIONS) | set(fallback_words.STATUSES) <= SPOKEN
    gke = {
        fallback_decision.decide(state, progress)
        for state in ("FAILED", "CANCELED", "COMPLETE", "RUNNING")
        for progress in fallback_words.STATUSES
    }
    assert gke == set(fallback_words.DECISIONS)
    plan = Plan(first="SPOT", fallback="STANDARD", first_attempts=1, fallback_attempts=1)
    vertex = set()
    for state in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"):
        for attempts in ([Attempt("SPOT", "j", state)], [Attempt("STANDARD", "j", state)]):
            for progress in fallback_words.STATUSES:
                vertex.add(vertex_job.decide(plan, attempts, progress))
    # Its endings are the same words; a strategy means "resume on" it (and is logged so).
    assert vertex - set(vertex_job.STRATEGIES) == set(vertex_job.ENDINGS)
    assert set(vertex_job.ENDINGS) == {"completed", "fatal", "cancelled", "incomplete"}


def test_the_compiled_fallback_resumes_on_the_decision_word():
    import re
    from pathlib import Path

    from spottrain.runtime.fallback_words import RESUME

    compiled = Path(__file__).resolve().parents[3] / "pipelines" / "compiled"
    for name in ("spottrain_gke_spot_fallback.yaml", "spottrain_gke_preemptible_fallback.yaml"):
        text = (compiled / name).read_text()
        conditions = re.findall(r"fallback-decision-Output'\]\s+==\s+'([^']*)'", text)
        assert conditions == [RESUME], name


def test_the_move_to_on_demand_is_a_fall_back_everywhere():
    """The JobSet launcher called the on-demand fall-back "fall over" (FALL_OVER)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    other = re.compile(r"fall[ _-]?over", re.IGNORECASE)
    found = [
        str(path.relative_to(root))
        for folder in ("spottrain", "pipelines", "components", "docs")
        for path in (root / folder).rglob("*")
        if path.suffix in (".py", ".md") and other.search(path.read_text())
    ]
    assert not found
