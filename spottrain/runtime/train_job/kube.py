"""The JobSet calls the launcher makes, beside the pod calls of :class:`gke_job.kube.Kube`.

JobSets are a CRD, so they go through ``CustomObjectsApi`` (dicts in, dicts out).
A missing JobSet and a cluster without JobSet's CRD both answer 404 there, so
:meth:`JobSetKube.check_api` asks the API discovery first, once.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from spottrain.runtime.gke_job.kube import NAMESPACE_FILE, Kube, KubeError, explain
from spottrain.trainer import preemption

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
INSTALL = "install it with `make gke-jobset EXECUTE=1` (JobSet v0.12.0)"


class JobSetKube(Kube):
    """:class:`Kube` plus the JobSet calls.

    Args:
        batch, core: As for :class:`Kube`.
        custom: A ``kubernetes.client.CustomObjectsApi``.
        namespace: The namespace the JobSets live in.
    """

    def __init__(self, batch, core, custom, namespace: str):
        super().__init__(batch, core, namespace)
        self.custom = custom

    def check_api(self) -> None:
        """Raises a fatal :class:`KubeError` when the cluster serves no JobSet API."""
        try:
            found = self._plain(self.custom.get_api_resources(GROUP, VERSION))
        except ApiException as err:
            if err.status == 404:
                raise KubeError(
                    preemption.FATAL_CONFIG,
                    f"this cluster has no JobSet API ({GROUP}/{VERSION} not served): {INSTALL}",
                ) from None
            raise explain(err, "discover", f"the {GROUP}/{VERSION} API") from err
        if not any(r.get("name") == PLURAL for r in found.get("resources") or []):
            raise KubeError(
                preemption.FATAL_CONFIG,
                f"{GROUP}/{VERSION} serves no {PLURAL} resource: {INSTALL}",
            )

    def read_jobset(self, name: str) -> dict | None:
        """The JobSet, or ``None``."""
        return self._call(
            "get", f"JobSet {name}", self.custom.get_namespaced_custom_object, GROUP, VERSION,
            self.namespace, PLURAL, name, missing_ok=True,
        )  # fmt: skip

    def create_jobset(self, manifest: dict) -> dict:
        """Creates a JobSet; a 409 raises (the caller reads what is there)."""
        name = manifest["metadata"]["name"]
        return self._call(
            "create", f"JobSet {name}", self.custom.create_namespaced_custom_object, GROUP,
            VERSION, self.namespace, PLURAL, manifest,
        )  # fmt: skip

    def resume_jobset(self, name: str) -> None:
        """Sets ``spec.suspend`` false (a merge patch); a missing JobSet is fine."""
        self._call(
            "patch", f"JobSet {name}", self.custom.patch_namespaced_custom_object, GROUP,
            VERSION, self.namespace, PLURAL, name, {"spec": {"suspend": False}},
            missing_ok=True,
        )  # fmt: skip

    def force_delete_pod(self, name: str, uid: str) -> None:
        """Deletes the pod now (grace 0), only if it is still the one seen (``uid``)."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        self._call(
            "delete", f"pod {name}", self.core.delete_namespaced_pod, name, self.namespace,
            grace_period_seconds=0, body=body, missing_ok=True,
        )  # fmt: skip

    def delete_jobset(self, name: str) -> None:
        """Deletes a JobSet, its Jobs and pods first (``Foreground`` propagation).

        While any pod is still ending, the JobSet stays, so a retry never starts a
        second gang beside it.
        """
        self._call(
            "delete", f"JobSet {name}", self.custom.delete_namespaced_custom_object, GROUP,
            VERSION, self.namespace, PLURAL, name, propagation_policy="Foreground",
            missing_ok=True,
        )  # fmt: skip


def from_client(api_client, namespace: str) -> JobSetKube:
    """A :class:`JobSetKube` over one ``kubernetes.client.ApiClient``."""
    from kubernetes import client

    return JobSetKube(
        client.BatchV1Api(api_client),
        client.CoreV1Api(api_client),
        client.CustomObjectsApi(api_client),
        namespace,
    )


def in_cluster() -> JobSetKube:
    """A :class:`JobSetKube` for the pod this runs in (its service account, its namespace)."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException as err:
        raise KubeError(
            preemption.FATAL_CONFIG,
            f"not inside a Kubernetes pod ({err}): the JobSet-engine train runs on KFP on GKE",
        ) from None
    return from_client(None, NAMESPACE_FILE.read_text().strip())
