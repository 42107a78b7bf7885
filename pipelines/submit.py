"""Uploading and running compiled pipelines on a KFP dashboard or on Vertex AI.

Each function builds the real client request offline (after the pre-flight
guards) and makes the network call as its last step, so everything up to that
call is testable without a server.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import re
import secrets
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spottrain.pipelines import guards, templates
from spottrain.placement import PlacementError
from spottrain.runtime import vertex_regions
from spottrain.version import __version__

log = logging.getLogger(__name__)


class SubmitError(guards.GuardError):
    """A missing or malformed submit argument; the message names it."""


# Exit codes of a request that could not be made, from sysexits.h. Neither is 1
# (which KFP and Vertex retry when this CLI runs as a task) nor >= 128 (retryable in
# this project's exit-code table) nor 2 (a usage error: the arguments are fine):
# EX_UNAVAILABLE: the service did not answer or refused the request. Operational: the
# same command may work later, so a script may retry on 69 and on nothing else.
UNAVAILABLE_EXIT = 69
# EX_CONFIG: no Google credentials on this machine. Retrying cannot help; run
# `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS).
NO_CREDENTIALS_EXIT = 78


class ServiceError(Exception):
    """A request that could not be made; one line, and the CLI's exit code."""

    def __init__(self, message: str, exit_code: int = UNAVAILABLE_EXIT):
        super().__init__(message)
        self.exit_code = exit_code


_REGION = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")  # us-central1, northamerica-northeast2
# Project ids: 6-30 of [a-z0-9-], a letter first, no trailing hyphen; or domain-scoped.
_PROJECT = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_BUCKET_PART = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class _BelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def check_reachable(url: str, what: str, timeout: float = 5.0) -> None:
    """Fails in seconds, in one line, when ``url``'s host (or the proxy to it) does not answer.

    The clients would find out too, but slowly: the Vertex AI SDK's requests retry
    for minutes (90 s measured to a name that does not resolve, ending in "HTTP
    503"), and a connection to a host that drops packets waits for the OS's TCP
    timeout on each of urllib3's retries. Only the TCP connection is tried here;
    what the service answers is still the client's to report.

    Raises:
        ServiceError: exit ``UNAVAILABLE_EXIT``.
    """
    import socket
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url if "://" in url else f"https://{url}")
    host = parts.hostname or ""
    port = parts.port or (80 if parts.scheme == "http" else 443)
    proxy = urllib.request.getproxies().get(parts.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(host):
        via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        target, target_port, through = via.hostname or "", via.port or 80, f" (via proxy {proxy})"
    else:
        target, target_port, through = host, port, ""
    try:
        socket.create_connection((target, target_port), timeout=timeout).close()
    except socket.gaierror as e:
        raise ServiceError(
            f"{what} is unreachable: cannot resolve {target}{through} ({e.strerror})"
        ) from None
    except TimeoutError:
        raise ServiceError(
            f"{what} is unreachable: {target}:{target_port}{through} did not answer in "
            f"{timeout:.0f} s"
        ) from None
    except OSError as e:
        raise ServiceError(
            f"{what} is unreachable: {target}:{target_port}{through}: {e.strerror or e}"
        ) from None


def vertex_endpoint(region: str) -> str:
    """The Vertex AI API host of ``region`` (what the SDK's client calls)."""
    return f"https://{region}-aiplatform.googleapis.com"


@contextmanager
def service_errors(what: str) -> Iterator[None]:
    """Turns a failed request to ``what`` into a one-line :class:`ServiceError`.

    Unreachable, refused or HTTP errors (KFP's urllib3 client, Google API errors)
    exit ``UNAVAILABLE_EXIT``; missing Google credentials ``NO_CREDENTIALS_EXIT``.
    """
    # No "Retrying ..." warning per attempt (a filter: kfp's client resets the level).
    urllib3_log = logging.getLogger("urllib3.connectionpool")
    quiet = _BelowError()
    urllib3_log.addFilter(quiet)
    try:
        with warnings.catch_warnings():
            # kfp.Client's version notice, on every construction.
            warnings.filterwarnings("ignore", "This client only works", FutureWarning)
            yield
    except (guards.GuardError, PlacementError):
        raise
    except Exception as err:
        kind = type(err)
        if kind.__name__ == "DefaultCredentialsError":
            raise ServiceError(
                "no Google credentials: run `gcloud auth application-default login` or set "
                "GOOGLE_APPLICATION_CREDENTIALS",
                NO_CREDENTIALS_EXIT,
            ) from None
        if kind.__name__ in ("RetryError", "ServiceUnavailable"):
            # google-api-core: retries that never got through, or gRPC's UNAVAILABLE.
            raise ServiceError(f"{what} is unavailable: {_first_line(err)[:300]}") from None
        if kind.__name__ == "MaxRetryError":  # urllib3: the host did not answer
            reason = getattr(err, "reason", None) or err
            raise ServiceError(f"{what} is unreachable: {_first_line(reason)}") from None
        module = kind.__module__
        if isinstance(err, OSError) or module.startswith(
            ("urllib3", "kfp_server_api", "google.api_core", "google.auth", "requests")
        ):
            status = getattr(err, "status", None) or getattr(err, "code", None)
            reason = getattr(err, "reason", "") if status else ""
            detail = f"HTTP {status} {reason or ''}".strip() if status else _first_line(err)
            raise ServiceError(f"{what} refused the request: {detail}") from None
        raise
    finally:
        urllib3_log.removeFilter(quiet)


def google_credentials():
    """Application default credentials, before the (slow) Vertex AI client is imported.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: none found (``service_errors``
            turns it into exit ``NO_CREDENTIALS_EXIT``).
    """
    import google.auth

    # The project comes from --project: google.auth's "No project ID could be
    # determined" warning (logged when the credentials name none) would be a second line.
    auth_log = logging.getLogger("google.auth._default")
    level = auth_log.level
    auth_log.setLevel(logging.ERROR)
    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    finally:
        auth_log.setLevel(level)
    return credentials


def check_host(host: str) -> None:
    """A KFP dashboard URL: ``http(s)://host[:port][/path]``."""
    from urllib.parse import urlsplit

    if not host:
        raise SubmitError("HOST is empty: pass the KFP dashboard URL, e.g. HOST=https://...")
    try:
        url = urlsplit(host)
        url.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.hostname:
        raise SubmitError(
            f"--host {host!r} is not a KFP dashboard URL: expected http(s)://host[:port][/path]"
        )


def _check_given(project: str, region: str, bucket: str) -> None:
    for flag, value in (("PROJECT", project), ("REGION", region), ("BUCKET", bucket)):
        if not value:
            raise SubmitError(f"{flag} is empty: pass {flag}=... (project, region, gs bucket)")


def check_vertex_args(project: str, region: str, bucket: str) -> None:
    """Project id, region and bucket name as Google Cloud spells them (no request)."""
    _check_given(project, region, bucket)
    if not _PROJECT.match(project):
        raise SubmitError(
            f"PROJECT={project!r} is not a Google Cloud project id (6-30 of a-z, 0-9 and -, "
            "starting with a letter)"
        )
    if not _REGION.match(region):
        raise SubmitError(
            f"REGION={region!r} is not a Google Cloud region: expected e.g. us-central1"
        )
    if problem := vertex_regions.region_problem(region):
        raise SubmitError(f"REGION={region!r} {problem}")
    name = bucket.removeprefix("gs://").split("/", 1)[0]
    problem = bucket_name_problem(name)
    if problem:
        raise SubmitError(f"BUCKET={bucket!r}: bucket name {name!r} {problem}")


# A service account is named by its e-mail (name@project.iam.gserviceaccount.com).
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def check_vertex_params(params: dict, service_account: str) -> None:
    """What Vertex would refuse or cannot read, before any request.

    Raises:
        SubmitError: a service account that is not an e-mail; a ``data_src`` on this
            machine (the copy step runs in Google Cloud: gs://, or its /gcs/ mount).
    """
    for name, value in (("SERVICE_ACCOUNT", service_account),
                        ("service_account", params.get("service_account", ""))):  # fmt: skip
        if value and not _EMAIL.fullmatch(str(value)):
            raise SubmitError(
                f"{name}={value!r} is not a service account e-mail (e.g. "
                "runner@my-project.iam.gserviceaccount.com)"
            )
    src = str(params.get("data_src", ""))
    if src and not src.startswith(("gs://", "/gcs/")):
        raise SubmitError(
            f"data_src={src!r} is not on Cloud Storage: Vertex's copy step runs in Google "
            "Cloud and cannot read this machine; upload it first "
            "(python -m spottrain.copier SRC gs://…)"
        )
    _check_data_bucket(src)


def bucket_name_problem(name: str) -> str:
    """Why ``name`` breaks GCS bucket naming rules, or ``""``.

    https://cloud.google.com/storage/docs/buckets#naming: 3-63 characters (up to 222
    with dots, each dot-separated part at most 63) of lower-case letters, digits,
    ``-``, ``_`` and ``.``, starting and ending with a letter or digit; not an IP
    address; not starting with ``goog`` nor containing ``google``.
    """
    if not 3 <= len(name) <= (222 if "." in name else 63):
        return "must have 3-63 characters (222 with dots)"
    parts = name.split(".")
    if not all(_BUCKET_PART.match(p) and len(p) <= 63 for p in parts):
        return "may only use a-z, 0-9, '-', '_' and '.', and start and end with a letter or digit"
    try:
        ipaddress.ip_address(name)
        return "must not be an IP address"
    except ValueError:
        pass
    if name.startswith("goog") or "google" in name:
        return "must not start with 'goog' or contain 'google'"
    return ""


def parse_params(pairs: Sequence[str]) -> dict[str, str]:
    """Parses ``name=value`` words from the command line (values stay strings)."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SubmitError(f"pipeline parameter {pair!r} is not name=value")
        if name in params and params[name] != value:
            raise SubmitError(
                f"pipeline parameter {name} is given twice ({name}={params[name]} and "
                f"{pair}): pass it once"
            )
        params[name] = value
    return params


def kfp_client(host: str, namespace: str = "kubeflow", **kwargs: Any):
    """A ``kfp.Client`` for a dashboard URL.

    The namespace is passed so construction needs no health-check round trip;
    credentials come from the environment as usual (``kfp.Client`` kwargs).
    """
    check_host(host)
    import kfp

    return kfp.Client(host=host, namespace=namespace, **kwargs)


def default_version_name() -> str:
    """A unique version name: the package version and a UTC timestamp."""
    return f"{__version__}-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}"


def pipeline_name(package: str | Path) -> str:
    """The pipeline name a compiled template carries (``pipelineInfo.name``)."""
    spec, _ = templates.load_template(package)
    return str(spec.get("pipelineInfo", {}).get("name", ""))


def upload(
    client,
    package: str | Path,
    name: str,
    version: str = "",
    description: str = "",
    namespace: str = "",
) -> dict[str, str]:
    """Uploads a compiled pipeline: a new pipeline, or a new version of an existing one.

    ``namespace`` is the profile namespace a multi-user install files the pipeline
    under; a standalone install ignores it (kubeflow/pipelines 2.17.0
    backend/src/apiserver/resource/resource_manager.go:2456-2461, ReplaceNamespace
    returns "" unless multi-user), so it is always sent.

    Returns:
        ``pipeline_id`` and, for a new version, ``version_id``.
    """
    if not name:
        raise SubmitError("NAME is empty: pass the pipeline name shown in the dashboard")
    templates.load_template(package)  # refuse anything that is not a compiled pipeline
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        log.info("creating pipeline %r from %s", name, package)
        created = client.upload_pipeline(
            pipeline_package_path=str(package),
            pipeline_name=name,
            description=description,
            namespace=namespace or None,
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
        enable_caching=RUN_CACHING,
    )
    return result.run_id


# Every run trains again: a cached train task would skip the training it was asked for.
RUN_CACHING = False


def run_request(
    package: str | Path, arguments: Mapping[str, Any], *, experiment: str, run_name: str = ""
) -> dict[str, Any]:
    """The body :func:`run` would POST to KFP's ``/apis/v2beta1/runs``, built offline.

    Built by the kfp client's own code (``Client._create_job_config``, which needs no
    connection for a package, and ``V2beta1Run``), so it is the body ``run`` sends
    but for ``experiment_id``, which the client resolves from the experiment's name
    on the server: given here as that name.
    """
    import kfp
    import kfp_server_api

    config = kfp.Client._create_job_config(
        None, params=dict(arguments), pipeline_package_path=str(package), pipeline_id=None,
        version_id=None, enable_caching=RUN_CACHING, cache_key=None, pipeline_root=None,
    )  # fmt: skip
    body = kfp_server_api.V2beta1Run(
        display_name=run_name or f"spottrain {default_version_name()}",
        pipeline_spec=config.pipeline_spec,
        runtime_config=config.runtime_config,
    )
    out = kfp_server_api.ApiClient().sanitize_for_serialization(body)
    out["experiment"] = experiment
    return out


def check_vertex_template(template: str | Path) -> dict:
    """Refuses a GKE template (Vertex cannot load its kfp-kubernetes section)."""
    spec, platform = templates.load_template(template)
    if platform is not None:
        raise SubmitError(
            f"{template} has a kfp-kubernetes platform section Vertex cannot load: "
            "submit the Vertex variant (spottrain_vertex.yaml)"
        )
    return spec


def check_vertex_fallback(spec: Mapping, template: str | Path) -> None:
    """``--fallback`` asks for the variant whose SPOT jobs fall back: refuse one without.

    That variant runs its train job through :mod:`spottrain.runtime.vertex_job`.
    """
    executors = spec.get("deploymentSpec", {}).get("executors", {}).values()
    for executor in executors:
        container = executor.get("container", {})
        if "spottrain.runtime.vertex_job" in [*container.get("command", []),
                                              *container.get("args", [])]:  # fmt: skip
            return
    raise SubmitError(
        f"--fallback: {str(template)!r} has no fall-back (compile one with --target vertex "
        "--fallback-strategy STANDARD, or leave out --fallback)"
    )


def check_gke_params(params: Mapping[str, Any]) -> None:
    """What a GKE cluster's copy step cannot read, before any request.

    Raises:
        SubmitError: a ``data_src`` on this machine (the copy step runs in a pod of
            the cluster: gs:// only), or a malformed bucket name.
    """
    src = str(params.get("data_src", ""))
    if src and not src.startswith("gs://"):
        raise SubmitError(
            f"data_src={src!r} is not on Cloud Storage: the copy step runs in a pod of the "
            "cluster and cannot read this machine; upload it first "
            "(python -m spottrain.copier SRC gs://…)"
        )
    _check_data_bucket(src)


def _check_data_bucket(src: str) -> None:
    if src.startswith("gs://"):
        name = src[len("gs://") :].split("/", 1)[0]
        if problem := bucket_name_problem(name):
            raise SubmitError(f"data_src={src!r}: bucket name {name!r} {problem}")


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
    _check_given(project, region, bucket)  # their format: check_vertex_args (the CLI)
    spec = check_vertex_template(template)
    arguments = guards.preflight(template, params)
    root = bucket if bucket.startswith("gs://") else f"gs://{bucket}"
    pipeline_root = f"{root.rstrip('/')}/pipeline-root"
    job_id = (
        f"{display_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    )
    if "base_output_directory" in templates.parameter_types(spec) and not arguments.get(
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


def vertex_request(job, service_account: str = "") -> dict[str, Any]:
    """The ``PipelineJob`` :func:`submit_vertex` would create, as JSON (nothing sent)."""
    from google.protobuf import json_format

    resource = type(job._gca_resource).pb(job._gca_resource)
    out = json_format.MessageToDict(resource)
    if service_account:
        out["serviceAccount"] = service_account  # what job.submit(service_account=…) sets
    return out


def submit_vertex(job, service_account: str = "") -> str:
    """Submits a built ``PipelineJob`` (the network call); returns its resource name."""
    job.submit(service_account=service_account or None)
    return job.resource_name
