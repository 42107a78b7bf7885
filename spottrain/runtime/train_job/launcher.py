"""The JobSet engine's launcher: observe → decide → act, until the JobSet ends.

Each look reads the JobSet and its pods (:mod:`.observe`), :func:`decide.decide`
picks one action, and this module does it: create the JobSet, say a line, delete it,
or end with an exit code. The JobSet controller restarts the gang and keeps
``status.restarts``; the launcher holds no budget of its own, so a launcher killed at
any point and started again (a KFP retry of its pod) re-attaches by name and changes
nothing: it never makes a second JobSet and never buys restarts.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from spottrain.runtime.gke_job.kube import KubeError
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job.observe import (
    JOBSET_NAME_LABEL,
    RESTART_LABEL,
    Memory,
    exits,
    observe,
)

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How the run ended: ``code`` (the launcher's exit code) and its ``message``.

    ``restarts``/``restarts_counted`` are the JobSet's status at the last look;
    ``exits`` every failed pod seen: ``(pod, restart attempt, exit code)``.
    """

    code: int
    message: str
    restarts: int = 0
    restarts_counted: int = 0
    exits: list[tuple[str, int, int]] = field(default_factory=list)


def ours(ws: js.WorkerSet) -> dict[str, str]:
    """The labels that make a JobSet this task's (not the attempt: retries re-attach)."""
    labels = ws.all_labels()
    labels.pop(js.ATTEMPT_LABEL, None)
    return labels


class Launcher:
    """Runs one :class:`jobset.WorkerSet` as a JobSet to its end.

    Args:
        kube: A :class:`kube.JobSetKube`.
        ws: The gang.
        poll_seconds: Seconds between two looks.
        capacity_deadline: Seconds pods may stay Unschedulable before the run ends
            with a retryable code.
        clock: Epoch seconds (the API's timestamps are compared with it).
        own_pod_disrupted: Called on SIGTERM; ``True`` keeps the JobSet (the
            launcher's own pod is going; its retry re-attaches).
        say: Where the progress lines go.
    """

    def __init__(
        self,
        kube,
        ws: js.WorkerSet,
        *,
        poll_seconds: float = 5.0,
        capacity_deadline: float = 3600.0,
        clock: Callable[[], float] = time.time,
        own_pod_disrupted: Callable[[], bool] = lambda: False,
        say: Callable[[str], None] = print,
    ):
        self.kube = kube
        self.ws = ws
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.own_pod_disrupted = own_pod_disrupted
        self.say = say
        self.stop = threading.Event()
        self.memory = Memory(capacity_deadline=capacity_deadline)
        self._exits: dict[str, tuple[int, int]] = {}

    def run(self) -> Outcome:
        """Runs to the end; a failed JobSet is an :class:`Outcome`, not an exception.

        Raises:
            KubeError: an API error that retrying cannot fix (or no JobSet API).
        """
        self.kube.check_api()
        first = True
        while True:
            jobset = self.kube.read_jobset(self.ws.name)
            pods = self.kube.list_pods({JOBSET_NAME_LABEL: self.ws.name}) if jobset else []
            self._note_exits(pods)
            sigterm = self.stop.is_set()
            seen = observe(
                jobset, pods, now=self.clock(), ours=ours(self.ws), memory=self.memory,
                sigterm=sigterm, own_pod_disrupted=sigterm and self.own_pod_disrupted(),
            )  # fmt: skip
            if first and seen.state not in ("missing", "foreign"):
                self._say(
                    f"re-attaching to JobSet {self.ws.name} ({seen.state}; {seen.restarts} "
                    f"restart(s), {seen.restarts_counted} of {seen.max_restarts} counted)"
                )
            first = False
            action = d.decide(seen)
            if action.line:
                self._say(action.line)
            if action.kind == d.CREATE:
                self._create()
                continue
            if action.kind == d.REPORT:
                self.memory = _said(self.memory, action.said, seen)
            elif action.kind in (d.EXIT, d.DELETE_AND_EXIT):
                if action.kind == d.DELETE_AND_EXIT and jobset is not None:
                    self.kube.delete_jobset(self.ws.name)
                return Outcome(
                    code=action.code,
                    message=action.line,
                    restarts=seen.restarts,
                    restarts_counted=seen.restarts_counted,
                    exits=sorted((pod, gen, code) for pod, (gen, code) in self._exits.items()),
                )
            elif action.kind == d.FALL_OVER:
                raise NotImplementedError("the move to on-demand is not wired yet (issue 30)")
            self.stop.wait(self.poll_seconds)

    def _say(self, line: str) -> None:
        self.say(f"[jobset {self.ws.name}] {line}")

    def _create(self) -> None:
        try:
            self.kube.create_jobset(js.jobset(self.ws))
        except KubeError as err:
            if getattr(err.__cause__, "status", None) == 409:
                return  # made meanwhile: the next look says whose it is
            raise
        selector = ", ".join(f"{k}={v}" for k, v in sorted(self.ws.placement.node_selector.items()))
        self._say(
            f"created JobSet {self.ws.name}: {self.ws.workers} worker pod(s) "
            f"({selector or 'any node'}), maxRestarts {self.ws.placement.retries}"
        )

    def _note_exits(self, pods: list[dict]) -> None:
        for pod in pods:
            ended = exits(pod)
            if ended is None:
                continue
            meta = pod.get("metadata") or {}
            gen = (meta.get("labels") or {}).get(RESTART_LABEL, "0")
            if meta.get("name") not in self._exits:
                self._exits[meta["name"]] = (int(gen) if gen.isdigit() else 0, ended[0])


def _said(memory: Memory, what: str, seen: d.Observed) -> Memory:
    """``memory`` once the line ``what`` names was said."""
    if what == "restarts":
        return replace(memory, restarts_said=seen.restarts)
    return replace(memory, **{f"{what}_said": True})


def install_sigterm(launcher: Launcher):
    """SIGTERM sets the stop flag; the loop waits on it; returns the previous handler."""

    def _handler(signum, _frame):
        log.warning("%s: stopping the launcher", signal.Signals(signum).name)
        launcher.stop.set()

    return signal.signal(signal.SIGTERM, _handler)
