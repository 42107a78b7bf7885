"""Vertex output dirs: a run gets AIP_* dirs (and so TensorBoard) without being asked."""

from __future__ import annotations

import re

from google.auth.credentials import AnonymousCredentials

from spottrain.pipelines import compile as comp
from spottrain.pipelines import submit

VERTEX = comp.COMPILED_DIR / comp.VERTEX_YAML
PARAMS = {"data_src": "gs://my-bucket/d", "checkpoint_dir": "gs://my-bucket/c"}


def _job(**params):
    return submit.vertex_job(
        VERTEX,
        {**PARAMS, **params},
        project="p",
        region="us-central1",
        bucket="gs://my-bucket/runs",
        credentials=AnonymousCredentials(),
    )


def test_empty_base_output_directory_becomes_a_folder_of_this_run_under_the_root():
    job = _job()
    runtime = job._gca_resource.runtime_config
    out = runtime.parameter_values["base_output_directory"]
    assert re.fullmatch(
        r"gs://my-bucket/runs/pipeline-root/spottrain-\d{8}-\d{6}-[0-9a-f]{6}/train", out
    )
    # The folder is named after the job id the request carries.
    assert job.job_id in out
    assert re.fullmatch(r"[a-z][-a-z0-9]{0,127}", job.job_id)
    assert _job().job_id != job.job_id


def test_a_given_base_output_directory_is_kept():
    job = _job(base_output_directory="gs://mine/out")
    runtime = job._gca_resource.runtime_config
    assert runtime.parameter_values["base_output_directory"] == "gs://mine/out"
