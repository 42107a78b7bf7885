"""The retry model's merge of the template defaults against Argo's own code.

``tools/argo-merge`` (built by ``make tools`` from the Go module proxy) runs the
merge Argo's workflow controller applies to every template, with Argo v4.0.5's
types and apimachinery's strategic merge (cited in its source). Here it gets the
retryStrategy KFP compiles for our tasks and the configmap values a cluster can
have, and must agree with ``tests/argo_retry_model.py`` on what Argo then runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from argo_retry_model import _compiled_strategy, merge_template_defaults, template_defaults

from spottrain.pipelines import argo_retry
from spottrain.pipelines import compile as comp

REPO = Path(__file__).resolve().parents[3]
ARGO_MERGE = REPO / ".tools" / "bin" / "argo-merge"
pytestmark = [
    pytest.mark.skipif(
        not ARGO_MERGE.exists(), reason="needs .tools/bin/argo-merge (`make tools`, Go toolchain)"
    ),
]

DEFAULTS = {
    "kfp-2.17.0": argo_retry.KFP_WORKFLOW_DEFAULTS,
    "patched-always": argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "Always"),
    "patched-onfailure": argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "OnFailure"),
    "none": "",
}


def argo(tmp_path: Path, workflow_defaults: str, strategy) -> tuple[dict | None, str]:
    """Argo's merged retryStrategy and its RetryPolicyActual()."""
    path = tmp_path / "workflowDefaults.yaml"
    path.write_text(workflow_defaults)
    arg = "-"
    if strategy is not None:  # as KFP's container.go:667-686 builds it
        arg = json.dumps({"limit": strategy.limit, "backoff": {
            "duration": strategy.duration, "factor": strategy.factor,
            "maxDuration": strategy.max_duration}})  # fmt: skip
    out = subprocess.run(
        [str(ARGO_MERGE), str(path), arg], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return json.loads(out[0]), out[1]


def compiled_tasks() -> dict:
    docs = list(yaml.safe_load_all((comp.COMPILED_DIR / comp.GKE_YAML).read_text()))
    job = list(yaml.safe_load_all((comp.COMPILED_DIR / comp.gke_yaml(engine="job")).read_text()))
    tasks = {}
    for name, doc in (("pod", docs[0]), ("job", job[0])):
        found = dict(doc["root"]["dag"]["tasks"])
        for component in doc["components"].values():
            found.update(component.get("dag", {}).get("tasks", {}))
        tasks.update({f"{name}:{task}": spec for task, spec in found.items()})
    return tasks


@pytest.mark.parametrize("defaults", sorted(DEFAULTS))
def test_the_model_merges_template_defaults_as_argo_does(tmp_path, defaults):
    value = DEFAULTS[defaults]
    tasks = compiled_tasks()
    assert {"pod:train", "pod:profile", "job:train-job", "job:gcs-copy"} <= set(tasks)
    for name, task in tasks.items():
        own = _compiled_strategy(task)
        model = merge_template_defaults(own, template_defaults(value))
        merged, policy = argo(tmp_path, value, own)
        if model is None:
            assert merged is None and policy == "", name
            continue
        assert policy == model.policy, (name, merged)
        assert str(merged.get("limit")) == model.limit, (name, merged)
        assert ("backoff" in merged) == model.backoff, (name, merged)
    # A template without set_retry (KFP's driver and DAG templates) takes the defaults alone.
    model = merge_template_defaults(None, template_defaults(value))
    merged, policy = argo(tmp_path, value, None)
    if model is None:
        assert merged is None
    else:
        assert (policy, merged["limit"], "backoff" in merged) == (model.policy, model.limit, False)
    # What docs/gke.md says, from Argo's own code: KFP's shipped value keeps set_retry's
    # limit and backoff, and OnError; the patch gives Always.
    train = _compiled_strategy(tasks["pod:train"])
    merged, policy = argo(tmp_path, value, train)
    expected = {"kfp-2.17.0": "OnError", "patched-always": "Always",
                "patched-onfailure": "OnFailure", "none": "OnFailure"}[defaults]  # fmt: skip
    assert policy == expected and merged["limit"] == "5" and merged["backoff"]["factor"] == "2"
