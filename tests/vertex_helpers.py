"""Compiled Vertex pipelines turned into the CreateCustomJob request by GCPC's own
launcher code (``json_util.recursive_remove_empty``, ``insert_system_labels_into_payload``,
``create_custom_job_with_client``) and the real ``aiplatform_v1`` request type, offline.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml
from google.cloud import aiplatform_v1
from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

from spottrain.pipelines import templates


def compile_vertex(tmp_path, *flags: str) -> dict:
    out = tmp_path / "v.yaml"
    cmd = [sys.executable, "-m", "spottrain.pipelines", "compile", "--target", "vertex",
           "--out", str(out), *flags]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return next(d for d in yaml.safe_load_all(out.read_text()) if d)


def filled_payload(spec: dict) -> str:
    """The launcher's --payload with its placeholders filled: a string as is, anything
    else as JSON, an optional input without a value as empty (our reading of KFP's
    placeholder resolution; GCPC's ``recursive_remove_empty`` then drops every empty
    field, so "" inside quotes and ``null`` outside them end the same)."""
    (job,) = templates.custom_jobs(spec)
    args = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["args"]
    template = args[args.index("--payload") + 1]

    def fill(m: re.Match) -> str:
        value = job.get(m.group(1))
        if value is None:
            return "" if template[m.start() - 1] == '"' else "null"
        return value if isinstance(value, str) else json.dumps(whole(value))

    filled = re.sub(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", fill, template)
    return filled.replace("{{$.pipeline_persistent_resource_id}}", "")


def whole(value):
    """Whole floats as integers: the YAML gives the Struct's numbers as 100.0, which
    proto int fields refuse; the backend fills the placeholder from its own JSON form,
    where we take a whole number to have no fraction (our reading, not verified)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [whole(v) for v in value]
    if isinstance(value, dict):
        return {k: whole(v) for k, v in value.items()}
    return value


class JobClient:
    """Where GCPC calls ``JobServiceClient.create_custom_job``: builds the same
    ``CreateCustomJobRequest`` the client builds from its arguments (unknown or
    mistyped fields raise), and answers with a job name."""

    def __init__(self):
        self.request = None

    def create_custom_job(self, parent, custom_job):
        self.request = aiplatform_v1.CreateCustomJobRequest(parent=parent, custom_job=custom_job)
        return aiplatform_v1.CustomJob(name=f"{parent}/customJobs/1")


def gcpc_request(payload: str, tmp_path) -> aiplatform_v1.CreateCustomJobRequest:
    """What GCPC's launcher sends for ``payload`` (a filled ``--payload``)."""
    runner = job_remote_runner.JobRemoteRunner.__new__(job_remote_runner.JobRemoteRunner)
    runner.job_type, runner.project, runner.location = "CustomJob", "p", "us-central1"
    runner.gcp_resources = str(tmp_path / "gcp_resources")
    runner.job_uri_prefix = "https://us-central1-aiplatform.googleapis.com/v1/"
    runner.job_client = client = JobClient()
    payload = remote_runner.insert_system_labels_into_payload(payload)
    runner.create_job(remote_runner.create_custom_job_with_client, payload)
    return client.request


def request(spec: dict, tmp_path) -> aiplatform_v1.CreateCustomJobRequest:
    """What GCPC's launcher sends for the compiled pipeline ``spec``."""
    return gcpc_request(filled_payload(spec), tmp_path)
