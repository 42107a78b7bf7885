"""Vertex custom job settings for an enterprise network: VPC peering or a PSC interface,
CMEK, a specific reservation. Compiled, then turned into the CreateCustomJob request
by GCPC's own launcher code (``json_util.recursive_remove_empty``,
``insert_system_labels_into_payload``, ``create_custom_job_with_client``) and the
real ``aiplatform_v1`` request type, offline: no Vertex endpoint is called.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from google.cloud import aiplatform_v1
from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

from spottrain.pipelines import templates
from spottrain.pipelines.vertex import VertexConfigError, VertexTraining

KEY = "projects/p/locations/us-central1/keyRings/ring/cryptoKeys/key"
RESERVATION = "projects/p/zones/us-central1-a/reservations/a100s"
ATTACHMENT = "projects/p/regions/us-central1/networkAttachments/att-1"


def _compile(tmp_path, *flags: str) -> dict:
    out = tmp_path / "v.yaml"
    cmd = [sys.executable, "-m", "spottrain.pipelines", "compile", "--target", "vertex",
           "--out", str(out), *flags]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return next(d for d in yaml.safe_load_all(out.read_text()) if d)


def _payload(spec: dict) -> str:
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
        return value if isinstance(value, str) else json.dumps(_whole(value))

    filled = re.sub(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", fill, template)
    return filled.replace("{{$.pipeline_persistent_resource_id}}", "")


def _whole(value):
    """Whole floats as integers: the YAML gives the Struct's numbers as 100.0, which
    proto int fields refuse; the backend fills the placeholder from its own JSON form,
    where we take a whole number to have no fraction (our reading, not verified)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


class _JobClient:
    """Where GCPC calls ``JobServiceClient.create_custom_job``: builds the same
    ``CreateCustomJobRequest`` the client builds from its arguments (unknown or
    mistyped fields raise), and answers with a job name."""

    def __init__(self):
        self.request = None

    def create_custom_job(self, parent, custom_job):
        self.request = aiplatform_v1.CreateCustomJobRequest(parent=parent, custom_job=custom_job)
        return aiplatform_v1.CustomJob(name=f"{parent}/customJobs/1")


def _request(spec: dict, tmp_path) -> aiplatform_v1.CreateCustomJobRequest:
    runner = job_remote_runner.JobRemoteRunner.__new__(job_remote_runner.JobRemoteRunner)
    runner.job_type, runner.project, runner.location = "CustomJob", "p", "us-central1"
    runner.gcp_resources = str(tmp_path / "gcp_resources")
    runner.job_uri_prefix = "https://us-central1-aiplatform.googleapis.com/v1/"
    runner.job_client = client = _JobClient()
    payload = remote_runner.insert_system_labels_into_payload(_payload(spec))
    runner.create_job(remote_runner.create_custom_job_with_client, payload)
    return client.request


def test_peering_cmek_and_a_reservation_reach_the_custom_job_request(tmp_path):
    spec = _compile(
        tmp_path, "--strategy", "STANDARD", "--replica-count", "2",
        "--network", "projects/123456/global/networks/corp-vpc",
        "--reserved-ip-range", "vertex-range", "--encryption-key", KEY,
        "--reservation", RESERVATION,
    )  # fmt: skip
    job = _request(spec, tmp_path).custom_job
    assert job.job_spec.network == "projects/123456/global/networks/corp-vpc"
    assert list(job.job_spec.reserved_ip_ranges) == ["vertex-range"]
    assert job.encryption_spec.kms_key_name == KEY
    assert job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.STANDARD
    for pool in job.job_spec.worker_pool_specs:
        affinity = pool.machine_spec.reservation_affinity
        assert affinity.reservation_affinity_type == affinity.Type.SPECIFIC_RESERVATION
        assert affinity.key == "compute.googleapis.com/reservation-name"
        assert list(affinity.values) == [RESERVATION]
    assert len(job.job_spec.worker_pool_specs) == 2


def test_a_psc_interface_reaches_the_request_and_the_default_job_has_none(tmp_path):
    job = _request(_compile(tmp_path, "--network-attachment", ATTACHMENT), tmp_path).custom_job
    assert job.job_spec.psc_interface_config.network_attachment == ATTACHMENT
    assert not job.job_spec.network
    plain = _request(_compile(tmp_path), tmp_path).custom_job
    assert not plain.job_spec.network and not plain.encryption_spec.kms_key_name
    assert not plain.job_spec.psc_interface_config.network_attachment
    assert job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (dict(network="projects/my-project/global/networks/vpc"), "projects/123456/global"),
        (dict(network="projects/1/global/networks/v", network_attachment=ATTACHMENT), "not both"),
        (dict(reserved_ip_ranges=("r",)), "set network too"),
        (dict(encryption_key="my-key"), "keyRings/RING/cryptoKeys/KEY"),
        (dict(reservation="a100s", strategy="STANDARD"), "zones/ZONE/reservations/NAME"),
        (dict(reservation=RESERVATION), "Spot VMs cannot consume reservations"),
        (dict(network_attachment="att-1"), "networkAttachments/NAME"),
    ],
)
def test_settings_vertex_or_gcpc_would_refuse_are_one_line(settings, named):
    with pytest.raises(VertexConfigError, match=re.escape(named)):
        VertexTraining(**settings)


def test_a_key_in_another_region_is_refused_at_submit(tmp_path):
    from spottrain.pipelines import vertex

    spec = _compile(tmp_path, "--encryption-key", KEY)
    vertex.check_key_region(spec, "us-central1")  # the key's own region: fine
    with pytest.raises(
        VertexConfigError, match="is in 'us-central1', the job runs in 'europe-west4'"
    ):
        vertex.check_key_region(spec, "europe-west4")
    vertex.check_key_region(_compile(tmp_path), "europe-west4")  # no key: nothing to check


def test_every_replica_tells_the_ledger_its_capacity_kind(tmp_path):
    for flags, kind in (
        ((), "spot"),
        (("--strategy", "STANDARD"), "standard"),
        (("--strategy", "STANDARD", "--reservation", RESERVATION), "reservation"),
    ):
        job = _request(_compile(tmp_path, *flags), tmp_path).custom_job
        for pool in job.job_spec.worker_pool_specs:
            env = {e.name: e.value for e in pool.container_spec.env}
            assert env["SPOTTRAIN_CAPACITY"] == kind, (flags, env)
