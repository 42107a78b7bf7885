"""Vertex custom job settings for an enterprise network: VPC peering or a PSC interface,
CMEK, a specific reservation. Compiled, then turned into the CreateCustomJob request by
GCPC's own launcher code (``json_util.recursive_remove_empty``,
``insert_system_labels_into_payload``, ``create_custom_job_with_client``) and the real
``aiplatform_v1`` request type, offline: no Vertex endpoint is called.

The in-process tests; those that start processes are in
tests/integration/runtime/test_vertex_enterprise.py.
"""

from __future__ import annotations

import re

import pytest

from spottrain.pipelines.vertex import VertexConfigError, VertexTraining

RESERVATION = "projects/p/zones/us-central1-a/reservations/a100s"


ATTACHMENT = "projects/p/regions/us-central1/networkAttachments/att-1"


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
