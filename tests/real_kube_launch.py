"""Helpers for driving the Job-engine launcher against kube-cp (``real_kube``).

Shared by tests/test_gke_job_real_kube.py and tests/test_gke_job_backoff_real_kube.py.
"""

from __future__ import annotations

import threading
import time

from real_kube import ControlPlane, wait_for

from spottrain.pipelines.placement import Placement
from spottrain.runtime.gke_job import control, kube, manifests, names

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def gangs(ns, run, gpu="nvidia-tesla-t4", workers=2, retries=2, on_demand=True):
    spot = Placement(pool="spot", gpu_type=gpu, gpu_count=1, retries=retries)
    common = dict(
        namespace=ns, image="trainer:test", args=("--train-steps", "10"), workers=workers,
        deadline_seconds=3600,
    )  # fmt: skip
    out = [manifests.Gang(name=names.job_name(run, "train"), placement=spot, **common)]
    if on_demand:
        out.append(
            manifests.Gang(
                name=names.job_name(run, "train", on_demand=True),
                placement=spot.with_(pool="on-demand", taint=None),
                **common,
            )
        )
    return out


def launcher(client, ns, gs, lines=None, **kwargs):
    from kubernetes import client as k8s

    kwargs.setdefault("unschedulable_seconds", 300)
    return control.Launcher(
        kube.Kube(k8s.BatchV1Api(client), k8s.CoreV1Api(client), ns),
        gs,
        poll_seconds=0.5,
        sink=(lines.append if lines is not None else lambda line: None),
        **kwargs,
    )


class Background:
    """``Launcher.run`` in a thread."""

    def __init__(self, launch: control.Launcher):
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

    def result(self, timeout=120.0) -> control.Outcome:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.launcher.stop.set()
            raise AssertionError(f"the launcher did not end in {timeout:.0f} s")
        if self.error is not None:
            raise self.error
        return self.outcome


def pods(cp: ControlPlane, ns, job):
    return cp.core().list_namespaced_pod(ns, label_selector=f"{JOB_NAME_LABEL}={job}").items


def running(cp, ns, job, count, timeout=60.0):
    """Waits for ``count`` live Running pods of ``job``; returns them by index."""

    def live():
        found = [
            p
            for p in pods(cp, ns, job)
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]
        return found if len(found) == count else None

    found = wait_for(f"{count} running pods of {job}", live, timeout)
    return sorted(found, key=lambda p: int(p.metadata.annotations[names.INDEX_ANNOTATION]))


def _gone(read, name, ns) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read(name, ns)
    except ApiException as err:
        return err.status == 404
    return False


def job_gone(cp, ns, job):
    return _gone(cp.batch().read_namespaced_job, job, ns)


def service_gone(cp, ns, name):
    return _gone(cp.core().read_namespaced_service, name, ns)


def condition_types(job) -> list[str]:
    return [c.type for c in (job.status.conditions or []) if c.status == "True"]


class JobWatcher:
    """Polls a Job (as admin) and records when each condition first appeared."""

    def __init__(self, cp, ns, name):
        self.cp, self.ns, self.name = cp, ns, name
        self.first: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from kubernetes.client.exceptions import ApiException

        while not self.stop.is_set():
            try:
                job = self.cp.batch().read_namespaced_job(self.name, self.ns)
                for kind in condition_types(job):
                    self.first.setdefault(kind, time.monotonic())
            except ApiException:
                pass
            self.stop.wait(0.1)

    def done(self):
        self.stop.set()
        self.thread.join(5)
        return self.first
