"""Vertex custom job settings for an enterprise network: VPC peering or a PSC interface,
CMEK, a specific reservation. Compiled, then turned into the CreateCustomJob request
by GCPC's own launcher code (``json_util.recursive_remove_empty``,
``insert_system_labels_into_payload``, ``create_custom_job_with_client``) and the
real ``aiplatform_v1`` request type, offline: no Vertex endpoint is called.
"""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1
from vertex_helpers import compile_vertex as _compile
from vertex_helpers import request as _request

from spottrain.pipelines.vertex import VertexConfigError

KEY = "projects/p/locations/us-central1/keyRings/ring/cryptoKeys/key"


RESERVATION = "projects/p/zones/us-central1-a/reservations/a100s"


ATTACHMENT = "projects/p/regions/us-central1/networkAttachments/att-1"


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
