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

import base64
import copy
import datetime
import ipaddress
import json
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from real_kube import REPO, ControlPlane, wait_for

JOBSET_MANAGER = REPO / ".tools" / "bin" / "jobset-manager"
JOBSET_CONFIG = REPO / ".tools" / "jobset-config"  # upstream's config/components
NO_JOBSET = (
    "needs .tools/bin/jobset-manager and .tools/jobset-config"
    " (`make jobset`: a Go toolchain and the Go module proxy)"
)
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
READY_SECONDS = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_certs(cert_dir: Path) -> bytes:
    """A CA and a serving cert for IP 127.0.0.1 (``tls.crt``/``tls.key``, the file names
    controller-runtime's webhook server reads); returns the CA's PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject, issuer, public_key, signing_key, ca: bool):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            ).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return b.sign(signing_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = build("jobset-test-ca", "jobset-test-ca", ca_key.public_key(), ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = build("127.0.0.1", "jobset-test-ca", key.public_key(), ca_key, ca=False)
    cert_dir.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    (cert_dir / "tls.crt").write_bytes(leaf.public_bytes(pem))
    (cert_dir / "tls.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (cert_dir / "ca.crt").write_bytes(ca.public_bytes(pem))
    return ca.public_bytes(pem)


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
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
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


class JobSetManager:
    """One running jobset-manager against ``cp``, webhooks registered; ``stop()`` ends it."""

    def __init__(self, cp: ControlPlane, workdir: Path, src: Path = JOBSET_CONFIG):
        from kubernetes import client as k8s

        self.cp, self.workdir = cp, workdir
        self.webhook_port, self.probe_port = _free_port(), _free_port()
        self.refused_before_ready: list[str] = []  # webhook calls refused after /readyz
        ca_pem = _write_certs(workdir / "webhook-certs")
        config = workdir / "jobset-config.yaml"
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
                        "certDir": str(workdir / "webhook-certs"),
                    },
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"},
                    "metrics": {"bindAddress": "0"},  # off: not needed, and one port less
                }
            )
        )
        self.log_path = workdir / "jobset-manager.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(JOBSET_MANAGER), f"--config={config}", f"--kubeconfig={cp.kubeconfig}"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
            self.ready_seconds = time.monotonic() - started
            admission = k8s.AdmissionregistrationV1Api(cp.admin)
            for doc in webhook_configurations(self.webhook_port, ca_pem, src):
                if doc["kind"] == "MutatingWebhookConfiguration":
                    admission.create_mutating_webhook_configuration(doc)
                else:
                    admission.create_validating_webhook_configuration(doc)
            self._wait_admitting()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """main.go:273-283: /readyz answers once the certs are loaded and the webhook
        server listens."""

        def ready():
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"jobset-manager exited {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2
                ) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for("jobset-manager /readyz", ready, timeout=READY_SECONDS, every=0.5)
        # The webhook server itself answers TLS with our cert on 127.0.0.1.
        ctx = ssl.create_default_context(cafile=str(self.workdir / "webhook-certs" / "ca.crt"))
        with socket.create_connection(("127.0.0.1", self.webhook_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                pass

    def _wait_admitting(self) -> None:
        """The apiserver loads webhook configurations through an informer: wait until a
        dry-run JobSet comes back defaulted by the mutating webhook
        (``pkg/webhooks/jobset_webhook.go:134-136``)."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        probe = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "JobSet",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"replicatedJobs": []},
        }
        api = k8s.CustomObjectsApi(self.cp.admin)

        def defaulted():
            try:
                got = api.create_namespaced_custom_object(
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

        started = time.monotonic()
        wait_for("the JobSet webhooks admitting", defaulted, timeout=60, every=0.2)
        self.admitting_seconds = time.monotonic() - started

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
