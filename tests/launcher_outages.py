"""One API outage played against the real JobSet launcher on kube-cp (tests and bench).

The launcher's requests go through a :class:`wire_faults.WireProxy` to kube-cp's
apiserver; JobSet's controller, the Job controller and the fake kubelet talk to the
apiserver directly, so the gang runs on through the outage, as on GKE when only the
launcher's path to the control plane fails.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from real_jobset import Background, child_jobs, gone, namespace, running_pods, wait_in, worker_set
from wire_faults import PASS, WireProxy, api_client_via

from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.kube import KubeError


@dataclass
class Played:
    """What the launcher did: its code and line, and what became of the gang."""

    kind: str
    phase: str
    seconds: float
    code: int | None = None
    line: str = ""
    retried: int = 0  # the kube module's "trying again" warnings for this JobSet
    urllib3: list[str] = field(default_factory=list)  # urllib3's own (its "Retrying")
    answered_again: bool = False
    same_gang: bool = False  # its one child Job is the one made before the outage
    restarts: int = 0
    kept: bool = False  # the JobSet is still there (the retry re-attaches)
    took: float = 0.0
    lines: list[str] = field(default_factory=list)


class _Records(logging.Handler):
    """The kube module's warnings, with the thread that logged them (one launcher's)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, str]] = []

    def emit(self, record):
        self.records.append((record.thread, record.getMessage()))

    def of(self, thread) -> list[str]:
        return [message for ident, message in self.records if ident == thread.ident]


def play(
    cp, ns, name, kind, phase, seconds, *, patience, request_timeout=(1.0, 2.0), delay=1.0
) -> Played:
    """Runs the launcher with the API ``kind`` of down for ``seconds`` at ``phase``.

    ``phase``: ``start`` (down before the launcher starts) or ``mid`` (down once the
    gang runs; the gang finishes during the outage). ``seconds`` None: down for good.
    """
    namespace(cp, ns)
    server = urlparse(cp.server)
    proxy = WireProxy((server.hostname, server.port), delay=delay)
    client = api_client_via(cp.admin, proxy)
    k = kube.from_client(client, ns, patience=patience, request_timeout=request_timeout)
    records, wire = _Records(), _Records()
    logging.getLogger(kube.__name__).addHandler(records)
    logging.getLogger("urllib3").addHandler(wire)
    played = Played(kind, phase, seconds if seconds is not None else float("inf"))
    run = None
    try:
        started = time.monotonic()
        if phase == "start":
            proxy.set(kind)
        quiet = dict(say=played.lines.append, chief_log=lambda line: None)
        run = Background(
            launcher.JobSetLauncher(k, worker_set(ns, name), poll_seconds=0.5, **quiet)
        )
        if phase == "start" and seconds is not None:
            time.sleep(seconds)
            proxy.set(PASS)
        if phase == "start" and seconds is None:
            return _ended(played, run, cp, ns, name, started, patience, None)
        (job,) = wait_in(cp, ns, "the child Job", lambda: child_jobs(cp, ns, name), timeout=120)
        pods = running_pods(cp, ns, job.metadata.uid, 2)
        if phase == "mid":
            proxy.set(kind)
            if seconds is None:
                return _ended(played, run, cp, ns, name, started, patience, job.metadata.uid)
            time.sleep(seconds / 2)
        for pod in pods:  # the gang finishes (during a mid-run outage)
            cp.kubelet.exit(pod, 0)
        if phase == "mid":
            time.sleep(seconds / 2)
            proxy.set(PASS)
        return _ended(played, run, cp, ns, name, started, patience, job.metadata.uid)
    finally:
        logging.getLogger(kube.__name__).removeHandler(records)
        logging.getLogger("urllib3").removeHandler(wire)
        played.urllib3 = wire.of(run.thread) if run else []
        said = records.of(run.thread) if run else []
        played.retried = sum("trying again" in m for m in said)
        played.answered_again = any("answers again" in m for m in said)
        proxy.close()
        client.close()


def _ended(played, run, cp, ns, name, started, patience, job_uid) -> Played:
    try:
        out = run.result(timeout=patience + 180)
        played.code, played.line, played.restarts = out.code, out.message, out.restarts
    except KubeError as err:
        played.code, played.line = err.code, str(err)
    played.took = time.monotonic() - started
    played.kept = not gone(cp, ns, name)
    played.same_gang = [j.metadata.uid for j in child_jobs(cp, ns, name)] == [job_uid]
    return played
