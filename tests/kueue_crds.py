"""Kueue v0.17.0's own CRD schemas (``make kueue`` copies its config/components to
``.tools/kueue-config``), to check the manifests we write against what Kueue serves."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[1]
KUEUE_CONFIG = REPO / ".tools" / "kueue-config"
CRDS = KUEUE_CONFIG / "crd" / "bases"
WHY_NOT = "needs .tools/kueue-config (`make kueue`, which needs Go)"


def _python_pattern(node):
    """Go's RE2 lets ``(?i)`` follow ``^``; Python wants global flags first."""
    if isinstance(node, dict):
        return {
            k: (v.replace("^(?i)", "(?i)^", 1) if k == "pattern" and isinstance(v, str)
                else _python_pattern(v))
            for k, v in node.items()
        }  # fmt: skip
    if isinstance(node, list):
        return [_python_pattern(v) for v in node]
    return node


@cache
def _crds() -> dict[str, dict]:
    """Every Kueue CRD by kind (the Workload's is 1.4 MB: libyaml's loader, once)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for path in CRDS.glob("kueue.x-k8s.io_*.yaml"):
        crd = yaml.load(path.read_text(), Loader=loader)  # noqa: S506 - a safe loader
        out[crd["spec"]["names"]["kind"]] = crd
    return out


@cache
def schema(kind: str, version: str = "v1beta2") -> dict:
    """The ``openAPIV3Schema`` Kueue's CRD for ``kind`` serves at ``version``."""
    for served in _crds()[kind]["spec"]["versions"]:
        if served["name"] == version and served.get("served"):
            return _python_pattern(served["schema"]["openAPIV3Schema"])
    raise LookupError(f"Kueue serves no {kind} at {version} in {CRDS}")


def check(obj: dict) -> None:
    """Raises jsonschema's ValidationError where Kueue's CRD schema refuses ``obj``."""
    jsonschema.validate(obj, schema(obj["kind"]), cls=jsonschema.Draft202012Validator)
