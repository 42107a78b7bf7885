"""An upstream controller manager (JobSet's, Kueue's) run as a process against kube-cp.

What both share: a CA and a serving cert for 127.0.0.1 of ours, the manager started on
fresh ports (again when one was taken before it bound it), ``/readyz`` waited for on
its probe port, its webhook configurations registered by ``url`` + ``caBundle``, and
the wait until the apiserver's informer calls them. Each subclass says its command,
its webhook configurations and what proves a webhook admits (tests/real_jobset.py,
tests/real_kueue.py say why each is run so).
"""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from ports import free_port, start_on_free_ports
from real_kube import ControlPlane, wait_for
from webhook_certs import write_certs

from spottrain.testing.ports import listening_ports

READY_SECONDS = 180


def to_loopback(hooks: list[dict], port: int, ca_pem: bytes) -> None:
    """Points upstream's webhooks (each naming a Service path) at 127.0.0.1:``port``,
    trusted through ``ca_pem``: kube-cp has no Service routing (tests/real_jobset.py)."""
    import base64

    for hook in hooks:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca_pem).decode(),
        }


class ControllerManager:
    """One running manager against ``cp``, webhooks registered; ``stop()`` ends it."""

    name = "manager"

    def __init__(self, cp: ControlPlane, workdir: Path):
        from kubernetes import client as k8s

        self.cp, self.workdir = cp, workdir
        self.certs = workdir / f"{self.name}-certs"
        ca_pem = write_certs(self.certs)
        started = time.monotonic()
        # Its ports go in its config: picked, released, bound by it. One taken
        # meanwhile ("address already in use") costs a start on fresh ones.
        start_on_free_ports(self._start, self.name)
        self.ready_seconds = time.monotonic() - started
        try:
            admission = k8s.AdmissionregistrationV1Api(cp.admin)
            for doc in self.webhook_configurations(ca_pem):
                if doc["kind"] == "MutatingWebhookConfiguration":
                    admission.create_mutating_webhook_configuration(doc)
                else:
                    admission.create_validating_webhook_configuration(doc)
            started = time.monotonic()
            wait_for(f"the {self.name} webhooks admitting", self.admits, timeout=60, every=0.2)
            self.admitting_seconds = time.monotonic() - started
        except BaseException:
            self.stop()
            raise

    def command(self) -> list[str]:
        """The manager's command line, its ports ``self.webhook_port``/``probe_port``."""
        raise NotImplementedError

    def webhook_configurations(self, ca_pem: bytes) -> list[dict]:
        """Its webhook configurations, pointed at 127.0.0.1:``self.webhook_port``."""
        raise NotImplementedError

    def admits(self) -> bool:
        """Whether a dry-run request came back changed by its mutating webhook."""
        raise NotImplementedError

    def _start(self) -> None:
        self.webhook_port, self.probe_port = free_port(), free_port()
        self.log_path = self.workdir / f"{self.name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """Until /readyz answers (the certs loaded, the webhook server listening)."""

        def ready():
            if self.proc.poll() is not None:
                tail = self.log()[-3000:]
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{tail}")
            try:
                url = f"http://127.0.0.1:{self.probe_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status != 200:
                        return False
            except OSError:
                return False
            # Another process on a port of ours may have answered: ours then exits.
            owned = listening_ports(self.proc.pid)
            return owned is None or {self.probe_port, self.webhook_port} <= owned

        wait_for(f"{self.name} /readyz", ready, timeout=READY_SECONDS, every=0.5)
        # The webhook server itself answers TLS with our cert on 127.0.0.1.
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        with socket.create_connection(("127.0.0.1", self.webhook_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
