"""KFP 2.17.0's own compiler and Argo v4.0.5's own validation on every committed pipeline.

``.tools/bin/kfp-compile`` (``tools/kfp-compile``, ``make kfp-compile KFP_SRC=…``) takes
the KFP API server's path for a run (``template.NewV2SpecTemplate`` then
``RunWorkflow`` → ``argocompiler.Compile``), then ``validate.ValidateWorkflow`` as KFP
calls it (no defaults) and as the workflow controller does (KFP's shipped
``workflowDefaults``), and reports each template's retry strategy after Argo's
template-defaults merge. The Go module proxy does not serve KFP, so this needs its
source and skips without it; ``pipelines.guards.check_exit_tasks`` (run on every
submission and in tests/unit/pipelines/test_pipelines.py) is what CI checks instead, and these tests
show that it refuses exactly what the real compiler and validation mishandle.
"""

import json
import subprocess
from pathlib import Path

import exit_shapes
import pytest
import yaml
from kfp import compiler, dsl

from spottrain.pipelines import argo_retry, guards, templates
from spottrain.pipelines import compile as comp

REPO = Path(__file__).resolve().parents[3]
KFP_COMPILE = REPO / ".tools" / "bin" / "kfp-compile"
KFP_SRC = REPO / ".tools" / "kfp-src"

pytestmark = pytest.mark.skipif(
    not KFP_COMPILE.exists(),
    reason="needs .tools/bin/kfp-compile: `make kfp-compile KFP_SRC=<kubeflow/pipelines at "
    "2.17.0>` (the Go module proxy does not serve KFP)",
)
# The root inputs without a default, which the API server requires of a run.
PARAMS = {"data_src": "gs://b/images", "checkpoint_dir": "gs://b/ckpt"}


def kfp_compile(tmp_path: Path, *paths: Path, params: dict = PARAMS) -> list[dict]:
    defaults = tmp_path / "workflowDefaults.yaml"
    defaults.write_text(argo_retry.KFP_WORKFLOW_DEFAULTS)
    out = tmp_path / "workflows"
    out.mkdir(exist_ok=True)
    proc = subprocess.run(
        [str(KFP_COMPILE), "-params", json.dumps(params), "-defaults", str(defaults),
         "-out", str(out), *map(str, paths)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_our_copy_of_kfps_workflow_defaults_is_the_shipped_one():
    if not KFP_SRC.exists():
        pytest.skip("no .tools/kfp-src")
    patch = (
        KFP_SRC
        / "manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml"
    )
    shipped = yaml.safe_load(patch.read_text())["data"]["workflowDefaults"]
    assert yaml.safe_load(shipped) == yaml.safe_load(argo_retry.KFP_WORKFLOW_DEFAULTS)


def test_every_committed_pipeline_compiles_and_validates(tmp_path):
    paths = sorted(comp.COMPILED_DIR.glob("*.yaml"))
    assert len(paths) == 8
    results = kfp_compile(tmp_path, *paths)
    assert [r["file"] for r in results] == [str(p) for p in paths]
    for r in results:
        assert r["compile"] == {"ok": True}, r["compile"]
        assert r["validate"] == {"ok": True}, (r["pipeline"], r["validate"])
        assert r["validateWithWorkflowDefaults"] == {"ok": True}, r["pipeline"]


def test_each_task_gets_its_retries_from_kfp_and_onerror_from_kfps_defaults(tmp_path):
    """KFP compiles set_retry into one shared template with the limit and backoff as
    inputs and no retryPolicy (container.go:582-587, :667-685); KFP's shipped
    defaults then make it OnError: a pod that ends Failed (exit 143) is not retried
    without `make kfp-retry-policy` (docs/gke.md), which is what argo_retry models."""
    (r,) = kfp_compile(tmp_path, comp.COMPILED_DIR / comp.gke_yaml("spot", engine="job"))
    shared = {t["name"]: t for t in r["templates"]}["retry-system-container-impl"]
    assert "retryPolicy" not in shared["retryStrategy"]
    assert shared["retryStrategy"]["limit"] == "{{inputs.parameters.retry-max-count}}"
    assert shared["effectiveRetryPolicyActual"] == "OnError"
    workflow = yaml.safe_load(Path(r["output"]).read_text())
    args = {}
    for template in workflow["spec"]["templates"]:
        for task in (template.get("dag") or {}).get("tasks") or []:
            if task["name"] == "train-job":
                args = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
    assert args["retry-max-count"] == "5" and args["retry-backoff-duration"] == "30"


@pytest.mark.parametrize("build", [exit_shapes.two_exits, exit_shapes.task_after_exit])
def test_what_the_exit_task_guard_refuses_the_real_compiler_mishandles(tmp_path, build):
    path = tmp_path / f"{build.__name__}.yaml"
    compiler.Compiler().compile(dsl.pipeline(name="exits")(build), str(path))
    spec, _ = templates.load_template(path)
    with pytest.raises(guards.GuardError) as refused:
        guards.check_exit_tasks(spec)
    (r,) = kfp_compile(tmp_path, path, params={"checkpoint_dir": "gs://b/c"})
    assert r["compile"] == {"ok": True}
    if build is exit_shapes.two_exits:
        # Compiled and valid, but one exit task is never hooked: it would never run.
        assert r["validate"] == {"ok": True}
        hooked = [
            task["hooks"]["exit"]
            for t in r["templates"]
            for task in t.get("dagTasks") or []
            if task.get("hooks")
        ]
        assert hooked == ["exit-hook-root-training-status-3"]
        assert {t["name"] for t in r["templates"]} >= {"exit-hook-root-training-status-2"}
        assert "'training-status-2' would never run" in str(refused.value)
    else:
        # Argo refuses it, with the words the guard quotes.
        assert not r["validate"]["ok"]
        assert "sorting failed: invalid dependency training-status-2" in r["validate"]["error"]
        assert "sorting failed: invalid dependency training-status-2" in str(refused.value)
