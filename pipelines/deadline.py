"""The deadline and the capacity ladder of a Vertex run, checked at submit.

A bad ``finish_by`` or ``ladder`` is one line and exit 64 here rather than a failed
train task later; a duration (``finish_by=6h``) becomes the time it ends, so it
counts from the submit, not from whenever the task starts; and a deadline that
even the fastest rung cannot meet at the speed this checkpoint dir's ledger
measured (or, before any, at the ``prior_step_seconds`` given) is said in one line (the
run still goes: it trains on the fastest rung).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from spottrain.ladder import Ladder, LadderError, Rung
from spottrain.ladder.decide import finish_by_epoch, unreachable
from spottrain.ladder.forecast import Measured, Prior
from spottrain.pipelines import templates

log = logging.getLogger(__name__)


def _ladder(spec: Mapping, text: str) -> Ladder:
    """The ladder ``text`` writes over the template's job shape (empty: spot, then standard)."""
    from spottrain.runtime.vertex_ladder import defaults_of, walked_ladder

    jobs = templates.custom_jobs(spec)
    return walked_ladder(defaults_of({"job_spec": jobs[0]}) if jobs else Rung("spot"), text)


def check(spec: Mapping, params: dict[str, Any], now: float | None = None) -> list[str]:
    """Checks the deadline's parameters in ``params``; a duration is made a time there.

    ``finish_by``, ``ladder`` and ``prior_step_seconds``.

    Returns:
        The lines to say (the deadline's time; one that cannot be met).

    Raises:
        LadderError: a bad deadline, ladder or estimate (one line, exit 64).
    """
    text, rungs = str(params.get("finish_by") or ""), str(params.get("ladder") or "")
    estimate = _estimate(params)
    if not (text or rungs):
        return []
    now = time.time() if now is None else now
    ladder = _ladder(spec, rungs)
    finish_by = finish_by_epoch(text, now)
    lines = []
    if finish_by is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finish_by))
        if when != text:
            params["finish_by"] = when
            lines.append(f"finish_by={text!r}: the run is to finish by {when}")
        prior = Prior(step_s=estimate)
        measured = _measured(spec, params)
        if late := unreachable(ladder, measured, now=now, finish_by=finish_by, prior=prior):
            lines.append(late)
    return lines


def _measured(spec: Mapping, params: Mapping[str, Any]) -> Measured | None:
    """What the checkpoint dir's ledger measured (``None``: nothing, or unreadable)."""
    from spottrain import ledger

    where = templates.checkpoint_dir_value(spec, params)
    steps = templates.train_task_inputs(spec, params).get("train_steps")
    try:
        records = ledger.read(where) if where else []
    except Exception as e:  # noqa: BLE001 - the forecast is a courtesy; submit goes on
        log.info("the ledger in %s was not read (%s): the deadline is judged later", where, e)
        return None
    if not steps:
        return None
    # No record yet (a new run): nothing measured, and the estimate, if any, stands in.
    return Measured.from_ledger(records, int(steps), save_every_s=60.0)


def _estimate(params: Mapping[str, Any]) -> float | None:
    """The ``prior_step_seconds`` parameter (``None``: not given).

    Raises:
        LadderError: not a number of seconds above 0 (one line, exit 64).
    """
    text = str(params.get("prior_step_seconds") or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise LadderError(f"prior_step_seconds={text!r}: expected seconds per step above 0")
    return value


__all__ = ["LadderError", "check"]
