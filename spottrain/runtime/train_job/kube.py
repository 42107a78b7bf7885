"""The few Kubernetes API calls the JobSet launcher makes, through the official client.

Objects come back as plain dicts in the API's own (camelCase) shape, whatever the
client returns: ``ApiClient.sanitize_for_serialization`` turns the client's models
into that shape and leaves dicts as they are, so the launcher reads fields the way
the Kubernetes documentation shows them. JobSets are a CRD, so they go through
``CustomObjectsApi`` (dicts in, dicts out). A missing JobSet and a cluster without
JobSet's CRD both answer 404 there, so :meth:`Kube.check_api` asks the API discovery
first, once.

An API server that does not answer is waited out here, for every call: the client
raises urllib3's own errors for a refused, reset or timed-out connection (not
``ApiException``), and every call carries a connect and read timeout, so a server that
accepts and never answers costs one timeout per try, not TCP's minutes. The gang runs
on meanwhile (its pods and the JobSet controller need no launcher); past ``patience``
the call raises :class:`KubeError` 172, and the launcher's KFP retry re-attaches.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import urllib3
from kubernetes.client.exceptions import ApiException

from spottrain import exits

# Where every pod finds its own namespace (a projected service account token volume:
# https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/).
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
INSTALL = "install it with `make gke-jobset EXECUTE=1` (JobSet v0.12.0)"
# (connect, read) seconds per request: the client's default is none, and a server that
# accepts and never answers would hold the launcher until TCP gives up (minutes). The
# read is a wait for the next bytes (urllib3), which a request in flight when SIGTERM
# comes still waits out: 10 s leaves most of a pod's default 30 s grace to end in.
REQUEST_TIMEOUT = (5.0, 10.0)
# How long an unanswering API server is waited out, per call, before it is a 172: long
# enough for a control-plane upgrade's blip (GKE's zonal clusters: minutes), short
# enough that KFP's retry (which re-attaches) is not held for ever.
API_PATIENCE = 300.0
# urllib3's errors for a connection that was refused, reset or timed out (all subclass
# urllib3.exceptions.HTTPError), and the socket's own: the answer of no answer.
WIRE_ERRORS = (urllib3.exceptions.HTTPError, OSError)

log = logging.getLogger(__name__)


class KubeError(exits.TrainerExit):
    """An API call failed for good; ``code`` is the launcher's exit code."""


class NoJobSetApi(KubeError):
    """The cluster serves no JobSet API (fatal: install JobSet)."""

    def __init__(self, message: str):
        super().__init__(exits.FATAL_CONFIG, message)


class NoQueue(KubeError):
    """The cluster has no Kueue, or no LocalQueue of the name asked (fatal)."""

    def __init__(self, message: str):
        super().__init__(exits.FATAL_CONFIG, message)


def no_answer(err: BaseException, verb: str, what: str) -> KubeError:
    """One line for a request that got no HTTP answer (retryable)."""
    reason = getattr(err, "reason", None) or err
    detail = " ".join(f"{type(reason).__name__}: {reason}".split())[:200]
    return KubeError(
        exits.UNAVAILABLE, f"cannot {verb} {what}: the API server did not answer ({detail})"
    )


def explain(err: ApiException, verb: str, what: str) -> KubeError:
    """One line for an API error, with the exit code it should end the launcher with."""
    status = int(err.status or 0)
    if status == 403:
        return KubeError(
            exits.FATAL_CONFIG,
            f"Kubernetes refused to {verb} {what} (403 Forbidden): the pipeline's service "
            "account lacks that permission; grant it with `make gke-rbac EXECUTE=1`",
        )
    if status == 409:
        return KubeError(
            exits.FATAL_CONFIG,
            f"cannot {verb} {what}: an object of that name exists and is not this task's "
            "(409 Conflict); delete it or rename the task",
        )
    if status == 404:
        # Never a blip: the namespace, the CRD or the object is not there.
        return KubeError(exits.FATAL_CONFIG, f"cannot {verb} {what}: 404 Not Found")
    if status == 422 or status == 400:
        return KubeError(
            exits.FATAL_CONFIG,
            f"Kubernetes rejected {what} ({status} {err.reason}): {err.body}",
        )
    return KubeError(
        exits.UNAVAILABLE,
        f"cannot {verb} {what}: {status or 'no answer'} {err.reason or ''}".rstrip(),
    )


class Kube:
    """The launcher's view of one namespace.

    Args:
        core: A ``kubernetes.client.CoreV1Api``.
        custom: A ``kubernetes.client.CustomObjectsApi``.
        namespace: The namespace the JobSets live in.
        patience: Seconds an unanswering API server (or a 5xx) is retried, per call.
        request_timeout: ``(connect, read)`` seconds for each request.
        sleep: Waits between tries (tests pass their own).
    """

    def __init__(
        self,
        core,
        custom,
        namespace: str,
        *,
        patience: float = API_PATIENCE,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
    ):
        from kubernetes.client import ApiClient

        self.core = core
        self.custom = custom
        self.namespace = namespace
        self.patience = patience
        self.request_timeout = tuple(request_timeout)
        self.sleep = sleep
        self._plain = ApiClient().sanitize_for_serialization
        self.until: float | None = None  # time.monotonic() by which every call must end

    def hurry(self, until: float) -> None:
        """From now on, every call (its tries and their timeouts) ends by ``until``.

        After a SIGTERM the pod has its grace left, not the patience: a call that would
        wait longer is given up at ``until``, so the launcher still says its last line.
        """
        self.until = until if self.until is None else min(self.until, until)

    def _left(self) -> float:
        return math.inf if self.until is None else self.until - time.monotonic()

    def _once(self, verb: str, what: str, func, *args, missing_ok: bool = False, **kwargs):
        left = max(self._left(), 0.1)
        kwargs.setdefault("_request_timeout", tuple(min(t, left) for t in self.request_timeout))
        try:
            return self._plain(func(*args, **kwargs))
        except ApiException as err:
            if missing_ok and err.status == 404:
                return None
            raise explain(err, verb, what) from err
        except WIRE_ERRORS as err:
            raise no_answer(err, verb, what) from err

    def _call(self, verb: str, what: str, func, *args, **kwargs):
        """One API call; a retryable failure is tried again until ``patience`` runs out."""
        started, tries = time.monotonic(), 0
        while True:
            try:
                found = self._once(verb, what, func, *args, **kwargs)
            except KubeError as err:
                waited = time.monotonic() - started
                if not exits.is_retryable(err.code):
                    raise
                if waited >= self.patience:
                    raise KubeError(
                        err.code, f"{err} for {waited:.0f} s; giving up (a retry re-attaches)"
                    ) from err.__cause__
                if self._left() <= 0.5:
                    raise KubeError(
                        err.code, f"{err} for {waited:.0f} s; the SIGTERM's grace is used up"
                    ) from err.__cause__
                if tries == 0:
                    log.warning("%s: trying again for up to %.0f s", err, self.patience)
                tries += 1
                # Backoff 0.5, 1, 2, 4, 5, 5, ... s: quick for a blip, gentle for an outage.
                pause = min(0.5 * 2 ** (tries - 1), 5.0, self.patience - waited)
                self.sleep(max(0.0, min(pause, self._left() - 0.5)))
                continue
            if tries:
                log.warning(
                    "the API server answers again (%s %s, after %.0f s)",
                    verb, what, time.monotonic() - started,
                )  # fmt: skip
            return found

    def check_api(self) -> None:
        """Raises :class:`NoJobSetApi` when the cluster serves no JobSet API."""
        try:
            found = self._call(
                "discover", f"the {GROUP}/{VERSION} API", self.custom.get_api_resources,
                GROUP, VERSION,
            )  # fmt: skip
        except KubeError as err:
            if getattr(err.__cause__, "status", None) == 404:
                raise NoJobSetApi(
                    f"this cluster has no JobSet API ({GROUP}/{VERSION} not served): {INSTALL}"
                ) from None
            raise
        if not any(r.get("name") == PLURAL for r in found.get("resources") or []):
            raise NoJobSetApi(f"{GROUP}/{VERSION} serves no {PLURAL} resource: {INSTALL}")

    def read_jobset(self, name: str) -> dict | None:
        """The JobSet, or ``None``."""
        return self._call(
            "get", f"JobSet {name}", self.custom.get_namespaced_custom_object, GROUP, VERSION,
            self.namespace, PLURAL, name, missing_ok=True,
        )  # fmt: skip

    def list_jobsets(self, selector: dict[str, str]) -> list[dict]:
        """The JobSets carrying every label of ``selector`` (a run's gangs, after moves)."""
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        found = self._call(
            "list", f"JobSets {label_selector}", self.custom.list_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, label_selector=label_selector,
        )  # fmt: skip
        return list(found.get("items") or [])

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

    def annotate_jobset(self, name: str, annotations: dict[str, str]) -> dict | None:
        """Sets annotations on a JobSet (a merge patch); the JobSet, or ``None``: gone."""
        return self._call(
            "patch", f"JobSet {name}", self.custom.patch_namespaced_custom_object, GROUP,
            VERSION, self.namespace, PLURAL, name, {"metadata": {"annotations": annotations}},
            missing_ok=True,
        )  # fmt: skip

    def delete_jobset(self, name: str, resource_version: str | None = None) -> None:
        """Deletes a JobSet, its Jobs and pods first (``Foreground`` propagation).

        While any pod is still ending, the JobSet stays, so a retry never starts a
        second gang beside it. With ``resource_version``, only that version of it: a
        JobSet changed since raises :class:`KubeError` caused by a 409.
        """
        body = {"propagationPolicy": "Foreground"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        self._call(
            "delete", f"JobSet {name}", self.custom.delete_namespaced_custom_object, GROUP,
            VERSION, self.namespace, PLURAL, name, body=body, missing_ok=True,
        )  # fmt: skip

    def check_queue(self, name: str) -> None:
        """Raises :class:`NoQueue` (64): no Kueue, or no LocalQueue ``name``."""
        from spottrain.runtime.train_job.queue import API_GROUP, API_VERSION

        try:
            self._call(
                "discover", f"the {API_GROUP}/{API_VERSION} API",
                self.custom.get_api_resources, API_GROUP, API_VERSION,
            )  # fmt: skip
        except KubeError as err:
            if getattr(err.__cause__, "status", None) == 404:
                raise NoQueue(
                    f"queue {name!r}: this cluster has no Kueue ({API_GROUP}/{API_VERSION} "
                    "not served): install Kueue, or run without a queue",
                ) from None
            raise
        if self.read_local_queue(name) is None:
            raise NoQueue(
                f"queue {name!r}: no LocalQueue of that name in namespace {self.namespace} "
                "(`kubectl get localqueues`)",
            )

    def read_local_queue(self, name: str) -> dict | None:
        """Kueue's LocalQueue ``name``, or ``None``."""
        from spottrain.runtime.train_job.queue import API_GROUP, API_VERSION

        return self._call(
            "get", f"LocalQueue {name}", self.custom.get_namespaced_custom_object, API_GROUP,
            API_VERSION, self.namespace, "localqueues", name, missing_ok=True,
        )  # fmt: skip

    def read_workload(self, job_uid: str) -> dict | None:
        """Kueue's Workload of the JobSet whose uid is ``job_uid`` (the newest), or ``None``."""
        from spottrain.runtime.train_job.queue import API_GROUP, API_VERSION, JOB_UID_LABEL

        found = self._call(
            "list", f"Workloads of {job_uid}", self.custom.list_namespaced_custom_object,
            API_GROUP, API_VERSION, self.namespace, "workloads",
            label_selector=f"{JOB_UID_LABEL}={job_uid}",
        )  # fmt: skip
        items = list(found.get("items") or [])
        newest = max(items, key=lambda w: w["metadata"].get("creationTimestamp", ""), default=None)
        return newest

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
                pod, self.namespace, container=container, follow=True, _preload_content=False,
                # A log may be quiet for long (a compile): only the connect is bounded.
                _request_timeout=(self.request_timeout[0], None),
            )  # fmt: skip
        except ApiException as err:
            raise explain(err, "read the log of", f"pod {pod}") from err
        except WIRE_ERRORS as err:
            raise no_answer(err, "read the log of", f"pod {pod}") from err
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


def api_client(configuration=None):
    """A ``kubernetes.client.ApiClient`` whose requests urllib3 does not retry itself.

    The client's default (``Configuration.retries`` None: urllib3's 3 retries, client
    rest.py lines 77-78) logged a "Retrying" WARNING per retry, 57 lines in a 90 s
    refusal where :class:`Kube` says one when an outage starts and one when it ends,
    and stretched one request to 4 connects, past what a SIGTERM's grace leaves.
    :class:`Kube`'s own loop retries, within its patience.
    """
    from kubernetes import client

    conf = configuration or client.Configuration.get_default_copy()
    conf.retries = 0
    return client.ApiClient(conf)


def from_client(api_client, namespace: str, **options) -> Kube:
    """A :class:`Kube` over one ``kubernetes.client.ApiClient`` (``options``: Kube's)."""
    from kubernetes import client

    return Kube(
        client.CoreV1Api(api_client), client.CustomObjectsApi(api_client), namespace, **options
    )


def in_cluster() -> Kube:
    """A :class:`Kube` for the pod this runs in (its service account, its namespace)."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException as err:
        raise KubeError(
            exits.FATAL_CONFIG,
            f"not inside a Kubernetes pod ({err}): the JobSet-engine train runs on KFP on GKE",
        ) from None
    return from_client(api_client(), NAMESPACE_FILE.read_text().strip())


def own_pod_name() -> str:
    """This pod's name: Kubernetes sets the hostname to it."""
    return os.environ.get("HOSTNAME", "")
