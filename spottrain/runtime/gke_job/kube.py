"""The few Kubernetes API calls the launcher makes, through the official client.

Objects come back as plain dicts in the API's own (camelCase) shape, whatever the
client returns: ``ApiClient.sanitize_for_serialization`` turns the client's models
into that shape and leaves dicts as they are, so the control loop reads fields the
way the Kubernetes documentation shows them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from spottrain.trainer import preemption

# Where every pod finds its own namespace (a projected service account token volume:
# https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/).
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeError(Exception):
    """An API call failed for good; ``code`` is the launcher's exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def explain(err: ApiException, verb: str, what: str) -> KubeError:
    """One line for an API error, with the exit code it should end the launcher with."""
    status = int(err.status or 0)
    if status == 403:
        return KubeError(
            preemption.FATAL_CONFIG,
            f"Kubernetes refused to {verb} {what} (403 Forbidden): the pipeline's service "
            "account lacks that permission; grant it with `make gke-rbac EXECUTE=1`",
        )
    if status == 409:
        return KubeError(
            preemption.FATAL_CONFIG,
            f"cannot {verb} {what}: an object of that name exists and is not this task's "
            "(409 Conflict); delete it or rename the task",
        )
    if status == 422 or status == 400:
        return KubeError(
            preemption.FATAL_CONFIG,
            f"Kubernetes rejected {what} ({status} {err.reason}): {err.body}",
        )
    return KubeError(
        preemption.UNAVAILABLE,
        f"cannot {verb} {what}: {status or 'no answer'} {err.reason or ''}".rstrip(),
    )


class Kube:
    """The launcher's view of one namespace.

    Args:
        batch: A ``kubernetes.client.BatchV1Api`` (or a stand-in with its methods).
        core: A ``kubernetes.client.CoreV1Api`` (or a stand-in).
        namespace: The namespace the Jobs live in.
    """

    def __init__(self, batch, core, namespace: str):
        from kubernetes.client import ApiClient

        self.batch = batch
        self.core = core
        self.namespace = namespace
        self._plain = ApiClient().sanitize_for_serialization

    def _call(self, verb: str, what: str, func, *args, missing_ok: bool = False, **kwargs):
        try:
            return self._plain(func(*args, **kwargs))
        except ApiException as err:
            if missing_ok and err.status == 404:
                return None
            raise explain(err, verb, what) from err

    def create_job(self, manifest: dict) -> dict:
        """Creates a Job from its manifest."""
        name = manifest["metadata"]["name"]
        return self._call(
            "create", f"Job {name}", self.batch.create_namespaced_job, self.namespace, manifest
        )

    def read_job(self, name: str) -> dict | None:
        """The Job, or ``None`` when there is none of that name."""
        return self._call(
            "get", f"Job {name}", self.batch.read_namespaced_job, name, self.namespace,
            missing_ok=True,
        )  # fmt: skip

    def annotate_job(self, name: str, annotations: dict[str, str]) -> dict | None:
        """Merges ``annotations`` into the Job's (a strategic merge patch); ``None``: no Job."""
        return self._call(
            "patch", f"Job {name}", self.batch.patch_namespaced_job, name, self.namespace,
            {"metadata": {"annotations": annotations}}, missing_ok=True,
        )  # fmt: skip

    def delete_job(self, name: str, propagation: str = "Background") -> None:
        """Deletes a Job and (``propagation``) its pods; a missing Job is fine."""
        self._call(
            "delete", f"Job {name}", self.batch.delete_namespaced_job, name, self.namespace,
            propagation_policy=propagation, missing_ok=True,
        )  # fmt: skip

    def create_service(self, manifest: dict) -> dict:
        """Creates a Service from its manifest."""
        name = manifest["metadata"]["name"]
        return self._call(
            "create", f"Service {name}", self.core.create_namespaced_service, self.namespace,
            manifest,
        )  # fmt: skip

    def read_service(self, name: str) -> dict | None:
        """The Service, or ``None``."""
        return self._call(
            "get", f"Service {name}", self.core.read_namespaced_service, name, self.namespace,
            missing_ok=True,
        )  # fmt: skip

    def delete_service(self, name: str) -> None:
        """Deletes a Service; a missing one is fine."""
        self._call(
            "delete", f"Service {name}", self.core.delete_namespaced_service, name,
            self.namespace, missing_ok=True,
        )  # fmt: skip

    def list_pods(self, selector: dict[str, str]) -> list[dict]:
        """The pods carrying every label of ``selector``."""
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        found = self._call(
            "list", f"pods {label_selector}", self.core.list_namespaced_pod, self.namespace,
            label_selector=label_selector,
        )  # fmt: skip
        return list(found.get("items") or [])

    def read_pod(self, name: str) -> dict | None:
        """The pod, or ``None``."""
        return self._call(
            "get", f"pod {name}", self.core.read_namespaced_pod, name, self.namespace,
            missing_ok=True,
        )  # fmt: skip

    def delete_pod(self, name: str) -> None:
        """Deletes a pod gracefully (its grace period); a missing pod is fine."""
        self._call(
            "delete", f"pod {name}", self.core.delete_namespaced_pod, name, self.namespace,
            missing_ok=True,
        )  # fmt: skip

    def read_node(self, name: str) -> dict | None:
        """The node (for its labels), or ``None``."""
        return self._call("get", f"node {name}", self.core.read_node, name, missing_ok=True)

    def follow_log(self, pod: str, container: str) -> Iterator[str]:
        """The pod's log lines as they come, until the container ends.

        ``_preload_content=False`` makes the client return the open urllib3 response
        instead of reading the whole (endless, while following) body first.
        """
        try:
            response = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, follow=True, _preload_content=False
            )
        except ApiException as err:
            raise explain(err, "read the log of", f"pod {pod}") from err
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")
        finally:
            response.release_conn()


def in_cluster() -> Kube:
    """A :class:`Kube` for the pod this runs in (its service account, its namespace)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException as err:
        raise KubeError(
            preemption.FATAL_CONFIG,
            f"not inside a Kubernetes pod ({err}): the Job-engine train runs on KFP on GKE",
        ) from None
    namespace = NAMESPACE_FILE.read_text().strip()
    return Kube(client.BatchV1Api(), client.CoreV1Api(), namespace)


def own_pod_name(environ=None) -> str:
    """This pod's name: Kubernetes sets the hostname to it."""
    return (os.environ if environ is None else environ).get("HOSTNAME", "")
