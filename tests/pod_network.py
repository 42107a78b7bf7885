"""A stand-in for one Kubernetes node's pod network, to run Indexed Job pods as processes.

What a GKE JobSet pod has, and how it is reproduced here (root, ``unshare``,
``nsenter`` and iproute2's ``ip``; no container runtime, no kubelet):

* **its own network namespace and IP**, held by a sleeping process as the
  pod sandbox's pause container holds it; every pod's gRPC server binds
  ``0.0.0.0:2222`` (TF's ``GrpcServer`` listens on all addresses), which only
  works when each pod has its own network stack. A veth pair joins each pod to
  a bridge in a "node" namespace (what a bridge CNI plugin does). Nothing is
  created in the host's own network namespace: killing the holders removes it all.
* **its host name** ``<job>-<index>`` (Indexed Job, batch/v1 JobSpec.completionMode:
  "the Pod hostname takes the form $(job-name)-$(index)") in a UTS namespace.
* **peers resolvable as** ``<job>-<index>.<service>``: cluster DNS answers these
  for the pods of a headless Service named in ``subdomain`` (DNS for Services
  and Pods, "Pod's hostname and subdomain fields":
  https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/;
  https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/);
  here a generated hosts file is bind-mounted over ``/etc/hosts`` in the pod's
  mount namespace. Not reproduced: kube-dns itself, the resolv.conf search path
  (``<service>.<ns>.svc.cluster.local``) and a record appearing only once the
  pod runs.
* **the trainer as PID 1** of its PID namespace: a tiny ``sh`` sets the host
  name and the bind mount, then ``exec``s the container command, so PID 1 *is*
  ``python -m spottrain.trainer.task`` (checked by the test through ``/proc``).

A replacement pod gets a new network namespace and a new IP under the same
name, as a new pod of the same index does.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from platform_chains import Chain, can_unshare

# Sets what the kubelet and runtime set, then becomes the container's command.
_POD_INIT = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'


def can_make_pod_networks() -> str | None:
    """None when pods can be reproduced here, else the reason they cannot."""
    missing = [t for t in ("unshare", "nsenter", "ip", "mount", "hostname") if not shutil.which(t)]
    if missing:
        return f"needs {', '.join(missing)}"
    if not can_unshare():
        return "needs PID namespaces (unshare as root)"
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--uts", "ip", "link", "add", "probe0", "type", "bridge"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"cannot create a bridge in a network namespace: {probe.stderr.strip()}"
    return None


def _ns_holder() -> subprocess.Popen:
    """A process in a new network namespace that keeps it alive (a pause container)."""
    proc = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
    own = Path("/proc/self/ns/net").readlink()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/ns/net").readlink() == own:  # not yet unshared
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("unshare --net did not take effect")
        time.sleep(0.01)
    return proc


def _ip(holder: subprocess.Popen, *args: str) -> None:
    subprocess.run(["nsenter", "-t", str(holder.pid), "-n", "ip", *args], check=True, timeout=30)


@dataclass
class Pod:
    """One pod: its network namespace holder, address and host name."""

    index: int
    hostname: str  # <job>-<index>
    dns_name: str  # <job>-<index>.<service>
    ip: str
    sandbox: subprocess.Popen
    veth: str  # its end on the node's bridge


class PodNetwork:
    """A node's bridge plus pods on it; use as a context manager."""

    def __init__(self, root: Path, job: str, service: str):
        self.root = root
        self.job = job
        self.service = service
        self._holders: list[subprocess.Popen] = []
        self._next_host = 2
        self._veths = 0

    def __enter__(self) -> PodNetwork:
        self.node = self._hold(_ns_holder())
        _ip(self.node, "link", "add", "br0", "type", "bridge")
        _ip(self.node, "link", "set", "br0", "up")
        return self

    def __exit__(self, *_exc) -> None:
        for holder in self._holders:
            holder.kill()
            holder.wait(timeout=30)

    def _hold(self, proc: subprocess.Popen) -> subprocess.Popen:
        self._holders.append(proc)
        return proc

    def gang(self, workers: int) -> list[Pod]:
        """New pods of indexes 0..workers-1: new namespaces and IPs, the same names."""
        pods = []
        for index in range(workers):
            sandbox = self._hold(_ns_holder())
            ip = f"10.244.0.{self._next_host}"
            self._next_host += 1
            veth = f"veth{self._veths}"
            self._veths += 1
            _ip(self.node, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns",
                str(sandbox.pid))  # fmt: skip
            _ip(self.node, "link", "set", veth, "master", "br0", "up")
            _ip(sandbox, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip(sandbox, "link", "set", "eth0", "up")
            _ip(sandbox, "link", "set", "lo", "up")
            hostname = f"{self.job}-{index}"
            pods.append(Pod(index, hostname, f"{hostname}.{self.service}", ip, sandbox, veth))
        return pods

    def unplug(self, pod: Pod) -> None:
        """Cuts the pod off the network (its node lost): its peers get no reset, only silence."""
        _ip(self.node, "link", "del", pod.veth)

    def hosts_file(self, pods: list[Pod]) -> Path:
        """The /etc/hosts every pod of this gang sees (stands in for cluster DNS)."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        lines += [f"{p.ip} {p.dns_name} {p.hostname}" for p in pods]
        path = self.root / f"hosts-{pods[0].ip}"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, pod: Pod, hosts: Path, cmd: list[str], env: dict, cwd: Path) -> Chain:
        """Starts ``cmd`` in ``pod`` as PID 1 of a new PID namespace, output captured."""
        proc = subprocess.Popen(
            ["nsenter", f"--net=/proc/{pod.sandbox.pid}/ns/net", "--"]
            + ["unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--"]
            + ["sh", "-c", _POD_INIT, "pod-init", str(hosts), pod.hostname, *cmd],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        return Chain(proc)


def pid1_command(chain: Chain, timeout: float = 10) -> list[str]:
    """PID 1's command line once the pod's init has exec'd the container command."""
    deadline = time.monotonic() + timeout
    while True:
        argv = Path(f"/proc/{chain.pid1}/cmdline").read_bytes().split(b"\0")[:-1]
        # Before its exec the namespace's first process is a copy of unshare, then sh;
        # in the middle of an execve its cmdline reads empty for a moment.
        if argv[:1] not in ([], [b"unshare"], [b"sh"]) or time.monotonic() > deadline:
            return [a.decode() for a in argv]
        time.sleep(0.01)


def signal_pid1(chain: Chain, sig: signal.Signals) -> float:
    """Sends ``sig`` to the pod's PID 1 (as the kubelet does to the container); returns when."""
    os.kill(chain.pid1, sig)
    return time.monotonic()


def pod_env(pod) -> dict[str, str]:
    """The container's env as the kubelet resolves it (values and fieldRefs)."""
    (ctr,) = pod.spec.containers
    env = {}
    for e in ctr.env or []:
        if e.value_from is None:
            env[e.name] = e.value or ""
            continue
        path = e.value_from.field_ref.field_path
        m = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", path)
        assert m or path == "metadata.name", path
        env[e.name] = getattr(pod.metadata, m[1])[m[2]] if m else pod.metadata.name
    return env
