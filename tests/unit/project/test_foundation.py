"""Packaging, image and tooling invariants users rely on.

The in-process tests; those that start processes are in
tests/integration/project/test_foundation.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_dockerfile_tf_matches_setup_py():
    setup = (REPO / "setup.py").read_text()
    lo, hi = re.search(r'TF_RANGE = ">=([\d.]+),<([\d.]+)"', setup).groups()
    base = re.search(
        r"^FROM tensorflow/tensorflow:([\d.]+)-gpu$", (REPO / "Dockerfile").read_text(), re.M
    )
    assert base, "Dockerfile must start from a tensorflow/tensorflow:<ver>-gpu image"

    def v(s):
        return tuple(int(x) for x in s.split("."))

    assert v(lo) <= v(base.group(1)) < v(hi), (base.group(1), lo, hi)
    # The image's entry point is a Job pod's command: tini, then the trainer's entry point.
    from spottrain.runtime.train_job.jobset import TRAINER_COMMAND

    entrypoint = json.dumps(list(TRAINER_COMMAND))
    assert f"ENTRYPOINT {entrypoint}" in (REPO / "Dockerfile").read_text()


def _own_pipeline_snippet(name: str) -> str:
    text = (REPO / "docs" / "own-pipeline.md").read_text()
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if f"def {name}(" in b]
    return snippet


def test_docs_pipeline_snippet_compiles(tmp_path, monkeypatch):
    """docs/own-pipeline.md's in-pod example works as written."""
    from kfp import compiler

    text = _own_pipeline_snippet("my_pipeline")
    snippet = text
    monkeypatch.chdir(tmp_path)  # it writes my_pipeline.yaml where it runs
    scope: dict = {}
    exec(compile(snippet, "own-pipeline.md", "exec", dont_inherit=True), scope)
    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(scope["my_pipeline"], str(out))
    compiled = out.read_text()
    assert "comp-train" in compiled and "comp-gcs-copy" in compiled
    assert "maxRetryCount: 5" in compiled
    assert "backoffMaxDuration: 604800s" in compiled  # a week, not the SDK's hour
    assert (tmp_path / "my_pipeline.yaml").read_text() == compiled
    assert f"image: {scope['IMAGE']}" in compiled and "us-docker.pkg.dev/spottrain" not in compiled


def test_docs_job_engine_snippet_places_its_tasks_as_it_says(tmp_path):
    """docs/own-pipeline.md's JobSet-engine example: spot GPUs for the pods, on-demand CPU
    for the launcher, the copy tolerating spot; read from the compiled platform spec."""
    import yaml
    from kfp import compiler

    scope: dict = {}
    snippet = _own_pipeline_snippet("my_job_pipeline")
    exec(compile(snippet, "own-pipeline.md", "exec", dont_inherit=True), scope)
    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(scope["my_job_pipeline"], str(out))
    pipeline_spec, platform = yaml.safe_load_all(out.read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    spot = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"}  # fmt: skip
    assert spot in executors["exec-gcs-copy"]["tolerations"]
    assert not executors.get("exec-train-job", {}).get("tolerations"), "launcher on spot"
    inputs = pipeline_spec["root"]["dag"]["tasks"]["train-job"]["inputs"]["parameters"]
    placed = {k: inputs[k]["runtimeValue"]["constant"] for k in ("pool", "gpu_type", "gpus")}
    assert placed == {"pool": "spot", "gpu_type": "nvidia-l4", "gpus": 1}
    launcher = pipeline_spec["deploymentSpec"]["executors"]["exec-train-job"]["container"]
    assert "accelerator" not in launcher.get("resources", {}), "the launcher asks for a GPU"
    assert pipeline_spec["root"]["dag"]["tasks"]["train-job"]["retryPolicy"]["maxRetryCount"] == 5
    # ... and passes the pre-flight's retry-window check (it failed the docs' own dry run).
    from spottrain.pipelines import guards

    guards.check_retry_windows(pipeline_spec, platform)
    assert inputs["finish_by"]["componentInputParameter"] == "finish_by"
