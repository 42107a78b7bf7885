"""The deadline's word on the JobSet launcher's moves (issues 44, 56): is a move due now?

The launcher's rule (:mod:`.decide`) stays pure: each look, the launcher asks this
check, which reads the ledger (at most every ``look_every_s``), forecasts the two
gangs as a two-rung ladder (the spot gang, then the on-demand one) and returns
:func:`spottrain.ladder.decide.decide`'s reason and the rung it moves to when that
says move. On the spot gang that is a move to on-demand (rule 1, the safety net); on
the on-demand gang, back to spot (rule 3, the run ahead of its deadline). The
capacity patience stays the launcher's own rule (``_capacity``), so the ladder's
spot rung waits for ever here: only the deadline moves it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from spottrain import ledger
from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import MOVE, decide
from spottrain.ladder.forecast import Measured, Prior
from spottrain.ledger import attempt_cost, moves
from spottrain.runtime.train_job.jobset import WorkerSet

log = logging.getLogger(__name__)


def rung_of(ws: WorkerSet) -> Rung:
    """A gang as a ladder rung: its capacity kind, GPUs and workers (GKE picks the machine)."""
    spot = ws.placement.pool in attempt_cost.SPOT_KINDS
    gpus = ws.placement.gpu_count
    gpu = ws.placement.gpu_type if gpus else ""
    return Rung("spot" if spot else "on-demand", "", gpu, gpus, ws.workers, patience_s=math.inf)


class Due(NamedTuple):
    """A move the deadline needs (or allows): why, and to which gang's kind (its index)."""

    reason: str = ""
    to: int | None = None


NOT_DUE = Due()


@dataclass
class DeadlineCheck:
    """Whether the run must move to finish by ``finish_by`` (epoch seconds)."""

    checkpoint_dir: str
    train_steps: int
    finish_by: float
    save_every_s: float = 60.0
    look_every_s: float = 60.0
    margin_s: float | None = None  # None: sized by the restart (decide.held_in_hand)
    prior: Prior = field(default_factory=Prior)
    clock: Callable[[], float] = time.time
    _due: float = 0.0
    _said: Due = NOT_DUE
    _at: int | None = None

    def __call__(
        self, sets: Sequence[WorkerSet], current: int, *, running: bool = True,
        waited_s: float = 0.0,
    ) -> Due:  # fmt: skip
        """The move due from a gang of ``sets[current]``'s kind, else :data:`NOT_DUE`.

        Args:
            sets: The spot gang and the on-demand one (the ladder's two rungs).
            current: The kind the run is on now: 0 spot, 1 on-demand.
            running: Whether the gang trains now (``False``: it waits for capacity or
                its restart, so staying costs a restart too).
            waited_s: How long the gang's pods have been Unschedulable (0: they are not).
        """
        if len(sets) < 2 or current not in (0, 1):
            return NOT_DUE
        now = self.clock()
        if now < self._due and current == self._at:
            return self._said
        if current != self._at:
            self._said = NOT_DUE  # the last answer was for the other gang
        self._due, self._at = now + self.look_every_s, current
        try:
            records = ledger.read(self.checkpoint_dir)
        except Exception as err:  # noqa: BLE001 - an unread ledger is no reason to move
            log.warning("the ledger in %s was not read (%s): no deadline move this look",
                        self.checkpoint_dir, err)  # fmt: skip
            return self._said
        try:
            _, walked = moves.read(self.checkpoint_dir)
        except Exception:  # noqa: BLE001 - the moves only pace returns to spot
            walked = []
        # No record yet (a gang that never started): the deadline binds all the same, from
        # the prior's step time.
        measured = Measured.from_ledger(records, self.train_steps, self.save_every_s,
                                        now=now, moves=walked)  # fmt: skip
        ladder = Ladder((rung_of(sets[0]), rung_of(sets[1])))
        d = decide(ladder, current, measured, now=now, finish_by=self.finish_by,
                   look_every_s=self.look_every_s, waited_s=waited_s, running=running,
                   prior=self.prior, margin_s=self.margin_s)  # fmt: skip
        self._said = Due(d.reason, d.to) if d.kind == MOVE and d.to != current else NOT_DUE
        return self._said
