"""The JobSet launcher's rule: one observation in, one action out (pure; no I/O).

The launcher (:mod:`.launcher`) observes the JobSet, its pods and its own clock
(:mod:`.observe`), calls :func:`decide`, and acts. What the JobSet controller does
(restarting the gang, telling a disruption from a fatal exit, counting
``maxRestarts``) is not repeated here: this is only what stays ours (issue 30,
items 2-3): creating the JobSet, saying why it waits, the capacity deadline, falling
back from a plain spot pool to on-demand, SIGTERM, and the exit code.
"""

from __future__ import annotations

from dataclasses import dataclass

from spottrain import exits

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

WAIT, CREATE, REPORT, FALL_BACK, DELETE_AND_EXIT, EXIT, FORCE_DELETE = (
    "wait",
    "create",
    "report",
    "fall_back",
    "delete_and_exit",
    "exit",
    "force_delete",
)


@dataclass(frozen=True)
class Observed:
    """What the launcher saw in one look.

    Attributes:
        state: The JobSet: ``missing``, ``running``, ``completed``, ``failed``,
            ``deleting`` (its deletion started) or ``foreign`` (not this task's).
        exit_code: The failed pod's exit code a ``failed`` JobSet ended on (None: unknown).
        restarts: ``status.restarts``.
        restarts_counted: ``status.restartsCountTowardsMax``.
        max_restarts: ``spec.failurePolicy.maxRestarts``.
        restarts_said: The ``restarts`` the last progress line gave.
        unschedulable_seconds: How long the longest-waiting pod has been
            Pending/Unschedulable (None: none is).
        unschedulable_said: Whether that wait was already said.
        selector: What the pods select (a ComputeClass or node labels), for the line.
        capacity_deadline: Seconds of Unschedulable after which the capacity is given up.
        deadline: Seconds the whole run may take (None: no limit).
        age_seconds: How long the run has taken (from its first JobSet's creation).
        can_fall_back: A plain spot pool with an on-demand pool to move to, not used yet.
        start_failure: A pod that cannot start: ``"pod <name>: <reason> (<message>)"``.
        start_failure_seconds: How long it has not started (first seen by the launcher).
        start_failure_final: Its command could not run at all (no use waiting).
        start_deadline: Seconds a pod may be unable to start before the run ends.
        deleting_seconds: How long the JobSet has been being deleted.
        deleting_said: Whether that wait was already said.
        stuck_pods: Its pods still being deleted, for the line.
        unanswered: Pods still terminating ``unanswered_after`` seconds past their
            grace, as ``(pod, node)``: their kubelet does not answer.
        sigterm: The launcher received SIGTERM.
        own_pod_disrupted: The launcher's own pod is being disrupted (its node is
            going): the gang runs on and the launcher's retry re-attaches.
        held_by: Another launcher (a newer attempt of this task) follows the JobSet now.
    """

    state: str
    exit_code: int | None = None
    restarts: int = 0
    restarts_counted: int = 0
    max_restarts: int = 0
    restarts_said: int = 0
    unschedulable_seconds: float | None = None
    unschedulable_said: bool = False
    selector: str = ""
    capacity_deadline: float = 3600.0
    deadline: float | None = None
    age_seconds: float = 0.0
    can_fall_back: bool = False
    start_failure: str = ""
    start_failure_seconds: float = 0.0
    start_failure_final: bool = False
    start_failure_said: bool = False
    start_deadline: float = START_FAILURE_SECONDS
    deleting_seconds: float = 0.0
    deleting_said: bool = False
    stuck_pods: tuple[str, ...] = ()
    unanswered: tuple[tuple[str, str], ...] = ()
    unanswered_after: float = UNANSWERED_AFTER
    sigterm: bool = False
    own_pod_disrupted: bool = False
    held_by: str = ""


@dataclass(frozen=True)
class Action:
    """What to do: ``kind``, the line to print (empty: none), the exit code to end with.

    A ``REPORT`` names in ``said`` which of ``Observed``'s ``*_said`` it settles.
    """

    kind: str
    line: str = ""
    code: int | None = None
    said: str = ""


def decide(o: Observed) -> Action:
    """The one action for ``o``; the first rule that applies wins."""
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
    if o.unanswered and not o.sigterm:
        # A pod whose node stopped answering never ends: the JobSet's restart (and a
        # foreground deletion) waits for it for ever (kubernetes-sigs/jobset#576).
        # The trainer on such a node, if it still runs, has lost its checkpoint lease.
        pods = ", ".join(f"{pod} (node {node})" for pod, node in o.unanswered)
        return Action(
            FORCE_DELETE,
            f"still terminating {o.unanswered_after:.0f} s past their grace: {pods}; their "
            "node does not answer: deleting them forcibly so that the gang can restart",
        )
    if o.sigterm and o.own_pod_disrupted:
        return Action(
            EXIT,
            "SIGTERM: the launcher's own pod is being disrupted; the JobSet runs on and "
            "the launcher's retry re-attaches to it",
            exits.PREEMPTED,
        )
    if o.sigterm:
        return Action(DELETE_AND_EXIT, "SIGTERM: deleting the JobSet", exits.PREEMPTED)
    if o.state == "deleting":
        stuck = f" (pods still ending: {', '.join(o.stuck_pods)})" if o.stuck_pods else ""
        if o.deleting_seconds >= DELETING_DEADLINE:
            return Action(
                EXIT,
                f"the JobSet is still being deleted after {o.deleting_seconds:.0f} s{stuck}: "
                "a node that stopped answering keeps its pods; a retry tries again",
                exits.UNAVAILABLE,
            )
        if not o.deleting_said:
            return Action(
                REPORT, f"waiting for an earlier JobSet of this name to go{stuck}", said="deleting"
            )
        return Action(WAIT)
    if o.state == "missing":
        return Action(CREATE)
    if o.state == "completed":
        return Action(EXIT, "JobSet Completed", exits.OK)
    if o.state == "failed":
        code = exits.UNAVAILABLE if o.exit_code is None else o.exit_code
        if exits.is_retryable(code) and o.can_fall_back:
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
    if o.start_failure and (o.start_failure_final or o.start_failure_seconds >= o.start_deadline):
        waited = "" if o.start_failure_final else f" for {o.start_failure_seconds:.0f} s"
        return Action(
            DELETE_AND_EXIT,
            f"{o.start_failure} cannot start{waited}: fix it and run again (the "
            "checkpoints are kept); deleting the JobSet",
            exits.FATAL_CONFIG,
        )
    if o.start_failure and not o.start_failure_said:
        return Action(
            REPORT,
            f"{o.start_failure} cannot start yet (the run ends if it still cannot in "
            f"{o.start_deadline:.0f} s)",
            said="start_failure",
        )
    if o.deadline is not None and o.age_seconds >= o.deadline:
        # Another attempt would only pass it again.
        return Action(
            DELETE_AND_EXIT,
            f"the run passed its deadline ({o.deadline:.0f} s) after {o.age_seconds:.0f} s "
            "before finishing: deleting the JobSet",
            exits.FATAL_CONFIG,
        )
    waited = o.unschedulable_seconds
    if waited is not None and waited >= o.capacity_deadline:
        if o.can_fall_back:
            return Action(
                FALL_BACK,
                f"no spot capacity for {waited:.0f} s ({o.selector}): moving to on-demand",
            )
        return Action(
            DELETE_AND_EXIT,
            f"no capacity for {waited:.0f} s ({o.selector}), the capacity deadline "
            f"({o.capacity_deadline:.0f} s): deleting the JobSet",
            exits.UNAVAILABLE,
        )
    if waited is not None and waited >= SAY_UNSCHEDULABLE_AFTER and not o.unschedulable_said:
        return Action(
            REPORT,
            f"pods Pending/Unschedulable for {waited:.0f} s: nothing fits {o.selector} "
            "(a ComputeClass or node pool name, or no capacity)",
            said="unschedulable",
        )
    if o.restarts > o.restarts_said:
        return Action(
            REPORT,
            f"gang restarted ({o.restarts} restart(s), {o.restarts_counted} of "
            f"{o.max_restarts} counted)",
            said="restarts",
        )
    return Action(WAIT)
