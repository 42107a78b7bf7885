"""The launcher's control loop: create or re-attach, follow, fail over, clean up.

The Job controller does the retrying (``podFailurePolicy``, see ``manifests``); the
launcher only reads the outcome, moves the work to the on-demand placement when spot
capacity does not come or its budget is used up, and removes what it created when
the run is cancelled or it gives up.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from spottrain.runtime.gke_job import kube as kube_mod
from spottrain.runtime.gke_job import manifests, names, recreate, status
from spottrain.runtime.gke_job.logs import ChiefLog
from spottrain.runtime.gke_job.starting import START_FAILURE_SECONDS, StartWatch
from spottrain.runtime.gke_job.stuck import StuckPods
from spottrain.runtime.train_job.attempts import PodAttempt, from_pod
from spottrain.trainer import preemption

log = logging.getLogger(__name__)

# Consecutive failed polls (API unreachable) tolerated before the launcher exits
# UNAVAILABLE; its KFP retry re-attaches to the Job, which runs on meanwhile.
API_FAILURES_TOLERATED = 30


@dataclass
class Outcome:
    """How the launcher ended."""

    code: int
    message: str
    job: str = ""
    failed_over: bool = False
    attempts: list[PodAttempt] = field(default_factory=list)
    recreations: int = 0


class Cancelled(Exception):
    """The launcher got SIGTERM."""


@dataclass
class _Ended:
    kind: str  # complete | fatal | exhausted | unschedulable | failed
    code: int
    message: str


class Launcher:
    """Runs ``gangs`` in order (spot, then on-demand) until one finishes.

    Args:
        kube: A :class:`kube.Kube`.
        gangs: The spot gang, optionally followed by the on-demand one.
        unschedulable_seconds: How long a spot gang's pods may wait for a node
            before the work moves to the next gang.
        poll_seconds: Seconds between two looks at the Job.
        now: The current time (UTC datetime).
        keep_on_cancel: Called on SIGTERM; ``True`` keeps the Job running (the
            launcher's own pod is being disrupted: its retry re-attaches).
        sink: Where the chief's log lines go.
    """

    def __init__(
        self,
        kube,
        gangs: Sequence[manifests.Gang],
        *,
        unschedulable_seconds: float,
        poll_seconds: float = 10.0,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        keep_on_cancel: Callable[[], bool] = lambda: False,
        sink: Callable[[str], None] = print,
        start_failure_seconds: float = START_FAILURE_SECONDS,
    ):
        if not gangs:
            raise ValueError("no gang to run")
        self.kube = kube
        self.gangs = list(gangs)
        self.unschedulable_seconds = unschedulable_seconds
        self.poll_seconds = poll_seconds
        self.now = now
        self.keep_on_cancel = keep_on_cancel
        self.stop = threading.Event()
        self.logs = ChiefLog(kube, sink)
        self.attempts: dict[str, PodAttempt] = {}
        self._node_kinds: dict[str, str] = {}
        self._nodes_readable = True
        self.starts = StartWatch(start_failure_seconds)
        self.stuck = StuckPods(kube)
        self.recreations = 0
        self._may_recreate = True
        self.idle = recreate.IdleGangs()

    # -- the whole run -------------------------------------------------------------
    def run(self) -> Outcome:
        """Runs to the end; never raises for a Job that failed (see ``Outcome.code``).

        Raises:
            kube.KubeError: an API error that retrying cannot fix.
        """
        first = self._reattach_point()
        current = self.gangs[first]
        try:
            for earlier in self.gangs[:first]:
                # A fall-back interrupted between its marker and the spot Job's end:
                # finish removing it, so that two gangs never share the checkpoint dir.
                if self.kube.read_job(earlier.name) is not None:
                    log.warning("removing %s: an earlier attempt moved on", earlier.name)
                    self._remove(earlier, wait=True)
            for i in range(first, len(self.gangs)):
                current = self.gangs[i]
                if self.stop.is_set():
                    raise Cancelled
                self._ensure(current)
                last = i == len(self.gangs) - 1
                ended = self._follow(current, may_move=not last)
                if ended.kind in ("exhausted", "unschedulable") and not last:
                    following = self.gangs[i + 1]
                    log.warning("%s; moving to %s", ended.message, following.name)
                    # The next gang's Service first: it marks the move, so a retry of
                    # this launcher that starts before the next Job exists goes on
                    # from there instead of back to the spot pool.
                    self._create(
                        following, self.kube.read_service, self.kube.create_service,
                        manifests.service(following), "Service",
                    )  # fmt: skip
                    self._remove(current, wait=True)
                    continue
                if ended.kind == "complete":
                    self.kube.delete_service(current.name)  # the Job stays until its TTL
                else:
                    self._remove(current)
                return self._outcome(ended, current, failed_over=i > 0)
        except Cancelled:
            if self.keep_on_cancel():
                msg = f"launcher stopped; its pod is being disrupted, Job {current.name} runs on"
            else:
                self._remove(current)
                msg = f"cancelled: deleted Job and Service {current.name}"
            return self._outcome(_Ended("cancelled", preemption.PREEMPTED, msg), current)
        raise AssertionError("unreachable")

    def _outcome(self, ended: _Ended, gang: manifests.Gang, failed_over=False) -> Outcome:
        self.logs.join()
        return Outcome(
            code=ended.code,
            message=ended.message,
            job=gang.name,
            failed_over=failed_over,
            attempts=sorted(self.attempts.values(), key=lambda a: (a.started or 0, a.index or 0)),
            recreations=self.recreations,
        )

    def _reattach_point(self) -> int:
        """The gang to start from: the furthest one whose Job or Service exists.

        Either was made by an earlier attempt of this launcher (names are per run
        and task); a Service alone marks a fall-back that was cut off before its Job.
        """
        for i in reversed(range(len(self.gangs))):
            gang = self.gangs[i]
            if self.kube.read_job(gang.name) is not None:
                return i
            if i and self.kube.read_service(gang.name) is not None:
                return i
        return 0

    # -- create or re-attach ---------------------------------------------------------
    def _owned(self, obj: dict, gang: manifests.Gang, what: str) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(names.GANG_LABEL) != gang.name:
            raise kube_mod.KubeError(
                preemption.FATAL_CONFIG,
                f"{what} {gang.name} exists but was not created for this task (label "
                f"{names.GANG_LABEL} is {labels.get(names.GANG_LABEL)!r}): delete it or "
                "rename the task",
            )

    def _create(self, gang, read, create, manifest, what) -> None:
        existing = read(gang.name)
        if existing is not None:
            self._owned(existing, gang, what)
            log.info("re-attaching to %s %s (created by an earlier attempt)", what, gang.name)
            return
        try:
            create(manifest)
            log.info("created %s %s", what, gang.name)
        except kube_mod.KubeError as err:
            cause = err.__cause__
            if getattr(cause, "status", None) != 409:
                raise
            existing = read(gang.name)  # created meanwhile: ours only if labelled so
            if existing is None:
                raise
            self._owned(existing, gang, what)

    def _ensure(self, gang: manifests.Gang) -> None:
        # The Service first: pods resolve each other through it from their start.
        self._create(
            gang, self.kube.read_service, self.kube.create_service,
            manifests.service(gang), "Service",
        )  # fmt: skip
        existing = self.kube.read_job(gang.name)
        budget = recreate.marked(existing)
        if budget is not None:
            # An earlier attempt of this launcher was recreating the Job: finish it.
            log.warning("Job %s is being recreated by an earlier attempt: finishing", gang.name)
            self._replace(gang, budget)
            return
        try:
            if status.being_deleted(existing):
                # Its pods are going: following it would only end when it vanishes.
                raise kube_mod.KubeError(
                    preemption.FATAL_CONFIG,
                    f"Job {gang.name} is being deleted, not by this launcher (it marks "
                    "its own): not re-attaching; run the pipeline again to train on from "
                    "the checkpoints",
                )
            self._create(gang, self.kube.read_job, self.kube.create_job, manifests.job(gang), "Job")
        except kube_mod.KubeError as err:
            if err.code in preemption.FATAL:
                # The run ends here; a Service needs no Job to exist, so ours would stay.
                self._delete_service_quietly(gang.name)
            raise

    def _delete_service_quietly(self, name: str) -> None:
        try:
            self.kube.delete_service(name)
        except kube_mod.KubeError as err:
            log.warning("Service %s left behind: %s", name, err)

    # -- follow ------------------------------------------------------------------------
    def _follow(self, gang: manifests.Gang, may_move: bool) -> _Ended:
        """Polls the Job until it ends (or, ``may_move``, its pods wait too long)."""
        failures = 0
        while True:
            if self.stop.is_set():
                raise Cancelled
            try:
                job = self.kube.read_job(gang.name)
                pods = self.kube.list_pods(gang.selector) if job is not None else []
            except kube_mod.KubeError as err:
                if err.code != preemption.UNAVAILABLE or failures >= API_FAILURES_TOLERATED:
                    raise
                failures += 1
                log.warning("%s (attempt %d of %d)", err, failures, API_FAILURES_TOLERATED)
                self.stop.wait(self.poll_seconds)
                continue
            failures = 0
            if job is None:
                return _Ended(
                    "failed",
                    preemption.FATAL_CONFIG,
                    f"Job {gang.name} was deleted by someone else while the launcher followed it",
                )
            self._note(gang, pods)
            self.logs.update(pods)
            finished = status.job_finished(job)
            if finished is not None:
                return self._ended(gang, *finished)
            cannot = self.starts.cannot_start(gang.name, pods, self.now())
            if cannot is not None:
                return _Ended("fatal", preemption.FATAL_CONFIG, cannot)
            self.stuck.sweep(pods, self.now())
            why = self.idle.look(job, pods, self.now(), self.poll_seconds)
            if why and self._recreate(gang, job, why):
                continue
            waiting = self.starts.unschedulable_for(pods, self.now()) if may_move else None
            if waiting is not None and waiting >= self.unschedulable_seconds:
                return _Ended(
                    "unschedulable",
                    preemption.UNAVAILABLE,
                    f"Job {gang.name}: pods unschedulable for {waiting:.0f} s (limit "
                    f"{self.unschedulable_seconds:.0f} s): no {gang.placement.pool} capacity",
                )
            self.stop.wait(self.poll_seconds)

    def _ended(self, gang: manifests.Gang, kind: str, reason: str) -> _Ended:
        mine = [a for a in self.attempts.values() if a.job == gang.name]
        if kind == "Complete":
            return _Ended("complete", preemption.OK, f"Job {gang.name} complete")
        fatal = [a.exit_code for a in mine if a.exit_code in preemption.FATAL]
        if reason == "PodFailurePolicy" and fatal:
            code = fatal[-1]
            return _Ended(
                "fatal", code, f"Job {gang.name} failed: exit {code}: {preemption.describe(code)}"
            )
        codes = [a.exit_code for a in mine if a.exit_code]
        code = codes[-1] if codes and preemption.is_retryable(codes[-1]) else preemption.PEER_LOST
        if reason == "BackoffLimitExceeded":
            return _Ended(
                "exhausted",
                code,
                f"Job {gang.name} used up its retries "
                f"({gang.placement.job_backoff_limit(gang.workers)} counted pod failures; "
                f"last exit {codes[-1] if codes else 'none'})",
            )
        if reason == "DeadlineExceeded":
            # The run's deadline passed: another attempt would only pass it again.
            return _Ended(
                "failed",
                preemption.FATAL_CONFIG,
                f"Job {gang.name} passed its run deadline (activeDeadlineSeconds="
                f"{gang.deadline_seconds}) before finishing",
            )
        return _Ended("failed", code if codes else preemption.FATAL_CONFIG,
                      f"Job {gang.name} failed ({reason or 'no reason given'})")  # fmt: skip

    def _note(self, gang: manifests.Gang, pods: list[dict]) -> None:
        for pod in pods:
            if not status.is_done(pod):
                continue
            meta = pod["metadata"]
            uid = meta.get("uid") or meta["name"]
            if uid in self.attempts:
                continue
            node = (pod.get("spec") or {}).get("nodeName") or ""
            attempt = from_pod(pod, gang.name, self._node_kind(node))
            self.attempts[uid] = attempt
            log.info("pod ended: %s", asdict(attempt))

    def _node_kind(self, node: str) -> str:
        if not node or not self._nodes_readable:
            return "unknown"
        if node not in self._node_kinds:
            try:
                self._node_kinds[node] = status.node_kind(self.kube.read_node(node))
            except kube_mod.KubeError as err:
                # Node labels need a ClusterRole; without it the ledger says "unknown".
                log.warning("node kinds unknown: %s", err)
                self._nodes_readable = False
                return "unknown"
        return self._node_kinds[node]

    # -- skip the replacement back-off (see ``recreate``) ------------------------------------
    def _recreate(self, gang: manifests.Gang, job: dict, why: str) -> bool:
        """Deletes and recreates the Job of a gang whose pods all ended; False: left alone."""
        # The Job read again, after this look's pods: the controller moves a pod into the
        # Job's status before it drops the pod's tracking finalizer, so the status read
        # before the pods could miss a failure that ``counted`` no longer shows (a
        # recreation then carried one retry too many: seen with two CPU hogs beside
        # the suite).
        job = self.kube.read_job(gang.name)
        if job is None:
            return False  # gone meanwhile: the next poll says by whom
        budget = recreate.carried(job, self.now())
        if budget is None or not self._may_recreate:
            return False  # nothing left over: the controller ends the Job as it would
        try:
            # The mark first: a launcher restarted mid-way finishes the recreation.
            if self.kube.annotate_job(gang.name, {recreate.ANNOTATION: json.dumps(budget)}) is None:
                return False  # gone meanwhile: the next poll says by whom
        except kube_mod.KubeError as err:
            if err.code == preemption.UNAVAILABLE:
                return False  # the next poll tries again
            # A role from before `patch` was granted: the back-off stays (make gke-rbac).
            log.warning("not recreating Job %s to skip its back-off: %s", gang.name, err)
            self._may_recreate = False
            return False
        log.warning(
            "Job %s: all its pods ended and %s; recreating it with what it left: "
            "backoffLimit %d, activeDeadlineSeconds %s",
            gang.name, why, budget["backoffLimit"], budget.get("activeDeadlineSeconds", "none"),
        )  # fmt: skip
        self.kube.delete_job(gang.name, propagation="Foreground")
        self._replace(gang, budget)
        return True

    def _replace(self, gang: manifests.Gang, budget: dict) -> None:
        """Waits until the Job being deleted (by us) is gone, then creates it with ``budget``."""
        start, warned = self.now(), False
        while self.kube.read_job(gang.name) is not None:
            self._note(gang, self.kube.list_pods(gang.selector))
            if self.stop.is_set():
                raise Cancelled
            waited = (self.now() - start).total_seconds()
            if not warned and waited > gang.placement.grace_seconds * 4:
                warned = True
                log.warning("Job %s still being deleted after %.0f s; waiting", gang.name, waited)
            self.stop.wait(min(self.poll_seconds, 1.0))
        self._create(
            gang, self.kube.read_job, self.kube.create_job, manifests.job(gang, budget), "Job"
        )
        self.recreations += 1

    # -- clean up ------------------------------------------------------------------------
    def _remove(self, gang: manifests.Gang, wait: bool = False) -> None:
        """Deletes the Job (and its pods) and the Service.

        ``wait``: until no pod of the gang is left (Foreground deletion), so that two
        gangs never train on one checkpoint dir at once.
        """
        self.kube.delete_job(gang.name, propagation="Foreground" if wait else "Background")
        self.kube.delete_service(gang.name)
        if not wait:
            return
        limit = gang.placement.grace_seconds * 4
        start = self.now()
        while (self.now() - start).total_seconds() < limit:
            pods = self.kube.list_pods(gang.selector)
            self._note(gang, pods)
            if not pods or self.stop.is_set():
                return
            self.stop.wait(min(self.poll_seconds, 5.0))
        log.warning("pods of %s still terminating after %d s; going on", gang.name, limit)


def install_sigterm(launcher: Launcher):
    """SIGTERM (KFP run cancelled, or the launcher's pod going away) stops the loop.

    The handler only sets a flag: the loop notices it at once (it waits on it) and
    cleans up in the main thread. Returns the previous handler.
    """

    def _handler(signum, _frame):
        log.warning("%s: stopping the launcher", signal.Signals(signum).name)
        launcher.stop.set()

    return signal.signal(signal.SIGTERM, _handler)
