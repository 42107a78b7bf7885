"""The JobSet engine's launcher: observe → decide → act, until the JobSet ends.

Each look reads the JobSet and its pods (:mod:`.observe`), :func:`decide.decide`
picks one action, and this module does it: create the JobSet, say a line, delete it,
or end with an exit code. The JobSet controller restarts the gang and keeps
``status.restarts``; the launcher holds no budget of its own, so a launcher killed at
any point and started again (a KFP retry of its pod) re-attaches by name and changes
nothing: it never makes a second JobSet and never buys restarts.

The one rule of capacity that stays ours: on a plain spot pool (no ComputeClass to
move the pods), a gang that gets no capacity or uses up its restarts moves to the
on-demand pool's JobSet, from the same checkpoint dir. With ``finish_by`` the deadline
may move it too, and, the run being ahead, take it from on-demand back to a new spot
gang, and from there on to a new on-demand gang again (issue 56). Each gang is a
JobSet of its own (``names.gang_name``: gang 0 the spot one, 1 on-demand, 2 spot, ...).
A move either way is one path, ordered so that a launcher killed in the middle of it
finishes it when started again, and two gangs never train at once: the next JobSet
is created suspended (no pods; JobSet's own ``spec.suspend``), the current one is
deleted and waited for, then the next resumed. A launcher started again finds the
furthest gang among the JobSets of the task's labels.

A JobSet names the launcher that follows it (``HOLDER_ANNOTATION``): a launcher that
re-attaches claims it, and one that finds another's name there leaves it alone, so an
older launcher still ending (its pod deleted while KFP's retry already runs) never
deletes the gang the newer one follows.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from spottrain.runtime.train_job import attempts, names, queue, status
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import kube as k8s
from spottrain.runtime.train_job.attempts import PodAttempt
from spottrain.runtime.train_job.kube import KubeError
from spottrain.runtime.train_job.logs import ChiefLog
from spottrain.runtime.train_job.observe import (
    EVICTIONS_SAID_ANNOTATION,
    HOLDER_ANNOTATION,
    JOBSET_NAME_LABEL,
    RUN_STARTED_ANNOTATION,
    evictions_annotation,
    evictions_said,
    generation,
    is_ours,
    observe,
    run_started,
    start_failures,
)

log = logging.getLogger(__name__)

# A pod's terminationGracePeriodSeconds when its spec gives none (Kubernetes' default).
DEFAULT_GRACE_S = 30.0
# Kept of the grace after a SIGTERM for the last line and the exit.
GRACE_KEPT_S = 3.0
# The child Jobs' activeDeadlineSeconds is the run's deadline left plus this: the
# launcher's own check acts first; the Job's bounds a gang whose launcher is gone.
ORPHAN_SLACK_S = 600.0


@dataclass
class Outcome:
    """How the run ended: ``code`` (the launcher's exit code) and its ``message``.

    ``jobset`` names the JobSet it ended with (``moved``: after a move, either way);
    ``restarts``/``restarts_counted`` are its status at the last look; ``attempts``
    every pod seen ending (its gang: ``<jobset>/<restart attempt>``).
    """

    code: int
    message: str
    jobset: str = ""
    moved: bool = False
    restarts: int = 0
    restarts_counted: int = 0
    attempts: list[PodAttempt] = field(default_factory=list)


def ours(ws: js.WorkerSet) -> dict[str, str]:
    """The labels that make a JobSet this task's (not the attempt: retries re-attach)."""
    labels = ws.all_labels()
    labels.pop(js.ATTEMPT_LABEL, None)
    return labels


def default_holder() -> str:
    """This launcher's name on the JobSet: its pod (a KFP retry is a new pod), its pid."""
    return f"{k8s.own_pod_name() or socket.gethostname()}/{os.getpid()}"


class JobSetLauncher:
    """Runs one :class:`jobset.WorkerSet` as a JobSet to its end.

    Args:
        kube: A :class:`kube.Kube` (it waits out an unanswering API server).
        sets: The gang, or the spot gang and then the on-demand one it may move to.
        settings: The run's :class:`decide.Settings`, its deadlines (a run's are
            made from its inputs: ``inputs.GangInputs.launcher_settings``); default:
            ``decide.Settings()``.
        poll_seconds: Seconds between two looks.
        clock: Epoch seconds (the API's timestamps are compared with it).
        own_pod_disrupted: Called on SIGTERM; ``True`` keeps the JobSet (the
            launcher's own pod is going; its retry re-attaches).
        say: Where the progress lines go.
        chief_log: Where the chief pod's log lines go (the KFP task log), each
            generation's chief followed from its start.
        holder: This launcher's name on the JobSet (default: :func:`default_holder`).
        for_deadline: Asked each look while a move is left (to on-demand from a spot
            gang, back to spot from an on-demand gang a move made), with ``sets``, the
            current gang's kind (0 spot, 1 on-demand), whether it trains (``running``)
            and how long its pods have been Unschedulable (``waited_s``): the move the
            deadline needs or allows now (:class:`.deadline.Due`: its reason and the
            kind it goes to, an index of ``sets``), or no move
            (:class:`.deadline.DeadlineCheck`; ``None``: no deadline).
        moved: Called with the reason, the gang left and the next, as a move begins
            (the ledger's ``moves``).
        grace_s: The launcher pod's own termination grace: after a SIGTERM every API
            call ends within what is left of it (:meth:`kube.Kube.hurry`).
    """

    def __init__(
        self,
        kube,
        sets: js.WorkerSet | Sequence[js.WorkerSet],
        *,
        settings: d.Settings | None = None,
        poll_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
        own_pod_disrupted: Callable[[], bool] = lambda: False,
        say: Callable[[str], None] = print,
        chief_log: Callable[[str], None] = print,
        holder: str = "",
        for_deadline: Callable[..., tuple[str, int | None]] | None = None,
        moved: Callable[[str, js.WorkerSet, js.WorkerSet], None] = lambda *_: None,
        grace_s: float = DEFAULT_GRACE_S,
    ):
        self.kube = kube
        self.grace_s = grace_s
        self.for_deadline = for_deadline
        self.moved = moved
        self.holder = holder or default_holder()
        self.sets = [sets] if isinstance(sets, js.WorkerSet) else list(sets)
        self.gang = 0  # the run's gang now: even on sets[0]'s kind, odd on sets[1]'s
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.own_pod_disrupted = own_pod_disrupted
        self.say = say
        self.stop = threading.Event()
        self.settings = settings or d.Settings()
        self.memory = self._memory_on(0)
        self.attempts: dict[str, PodAttempt] = {}
        self.run_started: float | None = None
        self._nodes: dict[str, dict | None] = {}
        self._starts: dict[str, float] = {}
        self.logs = ChiefLog(kube, chief_log)
        # Why Kueue took the gang back, while it waits for readmission: a pod that ends
        # meanwhile was stopped by Kueue, which leaves no condition on it.
        self._evicted = ""
        # Kueue's count of the gang's evictions at the last look (queue.evictions): one
        # readmitted since leaves no Evicted to see, only a higher count.
        self._counted: dict[str, int] | None = None
        self._running: dict[str, dict] = {}  # pods last seen running, by uid

    @property
    def ws(self) -> js.WorkerSet:
        """The gang being run now."""
        return self.gang_set(self.gang)

    @property
    def kind(self) -> int:
        """The current gang's kind: its template in ``sets`` (0 spot, 1 on-demand)."""
        return self.gang % len(self.sets)

    def gang_set(self, k: int) -> js.WorkerSet:
        """The run's gang ``k``: ``sets[k]``, then new gangs of their kinds in turn.

        A move back to spot and on again makes gangs 2, 3, ...: ``sets[k % 2]`` under a
        name of its own (:func:`names.gang_name`) and its number in the run.
        """
        if k < len(self.sets):
            return self.sets[k]
        template = self.sets[k % len(self.sets)]
        attempt = None if template.attempt is None else k + 1
        return replace(template, name=names.gang_name(self.sets[0].name, k), attempt=attempt)

    def _memory_on(self, k: int, *, moved: bool = False) -> d.Memory:
        """The memory of a launcher starting on gang ``k``: which moves it may make."""
        two = len(self.sets) > 1
        return d.Memory(moves_left=int(two and k % 2 == 0), can_return=two and k % 2 == 1,
                        moved=moved)  # fmt: skip

    def run(self) -> Outcome:
        """Runs to the end; a failed JobSet is an :class:`Outcome`, not an exception.

        Raises:
            KubeError: an API error that retrying cannot fix (or no JobSet API).
        """
        try:
            return self._run()
        except KubeError as err:
            if not self.stop.is_set():
                raise
            raise KubeError(err.code, f"{err}; {self._left_behind()}") from err.__cause__

    def stopping(self) -> None:
        """SIGTERM: the looks end, and every call from now on within the grace left."""
        self.stop.set()
        self.kube.hurry(time.monotonic() + max(1.0, self.grace_s - GRACE_KEPT_S))

    def _left_behind(self) -> str:
        """What becomes of the gang a stopping launcher could not delete."""
        bound = self._active_deadline()
        until = (
            f"its Jobs fail at their activeDeadlineSeconds, about {bound:.0f} s from now "
            "(the run's deadline left)"
            if bound is not None
            else "it has no deadline of its own"
        )
        return f"JobSet {self.ws.name} may be left running: {until}, unless a retry re-attaches"

    def _active_deadline(self) -> float | None:
        """The child Jobs' activeDeadlineSeconds: the run's deadline left, and slack."""
        if self.settings.deadline is None:
            return None
        started = self.run_started if self.run_started is not None else self.clock()
        return self.settings.deadline - (self.clock() - started) + ORPHAN_SLACK_S

    def _run(self) -> Outcome:
        self.kube.check_api()
        if self.ws.placement.queue:
            self.kube.check_queue(self.ws.placement.queue)
        self.gang, found = self._reattach_point()
        # Re-attached to a gang a move made and not yet resumed: the looks finish the move.
        suspended = bool(((found or {}).get("spec") or {}).get("suspend"))
        self.memory = self._memory_on(self.gang, moved=self.gang > 0 and suspended)
        first = True
        while True:
            jobset, pods, earlier = self._look()
            if first:
                jobset = self._claim(jobset)
                if jobset is not None and is_ours(jobset, ours(self.ws)):
                    # What an earlier launcher said of Kueue's evictions is not said again.
                    said = evictions_said(jobset)
                    self.memory = replace(self.memory, evictions_said=said)
            workload, local_queue = self._look_at_queue(jobset)
            between = ""
            if workload is not None:
                # Before the pods are noted: those ending now were stopped by Kueue, as
                # were those gone since the last look if Kueue counted an eviction since.
                self._evicted = queue.eviction(workload)
                counted = dict(queue.evictions(workload))
                if self._counted is not None:
                    between = ", ".join(sorted(queue.more(counted, self._counted)))
                self._counted = counted
            self._note(pods, between)
            self.logs.update(pods)
            now = self.clock()
            self._starts = start_failures(pods, self._starts, now)
            if jobset is not None and self.run_started is None:
                self.run_started = run_started(jobset)
            sigterm = self.stop.is_set()
            seen = observe(
                jobset, pods, now=now, ours=ours(self.ws), settings=self.settings,
                starts=self._starts, sigterm=sigterm,
                own_pod_disrupted=sigterm and self.own_pod_disrupted(), holder=self.holder,
                earlier=earlier, workload=workload, local_queue=local_queue,
            )  # fmt: skip
            may_move = self.memory.moves_left > 0 or self.memory.can_return
            if self.for_deadline and may_move and not self.memory.moved:
                seen = self._ask_the_deadline(seen)
            if first and seen.state not in ("missing", "foreign"):
                self._say(
                    f"re-attaching to JobSet {self.ws.name} ({seen.state}; {seen.restarts} "
                    f"restart(s), {seen.restarts_counted} of {seen.max_restarts} counted)"
                )
            first = False
            action = d.decide(seen, self.memory, self.settings)
            if action.line:
                self._say(action.line)
            if action.kind in (d.EXIT, d.DELETE_AND_EXIT):
                if action.kind == d.DELETE_AND_EXIT and jobset is not None:
                    if not self._delete_as_seen(jobset):
                        continue  # changed since this look (claimed?): look again
                self.logs.join(timeout=1.0 if self.stop.is_set() else 5.0)
                return Outcome(
                    code=action.code,
                    message=action.line,
                    jobset=self.ws.name,
                    moved=self.gang > 0,
                    restarts=seen.restarts,
                    restarts_counted=seen.restarts_counted,
                    attempts=sorted(
                        self.attempts.values(), key=lambda a: (a.started or 0, a.index or 0)
                    ),
                )
            self._act(action, pods, seen, earlier)
            before, self.memory = self.memory, self.memory.after(action, seen)
            if self.memory.evictions_said != before.evictions_said:
                said = evictions_annotation(self.memory.evictions_said)
                self.kube.annotate_jobset(self.ws.name, {EVICTIONS_SAID_ANNOTATION: said})
            if action.kind not in (d.CREATE, *d.MOVES, d.RESUME):
                self.stop.wait(self.poll_seconds)

    def _act(self, action: d.Action, pods: list[dict], seen: d.Seen, earlier: dict) -> None:
        """Does ``action`` (not an ending: :meth:`run` returns those)."""
        if action.kind == d.CREATE:
            self._create(suspended=self.memory.moved)
        elif action.kind == d.FORCE_DELETE:
            self._force_delete(pods, seen.unanswered)
        elif action.kind in d.MOVES:
            # Either way, the next gang made suspended (no pods); the looks after finish
            # the move: the current one deleted, the next resumed.
            self.moved(action.line, self.ws, self.gang_set(self.gang + 1))
            self.gang += 1
            self._create(suspended=True)
        elif action.kind == d.FINISH_MOVE:
            for name, (_, their_pods) in earlier.items():
                self.kube.delete_jobset(name)  # again on each look: idempotent
                self._force_delete(their_pods, seen.earlier_unanswered)
        elif action.kind == d.RESUME:
            self.kube.resume_jobset(self.ws.name)
            self._say(f"moved to JobSet {self.ws.name} ({self.ws.placement.pool})")

    def _look(self) -> tuple[dict | None, list[dict], dict[str, tuple[dict, list[dict]]]]:
        """The JobSet, its pods, and a move's earlier gangs still there with theirs.

        ``Kube`` waits out an API blip; the gang runs on.
        """
        jobset = self.kube.read_jobset(self.ws.name)
        pods = self.kube.list_pods({JOBSET_NAME_LABEL: self.ws.name}) if jobset else []
        earlier = {}
        # Only a move not yet resumed has earlier gangs to finish: no reads after it.
        for ws in map(self.gang_set, range(self.gang)) if self.memory.moved else ():
            found = self.kube.read_jobset(ws.name)
            if found is not None and is_ours(found, ours(ws)):
                earlier[ws.name] = (found, self.kube.list_pods({JOBSET_NAME_LABEL: ws.name}))
        return jobset, pods, earlier

    def _look_at_queue(self, jobset: dict | None) -> tuple[dict | None, dict | None]:
        """A queued gang's Workload and LocalQueue (Kueue's view of it), else nothing."""
        queue = self.ws.placement.queue
        if not queue or jobset is None:
            return None, None
        uid = (jobset.get("metadata") or {}).get("uid", "")
        return self.kube.read_workload(uid), self.kube.read_local_queue(queue)

    def _claim(self, jobset: dict | None) -> dict | None:
        """Names this launcher on a JobSet of ours it re-attaches to (the newest wins)."""
        if jobset is None or not is_ours(jobset, ours(self.ws)):
            return jobset
        annotations = (jobset.get("metadata") or {}).get("annotations") or {}
        if annotations.get(HOLDER_ANNOTATION) == self.holder:
            return jobset
        claimed = self.kube.annotate_jobset(self.ws.name, {HOLDER_ANNOTATION: self.holder})
        return claimed if claimed is not None else jobset

    def _delete_as_seen(self, jobset: dict) -> bool:
        """Deletes the JobSet only as this look saw it (False: it changed meanwhile).

        The API's ``preconditions.resourceVersion`` makes the check and the delete one
        step: another launcher's claim in between fails the delete with 409.
        """
        version = (jobset.get("metadata") or {}).get("resourceVersion")
        try:
            self.kube.delete_jobset(self.ws.name, resource_version=version)
        except KubeError as err:
            if getattr(err.__cause__, "status", None) == 409:
                return False
            raise
        return True

    def _force_delete(self, pods: list[dict], stuck: Sequence[tuple[str, str]]) -> None:
        """Deletes the ``stuck`` (pod, node) pods now, each only if still the one seen."""
        names = {name for name, _ in stuck}
        for meta in (p["metadata"] for p in pods if p["metadata"]["name"] in names):
            self.kube.force_delete_pod(meta["name"], meta["uid"])

    def _say(self, line: str) -> None:
        self.say(f"[jobset {self.ws.name}] {line}")

    def _ask_the_deadline(self, seen: d.Seen) -> d.Seen:
        """``seen`` with the move the deadline needs or allows now (its reason and kind)."""
        running = seen.state == "running" and not seen.suspended
        waited = seen.unschedulable_seconds
        reason, to = self.for_deadline(
            self.sets, self.kind, running=running and waited is None, waited_s=waited or 0.0
        )
        if not reason or to is None or to == self.kind:
            return seen
        to_kind = d.SPOT if to == 0 else "on-demand"
        return replace(seen, for_deadline=reason, for_deadline_to=to_kind)

    def _reattach_point(self) -> tuple[int, dict | None]:
        """The furthest gang whose JobSet exists and is ours (a move made or begun), and it.

        With a gang to move to, the task's JobSets are listed by its labels: a move back
        to spot and on makes gangs of new names (``names.gang_name``).
        """
        if len(self.sets) < 2:
            return 0, None
        furthest: tuple[int, dict | None] = (0, None)
        for found in self.kube.list_jobsets(ours(self.sets[0])):
            name = (found.get("metadata") or {}).get("name", "")
            k = names.gang_number(self.sets[0].name, name)
            k = next((i for i, ws in enumerate(self.sets) if ws.name == name), k)
            if k is None or self.gang_set(k).name != name:
                continue
            if is_ours(found, ours(self.gang_set(k))) and k >= furthest[0]:
                furthest = (k, found)
        return furthest

    def _create(self, *, suspended: bool = False) -> None:
        if self.run_started is None:
            self.run_started = self.clock()
        manifest = js.jobset(self.ws, self._active_deadline())
        if suspended:
            manifest["spec"]["suspend"] = True
        annotations = manifest["metadata"].setdefault("annotations", {})
        annotations[RUN_STARTED_ANNOTATION] = f"{self.run_started:.3f}"
        annotations[HOLDER_ANNOTATION] = self.holder
        try:
            self.kube.create_jobset(manifest)
        except KubeError as err:
            if getattr(err.__cause__, "status", None) == 409:
                return  # made meanwhile: the next look says whose it is
            raise
        selector = ", ".join(f"{k}={v}" for k, v in sorted(self.ws.placement.node_selector.items()))
        self._say(
            f"created JobSet {self.ws.name}: {self.ws.workers} worker pod(s) "
            f"({selector or 'any node'}), maxRestarts {self.ws.placement.retries}"
        )

    def _note(self, pods: list[dict], between: str = "") -> None:
        """Records each pod that ended, once, with its node's kind (for the ledger).

        While Kueue has the gang evicted, or if it evicted it since the last look
        (``between``: the reasons Kueue counted since), a running pod gone since the
        last look was stopped by the eviction (:func:`attempts.stopped`).
        """
        why = f"Kueue {self._evicted.split(':')[0]}" if self._evicted else ""
        why = why or (f"Kueue {between}" if between else "")
        # A pod gone had ended before the pods new since the last look were made: our
        # Jobs' podReplacementPolicy is Failed, so the Job controller replaces a pod only
        # once it has terminated (Kubernetes v1.34.3 pkg/controller/job/job_controller.go:
        # 1712-1718, 2105-2113); the gang's runs then do not overlap in the ledger.
        made = [
            status.epoch(meta.get("creationTimestamp"))
            for p in pods
            if not status.is_done(p)
            and ((meta := p.get("metadata") or {}).get("uid") or meta.get("name"))
            not in self._running
        ]
        ended = min([self.clock(), *(t for t in made if t is not None)])
        seen = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            key = meta.get("uid") or meta.get("name")
            seen.add(key)
            if key in self.attempts:
                continue
            if not status.is_done(pod):
                self._running[key] = pod
                continue
            self._running.pop(key, None)
            ended = attempts.from_pod(pod, *self._where(pod))
            ended.disruption = ended.disruption or why
            self.attempts[key] = ended
        for key in [k for k in self._running if k not in seen]:
            pod = self._running.pop(key)
            if why and key not in self.attempts:
                self.attempts[key] = attempts.stopped(pod, *self._where(pod), ended, why)

    def _where(self, pod: dict) -> tuple[str, str, dict | None]:
        """A pod's gang run (``<jobset>/<generation>``), its node's kind and its Node."""
        node = self._node((pod.get("spec") or {}).get("nodeName") or "")
        return f"{self.ws.name}/{generation(pod)}", status.node_kind(node), node

    def _node(self, name: str) -> dict | None:
        """The Node (its labels: capacity kind, machine, zone, GPU), once per name."""
        if not name:
            return None
        if name not in self._nodes:
            try:
                self._nodes[name] = self.kube.read_node(name)
            except KubeError as err:
                # Node labels need a ClusterRole; without it the ledger says "unknown".
                log.warning("node kind of %s unknown: %s", name, err)
                self._nodes[name] = None
        return self._nodes[name]


def install_sigterm(launcher: JobSetLauncher):
    """SIGTERM sets the stop flag; the loop waits on it; returns the previous handler."""

    def _handler(signum, _frame):
        log.warning("%s: stopping the launcher", signal.Signals(signum).name)
        launcher.stopping()

    return signal.signal(signal.SIGTERM, _handler)
