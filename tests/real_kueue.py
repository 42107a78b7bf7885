"""Kueue v0.17.0's own controller manager beside JobSet's on kube-cp, its webhooks over TLS.

``.tools/bin/kueue-manager`` (``make kueue``; ``tools/kueue``) is upstream's
``cmd/kueue`` as it is; its CRDs and webhook manifests are the same module's
``config/components``, which ``make kueue`` copies to ``.tools/kueue-config``.
Citations are to sigs.k8s.io/kueue v0.17.0.

How it runs here, as JobSet's does (tests/real_jobset.py says why a webhook cannot be
a Service on kube-cp): internal cert management off (``internalCertManagement.enable:
false``; with it on, ``cert.BootstrapCerts`` waits for a ``<service>.<ns>.svc`` cert,
main.go:251-258), the webhooks served on 127.0.0.1 from a cert dir of ours
(``webhook.host/port/certDir``) and registered by ``url`` + ``caBundle``. Only the
webhooks of Kueue's own objects and of JobSet are registered (upstream's manifests,
filtered by name): the pod, deployment and statefulset ones would put every pod create
behind Kueue. Leader election off (out of a cluster it needs a namespace,
controller-runtime pkg/leaderelection/leader_election.go:136-140), the visibility server
off (``VisibilityOnDemand``: out of a cluster it exits for want of in-cluster config,
main.go:378-385) and its metrics off. With its own certs, the manager still loads a
metrics cert from the fixed path ``/etc/kueue/metrics/certs`` (main.go:205-223), so it
runs in a mount namespace whose ``/etc`` is an overlay holding that dir: the host's
``/etc`` is not written.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from controller_manager import ControllerManager, to_loopback
from real_jobset import (
    JOBSET_CONFIG,
    JOBSET_MANAGER,
    NO_JOBSET,
    JobSetManager,
    custom,
    install_crd,
)
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

KUEUE_MANAGER = REPO / ".tools" / "bin" / "kueue-manager"
KUEUE_CONFIG = REPO / ".tools" / "kueue-config"
NO_KUEUE = (
    "needs .tools/bin/kueue-manager and .tools/kueue-config"
    " (`make kueue`: a Go toolchain and the Go module proxy)"
)
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
# Kueue's own objects and JobSet's: config/components/webhook/manifests.yaml.
WEBHOOKS = {
    f"{p}{kind}.kb.io"
    for p in "mv"
    for kind in ("clusterqueue", "resourceflavor", "workload", "jobset", "cohort")
}
NODES = [f"gke-a100-{i}" for i in range(4)]


def webhook_configurations(port: int, ca_pem: bytes, src: Path = KUEUE_CONFIG) -> list[dict]:
    """Upstream's webhook configurations for Kueue's objects and JobSet, at 127.0.0.1."""
    docs = yaml.safe_load_all((src / "webhook" / "manifests.yaml").read_text())
    out = []
    for doc in (d for d in docs if d):
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = [h for h in doc["webhooks"] if h["name"] in WEBHOOKS]
        to_loopback(doc["webhooks"], port, ca_pem)
        out.append(doc)
    return out


def install_crds(cp: ControlPlane, src: Path = KUEUE_CONFIG) -> float:
    """Creates Kueue's 11 CRDs (the manager exits or stalls without any of them, main.go
    :333-336) and waits until each is Established; returns seconds."""
    from kubernetes import client as k8s

    started = time.monotonic()
    ext = k8s.ApiextensionsV1Api(cp.admin)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    names = []
    for path in sorted((src / "crd" / "bases").glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)  # noqa: S506 - a safe loader
        ext.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])

    def established():
        for name in names:
            got = ext.read_custom_resource_definition(name)
            if not any(c.type == "Established" and c.status == "True"
                       for c in got.status.conditions or []):  # fmt: skip
                return False
        return True

    wait_for("Kueue's CRDs Established", established, timeout=120)
    return time.monotonic() - started


class KueueManager(ControllerManager):
    """One running kueue-manager against ``cp``, webhooks registered; ``stop()`` ends it."""

    name = "kueue-manager"

    def __init__(self, cp: ControlPlane, workdir: Path, src: Path = KUEUE_CONFIG):
        self.src = src
        super().__init__(cp, workdir)

    def command(self) -> list[str]:
        config = self.workdir / "kueue-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(self.certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"},
            "metrics": {"bindAddress": "0"},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["jobset.x-k8s.io/jobset"]},
            "featureGates": {"VisibilityOnDemand": False},
        }))  # fmt: skip
        overlay = self.workdir / "etc-overlay"
        for d in ("upper/kueue/metrics/certs", "work"):
            (overlay / d).mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(self.certs / name, overlay / "upper/kueue/metrics/certs" / name)
        # Where an overlay cannot be mounted (its upper dir on an overlayfs), a copy of
        # /etc with the certs, bind-mounted over it (3 MB here).
        copy = f"{overlay}/copy"
        mount = (
            f"{{ mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay}/upper,"
            f"workdir={overlay}/work /etc 2>/dev/null || {{ rm -rf {copy} && cp -a /etc {copy}"
            f" && cp -a {overlay}/upper/kueue {copy}/ && mount --bind {copy} /etc; }}; }}"
            ' && exec "$0" "$@"'
        )
        # /readyz answers once the webhook server listens (main.go:541-549).
        return [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", mount,
            str(KUEUE_MANAGER), f"--config={config}", f"--kubeconfig={self.cp.kubeconfig}",
        ]  # fmt: skip

    def webhook_configurations(self, ca_pem: bytes) -> list[dict]:
        return webhook_configurations(self.webhook_port, ca_pem, self.src)

    def admits(self) -> bool:
        """A dry-run ResourceFlavor comes back with the finalizer Kueue's mutating
        webhook adds."""
        from kubernetes.client.exceptions import ApiException

        probe = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                 "metadata": {"name": "webhook-probe"}, "spec": {}}  # fmt: skip
        try:
            got = custom(self.cp).create_cluster_custom_object(
                GROUP, VERSION, "resourceflavors", probe, dry_run="All"
            )
        except ApiException as err:
            if err.status == 500 and "failed calling webhook" in (err.body or ""):
                return False
            raise
        return bool(got["metadata"].get("finalizers"))


MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(not (KUEUE_MANAGER.exists() and KUEUE_CONFIG.is_dir()), reason=NO_KUEUE),
    pytest.mark.skipif(not (JOBSET_MANAGER.exists() and JOBSET_CONFIG.is_dir()), reason=NO_JOBSET),
    pytest.mark.skipif(not KUBE_CP.exists(), reason=NO_KUBE_CP),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]


@contextlib.contextmanager
def running_kueue_kube(workdir: Path):
    """kube-cp + JobSet's manager + Kueue's, four A100 nodes, a kubelet."""
    cp = ControlPlane(workdir)
    managers: list = []
    kubelet = None
    try:
        for name in NODES:
            cp.add_node(name, {ACCELERATOR_LABEL: "nvidia-tesla-a100", NODEPOOL_LABEL: "a100"})
        install_crd(cp)
        managers.append(JobSetManager(cp, workdir))
        cp.crd_seconds = install_crds(cp)
        cp.kueue = KueueManager(cp, workdir)
        managers.append(cp.kueue)
        kubelet = cp.kubelet = Kubelet(cp, set(NODES))
        print(
            f"\nkube-cp READY {cp.start_seconds:.1f} s; Kueue's CRDs Established "
            f"{cp.crd_seconds:.1f} s, kueue-manager /readyz {cp.kueue.ready_seconds:.1f} s, "
            f"webhooks admitting {cp.kueue.admitting_seconds:.1f} s"
        )
        yield cp
    finally:
        if kubelet:
            kubelet.stop()
        for manager in reversed(managers):
            manager.stop()
        cp.stop()


@pytest.fixture(scope="module", name="kueue_kube")
def kueue_kube_fixture(tmp_path_factory):
    """:func:`running_kueue_kube`, one per test module."""
    pytest.importorskip("kubernetes")
    with running_kueue_kube(tmp_path_factory.mktemp("kueue-kube")) as cp:
        yield cp


def apply(cp, objects: list[dict]) -> None:
    """Creates Kueue's objects as ``make gke-kueue`` prints them."""
    api = custom(cp)
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
        if ns := obj["metadata"].get("namespace"):
            api.create_namespaced_custom_object(group, version, ns, plural, obj)
        else:
            api.create_cluster_custom_object(group, version, plural, obj)


def workloads(cp, ns) -> list[dict]:
    return custom(cp).list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
