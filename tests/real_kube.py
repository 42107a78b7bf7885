"""A real Kubernetes control plane for tests, and the kubelet's part played by hand.

``.tools/bin/kube-cp`` (``make kube-cp``; ``tools/kube-cp``) runs an embedded etcd,
kube-apiserver, kube-controller-manager (job, garbage-collector, ttl-after-finished,
taint-eviction, serviceaccount and serviceaccount-token controllers) and
kube-scheduler of k8s.io/kubernetes v1.34.3 in one process on 127.0.0.1. There is
no kubelet and no container runtime: the nodes are Node objects made through the
API, and :class:`Kubelet` writes the pod statuses a kubelet would. Each status it
writes cites the kubelet code (k8s.io/kubernetes v1.34.3) that writes it:

* Running: ``pkg/kubelet/kubelet_pods.go`` ``getPhase`` returns ``PodRunning`` when
  a container runs (:1802, :1845); ``convertToAPIContainerStatuses`` writes
  ``state.running.startedAt`` (:2124); ``generateAPIPodStatus`` adds the
  ``PodReadyToStartContainers``, ``Initialized``, ``Ready`` and ``ContainersReady``
  conditions (:1963-1969) and ``hostIP``/``podIP`` (:1975-2066).
* Exit: ``convertToAPIContainerStatuses`` writes ``state.terminated`` with
  ``exitCode``, ``reason``, ``startedAt``, ``finishedAt``, ``containerID``
  (:2129-2136); with ``restartPolicy: Never`` ``getPhase`` gives ``Succeeded`` when
  every container exited 0, else ``Failed`` (:1833-1841).
* Graceful node shutdown (a spot VM's preemption notice):
  ``pkg/kubelet/nodeshutdown/nodeshutdown_manager.go`` (in v1.34 the shared file,
  not ``_linux.go``) kills each pod with a status function that sets phase
  ``Failed``, ``reason: Terminated``, the message "Pod was terminated in response to
  imminent node shutdown." and the condition ``DisruptionTarget`` ``True`` reason
  ``TerminationByKubelet`` (:153-166). ``pkg/kubelet/status/status_manager.go``
  ``mergePodStatus`` sends that condition only together with the terminal phase,
  once no container can run (:1222-1240, :1263-1266), so one patch carries the
  phase, the condition and the containers' ``terminated`` states.
* A deleted pod: the kubelet kills its containers (a trainer's SIGTERM handler
  saves and exits 143), reports the terminal status, then deletes the object with
  grace period 0 and a UID precondition (``status_manager.go:1064-1071``,
  ``canBeDeleted`` then ``Delete``). Pods of a node without a kubelet would stay
  ``Terminating`` for ever, so :class:`Kubelet` does this in a loop.

Every status is written as the kubelet writes it, a patch of ``pods/status``
(``status_manager.go:1037`` ``statusutil.PatchPodStatus``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# SPOTTRAIN_KUBE_CP: a candidate binary, tried before it replaces the shared one.
KUBE_CP = Path(os.environ.get("SPOTTRAIN_KUBE_CP") or REPO / ".tools" / "bin" / "kube-cp")
NO_KUBE_CP = "needs .tools/bin/kube-cp (`make kube-cp`: a Go toolchain and the Go module proxy)"
READY_SECONDS = 180

GPU = "nvidia.com/gpu"
SPOT_LABEL = "cloud.google.com/gke-spot"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
SPOT_TAINT = {"key": SPOT_LABEL, "value": "true", "effect": "NoSchedule"}
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


def rfc3339(moment: datetime | None = None) -> str:
    return (moment or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for(what: str, predicate, timeout: float = 60.0, every: float = 0.2):
    """Polls ``predicate`` until it returns something truthy; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class ControlPlane:
    """One running kube-cp: its kubeconfig, server URL and an admin API client."""

    def __init__(self, workdir: Path):
        from kubernetes import config

        self.workdir = workdir
        self.log_path = workdir / "kube-cp.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(KUBE_CP), f"--data-dir={workdir / 'etcd'}", f"--cert-dir={workdir / 'pki'}"],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        ready = self._read_ready()
        self.start_seconds = time.monotonic() - started
        self.started_at = started
        fields = dict(part.split("=", 1) for part in ready.split()[1:])
        self.kubeconfig = fields["kubeconfig"]
        self.server = fields["server"]
        self.ca_file = str(workdir / "pki" / "ca.crt")
        self.admin = config.new_client_from_config(config_file=self.kubeconfig)

    def _read_ready(self) -> str:
        found: list[str] = []

        def read():
            for line in self.proc.stdout:
                if line.startswith("READY "):
                    found.append(line.strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(READY_SECONDS)
        if not found:
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"kube-cp did not print READY in {READY_SECONDS} s:\n{tail}")
        return found[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    # -- API helpers -----------------------------------------------------------------
    def core(self, client=None):
        from kubernetes import client as k8s

        return k8s.CoreV1Api(client or self.admin)

    def batch(self, client=None):
        from kubernetes import client as k8s

        return k8s.BatchV1Api(client or self.admin)

    def add_node(
        self,
        name: str,
        labels: dict[str, str],
        taints: list[dict] = (),
        gpus: int = 64,
    ) -> None:
        """A GKE-like Node: labels, taints, capacity and a Ready condition.

        Creating a Node runs the ``TaintNodesByCondition`` admission plugin, which
        adds ``node.kubernetes.io/not-ready:NoSchedule``; the node-lifecycle
        controller (not run here) would lift it once the node is Ready, so the
        taints are set again after the create.
        """
        core = self.core()
        core.create_node({"metadata": {"name": name, "labels": labels}})
        core.patch_node(name, {"spec": {"taints": list(taints) or None}})
        capacity = {GPU: str(gpus), "cpu": "96", "memory": "1000Gi", "pods": "110"}
        core.patch_node_status(name, {"status": node_status(capacity)})

    def namespace_with_launcher_account(
        self, namespace: str, rules=None, cluster_rules=None, account: str = "pipeline-runner"
    ):
        """A namespace, a service account bound to ``rbac.manifests`` (or ``rules``), and
        an API client authenticated as it with a TokenRequest token, from a kubeconfig."""
        from kubernetes import client as k8s
        from kubernetes import config

        from spottrain.runtime.train_job import rbac

        core, authz = self.core(), k8s.RbacAuthorizationV1Api(self.admin)
        core.create_namespace({"metadata": {"name": namespace}})
        core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
        role, binding, cluster_role, cluster_binding = rbac.manifests(namespace, account)
        if rules is not None:
            role["rules"] = rules
        if cluster_rules is not None:
            cluster_role["rules"] = cluster_rules
        cluster_role["metadata"]["name"] += f"-{namespace}"
        cluster_binding["roleRef"]["name"] = cluster_role["metadata"]["name"]
        authz.create_namespaced_role(namespace, role)
        authz.create_namespaced_role_binding(namespace, binding)
        authz.create_cluster_role(cluster_role)
        authz.create_cluster_role_binding(cluster_binding)
        # The default account the Job's pods run as: the serviceaccount controller
        # makes it in each new namespace; pods are refused until it exists.
        wait_for(
            f"serviceaccount default in {namespace}",
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(namespace).items
            ),
        )
        token = core.create_namespaced_service_account_token(
            account,
            namespace,
            {"spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"]}},
        ).status.token
        path = self.workdir / f"{namespace}-{account}.kubeconfig"
        path.write_text(
            "\n".join(
                [
                    "apiVersion: v1",
                    "kind: Config",
                    "clusters:",
                    f"- name: kube-cp\n  cluster:\n    server: {self.server}",
                    f"    certificate-authority: {self.ca_file}",
                    f"users:\n- name: {account}\n  user:\n    token: {token}",
                    "contexts:",
                    f"- name: sa\n  context: {{cluster: kube-cp, user: {account}}}",
                    "current-context: sa",
                    "",
                ]
            )
        )
        return config.new_client_from_config(config_file=str(path))


def node_status(capacity: dict[str, str]) -> dict:
    now = rfc3339()

    def cond(kind, status, reason, message):
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.34.3",
            "architecture": "amd64",
            "operatingSystem": "linux",
            "containerRuntimeVersion": "containerd://2.0.0",
            "kernelVersion": "6.6.0",
            "osImage": "Container-Optimized OS",
            "kubeProxyVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },  # fmt: skip
    }


# Images under this registry never pull (the fake kubelet's ErrImagePull).
UNPULLABLE = "registry.invalid/"


def _running_status(pod, now: str) -> dict:
    """kubelet_pods.go generateAPIPodStatus for a pod whose containers all started."""
    conditions = [c for c in (pod.status.conditions or []) if c.type == "PodScheduled"]
    kept = [{"type": c.type, "status": c.status} for c in conditions]
    ready = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    return {
        "phase": "Running",
        "hostIP": "10.128.0.2",
        "hostIPs": [{"ip": "10.128.0.2"}],
        "podIP": f"10.4.0.{(abs(hash(pod.metadata.uid)) % 250) + 2}",
        "startTime": now,
        "conditions": kept + ready,
        "containerStatuses": [
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "containerID": f"containerd://{uuid.uuid4().hex}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod.spec.containers
        ],
    }


class Kubelet:
    """The kubelets of the fake nodes, for the pod statuses the tests need.

    ``auto_start``: bound pods start at once (the image is pulled, the container
    runs). A background loop also finishes deleted pods as a kubelet does.
    """

    def __init__(self, cp: ControlPlane, nodes: set[str]):
        self.cp = cp
        self.core = cp.core()
        self.nodes = nodes
        self.frozen: set[str] = set()  # pod uids whose kubelet does not answer
        # pod uid -> what runs its container, asked for the exit code when the pod is
        # deleted (a real trainer's chain: SIGTERM, then its code); default 143.
        self.on_delete: dict[str, Callable[[], int]] = {}
        self.events: list[tuple[float, str, str]] = []  # (time, pod, what)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            try:
                for pod in self.core.list_pod_for_all_namespaces().items:
                    if pod.spec.node_name not in self.nodes or pod.metadata.uid in self.frozen:
                        continue
                    if pod.metadata.deletion_timestamp is not None:
                        self._finish_deleted(pod)
                    elif pod.status.phase == "Pending" and not pod.status.container_statuses:
                        self.start(pod)
            except ApiException as err:
                if err.status not in (404, 409, 422):
                    raise
            except Exception:  # noqa: BLE001 - a stopping control plane
                if self._stop.is_set():
                    return
            self._stop.wait(0.2)

    def _patch(self, pod, status: dict) -> None:
        # status_manager.go:1037 statusutil.PatchPodStatus: a patch of pods/status.
        self.core.patch_namespaced_pod_status(
            pod.metadata.name, pod.metadata.namespace, {"status": status}
        )

    def start(self, pod) -> None:
        """The pod's containers run (kubelet_pods.go:1802, :2124, :1963-1969); an image
        under ``UNPULLABLE`` does not pull: the pod stays Pending, its container
        waiting with reason ErrImagePull (images/image_manager.go's ErrImagePull)."""
        unpullable = [c for c in pod.spec.containers if c.image.startswith(UNPULLABLE)]
        if unpullable:
            status = {
                "phase": "Pending",
                "startTime": rfc3339(),
                "containerStatuses": [
                    {
                        "name": c.name, "image": c.image, "imageID": "", "ready": False,
                        "started": False, "restartCount": 0,
                        "state": {"waiting": {
                            "reason": "ErrImagePull",
                            "message": f'failed to pull image "{c.image}": not found',
                        }},
                    }
                    for c in pod.spec.containers
                ],
            }  # fmt: skip
            self._patch(pod, status)
            self.events.append((time.time(), pod.metadata.name, "ErrImagePull"))
            return
        self._patch(pod, _running_status(pod, rfc3339()))
        self.events.append((time.time(), pod.metadata.name, "Running"))

    def _terminated(self, pod, exit_code: int) -> list[dict]:
        now = rfc3339()
        out = []
        for cs in pod.status.container_statuses or []:
            started = cs.state.running.started_at if cs.state and cs.state.running else None
            out.append(
                {
                    "name": cs.name,
                    "image": cs.image,
                    "imageID": cs.image_id or "",
                    "containerID": cs.container_id,
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": rfc3339(started) if started else now,
                            "finishedAt": now,
                            "containerID": cs.container_id,
                        }
                    },
                }
            )
        return out

    def _not_ready(self, now: str) -> list[dict]:
        # generateAPIPodStatus on a terminal pod: Ready/ContainersReady False, PodCompleted.
        return [
            {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
            for kind in ("Ready", "ContainersReady")
        ] + [{"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": now}]

    def exit(self, pod, exit_code: int) -> None:
        """The container exits ``exit_code``: Succeeded or Failed (kubelet_pods.go:1833-1841)."""
        pod = self.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        now = rfc3339()
        self._patch(
            pod,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": self._not_ready(now),
                "containerStatuses": self._terminated(pod, exit_code),
            },
        )
        self.events.append((time.time(), pod.metadata.name, f"exit {exit_code}"))

    def shut_down(self, pod, exit_code: int = 143) -> None:
        """Graceful node shutdown: DisruptionTarget/TerminationByKubelet and phase Failed
        in one patch (nodeshutdown_manager.go:153-166, status_manager.go:1222-1260)."""
        pod = self.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        now = rfc3339()
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": SHUTDOWN_MESSAGE,
            "lastTransitionTime": now,
        }
        self._patch(
            pod,
            {
                "phase": "Failed",
                "reason": "Terminated",
                "message": SHUTDOWN_MESSAGE,
                "conditions": [disruption, *self._not_ready(now)],
                "containerStatuses": self._terminated(pod, exit_code),
            },
        )
        self.events.append((time.time(), pod.metadata.name, "shutdown"))

    def _finish_deleted(self, pod) -> None:
        """A deleted pod: SIGTERM (the trainer saves, exits 143), then the final delete."""
        if pod.status.phase not in ("Succeeded", "Failed"):
            if pod.status.container_statuses:
                self.exit(pod, self.on_delete.pop(pod.metadata.uid, lambda: 143)())
            else:
                self._patch(pod, {"phase": "Failed"})
        # status_manager.go:1064-1071: once terminal, Delete, grace 0, UID precondition.
        self.core.delete_namespaced_pod(
            pod.metadata.name,
            pod.metadata.namespace,
            grace_period_seconds=0,
            body={"preconditions": {"uid": pod.metadata.uid}, "gracePeriodSeconds": 0},
        )
        self.events.append((time.time(), pod.metadata.name, "deleted"))


@pytest.fixture(scope="session", name="real_kube")
def real_kube_fixture(tmp_path_factory):
    """A running kube-cp with a spot T4 node, an on-demand T4 node and an on-demand L4 node."""
    if not KUBE_CP.exists():
        pytest.skip(NO_KUBE_CP)
    pytest.importorskip("kubernetes")
    cp = ControlPlane(tmp_path_factory.mktemp("kube-cp"))
    try:
        cp.add_node(
            "gke-spot-t4-1",
            {SPOT_LABEL: "true", ACCELERATOR_LABEL: "nvidia-tesla-t4", NODEPOOL_LABEL: "spot-t4"},
            [SPOT_TAINT],
        )
        cp.add_node(
            "gke-std-t4-1", {ACCELERATOR_LABEL: "nvidia-tesla-t4", NODEPOOL_LABEL: "std-t4"}
        )
        # L4: an on-demand pool only, so a spot L4 gang cannot be placed.
        cp.add_node("gke-std-l4-1", {ACCELERATOR_LABEL: "nvidia-l4", NODEPOOL_LABEL: "std-l4"})
        cp.kubelet = Kubelet(cp, {"gke-spot-t4-1", "gke-std-t4-1", "gke-std-l4-1"})
        yield cp
    finally:
        if getattr(cp, "kubelet", None):
            cp.kubelet.stop()
        cp.stop()
        if os.environ.get("SPOTTRAIN_KEEP_KUBE_CP_LOG"):
            print(cp.log_path.read_text(errors="replace")[-20000:])
