"""The JobSet launcher's rule: one observation in, one action out (pure; no I/O).

The launcher (:mod:`.launcher`) observes the JobSet, its pods and its own clock
(:mod:`.observe`), calls :func:`decide`, and acts. What the JobSet controller does
(restarting the gang, telling a disruption from a fatal exit, counting
``maxRestarts``) is not repeated here: this is only what stays ours (issue 30,
items 2-3): creating the JobSet, saying why it waits, the capacity deadline, falling
back from a plain spot pool to on-demand (also when the run's ``finish_by`` needs it:
``Seen.for_deadline``), SIGTERM, and the exit code.

Its inputs are three: what one look saw (:class:`Seen`), what the launcher did and
said before (:class:`Memory`, changed only by :meth:`Memory.after`) and its settings
(:class:`Settings`). The move to on-demand is decisions like the others: ``FALL_BACK``
creates the next gang suspended, ``FINISH_MOVE`` deletes the earlier one on every
look until it is gone (forcibly, for pods whose node does not answer), ``RESUME``
starts the next gang. The deadline's move back from an on-demand gang to a new spot
gang (issue 56: the run is ahead) is ``BACK_TO_SPOT``, done the same way; from that
spot gang the run may move to a new on-demand gang again, as from the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from spottrain import exits
from spottrain.runtime.train_job import queue
from spottrain.runtime.train_job.queue import DEACTIVATED, Queued

# A pod Pending/Unschedulable this long is said in one line (the issue: within a minute).
SAY_UNSCHEDULABLE_AFTER = 30.0
# A JobSet still being deleted this long (foreground deletion waits for every pod, and
# a pod on an unreachable node never ends: kubernetes-sigs/jobset#576) ends the wait.
DELETING_DEADLINE = 300.0
# A pod that cannot start (an image that does not pull, a missing Secret) this long
# ends the run: long enough for a registry hiccup, far shorter than the run deadline.
START_FAILURE_SECONDS = 180.0
# A pod still terminating this long after its grace period ended: its kubelet would
# have killed it by then, so its node does not answer.
UNANSWERED_AFTER = 60.0
# How long a queued gang may wait for Kueue's admission: a shared cluster's queue can
# hold a run for hours; past this, the run ends retryable (172), as for capacity.
ADMISSION_DEADLINE = 6 * 3600.0
# How long the waiting line waits for Kueue's reason before it is said without one.
QUEUE_REASON_WAIT = 10.0
# Kueue made no Workload for a queued JobSet this long: it does not manage it.
NO_WORKLOAD_AFTER = 60.0

WAIT, CREATE, REPORT, FALL_BACK, FINISH_MOVE, RESUME, DELETE_AND_EXIT, EXIT, FORCE_DELETE = (
    "wait",
    "create",
    "report",
    "fall_back",
    "finish_move",
    "resume",
    "delete_and_exit",
    "exit",
    "force_delete",
)
# The deadline's move from an on-demand gang back to a new spot gang.
BACK_TO_SPOT = "back_to_spot"
# Both moves: the next gang created suspended, the current one deleted, the next resumed.
MOVES = (FALL_BACK, BACK_TO_SPOT)
# Seen.for_deadline_to of a move back to spot (anything else: to on-demand).
SPOT = "spot"
# What a REPORT settles (Action.said): each line is said once per gang.
SAID_DELETING, SAID_START_FAILURE, SAID_UNSCHEDULABLE, SAID_RESTARTS = (
    "deleting",
    "start_failure",
    "unschedulable",
    "restarts",
)
# Said once per wait for Kueue's admission (forgotten when admitted).
SAID_QUEUED, SAID_EVICTED, SAID_NO_WORKLOAD, SAID_ADMITTED = (
    "queued",
    "evicted",
    "no_workload",
    "admitted",
)
QUEUE_SAID = frozenset({SAID_QUEUED, SAID_EVICTED, SAID_NO_WORKLOAD})
# Kueue's evictions no look saw (readmitted between two): said by their count.
SAID_EVICTIONS = "evictions"


@dataclass(frozen=True)
class Seen:
    """What the launcher saw in one look (:func:`.observe.observe`).

    Attributes:
        state: The JobSet: ``missing``, ``running``, ``completed``, ``failed``,
            ``deleting`` (its deletion started) or ``foreign`` (not this task's).
        exit_code: The failed pod's exit code a ``failed`` JobSet ended on (None: unknown).
        restarts: ``status.restarts``.
        restarts_counted: ``status.restartsCountTowardsMax``.
        max_restarts: ``spec.failurePolicy.maxRestarts``.
        unschedulable_seconds: How long the longest-waiting pod has been
            Pending/Unschedulable (None: none is).
        selector: What the pods select (a ComputeClass or node labels), for the line.
        age_seconds: How long the run has taken (from its first JobSet's creation).
        start_failure: A pod that cannot start: ``"pod <name>: <reason> (<message>)"``.
        start_failure_seconds: How long it has not started (first seen by the launcher).
        start_failure_final: Its command could not run at all (no use waiting).
        deleting_seconds: How long the JobSet has been being deleted.
        stuck_pods: Its pods still being deleted, for the line.
        unanswered: Pods still terminating ``Settings.unanswered_after`` seconds past
            their grace, as ``(pod, node)``: their kubelet does not answer.
        suspended: ``spec.suspend`` (a move creates the next gang suspended).
        earlier: A move's earlier gangs whose JobSets (ours) are still there.
        earlier_unanswered: Their pods whose node does not answer, as ``unanswered``.
        moving_seconds: How long the oldest of them has been being deleted.
        sigterm: The launcher received SIGTERM.
        own_pod_disrupted: The launcher's own pod is being disrupted (its node is
            going): the gang runs on and the launcher's retry re-attaches.
        held_by: Another launcher (a newer attempt of this task) follows the JobSet now.
        for_deadline: Why the run must leave this gang for the next to finish by its
            deadline, or may go back to spot being ahead of it
            (:func:`spottrain.ladder.decide.decide`'s reason for a move, from the
            ledger's measurements; ``""``: no such move is due).
        for_deadline_to: The capacity kind that move goes to: ``spot`` (back to a new
            spot gang) or ``on-demand``.
        queue: The Kueue LocalQueue the JobSet is submitted to (``""``: not queued).
        queued: What Kueue says of it (:func:`.queue.queued`; None: not queued).
    """

    state: str
    exit_code: int | None = None
    restarts: int = 0
    restarts_counted: int = 0
    max_restarts: int = 0
    unschedulable_seconds: float | None = None
    selector: str = ""
    age_seconds: float = 0.0
    start_failure: str = ""
    start_failure_seconds: float = 0.0
    start_failure_final: bool = False
    deleting_seconds: float = 0.0
    stuck_pods: tuple[str, ...] = ()
    unanswered: tuple[tuple[str, str], ...] = ()
    suspended: bool = False
    earlier: tuple[str, ...] = ()
    earlier_unanswered: tuple[tuple[str, str], ...] = ()
    moving_seconds: float = 0.0
    sigterm: bool = False
    own_pod_disrupted: bool = False
    held_by: str = ""
    for_deadline: str = ""
    for_deadline_to: str = ""
    queue: str = ""
    queued: Queued | None = None


@dataclass(frozen=True)
class Settings:
    """The launcher's settings: fixed for the run.

    Attributes:
        capacity_deadline: Seconds of Unschedulable after which the capacity is given up.
        deadline: Seconds the whole run may take (None: no limit).
        start_deadline: Seconds a pod may be unable to start before the run ends.
        unanswered_after: Seconds past its grace a pod may still be terminating before
            its node is taken as not answering.
        admission_deadline: Seconds a queued gang may wait for Kueue's admission.
    """

    capacity_deadline: float = 3600.0
    deadline: float | None = None
    start_deadline: float = START_FAILURE_SECONDS
    unanswered_after: float = UNANSWERED_AFTER
    admission_deadline: float = ADMISSION_DEADLINE


@dataclass(frozen=True)
class Action:
    """What to do: ``kind``, the line to print (empty: none), the exit code to end with.

    A ``REPORT`` names in ``said`` the line it says (one of the ``SAID_*``).
    """

    kind: str
    line: str = ""
    code: int | None = None
    said: str = ""


@dataclass(frozen=True)
class Memory:
    """What the launcher did and said, from look to look; only :meth:`after` changes it.

    Attributes:
        said: The ``SAID_*`` lines said of this gang.
        restarts_said: The ``restarts`` the last progress line gave.
        moves_left: Gangs after this one to move to for capacity or the deadline (1 on a
            spot gang with an on-demand one to follow it, else 0).
        can_return: On an on-demand gang a move made: the deadline may take the run
            back to a new spot gang.
        moved: This gang is one a move made, not yet resumed.
        evictions_said: Kueue's evictions of this gang said, by reason (the Workload's
            count, :func:`.queue.evictions`, as the lines have said it).
    """

    said: frozenset[str] = frozenset()
    restarts_said: int = 0
    moves_left: int = 0
    can_return: bool = False
    moved: bool = False
    evictions_said: tuple[tuple[str, int], ...] = ()

    def after(self, action: Action, seen: Seen) -> Memory:
        """This memory once ``action``, decided on ``seen``, is done."""
        if action.kind == REPORT and action.said == SAID_RESTARTS:
            return replace(self, restarts_said=seen.restarts)
        q = seen.queued
        if action.kind == REPORT and action.said == SAID_EVICTIONS and q is not None:
            said = dict(self.evictions_said)
            for reason, n in queue.unsaid(q, said, SAID_EVICTED in self.said).items():
                said[reason] = said.get(reason, 0) + n
            return replace(self, evictions_said=tuple(sorted(said.items())))
        if action.kind == REPORT and action.said == SAID_EVICTED and q is not None:
            # Its own line says the eviction under way, the last one Kueue counted.
            return replace(self, said=self.said | {SAID_EVICTED}, evictions_said=q.evictions)
        if action.kind == REPORT and action.said == SAID_ADMITTED:
            # Admitted: a later eviction and wait are said again.
            return replace(self, said=self.said - QUEUE_SAID)
        if action.kind == REPORT:
            return replace(self, said=self.said | {action.said})
        if action.kind == FALL_BACK:
            # A new gang, on-demand: nothing said of it yet; spot is left to come back to.
            return Memory(moves_left=self.moves_left - 1, can_return=True, moved=True)
        if action.kind == BACK_TO_SPOT:
            # A new spot gang: it may move on to a new on-demand one, as the first could.
            return Memory(moves_left=1, moved=True)
        if action.kind == RESUME:
            return replace(self, moved=False)
        return self


Rule = Callable[[Seen, Memory, Settings], "Action | None"]


def _not_ours(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.state == "foreign":
        # Never touched, SIGTERM or not: it is somebody else's.
        return Action(
            EXIT,
            "a JobSet of this name exists and was not created for this task (its labels "
            "differ): not touching it; delete it or rename the task",
            exits.FATAL_CONFIG,
        )
    if o.held_by:
        # KFP retried this task while this launcher was still ending (its pod deleted,
        # no DisruptionTarget): the newer launcher owns the gang, SIGTERM or not.
        return Action(
            EXIT,
            f"launcher {o.held_by} follows this JobSet now (a newer attempt of this task): "
            "leaving the gang to it",
            exits.PREEMPTED,
        )
    return None


def _unanswered(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.unanswered and not o.sigterm:
        # A pod whose node stopped answering never ends: the JobSet's restart (and a
        # foreground deletion) waits for it for ever (kubernetes-sigs/jobset#576).
        # The trainer on such a node, if it still runs, has lost its checkpoint lease.
        pods = ", ".join(f"{pod} (node {node})" for pod, node in o.unanswered)
        return Action(
            FORCE_DELETE,
            f"still terminating {settings.unanswered_after:.0f} s past their grace: {pods}; "
            "their node does not answer: deleting them forcibly so that the gang can restart",
        )
    return None


def _sigterm(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.sigterm and o.own_pod_disrupted:
        return Action(
            EXIT,
            "SIGTERM: the launcher's own pod is being disrupted or deleted; the JobSet "
            "runs on and the launcher's retry re-attaches to it",
            exits.PREEMPTED,
        )
    if o.sigterm:
        return Action(DELETE_AND_EXIT, "SIGTERM: deleting the JobSet", exits.PREEMPTED)
    return None


def _moving(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if not o.earlier:
        return None
    # A move under way: the earlier gang's JobSet goes before this one starts, so the
    # two never hold GPUs (or write the checkpoint dir) at once.
    if o.moving_seconds >= DELETING_DEADLINE:
        return Action(
            EXIT,
            f"JobSet(s) {', '.join(o.earlier)} still being deleted after "
            f"{o.moving_seconds:.0f} s: not starting the next gang beside them",
            exits.UNAVAILABLE,
        )
    pods = ", ".join(f"{pod} (node {node})" for pod, node in o.earlier_unanswered)
    line = f"pod(s) {pods} of JobSet {', '.join(o.earlier)} do not end: deleting them forcibly"
    return Action(FINISH_MOVE, line if pods else "")


def _deleting(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.state != "deleting":
        return None
    stuck = f" (pods still ending: {', '.join(o.stuck_pods)})" if o.stuck_pods else ""
    if o.deleting_seconds >= DELETING_DEADLINE:
        return Action(
            EXIT,
            f"the JobSet is still being deleted after {o.deleting_seconds:.0f} s{stuck}: "
            "a node that stopped answering keeps its pods; a retry tries again",
            exits.UNAVAILABLE,
        )
    if SAID_DELETING not in memory.said:
        line = f"waiting for an earlier JobSet of this name to go{stuck}"
        return Action(REPORT, line, said=SAID_DELETING)
    return Action(WAIT)


def _start(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.state == "missing":
        if o.for_deadline and o.for_deadline_to != SPOT and memory.moves_left > 0:
            # Decided before creating: the spot gang was made and deleted 20 ms later.
            return Action(FALL_BACK, f"{o.for_deadline}: starting on on-demand")
        return Action(CREATE)
    if memory.moved and o.suspended and not o.queue:
        return Action(RESUME)  # a queued JobSet is Kueue's to resume
    return None


def _ended(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.state == "completed":
        return Action(EXIT, "JobSet Completed", exits.OK)
    if o.state != "failed":
        return None
    code = exits.UNAVAILABLE if o.exit_code is None else o.exit_code
    if exits.is_retryable(code) and memory.moves_left > 0:
        return Action(
            FALL_BACK,
            f"spot used up its {o.max_restarts} restart(s) (last exit {code}): "
            "moving to on-demand from the same checkpoint dir",
        )
    line = f"JobSet Failed: {exits.describe(code)} (exit {code})"
    if exits.is_retryable(code):
        # Deleted, so that KFP's retry of this task creates a fresh one.
        return Action(DELETE_AND_EXIT, line + "; deleting it for the retry", code)
    return Action(EXIT, line + "; kept for inspection", code)


def _cannot_start(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if not o.start_failure:
        return None
    if o.start_failure_final or o.start_failure_seconds >= settings.start_deadline:
        waited = "" if o.start_failure_final else f" for {o.start_failure_seconds:.0f} s"
        return Action(
            DELETE_AND_EXIT,
            f"{o.start_failure} cannot start{waited}: fix it and run again (the "
            "checkpoints are kept); deleting the JobSet",
            exits.FATAL_CONFIG,
        )
    if SAID_START_FAILURE not in memory.said:
        return Action(
            REPORT,
            f"{o.start_failure} cannot start yet (the run ends if it still cannot in "
            f"{settings.start_deadline:.0f} s)",
            said=SAID_START_FAILURE,
        )
    return None


def _deadline(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if settings.deadline is not None and o.age_seconds >= settings.deadline:
        # Another attempt would only pass it again.
        return Action(
            DELETE_AND_EXIT,
            f"the run passed its deadline ({settings.deadline:.0f} s) after "
            f"{o.age_seconds:.0f} s before finishing: deleting the JobSet",
            exits.FATAL_CONFIG,
        )
    return None


def _capacity(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    waited = o.unschedulable_seconds
    if waited is None:
        return None
    if waited >= settings.capacity_deadline and memory.moves_left > 0:
        return Action(
            FALL_BACK, f"no spot capacity for {waited:.0f} s ({o.selector}): moving to on-demand"
        )
    if waited >= settings.capacity_deadline:
        return Action(
            DELETE_AND_EXIT,
            f"no capacity for {waited:.0f} s ({o.selector}), the capacity deadline "
            f"({settings.capacity_deadline:.0f} s): deleting the JobSet",
            exits.UNAVAILABLE,
        )
    if waited >= SAY_UNSCHEDULABLE_AFTER and SAID_UNSCHEDULABLE not in memory.said:
        return Action(
            REPORT,
            f"pods Pending/Unschedulable for {waited:.0f} s: nothing fits {o.selector} "
            "(a ComputeClass or node pool name, or no capacity)",
            said=SAID_UNSCHEDULABLE,
        )
    return None


def _queue_ended_or_unseen(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    """Kueue ended the Workload, or evicted the gang between two looks (its count)."""
    q = o.queued
    if q is None or o.state != "running":
        return None
    if q.ended:
        # Kueue finished the Workload itself (FailedToStart: its flavor's node labels
        # conflict with the pods'): the JobSet would never be resumed.
        return Action(
            DELETE_AND_EXIT,
            f"Kueue ended the gang's Workload in queue {o.queue} ({q.ended}): deleting the JobSet",
            exits.FATAL_CONFIG,
        )
    if unseen := queue.unsaid(q, dict(memory.evictions_said), SAID_EVICTED in memory.said):
        # Evicted and readmitted between two looks: no look saw Evicted, but Kueue
        # counted it (queue.py); each a free restart, as one seen.
        now = "readmitted it" if q.admitted else f"it waits again in queue {o.queue}"
        return Action(
            REPORT,
            f"Kueue evicted the gang {sum(unseen.values())} time(s) between two looks "
            f"({queue.named(unseen)}) and {now}: the pods save on the notice, a free restart "
            "each",
            said=SAID_EVICTIONS,
        )
    return None


def _queued(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    q = o.queued
    if q is None or o.state != "running":
        return None
    if q.admitted:
        if memory.said & QUEUE_SAID:
            on = f" on {q.flavors}" if q.flavors else ""
            return Action(REPORT, f"admitted by queue {o.queue}{on}", said=SAID_ADMITTED)
        return None
    if q.never_fits:
        # Every flavor's quota, borrowing included, is smaller than the gang: waiting
        # cannot help until an admin changes the ClusterQueue.
        return Action(
            DELETE_AND_EXIT,
            f"queue {o.queue} can never admit the whole gang as its quota stands (Kueue: "
            f"{q.says}): deleting the JobSet; raise its ClusterQueue's quota or train on "
            "fewer workers",
            exits.FATAL_CONFIG,
        )
    if q.evicted.startswith(DEACTIVATED):
        return Action(
            DELETE_AND_EXIT,
            f"Kueue deactivated the gang ({q.evicted}) and will not admit it again: "
            "deleting the JobSet for the retry",
            exits.UNAVAILABLE,
        )
    if q.waiting_seconds >= settings.admission_deadline:
        says = f" ({q.says})" if q.says else ""
        return Action(
            DELETE_AND_EXIT,
            f"not admitted by queue {o.queue} in {q.waiting_seconds:.0f} s, the admission "
            f"deadline ({settings.admission_deadline:.0f} s){says}: deleting the JobSet",
            exits.UNAVAILABLE,
        )
    if q.no_workload and q.waiting_seconds >= NO_WORKLOAD_AFTER:
        if SAID_NO_WORKLOAD in memory.said:
            return Action(WAIT)
        return Action(
            REPORT,
            f"Kueue has made no Workload for the JobSet in {q.waiting_seconds:.0f} s: it "
            f"stays suspended; is Kueue's JobSet integration on, and namespace "
            f"managed? (queue {o.queue})",
            said=SAID_NO_WORKLOAD,
        )
    if q.evicted and SAID_EVICTED not in memory.said:
        return Action(
            REPORT,
            f"evicted by Kueue ({q.evicted}): the pods save on the notice, a free restart; "
            f"waiting for readmission in queue {o.queue}",
            said=SAID_EVICTED,
        )
    # Said once Kueue gives its reason (it writes QuotaReserved's message a moment
    # after the Workload appears), or after QUEUE_REASON_WAIT without one.
    reason_or_late = q.says or q.waiting_seconds >= QUEUE_REASON_WAIT
    if reason_or_late and not memory.said & {SAID_QUEUED, SAID_EVICTED}:
        pending = f": {q.pending} workload(s) waiting in it" if q.pending else ""
        says = f"; Kueue: {q.says}" if q.says else ""
        return Action(
            REPORT, f"waiting for admission in queue {o.queue}{pending}{says}", said=SAID_QUEUED
        )
    return Action(WAIT)


def _for_the_deadline(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if not o.for_deadline or o.state != "running":
        return None
    if o.for_deadline_to == SPOT:
        # Ahead of the deadline on on-demand: a new spot gang, from the same checkpoint dir.
        if memory.can_return:
            return Action(BACK_TO_SPOT, f"{o.for_deadline}: moving back to a new spot gang")
        return None
    if memory.moves_left > 0:
        # The gang still trains on spot (or waits for it); the move saves it on the notice.
        return Action(FALL_BACK, f"{o.for_deadline}: moving to on-demand")
    return None


def _progress(o: Seen, memory: Memory, settings: Settings) -> Action | None:
    if o.restarts > memory.restarts_said:
        return Action(
            REPORT,
            f"gang restarted ({o.restarts} restart(s), {o.restarts_counted} of "
            f"{o.max_restarts} counted)",
            said=SAID_RESTARTS,
        )
    return None


# In order: the first rule that returns an action wins.
RULES: tuple[Rule, ...] = (
    _not_ours, _unanswered, _sigterm, _moving, _deleting, _start, _ended, _cannot_start,
    _deadline, _queue_ended_or_unseen, _queued, _for_the_deadline, _capacity, _progress,
)  # fmt: skip


def decide(o: Seen, memory: Memory, settings: Settings) -> Action:
    """The one action for the look ``o``: the first of :data:`RULES` that has one."""
    for rule in RULES:
        if (action := rule(o, memory, settings)) is not None:
            return action
    return Action(WAIT)
