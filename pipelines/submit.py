"""Uploading and running compiled pipelines on a KFP dashboard or on Vertex AI.

Each function builds the real client request offline (after the pre-flight
guards) and makes the network call as its last step, so everything up to that
call is testable without a server.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spottrain.pipelines import guards
from spottrain.version import __version__

log = logging.getLogger(__name__)


class SubmitError(guards.GuardError):
    """A missing or malformed submit argument; the message names it."""


def parse_params(pairs: Sequence[str]) -> dict[str, str]:
    """Parses ``name=value`` words from the command line (values stay strings)."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SubmitError(f"pipeline parameter {pair!r} is not name=value")
        params[name] = value
    return params


def kfp_client(host: str, namespace: str = "kubeflow", **kwargs: Any):
    """A ``kfp.Client`` for a dashboard URL.

    The namespace is passed so construction needs no health-check round trip;
    credentials come from the environment as usual (``kfp.Client`` kwargs).
    """
    if not host:
        raise SubmitError("HOST is empty: pass the KFP dashboard URL, e.g. HOST=https://...")
    import kfp

    return kfp.Client(host=host, namespace=namespace, **kwargs)


def default_version_name() -> str:
    """A unique version name: the package version and a UTC timestamp."""
    return f"{__version__}-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}"


def pipeline_name(package: str | Path) -> str:
    """The pipeline name a compiled template carries (``pipelineInfo.name``)."""
    spec, _ = guards.load_template(package)
    return str(spec.get("pipelineInfo", {}).get("name", ""))


def upload(
    client, package: str | Path, name: str, version: str = "", description: str = ""
) -> dict[str, str]:
    """Uploads a compiled pipeline: a new pipeline, or a new version of an existing one.

    Returns:
        ``pipeline_id`` and, for a new version, ``version_id``.
    """
    if not name:
        raise SubmitError("NAME is empty: pass the pipeline name shown in the dashboard")
    guards.load_template(package)  # refuse anything that is not a compiled pipeline
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        log.info("creating pipeline %r from %s", name, package)
        created = client.upload_pipeline(
            pipeline_package_path=str(package), pipeline_name=name, description=description
        )
        return {"pipeline_id": created.pipeline_id}
    version = version or default_version_name()
    log.info("adding version %r to pipeline %r (%s)", version, name, pipeline_id)
    created = client.upload_pipeline_version(
        pipeline_package_path=str(package),
        pipeline_version_name=version,
        pipeline_id=pipeline_id,
        description=description,
    )
    return {"pipeline_id": pipeline_id, "version_id": created.pipeline_version_id}


def run(
    client,
    package: str | Path,
    params: Mapping[str, Any],
    *,
    experiment: str = "spottrain",
    run_name: str = "",
) -> str:
    """Creates a run of a compiled pipeline after the pre-flight guards; returns its id."""
    arguments = guards.preflight(package, params)
    result = client.create_run_from_pipeline_package(
        pipeline_file=str(package),
        arguments=arguments,
        run_name=run_name or f"spottrain {default_version_name()}",
        experiment_name=experiment,
        enable_caching=False,
    )
    return result.run_id


def vertex_job(
    template: str | Path,
    params: Mapping[str, Any],
    *,
    project: str,
    region: str,
    bucket: str,
    display_name: str = "spottrain",
    credentials=None,
):
    """Builds the ``aiplatform.PipelineJob`` for a compiled Vertex template.

    Args:
        template: The single-document Vertex YAML (no kfp-kubernetes section).
        params: Parameter values.
        project: Google Cloud project id.
        region: Vertex AI region, e.g. ``us-central1``.
        bucket: Bucket (``name`` or ``gs://name[/prefix]``) for the pipeline root.
        display_name: Job display name.
        credentials: Google credentials; default: application default credentials.
    """
    for flag, value in (("PROJECT", project), ("REGION", region), ("BUCKET", bucket)):
        if not value:
            raise SubmitError(f"{flag} is empty: pass {flag}=... (project, region, gs bucket)")
    spec, platform = guards.load_template(template)
    if platform is not None:
        raise SubmitError(
            f"{template} has a kfp-kubernetes platform section Vertex cannot load: "
            "submit the Vertex variant (spottrain_vertex.yaml)"
        )
    arguments = guards.preflight(template, params)
    root = bucket if bucket.startswith("gs://") else f"gs://{bucket}"
    pipeline_root = f"{root.rstrip('/')}/pipeline-root"
    job_id = (
        f"{display_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    )
    if "base_output_directory" in guards.parameter_types(spec) and not arguments.get(
        "base_output_directory"
    ):
        # GCPC drops an empty base_output_directory from the CustomJob
        # (container/v1/gcp_launcher/job_remote_runner.py L129-132,
        # utils/json_util.py L55-60), and Vertex sets AIP_MODEL_DIR,
        # AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR only when it is set
        # (google/cloud/aiplatform/v1/custom_job.proto, base_output_directory):
        # without it the job gets no TensorBoard dir and a `tensorboard`
        # resource has nothing to upload. One folder per run under the root.
        arguments["base_output_directory"] = f"{pipeline_root}/{job_id}/train"
    from google.cloud import aiplatform

    return aiplatform.PipelineJob(
        display_name=display_name,
        template_path=str(template),
        job_id=job_id,
        pipeline_root=pipeline_root,
        parameter_values=arguments,
        project=project,
        location=region,
        credentials=credentials,
        enable_caching=False,
    )


def submit_vertex(job, service_account: str = "") -> str:
    """Submits a built ``PipelineJob`` (the network call); returns its resource name."""
    job.submit(service_account=service_account or None)
    return job.resource_name
