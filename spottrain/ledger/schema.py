"""The ledger's one record type, and whether a ledger read back has it.

:class:`Record` is every field an attempt's record may hold (docs/checkpoints.md's
table, tested against it): the engine writes it, the outputs, the launchers and the
pages read it, all through :mod:`spottrain.ledger`. On disk it stays plain JSON in a
bucket, so anyone (a hand edit, another tool, an older bug) can leave valid JSON of
another shape there. The code that merges and closes records does arithmetic on
some fields (:data:`COMPUTED`), so a wrong shape is found here, once, and treated as
unreadable: ``Ledger.begin`` moves it to quarantine/ (:func:`set_aside`), as it does
a file that is not JSON, instead of an AttributeError on every retry.
"""

from __future__ import annotations

import logging
import time
import typing
from typing import Any, TypedDict

from spottrain import fileio

log = logging.getLogger(__name__)


class Record(TypedDict, total=False):
    """One attempt: who, steps, events, ending, what it ran on, and figures."""

    # Who: ids, and its capacity kind when the pipeline knew it.
    id: str
    attempt: int
    workers: int
    capacity: str
    # Its steps.
    start_step: int
    last_step: int
    saved_step: int
    saved_step_seen_by_next_attempt: bool
    steps_lost: int
    steps_lost_is_lower_bound: bool
    # Its events, in epoch seconds.
    started: float
    updated: float
    resumed_at: float
    first_step_at: float
    notice_at: float
    notice_step: int
    notice_reason: str
    # When the ladder move that ended it was made (its launcher's cancel was the notice).
    moved_at: float
    ended: float
    seconds: float
    # Its steady speed: seconds per step over its calls after the first.
    seconds_per_step: float
    # How it ended (exit_code is null for an attempt killed outright).
    outcome: str
    exit_code: int | None
    message: str
    previous_ledger_quarantined: str
    # What one machine of it was, where that was learnt (usage.FIELDS), where its
    # pods ran (the JobSet launcher's annotate) and the bill's join keys.
    location: str
    machine_type: str
    gpu_type: str
    gpu_count: int
    platform: str
    usage_from: str
    node: str
    node_kind: str
    disruption: str
    gang: str
    pods: list[dict[str, Any]]
    pod_exit_codes: dict[str, int | None]
    bill_labels: dict[str, str]
    # Its figures (attempt_cost), and the prices the user gave the trainer.
    prices_given: dict[str, float]
    spent: float
    saved: float
    lost: float
    move_cost: float
    move_seconds: float
    lost_redo_seconds: float
    lost_notice_seconds: float
    lost_restart_seconds: float
    lost_unknown: str
    currency: str
    price_source: str
    price_unknown: str
    price_per_hour: float
    on_demand_price_per_hour: float


FIELDS = tuple(Record.__annotations__)


class Move(TypedDict, total=False):
    """A launcher's move from one rung of the capacity ladder to another (issue 44)."""

    # When, on which platform, and the job (Vertex) or JobSet (GKE) it left.
    at: float
    platform: str
    left: str
    # The rungs (``spottrain.ladder.Rung`` as written) and their capacity kinds.
    from_rung: str
    to_rung: str
    from_capacity: str
    to_capacity: str
    # Why, the deadline it was made for, and the forecast on the rung moved to.
    reason: str
    # Which of the decision's rules made it (``spottrain.ladder.decide.RULES``).
    rule: str
    finish_by: float | None
    forecast_finish: float | None
    forecast_cost: float | None


class LadderPlan(TypedDict, total=False):
    """The ladder a launcher walks and the deadline it walks it for."""

    rungs: list[str]
    finish_by: float | None
    # The deadline as asked (a duration counts from the first launcher that read it).
    asked: str
    set_at: float


# What the ledger file holds beside its records and their totals: the run's ladder
# ("ladder", a LadderPlan) and its moves ("moves", a list of Move), written by launchers.
RUN_KEYS = ("ladder", "moves")
# The outcomes (exits.EXIT_CODES' words, and the ledger's own for an attempt it closes)
# of an attempt the platform or a fault ended, and of those a preemption.
PREEMPTED_OUTCOMES = ("preempted", "preempted_unsaved")
INTERRUPTED_OUTCOMES = (*PREEMPTED_OUTCOMES, "killed", "worker_lost", "hang")

# The fields the engine computes with: checked on every read (a number may be null,
# e.g. a killed attempt's exit code, or a figure not known).
COMPUTED = """started ended updated resumed_at first_step_at notice_at moved_at seconds attempt
    workers start_step last_step saved_step notice_step steps_lost exit_code spent saved lost
    move_cost move_seconds price_per_hour on_demand_price_per_hour id outcome capacity currency
    node_kind message prices_given seconds_per_step""".split()
_NUMBER = (int, float)


def _kinds(hint: Any) -> tuple[type, ...]:
    """The JSON types a field of ``hint`` may be read back as."""
    if hint in (int, float) or typing.get_args(hint)[:1] == (int,):
        return (*_NUMBER, type(None))
    return (typing.get_origin(hint) or hint,)


# A move's cancel (Vertex: at once; GKE: at the launcher's next look) reaches the trainer
# of the attempt it left as a notice within MOVE_WINDOW_S of the move, and the launcher's
# and the trainer's clocks may differ by MOVE_SKEW_S.
MOVE_WINDOW_S = 900.0
MOVE_SKEW_S = 5.0


def capacity(rec: Record) -> str:
    """What an attempt ran on, as the ledger knows it."""
    return str(rec.get("node_kind") or rec.get("capacity") or "unknown")


def moved(rec: Record) -> bool:
    """Whether a ladder move of its launcher ended the attempt (not the platform)."""
    return rec.get("moved_at") is not None


def preempted(rec: Record) -> bool:
    """Whether a preemption ended the attempt: a notice that was not its own run's move."""
    return rec.get("outcome") in PREEMPTED_OUTCOMES and not moved(rec)


def interrupted(rec: Record) -> bool:
    """Whether the platform or a fault ended the attempt (a move is neither)."""
    return rec.get("outcome") in INTERRUPTED_OUTCOMES and not moved(rec)


def mark_moves(records: list[Record], moves: list[Move]) -> None:
    """Sets ``moved_at`` on each record a move ended, and only on those (in place).

    A move is written before its launcher cancels the job (Vertex) or deletes the gang
    (GKE) it leaves, so the trainer's notice (else its end, for one killed before it
    wrote the notice) comes after the move's ``at``, within ``MOVE_WINDOW_S``; a
    preemption that ended the attempt before the move (the launcher then moved on
    seeing the job end) is earlier and stays a preemption. The record is the one that
    was running when the move was made (the latest started before it); a record that
    knows its JobSet (``gang``) must be of the one the move left.
    """
    ended_by: dict[int, float] = {}
    for move in moves:
        at = move.get("at")
        if not isinstance(at, int | float) or isinstance(at, bool):
            continue
        running = [
            i for i, r in enumerate(records) if r.get("started") is not None and r["started"] <= at
        ]
        if not running:
            continue
        i = max(running, key=lambda i: records[i]["started"])
        rec = records[i]
        end = rec.get("notice_at") or rec.get("ended")
        gang = str(rec.get("gang") or "")
        left = str(move.get("left") or "")
        if gang and left and move.get("platform") == "gke" and gang.split("/")[0] != left:
            continue
        if (
            rec.get("outcome") in INTERRUPTED_OUTCOMES
            and isinstance(end, int | float)
            and at - MOVE_SKEW_S <= end <= at + MOVE_WINDOW_S
        ):
            ended_by[i] = at
    for i, rec in enumerate(records):
        if i in ended_by:
            rec["moved_at"] = ended_by[i]
        else:
            rec.pop("moved_at", None)


def trained_again(rec: Record) -> float | None:
    """When an attempt trained again, ``None`` when it never got that far.

    Its first step done (``first_step_at``), which is after the restore (``resumed_at``)
    by the input's fast-forward to its start step and the step's first trace;
    ``resumed_at`` for a record written before the field was.
    """
    return rec.get("first_step_at") or rec.get("resumed_at")


FIELD_TYPES = {f: _kinds(h) for f, h in typing.get_type_hints(Record).items() if f in COMPUTED}


def undeclared(records: list[dict]) -> list[str]:
    """The fields of ``records`` that :class:`Record` does not declare (tests keep it none)."""
    return sorted({k for rec in records for k in rec} - set(FIELDS))


def problem(data: object) -> str | None:
    """Why parsed ledger JSON ``data`` is not a ledger; ``None`` when it is one.

    ``None`` (no file) is a ledger with no records.
    """
    if data is None:
        return None
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    records = data.get("attempts", [])
    if not isinstance(records, list):
        return f'"attempts" is a {type(records).__name__}, not a list'
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            return f"record {i + 1} is a {type(rec).__name__}, not an object"
        # Every writer sets it; closing a silent attempt and its cost count from it.
        if not isinstance(rec.get("started"), _NUMBER):
            return f'record {i + 1} has no number "started"'
        for field, kinds in FIELD_TYPES.items():
            if field in rec and not isinstance(rec[field], kinds):
                return f"record {i + 1}'s {field!r} is {rec[field]!r}"
    return None


def run_keys(data: object) -> dict:
    """The run's own keys of parsed ledger JSON ``data`` (``RUN_KEYS``) that are well formed."""
    if problem(data) is not None or not data:
        return {}
    out = {}
    if isinstance(data.get("ladder"), dict):
        out["ladder"] = data["ladder"]
    moves = data.get("moves")
    if isinstance(moves, list) and all(isinstance(m, dict) for m in moves):
        out["moves"] = moves
    return out


def records(data: object) -> list[dict]:
    """The records of parsed ledger JSON ``data``; none when it is not a ledger."""
    if problem(data) is not None:
        return []
    return list((data or {}).get("attempts", []))


def set_aside(checkpoint_dir: str, path: str, why: str) -> str | None:
    """Moves an unreadable ledger aside (a crash mid-write) instead of overwriting it.

    Returns:
        Where it went, or ``None`` when it could not be moved.
    """
    try:
        moved = fileio.quarantine(checkpoint_dir, path, f".{int(time.time())}")
    except Exception as e:  # noqa: BLE001 - the ledger must never stop training
        log.warning("could not move the unreadable ledger %s aside: %s", path, e)
        return None
    log.warning("the attempt ledger was unreadable (%s): moved to %s, a new one starts", why, moved)
    return moved
