"""JobSet v0.12.0's own controller manager on kube-cp, its webhooks served over TLS.

``.tools/bin/jobset-manager`` (``make jobset``; ``tools/jobset``) is upstream's
``main.go`` as it is. Its CRD and webhook manifests are the same module's
``config/components``, which ``make jobset`` copies to ``.tools/jobset-config``; nothing
of JobSet is copied into this repository. Citations are to sigs.k8s.io/jobset v0.12.0.

How the webhooks run here. Upstream's default is internal cert management
(``pkg/util/cert/cert.go:50-76``): open-policy-agent's cert-controller issues a cert for
the DNS name ``<service>.<namespace>.svc`` only (:54-55) and injects its CA into
webhook configurations that name a Service. The apiserver reaches a Service through
its ClusterIP (k8s.io/kubernetes v1.34.3 ``cmd/kube-apiserver/app/server.go:293-303``;
no kube-proxy here) or, with ``--enable-aggregator-routing``, an EndpointSlice address,
which may not be loopback (``pkg/apis/core/validation/validation.go:8009-8021``); a
``url`` with that DNS name resolves nowhere (no cluster DNS). So :class:`JobSetManager`
turns internal cert management off (``internalCertManagement.enable: false``, read by
``main.go:196-203``), makes a CA and a serving cert for IP 127.0.0.1 itself, serves
the webhooks on 127.0.0.1 from that cert dir (``webhook.host/port/certDir``,
``pkg/config/config.go:65-88``), and registers upstream's own webhook manifests
(``config/components/webhook/manifests.yaml`` with its ``patches/``, the pod webhooks'
objectSelector) with ``clientConfig.url: https://127.0.0.1:<port><path>`` and that CA
as ``caBundle``: the same four webhooks, paths and failurePolicy Fail.

Without the webhooks every JobSet would have to spell out the mutating webhook's
defaults (``pkg/webhooks/jobset_webhook.go:111-161``) and would lose its validation
(:166-309): the reconciler relies on them. A JobSet without ``spec.network`` panics it
(nil pointer, ``pkg/controllers/jobset_controller.go:1155``, from :793 and :206;
observed with the webhook configurations left out: no child Job, "Observed a panic").
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from pathlib import Path

import pytest
from controller_manager import ControllerManager, to_loopback
from real_kube import (
    ACCELERATOR_LABEL,
    KUBE_CP,
    NO_KUBE_CP,
    NODEPOOL_LABEL,
    REPO,
    ControlPlane,
    Kubelet,
    wait_for,
)

from spottrain.placement import Placement
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import launcher

JOBSET_MANAGER = REPO / ".tools" / "bin" / "jobset-manager"
JOBSET_CONFIG = REPO / ".tools" / "jobset-config"  # upstream's config/components
NO_JOBSET = (
    "needs .tools/bin/jobset-manager and .tools/jobset-config"
    " (`make jobset`: a Go toolchain and the Go module proxy)"
)
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def webhook_configurations(port: int, ca_pem: bytes, src: Path = JOBSET_CONFIG) -> list[dict]:
    """Upstream's webhook manifests and kustomize patches, pointed at 127.0.0.1:``port``."""
    import yaml

    hooks = src / "webhook"
    docs = [d for d in yaml.safe_load_all((hooks / "manifests.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": hooks / "patches" / "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": hooks / "patches" / "validating-patch.yaml",
    }
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for op in yaml.safe_load(patches[doc["kind"]].read_text()):
            # The patches are JSON-patch "replace" ops on /webhooks/<i> (kustomization.yaml).
            assert op["op"] == "replace" and op["path"].startswith("/webhooks/"), op
            doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        doc["metadata"] = {"name": f"jobset-{doc['metadata']['name']}"}
        to_loopback(doc["webhooks"], port, ca_pem)
        out.append(doc)
    return out


def install_crd(cp: ControlPlane, src: Path = JOBSET_CONFIG) -> float:
    """Creates upstream's JobSet CRD and waits until it is Established; returns seconds."""
    import yaml
    from kubernetes import client as k8s

    started = time.monotonic()
    crd = yaml.safe_load((src / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml").read_text())
    ext = k8s.ApiextensionsV1Api(cp.admin)
    ext.create_custom_resource_definition(crd)

    def established():
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        return any(
            c.type == "Established" and c.status == "True" for c in got.status.conditions or []
        )

    wait_for("the JobSet CRD Established", established, timeout=60)
    return time.monotonic() - started


class JobSetManager(ControllerManager):
    """One running jobset-manager against ``cp``, webhooks registered; ``stop()`` ends it."""

    name = "jobset-manager"

    def __init__(self, cp: ControlPlane, workdir: Path, src: Path = JOBSET_CONFIG):
        self.src = src
        self.refused_before_ready: list[str] = []  # webhook calls refused after /readyz
        super().__init__(cp, workdir)

    def command(self) -> list[str]:
        config = self.workdir / "jobset-config.yaml"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "host": "127.0.0.1",
                        "port": self.webhook_port,
                        "certDir": str(self.certs),
                    },
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"},
                    "metrics": {"bindAddress": "0"},  # off: not needed, and one port less
                }
            )
        )
        # main.go:273-283: /readyz answers once the certs are loaded and the webhook
        # server listens.
        return [str(JOBSET_MANAGER), f"--config={config}", f"--kubeconfig={self.cp.kubeconfig}"]

    def webhook_configurations(self, ca_pem: bytes) -> list[dict]:
        return webhook_configurations(self.webhook_port, ca_pem, self.src)

    def admits(self) -> bool:
        """A dry-run JobSet comes back defaulted by the mutating webhook
        (``pkg/webhooks/jobset_webhook.go:134-136``)."""
        from kubernetes.client.exceptions import ApiException

        probe = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "JobSet",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"replicatedJobs": []},
        }
        try:
            got = custom(self.cp).create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, probe, dry_run="All"
            )
        except ApiException as err:
            # main.go:218 registers the webhook paths in a goroutine that /readyz
            # (main.go:273-283) does not wait for: until then the webhook server
            # answers 404 and the apiserver refuses the request (failurePolicy Fail).
            if err.status == 500 and "failed calling webhook" in (err.body or ""):
                self.refused_before_ready.append(err.body)
                return False
            raise
        return (got["spec"].get("network") or {}).get("enableDNSHostnames") is True


# The marks of every test on JobSet's controller: slow, and skipped without the tools.
MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(not (JOBSET_MANAGER.exists() and JOBSET_CONFIG.is_dir()), reason=NO_JOBSET),
    pytest.mark.skipif(not KUBE_CP.exists(), reason=NO_KUBE_CP),
]


@contextlib.contextmanager
def running_jobset_kube(workdir: Path):
    """kube-cp + JobSet's CRD + jobset-manager with webhooks; two GPU nodes, a kubelet."""
    cp = ControlPlane(workdir)
    manager = kubelet = None
    try:
        for name in NODES:
            cp.add_node(name, {ACCELERATOR_LABEL: "nvidia-tesla-a100", NODEPOOL_LABEL: "a100"})
        cp.crd_seconds = install_crd(cp)
        manager = JobSetManager(cp, workdir)
        cp.manager = manager
        kubelet = cp.kubelet = Kubelet(cp, set(NODES))
        print(
            f"\nkube-cp READY {cp.start_seconds:.1f} s, CRD Established {cp.crd_seconds:.1f} s, "
            f"jobset-manager /readyz {manager.ready_seconds:.1f} s, then webhooks admitting "
            f"{manager.admitting_seconds:.1f} s ({len(manager.refused_before_ready)} refused)"
        )
        yield cp
    finally:
        if kubelet:
            kubelet.stop()
        if manager:
            manager.stop()
        cp.stop()


@pytest.fixture(scope="module", name="jobset_kube")
def jobset_kube_fixture(tmp_path_factory):
    """:func:`running_jobset_kube`, one per test module."""
    pytest.importorskip("kubernetes")
    with running_jobset_kube(tmp_path_factory.mktemp("jobset-kube")) as cp:
        yield cp


def custom(cp):
    from kubernetes import client as k8s

    return k8s.CustomObjectsApi(cp.admin)


def namespace(cp, ns):
    core = cp.core()
    core.create_namespace({"metadata": {"name": ns}})
    # The serviceaccount controller makes "default"; pods are refused until it exists.
    wait_for(
        f"serviceaccount default in {ns}",
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items
        ),
    )


def get_jobset(cp, ns, name) -> dict:
    return custom(cp).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def condition(js: dict, kind: str):
    return next(
        (
            c
            for c in js.get("status", {}).get("conditions", [])
            if c["type"] == kind and c["status"] == "True"
        ),
        None,
    )


def child_jobs(cp, ns, name):
    return cp.batch().list_namespaced_job(ns, label_selector=f"{JOBSET_NAME_LABEL}={name}").items


def wait_in(cp, ns, what, predicate, timeout=60.0):
    """wait_for, failing with the namespace's state."""
    try:
        return wait_for(what, predicate, timeout=timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{state(cp, ns)}") from None


class JobWatch:
    """Every change of the namespace's Jobs, as (monotonic time, uid, conditions)."""

    def __init__(self, cp, ns):
        from kubernetes import watch

        self.seen: list[tuple[float, str, list[tuple[str, str, str]]]] = []
        self.error: Exception | None = None  # the stream's end when kube-cp stops first
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(cp, ns), daemon=True)
        self._thread.start()

    def _run(self, cp, ns):
        try:
            for event in self._watch.stream(cp.batch().list_namespaced_job, ns):
                job = event["object"]
                conds = [(c.type, c.status, c.reason) for c in job.status.conditions or []]
                self.seen.append((time.monotonic(), job.metadata.uid, conds))
        except Exception as err:  # noqa: BLE001 - kept for a failure message
            self.error = err

    def stop(self):
        self._watch.stop()


def running_pods(cp, ns, job_uid, count):
    def got():
        pods = [
            p
            for p in cp.core().list_namespaced_pod(ns).items
            if any(o.uid == job_uid for o in p.metadata.owner_references or [])
            and p.status.phase == "Running"
        ]
        return pods if len(pods) == count else None

    return wait_for(f"{count} running pods of Job {job_uid}", got, timeout=120)


class Background:
    """``JobSetLauncher.run`` in a thread."""

    def __init__(self, launch: launcher.JobSetLauncher):
        self.launcher = launch
        self.outcome = None
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.outcome = self.launcher.run()
        except BaseException as err:  # noqa: BLE001 - re-raised in result()
            self.error = err

    def result(self, timeout=120.0) -> launcher.Outcome:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.launcher.stop.set()
            raise AssertionError(f"the launcher did not end in {timeout:.0f} s")
        if self.error is not None:
            raise self.error
        return self.outcome


def worker_set(
    ns, name, workers=2, args=("--checkpoint_dir=gs://bucket/ckpt",), image="trainer:test",
    **placement,
):  # fmt: skip
    return js.WorkerSet(
        name=name,
        namespace=ns,
        image=image,
        args=tuple(args),
        workers=workers,
        placement=Placement(**{**A100, **placement}),
        run="run-1",
        attempt=1,
    )


def gone(cp, ns, name) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        get_jobset(cp, ns, name)
    except ApiException as err:
        return err.status == 404
    return False


NODES = ("gke-a100-1", "gke-a100-2")


JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # api/jobset/v1alpha2/jobset_types.go:24


def state(cp, ns) -> str:
    """The namespace's Jobs and pods in one line each, for a failure message."""
    lines = []
    for job in cp.batch().list_namespaced_job(ns).items:
        conds = [(c.type, c.status, c.reason) for c in job.status.conditions or []]
        lines.append(f"job {job.metadata.name} {job.metadata.uid[:8]} {conds}")
    for pod in cp.core().list_namespaced_pod(ns).items:
        deleting = " deleting" if pod.metadata.deletion_timestamp else ""
        fins = pod.metadata.finalizers or []
        lines.append(f"pod {pod.metadata.name} {pod.status.phase}{deleting} {fins}")
    return "\n".join(lines)


A100 = {"pool": "on-demand", "gpu_type": "nvidia-tesla-a100"}
