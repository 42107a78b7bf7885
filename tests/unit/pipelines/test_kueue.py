"""``make gke-kueue``: Kueue's queue for the JobSet gangs, from the capacity ladder.

Checked against Kueue v0.17.0's own CRD schemas (``tests/kueue_crds.py``); the
objects applied to a real API server with Kueue's CRDs are in tests/system/gke.
"""

from __future__ import annotations

import jsonschema
import pytest
import yaml
from kueue_crds import CRDS, WHY_NOT, check, schema

from spottrain.ladder import Ladder, LadderError, Rung, parse
from spottrain.pipelines import kueue
from spottrain.placement import PlacementError

T4 = Rung("spot", "", "nvidia-tesla-t4", 1, 2)
needs_crds = pytest.mark.skipif(not CRDS.is_dir(), reason=WHY_NOT)


def ladder(*kinds: str) -> Ladder:
    return Ladder(tuple(Rung(k, "", "nvidia-tesla-t4", 1, 2) for k in kinds))


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_spot_then_on_demand_is_two_flavors_in_order_and_a_local_queue():
    objects = by_kind(kueue.from_ladder(ladder("spot", "on-demand"), namespace="kubeflow"))
    spot, on_demand = objects["ResourceFlavor"]
    assert spot["spec"]["nodeLabels"] == {"cloud.google.com/gke-spot": "true"}
    assert spot["spec"]["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
    assert on_demand["spec"] == {}
    (cq,) = objects["ClusterQueue"]
    (group,) = cq["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == ["spot", "on-demand"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert cq["spec"]["namespaceSelector"] == {}
    assert "admissionChecksStrategy" not in cq["spec"]
    (lq,) = objects["LocalQueue"]
    assert lq["metadata"] == {"name": "spottrain", "namespace": "kubeflow"}
    assert lq["spec"] == {"clusterQueue": "spottrain"}
    assert "AdmissionCheck" not in objects


def test_a_flex_start_rung_is_provisioned_by_gkes_queued_provisioning_on_its_flavor_only():
    objects = by_kind(
        kueue.from_ladder(ladder("spot", "flex-start", "on-demand"), namespace="team-a")
    )
    (cq,) = objects["ClusterQueue"]
    assert cq["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": kueue.CHECK_NAME, "onFlavors": ["flex-start"]}]
    }
    (config,) = objects["ProvisioningRequestConfig"]
    assert config["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    (check_,) = objects["AdmissionCheck"]
    assert check_["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check_["spec"]["parameters"]["name"] == config["metadata"]["name"]


@needs_crds
@pytest.mark.parametrize(
    "kinds", [("spot", "on-demand"), ("spot", "flex-start", "on-demand"), ("on-demand",)]
)
def test_every_object_passes_kueues_own_schema(kinds):
    objects = kueue.from_ladder(ladder(*kinds), namespace="kubeflow", gpu_quota=16)
    for obj in objects:
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        check(obj)


@needs_crds
def test_the_schema_can_refuse():
    (cq,) = by_kind(kueue.from_ladder(ladder("spot"), namespace="kubeflow"))["ClusterQueue"]
    cq["spec"]["queueingStrategy"] = "Lottery"
    with pytest.raises(jsonschema.ValidationError):
        check(cq)
    # An unknown field is pruned by the API server, not refused by the schema: that
    # v1beta2 has admissionChecksStrategy and not v1beta1's plain list is read here.
    fields = schema("ClusterQueue")["properties"]["spec"]["properties"]
    assert "admissionChecksStrategy" in fields and "admissionChecks" not in fields
    assert (
        "admissionChecks" in schema("ClusterQueue", "v1beta1")["properties"]["spec"]["properties"]
    )


@pytest.mark.parametrize(
    "text, word",
    [
        ('[{"capacity": "reservation"}, {"capacity": "on-demand"}]', "needs a ComputeClass"),
        ('[{"capacity": "spot", "patience": "30m"}, {"capacity": "on-demand"}]', "patience"),
        ('[{"capacity": "spot", "location": "us-east1"}]', "place of its own"),
        ('[{"capacity": "spot"}, {"capacity": "on-demand", "gpu_count": 2}]', "equal GPUs"),
        (
            '[{"capacity": "spot", "machine_type": "n1-standard-8"}, '
            '{"capacity": "spot", "machine_type": "n1-standard-16"}]',
            "a second spot rung",
        ),
    ],
)
def test_a_ladder_a_queue_cannot_express_is_one_line(text, word):
    with pytest.raises(LadderError, match=word) as err:
        kueue.from_ladder(parse(text, T4), namespace="kubeflow")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kw, word",
    [({"namespace": "Kube_Flow"}, "namespace"), ({"gpu_quota": 0}, "gpu quota"),
     ({"local_queue": "a" * 64}, "local queue")],
)  # fmt: skip
def test_a_bad_name_or_quota_is_one_line(kw, word):
    with pytest.raises(PlacementError, match=word):
        kueue.from_ladder(ladder("spot"), **{"namespace": "kubeflow", **kw})


def test_the_manifests_docs_gke_shows_are_what_make_gke_kueue_prints():
    import yaml

    page = (CRDS.parents[3] / "docs" / "gke.md").read_text()
    section = page.split("### On a cluster with Kueue", 1)[1]
    shown = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    printed = kueue.from_ladder(parse('[{"capacity": "spot"}, {"capacity": "on-demand"}]', T4),
                                namespace="kubeflow")  # fmt: skip
    assert list(yaml.safe_load_all(shown)) == printed


def test_a_quota_smaller_than_one_gang_is_refused_and_the_default_fits_the_gang(capsys):
    """Kueue admits a gang whole: make gke-kueue's quota under its GPUs would never admit it.

    (kueue.from_ladder still builds one: the launcher's "never fits" is tested on it.)
    """
    from spottrain.pipelines import __main__ as cli

    gang = ["kueue", "--workers", "8", "--gpus", "2"]
    assert cli.main([*gang, "--gpu-quota", "15"]) == cli.ERROR_EXIT
    said = capsys.readouterr().err
    assert "--gpu-quota 15 is less than one gang's 16 GPUs" in said and said.count("\n") == 1
    for argv, quota in (([*gang, "--gpu-quota", "16"], "16"), (gang, "16"), (["kueue"], "8")):
        assert cli.main(argv) == 0
        quotas = {
            r["nominalQuota"]
            for doc in yaml.safe_load_all(capsys.readouterr().out) if doc["kind"] == "ClusterQueue"
            for f in doc["spec"]["resourceGroups"][0]["flavors"] for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        }  # fmt: skip
        assert quotas == {quota}, argv
