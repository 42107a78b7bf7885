"""A Vertex custom job per rung of the capacity ladder (spottrain/runtime/vertex_ladder.py),
built from the committed Vertex pipeline's own worker pools and checked by the Vertex
API's own message type (google-cloud-aiplatform's CustomJob: unknown fields, enums and
durations are refused there, as the client the launcher uses refuses them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from google.cloud import aiplatform_v1

from spottrain.ladder import LadderError, Rung, parse
from spottrain.runtime import vertex_job as vj
from spottrain.runtime.vertex_ladder import rung_parent, rung_payload

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def payload() -> dict:
    spec = yaml.safe_load((REPO / "pipelines/compiled/spottrain_vertex.yaml").read_text())
    params = spec["components"]["comp-train"]["inputDefinitions"]["parameters"]
    pools = _whole(params["worker_pool_specs"]["defaultValue"])
    return {"display_name": "spottrain-train", "job_spec": {"worker_pool_specs": pools}}


def _whole(value):
    """The YAML's numbers are Struct doubles (1.0); the KFP backend's driver hands the
    launcher JSON written by protojson, which writes an integral double as ``1``
    (protobuf-go internal/encoding/json/encode.go, ``appendFloat``: ``'g'`` format)."""
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


LADDER = (
    '[{"capacity": "spot", "patience": "30m"},'
    ' {"capacity": "flex-start", "patience": "2h", "machine_type": "g2-standard-8",'
    '  "gpu_type": "nvidia-l4", "location": "us-east4"},'
    ' {"capacity": "reservation"}, {"capacity": "on-demand"}]'
)


def test_each_rung_is_a_custom_job_the_vertex_api_takes(payload, monkeypatch):
    monkeypatch.delenv("VERTEX_AI_PIPELINES_RUN_LABELS", raising=False)
    ladder = parse(LADDER, Rung("spot", "n1-standard-8", "NVIDIA_TESLA_T4", 1, 3))
    jobs = []
    for n, rung in enumerate(ladder.rungs, 1):
        strategy = {"spot": "SPOT", "flex-start": "FLEX_START"}.get(rung.capacity, "STANDARD")
        job = vj.job_for(rung_payload(payload, rung, reservation="res-a"), strategy, n)
        jobs.append(aiplatform_v1.CustomJob(job))  # the Vertex API's own type
    spot, flex, reserved, on_demand = (j.job_spec for j in jobs)
    assert [j.scheduling.strategy.name for j in (spot, flex, reserved, on_demand)] == [
        "SPOT", "FLEX_START", "STANDARD", "STANDARD"
    ]  # fmt: skip
    assert flex.scheduling.max_wait_duration.total_seconds() == 7200
    assert not spot.scheduling.max_wait_duration  # only FLEX_START waits
    chief, workers = flex.worker_pool_specs
    assert (chief.replica_count, workers.replica_count) == (1, 2)  # 3 workers
    assert chief.machine_spec.machine_type == workers.machine_spec.machine_type == "g2-standard-8"
    assert chief.machine_spec.accelerator_type.name == "NVIDIA_L4"  # GKE's name mapped
    assert spot.worker_pool_specs[1].machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    affinity = reserved.worker_pool_specs[0].machine_spec.reservation_affinity
    assert affinity.reservation_affinity_type.name == "SPECIFIC_RESERVATION"
    assert (
        list(affinity.values) == ["res-a"]
        and not on_demand.worker_pool_specs[0].machine_spec.reservation_affinity.values
    )
    # The rung's region is the job's.
    assert (
        rung_parent("projects/p/locations/us-central1", ladder[1])
        == "projects/p/locations/us-east4"
    )
    assert (
        rung_parent("projects/p/locations/us-central1", ladder[0])
        == "projects/p/locations/us-central1"
    )


def test_one_worker_is_one_pool_and_a_nameless_reservation_is_refused(payload):
    one = rung_payload(payload, Rung("spot", "n1-standard-8", "NVIDIA_TESLA_T4", 1, 1))
    assert [p["replica_count"] for p in one["job_spec"]["worker_pool_specs"]] == [1]
    with pytest.raises(LadderError, match="name it"):
        rung_payload(payload, Rung("reservation", "n1-standard-8", "NVIDIA_TESLA_T4", 1, 2))


def test_the_check_can_fail():
    """A misspelt field or an unknown strategy is refused by the API's own type."""
    with pytest.raises((ValueError, KeyError)):
        aiplatform_v1.CustomJob({"display_name": "x", "job_spec": {"schedulng": {}}})
    with pytest.raises((ValueError, KeyError, TypeError)):
        aiplatform_v1.CustomJob(
            {"display_name": "x", "job_spec": {"scheduling": {"strategy": "CHEAP"}}}
        )
