"""The deadline's word on the JobSet launcher's move (issue 44): is a move due now?

The launcher's rule (:mod:`.decide`) stays pure: each look, the launcher asks this
check, which reads the ledger (at most every ``look_every_s``), forecasts the two
gangs as a two-rung ladder (the spot gang, then the on-demand one it may move to)
and returns :func:`spottrain.ladder.decide.decide`'s reason when that says move,
else ``""``. The capacity patience stays the launcher's own rule (``_capacity``),
so the ladder's spot rung waits for ever here: only the deadline moves it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spottrain import ledger
from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import MARGIN_MIN_S, MOVE, decide
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


@dataclass
class DeadlineCheck:
    """Whether the run must move to finish by ``finish_by`` (epoch seconds)."""

    checkpoint_dir: str
    train_steps: int
    finish_by: float
    save_every_s: float = 60.0
    look_every_s: float = 60.0
    margin_s: float = MARGIN_MIN_S
    prior: Prior = field(default_factory=Prior)
    clock: Callable[[], float] = time.time
    _due: float = 0.0
    _said: str = ""

    def __call__(self, sets: Sequence[WorkerSet], current: int) -> str:
        """The reason to move from gang ``current`` to the next, or ``""``."""
        if current + 1 >= len(sets):
            return ""
        now = self.clock()
        if now < self._due:
            return self._said
        self._due = now + self.look_every_s
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
        if not measured.step_s and self.prior.step_s is None:
            # Nothing to forecast from: on GKE a move is for good (no way back to the
            # spot gang yet), so the deadline is judged once a step time is measured.
            return ""
        ladder = Ladder((rung_of(sets[current]), rung_of(sets[current + 1])))
        d = decide(ladder, 0, measured, now=now, finish_by=self.finish_by,
                   look_every_s=self.look_every_s, prior=self.prior,
                   margin_s=self.margin_s)  # fmt: skip
        self._said = d.reason if d.kind == MOVE else ""
        return self._said
