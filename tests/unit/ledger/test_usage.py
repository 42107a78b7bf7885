"""What each attempt ran on (ledger.usage): node labels, Vertex pools, the env, bad values."""

from __future__ import annotations

import json
import logging

import pytest

from spottrain.ledger import usage
from spottrain.pricing import Usage

# A GKE GPU node as the API shows it
# (labels: https://kubernetes.io/docs/reference/labels-annotations-taints/).
T4_NODE = {
    "metadata": {
        "name": "gke-c-spot-1",
        "labels": {
            "node.kubernetes.io/instance-type": "n1-standard-8",
            "topology.kubernetes.io/zone": "us-central1-a",
            "topology.kubernetes.io/region": "us-central1",
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
            "cloud.google.com/gke-spot": "true",
        },
    }
}
POD_2_GPUS = {
    "spec": {
        "containers": [
            {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "48G"}}},
            {"name": "sidecar", "resources": {"limits": {"memory": "1G"}}},
        ]
    }
}


@pytest.mark.parametrize(
    "node, pod, expected",
    [
        (T4_NODE, POD_2_GPUS, dict(location="us-central1-a", machine_type="n1-standard-8",
                                   gpu_type="nvidia-tesla-t4", gpu_count=2)),
        # A node without a zone label: its region.
        ({"metadata": {"labels": {"topology.kubernetes.io/region": "europe-west4",
                                  "node.kubernetes.io/instance-type": "e2-standard-4"}}},
         POD_2_GPUS, dict(location="europe-west4", machine_type="e2-standard-4", gpu_count=0)),
        # A GPU node, the pod not read: the count is unknown (0), the type known.
        (T4_NODE, None, dict(location="us-central1-a", machine_type="n1-standard-8",
                             gpu_type="nvidia-tesla-t4", gpu_count=0)),
        ({"metadata": {}}, None, dict(gpu_count=0)),
    ],
)  # fmt: skip
def test_a_nodes_labels_and_the_pods_gpu_limit_are_the_attempts_usage(node, pod, expected):
    got = usage.from_node(node, pod, container="trainer")
    assert got == {**expected, "platform": "gce", "usage_from": "node"}


def test_no_node_is_no_usage():
    assert usage.from_node(None) == {}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
          "accelerator_count": 1},
         dict(machine_type="n1-standard-8", gpu_type="NVIDIA_TESLA_T4", gpu_count=1)),
        ({"machineType": "a2-highgpu-2g", "acceleratorType": "NVIDIA_TESLA_A100",
          "acceleratorCount": 2},
         dict(machine_type="a2-highgpu-2g", gpu_type="NVIDIA_TESLA_A100", gpu_count=2)),
        ({"machine_type": "n1-standard-4", "accelerator_type": "ACCELERATOR_TYPE_UNSPECIFIED",
          "accelerator_count": 3}, dict(machine_type="n1-standard-4", gpu_count=0)),
    ],
)  # fmt: skip
def test_a_vertex_pools_machine_spec_and_the_jobs_region_are_its_usage(spec, expected):
    got = usage.from_vertex_pool({"machine_spec": spec}, "us-central1")
    assert got == {**expected, "location": "us-central1", "platform": "vertex",
                   "usage_from": "vertex job"}  # fmt: skip


def test_a_placement_knows_only_its_gpus():
    assert usage.from_placement("nvidia-l4", 1) == {
        "gpu_type": "nvidia-l4", "gpu_count": 1, "platform": "gce", "usage_from": "placement"
    }  # fmt: skip
    assert usage.from_placement("nvidia-tesla-t4", 0)["gpu_count"] == 0
    assert "gpu_type" not in usage.from_placement("nvidia-tesla-t4", 0)


def test_the_env_round_trips_into_the_price_sources_usage():
    value = usage.env_value(
        location="us-central1", machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4",
        gpu_count=1, usage_from="assumed",
    )  # fmt: skip
    rec = usage.from_env({usage.USAGE_ENV: value})
    assert usage.as_usage(rec) == Usage("us-central1", "n1-standard-8", "nvidia-tesla-t4", 1, "gce")
    assert usage.describe(rec) == "n1-standard-8 + 1 nvidia-tesla-t4 in us-central1"
    assert usage.from_env({}) == {}


@pytest.mark.parametrize(
    "raw, named",
    [
        ("not json", "Expecting value"),
        ("[1]", "expected a JSON object"),
        (json.dumps({"gpu_count": -1}), "gpu_count=-1"),
        (json.dumps({"gpu_count": "2"}), "gpu_count='2'"),
        (json.dumps({"platform": "aws"}), "platform='aws'"),
        (json.dumps({"zone": "x"}), "unknown field(s) zone"),
        (json.dumps({"location": 5}), "location=5"),
    ],
)
def test_a_bad_env_value_is_one_line_naming_it_and_the_usage_is_unknown(raw, named, caplog):
    with caplog.at_level(logging.WARNING, logger="spottrain.ledger.usage"):
        assert usage.from_env({usage.USAGE_ENV: raw}) == {}
    (line,) = [r.getMessage() for r in caplog.records]
    assert usage.USAGE_ENV in line and named in line and "\n" not in line


def test_a_bad_gpu_limit_is_not_counted(caplog):
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}}
    assert usage.pod_gpus(pod) == 0
    assert "'lots'" in caplog.text


def test_a_local_run_is_priced_as_an_assumed_machine_and_says_so():
    rec = usage.from_env({usage.USAGE_ENV: usage.ASSUMED_LOCAL})
    assert usage.ASSUMED_LOCAL == usage.env_value(**rec)
    assert usage.describe(rec) == "n1-standard-8 + 1 nvidia-tesla-t4 in us-central1"
    assert rec["usage_from"].startswith("assumed")


def test_a_run_ran_on_its_first_record_that_says_or_nothing():
    rec = usage.from_env({usage.USAGE_ENV: usage.ASSUMED_LOCAL})
    refused = {"outcome": "refused"}  # a run the lease turned away knows no machine
    assert usage.ran_on([refused, rec, usage.from_placement("nvidia-l4", 2)]) == (
        "n1-standard-8 + 1 nvidia-tesla-t4 in us-central1, assumed (a local run has no "
        "machine type)"
    )
    assert usage.ran_on([refused]) == "" and usage.ran_on([]) == ""
