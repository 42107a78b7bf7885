"""Whether an attempt ledger read back from storage is one the engine can use.

The ledger is plain JSON in a bucket: anyone (a hand edit, another tool, an older
bug) can leave valid JSON of another shape there. The code that merges and closes
records does arithmetic on their fields, so a wrong shape is found here, once, and
treated as unreadable: ``Ledger.begin`` moves it to quarantine/ (:func:`set_aside`),
as it does a file that is not JSON, instead of an AttributeError on every retry.
"""

from __future__ import annotations

import logging
import time

from spottrain.trainer import checkpointing

log = logging.getLogger(__name__)

_NUMBER = (int, float)
# The record fields the engine computes with, and the types it can compute with
# (None: written as null, e.g. a killed attempt's exit code).
_FIELDS = {
    (*_NUMBER, type(None)): """started ended updated resumed_at notice_at seconds attempt
        workers start_step last_step saved_step notice_step steps_lost exit_code spent
        saved lost price_per_hour on_demand_price_per_hour""",
    (str,): "id outcome capacity currency node_kind message",
    (dict,): "prices_given",
}
FIELD_TYPES = {field: kinds for kinds, names in _FIELDS.items() for field in names.split()}


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
        moved = checkpointing.quarantine(checkpoint_dir, path, f".{int(time.time())}")
    except Exception as e:  # noqa: BLE001 - the ledger must never stop training
        log.warning("could not move the unreadable ledger %s aside: %s", path, e)
        return None
    log.warning("the attempt ledger was unreadable (%s): moved to %s, a new one starts", why, moved)
    return moved
